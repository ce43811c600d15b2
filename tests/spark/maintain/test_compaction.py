"""Compaction: the head's rows and every tag read the same, with fewer files, per bucket, committed once."""

from __future__ import annotations

import os

import pyarrow.compute as pc
import pytest
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.transforms import BucketTransform
from pyiceberg.types import LongType

from spark.tables import internals
from spark.tables.errors import CommitConflictError, DeleteFilesPresent
from spark.tables.files import live_data_files, live_files
from spark.runtime.runners import LocalRunner
from spark.maintain.compaction import MAINTENANCE, compact_table

from .conftest import keyed_table, read_at, rows, upsert

pytestmark = pytest.mark.slow  # whole intervals, Spark or services: make test-fast leaves it out (docs/testing.md)

BUCKETED = PartitionSpec(PartitionField(source_id=1, field_id=1000, transform=BucketTransform(4), name="b"))
TARGET = 1 << 20


def tags(table) -> dict[str, int]:
    return {name: ref.snapshot_id for name, ref in table.refs().items() if name != "main"}


def local_path(uri: str) -> str:
    return uri.removeprefix("file://")


def test_compaction_keeps_the_head_rows_and_every_tag_and_reduces_files(catalog):
    table = keyed_table(catalog)
    head = table.current_snapshot()
    before_files = live_data_files(table.io, head)
    before_head = read_at(table, head.snapshot_id)
    before_tags = {name: read_at(table, sid) for name, sid in tags(table).items()}

    report = compact_table(table, LocalRunner(), target_file_size=TARGET)

    table = catalog.load_table("ns.t")
    after = table.current_snapshot()
    assert after.snapshot_id == report.snapshot_id and after.parent_snapshot_id == head.snapshot_id
    assert after.summary.operation.value == "replace" and after.summary[MAINTENANCE] == "compaction"
    assert read_at(table, after.snapshot_id) == before_head
    assert {name: read_at(table, sid) for name, sid in tags(table).items()} == before_tags
    files = live_data_files(table.io, after)
    assert len(before_files) > 5 and len(files) == 1 == report.files_after
    assert report.files_before == len(before_files) and report.files_rewritten == len(before_files)
    ids = internals.read_data_file(table.io, table.metadata, files[0]).column("id")
    assert ids.to_pylist() == sorted(ids.to_pylist())  # sorted by key: tight bounds


@pytest.mark.parametrize("spec", [None, BUCKETED], ids=["unpartitioned", "bucketed"])
def test_compaction_folds_merge_on_read_deletes_into_the_files_and_removes_them(catalog, spec):
    table = keyed_table(catalog, merge_on_read=True, **({"spec": spec} if spec else {}))
    head = table.current_snapshot()
    live = live_files(table.io, head)
    deleted = int(head.summary["total-position-deletes"])
    assert live.deletes and deleted > 0 and int(head.summary["total-delete-files"]) == len(live.delete_files)
    before_head = read_at(table, head.snapshot_id)
    before_tags = {name: read_at(table, sid) for name, sid in tags(table).items()}

    report = compact_table(table, LocalRunner(), target_file_size=TARGET)

    table = catalog.load_table("ns.t")
    after = table.current_snapshot()
    assert after.summary.operation.value == "replace" and report.deletes_removed == len(live.delete_files)
    assert (after.summary["removed-position-deletes"], after.summary["total-delete-files"],
            after.summary["total-position-deletes"]) == (str(deleted), "0", "0")
    assert int(after.summary["total-records"]) == len(before_head)
    assert not live_files(table.io, after).deletes
    assert read_at(table, after.snapshot_id) == before_head
    assert {name: read_at(table, sid) for name, sid in tags(table).items()} == before_tags


def test_a_large_file_with_deletes_is_rewritten_alone(catalog):
    table = keyed_table(catalog, runs=1, per_run=200)
    upsert(table, rows([1, 2, 3], "new"), merge_on_read=True)
    [big] = [f for f in live_data_files(table.io, table.current_snapshot()) if f.record_count == 200]
    report = compact_table(table, LocalRunner(), target_file_size=1)  # no file is small
    table = catalog.load_table("ns.t")
    assert report.deletes_removed == 1 and big.file_path not in {f.file_path for f in live_data_files(table.io, table.current_snapshot())}
    assert read_at(table, table.current_snapshot().snapshot_id) == sorted(
        [*rows(range(4, 200)).to_pylist(), {"id": 0, "name": "v0-0"}, *rows([1, 2, 3], "new").to_pylist()], key=lambda r: r["id"])


