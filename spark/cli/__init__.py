"""The ``tidelake`` command: ``main`` parses and dispatches (run, backfill, watermarks, tables, query, repair,
maintain, decode, demo); ``interval`` lands and applies an interval in process or on Spark; ``report`` prints
what a run did. Nothing here decides anything about the data: each command calls one library function."""
