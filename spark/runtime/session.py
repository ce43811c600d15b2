"""The one place tidelake's SparkContext is configured.

tidelake's jobs use Spark's core API only (Python tasks, one shuffle of packed Arrow rows), so
they start a SparkContext, not a SparkSession: on local[2] a session on top of the context took
3.4 s more to start (5.7 s -> 9.1 s), paid by every job and never used. ``SparkRunner`` also
takes a SparkSession, for callers that have one.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from collections.abc import Mapping
from typing import Any


# The JIT of a run's JVMs: C1 only (HotSpot's tiered compilation stopped at level 1). A run's JVMs
# live for one interval and do little of its work -- the Python workers decode, fold and write; the
# JVMs schedule tasks and move their bytes -- yet C2 compiled their hot paths on every core it could
# get. Measured 2026-11-30 over the throughput bench's 1M messages (3 interleaved runs each): on
# local[2], where the driver's JVM is the executor too, the apply job 14.35 s and 26.0 core-s busy
# with C2, 11.97 s and 20.4 with C1 only; on one core 25.3 -> 20.4 s; over 3M messages 27.9 -> 25.4 s;
# Spark alone (start, a task per slot, stop) 4.11 -> 3.48 s. On a standalone worker of 2 cores, the
# executor's JVM alone: 16.09 -> 14.95 s, 28.0 -> 24.9 core-s. C2 never paid back within a run.
# Each JVM gets it first among its options, so one of the user's own (-XX:TieredStopAtLevel=4 in
# spark.driver/executor.extraJavaOptions, or SPARK_SUBMIT_OPTS) comes after it and wins: the driver
# through ``submit_environment`` where tidelake starts spark-submit (PySpark's gateway, the
# benchmarks) and through deploy/spark/spark-defaults.conf's spark.driver.defaultJavaOptions for
# the DAG's (a driver's options are fixed before any code of ours runs); executors through DEFAULTS.
JIT = "-XX:TieredStopAtLevel=1"
SUBMIT_OPTS = "SPARK_SUBMIT_OPTS"  # the java options spark-submit puts first on the driver's command line


def submit_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` for a spark-submit tidelake starts (PySpark's gateway, the benchmarks' jobs):
    ``JIT`` before the options SPARK_SUBMIT_OPTS holds already, which follow it and win."""
    theirs = environ.get(SUBMIT_OPTS, "").strip()
    return {**environ, SUBMIT_OPTS: f"{JIT} {theirs}".strip()}


# Settings tidelake's jobs want unless spark-submit or the caller says otherwise.
DEFAULTS = {
    # Python workers talk to their executor over a Unix socket instead of loopback TCP:
    # measured 0.14 s -> 0.06 s for a job of 4 one-line Python tasks on local[2], which
    # is most of a landing task's overhead (one task per chunk).
    "spark.python.unix.domain.socket.enabled": "true",
    # Spark's console progress bar ("[Stage 0:> (0 + 1) / 2]", on stderr, redrawn with carriage returns)
    # garbles a task log and stands before a failure's one line; tidelake reports its own progress.
    "spark.ui.showConsoleProgress": "false",
    # A cluster's executors: C1 only (``JIT``). Prepended to spark.executor.extraJavaOptions by Spark.
    "spark.executor.defaultJavaOptions": JIT,
}

# On a local master the Python daemon imports PySpark from its installed package, not Spark's
# zip of sources (spark.runtime.pyspark_path): a job's first tasks start ~0.4 s sooner. Only
# there: a cluster's executors may not have tidelake installed (deploy/README.md ships it with
# --py-files, which a worker adds to its path after the daemon has started), and a daemon
# module they cannot import would fail every task.
LOCAL_DAEMON = {"spark.python.daemon.module": "spark.runtime.daemon"}


# Spark's log4j level when the caller asks for none: its own default, INFO, prints ~100 lines
# per job (and its shutdown lines) around the few a task log is read for.
QUIET_LOG_LEVEL = "WARN"


