"""The rewrite's tests use the tables' embedded catalog and tables made from Arrow rows."""

from tests.spark.tables.conftest import catalog, table_with_files  # noqa: F401  (a fixture and a helper)
