"""Apply benchmarks.

(a) throughput: N generated events over 10 tables (TiCDC Canal-JSON, 4 partitions) from
    raw segments to a published watermark, as events/s and as a ratio to the bare work of
    reading the same segments and parsing every message with orjson; with the driver's
    peak memory (max RSS).
(b) growth: the time to apply one batch of 20k changes as a table grows from S to 10*S
    rows, for hot keys (changes on the most recent keys) and uniform keys, as a ratio to
    the first measurement. Target: at most 2x growth for hot keys.
"""

from __future__ import annotations

import argparse
import datetime as dt
import multiprocessing
import random
import resource
import tempfile
import time
from decimal import Decimal
from pathlib import Path

import orjson
import pyarrow.parquet as pq

from cdc_codecs import Column, DdlChange, Op, RowChange, SourcePosition, TableSchema, Watermark, get_encoder
from cdc_codecs.types import parse_mysql_type
from cdc_codecs.workload import Workload, WorkloadSpec, create_sql
from spark.apply import apply_interval
from spark.config import PipelineConfig
from spark.storage import open_storage

UTC = dt.timezone.utc
T0 = dt.datetime(2024, 1, 1, tzinfo=UTC)
HOUR = dt.timedelta(hours=1)


def _config(root: Path, name: str) -> PipelineConfig:
    return PipelineConfig.from_mapping({
        "name": name, "kafka": {"bootstrap_servers": "unused:9092"},
        "topics": [{"name": "cdc", "protocol": "canal-json"}], "storage": {"url": str(root)},
    }, "bench")


def _writer(config: PipelineConfig, partitions: int):
    from tests.spark.archive import ArchiveWriter  # the same layout landing writes

    return ArchiveWriter(config, open_storage(config.storage), {"cdc": partitions})


def throughput(events: int, root: Path) -> None:
    config = _config(root / "throughput", "throughput")
    writer = _writer(config, 4)
    history = Workload(WorkloadSpec(tables=10, events=events, seed=1, key_space=max(1000, events // 20), watermark_every=1000)).events()
    records = get_encoder("canal-json").encode_all(history, 4)
    manifest = writer.interval(T0, T0 + HOUR, [("cdc", r) for r in records])
    del records
    storage = open_storage(config.storage)
    started = time.perf_counter()
    parsed = 0
    for p in manifest.partitions:
        for s in p.segments:
            for v in pq.read_table(storage.arrow_fs.open_input_file(storage.arrow_path(s.path)), columns=["value"]).column("value").to_pylist():
                orjson.loads(v)
                parsed += 1
    bare = time.perf_counter() - started
    # The driver's memory is measured in a fresh process, so generating the corpus above does not count.
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        took, rss, applied, watermark = pool.apply(_apply_in_fresh_process, (str(root / "throughput"),))
    print(f"(a) {applied:,} events over 10 tables -> published W {watermark}")
    print(f"    bare segment read + orjson.loads: {bare:7.2f}s  {parsed / bare:>10,.0f} msg/s   1.00")
    print(f"    apply_interval (in-process):      {took:7.2f}s  {applied / took:>10,.0f} events/s {bare / took:5.2f}")
    print(f"    driver peak RSS: {rss:,.0f} MiB (target <= 2048; the in-process runner decodes in the driver too)")


def _apply_in_fresh_process(root: str) -> tuple[float, float, int, int]:
    config = _config(Path(root), "throughput")
    started = time.perf_counter()
    result = apply_interval(config, T0, T0 + HOUR)
    took = time.perf_counter() - started
    return took, _peak_rss_mib(), result.report["events_decoded"], result.watermark


def _peak_rss_mib() -> float:
    """This process's peak RSS. Not ru_maxrss: Linux carries that over fork and exec from the parent."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


SCHEMA = TableSchema("bench", "grow", tuple(Column(n, parse_mysql_type(t), n != "id") for n, t in
                     [("id", "bigint"), ("v", "int"), ("s", "varchar(32)"), ("amount", "decimal(12,2)")]), ("id",))


def growth(start_rows: int, steps: int, batch: int, root: Path) -> None:
    types = SCHEMA.column_types
    pos = SourcePosition("cdc", 0, 0)
    for mode in ("hot", "uniform"):
        config = _config(root / f"growth-{mode}", f"growth-{mode}")
        writer = _writer(config, 1)
        encoder = get_encoder("canal-json")
        rng = random.Random(7)
        ts = [1 << 40]

        def tick() -> int:
            ts[0] += 1 << 18
            return ts[0]

        def row(i: int) -> dict:
            return {"id": i, "v": rng.randint(0, 1000), "s": f"row-{i}", "amount": Decimal(rng.randint(0, 10**6)).scaleb(-2)}

        size = 0
        interval = 0
        first = None
        print(f"(b) {mode} keys: apply {batch:,} changes as the table grows")
        for step in range(steps):
            target = start_rows * (step + 1)
            events = []
            if step == 0:
                events.append(DdlChange("bench", "grow", create_sql(SCHEMA), tick(), pos, "CREATE", None, SCHEMA))
            # Grow the table to the target size (not timed).
            events += [RowChange(Op.INSERT, "bench", "grow", None, row(i), ("id",), types, tick(), pos) for i in range(size, target)]
            events.append(Watermark(tick(), pos))
            writer.interval(T0 + interval * HOUR, T0 + (interval + 1) * HOUR, [("cdc", r) for r in encoder.encode_all(events, 1)])
            apply_interval(config, T0 + interval * HOUR, T0 + (interval + 1) * HOUR)
            interval += 1
            size = target
            # The measured batch: updates on recent keys (hot) or anywhere (uniform).
            keys = [size - 1 - rng.randrange(batch * 2) for _ in range(batch)] if mode == "hot" else [rng.randrange(size) for _ in range(batch)]
            changes = [RowChange(Op.UPDATE, "bench", "grow", {"id": k}, row(k), ("id",), types, tick(), pos) for k in keys]
            changes.append(Watermark(tick(), pos))
            writer.interval(T0 + interval * HOUR, T0 + (interval + 1) * HOUR, [("cdc", r) for r in encoder.encode_all(changes, 1)])
            started = time.perf_counter()
            apply_interval(config, T0 + interval * HOUR, T0 + (interval + 1) * HOUR)
            took = time.perf_counter() - started
            interval += 1
            first = first or took
            print(f"    {size:>12,} rows: {took:7.2f}s  growth {took / first:5.2f}x")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench apply")
    parser.add_argument("--events", type=int, default=1_000_000, help="(a) generated events")
    parser.add_argument("--start-rows", type=int, default=2_000_000, help="(b) first table size; it grows to 10x")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch", type=int, default=20_000)
    parser.add_argument("--only", choices=["throughput", "growth"], default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        if args.only in (None, "throughput"):
            throughput(args.events, Path(tmp))
        if args.only in (None, "growth"):
            growth(args.start_rows, args.steps, args.batch, Path(tmp))
    return 0
