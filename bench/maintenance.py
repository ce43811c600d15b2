"""Maintenance benchmark: many small runs into many tables, with maintenance every K runs vs without.

The same generated history (TiCDC Canal-JSON, --tables tables, --changes changes per run) is
applied run by run into two pipelines; one runs maintenance every --every runs. At the
baseline run (default: a fifth of the runs, the issue's run 100 of 500) and at the last run
both print, side by side: data files per table (at main's head), their average size, the
current metadata.json size per table, and the time of a count over all tables at the latest W
(median of --repeat); with the ratio of the last run to the baseline. Target: with maintenance,
files per table and metadata size stay flat (<= 1.2x) and the count time <= 1.2x.

Issue defaults: --runs 500 --changes 2000 --every 50. The defaults here are a quick run.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cdc_codecs import get_encoder
from cdc_codecs.workload import Workload, WorkloadSpec
from spark import catalog as cat
from spark.apply import apply_interval
from spark.config import MaintenanceConfig, PipelineConfig
from spark.iceberg.files import live_data_files
from spark.maintain.run import maintain as run_maintenance
from spark.publish import published_watermarks
from spark.query import read_pipeline
from spark.storage import Storage, open_storage

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


def measure(config: PipelineConfig, repeat: int) -> Measure:
    tables = cat.pipeline_tables(cat.open_catalog(config), config)
    files = [f for t in tables if t.current_snapshot() for f in live_data_files(t.io, t.current_snapshot())]
    metadata = [len(t.io.new_input(t.metadata_location)) for t in tables]
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        _, read = read_pipeline(config, "latest")
        sum(t.num_rows for t in read.values())
        times.append(time.perf_counter() - started)
    return Measure(len(files) / len(tables), sum(f.file_size_in_bytes for f in files) / max(1, len(files)),
                   sum(metadata) / len(tables), statistics.median(times))


def _config(root: Path, name: str) -> PipelineConfig:
    return PipelineConfig.from_mapping({
        "name": name, "kafka": {"bootstrap_servers": "unused:9092"},
        "topics": [{"name": "cdc", "protocol": "canal-json"}], "storage": {"url": str(root)},
    }, "bench")


def run(root: Path, args: argparse.Namespace, with_maintenance: bool) -> dict[int, Measure]:
    from tests.spark.archive import ArchiveWriter  # the same layout landing writes (as bench/apply.py)

    config = _config(root, "with" if with_maintenance else "without")
    storage = open_storage(config.storage)
    writer = ArchiveWriter(config, storage, {"cdc": 2})
    spec = WorkloadSpec(tables=args.tables, events=args.runs * args.changes, seed=7, key_space=args.key_space,
                        watermark_every=max(1, args.changes // 4), alter=False)
    records = get_encoder("canal-json").encode_all(list(Workload(spec).events()), 2)
    per = len(records) // args.runs
    out: dict[int, Measure] = {}
    for r in range(1, args.runs + 1):
        chunk = records[(r - 1) * per: r * per if r < args.runs else len(records)]
        start, end = T0 + (r - 1) * RUN, T0 + r * RUN
        writer.interval(start, end, [("cdc", rec) for rec in chunk])
        apply_interval(config, start, end, storage=storage)
        if with_maintenance and r % args.every == 0:
            maintain(config, storage, args.target_file_size)
        if r in (args.baseline, args.runs):
            out[r] = measure(config, args.repeat)
    return out


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
    args = parser.parse_args(argv)
    args.baseline = args.baseline or max(1, args.runs // 5)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, on in (("without", False), ("with", True)):
            results[label] = run(Path(tmp) / label, args, on)
    b, last = args.baseline, args.runs
    print(f"maintenance: {args.runs} runs x {args.changes} changes into {args.tables} tables, maintenance every {args.every}")
    print(f"{'':26}{'without':>14}{'with':>14}   ratio run {last}/run {b}: without  with")
    for field, unit, scale in (("files", "files/table", 1), ("file_bytes", "avg file KiB", 1024),
                               ("metadata_bytes", "metadata.json KiB", 1024), ("count_seconds", "count at latest s", 1)):
        w0, w1 = getattr(results["without"][b], field), getattr(results["without"][last], field)
        m0, m1 = getattr(results["with"][b], field), getattr(results["with"][last], field)
        print(f"  {unit:<20} run {b:>3} {w0 / scale:14.2f}{m0 / scale:14.2f}")
        print(f"  {'':<20} run {last:>3} {w1 / scale:14.2f}{m1 / scale:14.2f}   {w1 / w0 if w0 else 0:30.2f}{m1 / m0 if m0 else 0:6.2f}")
    return 0
