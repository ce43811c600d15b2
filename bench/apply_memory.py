"""(c) the driver's memory in a run touching K keys over 10 tables.

One landed interval holds K inserts of distinct keys (K/10 per table, round-robin, after each
table's CREATE). ``spark-submit spark/jobs/apply.py`` applies it with ``--driver-memory 1g
--conf spark.driver.maxResultSize=64m`` (given to spark-submit, so they apply when the JVM
starts), watched by a sampler: the peak RSS of the Python driver, of the driver's JVM, of the
largest executor JVM and of the largest Python worker. ``--cluster local`` submits to local[2],
where the driver's JVM also hosts the executors (their shuffle and cache count as the
driver's); ``--cluster standalone`` starts a Spark standalone master and a worker (2 cores,
executors of ``spark.executor.memory`` = 2g) on 127.0.0.1 and submits to it, so the driver's
JVM is the driver alone.
Baseline, in the same run: the same job over 1,000 keys, so the ratio shows what grows with K.
Target (issue 12): the run completes; driver peak RSS <= 1 GiB.
"""

from __future__ import annotations

import shutil
import statistics
import time
from pathlib import Path
from typing import Any

import orjson

from bench import rows
from bench.archive import HOUR, T0, ArchiveBuilder, cached_archive, clone_archive, pipeline_config, pipeline_document
from bench.jobs import MIB, JobRun, mib, submit_apply
from cdc_codecs import Op, Watermark, get_encoder
from spark.runtime.embedded import StandaloneCluster, standalone_cluster

PROTOCOL = "canal-json"
GIB = 1024 * MIB
BASELINE_KEYS = 1000
CONF = {"spark.driver.maxResultSize": "64m", "spark.ui.showConsoleProgress": "false"}
DRIVER_MEMORY = "1g"
EXECUTOR_MEMORY = "2g"  # a standalone executor's heap; the worker offers 3g


