"""Maintenance end to end on a real history: retained tags read what they read, files only expired snapshots read go.

Each test applies a generated history (``tests/spark/archive.run_history``: four published Ws a
few milliseconds apart), then runs ``maintain`` with a policy that keeps the last two Ws
(``keep_all`` measured on the pipeline's clock, its newest W) and retires the first two.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import re
from pathlib import Path
from urllib.parse import urlparse

import orjson
import pytest

from spark.tables import catalog as cat
from spark.archive import layout
from spark.commit.apply import apply_interval
from spark.config import COPY_ON_WRITE, MERGE_ON_READ, MaintenanceConfig
from spark.tables.files import live_files
from spark.archive.lease import Lease, LeaseHeldError, current_lease
from spark.maintain.compaction import MAINTENANCE
from spark.maintain.expiry import snapshot_files
from spark.maintain.retention import RetentionPlan, retire_watermarks
from spark.maintain.run import STEPS, maintain
from spark.commit.published import published_watermarks, read_published, retained_watermarks, retired_watermarks
from spark.query.read import RetiredWatermark, read_pipeline, resolve_watermark
from spark.archive.floors import pruned_intervals
from spark.repair.run import repair
from spark.archive.storage import open_storage
from spark.core.watermark import tag_name, watermark_datetime

from tests.spark.archives import HOUR, T0, normalise, run_history

pytestmark = pytest.mark.slow  # whole intervals, Spark or services: make test-fast leaves it out (docs/testing.md)

UTC = dt.timezone.utc


class Crash(Exception):
    pass


@dataclasses.dataclass
class History:
    config: object
    marks: list[int]  # published Ws, ascending
    model: dict[int, dict]  # W -> the reference model's tables at W
    rows: dict[int, dict]  # W -> what read_pipeline read at W before maintenance

    def policy_at(self, now: dt.datetime, grace: dt.timedelta = dt.timedelta(hours=1), compact: bool = False):  # noqa: ANN201
        """The pipeline with a policy that, at ``now``, keeps the last two Ws and retires the others.

        Without ``compact`` the target file size is one byte, so no file is small and compaction
        leaves the tables alone (the counts of retention and expiry stay exact)."""
        clock = min(now, watermark_datetime(self.marks[-1]))  # ages count from the newest published W
        keep = clock - watermark_datetime(self.marks[-2]) + dt.timedelta(milliseconds=1)
        policy = MaintenanceConfig(keep_all=keep, keep_hourly=dt.timedelta(0), keep_daily=dt.timedelta(0), grace_period=grace,
                                   target_file_size=MaintenanceConfig.target_file_size if compact else 1)
        return dataclasses.replace(self.config, maintenance=policy)


def read_all(config, w: int) -> dict:  # noqa: ANN001
    _, tables = read_pipeline(config, w)
    return {name: normalise(t.to_pylist()) for name, t in tables.items()}


@pytest.fixture
def history(tmp_path: Path, request: pytest.FixtureRequest) -> History:
    """Copy-on-write unless a test asks for ``history`` with ``BOTH_MODES``: its tables then hold no
    delete files, and a one-byte target size leaves every file alone (the counts stay exact)."""
    mode = getattr(request, "param", COPY_ON_WRITE)
    config, expected = run_history(tmp_path, "canal-json", 3, 5, 2)
    config = dataclasses.replace(config, layout=dataclasses.replace(config.layout, write_mode=mode))
    model = {}
    for i, w, tables in expected:
        assert apply_interval(config, T0 + i * HOUR, T0 + (i + 1) * HOUR).watermark == w
        model[w] = tables
    marks = published_watermarks(open_storage(config.storage), config.name)
    assert len(marks) == 4
    rows = {w: read_all(config, w) for w in marks}
    for w in marks:  # the starting point: every tag reads the reference model
        assert rows[w] == {n: r for n, r in model[w].items() if r or n in rows[w]}
    return History(config, marks, model, rows)


def later() -> dt.datetime:
    """A ``now`` past every file's grace period (files were written in the last minutes)."""
    return dt.datetime.now(UTC) + dt.timedelta(hours=2)


def local(path: str) -> str:
    return urlparse(path).path if path.startswith("file:") else path


def tables(config) -> list:  # noqa: ANN001
    return cat.pipeline_tables(cat.open_catalog(config), config)


