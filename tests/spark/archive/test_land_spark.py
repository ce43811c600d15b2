"""Landing as a Spark job: one task per chunk, segments Spark reads natively, the entry point."""

from __future__ import annotations

from tests.spark.archives import oracle_from_records

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

import pytest

from spark.archive.land import land_interval
from spark.runtime.runners import SparkRunner
from spark.archive.storage import open_storage

from tests.spark.archive.test_land import HOUR, T0, assert_exact, config, produce
from tests.spark.submit import submit_probe

REPO = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def spark():
    from spark.runtime.session import build_context

    context = build_context("tidelake-tests", "local[2]", **{"spark.ui.enabled": "false"})
    yield context
    context.stop()


def test_spark_runner_lands_one_task_per_chunk(spark, kafka, make_topic, tmp_path: Path) -> None:
    import pyspark

    assert pyspark.__version__ == spark.version  # pyspark and the JVM agree (ENVIRONMENT.md trap)
    topic = make_topic(4)
    cfg = config(kafka, [topic], str(tmp_path / "archive"), segment_max_messages=25)
    produce(kafka, topic, [(i % 4, T0 + dt.timedelta(seconds=i), f"spark-{i}".encode()) for i in range(400)])
    result = land_interval(cfg, T0, T0 + HOUR, runner=SparkRunner(spark))
    storage = open_storage(cfg.storage)
    assert result.manifest.messages == 400
    assert sum(len(p.segments) for p in result.manifest.partitions) == 16  # 4 partitions x 100 / 25
    assert_exact(kafka, storage, [result])
    paths = [storage.arrow_path(s.path) for p in result.manifest.partitions for s in p.segments]
    from pyspark.sql import SparkSession

    df = SparkSession.builder.getOrCreate().read.parquet(*paths)  # users' Spark reads the raw archive
    assert df.count() == 400
    assert {r["partition"] for r in df.select("partition").distinct().collect()} == {0, 1, 2, 3}
    assert df.where("offset >= 0 and value is not null").count() == 400


