"""The ``tidelake`` command: ``main`` parses and dispatches (run, backfill, watermarks, tables, query, repair,
maintain, decode, demo), an interval landed and applied through ``spark.jobs.interval``; ``progress``
draws the long steps' progress bars, ``changes`` writes the change feed, ``engines`` prints an engine's
connection recipe; what a run did is printed from ``spark.commit.report``. Nothing here decides
anything about the data: each command calls one library function."""