def assert_every_snapshot_readable(config) -> None:  # noqa: ANN001
    """Every file any remaining snapshot reads exists, and only ref targets remain (and the head a
    compaction replaced: its tags moved on, and it waits for the next run's expiry, so a reader
    that resolved a tag to it just before can finish)."""
    for t in tables(config):
        refs = {r.snapshot_id for r in t.metadata.refs.values()}
        head = t.current_snapshot()
        replaced = {head.parent_snapshot_id} if head and head.summary.get(MAINTENANCE) == "compaction" else set()
        assert {s.snapshot_id for s in t.metadata.snapshots} - replaced == refs, t.name()
        for path in snapshot_files(t.io, t.metadata.snapshots):
            assert os.path.exists(local(path)), path


def table_files_on_disk(config) -> set[str]:  # noqa: ANN001
    """Data, delete, manifest and manifest-list files in the tables' locations (not metadata.json)."""
    out = set()
    for t in tables(config):
        for root, _, names in os.walk(local(t.location())):
            out |= {os.path.join(root, n) for n in names if not n.endswith(".metadata.json")}
    return out


def referenced_on_disk(config) -> set[str]:  # noqa: ANN001
    return {local(p) for t in tables(config) for p in snapshot_files(t.io, t.metadata.snapshots)}


def assert_finished(h: History, config) -> None:  # noqa: ANN001
    """The end state of a complete maintenance run."""
    storage = open_storage(config.storage)
    assert retired_watermarks(storage, config.name) == h.marks[:2]
    assert retained_watermarks(storage, config.name) == h.marks[2:]
    for w in h.marks[:2]:
        assert read_published(storage, config.name, w)["retired"]["by"] == "maintenance"
        assert all(tag_name(w) not in t.metadata.refs for t in tables(config))
    by_uuid = {str(t.metadata.table_uuid): t for t in tables(config)}
    for w in h.marks[2:]:
        assert read_all(config, w) == h.rows[w]
        # W's record names the snapshot its tags read (compaction moves the tags on a head).
        for entry in read_published(storage, config.name, w)["tables"]:
            assert by_uuid[entry["uuid"]].snapshot_by_name(tag_name(w)).snapshot_id == entry["snapshot"], (w, entry)
    assert_every_snapshot_readable(config)
    # Nothing only expired snapshots read is left behind, and no journal is waiting.
    assert table_files_on_disk(config) == referenced_on_disk(config)
    assert storage.list(f"{layout.pipeline_root(config.name)}/maintenance") == []
    held = current_lease(storage, config.name)
    assert held is None or held.released


def test_retained_tags_read_what_they_read_retired_ws_fail_clearly_and_only_unread_files_go(history: History) -> None:
    h = history
    now = later()
    config = h.policy_at(now)
    before_files = table_files_on_disk(config)
    report = maintain(config, now=now)
    assert report.retired == h.marks[:2] and report.retained == h.marks[2:] and report.finished == []
    assert_finished(h, config)
    for t in report.tables:
        assert t.tags_removed == 2
        assert t.expiry.snapshots_expired == t.before.snapshots - t.after.snapshots > 0
        assert t.after.tags == 2 and t.after.files < t.before.files and t.after.bytes < t.before.bytes
        assert sum(t.expiry.files_deleted.values()) == t.before.files - t.after.files
    deleted = sum(sum(t.expiry.files_deleted.values()) for t in report.tables)
    assert len(before_files - table_files_on_disk(config)) == deleted
    doc = orjson.loads(open_storage(config.storage).read(report.path))
    assert doc["retired"] == h.marks[:2] and [t["name"] for t in doc["tables"]] == [t.name for t in report.tables]
    # Reading at a retired W, or at a time whose W is retired, fails naming the nearest retained W.
    for at in (h.marks[0], h.marks[1], h.marks[1] + 1):
        with pytest.raises(RetiredWatermark, match=rf"retired by the retention policy.*after it {h.marks[2]} "):
            resolve_watermark(config, at)
    with pytest.raises(RetiredWatermark):
        read_pipeline(config, h.marks[0])
    # A second run finds nothing to do.
    again = maintain(config, now=now)
    assert again.retired == [] and all(t.expiry.snapshots_expired == 0 for t in again.tables)
    assert_finished(h, config)


BOTH_MODES = pytest.mark.parametrize("history", [COPY_ON_WRITE, MERGE_ON_READ], indirect=True)


