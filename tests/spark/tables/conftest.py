"""An embedded SQLite catalog over a temp warehouse, and tables made from Arrow rows."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table

from spark.tables import internals
from spark.write.target import TableTarget


@pytest.fixture
def catalog(tmp_path) -> SqlCatalog:
    cat = SqlCatalog("test", uri=f"sqlite:///{tmp_path / 'catalog.db'}", warehouse=(tmp_path / "warehouse").as_uri())
    cat.create_namespace("ns")
    return cat


def table_with_files(catalog: SqlCatalog, name: str, schema: Schema, batches: list[pa.Table],
                     spec: PartitionSpec = UNPARTITIONED_PARTITION_SPEC) -> Table:
    """A table whose first snapshot holds one data file per batch (more if a batch spans partitions)."""
    table = catalog.create_table(f"ns.{name}", schema=schema, partition_spec=spec)
    target = TableTarget.of(table)
    files = [f for batch in batches for f in internals.write_data_files(target.io(), target.metadata(), batch.cast(schema.as_arrow()))]
    internals.commit_overwrite(table, expected_snapshot_id=None, removed=[], added=files)
    return catalog.load_table(f"ns.{name}")
