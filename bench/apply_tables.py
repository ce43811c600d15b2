"""(d) many tables: one interval touching N tables, C changes each, through ``spark-submit`` on local[2].

The archive holds two intervals over N tables: the first creates every table (CREATE TABLE and C
inserts each), the second changes C keys of every table (inserts, updates -- some moving the key
-- and deletes). Each round, from a fresh clone of the archive: the first interval is applied
(timed: a run that creates N tables), then the second (timed: the measured run, every table
existing, every table touched), each ``spark-submit spark/jobs/apply.py`` from submit to exit;
then ``bench/spark_alone.py`` (Spark's own start, a task per slot, stop); then, with
``--peer-home``, the peer's end-to-end section (Spark 3.5 + Iceberg 1.10 ``MERGE INTO``, one per
table, over the same number of tables and events; ``../shared/peer/README.md``). What the driver
spends per table is the apply report's "commit and tag" stage over N.

Figures are medians over rounds, with the machine's load averages at each round's start.
Target (issue 26): 1,000 tables x 5 changes <= 60 s end to end on local[2].
"""

from __future__ import annotations

import shutil
import statistics
import time
from pathlib import Path
from typing import Any

import orjson

from bench.archive import HOUR, T0, ArchiveBuilder, cached_archive, clone_archive, pipeline_config, pipeline_document
from bench.jobs import JobFailed, JobRun, submit_apply, submit_spark_alone
from bench.peer import load_averages, run_peer
from cdc_codecs import RowChange, Watermark, get_encoder
from spark.demo.workload import Workload, WorkloadSpec

PROTOCOL = "canal-json"
MASTER = "local[2]"
# The peer pre-loads a few rows per table: our measured interval changes existing tables too.
PEER_BASE_ROWS = 5


def build_archive(root: Path, tables: int, changes: int, partitions: int) -> dict[str, Any]:
    """Two landed intervals: every table created with ``changes`` rows, then ``changes`` changes of every table."""
    builder = ArchiveBuilder(pipeline_config(root, protocol=PROTOCOL), partitions)
    encoder = get_encoder(PROTOCOL)
    workload = Workload(WorkloadSpec(tables=tables, seed=1, key_space=changes * 4, alter=False))
    names = list(workload.schemas)
    counts = []
    for i, first in enumerate((True, False)):
        events: list[Any] = list(workload.creates()) if first else []
        for _ in range(changes):  # round-robin: every table's changes spread over the interval
            events += [workload.change(t) for t in names]
        events.append(Watermark(workload._next_ts(), workload._pos()))
        builder.add(encoder.encode_all(events, partitions), T0 + i * HOUR)
        builder.close_interval(T0 + i * HOUR, T0 + (i + 1) * HOUR)
        counts.append(sum(isinstance(e, RowChange) for e in events))
    return {"row_changes": counts}


def _apply(archive: Path, run_dir: Path, interval: int, conf: dict[str, str]) -> JobRun:
    pipeline_file = run_dir / "pipeline.json"
    run = submit_apply(pipeline_file, T0 + interval * HOUR, T0 + (interval + 1) * HOUR, MASTER,
                       conf={"spark.ui.showConsoleProgress": "false", **conf})
    if run.returncode or not run.report.get("watermark") or run.report.get("outcome") != "published":
        raise JobFailed(f"apply of interval {interval} over {run_dir} exited {run.returncode} "
                        f"(outcome {run.report.get('outcome')}):\n{run.tail}")
    return run


