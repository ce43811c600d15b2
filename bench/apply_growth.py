"""(b) one change batch as a table grows: does the cost of a batch follow the batch or the table?

A batch is ``batch`` changes to distinct keys: 60% updates, 20% deletes, 20% inserts of new
keys (after the largest, as an auto-increment key grows). ``hot`` draws the updated and deleted
keys from the newest ``5 * batch`` live keys, ``uniform`` from every live key. At each table
size, ``repeat`` batches are applied one after another (each its own landed interval) by
``apply_interval`` with a SparkRunner on a warm local[2] context; the table grows between sizes
by appending generated rows straight to the Iceberg table the pipeline created, then compacting
it as the pipeline's maintenance does (``compaction.compact_table`` at the pipeline's target file
size), neither timed: growing millions of rows through the pipeline would dominate the benchmark,
and a table that grew 10x grew over many maintenance runs. Without the compaction each size's
batches also met the ~1M-row files of every earlier append (six at 5M rows, each a file opened,
its key column read and its delete file rewritten) and the files the earlier sizes' batches left.

Before anything is measured, the first mode's smallest size is applied ``WARM_UP_PASSES`` times,
each on its own copy, and thrown away (``warm_up``): a fresh context's first batches pay the JVM's
compilation of the shuffle and the Python workers' first tasks, ~0.1-0.3 s a batch here, which
would inflate the baseline and show growth below what it is.

The measured suite runs ``rounds`` times, each on a fresh copy, one after another in the same
context (only the first round's batches are listed): this machine is shared, and one batch of the
same work took 0.39 to 0.74 s from one suite to the next, so five batches a size decided little.
Per size: median seconds of all its batches over the rounds, its ratio to the smallest size (the
baseline, measured in the same run; the ratio of each round is printed too), and bytes written per batch / table bytes: the sum of ``added-files-size`` (data
and delete files) over the snapshots the batch committed, over ``total-files-size`` after it.
Each ``--write-modes`` entry runs the whole suite on a fresh copy of the archive; later modes'
seconds are also printed as a ratio to the first's at the same size.
Target (issue 12): growth <= 1.3x over a 10x larger table, hot and uniform.
"""

from __future__ import annotations

import random
import shutil
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from bench import rows
from bench.archive import HOUR, T0, ArchiveBuilder, cached_archive, clone_archive, pipeline_config
from bench.jobs import JobFailed
from cdc_codecs import Op, Watermark, get_encoder
from spark.tables import catalog as cat
from spark.commit.apply import apply_interval
from spark.maintain.compaction import compact_table
from spark.tables.properties import table_watermark
from spark.config import LayoutConfig
from spark.runtime.runners import SparkRunner
from spark.tables.schema_map import COMMIT_TS, OP
from spark.runtime.session import build_context

PROTOCOL = "canal-json"
TABLE = "grow"
SEED_CHUNK = 1_000_000  # rows per seeding append
# A fresh context's batches get cheaper over ~15 of them (the JVM compiling the shuffle's paths):
# fewer passes left the smallest size's measured batches 0.50-0.56 s against 0.38 after 30 others.
WARM_UP_PASSES = 3


def build_archive(root: Path, mode: str, sizes: list[int], batch: int, repeat: int, partitions: int) -> dict[str, Any]:
    """Intervals: the CREATE, then ``repeat`` batches per size; the seeding appends between them as steps."""
    builder = ArchiveBuilder(pipeline_config(root, protocol=PROTOCOL), partitions)
    encoder = get_encoder(PROTOCOL)
    clock = rows.Clock()
    rng = random.Random(f"{mode}-{batch}")
    interval = 0

    def land(events: list[Any]) -> int:
        nonlocal interval
        events.append(Watermark(clock.tick(), rows.POSITION))
        start = T0 + interval * HOUR
        builder.add(encoder.encode_all(events, partitions), start)
        builder.close_interval(start, start + HOUR)
        interval += 1
        return interval - 1

    steps: list[dict[str, Any]] = [{"apply": land([rows.create(TABLE, clock)])}]
    next_id, live, deleted = 0, 0, set()
    version = 1
    for size in sizes:
        if size > live:
            steps.append({"seed": [next_id, next_id + size - live]})
            next_id, live = next_id + size - live, size
        for _ in range(repeat):
            updates, deletes = batch * 6 // 10, batch * 2 // 10
            window = range(max(0, next_id - 5 * batch), next_id) if mode == "hot" else range(next_id)
            picked: list[int] = []
            seen: set[int] = set()
            while len(picked) < updates + deletes:
                k = rng.choice(window)
                if k not in deleted and k not in seen:
                    seen.add(k)
                    picked.append(k)
            inserts = list(range(next_id, next_id + batch - updates - deletes))
            changes = ([rows.change(Op.UPDATE, TABLE, k, version, clock) for k in picked[:updates]]
                       + [rows.change(Op.DELETE, TABLE, k, version, clock) for k in picked[updates:]]
                       + [rows.change(Op.INSERT, TABLE, k, version, clock) for k in inserts])
            rng.shuffle(changes)  # one batch, commit order interleaves the kinds
            changes = [c._replace(commit_ts=clock.tick()) for c in changes]
            deleted.update(picked[updates:])
            next_id += len(inserts)
            version += 1
            steps.append({"batch": land(changes), "size": size})
    return {"steps": steps}


