"""Executor rewrite + one driver commit == pyiceberg's own delete + append, scan for scan."""

from __future__ import annotations

import functools
import pickle
import warnings

import pyarrow as pa
import pytest
from pyiceberg.expressions import And, EqualTo, IsNull, Or
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import BucketTransform
from pyiceberg.types import IntegerType, LongType, NestedField, StringType

from spark.tables import files, internals
from spark.write.rewrite import RowsDoNotFitTable, delete_keys, rewrite_file, write_rows
from spark.write.target import TableTarget
from tests.spark.tables.conftest import table_with_files

pytestmark = pytest.mark.slow  # whole intervals, Spark or services: make test-fast leaves it out (docs/testing.md)

KEYED = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "v", StringType(), required=False))
COMPOSITE = Schema(NestedField(1, "a", StringType(), required=False), NestedField(2, "b", IntegerType(), required=False),
                   NestedField(3, "v", StringType(), required=False))


def over_the_wire(*args):
    """What a Spark task receives: pickled and unpickled arguments."""
    return pickle.loads(pickle.dumps(args))


def apply_on_executors(table, keys, touched: pa.Table, upserts: pa.Table, route_upserts: bool = False,
                       merge_on_read: bool = False) -> None:
    target = TableTarget.of(table)
    plan = files.plan_rewrite(table.metadata, table.io, keys, touched)
    live = files.live_files(table.io, table.current_snapshot()) if table.current_snapshot() else files.LiveFiles((), {})
    rewrites = []
    for i, data_file in enumerate(plan.candidates):
        if merge_on_read:
            result = delete_keys(*over_the_wire(target, data_file, keys, touched, live.deletes_of(data_file)))
        else:
            # route_upserts: the new rows go into the first rewritten file instead of files of their own
            extra = upserts if route_upserts and i == 0 else None
            result = rewrite_file(*over_the_wire(target, data_file, keys, touched, extra, live.deletes_of(data_file)))
        rewrites.append(pickle.loads(pickle.dumps(result)))
    added = [f for r in rewrites for f in r.added]
    if not (route_upserts and plan.candidates and not merge_on_read):
        added += write_rows(*over_the_wire(target, upserts, keys))
    internals.commit_overwrite(table, expected_snapshot_id=plan.snapshot_id, removed=[r.removed for r in rewrites if r.removed],
                               added=added, snapshot_properties={"tidelake.watermark": "9"},
                               deletes_added=[d for r in rewrites for d in r.deletes_added],
                               deletes_removed=[d for r in rewrites for d in r.deletes_removed])


def key_filter(keys, values):
    """pyiceberg's own predicate for "the key is one of values" (the reference for the rewrite)."""
    terms = [functools.reduce(And, [IsNull(k) if x is None else EqualTo(k, x) for k, x in zip(keys, v)]) if len(keys) > 1
             else (IsNull(keys[0]) if v[0] is None else EqualTo(keys[0], v[0])) for v in values]
    return functools.reduce(Or, terms)


def apply_with_pyiceberg(table, keys, touched: pa.Table, upserts: pa.Table) -> None:
    with table.transaction() as tx, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        values = [tuple(row[k] for k in keys) for row in touched.to_pylist()]
        if values:
            tx.delete(key_filter(tuple(keys), values))
        if upserts.num_rows:
            tx.append(upserts.cast(tx.table_metadata.schema().as_arrow()))


def rows_of(table) -> list:
    return sorted(table.scan().to_arrow().to_pylist(), key=repr)


def check_same(catalog, schema, batches, keys, touched, upserts, route_upserts=False, spec=UNPARTITIONED_PARTITION_SPEC,
               merge_on_read=False):
    ours = table_with_files(catalog, "ours", schema, batches, spec)
    theirs = table_with_files(catalog, "theirs", schema, batches, spec)
    apply_on_executors(ours, keys, touched, upserts, route_upserts, merge_on_read)
    apply_with_pyiceberg(theirs, keys, touched, upserts)
    ours, theirs = catalog.load_table("ns.ours"), catalog.load_table("ns.theirs")
    assert rows_of(ours) == rows_of(theirs)
    return ours


def keyed(ids, tag="old"):
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"{tag}{i}" for i in ids]})


BATCHES = [keyed(range(i * 50, i * 50 + 50)) for i in range(6)]


