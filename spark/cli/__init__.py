"""The ``tidelake`` command (``main``): run, backfill, watermarks, tables, query, repair, maintain, decode, demo."""