@BOTH_MODES
def test_maintenance_compacts_the_heads_and_every_retained_w_reads_as_before(history: History) -> None:
    h = history
    now = later()
    config = h.policy_at(now, compact=True)
    before = {t.name: t for t in maintain(config, now=now, dry_run=True).tables}
    report = maintain(config, now=now)
    compacted = [t for t in report.tables if t.compaction is not None and t.compaction.files_rewritten]
    assert compacted, "the history leaves small files in every table"
    by_name = {".".join(cat.upstream_name(t)): t for t in tables(config)}
    for t in compacted:
        assert t.compaction.files_written < t.compaction.files_rewritten
        assert before[t.name].compaction.files_rewritten == t.compaction.files_rewritten  # the dry run said so
        # The latest W's tag moved to the compacted head: a read at the latest W reads the compacted files.
        assert h.marks[-1] in t.compaction.moved and t.compaction.moved == before[t.name].compaction.moved
        table = by_name[t.name]
        assert table.snapshot_by_name(tag_name(h.marks[-1])).snapshot_id == t.compaction.snapshot_id
        assert table.current_snapshot().snapshot_id == t.compaction.snapshot_id
        assert not live_files(table.io, table.current_snapshot()).deletes  # merge-on-read's deletes fold in
    if config.layout.merge_on_read:
        assert any(t.compaction.deletes_removed for t in compacted), "the history's updates left delete files"
    for w in h.marks[2:]:
        assert read_all(config, w) == h.rows[w]
    assert_finished(h, config)
    doc = orjson.loads(open_storage(config.storage).read(report.path))
    assert all(t["compaction"]["files_rewritten"] >= 0 for t in doc["tables"]) and doc["orphans"] is not None


def test_a_retired_w_between_retained_ones_names_both_neighbours(history: History) -> None:
    h = history
    storage = open_storage(h.config.storage)
    plan = RetentionPlan(later(), {w: "keep_all" for w in (h.marks[0], *h.marks[2:])}, (h.marks[1],), ())
    with Lease(storage, h.config.name) as lease:
        result = retire_watermarks(h.config, storage, cat.open_catalog(h.config), plan, lease=lease)
    assert result.retired == [h.marks[1]] and set(result.tags_removed.values()) == {1}
    with pytest.raises(RetiredWatermark) as err:
        read_pipeline(h.config, h.marks[1])
    assert f"before it {h.marks[0]} (" in str(err.value) and f"after it {h.marks[2]} (" in str(err.value)
    assert read_all(h.config, h.marks[0]) == h.rows[h.marks[0]]


def test_files_younger_than_the_grace_period_are_kept_until_a_later_run(history: History) -> None:
    h = history
    now = dt.datetime.now(UTC)
    config = h.policy_at(now, grace=dt.timedelta(hours=1))
    before = table_files_on_disk(config)
    report = maintain(config, now=now)
    assert report.retired == h.marks[:2]
    assert all(t.expiry.snapshots_expired > 0 and sum(t.expiry.files_deleted.values()) == 0 for t in report.tables)
    assert sum(t.expiry.files_within_grace for t in report.tables) > 0
    assert table_files_on_disk(config) == before  # nothing deleted: every file is minutes old
    for w in h.marks[2:]:
        assert read_all(config, w) == h.rows[w]
    storage = open_storage(config.storage)
    assert storage.list(f"{layout.pipeline_root(config.name)}/maintenance")  # journaled for later
    # Two hours on, the next run deletes them (its policy keeps the same two Ws).
    later_now = now + dt.timedelta(hours=2)
    report = maintain(h.policy_at(later_now), now=later_now)
    assert report.retired == [] and sum(sum(t.expiry.files_deleted.values()) for t in report.tables) > 0
    assert_finished(h, config)


def test_a_dry_run_changes_nothing_and_predicts_the_real_run(history: History) -> None:
    h = history
    now = later()
    config = h.policy_at(now)
    storage = open_storage(config.storage)

    def state() -> tuple:
        archive = {p: storage.read(p) for p in storage.list(config.name) if "/lease/" not in p}
        return archive, table_files_on_disk(config), {str(t.name()): t.metadata_location for t in tables(config)}

    before = state()
    dry = maintain(config, now=now, dry_run=True)
    assert state() == before and dry.path is None
    assert dry.retired == h.marks[:2] and all(t.after is None for t in dry.tables)
    real = maintain(config, now=now)
    for d, r in zip(dry.tables, real.tables):
        assert (d.name, d.tags_removed, d.expiry.snapshots_expired) == (r.name, r.tags_removed, r.expiry.snapshots_expired)
        assert d.expiry.files_deleted == r.expiry.files_deleted and d.expiry.bytes_deleted == r.expiry.bytes_deleted