@pytest.mark.parametrize("route_upserts", [False, True])
def test_inserts_updates_and_deletes(catalog, route_upserts):
    updates, inserts, deletes = [3, 70, 299], [1000, 1001], [5, 120, 121, 250]
    touched = pa.table({"id": pa.array(updates + inserts + deletes, pa.int64())})
    ours = check_same(catalog, KEYED, BATCHES, ["id"], touched, keyed(updates + inserts, "new"), route_upserts)
    assert ours.current_snapshot().summary["tidelake.watermark"] == "9"
    assert ours.current_snapshot().summary["deleted-data-files"] == "4"  # files 0, 1, 2 and 5 held touched keys


def test_merge_on_read_leaves_the_data_files_and_keeps_one_delete_file_per_touched_file(catalog):
    updates, inserts, deletes = [3, 70, 299], [1000, 1001], [5, 120, 121, 250]
    touched = pa.table({"id": pa.array(updates + inserts + deletes, pa.int64())})
    ours = check_same(catalog, KEYED, BATCHES, ["id"], touched, keyed(updates + inserts, "new"), merge_on_read=True)
    summary = ours.current_snapshot().summary
    assert "deleted-data-files" not in summary.additional_properties
    assert (summary["added-delete-files"], summary["added-position-deletes"], summary["total-position-deletes"]) == ("4", "7", "7")
    live = files.live_files(ours.io, ours.current_snapshot())
    assert len(live.data) == len(BATCHES) + 1 and sorted(len(d) for d in live.deletes.values()) == [1, 1, 1, 1]
    # A later batch touching the same keys again (and ones already deleted) deletes each live row once.
    again = pa.table({"id": pa.array([3, 5, 70, 1000, 6], pa.int64())})
    apply_on_executors(ours, ["id"], again, keyed([3, 1000], "newer"), merge_on_read=True)
    ours = catalog.load_table("ns.ours")
    expected = {r["id"]: r["v"] for r in keyed(range(300)).to_pylist() if r["id"] not in {70, 299, 5, 6, 120, 121, 250}}
    expected.update({3: "newer3", 299: "new299", 1000: "newer1000", 1001: "new1001"})
    assert {r["id"]: r["v"] for r in rows_of(ours)} == expected
    live = files.live_files(ours.io, ours.current_snapshot())
    positions = [internals.deleted_positions(ours.io, f, live.deletes_of(f)) for f in live.data]
    assert sum(len(p) for p in positions) == int(ours.current_snapshot().summary["total-position-deletes"]) == 11
    # One delete file per data file, rewritten whole (a deletion vector): the file touched twice has one.
    assert all(len(ds) == 1 for ds in live.deletes.values()) and len(live.delete_files) == 5
    assert int(ours.current_snapshot().summary["total-delete-files"]) == 5


def test_copy_on_write_of_a_file_with_deletes_applies_them_and_removes_them(catalog):
    touched = pa.table({"id": pa.array([3, 4], pa.int64())})
    ours = check_same(catalog, KEYED, BATCHES, ["id"], touched, keyed([]), merge_on_read=True)
    apply_on_executors(ours, ["id"], pa.table({"id": pa.array([10], pa.int64())}), keyed([10], "new"))
    ours = catalog.load_table("ns.ours")
    assert not files.live_files(ours.io, ours.current_snapshot()).deletes
    assert ours.current_snapshot().summary["total-delete-files"] == "0"
    assert {r["id"]: r["v"] for r in rows_of(ours)} == {**{i: f"old{i}" for i in range(300) if i not in (3, 4)}, 10: "new10"}


@pytest.mark.parametrize("merge_on_read", [False, True])
def test_both_write_modes_on_every_key_shape(catalog, merge_on_read):
    spec = PartitionSpec(PartitionField(source_id=1, field_id=1000, transform=BucketTransform(8), name="b"))
    touched = pa.table({"id": pa.array([3, 70, 299, 1000], pa.int64())})
    check_same(catalog, KEYED, BATCHES, ["id"], touched, keyed([3, 1000], "new"), spec=spec, merge_on_read=merge_on_read)
    for name in ("ours", "theirs"):
        catalog.drop_table(f"ns.{name}")
    batches = [pa.table({"a": ["x", "x", "y", None], "b": pa.array([1, 2, 1, 1], pa.int32()), "v": list("pqrs")}),
               pa.table({"a": ["y", "z"], "b": pa.array([2, None], pa.int32()), "v": list("tu")})]
    touched = pa.table({"a": ["x", "y", None, "z", "w"], "b": pa.array([2, 2, 1, None, 9], pa.int32())})
    upserts = pa.table({"a": ["x", "w"], "b": pa.array([2, 9], pa.int32()), "v": ["X2", "W9"]})
    check_same(catalog, COMPOSITE, batches, ["a", "b"], touched, upserts, merge_on_read=merge_on_read)
    for name in ("ours", "theirs"):
        catalog.drop_table(f"ns.{name}")
    check_same(catalog, KEYED, BATCHES, ["id"], pa.table({"id": pa.array(range(300), pa.int64())}), keyed([]),
               merge_on_read=merge_on_read)


