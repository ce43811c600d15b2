"""Interval-record retention: the archive's per-interval records go once no retained W needs them, and
every read of the retained range -- tags, replays, the change feed, reruns -- reads what it read before.

A generated history (``tests/spark/archive.run_history``) is applied interval by interval; maintenance
keeps the last two Ws with an archive horizon of a second, so the raw segments below the retained
checkpoints go and then the records of the intervals before the oldest retained W.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

import orjson
import pytest

from spark.archive import layout
from spark.archive.checkpoint import checkpoint_path, read_checkpoint
from spark.archive.floors import IntervalPruned, pruned_intervals
from spark.archive.land import land_interval
from spark.archive.manifest import list_manifests
from spark.archive.offsets import plan_path, snapshot_offsets
from spark.archive.storage import open_storage
from spark.commit.apply import apply_interval, confirm_if_done
from spark.commit.published import (
    announcement, published_watermarks, read_published, retained_watermarks, retired_watermarks,
)
from spark.config import MaintenanceConfig
from spark.maintain.interval_retention import prune_interval_records, prunable_prefix
from spark.core.watermark import watermark_datetime
from spark.maintain.run import maintain
from spark.query.changes import read_changes
from spark.query.read import read_pipeline

from tests.spark.archives import HOUR, T0, normalise, run_history
from .test_archive_retention import main_rows, rewind_to

pytestmark = pytest.mark.slow  # whole intervals, Spark or services: make test-fast leaves it out (docs/testing.md)

UTC = dt.timezone.utc
INTERVALS = 8
KEEP = 2


def read_all(config, w: int) -> dict:
    _, tables = read_pipeline(config, w)
    return {name: normalise(t.to_pylist()) for name, t in tables.items()}


def changes(config, w1: int, w2: int) -> dict:
    out = read_changes(config, w1, w2)
    return {name: sorted(map(repr, t.to_pylist())) for name, t in out.items()}


def interval(i: int) -> tuple[dt.datetime, dt.datetime]:
    return T0 + i * HOUR, T0 + (i + 1) * HOUR


@dataclasses.dataclass
class Setup:
    config: object
    storage: object
    marks: list[int]
    retained: list[int]
    now: dt.datetime
    first_kept: int  # the interval that first published the oldest retained W


@pytest.fixture
def setup(tmp_path) -> Setup:
    config, expected = run_history(tmp_path, "canal-json", seed=5, intervals=INTERVALS, partitions=2)
    for i, w, tables in expected:
        assert apply_interval(config, *interval(i)).watermark == w
    storage = open_storage(config.storage)
    marks = published_watermarks(storage, config.name)
    assert len(marks) >= KEEP + 2
    now = dt.datetime.now(UTC) + dt.timedelta(hours=2)
    keep = watermark_datetime(marks[-1]) - watermark_datetime(marks[-KEEP]) + dt.timedelta(milliseconds=1)
    policy = MaintenanceConfig(keep_all=keep, keep_hourly=dt.timedelta(0), keep_daily=dt.timedelta(0),
                               grace_period=dt.timedelta(0), target_file_size=1, archive_horizon=dt.timedelta(seconds=1))
    config = dataclasses.replace(config, maintenance=policy)
    doc = read_published(storage, config.name, marks[-KEEP])
    first_kept = [f"{layout.instant(s)}_{layout.instant(e)}" for s, e, _ in list_manifests(storage, config.name)].index(doc["interval"])
    assert first_kept >= 2, "the history must leave intervals before the oldest retained W"
    return Setup(config, storage, marks, marks[-KEEP:], now, first_kept)


def archive(s: Setup) -> list[str]:
    """The archive's objects, the lease's aside (every run takes the next epoch)."""
    return [p for p in s.storage.list(s.config.name) if "/lease/" not in p]


def snapshot_reads(s: Setup) -> dict:
    """Everything a user can ask of the retained range."""
    r = s.retained
    return {
        "tags": {w: read_all(s.config, w) for w in r},
        "changes": {(a, b): changes(s.config, a, b) for a in r for b in r if a < b},
        "from zero": changes(s.config, 0, r[-1]),
    }


def test_records_no_retained_w_needs_go_and_the_retained_range_reads_as_before(setup: Setup) -> None:
    s = setup
    config, storage = s.config, s.storage
    before = snapshot_reads(s)
    final = main_rows(config)
    lake_tables = layout.lake_tables_path(config.name, *interval(0))
    if not storage.exists(lake_tables):  # the history has no DROP DATABASE: the record such a run leaves
        storage.create(lake_tables, b'{"tables": []}')
    # A rerun of every retained interval confirms what it did before.
    reruns = {i: apply_interval(config, *interval(i)).report["watermark"] for i in range(s.first_kept, INTERVALS)}

    report = maintain(config, now=s.now)
    r = report.intervals
    assert report.retained == s.retained and r is not None
    prefix_end = interval(s.first_kept - 1)[1]
    assert r.before is not None and layout.parse_instant_name(r.before) <= prefix_end
    pruned = [i for i in range(INTERVALS) if interval(i)[1] <= layout.parse_instant_name(r.before)]
    assert pruned, "segments below the retained floors are gone, so their intervals' records go"
    kept_chain = [(st, e) for st, e, _ in list_manifests(storage, config.name)]
    assert kept_chain == [interval(i) for i in range(pruned[-1] + 1, INTERVALS)]
    for i in pruned:
        assert not storage.exists(checkpoint_path(config.name, *interval(i)))
        assert not storage.exists(layout.report_path(config.name, *interval(i), "apply"))
        assert not storage.exists(layout.lake_tables_path(config.name, *interval(i)))
    # Published records and markers of Ws below the first kept checkpoint's W go; the rest stay.
    first_w = read_checkpoint(storage, config.name, *interval(pruned[-1] + 1)).watermark
    assert r.first_watermark == first_w and pruned_intervals(storage, config.name)["watermark"] == first_w
    assert published_watermarks(storage, config.name) == [w for w in s.marks if w >= first_w]
    assert retired_watermarks(storage, config.name) == [w for w in s.marks if first_w <= w < s.retained[0]]
    assert retained_watermarks(storage, config.name) == s.retained
    assert r.records["manifests"] == len(pruned) and r.records["published"] == len([w for w in s.marks if w < first_w])

    # Tags, the change feed between retained Ws (and from 0), reruns and a replay read what they did.
    assert snapshot_reads(s) == before
    for i in range(pruned[-1] + 1, INTERVALS):
        result = apply_interval(config, *interval(i))
        assert result.report["watermark"] == reruns[i] and result.outcome == "confirmed"
        assert confirm_if_done(config, *interval(i)) is not None
    rewind_to(config, s.retained[0])
    assert apply_interval(config, *interval(INTERVALS - 1)).report.get("events_decoded", 0) > 0  # replayed
    assert main_rows(config) == final
    assert snapshot_reads(s) == before

    # An interval older than the retained history is refused clearly, by every step of a run.
    old = interval(pruned[0])
    for call in (lambda: apply_interval(config, *old), lambda: confirm_if_done(config, *old),
                 lambda: land_interval(config, *old), lambda: snapshot_offsets(config, *old),
                 lambda: announcement(config, *old)):
        with pytest.raises(IntervalPruned, match="older than the pipeline's retained history"):
            call()
    assert not storage.exists(plan_path(config.name, *old))

    # A second maintenance run has nothing left to delete and changes no read.
    again = maintain(config, now=s.now)
    assert again.intervals.objects == 0 or set(again.intervals.records) <= {"maintenance reports"}
    assert snapshot_reads(s) == before


def test_a_table_behind_every_kept_checkpoint_fails_clearly(setup: Setup) -> None:
    s = setup
    maintain(s.config, now=s.now)
    from spark.tables import catalog as cat
    from spark.tables.properties import WATERMARK

    for table in cat.pipeline_tables(cat.open_catalog(s.config), s.config):  # behind the oldest retained W
        table.transaction().set_properties({WATERMARK: str(s.marks[0])}).commit_transaction()
    with pytest.raises(IntervalPruned):
        apply_interval(s.config, *interval(INTERVALS - 1))


def test_dry_run_and_a_lost_lease_delete_nothing(setup: Setup) -> None:
    s = setup
    listing = archive(s)
    maintain(s.config, now=s.now, dry_run=True)
    assert archive(s) == listing

    class Lost(Exception):
        pass

    def lost() -> None:
        raise Lost

    maintain(dataclasses.replace(s.config, maintenance=dataclasses.replace(s.config.maintenance, archive_horizon=None)),
             now=s.now)  # retire and expire, without archive retention
    listing = archive(s)
    from spark.maintain.archive_retention import prune_archive
    from spark.maintain.run import _checkpoints

    kept = [cp for cp in _checkpoints(s.storage, s.config) if cp.watermark in s.retained]
    prune_archive(s.storage, s.config.name, retained_checkpoints=kept, horizon_seconds=1, now=s.now)
    listing = archive(s)
    with pytest.raises(Lost):
        prune_interval_records(s.storage, s.config.name, retained=s.retained, horizon_seconds=1, now=s.now, check=lost)
    assert archive(s) == listing
    assert pruned_intervals(s.storage, s.config.name) is None


def test_a_crash_half_way_is_finished_by_the_next_run(setup: Setup) -> None:
    s = setup
    before = snapshot_reads(s)
    clean = None

    class Crash(Exception):
        pass

    calls = {"n": 0}

    def crash_on_third() -> None:
        calls["n"] += 1
        if calls["n"] == 4:  # pruned.json written, reports and plans gone, checkpoints not yet
            raise Crash

    maintain(dataclasses.replace(s.config, maintenance=dataclasses.replace(s.config.maintenance, archive_horizon=None)),
             now=s.now)
    from spark.maintain.archive_retention import prune_archive
    from spark.maintain.run import _checkpoints

    kept = [cp for cp in _checkpoints(s.storage, s.config) if cp.watermark in s.retained]
    prune_archive(s.storage, s.config.name, retained_checkpoints=kept, horizon_seconds=1, now=s.now)
    with pytest.raises(Crash):
        prune_interval_records(s.storage, s.config.name, retained=s.retained, horizon_seconds=1, now=s.now,
                               check=crash_on_third)
    recorded = pruned_intervals(s.storage, s.config.name)
    assert recorded is not None
    # Meanwhile the pruned intervals are refused, and the retained range reads as before.
    with pytest.raises(IntervalPruned):
        apply_interval(s.config, *interval(0))
    assert snapshot_reads(s) == before
    clean = maintain(s.config, now=s.now).intervals
    assert clean.before == recorded["before"] and clean.records.get("manifests")
    chain = list_manifests(s.storage, s.config.name)
    assert chain[0][1] > layout.parse_instant_name(recorded["before"])
    assert not [p for p in s.storage.list(f"{s.config.name}/checkpoints")
                if layout.parse_manifest_name(p)[1] <= layout.parse_instant_name(recorded["before"])]
    assert snapshot_reads(s) == before


def test_the_prefix_stops_at_the_horizon_and_at_segments_above_the_floors(setup: Setup) -> None:
    s = setup
    # Nothing was pruned from the segments yet: no floors, so no interval's records can go.
    assert prunable_prefix(s.storage, s.config.name, s.retained, s.now) == []
    maintain(s.config, now=s.now)
    assert prunable_prefix(s.storage, s.config.name, s.retained, s.now) == []  # all gone already
    assert prunable_prefix(s.storage, s.config.name, [], s.now) == []


def test_maintenance_reports_older_than_the_horizon_go_but_the_newest_stays(setup: Setup) -> None:
    s = setup
    root = layout.pipeline_root(s.config.name)
    for hours in (30, 20, 10):
        s.storage.write(layout.maintenance_report_path(s.config.name, s.now - dt.timedelta(hours=hours)), b"{}")
    maintain(s.config, now=s.now)
    left = s.storage.list(f"{root}/reports/maintenance")  # the newest before the run stays, and the run's own
    assert left == [layout.maintenance_report_path(s.config.name, s.now - dt.timedelta(hours=h)) for h in (10, 0)]
    doc = orjson.loads(s.storage.read(left[-1]))
    assert doc["intervals"]["records"]["maintenance reports"] == 2


def test_a_later_run_prunes_further_as_the_oldest_retained_w_moves_on(setup: Setup) -> None:
    s = setup
    keep3 = watermark_datetime(s.marks[-1]) - watermark_datetime(s.marks[-3]) + dt.timedelta(milliseconds=1)
    wider = dataclasses.replace(s.config, maintenance=dataclasses.replace(s.config.maintenance, keep_all=keep3))
    first = maintain(wider, now=s.now).intervals
    second = maintain(s.config, now=s.now).intervals
    assert second.before is not None and (first.before is None or second.before > first.before)
    assert second.records.get("manifests") and second.first_watermark > (first.first_watermark or 0)
    assert retained_watermarks(s.storage, s.config.name) == s.retained