@BOTH_MODES
@pytest.mark.parametrize("crash_at", STEPS)
def test_a_crash_at_any_step_leaves_tables_readable_and_a_rerun_finishes(history: History, crash_at: str) -> None:
    h = history
    now = later()
    config = h.policy_at(now, compact=True)

    def fault(step: str) -> None:
        if step == crash_at:
            raise Crash(step)

    with pytest.raises(Crash):
        maintain(config, now=now, fault=fault)
    storage = open_storage(config.storage)
    for w in retained_watermarks(storage, config.name):  # whatever is still retained reads as before
        assert read_all(config, w) == h.rows[w]
    for w in retired_watermarks(storage, config.name):
        with pytest.raises(RetiredWatermark):
            read_pipeline(config, w)
    for t in tables(config):  # every snapshot still in the metadata can be read
        for path in snapshot_files(t.io, t.metadata.snapshots):
            assert os.path.exists(local(path)), (crash_at, path)
    rerun = maintain(config, now=now)
    # Ws the crashed run marked retired are finished by the rerun (their records and tags).
    marked = STEPS.index(crash_at) >= STEPS.index("retire:marked")
    assert rerun.retired == ([] if marked else h.marks[:2])
    assert rerun.finished == (h.marks[:2] if marked and STEPS.index(crash_at) < STEPS.index("retire:untagged") else [])
    assert_finished(h, config)


def records_name_the_tags(config) -> list[tuple]:  # noqa: ANN001
    """(W, table, snapshot in W's record, snapshot at its tag) wherever a retained W's record and tag disagree."""
    storage = open_storage(config.storage)
    by_uuid = {str(t.metadata.table_uuid): t for t in tables(config)}
    return [(w, e["table"], e["snapshot"], by_uuid[e["uuid"]].snapshot_by_name(tag_name(w)).snapshot_id)
            for w in retained_watermarks(storage, config.name) for e in read_published(storage, config.name, w)["tables"]
            if by_uuid[e["uuid"]].snapshot_by_name(tag_name(w)).snapshot_id != e["snapshot"]]


@pytest.mark.parametrize("seed", [3, 15], ids=["the-run-changes-the-compacted-table", "the-run-only-tags-it"])
def test_a_run_between_a_crashed_compaction_and_the_rerun_leaves_no_record_behind_its_tag(tmp_path: Path, seed: int) -> None:
    """Compaction moved the tags and crashed before the records followed; a run then tagged the
    compacted head with a newer W, or committed on top of it. The rerun still finds every stale
    record (found by a review: checking only the head's newest W missed both)."""
    config, expected = run_history(tmp_path, "canal-json", seed, 6, 2)
    # No file small while the history is written: the runs merge none, and compaction has files to bin.
    config = dataclasses.replace(config, maintenance=dataclasses.replace(config.maintenance, target_file_size=1))
    for i, w, _ in expected[:-1]:  # the last interval waits for after the crash
        assert apply_interval(config, T0 + i * HOUR, T0 + (i + 1) * HOUR).watermark == w
    marks = published_watermarks(open_storage(config.storage), config.name)
    h = History(config, marks, {}, {w: read_all(config, w) for w in marks})
    now = later()
    config = h.policy_at(now, compact=True)

    def fault(step: str) -> None:
        if step == "compaction:committed":
            raise Crash(step)

    with pytest.raises(Crash):
        maintain(config, now=now, fault=fault)
    assert records_name_the_tags(config)  # the crash left the moved tags' records behind
    assert apply_interval(config, T0 + 5 * HOUR, T0 + 6 * HOUR).outcome == "published"
    maintain(config, now=now)
    assert records_name_the_tags(config) == []
    # The new W moved the pipeline's clock on (ages count from the newest W): what is still retained reads as before.
    retired = set(retired_watermarks(open_storage(config.storage), config.name))
    assert set(marks[:2]) <= retired
    for w in marks[2:]:
        if w not in retired:
            assert read_all(config, w) == h.rows[w]
    assert_every_snapshot_readable(config)


def test_maintenance_and_apply_never_hold_the_lease_together(history: History) -> None:
    h = history
    now = later()
    config = h.policy_at(now)
    storage = open_storage(config.storage)
    with Lease(storage, config.name, owner="an apply run"):
        with pytest.raises(LeaseHeldError, match="an apply run"):
            maintain(config, now=now)
    assert retired_watermarks(storage, config.name) == []  # it stopped before changing anything
    seen = []

    def apply_meanwhile(step: str) -> None:
        if step == "expiry:committed" and not seen:
            with pytest.raises(LeaseHeldError):
                apply_interval(config, T0 + 4 * HOUR, T0 + 5 * HOUR)
            seen.append(step)

    maintain(config, now=now, fault=apply_meanwhile)
    assert seen == ["expiry:committed"]
    assert_finished(h, config)


