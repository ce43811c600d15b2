"""Maintenance benchmark: many small runs into many tables, with maintenance every K runs vs without.

The same generated history (TiCDC Canal-JSON, --tables tables, --changes changes per run) is
applied run by run into two pipelines; one runs maintenance every --every runs. At the
baseline run (default: a fifth of the runs, the issue's run 100 of 500) and at the last run
both print, side by side: data files per table (at main's head), their average size, the
current metadata.json size per table, and the time of a count over all tables at the latest W
(median of --repeat); with the ratio of the last run to the baseline. Target: with maintenance,
files per table and metadata size stay flat (<= 1.2x) and the count time <= 1.2x.

The count at the latest W reads each table at its ``wm_<W>`` tag; compaction moves the tags on
a head to its ``replace`` snapshot, so right after maintenance the latest W reads the compacted
files. After the last run every table is compacted afresh and the count at the latest W is
timed in alternation (--repeat times each, medians) with the same count over the same rows at
main's compacted head: the issue's "query time <= 1.2x that on freshly compacted tables". Also printed: the data files that count reads per table, and what a metadata.json holds
(snapshots, tags, metadata-log entries), and the seconds per run of apply and of maintenance.

--without-runs stops the pipeline without maintenance early: its runs rewrite every file the
previous runs left (copy-on-write over ever more small files), so its run r costs about r times
its first, and 500 of them take hours. Its second row is then its last run, and so says the output.

Issue defaults: --runs 500 --changes 2000 --every 50. The defaults here are a quick run.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import itertools
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.archive import ArchiveBuilder
from cdc_codecs import get_encoder
from cdc_codecs.events import ProducerRecord
from spark.demo.workload import Workload, WorkloadSpec
from spark.tables import catalog as cat
from spark.commit.apply import apply_interval
from spark.config import MaintenanceConfig, PipelineConfig
from spark.tables.files import live_data_files
from spark.tables.internals import MAIN_BRANCH
from spark.runtime.runners import LocalRunner
from spark.maintain.compaction import compact_table
from spark.maintain.run import maintain as run_maintenance
from spark.commit.published import published_watermarks
from spark.query.read import View, open_view
from spark.archive.storage import Storage, open_storage
from spark.core.watermark import tag_name

UTC = dt.UTC
T0 = dt.datetime(2024, 1, 1, tzinfo=UTC)
RUN = dt.timedelta(minutes=15)
KEEP_WS = 8  # the last runs' Ws stay tagged; older ones are retired


def maintain(config: PipelineConfig, storage: Storage, target_file_size: int) -> None:
    """``tidelake maintain`` at the latest W's time, with a retention that keeps the last KEEP_WS
    Ws (whatever the generated commit times' spacing), then expiry, compaction and orphan
    cleanup (grace 0: nothing else runs here)."""
    times = [dt.datetime.fromtimestamp((w >> 18) / 1000, UTC) for w in sorted(published_watermarks(storage, config.name))]
    now = times[-1] + dt.timedelta(milliseconds=1)
    keep = now - times[max(0, len(times) - KEEP_WS)] + dt.timedelta(milliseconds=1)
    policy = MaintenanceConfig(keep_all=keep, keep_hourly=dt.timedelta(0), keep_daily=dt.timedelta(0),
                               grace_period=dt.timedelta(0), target_file_size=target_file_size)
    run_maintenance(dataclasses.replace(config, maintenance=policy), storage=storage, now=now)


@dataclass(frozen=True)
class Measure:
    files: float  # data files per table at main's head
    file_bytes: float  # their average size
    metadata_bytes: float  # current metadata.json per table
    count_seconds: float  # count over all tables at the latest W (median)
    latest_files: float = 0.0  # data files per table the count at the latest W reads (its tags' snapshots)
    snapshots: float = 0.0  # per table, in metadata.json
    tags: float = 0.0
    metadata_log: float = 0.0  # metadata-log entries per table (capped by write.metadata.previous-versions-max)


@dataclass(frozen=True)
class Fresh:
    """After the last run, every table compacted afresh: the count at the latest W and the same
    count over the same rows at main's compacted head, timed in alternation (medians)."""

    latest_seconds: float
    fresh_seconds: float
    files: float  # data files per table at the compacted head


@dataclass
class Arm:
    runs: int  # the last run applied
    measures: dict[int, Measure] = field(default_factory=dict)
    fresh: Fresh | None = None
    apply_seconds: list[float] = field(default_factory=list)  # per run
    maintain_seconds: list[float] = field(default_factory=list)  # per maintenance


class _HeadView(View):
    """The view at the latest W, each table read at main's head instead of its tag."""

    def snapshot_id(self, name: tuple[str, str]) -> int:
        return self.tables[name].metadata.snapshot_by_name(MAIN_BRANCH).snapshot_id


def count(config: PipelineConfig, at_head: bool = False) -> tuple[int, float]:
    """Rows over all tables at the latest W (``tidelake query --at latest``; ``read_pipeline``), and the seconds it took;
    ``at_head``: the same, each table read at main's head."""
    started = time.perf_counter()
    view = open_view(config, "latest")
    if at_head:
        view = _HeadView(view.config, view.watermark, view.tables)
    rows = sum(view.scan(name).num_rows for name in view.tables)
    return rows, time.perf_counter() - started


def measure(config: PipelineConfig, repeat: int) -> Measure:
    tables = cat.pipeline_tables(cat.open_catalog(config), config)
    files = [f for t in tables if t.current_snapshot() for f in live_data_files(t.io, t.current_snapshot())]
    metadata = [len(t.io.new_input(t.metadata_location)) for t in tables]
    w = max(published_watermarks(open_storage(config.storage), config.name))
    latest = [f for t in tables if t.snapshot_by_name(tag_name(w)) for f in live_data_files(t.io, t.snapshot_by_name(tag_name(w)))]
    times = [count(config)[1] for _ in range(repeat)]
    n = len(tables)
    return Measure(len(files) / n, sum(f.file_size_in_bytes for f in files) / max(1, len(files)), sum(metadata) / n,
                   statistics.median(times), len(latest) / n, sum(len(t.metadata.snapshots) for t in tables) / n,
                   sum(1 for t in tables for r in t.metadata.refs.values() if r.snapshot_ref_type == "tag") / n,
                   sum(len(t.metadata.metadata_log) for t in tables) / n)


def fresh_compaction(config: PipelineConfig, repeat: int, target_file_size: int) -> Fresh:
    """Compact every table's head afresh, then time the count at the latest W against the same count at the head.

    The tags stay where they were (``move_tags=False``): the count at the latest W reads what
    maintenance left, the count at the head the fresh compaction."""
    catalog = cat.open_catalog(config)
    for table in cat.pipeline_tables(catalog, config):
        compact_table(table, LocalRunner(), target_file_size=target_file_size, move_tags=False)
    tables = cat.pipeline_tables(catalog, config)
    files = sum(len(live_data_files(t.io, t.current_snapshot())) for t in tables if t.current_snapshot())
    latest, fresh = [], []
    for _ in range(repeat):
        rows, seconds = count(config)
        latest.append(seconds)
        rows_fresh, seconds = count(config, at_head=True)
        fresh.append(seconds)
        if rows_fresh != rows:
            raise AssertionError(f"{config.name}: {rows} rows at the latest W, {rows_fresh} at the compacted head")
    return Fresh(statistics.median(latest), statistics.median(fresh), files / len(tables))


def _config(root: Path, name: str) -> PipelineConfig:
    return PipelineConfig.from_mapping({
        "name": name, "kafka": {"bootstrap_servers": "unused:9092"},
        "topics": [{"name": "cdc", "protocol": "canal-json"}], "storage": {"url": str(root)},
    }, "bench")


def encode(args: argparse.Namespace) -> list[ProducerRecord]:
    """The whole history's records (both pipelines apply the same), encoded 10,000 events at a time.

    Each key and value is copied into a bytes object of its own size: orjson's keep the ~8 KiB
    buffer they were written into, which made the issue's 1M records take 8 GiB instead of 0.8.
    (Canal-JSON sends one row per message, so encoding in chunks gives the same records.)
    """
    spec = WorkloadSpec(tables=args.tables, events=args.runs * args.changes, seed=7, key_space=args.key_space,
                        watermark_every=max(1, args.changes // 4), alter=False)
    encoder, events, out = get_encoder("canal-json"), Workload(spec).events(), []
    while chunk := list(itertools.islice(events, 10_000)):
        out.extend(ProducerRecord(r.partition, _compact(r.key), _compact(r.value), r.headers)
                   for r in encoder.encode_all(chunk, 2))
    return out


def _compact(data: bytes | None) -> bytes | None:
    return None if data is None else bytes(memoryview(data))


def run(root: Path, args: argparse.Namespace, with_maintenance: bool, records: list[ProducerRecord] | None = None,
        runs: int | None = None) -> Arm:
    """Apply the first ``runs`` (default: all) of the history's ``args.runs`` runs into a pipeline at ``root``."""
    config = _config(root, "with" if with_maintenance else "without")
    archive = ArchiveBuilder(config, 2)  # the layout landing writes (as bench/apply.py)
    storage = archive.storage
    records = encode(args) if records is None else records
    per = len(records) // args.runs
    last = min(args.runs, runs or args.runs)
    arm = Arm(last)
    for r in range(1, last + 1):
        chunk = records[(r - 1) * per: r * per if r < args.runs else len(records)]
        start, end = T0 + (r - 1) * RUN, T0 + r * RUN
        archive.add(chunk, start)
        archive.close_interval(start, end)
        started = time.perf_counter()
        apply_interval(config, start, end, storage=storage)
        arm.apply_seconds.append(time.perf_counter() - started)
        if with_maintenance and r % args.every == 0:
            started = time.perf_counter()
            maintain(config, storage, args.target_file_size)
            arm.maintain_seconds.append(time.perf_counter() - started)
        if r in (args.baseline, last):
            arm.measures[r] = measure(config, args.repeat)
        if r % args.every == 0 or r == last:  # progress, on stderr: the table comes at the end
            print(f"{config.name}: run {r}/{last}, apply {_mean(arm.apply_seconds[-args.every:]):.2f} s/run over the last "
                  f"{min(r, args.every)}, {sum(arm.apply_seconds) / 60:.1f} min", file=sys.stderr, flush=True)
    arm.fresh = fresh_compaction(config, args.repeat, args.target_file_size)
    return arm


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def report(args: argparse.Namespace, arms: dict[str, Arm]) -> list[str]:
    without, with_ = arms["without"], arms["with"]
    b = args.baseline
    lines = [f"maintenance: {args.runs} runs x {args.changes} changes into {args.tables} tables, maintenance every {args.every}"]
    if without.runs != with_.runs:
        lines.append(f"  (without maintenance: stopped at run {without.runs} by --without-runs; its second row is run {without.runs})")
    last = with_.runs
    lines.append(f"{'':26}{'without':>14}{'with':>14}   ratio run {last}/run {b}: without  with")
    for name, unit, scale in (("files", "files/table", 1), ("file_bytes", "avg file KiB", 1024),
                              ("metadata_bytes", "metadata.json KiB", 1024), ("count_seconds", "count at latest s", 1),
                              ("latest_files", "files read at latest", 1), ("snapshots", "snapshots/table", 1),
                              ("tags", "tags/table", 1), ("metadata_log", "metadata-log entries", 1)):
        w0, w1 = getattr(without.measures[b], name), getattr(without.measures[without.runs], name)
        m0, m1 = getattr(with_.measures[b], name), getattr(with_.measures[last], name)
        lines.append(f"  {unit:<20} run {b:>3} {w0 / scale:14.2f}{m0 / scale:14.2f}")
        lines.append(f"  {'':<20} run {last:>3} {w1 / scale:14.2f}{m1 / scale:14.2f}   "
                     f"{w1 / w0 if w0 else 0:30.2f}{m1 / m0 if m0 else 0:6.2f}")
    fw, fm = without.fresh, with_.fresh
    assert fw is not None and fm is not None
    lines.append(f"  after a fresh compaction of every table (counts timed in alternation, median of {args.repeat}):")
    lines.append(f"  {'files/table':<28}{fw.files:14.2f}{fm.files:14.2f}")
    lines.append(f"  {'count at latest s':<28}{fw.latest_seconds:14.2f}{fm.latest_seconds:14.2f}")
    lines.append(f"  {'count, compacted head s':<28}{fw.fresh_seconds:14.2f}{fm.fresh_seconds:14.2f}   ratio latest/compacted: "
                 f"{fw.latest_seconds / fw.fresh_seconds if fw.fresh_seconds else 0:.2f}"
                 f"  {fm.latest_seconds / fm.fresh_seconds if fm.fresh_seconds else 0:.2f}")
    for label, arm in (("without", without), ("with", with_)):
        s = arm.apply_seconds
        lines.append(f"  {label}: apply {_mean(s):.2f} s/run (runs 1-{min(len(s), args.every)}: {_mean(s[:args.every]):.2f}, "
                     f"last {min(len(s), args.every)}: {_mean(s[-args.every:]):.2f}), {sum(s) / 60:.1f} min"
                     + (f"; maintenance {_mean(arm.maintain_seconds):.2f} s x {len(arm.maintain_seconds)}" if arm.maintain_seconds else ""))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench maintenance")
    parser.add_argument("--runs", type=int, default=50, help="runs (issue: 500)")
    parser.add_argument("--tables", type=int, default=10)
    parser.add_argument("--changes", type=int, default=200, help="changes per run over all tables (issue: 2000 each)")
    parser.add_argument("--key-space", type=int, default=5000, help="distinct keys per table")
    parser.add_argument("--every", type=int, default=10, help="maintenance every N runs (issue: 50)")
    parser.add_argument("--baseline", type=int, default=None, help="the run compared against (default: runs / 5)")
    parser.add_argument("--repeat", type=int, default=3, help="count timings per measurement (median)")
    parser.add_argument("--target-file-size", type=int, default=128 << 20)
    parser.add_argument("--without-runs", type=int, default=None,
                        help="stop the pipeline without maintenance after this many runs (default: --runs; it grows quadratic)")
    parser.add_argument("--year", action="store_true",
                        help="instead: one pipeline on a one-minute schedule for --runs runs (default 1440) with hourly "
                             "maintenance, measuring catalog tables, manifests, metadata.json, archive objects and plan "
                             "time as they go (bench/year.py)")
    parser.add_argument("--measure-every", type=int, default=120, help="with --year: measure every N runs")
    parser.add_argument("--ghost-every", type=int, default=30, help="with --year: gh-ost helper tables every N runs")
    parser.add_argument("--keep-hours", type=float, default=6.0,
                        help="with --year: keep the hourly Ws and the archive for this many hours (keep_hourly, archive_horizon)")
    args = parser.parse_args(argv)
    if args.year:
        from bench.year import simulate

        runs = args.runs if "--runs" in (argv or sys.argv) else 1440
        every = args.every if "--every" in (argv or sys.argv) else 60
        simulate(runs, every, args.measure_every, changes=3, ghost_every=args.ghost_every, keep_hours=args.keep_hours)
        return 0
    args.baseline = args.baseline or max(1, args.runs // 5)
    without_runs = min(args.runs, args.without_runs or args.runs)
    if without_runs < args.baseline:
        parser.error(f"--without-runs {without_runs} is before the baseline run {args.baseline}")
    records = encode(args)
    arms: dict[str, Arm] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, on in (("without", False), ("with", True)):
            arms[label] = run(Path(tmp) / label, args, on, records, without_runs if not on else None)
    for line in report(args, arms):
        print(line, flush=True)
    return 0
