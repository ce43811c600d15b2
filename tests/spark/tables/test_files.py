"""plan_rewrite: candidate files from manifest bounds and bucket values, with no limit on keys."""

from __future__ import annotations

import pytest

import datetime as dt
import tempfile
from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.expressions import In
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import BucketTransform
from pyiceberg.types import DateType, DecimalType, DoubleType, LongType, NestedField, StringType

from spark.tables import files as planner
from spark.tables import internals
from spark.core.key_match import key_mask
from tests.spark.tables.conftest import table_with_files

pytestmark = pytest.mark.slow  # whole intervals, Spark or services: make test-fast leaves it out (docs/testing.md)

ID = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "v", StringType(), required=False))


def id_rows(ids: list[int | None]) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "v": [f"v{i}" for i in ids]})


def plan(table, keys, touched: pa.Table):
    return planner.plan_rewrite(table.metadata, table.io, keys, touched)


def holders(table, keys, touched: pa.Table) -> set[str]:
    """Files that really hold a touched key (read them all)."""
    return {t.file.file_path for t in table.scan().plan_files()
            if key_mask(internals.read_data_file(table.io, table.metadata, t.file), touched, keys).to_numpy(zero_copy_only=False).any()}


def test_thousands_of_keys_over_many_files_with_disjoint_ranges_plan_exactly(catalog):
    table = table_with_files(catalog, "t", ID, [id_rows(list(range(i * 100, i * 100 + 100))) for i in range(200)])
    touched_ids = list(range(0, 20_000, 40)) + list(range(5_000, 5_100))  # 600 keys, 200 files
    touched_ids = [i for i in touched_ids if not 100 <= i < 1_000]  # files 1..9 hold no touched key
    touched = pa.table({"id": pa.array(touched_ids, pa.int64())})
    result = plan(table, ["id"], touched)
    assert result.files_in_snapshot == 200 and result.snapshot_id == table.current_snapshot().snapshot_id
    assert {f.file_path for f in result.candidates} == holders(table, ["id"], touched)
    assert len(result.candidates) == 191
    # what pyiceberg's own pruning does with more than 200 literals: every file
    assert len(list(table.scan(row_filter=In("id", touched_ids)).plan_files())) == 200


def test_composite_and_null_keys(catalog):
    schema = Schema(NestedField(1, "a", StringType(), required=False), NestedField(2, "b", LongType(), required=False))
    batches = [
        pa.table({"a": ["x", "x", "y"], "b": pa.array([1, 2, 3], pa.int64())}),
        pa.table({"a": ["y", "z"], "b": pa.array([10, 20], pa.int64())}),
        pa.table({"a": [None, "m"], "b": pa.array([5, None], pa.int64())}),
    ]
    table = table_with_files(catalog, "t", schema, batches)
    by_first_row = {internals.read_data_file(table.io, table.metadata, f).to_pylist()[0]["b"]: f.file_path
                    for f in (t.file for t in table.scan().plan_files())}
    cases = [
        ({"a": ["x"], "b": [3]}, {1}),             # inside file 1's box (x..y, 1..3), a miss by rows
        ({"a": ["y"], "b": [15]}, {10}),           # only the second file's b range holds 15
        ({"a": [None], "b": [5]}, {5}),            # a NULL part: only the file with NULLs in a
        ({"a": ["m"], "b": [None]}, {5}),
        ({"a": ["zz"], "b": [1]}, set()),
    ]
    for keys, expected in cases:
        touched = pa.table({"a": pa.array(keys["a"], pa.string()), "b": pa.array(keys["b"], pa.int64())})
        assert {f.file_path for f in plan(table, ["a", "b"], touched).candidates} == {by_first_row[b] for b in expected}, keys


def test_dates_decimals_and_unprunable_floats(catalog):
    schema = Schema(NestedField(1, "d", DateType(), required=False), NestedField(2, "m", DecimalType(9, 2), required=False),
                    NestedField(3, "f", DoubleType(), required=False))
    day = dt.date(2024, 1, 1)
    batches = [pa.table({"d": [day + dt.timedelta(days=10 * i + j) for j in range(3)],
                         "m": [Decimal(f"{i}.0{j}") for j in range(3)], "f": [float(i)] * 3}) for i in range(5)]
    table = table_with_files(catalog, "t", schema, batches)
    touched = pa.table({"d": pa.array([day + dt.timedelta(days=21)]), "m": pa.array([Decimal("2.01")], pa.decimal128(9, 2)),
                        "f": pa.array([2.0])})
    result = plan(table, ["d", "m", "f"], touched)
    assert [internals.read_data_file(table.io, table.metadata, f).column("m").to_pylist()[0] for f in result.candidates] == [Decimal("2.00")]
    assert len(plan(table, ["f"], touched.select(["f"])).candidates) == 5  # NaN-safe: floats never prune