def test_compaction_leaves_tags_on_their_snapshots(catalog):
    table = keyed_table(catalog, runs=4)
    before = tags(table)
    compact_table(table, LocalRunner(), target_file_size=TARGET)
    assert tags(catalog.load_table("ns.t")) == before


def test_compaction_moves_the_watermark_tags_on_the_head_and_no_other_ref(catalog):
    table = keyed_table(catalog, runs=4)
    head = table.current_snapshot().snapshot_id
    older = table.snapshots()[0].snapshot_id
    table.manage_snapshots().create_tag(head, "wm_20").create_tag(head, "wm_21").create_tag(older, "wm_10").commit()
    table = catalog.load_table("ns.t")
    before = {name: read_at(table, sid) for name, sid in tags(table).items()}

    report = compact_table(table, LocalRunner(), target_file_size=TARGET)

    table = catalog.load_table("ns.t")
    assert report.moved == (20, 21)
    after = tags(table)
    assert after["wm_20"] == after["wm_21"] == report.snapshot_id == table.current_snapshot().snapshot_id
    assert after["wm_10"] == older and after["r3"] == head  # not a watermark tag on the head: stays
    assert {name: read_at(table, sid) for name, sid in after.items()} == before
    assert len(live_data_files(table.io, table.snapshot_by_name("wm_21"))) == report.files_after == 1


def test_compaction_without_moving_tags_leaves_every_tag(catalog):
    table = keyed_table(catalog, runs=4)
    head = table.current_snapshot().snapshot_id
    table.manage_snapshots().create_tag(head, "wm_20").commit()
    table = catalog.load_table("ns.t")
    report = compact_table(table, LocalRunner(), target_file_size=TARGET, move_tags=False)
    assert report.moved == () and report.snapshot_id is not None
    assert catalog.load_table("ns.t").refs()["wm_20"].snapshot_id == head


def test_compaction_bins_within_each_bucket(catalog):
    table = keyed_table(catalog, spec=BUCKETED, runs=8)
    before = read_at(table, table.current_snapshot().snapshot_id)
    buckets_before = {f.partition[0] for f in live_data_files(table.io, table.current_snapshot())}
    report = compact_table(table, LocalRunner(), target_file_size=TARGET)
    table = catalog.load_table("ns.t")
    files = live_data_files(table.io, table.current_snapshot())
    assert len(files) == len(buckets_before) == 4 and report.files_rewritten > len(files)
    bucket = BucketTransform(4).transform(LongType())
    for f in files:
        ids = internals.read_data_file(table.io, table.metadata, f).column("id").to_pylist()
        assert {bucket(i) for i in ids} == {f.partition[0]}
    assert read_at(table, table.current_snapshot().snapshot_id) == before


def test_small_target_makes_several_files_and_large_files_are_left_alone(catalog):
    table = keyed_table(catalog, runs=10)
    sizes = sorted(f.file_size_in_bytes for f in live_data_files(table.io, table.current_snapshot()))
    target = sizes[-1] * 3  # room for about three of the largest files per bin
    report = compact_table(table, LocalRunner(), target_file_size=target)
    assert 1 < report.files_written < report.files_rewritten
    again = compact_table(catalog.load_table("ns.t"), LocalRunner(), target_file_size=target, min_input_files=50)
    assert again.snapshot_id is None and again.bins == 0  # too few files per bin: nothing to gain


def test_dry_run_plans_and_changes_nothing(catalog):
    table = keyed_table(catalog, runs=5)
    head = table.current_snapshot().snapshot_id
    report = compact_table(table, LocalRunner(), target_file_size=TARGET, dry_run=True)
    assert report.snapshot_id is None and report.files_written == 0
    assert sum(len(b) for b in report.planned) == report.files_rewritten == report.files_before
    table = catalog.load_table("ns.t")
    assert table.current_snapshot().snapshot_id == head and len(table.metadata.snapshots) == 5


