"""Upstream tables as Iceberg tables: the catalog, the schema mapping, DDL and partitions.

``catalog`` names and loads the pipeline's Iceberg tables; ``schema_map`` is the one MySQL ->
Iceberg/Arrow type mapping; ``ddl`` turns an upstream DDL statement into the changes it makes to a
table (``ddl_changes``), reading its PARTITION clauses in ``ddl_partitions`` and its tokens in
``ddl_tokens``; ``ddl_defaults`` is an added column's DEFAULT and the value the existing rows get;
``partitioning`` reads MySQL/TiDB partition definitions for TRUNCATE / DROP PARTITION.
"""
