"""Reading: every table of a pipeline at one published watermark W, through DuckDB (``read``)."""