def test_a_head_that_moved_while_compacting_is_a_conflict_and_the_written_files_go(catalog):
    table = keyed_table(catalog, runs=5)
    head = table.current_snapshot().snapshot_id
    written: list[str] = []

    class Recording(LocalRunner):
        def map(self, fn, tasks):
            out = super().map(fn, tasks)
            written.extend(f.file_path for files in out for f in files)
            return out

    def another_run() -> None:
        upsert(catalog.load_table("ns.t"), rows([1, 2, 1000], "late"))

    with pytest.raises(CommitConflictError, match=f"expected snapshot {head}"):
        compact_table(table, Recording(), target_file_size=TARGET, check=another_run)
    table = catalog.load_table("ns.t")
    assert table.current_snapshot().snapshot_id != head and table.current_snapshot().summary.operation.value == "overwrite"
    assert written and not any(os.path.exists(local_path(p)) for p in written)
    got = table.scan().to_arrow()
    assert got.filter(pc.equal(got.column("id"), 1000)).num_rows == 1


def test_a_lease_check_that_fails_commits_nothing(catalog):
    from spark.archive.lease import LeaseLostError

    table = keyed_table(catalog, runs=3)
    head = table.current_snapshot().snapshot_id

    def lost() -> None:
        raise LeaseLostError("lease taken by another run")

    with pytest.raises(LeaseLostError):
        compact_table(table, LocalRunner(), target_file_size=TARGET, check=lost)
    assert catalog.load_table("ns.t").current_snapshot().snapshot_id == head


def test_a_crash_before_the_commit_leaves_the_table_readable_and_a_rerun_finishes(catalog):
    table = keyed_table(catalog, runs=6)
    head = table.current_snapshot().snapshot_id
    before = read_at(table, head)

    class Crash(Exception):
        pass

    class CrashingAfterWriting(LocalRunner):
        def map(self, fn, tasks):
            super().map(fn, tasks)
            raise Crash("driver died after the executors wrote")

    with pytest.raises(Crash):
        compact_table(table, CrashingAfterWriting(), target_file_size=TARGET)
    table = catalog.load_table("ns.t")
    assert table.current_snapshot().snapshot_id == head and read_at(table, head) == before
    report = compact_table(table, LocalRunner(), target_file_size=TARGET)
    table = catalog.load_table("ns.t")
    assert report.files_after == 1 and read_at(table, table.current_snapshot().snapshot_id) == before


def test_compaction_refuses_a_head_with_delete_files(catalog):
    table = keyed_table(catalog, runs=3)
    _commit_a_position_delete_file(catalog, table)
    table = catalog.load_table("ns.t")
    head = table.current_snapshot().snapshot_id
    with pytest.raises(DeleteFilesPresent, match="delete file"):
        compact_table(table, LocalRunner(), target_file_size=TARGET)
    assert catalog.load_table("ns.t").current_snapshot().snapshot_id == head


def test_an_empty_table_has_nothing_to_compact(catalog):
    from .conftest import SCHEMA

    table = catalog.create_table("ns.empty", schema=SCHEMA)
    report = compact_table(table, LocalRunner(), target_file_size=TARGET)
    assert (report.files_before, report.snapshot_id) == (0, None)


def _commit_a_position_delete_file(catalog, table) -> None:
    """What another engine's merge-on-read delete leaves: a snapshot with a delete manifest (pyiceberg
    writes none itself, so the snapshot is assembled from its public manifest writers)."""
    from pyiceberg.manifest import (
        DataFile,
        DataFileContent,
        FileFormat,
        ManifestContent,
        ManifestEntry,
        ManifestEntryStatus,
        ManifestWriterV2,
        write_manifest_list,
    )
    from pyiceberg.table.snapshots import Operation, Snapshot, Summary
    from pyiceberg.table.update import AddSnapshotUpdate, AssertRefSnapshotId, SetSnapshotRefUpdate
    from pyiceberg.typedef import Record

    class DeleteManifestWriter(ManifestWriterV2):
        def content(self) -> ManifestContent:
            return ManifestContent.DELETES

    metadata = table.metadata
    head = metadata.current_snapshot()
    snapshot_id, sequence = metadata.new_snapshot_id(), metadata.next_sequence_number()
    delete_file = DataFile.from_args(content=DataFileContent.POSITION_DELETES, file_path=f"{table.location()}/data/deletes.parquet",
                                     file_format=FileFormat.PARQUET, partition=Record(), record_count=1, file_size_in_bytes=100)
    delete_file.spec_id = metadata.default_spec_id
    writer = DeleteManifestWriter(metadata.spec(), metadata.schema(), table.io.new_output(f"{table.location()}/metadata/del-m0.avro"),
                                  snapshot_id, "gzip")
    with writer:
        writer.add(ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=snapshot_id, data_file=delete_file))
    manifest_list = f"{table.location()}/metadata/snap-{snapshot_id}-del.avro"
    with write_manifest_list(2, table.io.new_output(manifest_list), snapshot_id, head.snapshot_id, sequence, "gzip") as lw:
        lw.add_manifests([*head.manifests(table.io), writer.to_manifest_file()])
    snapshot = Snapshot(snapshot_id=snapshot_id, parent_snapshot_id=head.snapshot_id, sequence_number=sequence,
                        manifest_list=manifest_list, summary=Summary(Operation.DELETE), schema_id=metadata.current_schema_id)
    catalog.commit_table(table, (AssertRefSnapshotId(snapshot_id=head.snapshot_id, ref="main"),),
                         (AddSnapshotUpdate(snapshot=snapshot),
                          SetSnapshotRefUpdate(snapshot_id=snapshot_id, parent_snapshot_id=head.snapshot_id, ref_name="main", type="branch")))