def test_an_empty_table_or_no_keys_plan_nothing(catalog):
    table = catalog.create_table("ns.t", schema=ID)
    assert plan(table, ["id"], pa.table({"id": pa.array([1], pa.int64())})).candidates == ()
    table = table_with_files(catalog, "u", ID, [id_rows([1, 2])])
    assert plan(table, ["id"], pa.table({"id": pa.array([], pa.int64())})).candidates == ()


def test_bucket_values_of_keys_follow_the_iceberg_spec(monkeypatch):
    # The spec's reference hashes: 34L -> 2017239379, "iceberg" -> 1210000089.
    for available in (False, True) if internals.pyiceberg_core_available() else (False,):
        monkeypatch.setattr(internals, "pyiceberg_core_available", lambda a=available: a)
        got = planner.partition_values(BucketTransform(16), LongType(), pa.array([34, None], pa.int64()))
        assert got.to_pylist() == [2017239379 % 16, None]
        got = planner.partition_values(BucketTransform(1000), StringType(), pa.array(["iceberg"]))
        assert got.to_pylist() == [1210000089 % 1000]


def test_buckets_prune_where_key_ranges_overlap(catalog):
    spec = PartitionSpec(PartitionField(source_id=1, field_id=1000, transform=BucketTransform(16), name="b"))
    table = table_with_files(catalog, "t", ID, [id_rows(list(range(i, 16_000, 10))) for i in range(10)], spec=spec)
    files = [t.file for t in table.scan().plan_files()]
    assert len(files) == 160  # 10 batches x 16 buckets, every file spanning ~0..16000
    touched = pa.table({"id": pa.array([8004, 8005], pa.int64())})
    result = plan(table, ["id"], touched)
    bucket = BucketTransform(16).transform(LongType())
    same_buckets = {f.file_path for f in files if f.partition[0] in {bucket(8004), bucket(8005)}}
    in_range = {f.file_path for f in files if any(_in_box(internals.read_data_file(table.io, table.metadata, f), ["id"], {"id": k})
                                                  for k in (8004, 8005))}
    assert len(in_range) > 100  # key bounds alone keep most files: hashing spreads every bucket over the key range
    assert {f.file_path for f in result.candidates} == same_buckets & in_range >= holders(table, ["id"], touched)


key_part = st.one_of(st.none(), st.integers(-20, 20))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.lists(st.tuples(key_part, key_part), min_size=1, max_size=12), min_size=1, max_size=8),
    st.lists(st.tuples(key_part, key_part), min_size=1, max_size=40),
)
def test_never_misses_a_file_that_holds_a_key(file_keys, touched_keys):
    schema = Schema(NestedField(1, "a", LongType(), required=False), NestedField(2, "b", LongType(), required=False))
    with tempfile.TemporaryDirectory() as tmp:
        cat = SqlCatalog("p", uri=f"sqlite:///{tmp}/c.db", warehouse=Path(tmp, "wh").as_uri())
        cat.create_namespace("ns")
        batches = [pa.table({"a": pa.array([k[0] for k in ks], pa.int64()), "b": pa.array([k[1] for k in ks], pa.int64())})
                   for ks in file_keys]
        table = table_with_files(cat, "t", schema, batches)
        touched = pa.table({"a": pa.array([k[0] for k in touched_keys], pa.int64()),
                            "b": pa.array([k[1] for k in touched_keys], pa.int64())})
        for keys in (["a", "b"], ["a"]):
            planned = {f.file_path for f in plan(table, keys, touched.select(keys)).candidates}
            assert holders(table, keys, touched.select(keys)) <= planned
            # exact at the level of boxes: a planned file's box holds some touched key
            for f in plan(table, keys, touched.select(keys)).candidates:
                rows = internals.read_data_file(table.io, table.metadata, f)
                assert any(_in_box(rows, keys, key) for key in touched.select(keys).to_pylist())


