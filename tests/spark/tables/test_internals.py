"""pyiceberg private API that tidelake relies on: names, signatures and behaviour, pinned.

If a pyiceberg upgrade breaks one of these, fix ``spark/tables/internals.py`` (only there) and
bump ``WRITTEN_FOR_PYICEBERG``.
"""

from __future__ import annotations

import inspect
import pickle

import numpy as np
import pyarrow as pa
import pyiceberg
import pytest
from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files, _read_deletes
from pyiceberg.manifest import DataFile, ManifestContent, ManifestEntryStatus, ManifestWriterV2
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import FileScanTask, Transaction
from pyiceberg.table.delete_file_index import DeleteFileIndex
from pyiceberg.table.snapshots import SnapshotSummaryCollector
from pyiceberg.table.update.snapshot import UpdateSnapshot, _OverwriteFiles, _SnapshotProducer
from pyiceberg.transforms import BucketTransform
from pyiceberg.types import LongType, NestedField, StringType

from spark.tables import internals
from spark.tables.errors import CommitConflictError, LayoutUnavailable, OverwriteRejected
from spark.write.target import TableTarget
from tests.spark.tables.conftest import table_with_files

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "name", StringType(), required=False))


def rows(start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()), "name": [f"n{i}" for i in range(start, start + n)]})


def fields(data_file: DataFile) -> list:
    return [data_file[i] for i in range(len(data_file))] + [data_file.spec_id]  # spec_id is no struct field


def test_written_for_this_pyiceberg():
    assert pyiceberg.__version__ == internals.WRITTEN_FOR_PYICEBERG, (
        "pyiceberg changed: re-check every function of spark/tables/internals.py against it, then bump WRITTEN_FOR_PYICEBERG"
    )


def test_private_names_and_signatures():
    assert list(inspect.signature(_dataframe_to_data_files).parameters)[:4] == ["table_metadata", "df", "io", "write_uuid"]
    assert list(inspect.signature(ArrowScan.__init__).parameters)[1:5] == ["table_metadata", "io", "projected_schema", "row_filter"]
    assert callable(ArrowScan.to_table)
    assert list(inspect.signature(FileScanTask.__init__).parameters)[1] == "data_file"
    assert inspect.signature(UpdateSnapshot.overwrite).return_annotation in (_OverwriteFiles, "_OverwriteFiles")
    for name in ("delete_data_file", "append_data_file", "_commit", "_clean_all_uncommitted", "_process_manifests"):
        assert callable(getattr(_OverwriteFiles, name)), name
    assert isinstance(inspect.getattr_static(_OverwriteFiles, "snapshot_id"), property)
    assert list(inspect.signature(Transaction._apply).parameters) == ["self", "updates", "requirements"]
    # merge-on-read: delete files read, delete manifests written, the summary counted
    assert list(inspect.signature(_read_deletes).parameters) == ["io", "data_file"]
    assert list(inspect.signature(ManifestWriterV2.__init__).parameters) == [
        "self", "spec", "schema", "output_file", "snapshot_id", "avro_compression"]
    for name in ("_summary", "new_manifest_output", "spec", "schema"):
        assert callable(getattr(_OverwriteFiles, name)), name
    for name in ("_compression", "_operation", "_parent_snapshot_id", "_added_data_files", "_deleted_data_files", "_io"):
        assert name in _SnapshotProducer.__annotations__ or name == "_io", name
    assert list(inspect.signature(SnapshotSummaryCollector.add_file).parameters)[:4] == ["self", "data_file", "schema", "partition_spec"]
    assert list(inspect.signature(DeleteFileIndex.for_data_file).parameters)[1:3] == ["seq_num", "data_file"]


def test_from_args_still_drops_spec_id():
    """write_data_files sets spec_id itself because pyiceberg drops it; when this fails, pyiceberg
    keeps it and the workaround can go."""
    from pyiceberg.manifest import DataFileContent, FileFormat
    from pyiceberg.typedef import Record

    data_file = DataFile.from_args(content=DataFileContent.DATA, file_path="x", file_format=FileFormat.PARQUET,
                                   partition=Record(), record_count=1, file_size_in_bytes=1, spec_id=0)
    assert not hasattr(data_file, "_spec_id")