def test_land_job_entry_point(kafka, make_topic, tmp_path: Path) -> None:
    topic = make_topic(2)
    produce(kafka, topic, [(i % 2, T0 + dt.timedelta(minutes=i), b"job") for i in range(10)])
    pipeline = tmp_path / "pipeline.toml"
    pipeline.write_text(
        f'name = "jobs"\n[kafka]\nbootstrap_servers = "{kafka.bootstrap}"\n'
        f'[[topics]]\nname = "{topic}"\nprotocol = "canal-json"\n[storage]\nurl = "{tmp_path / "archive"}"\n'
    )
    cmd = [sys.executable, str(REPO / "spark/jobs/land.py"), "--config", str(pipeline), "--master", "local[2]",
           "--start", "2024-01-01T00:00:00Z", "--end", "2024-01-01T01:00:00Z"]
    first = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "landed: jobs/manifests/20240101T000000.000000Z_20240101T010000.000000Z.json  10 messages" in first.stdout
    again = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=300)
    assert again.returncode == 0 and again.stdout.startswith("already landed:")
    bad = subprocess.run(cmd[:3] + [str(tmp_path / "missing.toml")] + cmd[4:], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert bad.returncode == 2 and "missing.toml: cannot read" in bad.stderr


def test_spark_pipeline_from_kafka_to_iceberg_matches_the_oracle(spark, kafka, make_topic, tmp_path: Path) -> None:
    """Real broker -> land on Spark -> apply on Spark (decode on executors) -> tables at W."""
    from spark.demo.workload import WorkloadSpec
    from spark.commit.apply import apply_interval
    from spark.query.read import read_pipeline

    from tests.spark.archives import normalise, oracle_rows, produce_history

    topic = make_topic(3)
    records = produce_history(kafka.bootstrap, topic, 3, WorkloadSpec(tables=2, events=200, seed=1, key_space=40, watermark_every=20))
    doc = {"name": "spark-e2e", "kafka": {"bootstrap_servers": kafka.bootstrap},
           "topics": [{"name": topic, "protocol": "canal-json"}], "storage": {"url": str(tmp_path / "archive")}}
    from spark.config import PipelineConfig

    cfg = PipelineConfig.from_mapping(doc, "test")
    land_interval(cfg, T0, T0 + HOUR, runner=SparkRunner(spark))
    result = apply_interval(cfg, T0, T0 + HOUR, runner=SparkRunner(spark))
    oracle = oracle_from_records("canal-json", topic, records, 3)
    w = oracle.cut([(topic, p) for p in range(3)])
    assert result.watermark == w
    _, tables = read_pipeline(cfg, w)
    assert {k: normalise(v.to_pylist()) for k, v in tables.items()} == {k: oracle_rows(oracle, k) for k in oracle.tables}


def test_land_benchmark_runs_the_parallel_runners() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "bench", "land", "--messages", "200", "--partitions", "2", "--rounds", "2", "--runners", "processes,spark"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "land_interval, Spark local[2]" in out.stdout and "2 worker processes" in out.stdout


def test_session_defaults_apply_unless_spark_submit_sets_them(tmp_path: Path) -> None:
    code = ("from spark.runtime.session import build_context\ns = build_context('probe')\n"
            "print('UDS=' + s.getConf().get('spark.python.unix.domain.socket.enabled'))\ns.stop()\n")
    assert "UDS=true" in submit_probe(tmp_path, code).stdout
    assert "UDS=false" in submit_probe(tmp_path, code, "--conf", "spark.python.unix.domain.socket.enabled=false").stdout


def test_driver_daemon_and_workers_import_pyspark_from_its_installed_package_not_sparks_zip(tmp_path: Path) -> None:
    """spark-submit and the executors put Spark's zip of PySpark sources first on the path; from
    it every process compiles what it imports (0.53 s against 0.12 s). The driver, the daemon
    (``spark.runtime.daemon``) and its workers import the installed package it came from, and the
    workers start with tidelake's task modules loaded by the daemon."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        f"import sys\nsys.path.insert(0, {str(REPO)!r})\nfrom spark.runtime.session import build_context\n"
        "s = build_context('probe')\n"
        "def where(_):\n"
        "    import os, sys, pyspark, py4j\n"
        "    preloaded = all(m in sys.modules for m in ('spark.decode.changelog', 'spark.write.plane', 'pyiceberg.manifest'))\n"
        "    return pyspark.__file__, py4j.__file__, preloaded, open(f'/proc/{os.getppid()}/cmdline').read().replace(chr(0), ' ')\n"
        "import pyspark, py4j\n"
        "print('DRIVER', pyspark.__file__, py4j.__file__)\n"
        "for w in set(s.parallelize(range(2), 2).map(where).collect()):\n"
        "    print('WORKER', *w)\n"
        "s.stop()\n"
        "s = build_context('probe', **{'spark.executorEnv.TIDELAKE_DAEMON_PRELOAD': '0'})\n"
        "for w in set(s.parallelize(range(2), 2).map(where).collect()):\n"
        "    print('BARE', *w)\n"
        "s.stop()\n"
    )
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    run = subprocess.run([str(bin_dir / "spark-submit"), "--master", "local[2]", str(probe)],
                         capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = [line.split() for line in run.stdout.splitlines() if line.startswith(("DRIVER", "WORKER", "BARE"))]
    assert {line[0] for line in lines} == {"DRIVER", "WORKER", "BARE"}
    for line in lines:
        assert ".zip" not in line[1] and ".zip" not in line[2], line
    # Forked by a daemon the driver's fork server made, which imported tidelake's task modules while
    # the context started (spark.runtime.forkserver); unless the context's environment turned that
    # off (the benchmarks' Spark-alone baseline): then by the daemon Spark launched, without them.
    assert all("spark.runtime.forkserver" in " ".join(line[4:]) for line in lines if line[0] == "WORKER")
    assert all("spark.runtime.daemon" in " ".join(line[4:]) for line in lines if line[0] == "BARE")
    assert {line[3] for line in lines if line[0] == "WORKER"} == {"True"}
    assert {line[3] for line in lines if line[0] == "BARE"} == {"False"}
