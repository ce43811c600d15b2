"""Reading: every table of a pipeline at one published watermark W, through DuckDB (``read``, SQL in
``sql``), and the change feed between two of them (``changes``, its parts in ``changes_*``)."""
