"""One maintenance run of a pipeline: retire watermarks, expire snapshots, delete their files.

``maintain(config)`` holds the pipeline's lease (``spark.archive.lease``, the one apply holds), so
maintenance and a run never write at once, and every commit checks the lease is still held.
Steps, each crash-safe on its own (a rerun finishes what a crashed run started):

1. **retire** (``retention``): the policy at ``now`` picks the Ws to retire; each is marked
   retired, its record says so, its tags leave every table.
2. **expire** (``expiry``): per table, the snapshots no ref points at are expired and the
   files only they read are deleted (journaled first; younger than the grace period: later).
3. **compact** (``compaction``): small data files of each table's head are bin-packed per
   bucket on the executors into files of ``target_file_size``, committed as one ``replace``
   that the head's watermark tags move to; then those Ws' published records name it.
4. **orphans** (``orphans``): files no metadata references, in the table locations and the
   archive, older than the grace period.
5. **archive** (``archive_retention``, only with ``archive_horizon``): raw and change-log
   segments no retained W needs for a replay. The W an isolated table is held at is retained
   (step 1), so the segments its replay reads stay. Then (``interval_retention``) the records of
   the oldest intervals no retained W, replay or change feed reads any more -- manifests, plans,
   checkpoints, reports, the published records and markers of their (retired) Ws -- and
   maintenance reports older than the horizon.

The report (files and bytes before/after per table, snapshots and tags expired, files deleted)
is written to ``<pipeline>/reports/maintenance/<now>.json`` and returned. A dry run takes the
lease, decides everything and changes nothing (no report is written either).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import orjson

from spark.tables import catalog as cat
from spark.archive import layout
from spark.config import PipelineConfig
from spark.runtime.runners import LocalRunner, Runner
from spark.archive.lease import Lease
from spark.commit.isolation import held_watermarks
from spark.maintain.archive_retention import ArchiveReport, prune_archive
from spark.maintain.compaction import MAINTENANCE, CompactionReport, compact_table
from spark.maintain.interval_retention import IntervalReport, prune_interval_records
from spark.maintain.dropped import DroppedReport, remove_dropped_tables
from spark.maintain.expiry import Footprint, TableExpiry, expire_table, footprint
from spark.maintain.orphans import OrphanReport, remove_orphans
from spark.archive.manifest import list_manifests
from spark.maintain.retention import RetireResult, plan_retention, retire_watermarks
from spark.commit.published import published_watermarks, record_snapshots, retired_watermarks
from spark.archive.storage import Storage, open_storage
from spark.core.watermark import watermark_tags, watermark_time

UTC = dt.timezone.utc

# The step boundaries ``fault`` is called at, in order (per table for the expiry ones).
STEPS = ("leased", "retire:marked", "retire:recorded", "retire:untagged", "expiry:journaled", "expiry:committed",
         "expiry:deleted", "expired", "compaction:committed", "compacted", "orphans", "archive", "intervals", "reported")


@dataclass
class TableReport:
    """One table before and after maintenance."""

    name: str
    uuid: str
    before: Footprint
    after: Footprint | None = None
    tags_removed: int = 0
    expiry: TableExpiry | None = None
    compaction: CompactionReport | None = None
    removed: bool = False  # a dropped table no retained W reads: removed from the catalog (spark.maintain.dropped)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "uuid": self.uuid, "removed": self.removed, "before": dataclasses.asdict(self.before),
                "after": dataclasses.asdict(self.after) if self.after else None, "tags_removed": self.tags_removed,
                "expiry": self.expiry.to_dict() if self.expiry else None,
                "compaction": _plain(self.compaction)}


@dataclass
class MaintenanceReport:
    pipeline: str
    now: dt.datetime
    dry_run: bool
    retained: list[int]  # the Ws readable after this run (in a dry run: that would be)
    retired: list[int]  # Ws this run retired (would retire)
    finished: list[int]  # Ws an earlier, crashed run retired, whose tags this run removed
    retired_before: int  # how many Ws were retired before this run
    tables: list[TableReport] = field(default_factory=list)
    seconds: float = 0.0
    path: str | None = None  # where the report was written (None in a dry run)
    orphans: OrphanReport | None = None
    archive: ArchiveReport | None = None
    intervals: IntervalReport | None = None  # the per-interval records archive retention deleted
    dropped: DroppedReport | None = None
    archive_kept: str | None = None  # why archive retention pruned nothing without running (None: it ran)

    def to_dict(self) -> dict[str, Any]:
        return {"step": "maintenance", "pipeline": self.pipeline, "now": self.now.isoformat(), "dry_run": self.dry_run,
                "retained": self.retained, "retired": self.retired, "finished": self.finished,
                "retired_before": self.retired_before, "tables": [t.to_dict() for t in self.tables],
                "orphans": _plain(self.orphans), "archive": _plain(self.archive),
                "intervals": _plain(self.intervals), "dropped": _plain(self.dropped),
                "seconds": self.seconds}


def maintain(
    config: PipelineConfig,
    *,
    dry_run: bool = False,
    runner: Runner | None = None,
    storage: Storage | None = None,
    catalog: Any = None,
    now: dt.datetime | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    fault: Callable[[str], None] | None = None,
) -> MaintenanceReport:
    """Run the pipeline's maintenance at ``now`` (default: the clock), holding its lease.

    ``now`` decides which Ws the policy retires and which files are within the grace period;
    the maintenance DAG passes its interval end, so a retried task decides the same.
    ``progress(step, done, total)`` reports ``retire`` (Ws), ``untag`` and ``expire`` (tables),
    ``delete`` (journals of a table). ``fault(step)`` is called at each step boundary (``STEPS``).

    Raises:
        LeaseHeldError: another run holds the pipeline's lease (after ``lease_wait_seconds``).
        LeaseLostError: the lease was taken from this run; it stops before its next commit.
    """
    started = time.perf_counter()
    storage = storage or open_storage(config.storage)
    catalog = catalog or cat.open_catalog(config)
    runner = runner or LocalRunner()  # the executors of compaction
    now = (now or dt.datetime.now(UTC)).astimezone(UTC)
    step = fault or (lambda at: None)
    report_progress = progress or (lambda s, d, t: None)
    policy = config.maintenance
    with Lease(storage, config.name, ttl_seconds=config.lease_ttl_seconds, wait_seconds=config.lease_wait_seconds,
               fence=cat.catalog_fence(catalog, config.name)) as lease:
        step("leased")
        tables = _tables(catalog, config)
        reports = {u: TableReport(cat.table_label(t), u, footprint(t)) for u, t in tables.items()}

        held = held_watermarks(storage, config.name)  # isolated tables replay from there
        plan = plan_retention(published_watermarks(storage, config.name), retired_watermarks(storage, config.name),
                              policy, now, held)
        retired: RetireResult = retire_watermarks(config, storage, catalog, plan, lease=lease, dry_run=dry_run, step=step,
                                                  progress=report_progress)
        by_name = {r.name: r for r in reports.values()}
        for name, n in retired.tags_removed.items():
            by_name[name].tags_removed = n

        tables = _tables(catalog, config)
        if not dry_run:  # records a crashed compaction left behind, before expiry drops the snapshots they name
            lease.check()
            _record_compacted_tags(storage, config.name, tables)
        report_progress("expire", 0, len(tables))
        for i, (uuid, table) in enumerate(sorted(tables.items(), key=lambda kv: reports[kv[0]].name)):
            if dry_run and retired.tags_removed.get(reports[uuid].name):
                table = _without_tags(table, plan)  # what expiry would see once the tags are gone
            reports[uuid].expiry = expire_table(config.name, storage, table, now=now, grace=policy.grace_period,
                                                lease=lease, dry_run=dry_run, step=step, progress=report_progress)
            report_progress("expire", i + 1, len(tables))
        step("expired")
        # Dropped tables (gh-ost/pt-osc helpers among them) no retained W reads leave the catalog.
        dropped = remove_dropped_tables(config, storage, catalog, retained=plan.retained_watermarks, check=lease.check,
                                        dry_run=dry_run)
        for label in dropped.removed:
            for r in reports.values():
                if r.name == label:
                    r.removed = True

        tables = _tables(catalog, config)
        report_progress("compact", 0, len(tables))
        for i, (uuid, table) in enumerate(sorted(tables.items(), key=lambda kv: reports[kv[0]].name)):
            reports[uuid].compaction = compact_table(table, runner, target_file_size=policy.target_file_size, dry_run=dry_run,
                                                     check=lease.check)
            if not dry_run:
                step("compaction:committed")
            report_progress("compact", i + 1, len(tables))
        if not dry_run:
            lease.check()
            _record_compacted_tags(storage, config.name, _tables(catalog, config))
        step("compacted")
        lease.check()
        orphans = remove_orphans(storage, list(_tables(catalog, config).values()), grace_seconds=policy.grace_period.total_seconds(),
                                 now=now, dry_run=dry_run, pipelines=(config.name,))
        step("orphans")
        archive = None
        # A table isolated in the pipeline's first interval (held at 0) replays from the start: nothing is pruned.
        archive_kept = ("archive_horizon is none" if policy.archive_horizon is None else
                        "a table isolated at W 0 replays from the first interval" if 0 in held else None)
        if archive_kept is None:
            lease.check()
            kept = [cp for cp in _checkpoints(storage, config) if cp.watermark in plan.retained]
            archive = prune_archive(storage, config.name, retained_checkpoints=kept,
                                    horizon_seconds=policy.archive_horizon.total_seconds(), now=now, dry_run=dry_run)
        step("archive")
        intervals = None
        if archive is not None:
            intervals = prune_interval_records(storage, config.name, retained=plan.retained_watermarks,
                                               horizon_seconds=policy.archive_horizon.total_seconds(), now=now,
                                               dry_run=dry_run, check=lease.check)
        step("intervals")

        for uuid, table in _tables(catalog, config).items():
            if uuid in reports:
                reports[uuid].after = footprint(table) if not dry_run else None
        retained = plan.retained_watermarks
        result = MaintenanceReport(config.name, now, dry_run, retained, list(plan.retire), retired.finished,
                                   len(plan.retired_before),
                                   sorted(reports.values(), key=lambda r: r.name), orphans=orphans, archive=archive,
                                   dropped=dropped, archive_kept=archive_kept, intervals=intervals)
        result.seconds = round(time.perf_counter() - started, 3)
        if not dry_run:
            lease.check()
            result.path = layout.maintenance_report_path(config.name, now)
            storage.write(result.path, orjson.dumps(result.to_dict(), option=orjson.OPT_INDENT_2))
        step("reported")
    return result


def _record_compacted_tags(storage: Storage, pipeline: str, tables: dict[str, Any]) -> None:
    """Every W tagged on a compaction snapshot: its record names that snapshot, table by table.

    Compaction moves the head's tags in its commit and the records follow. A crash in between
    leaves records naming the snapshot the tags left, and the runs after it may tag the
    compacted head with newer Ws (whose records are right) or commit past it: so every tag on
    every compaction snapshot is checked, not only the head's, and each record is read once.
    """
    wanted: dict[int, dict[str, int]] = {}  # W -> {table uuid: snapshot its tag points at}
    for uuid, table in tables.items():
        for w, snapshot_id in watermark_tags(table.metadata.refs).items():
            snapshot = table.metadata.snapshot_by_id(snapshot_id)
            if snapshot is not None and snapshot.summary is not None and snapshot.summary.get(MAINTENANCE) == "compaction":
                wanted.setdefault(w, {})[uuid] = snapshot_id
    for w, snapshots in sorted(wanted.items()):
        record_snapshots(storage, pipeline, w, snapshots)


def _plain(report: Any) -> Any:
    """A step's report dataclass as JSON-able values (paths listed only by a dry run)."""
    if report is None:
        return None
    return {k: (sorted(v) if isinstance(v, (set, frozenset)) else v) for k, v in dataclasses.asdict(report).items()
            if isinstance(v, (int, float, str, bool, list, tuple, dict, set, frozenset, type(None)))}


