"""land and apply on a real Spark standalone cluster, submitted exactly as the DAG submits them in deploy/.

A master and one worker start from the installed pyspark on 127.0.0.1. The code reaches the
executors only as the archive deploy/README.md builds (``--py-files``): the cluster's processes get
no PYTHONPATH, and a probe job shows the executors import tidelake from the archive. The pipeline
file holds no credentials: the S3 keys are in the environment of spark-submit, as values.yaml puts
them in the Airflow worker's, and reach the executors through the driver (spark.runtime.credentials).
Kafka is noida-db, S3 is SeaweedFS, the catalog is PostgreSQL; the tables are checked against the
reference model.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from spark.runtime.embedded import standalone_cluster
from spark.runtime.session import JIT
from tests.deploy.submit import build_code_archive, submit_commands

from .archives import normalise, oracle_from_records, oracle_rows, produce_history

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
UTC = dt.UTC
T0 = dt.datetime(2024, 1, 1, tzinfo=UTC)
HOUR = dt.timedelta(hours=1)
CATALOG_URI = "postgresql+psycopg2://root@127.0.0.1:5432/test"
# Variables that would let a cluster process find tidelake or credentials other than the way deploy/ gives them.
_NOT_INHERITED = ("PYTHONPATH", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "SPARK_CONF_DIR",
                  "TIDELAKE_KAFKA_SASL_USERNAME", "TIDELAKE_KAFKA_SASL_PASSWORD")


def clean_environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _NOT_INHERITED}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # spark-submit and python
    env.update(extra)
    return env


def test_land_and_apply_submitted_as_deploy_documents_match_the_model(kafka, make_topic, s3, bucket, tmp_path: Path) -> None:
    from spark.demo.workload import WorkloadSpec
    from spark.config import load_pipeline_config
    from spark.query.read import read_pipeline

    archive = build_code_archive(tmp_path / "build")

    topic = make_topic(2)
    records = produce_history(kafka.bootstrap, topic, 2, WorkloadSpec(tables=2, events=160, seed=11, key_space=30, watermark_every=16))

    name = f"cluster{uuid.uuid4().hex[:6]}"
    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    pipeline = pipelines / f"{name}.toml"
    # No credentials here. spark.pyspark.python is the one setting the test must give differently from
    # spark-defaults.conf: this venv instead of the Spark image's /opt/venv.
    # driver_max_messages = 0: these 160 events would otherwise run in the driver, and this test is about the executors.
    pipeline.write_text(
        f'name = "{name}"\ndriver_max_messages = 0\n[kafka]\nbootstrap_servers = "{kafka.bootstrap}"\n'
        f'[[topics]]\nname = "{topic}"\nprotocol = "canal-json"\n'
        f'[storage]\nurl = "s3://{bucket}/lake"\nendpoint_url = "{s3.endpoint}"\n'
        f'[catalog]\ntype = "sql"\nnamespace = "{name}"\nproperties = {{ uri = "{CATALOG_URI}" }}\n'
        f'[schedule]\ncron = "0 * * * *"\nstart_date = "2024-01-01T00:00:00Z"\nspark_conn_id = "spark_test_cluster"\n'
        f'spark_conf = {{ "spark.pyspark.python" = "{sys.executable}" }}\n'
    )

    with standalone_cluster(tmp_path / "cluster", env=clean_environment()) as cluster:
        airflow_env = {  # what values.yaml gives the Airflow worker, pointed at this cluster and this checkout's build
            "AIRFLOW_CONN_SPARK_TEST_CLUSTER": json.dumps({"conn_type": "spark", "host": cluster.master_url,
                                                            "extra": {"deploy-mode": "client"}}),
            "TIDELAKE_PY_FILES": str(archive),
            "TIDELAKE_SPARK_PROPERTIES": str(REPO / "deploy/spark/spark-defaults.conf"),
        }
        commands = submit_commands(pipelines, f"tidelake_{name}", T0, T0 + HOUR, airflow_env)
        land, apply = commands["land"]["argv"], commands["apply"]["argv"]
        assert land[:3] == ["spark-submit", "--master", cluster.master_url]
        assert land[land.index("--py-files") + 1] == str(archive) and "--deploy-mode" in land
        assert not any(s3.secret_key in arg or s3.access_key in arg for arg in land + apply)

        # The Airflow worker's environment: credentials (values.yaml secrets) and the pod address (extraEnv).
        worker_env = clean_environment(AWS_ACCESS_KEY_ID=s3.access_key, AWS_SECRET_ACCESS_KEY=s3.secret_key,
                                       SPARK_LOCAL_IP="127.0.0.1")
        ran = {}
        for task, argv in (("land", land), ("apply", apply)):
            proc = subprocess.run(argv, cwd=tmp_path, env=worker_env, capture_output=True, text=True, timeout=600, check=False)
            assert proc.returncode == 0, f"{task}: {proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
            # A clean run's log carries no Python warning (PySpark 4.2 warned about pandas 3 in every job).
            assert not re.search(r"\b\w+Warning: ", proc.stderr), f"{task}: {proc.stderr[-4000:]}"
            ran[task] = proc.stdout
        assert f"landed: {name}/manifests/" in ran["land"]
        assert " published " in ran["apply"] and "without starting Spark" not in ran["apply"] + ran["land"]

        # The executors imported tidelake from the archive (the cluster's processes have no other way to it
        # but the editable install of the venv, which would show a path outside the archive).
        probe = tmp_path / "probe.py"
        probe.write_text(
            "from pyspark.sql import SparkSession\n"
            "s = SparkSession.builder.getOrCreate()\n"
            "print('EXECUTOR', s.sparkContext.parallelize([0], 1).map(lambda _: __import__('spark.archive.land').archive.land.__file__).collect()[0])\n"
            "s.stop()\n"
        )
        head = land[:land.index("--deploy-mode") + 2]  # spark-submit's options; the application follows
        seen = subprocess.run([*head, str(probe)], cwd=tmp_path, env=worker_env, capture_output=True, text=True, timeout=600, check=False)
        assert seen.returncode == 0, seen.stderr[-3000:]
        executor_file = next(line.split(" ", 1)[1] for line in seen.stdout.splitlines() if line.startswith("EXECUTOR "))
        assert executor_file.endswith(f"/{archive.name}/spark/archive/land.py"), executor_file

        # Each application's executor command (the worker's log of it): land's and apply's executors run
        # with C1 only (session.JIT, a DEFAULTS of the jobs' context), the probe's -- a context of its
        # own, beside the same spark-defaults.conf -- with the JVM's defaults.
        commands = [next(line for line in (app / "0" / "stderr").read_text().splitlines() if "Executor Command" in line)
                    for app in sorted((tmp_path / "cluster" / "work").glob("app-*"))]
        assert [f'"{JIT}"' in command for command in commands] == [True, True, False], commands

    config = load_pipeline_config(str(pipeline))
    reader = dataclasses.replace(config, storage=dataclasses.replace(
        config.storage, access_key_id=s3.access_key, secret_access_key=s3.secret_key))
    oracle = oracle_from_records("canal-json", topic, records, 2)
    w = oracle.cut([(topic, 0), (topic, 1)])
    assert f"W {w} published" in ran["apply"]
    _, tables = read_pipeline(reader, w)
    assert tables and {k: normalise(v.to_pylist()) for k, v in tables.items()} == {k: oracle_rows(oracle, k) for k in oracle.tables}