def build_archive(root: Path, keys: int, tables: int, partitions: int) -> dict[str, Any]:
    builder = ArchiveBuilder(pipeline_config(root, protocol=PROTOCOL), partitions)
    encoder = get_encoder(PROTOCOL)
    clock = rows.Clock()
    names = [f"t{i}" for i in range(tables)]
    builder.add(encoder.encode_all([rows.create(t, clock) for t in names], partitions), T0)
    per_table = -(-keys // tables)
    chunk: list[Any] = []
    written = 0
    for k in range(per_table):
        for t in names:
            if written == keys:
                break
            chunk.append(rows.change(Op.INSERT, t, k, 1, clock))
            written += 1
        if len(chunk) >= 10_000:
            builder.add(encoder.encode_all(chunk, partitions), T0)
            chunk = []
    chunk.append(Watermark(clock.tick(), rows.POSITION))
    builder.add(encoder.encode_all(chunk, partitions), T0)
    builder.close_interval(T0, T0 + HOUR)
    return {"keys": written}


def run_job(archive: Path, run_dir: Path, buckets: int, conf: dict[str, str], cluster: StandaloneCluster | None = None) -> JobRun:
    """One apply of the archive's interval, on local[2] or on ``cluster``."""
    clone_archive(archive, run_dir)
    pipeline_file = run_dir / "pipeline.json"
    pipeline_file.write_bytes(orjson.dumps(pipeline_document(run_dir, protocol=PROTOCOL, buckets=buckets, driver_max_messages=0)))
    if cluster is None:
        run = submit_apply(pipeline_file, T0, T0 + HOUR, "local[2]", conf={**conf, **CONF}, driver_memory=DRIVER_MEMORY)
    else:
        run = submit_apply(pipeline_file, T0, T0 + HOUR, cluster.master_url,
                           conf={"spark.executor.memory": EXECUTOR_MEMORY, **conf, **CONF}, driver_memory=DRIVER_MEMORY,
                           executors_under=cluster.worker_pid)
    # A failed job's Python workers may still be writing while the directory goes.
    shutil.rmtree(run_dir, ignore_errors=True)
    return run


def _outcome(run: JobRun) -> str:
    if run.returncode == 0 and run.report.get("watermark"):
        return "completed"
    lines = [line for line in run.tail.splitlines() if "Error" in line or "rror:" in line]
    return f"FAILED (exit {run.returncode}): {(lines[-1] if lines else run.tail[-300:]).strip()[:300]}"


def main(keys: int, tables: int, partitions: int, repeat: int, buckets: int, workdir: Path, conf: dict[str, str],
         cluster: str = "local") -> None:
    if cluster == "standalone":
        with standalone_cluster(workdir / "cluster", cores=2, memory="3g") as standalone:
            _main(keys, tables, partitions, repeat, buckets, workdir, conf, standalone)
    else:
        _main(keys, tables, partitions, repeat, buckets, workdir, conf, None)


def _main(keys: int, tables: int, partitions: int, repeat: int, buckets: int, workdir: Path, conf: dict[str, str],
          cluster: StandaloneCluster | None) -> None:
    where = "local[2]" if cluster is None else f"a standalone cluster ({cluster.master_url}, executors {EXECUTOR_MEMORY})"
    print(f"(c) driver memory: one run touching {keys:,} keys over {tables} tables, spark-submit to {where} "
          f"--driver-memory {DRIVER_MEMORY} --conf spark.driver.maxResultSize=64m, layout.buckets={buckets}; "
          f"median of {repeat}; baseline: the same job over {BASELINE_KEYS:,} keys", flush=True)
    archives = {}
    for k in (BASELINE_KEYS, keys):
        t = time.perf_counter()
        params = {"keys": k, "tables": tables, "partitions": partitions, "protocol": PROTOCOL}
        archives[k], _ = cached_archive(workdir, "memory", params, lambda root, k=k: build_archive(root, k, tables, partitions))
        print(f"    {k:,} keys: archive ready in {time.perf_counter() - t:.1f}s ({archives[k].parent.name})", flush=True)
    runs: dict[int, list[JobRun]] = {BASELINE_KEYS: [], keys: []}
    for r in range(repeat):
        for k in (BASELINE_KEYS, keys):
            run = run_job(archives[k], workdir / "runs" / "memory", buckets, conf, cluster)
            runs[k].append(run)
            print(f"    round {r + 1}: {k:>12,} keys {run.seconds:7.2f}s {_outcome(run)}; Python driver {mib(run.python_driver_peak)}, "
                  f"driver JVM {mib(run.jvm_driver_peak)}, executor JVM {mib(run.executor_jvm_peak)}, "
                  f"largest worker {mib(run.worker_peak)}", flush=True)

    def med(k: int, attr: str) -> float:
        return statistics.median(getattr(j, attr) for j in runs[k])

    print(f"    {'peak RSS (median)':28} {f'{BASELINE_KEYS:,} keys':>12} {f'{keys:,} keys':>14} {'ratio':>7} {'vs 1 GiB':>9}")
    jvm = "driver JVM" if cluster else "JVM (driver + executors)"
    executors = (("largest executor JVM", "executor_jvm_peak"),) if cluster else ()
    for label, attr in (("Python driver", "python_driver_peak"), (jvm, "jvm_driver_peak"),
                        ("driver total (Python + JVM)", "driver_peak"), *executors, ("largest Python worker", "worker_peak")):
        base, big = med(BASELINE_KEYS, attr), med(keys, attr)
        print(f"    {label:28} {mib(int(base)):>12} {mib(int(big)):>14} {big / base if base else 0:6.2f}x {big / GIB:8.2f}")
    failed = sum(1 for j in runs[keys] if _outcome(j) != "completed")
    print(f"    {keys:,} keys: {len(runs[keys]) - failed} of {len(runs[keys])} runs completed; "
          f"wall {med(keys, 'seconds'):.1f}s; target: completes, Python driver peak <= 1 GiB", flush=True)