def main(tables: int, changes: int, partitions: int, repeat: int, workdir: Path, conf: dict[str, str],
         peer_home: Path | None) -> None:
    params = {"tables": tables, "changes": changes, "partitions": partitions, "protocol": PROTOCOL}
    t = time.perf_counter()
    archive, facts = cached_archive(workdir, "tables", params, lambda root: build_archive(root, tables, changes, partitions))
    create_rows, change_rows = facts["row_changes"]
    print(f"(d) many tables: {tables:,} tables x {changes} changes ({change_rows:,} row changes in the measured interval; "
          f"the first creates the tables with {create_rows:,} rows), {partitions} partitions, {MASTER}; archive ready in "
          f"{time.perf_counter() - t:.1f}s ({archive.parent.name}); median of {repeat} interleaved rounds", flush=True)
    first: list[JobRun] = []
    second: list[JobRun] = []
    alone: list[float] = []
    peer: list[dict[str, Any]] = []
    loads: list[str] = []
    run_dir = workdir / "runs" / "tables"
    for r in range(repeat):
        loads.append(load_averages())
        clone_archive(archive, run_dir)
        (run_dir / "pipeline.json").write_bytes(orjson.dumps(pipeline_document(run_dir, protocol=PROTOCOL)))
        first.append(_apply(archive, run_dir, 0, conf))
        second.append(_apply(archive, run_dir, 1, conf))
        shutil.rmtree(run_dir)
        alone.append(submit_spark_alone(MASTER, {"spark.ui.showConsoleProgress": "false", **conf}).seconds)
        line = (f"    round {r + 1} (load {loads[-1]}): creating run {first[-1].seconds:.2f}s, measured run "
                f"{second[-1].seconds:.2f}s (commit and tag {second[-1].report['stage_seconds'].get('commit and tag', 0):.2f}s), "
                f"Spark alone {alone[-1]:.2f}s")
        if peer_home is not None:
            peer.append(run_peer(peer_home, tables, change_rows, PEER_BASE_ROWS))
            line += f", peer parse+dedup+MERGE {peer[-1]['total_s']:.2f}s (MERGE {peer[-1]['merge_s']:.2f}s)"
        print(line, flush=True)
    wall = statistics.median(j.seconds for j in second)
    inner = statistics.median(j.report["seconds"] for j in second)
    fixed = statistics.median(alone)
    print(f"    {'':52} {'seconds':>8} {'per table':>10}")
    print(f"    {'baseline: Spark alone (start, a task per slot, stop)':52} {fixed:8.2f}")
    print(f"    {'creating run (N CREATE TABLE), submit to exit':52} {statistics.median(j.seconds for j in first):8.2f} "
          f"{statistics.median(j.seconds for j in first) / tables:10.3f}")
    print(f"    {'measured run, submit to exit':52} {wall:8.2f} {wall / tables:10.3f}")
    print(f"    {'  beyond Spark alone':52} {wall - fixed:8.2f} {(wall - fixed) / tables:10.3f}")
    print(f"    {'  of which apply_interval (job report)':52} {inner:8.2f} {inner / tables:10.3f}")
    for stage in second[0].report.get("stage_seconds", {}):
        seconds = statistics.median(j.report["stage_seconds"].get(stage, 0.0) for j in second)
        print(f"    {'    ' + stage:52} {seconds:8.2f} {seconds / tables:10.3f}")
    if peer:
        total = statistics.median(p["total_s"] for p in peer)
        merge = statistics.median(p["merge_s"] for p in peer)
        print(f"    {'peer: parse + dedup + a MERGE per table (no start-up)':52} {total:8.2f} {total / tables:10.3f}")
        print(f"    {'  of which MERGE':52} {merge:8.2f} {merge / tables:10.3f}")
        warm = statistics.median(j.warm_seconds for j in second)
        print(f"    tidelake apply_interval less Spark's start / peer: {warm / total:.2f}x the time (per round: "
              + ", ".join(f"{j.warm_seconds / p['total_s']:.2f}" for j, p in zip(second, peer)) + ")")
    print(f"    load averages (1/5/15 min) at each round's start: {', '.join(loads)}; target: {tables:,} tables end to end "
          f"{'<=' if tables <= 1000 else 'vs'} 60 s: {'met' if wall <= 60 else 'not met'} ({wall:.1f} s)", flush=True)