def test_transaction_keeps_a_list_of_registered_snapshot_producers(catalog):
    table = catalog.create_table("ns.t", schema=SCHEMA)
    tx = table.transaction()
    assert tx._snapshot_producers == []
    tx.append(rows(0, 3))
    assert len(tx._snapshot_producers) == 1  # what stage_overwrite checks to refuse a second snapshot


def test_data_file_pickles_and_unpickles_equal_in_every_field(catalog):
    table = catalog.create_table("ns.t", schema=SCHEMA)
    target = TableTarget.of(table)
    [data_file] = internals.write_data_files(target.io(), target.metadata(), rows(0, 10))
    back = pickle.loads(pickle.dumps(data_file))
    assert fields(back) == fields(data_file)
    assert back.record_count == 10 and back.lower_bounds and back.upper_bounds and back.spec_id == 0
    internals.commit_overwrite(table, expected_snapshot_id=None, removed=[], added=[back])
    [listed] = [t.file for t in catalog.load_table("ns.t").scan().plan_files()]  # as the planner ships them
    assert listed.spec_id == 0 and fields(pickle.loads(pickle.dumps(listed))) == fields(listed)


def test_written_files_read_back_the_rows_with_key_bounds(catalog):
    table = catalog.create_table("ns.t", schema=SCHEMA, properties={"write.target-file-size-bytes": "2000"})
    target = TableTarget.of(table)
    files = internals.write_data_files(target.io(), target.metadata(), rows(0, 500))
    assert len(files) > 1  # bin-packed by the table's target size
    read = pa.concat_tables(internals.read_data_file(target.io(), target.metadata(), f) for f in files)
    assert read.sort_by("id").to_pylist() == rows(0, 500).to_pylist()
    assert {f.file_path.startswith(table.location()) for f in files} == {True}
    first = files[0]
    low = int.from_bytes(first.lower_bounds[1], "little")
    assert low == internals.read_data_file(target.io(), target.metadata(), first).column("id").to_pylist()[0]
    assert internals.write_data_files(target.io(), target.metadata(), rows(0, 0)) == []


def test_read_projects_the_current_schema(catalog):
    table = table_with_files(catalog, "t", SCHEMA, [rows(0, 3)])
    [data_file] = [t.file for t in table.scan().plan_files()]
    with table.update_schema() as update:
        update.rename_column("name", "label")
        update.add_column("extra", StringType())
    read = internals.read_data_file(table.io, table.metadata, data_file)
    assert read.column_names == ["id", "label", "extra"]
    assert read.column("label").to_pylist() == ["n0", "n1", "n2"] and read.column("extra").null_count == 3


def test_commit_overwrite_removes_and_adds_files_in_one_snapshot(catalog):
    table = table_with_files(catalog, "t", SCHEMA, [rows(0, 3), rows(3, 3)])
    head = table.current_snapshot().snapshot_id
    old = [t.file for t in table.scan().plan_files()]
    target = TableTarget.of(table)
    new = internals.write_data_files(target.io(), target.metadata(), rows(100, 2))
    snapshot_id = internals.commit_overwrite(table, expected_snapshot_id=head, removed=[old[0]], added=new,
                                             snapshot_properties={"tidelake.watermark": "42"})
    table = catalog.load_table("ns.t")
    snapshot = table.current_snapshot()
    assert snapshot.snapshot_id == snapshot_id and snapshot.parent_snapshot_id == head
    assert snapshot.summary.operation.value == "overwrite"
    assert snapshot.summary["tidelake.watermark"] == "42"
    assert snapshot.summary["deleted-data-files"] == "1" and snapshot.summary["added-data-files"] == "1"
    assert {f.file.file_path for f in table.scan().plan_files()} == {old[1].file_path, new[0].file_path}
    assert table.scan().to_arrow().num_rows == 5


