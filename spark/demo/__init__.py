"""The first run: a generated TiDB-like upstream (``workload``) through the whole pipeline (``run``, ``tidelake demo``)."""
