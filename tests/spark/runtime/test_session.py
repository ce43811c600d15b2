"""``stop_context``: a SparkContext stopped without waiting for PySpark's accumulator server."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from spark.runtime.session import JIT, build_context, stop_context, submit_environment
from tests.spark.submit import submit_probe

pytestmark = pytest.mark.slow  # starts Spark

REPO = Path(__file__).resolve().parents[3]
LOCAL = {"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"}


def test_a_stopped_context_is_gone_and_its_accumulator_server_follows() -> None:
    context = build_context("tidelake-stop-context", "local[1]", **LOCAL)
    accumulator = context.accumulator(0)
    context.parallelize(range(5), 2).foreach(lambda x: accumulator.add(x))
    assert accumulator.value == 10  # the updates came through the server
    # PySpark's own attribute stop_context relies on (pyspark 4.2): another version without it fails here.
    server = context._accumulatorServer
    assert server is not None and callable(server.shutdown)
    path = server.server_address if isinstance(server.server_address, str) else None
    stop_context(context)
    assert context._accumulatorServer is None
    again = build_context("tidelake-stop-context-again", "local[1]", **LOCAL)
    try:
        assert again is not context  # getOrCreate made a new one: the first was stopped
        assert again.parallelize(range(3), 1).sum() == 3
    finally:
        stop_context(again)
    retiring = [t for t in threading.enumerate() if t.name == "tidelake-accumulator-stop"]
    for thread in retiring:
        thread.join(timeout=30)
        assert not thread.is_alive()
    assert path is None or not os.path.exists(path)


def test_a_process_ending_right_after_the_stop_leaves_no_socket_behind() -> None:
    script = (
        "from spark.runtime.session import build_context, stop_context\n"
        f"context = build_context('tidelake-stop-exit', 'local[1]', **{LOCAL!r})\n"
        "context.parallelize(range(2), 1).count()\n"
        "address = context._accumulatorServer.server_address\n"
        "stop_context(context)\n"
        "print(address if isinstance(address, str) else '')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    path = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    assert path.endswith(".sock"), done.stdout  # the defaults use a Unix socket (session.DEFAULTS)
    assert not os.path.exists(path)


def test_under_spark_submit_load_pyspark_leaves_the_start_nothing_to_import(tmp_path: Path) -> None:
    """``load_pyspark`` runs on the job's thread before Spark starts on another: what building the
    context's conf imports (PySpark 4.2's first argument conversion imports pandas, numpy and
    protobuf) is imported there, so the start's thread goes straight to the JVM instead of taking
    turns for the GIL with the driver's imports."""
    run = submit_probe(tmp_path, "from spark.runtime.session import load_pyspark\n"
                       "load_pyspark()\nbefore = set(sys.modules)\nfrom pyspark import SparkConf, SparkContext\n"
                       "SparkContext._ensure_initialized()\nSparkConf().setAppName('probe').set('spark.ui.enabled', 'false')\n"
                       "print('NEW', sorted(set(sys.modules) - before))\n")
    assert "NEW []" in run.stdout, run.stdout
    assert "fully support pandas" not in run.stderr  # that import's warning, about a pandas tidelake does not use


def test_a_job_starting_spark_ahead_starts_the_daemon_s_fork_server_first(tmp_path: Path) -> None:
    """``load_ahead`` (the apply job's first step when Spark will be needed) starts the local daemon's
    fork server, so its imports overlap the context's start -- not for the benchmarks' Spark alone."""
    code = ("from spark.runtime.session import load_ahead\nfrom spark.runtime import forkserver\nload_ahead()\n"
            "print('SERVER', forkserver._server is not None)\n")
    assert "SERVER True" in submit_probe(tmp_path, code).stdout
    assert "SERVER False" in submit_probe(tmp_path, code, "--conf", "spark.executorEnv.TIDELAKE_DAEMON_PRELOAD=0").stdout


# The JVM's own arguments, as the driver sees them from inside (java.lang.management).
JVM_ARGUMENTS = ("print('ARGS', list(SparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()"
                 ".getInputArguments()))\n")


def _tiers(stdout: str) -> list[str]:
    line = next(x for x in stdout.splitlines() if x.startswith("ARGS "))
    return [a for a in ast.literal_eval(line[5:]) if a.startswith("-XX:TieredStopAtLevel")]


@pytest.mark.parametrize("theirs", [None, "-XX:TieredStopAtLevel=4 -Dprobe=1"])
def test_a_jvm_this_process_starts_compiles_with_c1_and_a_user_s_option_wins(theirs: str | None) -> None:
    """``build_context`` starting PySpark's JVM itself gives it ``JIT`` first on the command line:
    the user's SPARK_SUBMIT_OPTS follow (a later -XX wins in HotSpot) and the variable is theirs again after."""
    script = ("import os\nfrom pyspark import SparkContext\nfrom spark.runtime.session import build_context, stop_context\n"
              f"context = build_context('tidelake-jit', 'local[1]', **{LOCAL!r})\n" + JVM_ARGUMENTS +
              "print('AFTER', os.environ.get('SPARK_SUBMIT_OPTS'))\nstop_context(context)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_SUBMIT_OPTS", "PYSPARK_GATEWAY_PORT")}
    env["PYTHONPATH"] = str(REPO)
    if theirs is not None:
        env["SPARK_SUBMIT_OPTS"] = theirs
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    assert _tiers(done.stdout) == [JIT] + (["-XX:TieredStopAtLevel=4"] if theirs else [])
    assert f"AFTER {theirs}" in done.stdout


def test_under_the_deploy_s_spark_defaults_the_driver_compiles_with_c1(tmp_path: Path) -> None:
    """The DAG's spark-submit gets ``JIT`` from deploy/spark/spark-defaults.conf
    (``spark.driver.defaultJavaOptions``): the JVM spark-submit starts runs with it."""
    run = submit_probe(tmp_path, "from pyspark import SparkContext\nSparkContext._ensure_initialized()\n" + JVM_ARGUMENTS,
                       "--properties-file", str(REPO / "deploy/spark/spark-defaults.conf"))
    assert _tiers(run.stdout) == [JIT]


def test_submit_environment_puts_the_jit_before_the_user_s_options() -> None:
    assert JIT == "-XX:TieredStopAtLevel=1"
    assert submit_environment({"A": "1"}) == {"A": "1", "SPARK_SUBMIT_OPTS": "-XX:TieredStopAtLevel=1"}
    assert submit_environment({"SPARK_SUBMIT_OPTS": " -Xss4m "})["SPARK_SUBMIT_OPTS"] == "-XX:TieredStopAtLevel=1 -Xss4m"