def test_delete_files_left_naming_gone_files_are_dropped_by_the_next_compaction(catalog):
    """pyiceberg's own whole-table overwrite (what repair writes with) removes the data files and
    leaves their position deletes behind, naming files no longer live."""
    import warnings

    from pyiceberg.expressions import AlwaysTrue

    table = keyed_table(catalog, runs=3, merge_on_read=True)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Merge on read is not yet supported")
        table.overwrite(rows(range(5), "fresh"), AlwaysTrue())
    table.refresh()
    live = live_files(table.io, table.current_snapshot())
    assert live.dangling and len(live.dangling) == len(live.delete_files)
    upsert(table, rows([100], "x"))  # a second small file: something to compact
    report = compact_table(table, LocalRunner(), target_file_size=TARGET)
    table = catalog.load_table("ns.t")
    assert report.deletes_removed == len(live.dangling) and not live_files(table.io, table.current_snapshot()).deletes
    assert read_at(table, table.current_snapshot().snapshot_id) == [*rows(range(5), "fresh").to_pylist(), {"id": 100, "name": "x-100"}]


def test_delete_files_naming_gone_files_go_even_when_no_file_needs_compacting(catalog):
    """Found by review: with no bin to write, the dangling delete files stayed for good."""
    import warnings

    from pyiceberg.expressions import AlwaysTrue

    table = keyed_table(catalog, runs=2, merge_on_read=True)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Merge on read is not yet supported")
        table.overwrite(rows(range(5), "fresh"), AlwaysTrue())  # one data file: nothing to bin-pack
    table.refresh()
    dangling = live_files(table.io, table.current_snapshot()).dangling
    assert dangling
    report = compact_table(table, LocalRunner(), target_file_size=TARGET)
    table = catalog.load_table("ns.t")
    assert report.bins == 0 and report.deletes_removed == len(dangling)
    assert not live_files(table.io, table.current_snapshot()).deletes
    assert table.current_snapshot().summary["total-delete-files"] == "0"
    assert read_at(table, table.current_snapshot().snapshot_id) == rows(range(5), "fresh").to_pylist()


def test_compaction_runs_bins_of_at_most_driver_max_messages_rows_in_the_driver_and_larger_ones_on_spark(catalog):
    """The maintain job's runner starts Spark only for bins worth it (their input rows)."""
    from spark.runtime.runners import DriverFirstRunner

    from tests.spark.archive.test_land import CountingContext

    started: list[CountingContext] = []

    def start() -> CountingContext:
        started.append(CountingContext())
        return started[-1]

    table = keyed_table(catalog, runs=5)
    rows_in = sum(f.record_count for f in live_files(table.io, table.current_snapshot()).data)
    assert compact_table(table, DriverFirstRunner(start, rows_in), target_file_size=TARGET).files_written
    assert started == []
    table = keyed_table(catalog, name="u", runs=5)
    rows_in = sum(f.record_count for f in live_files(table.io, table.current_snapshot()).data)
    assert compact_table(table, DriverFirstRunner(start, rows_in - 1), target_file_size=TARGET).files_written
    assert len(started) == 1 and started[0].jobs == 1
