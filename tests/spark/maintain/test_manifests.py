"""A head's manifests stay bounded by its live files: no run leaves a manifest every later snapshot carries.

pyiceberg 0.12's overwrite records the files it removes in a manifest of ``DELETED`` entries and
carries every manifest of the parent forward, so without ``internals._keep_live_manifests`` a
head after N runs lists N manifests that hold no live file, which every commit and every scan
reads and neither compaction nor expiry removes (``spark/tables/internals.py``).
"""

from __future__ import annotations

import pytest

from pyiceberg.table import Table

from spark.tables import internals
from spark.tables.files import live_data_files
from spark.runtime.runners import LocalRunner
from spark.maintain.compaction import compact_table

from .conftest import keyed_table, read_at, rows, upsert

pytestmark = pytest.mark.slow  # whole intervals, Spark or services: make test-fast leaves it out (docs/testing.md)


def dead_manifests(table: Table) -> list[str]:
    """Manifests of ``table``'s head that hold no live file and were written by an earlier snapshot."""
    head = table.current_snapshot()
    return [m.manifest_path for m in head.manifests(table.io)
            if not m.has_added_files() and not m.has_existing_files() and m.added_snapshot_id != head.snapshot_id]


def test_a_head_carries_no_manifest_of_an_earlier_runs_removed_files(catalog):
    table = keyed_table(catalog, runs=12)
    head = table.current_snapshot()
    assert dead_manifests(table) == []
    # at most one manifest per live file, plus this snapshot's manifest of the files it removed
    assert len(head.manifests(table.io)) <= len(live_data_files(table.io, head)) + 1
    own = [m for m in head.manifests(table.io) if m.added_snapshot_id == head.snapshot_id and m.deleted_files_count]
    assert own, "the snapshot that removes files keeps its own DELETED entries"


def test_the_manifests_stay_bounded_by_the_live_files_however_many_runs(catalog):
    table = keyed_table(catalog, runs=4)
    counts = []
    for i in range(4, 30):
        upsert(table, rows([i % 4, 1000 + i], f"w{i}"))  # rewrites one live file, adds one
        counts.append(len(table.current_snapshot().manifests(table.io)))
    live = len(live_data_files(table.io, table.current_snapshot()))
    assert max(counts) <= live + 1, counts


def test_compaction_leaves_a_head_of_its_own_manifests_and_the_same_rows(catalog):
    table = keyed_table(catalog, runs=12)
    before = read_at(table, table.current_snapshot().snapshot_id)
    report = compact_table(table, LocalRunner(), target_file_size=1 << 20)
    table = catalog.load_table("ns.t")
    head = table.current_snapshot()
    assert head.snapshot_id == report.snapshot_id
    assert {m.added_snapshot_id for m in head.manifests(table.io)} == {head.snapshot_id}
    assert len(head.manifests(table.io)) == 2  # the compacted file, the files it replaced (DELETED)
    assert read_at(table, head.snapshot_id) == before


def test_a_table_written_before_sheds_the_dead_manifests_at_its_next_overwrite(catalog, monkeypatch):
    monkeypatch.setattr(internals, "_keep_live_manifests", lambda producer, *rest: None)  # as tidelake wrote before
    table = keyed_table(catalog, runs=8)
    assert len(dead_manifests(table)) >= 6
    tags = {name: read_at(table, ref.snapshot_id) for name, ref in table.refs().items()}
    monkeypatch.undo()

    upsert(table, rows([1, 2, 3], "after"))

    assert dead_manifests(table) == []
    assert {name: read_at(table, ref.snapshot_id) for name, ref in table.refs().items() if name != "main"} == \
        {name: v for name, v in tags.items() if name != "main"}
    assert [r["name"] for r in read_at(table, table.current_snapshot().snapshot_id) if r["id"] in (1, 2, 3)] == \
        ["after-1", "after-2", "after-3"]


def test_a_heads_manifests_are_merged_at_commit_so_they_stay_few_however_many_runs(catalog):
    """Without compaction every run's new files stay live in a manifest of their own: past
    ``MANIFEST_MIN_MERGE_COUNT`` they are merged at commit, rows and tags unchanged."""
    table = keyed_table(catalog, runs=2)
    counts, tags = [], {}
    for i in range(2, 60):
        upsert(table, rows([10_000 + i, i % 2], f"w{i}"))  # a new key each run: a new live file each run
        counts.append(len(table.current_snapshot().manifests(table.io)))
        if i % 10 == 0:
            tags[table.current_snapshot().snapshot_id] = read_at(table, table.current_snapshot().snapshot_id)
    assert len(live_data_files(table.io, table.current_snapshot())) > 2 * internals.MANIFEST_MIN_MERGE_COUNT
    assert max(counts) <= internals.MANIFEST_MIN_MERGE_COUNT + 2, counts
    for snapshot_id, before in tags.items():
        assert read_at(table, snapshot_id) == before
    assert {r["id"] for r in read_at(table, table.current_snapshot().snapshot_id)} >= {10_000 + i for i in range(2, 60)}


def test_delete_manifests_of_merge_on_read_are_merged_too(catalog):
    table = keyed_table(catalog, runs=2, merge_on_read=True)
    counts = []
    for i in range(2, 50):
        upsert(table, rows([i % 7, 20_000 + i], f"m{i}"), merge_on_read=True)  # an update: a position delete each run
        head = table.current_snapshot()
        counts.append(sum(1 for m in head.manifests(table.io) if m.content.name == "DELETES"))
    assert max(counts) <= internals.MANIFEST_MIN_MERGE_COUNT + 1, counts
    got = read_at(table, table.current_snapshot().snapshot_id)
    assert len({r["id"] for r in got}) == len(got)  # every key once: the merged deletes still apply
    assert {r["name"] for r in got if r["id"] == 49 % 7} == {f"m49-{49 % 7}"}
