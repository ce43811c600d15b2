"""Run ``spark/jobs/apply.py`` through ``spark-submit`` (client mode, the deploy path) and watch its memory.

The submitted process tree on local[N] is: spark-submit's JVM (the Spark driver, which in
local mode also hosts the executors), the Python driver it starts (the job's own code:
``apply_interval``, the commits), and PySpark's Python workers (the tasks). On a standalone
cluster the executors are JVMs the worker starts, with their Python workers below them: the
worker's tree is watched too (``executors_under``), and the driver's JVM is the driver alone.
A sampler thread reads every process's RSS every ``interval`` seconds with psutil and keeps
each role's peak, so "driver peak RSS" is measured, not inferred from the JVM's settings.
Around each job the machine's own CPU counters are read (``machine_cpu``): the core-seconds it
was busy and idle, which a process tree's own times miss (PySpark's workers are reaped by their
daemon, not by us) and which show how much of a run left a core waiting.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import psutil

from bench.archive import PIPELINE
from cdc_codecs import TidelakeError
from spark.archive import layout
from spark.runtime.session import submit_environment

REPO = Path(__file__).resolve().parents[1]
APPLY_JOB = REPO / "spark" / "jobs" / "apply.py"
SPARK_ALONE_JOB = REPO / "bench" / "spark_alone.py"
MIB = 1024 * 1024


class JobFailed(TidelakeError):
    """A submitted benchmark job exited non-zero."""


@dataclasses.dataclass
class JobRun:
    """One submitted job: wall time from spark-submit to exit (Spark start-up included) and peaks."""

    seconds: float
    returncode: int
    report: dict
    python_driver_peak: int = 0  # bytes: the Python process running the submitted script
    jvm_driver_peak: int = 0  # bytes: spark-submit's JVM (driver and, on local[N], executors)
    worker_peak: int = 0  # bytes: the largest Python worker
    workers_peak_total: int = 0  # bytes: all Python workers at once
    tail: str = ""
    executor_jvm_peak: int = 0  # bytes: the largest executor JVM (a standalone cluster's; 0 on local[N])
    busy_core_seconds: float = 0.0  # the machine's cores busy while the job ran (``machine_cpu``), every process's but ours
    idle_core_seconds: float = 0.0  # and idle: on N cores, busy + idle is N times the wall time

    @property
    def warm_seconds(self) -> float:
        """The job's apply_interval less its Spark start-up (the report's "start Spark" stage): what
        the peer's figure measures, its session started before its clock (bench/peer.py)."""
        return self.report["seconds"] - self.report.get("stage_seconds", {}).get("start Spark", 0.0)

    @property
    def driver_peak(self) -> int:
        return self.python_driver_peak + self.jvm_driver_peak