def test_commit_overwrite_on_a_branch_leaves_main(catalog):
    table = table_with_files(catalog, "t", SCHEMA, [rows(0, 3)])
    head = table.current_snapshot().snapshot_id
    table.manage_snapshots().create_branch(head, "staging").commit()
    target = TableTarget.of(table)
    new = internals.write_data_files(target.io(), target.metadata(), rows(10, 2))
    internals.commit_overwrite(table, expected_snapshot_id=head, removed=[], added=new, branch="staging")
    table = catalog.load_table("ns.t")
    assert table.current_snapshot().snapshot_id == head
    assert table.scan(snapshot_id=table.snapshot_by_name("staging").snapshot_id).to_arrow().num_rows == 5


def test_a_plan_against_another_snapshot_is_refused_naming_both(catalog):
    table = table_with_files(catalog, "t", SCHEMA, [rows(0, 3)])
    head = table.current_snapshot().snapshot_id
    with pytest.raises(CommitConflictError, match=f"expected snapshot 123, found {head}") as info:
        internals.commit_overwrite(table, expected_snapshot_id=123, removed=[], added=[])
    assert (info.value.expected, info.value.found, info.value.branch) == (123, head, "main")


def test_a_writer_that_commits_between_plan_and_commit_is_a_conflict_not_a_rebase(catalog):
    table = table_with_files(catalog, "t", SCHEMA, [rows(0, 3)])
    head = table.current_snapshot().snapshot_id
    stale = catalog.load_table("ns.t")
    catalog.load_table("ns.t").append(rows(50, 1))  # another writer
    moved = catalog.load_table("ns.t").current_snapshot().snapshot_id
    target = TableTarget.of(stale)
    new = internals.write_data_files(target.io(), target.metadata(), rows(10, 2))
    with pytest.raises(CommitConflictError) as info:
        internals.commit_overwrite(stale, expected_snapshot_id=head, removed=[], added=new)
    assert (info.value.expected, info.value.found) == (head, moved)
    after = catalog.load_table("ns.t")
    assert after.current_snapshot().snapshot_id == moved and after.scan().to_arrow().num_rows == 4


def test_removing_a_file_the_head_does_not_hold_is_rejected(catalog):
    table = table_with_files(catalog, "t", SCHEMA, [rows(0, 3), rows(3, 3)])
    first = next(t.file for t in table.scan().plan_files())
    internals.commit_overwrite(table, expected_snapshot_id=table.current_snapshot().snapshot_id, removed=[first], added=[])
    table = catalog.load_table("ns.t")
    with pytest.raises(OverwriteRejected, match="Missing required files to delete"):
        internals.commit_overwrite(table, expected_snapshot_id=table.current_snapshot().snapshot_id, removed=[first], added=[])


def test_the_overwrite_must_be_the_transactions_only_snapshot(catalog):
    table = table_with_files(catalog, "t", SCHEMA, [rows(0, 3)])
    tx = table.transaction()
    tx.append(rows(10, 1))
    with pytest.raises(OverwriteRejected, match="only snapshot"):
        internals.stage_overwrite(tx, "ns.t", expected_snapshot_id=table.current_snapshot().snapshot_id,
                                  removed=[], added=internals.write_data_files(table.io, table.metadata, rows(20, 1)))


def test_staged_with_schema_and_property_changes_commits_once_with_the_new_schema(catalog):
    table = table_with_files(catalog, "t", SCHEMA, [rows(0, 3)])
    head = table.current_snapshot().snapshot_id
    tx = table.transaction()
    with tx.update_schema() as update:
        update.add_column("extra", StringType())
    tx.set_properties({"tidelake.watermark": "7"})
    added = internals.write_data_files(table.io, tx.table_metadata, rows(10, 1).append_column("extra", pa.array(["x"])))
    snapshot_id = internals.stage_overwrite(tx, "ns.t", expected_snapshot_id=head, removed=[], added=added)
    tx.commit_transaction()
    table = catalog.load_table("ns.t")
    assert table.current_snapshot().snapshot_id == snapshot_id
    assert table.current_snapshot().schema_id == table.metadata.current_schema_id
    assert table.properties["tidelake.watermark"] == "7"
    assert table.scan().to_arrow().column("extra").to_pylist().count("x") == 1


