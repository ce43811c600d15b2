"""(e) the fixed cost of a run: a tiny interval, a confirm-only rerun, and where the driver stops paying.

Per size (row changes over 2 tables, default 100 -- a tiny interval -- and larger ones to find
where Spark starts to pay for itself), each round, interleaved, on local[2]:

- ``bench/spark_alone.py``: spark-submit, start a context, one task per slot, stop -- the baseline;
- the apply job on a fresh clone of the landed interval with the pipeline's default
  ``driver_max_messages`` or the one given (an interval that small runs in the driver, Spark
  never starts; a larger value shows where Spark starts to pay for itself);
- the same with ``driver_max_messages = 0`` (always Spark: what every run paid before);
- the apply job again on the interval just applied: a confirm-only rerun (an operator clearing an
  old interval, a completed backfill), decided before Spark starts;
- ``confirm_if_done`` in this process: what the DAG's ``confirm_if_done`` task does for it.

Beside them, the Python driver's peak RSS of the measured run (what running in the driver costs).

Figures are medians over rounds, each beside Spark alone of the same round; load averages at
each round's start. Targets (issue 26): a tiny interval adds <= 3 s to Spark alone; a
confirm-only rerun <= 10 s.
"""

from __future__ import annotations

import shutil
import statistics
import time
from pathlib import Path
from typing import Any

import orjson

from bench.apply_tables import load_averages
from bench.archive import HOUR, T0, ArchiveBuilder, cached_archive, clone_archive, pipeline_config, pipeline_document
from bench.jobs import JobFailed, JobRun, mib, submit_apply, submit_spark_alone
from cdc_codecs import RowChange, Watermark, get_encoder
from spark.config import load_pipeline_config
from spark.demo.workload import Workload, WorkloadSpec

PROTOCOL = "canal-json"
MASTER = "local[2]"
TABLES = 2
CONF = {"spark.ui.showConsoleProgress": "false"}


def build_archive(root: Path, events: int, partitions: int) -> dict[str, Any]:
    """One landed interval: ``events`` row changes over ``TABLES`` tables, then a watermark."""
    builder = ArchiveBuilder(pipeline_config(root, protocol=PROTOCOL), partitions)
    workload = Workload(WorkloadSpec(tables=TABLES, events=events, seed=5, key_space=max(50, events // 4), alter=False))
    changes = list(workload.events())
    changes.append(Watermark(workload._next_ts(), workload._pos()))
    records = get_encoder(PROTOCOL).encode_all(changes, partitions)
    builder.add(records, T0)
    builder.close_interval(T0, T0 + HOUR)
    return {"row_changes": sum(isinstance(e, RowChange) for e in changes), "messages": len(records)}


def _apply(run_dir: Path, expect: str, conf: dict[str, str]) -> JobRun:
    """The apply job over ``run_dir``'s interval, which must say ``W <w> <expect>`` (published or confirmed)."""
    run = submit_apply(run_dir / "pipeline.json", T0, T0 + HOUR, MASTER, conf={**CONF, **conf})
    if run.returncode or f" {expect} (previous W" not in run.tail:
        raise JobFailed(f"apply over {run_dir} exited {run.returncode}, expected W ... {expect}:\n{run.tail}")
    return run


def _fresh(archive: Path, run_dir: Path, driver_max_messages: int | None) -> None:
    """A clone of ``archive`` at ``run_dir`` with its pipeline file (``driver_max_messages`` None: the default)."""
    clone_archive(archive, run_dir)
    options = {} if driver_max_messages is None else {"driver_max_messages": driver_max_messages}
    (run_dir / "pipeline.json").write_bytes(orjson.dumps(pipeline_document(run_dir, protocol=PROTOCOL, **options)))


def main(sizes: list[int], partitions: int, repeat: int, workdir: Path, conf: dict[str, str],
         driver_max_messages: int | None = None) -> None:
    from spark.commit.apply import confirm_if_done
    from spark.tables import catalog as cat

    default = "the default" if driver_max_messages is None else f"{driver_max_messages:,}"
    print(f"(e) the fixed cost of a run: {TABLES} tables, {partitions} partitions, {MASTER}, apply job from spark-submit to "
          f"exit, driver_max_messages {default}; median of {repeat} interleaved rounds, each beside Spark alone", flush=True)
    print(f"    {'row changes':>11} {'messages':>9} {'Spark alone':>12} {'run':>9} {'ran in':>7} {'always Spark':>13} "
          f"{'run - alone':>16} {'confirm rerun':>14} {'DAG confirm':>12} {'run: driver RSS':>16}  load averages")
    run_dir = workdir / "runs" / "tiny"
    for events in sizes:
        params = {"events": events, "tables": TABLES, "partitions": partitions, "protocol": PROTOCOL}
        archive, facts = cached_archive(workdir, "tiny", params, lambda root: build_archive(root, events, partitions))
        alone, chosen, spark, confirm, dag, loads, where, peak = [], [], [], [], [], [], set(), []
        for _ in range(repeat):
            loads.append(load_averages())
            alone.append(submit_spark_alone(MASTER, {**CONF, **conf}).seconds)
            _fresh(archive, run_dir, driver_max_messages)
            run = _apply(run_dir, "published", conf)
            chosen.append(run.seconds)
            peak.append(run.python_driver_peak)
            where.add(run.report.get("ran_in", "?"))
            confirm.append(_apply(run_dir, "confirmed", conf).seconds)
            config = load_pipeline_config(str(run_dir / "pipeline.json"))
            started = time.perf_counter()
            if confirm_if_done(config, T0, T0 + HOUR) is None:
                raise JobFailed(f"confirm_if_done did not confirm the applied interval of {run_dir}")
            dag.append(time.perf_counter() - started)
            cat.close_catalogs()
            _fresh(archive, run_dir, 0)
            spark.append(_apply(run_dir, "published", conf).seconds)
            shutil.rmtree(run_dir)
        m = statistics.median
        print(f"    {facts['row_changes']:>11,} {facts['messages']:>9,} {m(alone):11.2f}s {m(chosen):8.2f}s "
              f"{'/'.join(sorted(where)):>7} {m(spark):12.2f}s {m(chosen) - m(alone):+15.2f}s {m(confirm):13.2f}s "
              f"{m(dag):11.2f}s {mib(int(m(peak))):>16}  {', '.join(loads)}", flush=True)
    print("    targets: a tiny interval adds <= 3 s to Spark alone (run - alone); a confirm-only rerun <= 10 s. "
          "'always Spark' is driver_max_messages = 0; where it beats 'run', the driver is given too much", flush=True)