def _bytes_rewritten(table: Any, before_sequence: int) -> tuple[int, int, int]:
    """(added-files-size summed over the snapshots after ``before_sequence``, total-files-size, data files replaced)."""
    added = replaced = 0
    for s in table.metadata.snapshots:
        if s.sequence_number > before_sequence and s.summary is not None:
            added += int(s.summary.get("added-files-size") or 0)
            replaced += int(s.summary.get("deleted-data-files") or 0)
    current = table.current_snapshot()
    return added, int(current.summary.get("total-files-size") or 0) if current and current.summary else 0, replaced


def _table(config: Any) -> Any:
    (table,) = cat.pipeline_tables(cat.open_catalog(config), config)
    return table


def _seed(config: Any, first: int, end: int, runner: SparkRunner) -> None:
    """Append rows ``first..end-1`` straight to the table, in its own schema, and compact it as the
    pipeline's maintenance would (not timed)."""
    for lo in range(first, end, SEED_CHUNK):
        table = _table(config)
        target = table.schema().as_arrow()
        data = rows.arrow_rows(lo, min(end, lo + SEED_CHUNK), 0)
        # As the pipeline writes rows: upstream columns, then the commitTs (the table's W) and the op.
        data = data.append_column(COMMIT_TS, pa.repeat(pa.scalar(table_watermark(table), pa.int64()), len(data)))
        data = data.append_column(OP, pa.repeat(pa.scalar(Op.INSERT.value, pa.string()), len(data)))
        table.append(data.select(target.names).cast(target))
    compact_table(_table(config), runner, target_file_size=config.maintenance.target_file_size)


def run_mode(mode: str, archive: Path, facts: dict[str, Any], run_dir: Path, buckets: int, runner: SparkRunner,
             write_mode: str, sizes: int | None = None, echo: bool = True) -> dict[int, list[tuple[float, float, int]]]:
    """Per size: (seconds, bytes written / table bytes, data files replaced) of each batch, each
    printed unless not ``echo``; ``sizes``: only the first that many sizes' batches."""
    clone_archive(archive, run_dir)
    config = pipeline_config(run_dir, protocol=PROTOCOL, buckets=buckets, write_mode=write_mode)
    out: dict[int, list[tuple[float, float, int]]] = {}
    for step in facts["steps"]:
        if sizes is not None and "seed" in step and len(out) == sizes:
            break
        if "seed" in step:
            _seed(config, *step["seed"], runner)
            continue
        i = step.get("apply", step.get("batch"))
        start = T0 + i * HOUR
        before = _table(config).metadata.last_sequence_number if "batch" in step else 0
        started = time.perf_counter()
        result = apply_interval(config, start, start + HOUR, runner=runner)
        took = time.perf_counter() - started
        if not result.watermark:
            raise JobFailed(f"{mode}: interval {i} published no watermark: {result.report}")
        if "batch" in step:
            added, total, replaced = _bytes_rewritten(_table(config), before)
            out.setdefault(step["size"], []).append((took, added / total if total else 0.0, replaced))
            if echo:
                print(f"      {mode} {step['size']:>12,} rows: batch {took:6.2f}s, wrote {added / 1e6:8.1f} MB "
                      f"of {total / 1e6:8.1f} MB, {replaced} data files replaced", flush=True)
    cat.close_catalogs()
    shutil.rmtree(run_dir)
    return out