def _in_box(rows: pa.Table, keys: list[str], key: dict) -> bool:
    for k in keys:
        values = rows.column(k).to_pylist()
        if key[k] is None:
            if None not in values:
                return False
        else:
            present = [v for v in values if v is not None]
            if not present or not min(present) <= key[k] <= max(present):
                return False
    return True


def test_bounds_another_writer_took_from_some_row_groups_only_are_not_trusted(catalog, monkeypatch):
    """A file of several row groups written with pyiceberg's own statistics (as another engine
    may): its footer shows a row group without min/max, so its bounds do not prune it."""
    import pyiceberg.io.pyarrow as pyiceberg_arrow

    monkeypatch.setattr(pyiceberg_arrow, "data_file_statistics_from_parquet_metadata", internals._pyiceberg_file_statistics)
    table = catalog.create_table("ns.other", schema=ID, properties={"write.parquet.row-group-limit": "2"})
    long = "z" * 5000
    table.append(pa.table({"id": pa.array([1, 2, 3, 4], pa.int64()), "v": ["a", "b", long, "c"]}))
    [data_file] = [t.file for t in table.scan().plan_files()]
    assert data_file.upper_bounds[2] == b"b" and len(data_file.split_offsets) == 2  # the other writer's bound
    touched = pa.table({"v": [long]})
    assert [f.file_path for f in plan(table, ["v"], touched).candidates] == [data_file.file_path]
    assert plan(table, ["id"], pa.table({"id": pa.array([9], pa.int64())})).candidates == ()  # id still prunes


def test_live_files_added_after_a_sequence_number_reads_only_newer_manifests(catalog):
    """The change feed's W2 read: the files added after W1's snapshot and their deletes, without
    reading the manifests the table had then (manifests_read shows which were read)."""
    table = table_with_files(catalog, "t", ID, [id_rows([1, 2])])
    first = table.current_snapshot()
    table.append(id_rows([3]).cast(ID.as_arrow()))
    table = catalog.load_table("ns.t")
    head = table.current_snapshot()
    read: dict = {}
    newer = planner.live_files(table.io, head, read, added_after=first.sequence_number)
    assert [f.record_count for f in newer.data] == [1]
    assert len(read) == 1 and set(read) < {m.manifest_path for m in head.manifests(table.io)}
    assert sorted(f.record_count for f in planner.live_files(table.io, head).data) == [1, 2]
    assert sorted(f.record_count for f in planner.live_files(table.io, head, added_after=0).data) == [1, 2]  # v1: none


def test_live_files_added_after_leaves_out_older_files_a_later_manifest_carries(catalog):
    """A commit after W1 that removes a file from a manifest writes the rest of it anew (EXISTING
    entries, in a manifest newer than W1's snapshot), as a manifest merge does: a file from before W1
    read from there would come without its position deletes, whose manifest goes unread. The W2 read
    leaves such a file out (no row written after W1 is in it), or reads it with its deletes."""
    table = table_with_files(catalog, "t", ID, [id_rows([1, 2]), id_rows([3])])
    old, gone = sorted((t.file for t in table.scan().plan_files()), key=lambda f: f.record_count, reverse=True)
    deletes = internals.write_position_deletes(table.io, table.metadata, old, np.array([0]))
    internals.commit_overwrite(table, expected_snapshot_id=table.current_snapshot().snapshot_id, removed=[], added=[],
                               deletes_added=[deletes])
    table = catalog.load_table("ns.t")
    w1 = table.current_snapshot()
    added = internals.write_data_files(table.io, table.metadata, id_rows([4]).cast(ID.as_arrow()))
    internals.commit_overwrite(table, expected_snapshot_id=w1.snapshot_id, removed=[gone], added=added)
    table = catalog.load_table("ns.t")
    head = table.current_snapshot()
    carried = [m for m in head.manifests(table.io) if m.sequence_number > w1.sequence_number
               and old.file_path in {e.data_file.file_path for e in m.fetch_manifest_entry(table.io)}]
    assert carried, "the later commit carries the older file in a manifest of its own"
    everything = planner.live_files(table.io, head)
    newer = planner.live_files(table.io, head, added_after=w1.sequence_number)
    assert [f.file_path for f in newer.data] == [f.file_path for f in added]
    for f in newer.data:
        assert newer.deletes_of(f) == everything.deletes_of(f)