def build_context(app: str, master: str | None = None, *, log_level: str | None = None, **conf: str) -> Any:
    """A SparkContext whose Python workers run this interpreter unless told otherwise.

    On a cluster, spark-submit's ``--conf spark.pyspark.python=...`` (or PYSPARK_PYTHON)
    wins; locally the workers must import the same packages as the driver, so they run
    ``sys.executable``. ``DEFAULTS`` apply where neither spark-submit nor ``conf`` sets them.
    Spark logs at ``log_level`` when given, else at ``spark.log.level`` from spark-submit,
    else at WARN (``spark.log.level`` applies when the context starts, before its INFO lines).
    """
    load_pyspark()
    from pyspark import SparkConf, SparkContext

    # PySpark reads the worker interpreter from the environment when the context starts.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # Under spark-submit, SparkConf() holds what spark-submit was given (--conf, spark-defaults.conf).
    _start_gateway()
    spark_conf = SparkConf().setAppName(app)
    if master:
        spark_conf.setMaster(master)
    defaults = {**DEFAULTS, "spark.log.level": QUIET_LOG_LEVEL}
    if _local(master or spark_conf.get("spark.master", "")):
        defaults.update(LOCAL_DAEMON)
    if log_level:
        conf = {**conf, "spark.log.level": log_level.upper()}
    for key, value in defaults.items():
        if key not in conf and not spark_conf.contains(key):
            spark_conf.set(key, value)
    for key, value in conf.items():
        spark_conf.set(key, value)
    if _preloading_daemon(spark_conf):
        from spark.runtime import forkserver

        spark_conf.set(f"spark.executorEnv.{forkserver.SOCKET_ENV}", forkserver.start(_daemon_environment(spark_conf)))
    context = SparkContext.getOrCreate(spark_conf)
    if not (master or spark_conf.get("spark.master", "local")).startswith("local"):
        watch_executors(context)  # a cluster's workers can go away; a local master's executor is the driver
    return context


def _preloading_daemon(spark_conf: Any) -> bool:
    """Whether a context of ``spark_conf`` runs tidelake's local daemon with its preload, which a
    fork server can do ahead (``spark.runtime.forkserver``): not when the conf names another
    daemon module or none, turns the preload off (the benchmarks' Spark alone), or names a server."""
    from spark.runtime import forkserver
    from spark.runtime.preload import PRELOAD_ENV

    ours = LOCAL_DAEMON["spark.python.daemon.module"]
    env = "spark.executorEnv."
    return (_local(spark_conf.get("spark.master", "")) and spark_conf.get("spark.python.daemon.module", ours) == ours
            and spark_conf.get("spark.python.use.daemon", "true").lower() != "false"
            and spark_conf.get(env + PRELOAD_ENV, os.environ.get(PRELOAD_ENV)) != "0"
            and not spark_conf.contains(env + forkserver.SOCKET_ENV))


def _daemon_environment(spark_conf: Any) -> dict[str, str]:
    """What the local daemon will have of the variables the fork server's modules read at import
    (``forkserver.IMPORT_TIME_ENV``, ``services.SETTINGS``), as Spark sets them: the context's
    ``spark.executorEnv.*``, else the driver's environment (the JVM's, which the daemon inherits);
    PYTHONHASHSEED the driver's or 0 (PySpark's SparkContext); OMP_NUM_THREADS ``spark.task.cpus``
    unless set (Spark's Python runner)."""
    from spark.runtime.forkserver import IMPORT_TIME_ENV
    from spark.runtime.services import SETTINGS

    env = {}
    for name in (*IMPORT_TIME_ENV, *SETTINGS):
        value = spark_conf.get(f"spark.executorEnv.{name}", None)
        if value is None:
            value = os.environ.get(name)
        if value is not None:
            env[name] = value
    env["PYTHONHASHSEED"] = os.environ.get("PYTHONHASHSEED", "0")
    env.setdefault("OMP_NUM_THREADS", spark_conf.get("spark.task.cpus", "1"))
    return env


def load_ahead() -> None:
    """What a job starting Spark on another thread does first, on its own thread
    (``DriverFirstRunner``'s ``load``): ``load_pyspark``, then, when the context spark-submit
    describes will run tidelake's local daemon, that daemon's fork server started: its imports
    (~0.9 s) run while the JVM builds the context, not while the first tasks wait for the daemon."""
    conf = load_pyspark()
    if conf is not None and _preloading_daemon(conf):
        from spark.runtime import forkserver

        forkserver.start(_daemon_environment(conf))


def load_pyspark() -> Any:
    """Import PySpark's context (from its installed package: ``pyspark_path``), as ``build_context``
    does first. A job that starts Spark on another thread calls this on its own before
    (``DriverFirstRunner``): imported on that thread, PySpark would take turns for the GIL with the
    driver's own imports and reach the JVM later (0.55 s against 0.13 s).

    Under spark-submit (the JVM is up: PYSPARK_GATEWAY_PORT) it also makes the first call into the
    JVM, a ``SparkConf``: PySpark 4.2 converts a call's arguments with a numpy converter whose first
    use imports pandas, numpy and protobuf (``pyspark.testing.utils``, 0.35 s of the 0.41 s before
    the JVM begins to start the context). Left to the start's thread, that import took turns with
    the driver's, and the JVM waited ~1.3 s with a core idle before it began (bench: the CPU
    counters while the apply job starts). Elsewhere connecting starts the JVM, which is the
    start's own work. Returns that conf (spark-submit's), or None."""
    from spark.runtime.pyspark_path import prefer_installed_pyspark

    prefer_installed_pyspark()  # the driver too, when spark-submit started it
    import pyspark  # noqa: F401

    # PySpark 4.2 imports pyspark.testing while converting a JVM call's arguments, which warns that
    # pandas >= 3 is not fully supported: tidelake's jobs use no pandas, and the line stood in
    # every job's log before anything of the run.
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas", category=FutureWarning)
    if os.environ.get("PYSPARK_GATEWAY_PORT"):
        from pyspark import SparkConf, SparkContext

        SparkContext._ensure_initialized()
        return SparkConf()
    return None