def warm_up(mode: str, archive: Path, facts: dict[str, Any], run_dir: Path, buckets: int, runner: SparkRunner,
            write_mode: str, passes: int = WARM_UP_PASSES) -> None:
    """The smallest size's batches applied ``passes`` times, each on a fresh copy, and thrown away
    (see the module's docstring)."""
    t = time.perf_counter()
    seconds = [took for _ in range(passes) for took, _, _ in
               next(iter(run_mode(mode, archive, facts, run_dir, buckets, runner, write_mode, 1, False).values()))]
    print(f"    warm-up, not measured: the smallest size's {len(seconds) // passes} {mode} batches applied {passes} times in "
          f"{time.perf_counter() - t:.1f}s (first batch {seconds[0]:.2f}s, last {seconds[-1]:.2f}s)", flush=True)


def _median_seconds(batches: list[tuple[float, float, int]]) -> float:
    return statistics.median(t for t, _, _ in batches)


def main(sizes: list[int], batch: int, modes: list[str], partitions: int, repeat: int, buckets: int, workdir: Path,
         conf: dict[str, str], write_modes: Sequence[str] = (LayoutConfig.write_mode,), rounds: int = 1) -> None:
    print(f"(b) one {batch:,}-change batch (60% updates, 20% deletes, 20% inserts) as the table grows "
          f"{' -> '.join(f'{s:,}' for s in sizes)} rows; {partitions} partitions, layout.buckets={buckets}; "
          f"median of {repeat} batches per size in each of {rounds} rounds; apply_interval + SparkRunner on a warm local[2]",
          flush=True)
    context = build_context("tidelake-bench-growth", "local[2]", **{"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false", **conf})
    try:
        runner = SparkRunner(context)
        for i, mode in enumerate(modes):
            params = {"mode": mode, "sizes": sizes, "batch": batch, "repeat": repeat, "partitions": partitions, "protocol": PROTOCOL}
            t = time.perf_counter()
            archive, facts = cached_archive(workdir, f"growth-{mode}", params,
                                            lambda root, mode=mode: build_archive(root, mode, sizes, batch, repeat, partitions))
            print(f"    {mode} keys: archive ready in {time.perf_counter() - t:.1f}s ({archive.parent.name})", flush=True)
            if i == 0:
                warm_up(mode, archive, facts, workdir / "runs" / f"growth-{mode}", buckets, runner, write_modes[0])
            first: dict[int, float] = {}
            for write_mode in write_modes:
                measured: dict[int, list[tuple[float, float, int]]] = {}
                for r in range(rounds):
                    this = run_mode(mode, archive, facts, workdir / "runs" / f"growth-{mode}", buckets, runner, write_mode,
                                    echo=r == 0)
                    for size, batches in this.items():
                        measured.setdefault(size, []).extend(batches)
                    if rounds > 1:
                        print(f"    {mode} keys, {write_mode}, round {r + 1}: growth "
                              f"{_median_seconds(this[sizes[-1]]) / _median_seconds(this[sizes[0]]):.2f}x", flush=True)
                base = statistics.median(t for t, _, _ in measured[sizes[0]])
                later = write_mode != write_modes[0]
                print(f"    {mode} keys, {write_mode}: {'rows':>12} {'s/batch':>8} {'vs ' + format(sizes[0], ','):>14} "
                      f"{'written/table':>14} {'files replaced':>15}" + (f" {'vs ' + write_modes[0]:>22}" if later else ""))
                for size in sizes:
                    took = statistics.median(t for t, _, _ in measured[size])
                    share = statistics.median(b for _, b, _ in measured[size])
                    files = statistics.median(f for _, _, f in measured[size])
                    print(f"    {'':10} {size:>12,} {took:8.2f} {took / base:13.2f}x {share:14.3f} {files:15.0f}"
                          + (f" {took / first[size]:21.2f}x" if later else ""), flush=True)
                    if not later:
                        first[size] = took
                print(f"    {mode} keys, {write_mode}: growth {statistics.median(t for t, _, _ in measured[sizes[-1]]) / base:.2f}x "
                      f"over {sizes[-1] / sizes[0]:.0f}x the rows (target <= 1.3x)", flush=True)
    finally:
        context.stop()
