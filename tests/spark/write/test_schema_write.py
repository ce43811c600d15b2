"""``writing_with_schema`` (spark/tables/internals.py): fails first when a pyiceberg upgrade changes what it relies on."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyiceberg
import pytest
from pyiceberg.schema import Schema
from pyiceberg.table.update.snapshot import ManageSnapshots
from pyiceberg.types import LongType, NestedField, StringType

from spark.tables import catalog as cat
from spark.tables.errors import InternalsChanged
from spark.tables.internals import writing_with_schema

from tests.spark.archives import make_config


def test_the_wrapped_pyiceberg_is_the_one_it_was_checked_against() -> None:
    # An upgrade must re-check writing_with_schema (and its test below) before moving this pin.
    assert pyiceberg.__version__ == "0.12.0"


def test_a_snapshot_written_with_an_older_schema_reads_with_it_and_the_current_schema_stays(tmp_path: Path) -> None:
    config = make_config(tmp_path, "simple")
    catalog = cat.open_catalog(config)
    table = catalog.create_table((config.namespace, "t"), Schema(NestedField(1, "id", LongType(), required=False)))
    table.append(pa.Table.from_pylist([{"id": 1}], schema=table.schema().as_arrow()))
    old_schema_id = table.metadata.current_schema_id
    with table.update_schema() as u:
        u.add_column(("note",), StringType())
    table = catalog.load_table((config.namespace, "t"))
    current = table.metadata.current_schema_id

    tx = table.transaction()
    ManageSnapshots(tx).create_branch(table.current_snapshot().snapshot_id, "side").commit()
    with writing_with_schema(tx, old_schema_id):
        tx.append(pa.Table.from_pylist([{"id": 2}], schema=tx.table_metadata.schema().as_arrow()), branch="side")
    tx.commit_transaction()

    table = catalog.load_table((config.namespace, "t"))
    written = table.snapshot_by_name("side")
    assert written.schema_id == old_schema_id
    assert table.metadata.current_schema_id == current and "note" in table.schema().column_names
    rows = table.scan(snapshot_id=written.snapshot_id).to_arrow()
    assert rows.column_names == ["id"] and sorted(rows.column("id").to_pylist()) == [1, 2]
    with pytest.raises(InternalsChanged, match="no schema 99"):
        with writing_with_schema(table.transaction(), 99):
            pass