def _start_gateway() -> None:
    """PySpark's JVM, started here (with ``JIT`` first among its options, ``submit_environment``)
    unless spark-submit (PYSPARK_GATEWAY_PORT) or an earlier context of this process started it.
    PySpark's ``launch_gateway`` runs spark-submit with this process's environment as it is then
    and takes no other, so SPARK_SUBMIT_OPTS is set for that call only."""
    from pyspark import SparkContext

    if SparkContext._gateway is not None or os.environ.get("PYSPARK_GATEWAY_PORT"):
        SparkContext._ensure_initialized()
        return
    before = os.environ.get(SUBMIT_OPTS)
    os.environ[SUBMIT_OPTS] = submit_environment(os.environ)[SUBMIT_OPTS]
    try:
        SparkContext._ensure_initialized()
    finally:
        if before is None:
            os.environ.pop(SUBMIT_OPTS, None)
        else:
            os.environ[SUBMIT_OPTS] = before


def stop_context(context: Any) -> None:
    """``context.stop()`` without waiting for PySpark's accumulator server on the driver.

    ``SparkContext.stop`` stops the JVM's context (~0.1 s), then shuts its Python accumulator server
    down and waits for it: that server's one request handler polls its socket once a second and its
    loop every half second, ~0.8-1.5 s at the end of every job (spark-submit to exit 6.48 s -> 5.77 s
    for a one-job script on local[2], medians of 6 runs). No task can send an update once the JVM's
    context has stopped, so the server is shut down on a daemon thread instead (``_retire``).
    ``_accumulatorServer`` is PySpark's own attribute (pyspark 4.2, ``SparkContext.stop``):
    tests/spark/runtime/test_session.py fails if it goes; without it this is ``context.stop()``."""
    server = getattr(context, "_accumulatorServer", None)
    if server is not None:
        context._accumulatorServer = None  # stop() leaves it to ``_retire``
    try:
        context.stop()
    finally:
        if server is not None:
            _retire(server)


def _retire(server: Any) -> None:
    """Shut an accumulator server down on a daemon thread. Its Unix socket (a file in Spark's temp
    directory) is removed at exit if the process ends first; either side may find it gone."""
    import atexit
    import threading

    path = server.server_address if isinstance(server.server_address, str) else None

    def shutdown() -> None:
        try:
            server.shutdown()
        except OSError:  # its socket file removed at exit meanwhile
            pass

    if path is not None:
        atexit.register(_remove_socket, path)
    threading.Thread(target=shutdown, name="tidelake-accumulator-stop", daemon=True).start()


def _remove_socket(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def watch_executors(context: Any, limit: float | None = None, every: float = 5.0) -> Any:
    """A cluster whose workers are gone leaves a job waiting for executors for ever (Spark's standalone
    scheduler only logs "Initial job has not accepted any resources"). This daemon thread cancels
    the running jobs once they have had no executor for ``limit`` seconds
    (``spark.runtime.services.SPARK_NO_EXECUTOR_TIMEOUT``): the job fails, the run reports Spark's
    failure in one line and exits, and Airflow's retry runs it once the cluster is back."""
    import threading

    from spark.runtime import services

    limit = services.SPARK_NO_EXECUTOR_TIMEOUT if limit is None else limit

    def loop() -> None:
        since = None
        while True:
            time.sleep(every)
            try:
                if context._jsc is None:
                    return  # stopped
                active = context.statusTracker().getActiveJobsIds()
                executors = context._jsc.sc().getExecutorMemoryStatus().size() - 1  # less the driver
            except Exception:  # noqa: BLE001 - the context is stopping
                return
            if not active or executors > 0:
                since = None
                continue
            since = since or time.monotonic()
            if time.monotonic() - since >= limit:
                services.spark_stalled = (f"no executor for {limit:.0f}s while a job waited (the cluster's workers are "
                                          "gone or have no free cores); its jobs were cancelled")
                try:
                    context.cancelAllJobs()
                except Exception:  # noqa: BLE001
                    return
                since = None

    thread = threading.Thread(target=loop, name="tidelake-executor-watch", daemon=True)
    thread.start()
    return thread


def _local(master: str) -> bool:
    """A master whose Python workers run on this machine, from this installation, with tidelake
    importable the way the driver imports it: from a file (a source tree or an installed package),
    not from inside a --py-files archive (.zip, .egg, .jar)."""
    import importlib.util

    if not master.startswith("local"):
        return False
    spec = importlib.util.find_spec("spark.runtime.daemon")
    return spec is not None and spec.origin is not None and os.path.isfile(spec.origin)
