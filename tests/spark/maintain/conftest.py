"""A SQLite catalog over a temp warehouse, and keyed tables grown by many small commits."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import LongType, NestedField, StringType

from spark.tables.catalog import KEY_COLUMNS
from spark.tables import internals
from spark.write.target import TableTarget

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "name", StringType(), required=False))


@pytest.fixture
def catalog(tmp_path) -> SqlCatalog:
    cat = SqlCatalog("test", uri=f"sqlite:///{tmp_path / 'catalog.db'}", warehouse=(tmp_path / "warehouse").as_uri())
    cat.create_namespace("ns")
    return cat


def rows(ids, tag: str = "v0") -> pa.Table:
    ids = list(ids)
    return pa.table({"id": pa.array(ids, pa.int64()), "name": [f"{tag}-{i}" for i in ids]})


def upsert(table: Table, new: pa.Table, merge_on_read: bool = False) -> int:
    """A run in miniature: drop the keys from the files holding them (rewrite them, or position
    deletes with ``merge_on_read``), add the new rows (one snapshot)."""
    from spark.tables.files import LiveFiles, live_files, plan_rewrite
    from spark.write.rewrite import delete_keys, rewrite_file, write_rows

    target = TableTarget.of(table)
    head = table.current_snapshot()
    plan = plan_rewrite(table.metadata, table.io, ["id"], new.select(["id"]))
    live = live_files(table.io, head) if head else LiveFiles((), {})
    removed, added, deletes_added, deletes_removed = [], [], [], []
    for f in plan.candidates:
        drop = delete_keys if merge_on_read else rewrite_file
        out = drop(target, f, ["id"], new.select(["id"]), deletes=live.deletes_of(f))
        if out.removed is not None:
            removed.append(out.removed)
            added.extend(out.added)
        deletes_added.extend(out.deletes_added)
        deletes_removed.extend(out.deletes_removed)
    added.extend(write_rows(target, new, ["id"]))
    snapshot_id = internals.commit_overwrite(table, expected_snapshot_id=head.snapshot_id if head else None,
                                             removed=removed, added=added, deletes_added=deletes_added,
                                             deletes_removed=deletes_removed)
    table.refresh()
    return snapshot_id


def keyed_table(catalog: SqlCatalog, name: str = "t", spec: PartitionSpec = UNPARTITIONED_PARTITION_SPEC,
                runs: int = 12, per_run: int = 20, merge_on_read: bool = False) -> Table:
    """A keyed table after ``runs`` small upserts (new keys and updates of old ones), tagged ``r<i>`` after each."""
    table = catalog.create_table(f"ns.{name}", schema=SCHEMA, partition_spec=spec,
                                 properties={KEY_COLUMNS: json.dumps(["id"])})
    for i in range(runs):
        ids = list(range(i * per_run, (i + 1) * per_run)) + list(range(i, i * per_run, 7))[:5]
        upsert(table, rows(ids, f"v{i}"), merge_on_read)
        table.manage_snapshots().create_tag(table.current_snapshot().snapshot_id, f"r{i}").commit()
    return table


def read_at(table: Table, snapshot_id: int) -> list[dict]:
    return sorted(table.scan(snapshot_id=snapshot_id).to_arrow().to_pylist(), key=lambda r: r["id"])


def all_referenced(table: Table) -> set[str]:
    """Every file any snapshot of ``table`` references (manifest lists, manifests, data files)."""
    out: set[str] = set()
    for snapshot in table.metadata.snapshots:
        out.add(snapshot.manifest_list)
        for m in snapshot.manifests(table.io):
            out.add(m.manifest_path)
            out.update(e.data_file.file_path for e in m.fetch_manifest_entry(table.io, discard_deleted=False))
    return out