def test_nothing_to_remove_or_add_commits_nothing(catalog):
    table = table_with_files(catalog, "t", SCHEMA, [rows(0, 3)])
    head = table.current_snapshot().snapshot_id
    assert internals.commit_overwrite(table, expected_snapshot_id=head, removed=[], added=[]) is None
    assert len(catalog.load_table("ns.t").snapshots()) == 1


BUCKETED = PartitionSpec(PartitionField(source_id=1, field_id=1000, transform=BucketTransform(4), name="b"))


def test_a_bucketed_write_without_pyiceberg_core_fails_clearly(catalog, monkeypatch):
    table = catalog.create_table("ns.t", schema=SCHEMA, partition_spec=BUCKETED)
    monkeypatch.setattr(internals, "pyiceberg_core_available", lambda: False)
    with pytest.raises(LayoutUnavailable, match=r"bucket\[4\]\(id\).*pyiceberg-core"):
        internals.write_data_files(table.io, table.metadata, rows(0, 3))


def test_a_bucketed_write_splits_rows_by_bucket(catalog):
    table = catalog.create_table("ns.t", schema=SCHEMA, partition_spec=BUCKETED)
    files = internals.write_data_files(table.io, table.metadata, rows(0, 100))
    bucket = BucketTransform(4).transform(LongType())
    for f in files:
        ids = internals.read_data_file(table.io, table.metadata, f).column("id").to_pylist()
        assert {bucket(i) for i in ids} == {f.partition[0]}
    assert sum(f.record_count for f in files) == 100


def test_pyiceberg_still_has_no_replace_producer_and_refuses_replace_summaries():
    """commit_replace stages an overwrite and rewrites its summary's operation; when pyiceberg gets a
    replace producer (or accepts replace summaries), use it there instead."""
    from pyiceberg.table.snapshots import Operation, Summary, update_snapshot_summaries
    from pyiceberg.table.update import AddSnapshotUpdate
    from pyiceberg.table.update.snapshot import UpdateSnapshot

    assert not hasattr(UpdateSnapshot, "replace") and not hasattr(UpdateSnapshot, "rewrite")
    with pytest.raises(ValueError, match="Operation not implemented"):
        update_snapshot_summaries(Summary(Operation.REPLACE))
    assert "snapshot" in AddSnapshotUpdate.model_fields
    assert Summary(Operation.OVERWRITE, a="1").additional_properties == {"a": "1"}


def test_commit_replace_is_a_replace_snapshot_with_the_same_rows(catalog):
    table = table_with_files(catalog, "t", SCHEMA, [rows(0, 3), rows(3, 3), rows(6, 4)])
    head = table.current_snapshot().snapshot_id
    old = [t.file for t in table.scan().plan_files()]
    merged = internals.write_data_files(table.io, table.metadata, rows(0, 10))
    snapshot_id = internals.commit_replace(table, expected_snapshot_id=head, removed=old, added=merged,
                                           snapshot_properties={"tidelake.maintenance": "compaction"})
    table = catalog.load_table("ns.t")
    snapshot = table.current_snapshot()
    assert snapshot.snapshot_id == snapshot_id and snapshot.parent_snapshot_id == head
    assert snapshot.summary.operation.value == "replace" and snapshot.summary["tidelake.maintenance"] == "compaction"
    assert snapshot.summary["deleted-data-files"] == "3" and snapshot.summary["total-data-files"] == "1"
    assert snapshot.summary["total-records"] == "10"
    assert sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"]) == rows(0, 10).to_pylist()
    assert table.scan(snapshot_id=head).to_arrow().num_rows == 10  # the old snapshot still reads its files