def machine_cpu(stat: str = "/proc/stat") -> tuple[float, float]:
    """(busy, idle) core-seconds of this machine since boot, from the kernel's first ``cpu`` line:
    busy is user, nice, system, irq and softirq time; idle is idle and iowait; steal (a
    hypervisor's other guests) is neither."""
    fields = [int(v) for v in Path(stat).read_text().split("\n", 1)[0].split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq = fields[:7]
    hz = os.sysconf("SC_CLK_TCK")
    return (user + nice + system + irq + softirq) / hz, (idle + iowait) / hz


class _Sampler(threading.Thread):
    def __init__(self, pids: list[int], interval: float, driver_script: Path) -> None:
        super().__init__(daemon=True)
        self.pids, self.interval, self.driver_script = pids, interval, str(driver_script)
        self.stop = threading.Event()
        self.python_driver = self.jvm = self.worker = self.workers_total = self.executor_jvm = 0

    def run(self) -> None:
        try:
            roots = [psutil.Process(pid) for pid in self.pids]
        except psutil.NoSuchProcess:
            return
        while not self.stop.is_set():
            try:
                procs = [p for root in roots for p in (root, *root.children(recursive=True))]
            except psutil.NoSuchProcess:
                return
            workers = 0
            for p in procs:
                try:  # a process may end between any two of these reads
                    rss = p.memory_info().rss
                    cmd = " ".join(p.cmdline())
                    name = p.name()
                except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                    continue
                if "org.apache.spark.deploy.worker.Worker" in cmd or "org.apache.spark.deploy.master.Master" in cmd:
                    continue  # the cluster's own daemons, there before and after the job
                if "CoarseGrainedExecutorBackend" in cmd:
                    self.executor_jvm = max(self.executor_jvm, rss)
                elif "java" in name or "org.apache.spark.deploy.SparkSubmit" in cmd:
                    self.jvm = max(self.jvm, rss)
                elif self.driver_script in cmd:
                    self.python_driver = max(self.python_driver, rss)
                elif "pyspark" in cmd or "python" in name:
                    self.worker = max(self.worker, rss)
                    workers += rss
            self.workers_total = max(self.workers_total, workers)
            self.stop.wait(self.interval)


def submit_apply(pipeline_file: Path, start: dt.datetime, end: dt.datetime, master: str, conf: dict[str, str] | None = None,
                 driver_memory: str | None = None, sample_every: float = 0.1, executors_under: int | None = None,
                 cores: int | None = None) -> JobRun:
    """``spark-submit --master <master> spark/jobs/apply.py --config ... --start ... --end ...``, timed and watched.

    ``executors_under``: the pid of a standalone worker, whose executors (and their Python
    workers) are sampled too. ``cores``: the whole process tree confined to that many of this
    machine's cores (``pinned``); None: every core."""
    run = _submit(APPLY_JOB, ["--config", str(pipeline_file), "--start", _iso(start), "--end", _iso(end)], master, conf,
                  driver_memory, sample_every, executors_under, cores)
    root = Path(orjson.loads(pipeline_file.read_bytes())["storage"]["url"])
    report_file = root / layout.report_path(PIPELINE, start, end, "apply")
    run.report = orjson.loads(report_file.read_bytes()) if report_file.exists() else {}
    return run


def submit_spark_alone(master: str, conf: dict[str, str] | None = None, cores: int | None = None) -> JobRun:
    """``spark-submit bench/spark_alone.py``: Spark's own start, one task per slot, stop; timed like an apply."""
    run = _submit(SPARK_ALONE_JOB, [], master, conf, cores=cores)
    if run.returncode:
        raise JobFailed(f"spark-submit {SPARK_ALONE_JOB.name} on {master} exited {run.returncode}:\n{run.tail}")
    return run


def _submit(script: Path, args: list[str], master: str, conf: dict[str, str] | None = None, driver_memory: str | None = None,
            sample_every: float = 0.1, executors_under: int | None = None, cores: int | None = None) -> JobRun:
    argv = [str(Path(sys.executable).parent / "spark-submit"), "--master", master]
    if driver_memory:
        argv += ["--driver-memory", driver_memory]
    for key, value in (conf or {}).items():
        argv += ["--conf", f"{key}={value}"]
    argv += [str(script), *args]
    # As tidelake starts spark-submit (session.submit_environment; the deploy's spark-defaults.conf likewise).
    env = {**submit_environment(os.environ), "PYTHONPATH": str(REPO), "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "TIDELAKE_SPARK_LOG_LEVEL": "ERROR"}
    cpu_before, own_before = machine_cpu(), time.process_time()
    started = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            preexec_fn=None if cores is None else pinned(cores))
    sampler = _Sampler([proc.pid] + ([executors_under] if executors_under else []), sample_every, script)
    sampler.start()
    output, _ = proc.communicate()
    seconds = time.perf_counter() - started
    busy, idle = (after - before for after, before in zip(machine_cpu(), cpu_before))
    busy -= time.process_time() - own_before  # not the sampler's own reads (this process runs on any core)
    sampler.stop.set()
    sampler.join()
    return JobRun(seconds, proc.returncode, {}, sampler.python_driver, sampler.jvm, sampler.worker,
                  sampler.workers_total, output.decode(errors="replace")[-3000:], sampler.executor_jvm, busy, idle)


def pinned(cores: int) -> Callable[[], None]:
    """A ``preexec_fn`` confining a child (and every process it starts: the JVM, the Python driver,
    PySpark's workers inherit it) to the first ``cores`` of this process's cores. local[1] on a
    machine of two cores is not a one-core run: its JVM, its Python driver and the OS take the
    other core while the one task slot works, so local[1] -> local[2] understates scale-out."""
    chosen = set(sorted(os.sched_getaffinity(0))[:cores])
    if len(chosen) < cores:
        raise JobFailed(f"{cores} cores asked for, this process may use {len(chosen)}")
    return lambda: os.sched_setaffinity(0, chosen)


def _iso(instant: dt.datetime) -> str:
    return instant.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


def mib(n: int) -> str:
    return f"{n / MIB:,.0f} MiB"