def test_a_bucketed_table_rewrites_only_the_touched_buckets(catalog):
    spec = PartitionSpec(PartitionField(source_id=1, field_id=1000, transform=BucketTransform(8), name="b"))
    touched = pa.table({"id": pa.array([3, 70, 299, 1000], pa.int64())})
    ours = check_same(catalog, KEYED, BATCHES, ["id"], touched, keyed([3, 1000], "new"), spec=spec)
    assert int(ours.current_snapshot().summary["deleted-data-files"]) <= 3 * len(BATCHES)  # of 8 x 6 files


def test_only_inserts_rewrite_no_file(catalog):
    ours = check_same(catalog, KEYED, BATCHES, ["id"], pa.table({"id": pa.array([5000], pa.int64())}), keyed([5000], "new"))
    assert "deleted-data-files" not in ours.current_snapshot().summary.additional_properties


def test_composite_keys(catalog):
    batches = [pa.table({"a": ["x", "x", "y", None], "b": pa.array([1, 2, 1, 1], pa.int32()), "v": list("pqrs")}),
               pa.table({"a": ["y", "z"], "b": pa.array([2, None], pa.int32()), "v": list("tu")})]
    touched = pa.table({"a": ["x", "y", None, "z", "w"], "b": pa.array([2, 2, 1, None, 9], pa.int32())})
    upserts = pa.table({"a": ["x", "w"], "b": pa.array([2, 9], pa.int32()), "v": ["X2", "W9"]})
    check_same(catalog, COMPOSITE, batches, ["a", "b"], touched, upserts)


def test_whole_row_keys_with_nulls_in_a_keyless_table(catalog):
    schema = Schema(NestedField(1, "x", LongType(), required=False), NestedField(2, "y", StringType(), required=False))
    batches = [pa.table({"x": pa.array([1, 1, None, 2], pa.int64()), "y": ["a", "a", "b", None]}),
               pa.table({"x": pa.array([None, 3], pa.int64()), "y": pa.array([None, "c"], pa.string())})]
    touched = pa.table({"x": pa.array([1, None, None], pa.int64()), "y": ["a", "b", None]})
    upserts = pa.table({"x": pa.array([None], pa.int64()), "y": ["b"]})  # the row updated to itself stays once
    ours = check_same(catalog, schema, batches, ["x", "y"], touched, upserts)
    assert rows_of(ours) == sorted([{"x": 2, "y": None}, {"x": 3, "y": "c"}, {"x": None, "y": "b"}], key=repr)


def test_deleting_every_row_empties_the_table(catalog):
    touched = pa.table({"id": pa.array(range(300), pa.int64())})
    ours = check_same(catalog, KEYED, BATCHES, ["id"], touched, keyed([]))
    assert rows_of(ours) == [] and list(ours.scan().plan_files()) == []


def test_a_file_without_touched_keys_is_left_alone(catalog):
    table = table_with_files(catalog, "t", KEYED, BATCHES[:1])
    [data_file] = [t.file for t in table.scan().plan_files()]
    result = rewrite_file(TableTarget.of(table), data_file, ["id"], pa.table({"id": pa.array([999], pa.int64())}))
    assert (result.removed, result.added, result.rows_kept, result.rows_dropped) == (None, (), 50, 0)
    dropped = rewrite_file(TableTarget.of(table), data_file, ["id"], pa.table({"id": pa.array([1, 2], pa.int64())}))
    assert dropped.removed == data_file and dropped.rows_dropped == 2 and sum(f.record_count for f in dropped.added) == 48


def test_new_rows_are_written_sorted_by_key(catalog):
    table = catalog.create_table("ns.t", schema=KEYED)
    [data_file] = write_rows(TableTarget.of(table), keyed([5, 1, 3]), ["id"])
    assert internals.read_data_file(table.io, table.metadata, data_file).column("id").to_pylist() == [1, 3, 5]


def test_rows_that_do_not_fit_the_table_are_refused_by_name(catalog):
    table = catalog.create_table("ns.t", schema=KEYED)
    with pytest.raises(RowsDoNotFitTable, match="ns.t: rows lack column\\(s\\) 'v'"):
        write_rows(TableTarget.of(table), keyed([1]).select(["id"]), ["id"])
    with pytest.raises(RowsDoNotFitTable, match="the table lacks: 'w'"):
        write_rows(TableTarget.of(table), keyed([1]).append_column("w", pa.array([1])), ["id"])