def test_commit_replace_refuses_a_change_of_rows_and_a_moved_head(catalog):
    table = table_with_files(catalog, "t", SCHEMA, [rows(0, 3), rows(3, 3)])
    head = table.current_snapshot().snapshot_id
    old = [t.file for t in table.scan().plan_files()]
    fewer = internals.write_data_files(table.io, table.metadata, rows(0, 5))
    with pytest.raises(OverwriteRejected, match="6 removed, 5 added"):
        internals.commit_replace(table, expected_snapshot_id=head, removed=old, added=fewer)
    with pytest.raises(CommitConflictError, match=f"expected snapshot 7, found {head}"):
        internals.commit_replace(table, expected_snapshot_id=7, removed=old, added=fewer)
    assert catalog.load_table("ns.t").current_snapshot().snapshot_id == head


def test_commit_replace_moves_tags_on_the_head_in_the_same_commit_and_only_those(catalog):
    table = table_with_files(catalog, "t", SCHEMA, [rows(0, 3)])
    first = table.current_snapshot().snapshot_id
    table.manage_snapshots().create_tag(first, "wm_3").commit()
    table.append(rows(3, 3))
    head = table.current_snapshot().snapshot_id
    table.manage_snapshots().create_tag(head, "wm_7").commit()
    table = catalog.load_table("ns.t")
    old = [t.file for t in table.scan().plan_files()]
    merged = internals.write_data_files(table.io, table.metadata, rows(0, 6))
    with pytest.raises(OverwriteRejected, match="'wm_3' is not a tag on snapshot"):
        internals.commit_replace(table, expected_snapshot_id=head, removed=old, added=merged, move_tags=["wm_7", "wm_3"])
    assert catalog.load_table("ns.t").current_snapshot().snapshot_id == head  # nothing committed
    versions = len(table.metadata.metadata_log)
    snapshot_id = internals.commit_replace(table, expected_snapshot_id=head, removed=old, added=merged, move_tags=["wm_7"])
    table = catalog.load_table("ns.t")
    assert table.refs()["wm_7"].snapshot_id == snapshot_id == table.current_snapshot().snapshot_id
    assert table.refs()["wm_3"].snapshot_id == first
    assert table.scan(snapshot_id=snapshot_id).to_arrow().num_rows == 6
    assert len(table.metadata.metadata_log) == versions + 1  # the replace and the tag's move: one commit


def test_commit_replace_keeps_the_heads_older_schema(catalog):
    table = table_with_files(catalog, "t", SCHEMA, [rows(0, 3), rows(3, 3)])
    head = table.current_snapshot()
    with table.update_schema() as update:
        update.add_column("extra", StringType())
    table = catalog.load_table("ns.t")
    old = [t.file for t in table.scan().plan_files()]
    at_head = table.metadata.model_copy(update={"current_schema_id": head.schema_id})
    merged = internals.write_data_files(table.io, at_head, rows(0, 6))
    internals.commit_replace(table, expected_snapshot_id=head.snapshot_id, removed=old, added=merged,
                             schema_id=head.schema_id)
    table = catalog.load_table("ns.t")
    assert table.current_snapshot().schema_id == head.schema_id != table.metadata.current_schema_id