@pytest.mark.parametrize("compact", [False, True], ids=["retire", "retire-and-compact"])
def test_runs_and_repair_after_retirement_leave_retired_ws_alone(history: History, compact: bool) -> None:
    h = history
    now = later()
    config = h.policy_at(now, compact=compact)
    maintain(config, now=now)
    # Rerunning an old interval whose W is retired confirms it: it is published, its tags are gone by policy.
    again = apply_interval(config, T0 + HOUR, T0 + 2 * HOUR)
    assert again.outcome == "confirmed" and "retired by the retention policy" in again.report["note"]
    # Compaction's moved tags read what the archive derives: repair finds nothing to change.
    report = repair(config, dry_run=True)
    assert report.compared == h.marks[2:] and report.differences == []
    # The latest interval again: confirmed on the compacted heads.
    assert apply_interval(config, T0 + 3 * HOUR, T0 + 4 * HOUR).outcome == "confirmed"
    assert_finished(h, config)


def test_tidelake_maintain_prints_what_it_would_and_did_remove(history: History, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    from spark.cli.main import main

    h = history
    path = tmp_path / "shop.toml"
    path.write_text(f'name = "shop"\n[kafka]\nbootstrap_servers = "unused:9092"\n[[topics]]\nname = "cdc"\n'
                    f'protocol = "canal-json"\n[storage]\nurl = "{h.config.storage.url}"\n'
                    '[maintenance]\nkeep_all = "0s"\nkeep_hourly = "0s"\nkeep_daily = "0s"\ngrace_period = "0s"\n'
                    'archive_horizon = "1s"\n')
    capsys.readouterr()
    assert main(["maintain", "--config", str(path), "--dry-run"]) == 0
    dry = capsys.readouterr()
    assert "(dry run: nothing was changed)" in dry.out.splitlines()[0]
    assert "  watermarks: 1 retained, 3 to retire (" in dry.out and "would delete file://" in dry.out
    assert re.search(r"^  would compact 2 table\(s\): \d+ files into 2 bin\(s\); the tags of 1 W\(s\) move", dry.out, re.M)
    # Archive retention says what it would prune, and below which offsets (each retained W's replay floor).
    assert re.search(r"^  archive retention: would prune [1-9]\d* raw segment\(s\) \(.+\) and \d+ change-log file\(s\) "
                     r"\(.+\) below the retained Ws' replay floors \(cdc/0 @ [\d,]+, cdc/1 @ [\d,]+\)", dry.out, re.M), dry.out
    assert re.search(r"^  orphans: would delete \d+ table file\(s\)", dry.out, re.M)
    assert retired_watermarks(open_storage(h.config.storage), "shop") == []
    assert main(["maintain", "--config", str(path)]) == 0
    run = capsys.readouterr()
    lines = run.out.splitlines()
    assert "  watermarks: 1 retained, 3 retired (" in run.out and "deleted file://" in run.out
    pruned = re.search(r"^  archive retention: pruned ([1-9]\d*) raw segment\(s\)", run.out, re.M)
    assert pruned and pruned.group(1) == re.search(r"would prune (\d+) raw", dry.out).group(1), run.out
    assert re.search(r"^  compacted 2 table\(s\): \d+ files into 2; the tags of 1 W\(s\) move", run.out, re.M)
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["table", "snapshots"])
    rows = [line.split() for line in lines[header + 1:header + 3]]
    assert [r[0] for r in rows] == ["shop.t0", "shop.t1"] and all(r[2] == "3" for r in rows)  # three tags removed
    assert lines[-1].startswith("  report: shop/reports/maintenance/")
    for step in ("retire", "untag", "expire"):
        assert re.search(rf"^{step} .* (\d+)/\1 ", run.err, re.MULTILINE), (step, run.err)
    assert main(["watermarks", "--config", str(path)]) == 0
    listed = capsys.readouterr().out
    statuses = [re.search(r"  (retained|retired)  ", line).group(1) for line in listed.splitlines() if line.strip()[:1].isdigit()]
    # Archive retention pruned the records of the oldest retired Ws with their intervals' (interval_retention).
    pruned = (pruned_intervals(open_storage(h.config.storage), "shop") or {}).get("retired_watermarks_pruned", 0)
    assert statuses == ["retired"] * (3 - pruned) + ["retained"]
    assert listed.splitlines()[-1] == (f"shop: 1 retained, {3 - pruned} retired by the retention policy ([maintenance] keep_*)"
                                       + (f"; {pruned} older retired W(s) pruned with their intervals' records by archive "
                                          "retention" if pruned else ""))
    assert main(["query", "--config", str(path), "--at", str(h.marks[0]), "SELECT 1"]) == 1
    err = capsys.readouterr().err
    assert f"{h.marks[0]} (" in err and "retired by the retention policy" in err and f"after it {h.marks[3]} (" in err