def _checkpoints(storage: Storage, config: PipelineConfig) -> list[Any]:
    from spark.archive.checkpoint import Checkpoint, checkpoint_path

    paths = [checkpoint_path(config.name, s, e) for s, e, _ in list_manifests(storage, config.name)]
    return [Checkpoint.from_json(storage.read(p), f"{storage.url}/{p}") for p in paths if storage.exists(p)]


def _tables(catalog: Any, config: PipelineConfig) -> dict[str, Any]:
    return {str(t.metadata.table_uuid): t for t in cat.pipeline_tables(catalog, config)}


def _without_tags(table: Any, plan: Any) -> Any:
    """A dry run's stand-in for ``table`` once retention removed its retired tags (metadata only, nothing committed)."""
    from pyiceberg.table import Table

    from spark.core.watermark import tag_name

    gone = {tag_name(w) for w in (*plan.retire, *plan.retired_before)}
    refs = {n: r for n, r in table.metadata.refs.items() if n not in gone}
    return Table(table.name(), table.metadata.model_copy(update={"refs": refs}), table.metadata_location, table.io,
                 table.catalog)


def summary_lines(report: MaintenanceReport) -> list[str]:
    """What a maintenance run did (a dry run: would do): watermarks retired, then a table of tables.

    Columns: snapshots before, tags and snapshots removed, files deleted and bytes freed, then
    every file any snapshot reads (data, delete, manifests, manifest lists) and their bytes, before and after.
    """
    from spark.core.text import human_bytes

    dry = report.dry_run
    lines = [f"maintain {report.pipeline} at {report.now.isoformat()}" + (" (dry run: nothing was changed)" if dry else "")]
    span = f" ({watermark_time(report.retired[0])} .. {watermark_time(report.retired[-1])})" if report.retired else ""
    lines.append(f"  watermarks: {len(report.retained):,} retained, {len(report.retired):,} "
                 f"{'to retire' if dry else 'retired'}{span}, {report.retired_before:,} retired before")
    if report.finished:
        lines.append(f"  finished retiring {len(report.finished):,} W(s) an earlier run left half-done")
    header = ("table", "snapshots", "-tags", "-snapshots", "-files", "freed", "files before", "after",
              "bytes before", "after")
    rows = [header]
    for t in report.tables:
        e, after = t.expiry, t.after
        rows.append((t.name, f"{t.before.snapshots:,}", f"{t.tags_removed:,}", f"{e.snapshots_expired if e else 0:,}",
                     f"{sum(e.files_deleted.values()) if e else 0:,}", human_bytes(e.bytes_deleted if e else 0),
                     f"{t.before.files:,}", f"{after.files:,}" if after else "-", human_bytes(t.before.bytes),
                     human_bytes(after.bytes) if after else "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for r in rows:
        lines.append("  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
    compacted = [t.compaction for t in report.tables if t.compaction and t.compaction.bins]
    if compacted:
        moved = sorted({w for c in compacted for w in c.moved})
        lines.append(f"  {'would compact' if dry else 'compacted'} {len(compacted):,} table(s): "
                     f"{sum(c.files_rewritten for c in compacted):,} files into "
                     + (f"{sum(c.bins for c in compacted):,} bin(s)" if dry else f"{sum(c.files_written for c in compacted):,}")
                     + (f"; the tags of {len(moved):,} W(s) move to the compacted heads" if moved else ""))
    if report.dropped and report.dropped.removed:
        lines.append(f"  {'would remove' if dry else 'removed'} {len(report.dropped.removed):,} dropped table(s) no retained W "
                     f"reads from the catalog ({', '.join(report.dropped.removed[:5])}"
                     f"{', ...' if len(report.dropped.removed) > 5 else ''}); {report.dropped.files_deleted:,} files deleted")
    young = sum(t.expiry.files_within_grace for t in report.tables if t.expiry)
    if young:
        lines.append(f"  {young:,} file(s) of expired snapshots are younger than the grace period: kept for a later run")
    for t in report.tables:
        for path in (t.expiry.sample if t.expiry else [])[:3]:
            lines.append(f"  {'would delete' if dry else 'deleted'} {path}")
    lines += _orphan_and_archive_lines(report)
    if report.path:
        lines.append(f"  report: {report.path}")
    return lines


def _orphan_and_archive_lines(report: MaintenanceReport) -> list[str]:
    """Orphan cleanup and archive retention: what went (would go), or why nothing could."""
    from spark.core.text import human_bytes

    dry, lines = report.dry_run, []
    o = report.orphans
    if o is not None:
        lines.append(f"  orphans: {'would delete' if dry else 'deleted'} {o.table_files:,} table file(s) ({human_bytes(o.table_bytes)}), "
                     f"{o.archive_files:,} archive file(s) ({human_bytes(o.archive_bytes)})"
                     + (f"; {o.young:,} younger than the grace period kept" if o.young else ""))
    a = report.archive
    if a is None:
        lines.append(f"  archive retention: nothing pruned ({report.archive_kept or 'not run'}): every raw and change-log "
                     "segment kept")
        return lines
    floors = ", ".join(f"{k} @ {v:,}" for k, v in sorted(a.floors.items())[:4]) + (", ..." if len(a.floors) > 4 else "")
    lines.append(f"  archive retention: {'would prune' if dry else 'pruned'} {a.segments:,} raw segment(s) "
                 f"({human_bytes(a.segment_bytes)}) and {a.changelog_files:,} change-log file(s) "
                 f"({human_bytes(a.changelog_bytes)}) below the retained Ws' replay floors"
                 + (f" ({floors})" if floors else "")
                 + (f"; {a.side_outputs_kept:,} last side output(s) kept" if a.side_outputs_kept else ""))
    for path in a.paths[:3]:
        lines.append(f"  would delete {path}")
    r = report.intervals
    if r is not None and r.before is not None:
        kinds = ", ".join(f"{n:,} {k}" for k, n in r.records.items()) or "nothing left to delete"
        lines.append(f"  interval records: {'would delete' if dry else 'deleted'} {r.objects:,} object(s) of intervals ending "
                     f"at or before {r.before} and Ws below {r.first_watermark} ({kinds})")
        for path in r.paths[:3]:
            lines.append(f"  would delete {path}")
    return lines