def test_position_deletes_commit_in_a_delete_manifest_that_pyiceberg_and_a_partial_removal_read(catalog):
    table = table_with_files(catalog, "t", SCHEMA, [rows(0, 10), rows(10, 10)])
    head = table.current_snapshot().snapshot_id
    first, second = sorted((t.file for t in table.scan().plan_files()), key=lambda f: f.record_count and f.lower_bounds[1])
    io, metadata = table.io, table.metadata
    d1 = internals.write_position_deletes(io, metadata, first, np.array([0, 4]))
    d2 = internals.write_position_deletes(io, metadata, second, np.array([9]))
    assert internals.referenced_data_file(d1) == first.file_path
    internals.commit_overwrite(table, expected_snapshot_id=head, removed=[], added=[], deletes_added=[d1, d2])
    table = catalog.load_table("ns.t")
    manifests = table.current_snapshot().manifests(table.io)
    assert [m.content for m in manifests].count(ManifestContent.DELETES) == 1
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == [i for i in range(20) if i not in (0, 4, 19)]
    assert internals.deleted_positions(table.io, first, [d1, d2]).tolist() == [0, 4]
    assert internals.read_data_file(table.io, table.metadata, first, [d1]).column("id").to_pylist() == [1, 2, 3, 5, 6, 7, 8, 9]
    # Removing the first file with its delete file rewrites the delete manifest: d2 stays (EXISTING), d1 goes (DELETED).
    replacement = internals.write_data_files(table.io, table.metadata, rows(1, 3))
    internals.commit_overwrite(table, expected_snapshot_id=table.current_snapshot().snapshot_id, removed=[first],
                               added=replacement, deletes_removed=[d1])
    table = catalog.load_table("ns.t")
    [deletes] = [m for m in table.current_snapshot().manifests(table.io) if m.content == ManifestContent.DELETES]
    statuses = {e.data_file.file_path: e.status for e in deletes.fetch_manifest_entry(table.io, discard_deleted=False)}
    assert statuses == {d1.file_path: ManifestEntryStatus.DELETED, d2.file_path: ManifestEntryStatus.EXISTING}
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == [1, 2, 3, *range(10, 19)]
    summary = table.current_snapshot().summary
    assert (summary["removed-delete-files"], summary["total-delete-files"], summary["total-position-deletes"]) == ("1", "1", "1")
    with pytest.raises(OverwriteRejected, match="not live"):
        internals.commit_overwrite(table, expected_snapshot_id=table.current_snapshot().snapshot_id, removed=[], added=[],
                                   deletes_removed=[d1])


def test_a_replace_keeps_the_rows_less_the_deletes_it_folds(catalog):
    table = table_with_files(catalog, "t", SCHEMA, [rows(0, 10)])
    [data_file] = [t.file for t in table.scan().plan_files()]
    deletes = internals.write_position_deletes(table.io, table.metadata, data_file, np.array([2, 3]))
    internals.commit_overwrite(table, expected_snapshot_id=table.current_snapshot().snapshot_id, removed=[], added=[],
                               deletes_added=[deletes])
    table = catalog.load_table("ns.t")
    head = table.current_snapshot().snapshot_id
    kept = internals.read_data_file(table.io, table.metadata, data_file, [deletes])
    with pytest.raises(OverwriteRejected, match="must keep the rows"):  # the deletes left behind: rows would come back
        internals.commit_replace(table, expected_snapshot_id=head, removed=[data_file],
                                 added=internals.write_data_files(table.io, table.metadata, rows(0, 10)), deletes_removed=[deletes])
    internals.commit_replace(table, expected_snapshot_id=head, removed=[data_file],
                             added=internals.write_data_files(table.io, table.metadata, kept), deletes_removed=[deletes])
    table = catalog.load_table("ns.t")
    assert table.current_snapshot().summary.operation.value == "replace"
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == [0, 1, *range(4, 10)]


# -- file statistics: every bound bounds every row group; string upper bounds stay valid UTF-8


def test_a_column_some_row_group_holds_without_min_max_gets_no_bounds(catalog):
    """pyarrow keeps no min/max for a row group holding a value over 4 KiB; pyiceberg took the
    file's bounds from the other row groups, so the long value lay outside them."""
    import pyarrow.parquet as pq

    table = catalog.create_table("ns.long", schema=SCHEMA, properties={"write.parquet.row-group-limit": "2"})
    batch = pa.table({"id": pa.array([1, 2, 3, 4], pa.int64()), "name": ["a", "b", "z" * 5000, None]})
    [data_file] = internals.write_data_files(table.io, table.metadata, batch)
    with table.io.new_input(data_file.file_path).open() as f:
        metadata = pq.read_metadata(f)
    assert metadata.num_row_groups == 2 and not metadata.row_group(1).column(1).statistics.has_min_max
    assert internals.unbounded_columns(metadata, {"id": 1, "name": 2}) == {2}
    assert 2 not in data_file.lower_bounds and 2 not in data_file.upper_bounds
    assert data_file.upper_bounds[1] == (4).to_bytes(8, "little")  # the other columns keep theirs
    assert data_file.null_value_counts[2] == 1
    nulls = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": ["a", None, None]})  # a group of NULLs only bounds nothing
    [data_file] = internals.write_data_files(table.io, table.metadata, nulls)
    assert data_file.upper_bounds[2] == b"a"


@pytest.mark.parametrize(("value", "bound"), [
    ("short", "short"),
    ("a" * 15 + "\ud7ff" + "x", "a" * 15 + "\ue000"),
    ("a" * 15 + "b" + "x", "a" * 15 + "c"),
    ("a" * 14 + "b\U0010ffff" + "x", "a" * 14 + "c"),
    ("\U0010ffff" * 17, None),
])
def test_text_upper_bound_skips_the_surrogates(value: str, bound: str | None):
    assert internals.text_upper_bound(value, 16) == bound
    if bound is not None:
        assert bound >= value and bound.encode("utf-8")


def test_the_statistics_hook_is_where_pyiceberg_looks_it_up():
    """internals rebinds pyiceberg.io.pyarrow.data_file_statistics_from_parquet_metadata, which the
    Parquet writer looks up at each call, and relies on StatsAggregator's attributes."""
    import pyiceberg.io.pyarrow as pyiceberg_arrow
    from pyiceberg.io.pyarrow import StatsAggregator

    assert pyiceberg_arrow.data_file_statistics_from_parquet_metadata is internals._bounding_file_statistics
    assert list(inspect.signature(internals._pyiceberg_file_statistics).parameters) == [
        "parquet_metadata", "stats_columns", "parquet_column_mapping"]
    assert "data_file_statistics_from_parquet_metadata" in inspect.getsource(pyiceberg_arrow.ParquetFormatWriter.close)
    aggregate = StatsAggregator(StringType(), "BYTE_ARRAY", 16)
    assert {"primitive_type", "trunc_length", "current_max"} <= set(vars(aggregate))


def test_pyiceberg_own_writes_get_the_bounding_statistics_too(catalog):
    """Repair writes through pyiceberg's overwrite: its files must be bounded the same way."""
    table = catalog.create_table("ns.own", schema=SCHEMA, properties={"write.parquet.row-group-limit": "2"})
    table.append(pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": ["a", "b", "z" * 5000]}))
    [task] = table.scan().plan_files()
    assert 2 not in task.file.upper_bounds and task.file.upper_bounds[1] == (3).to_bytes(8, "little")


def test_without_bounds_copies_a_data_file(catalog):
    table = table_with_files(catalog, "wb", SCHEMA, [rows(0, 3)])
    [data_file] = [t.file for t in table.scan().plan_files()]
    copy = internals.without_bounds(data_file, [2])
    assert 2 not in copy.lower_bounds and 2 not in copy.upper_bounds and copy.lower_bounds[1] == data_file.lower_bounds[1]
    assert 2 in data_file.lower_bounds and copy.spec_id == data_file.spec_id and copy == data_file  # same file (path)


def test_a_transaction_computes_its_metadata_once_per_staged_state_and_sees_every_update(catalog) -> None:  # noqa: ANN001
    table = table_with_files(catalog, "memo", SCHEMA, [rows(0, 3)])
    tx = internals.transaction(table)
    assert isinstance(tx, Transaction)
    first = tx.table_metadata
    assert tx.table_metadata is first  # nothing staged since: the same metadata, not another copy
    tx.set_properties({"a": "1"})
    staged = tx.table_metadata
    assert staged is not first and staged.properties["a"] == "1" and "a" not in first.properties
    head = table.current_snapshot().snapshot_id
    internals.stage_overwrite(tx, "ns.memo", expected_snapshot_id=head, removed=[], added=internals.write_data_files(
        table.io, tx.table_metadata, rows(3, 2).cast(SCHEMA.as_arrow())))
    new_head = tx.table_metadata.current_snapshot().snapshot_id
    assert new_head != head and tx.table_metadata.properties["a"] == "1"
    tx.commit_transaction()
    assert table.current_snapshot().snapshot_id == new_head and table.properties["a"] == "1"
    assert catalog.load_table("ns.memo").metadata == table.metadata  # the commit replaced the table's metadata
