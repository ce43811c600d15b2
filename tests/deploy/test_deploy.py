"""Every deploy configuration parses and builds the objects it configures."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml
from sqlalchemy import create_engine

from spark.catalog import catalog_properties
from spark.config import load_pipeline_config

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
PIPELINES = sorted((DEPLOY / "pipelines").glob("*.toml"))


def test_pipeline_files_build_configs_and_catalog_settings() -> None:
    assert len(PIPELINES) >= 2
    for path in PIPELINES:
        config = load_pipeline_config(str(path))
        props = catalog_properties(config)
        assert props["type"] == config.catalog.type
        if config.catalog.type == "sql":
            engine = create_engine(props["uri"])  # builds the engine; connects only on use
            assert engine.dialect.name == "postgresql"
        else:
            assert props["uri"].startswith("https://")
        assert not any(v for k, v in props.items() if "secret" in k)  # credentials come from the environment


def test_the_dag_file_builds_one_dag_per_deploy_pipeline() -> None:
    code = (
        "from airflow.dag_processing.dagbag import DagBag; b = DagBag(dag_folder='dags');"
        "assert not b.import_errors, b.import_errors; print(sorted(b.dags))"
    )
    env = {**os.environ, "TIDELAKE_PIPELINES": str(DEPLOY / "pipelines"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "AIRFLOW_HOME": str(Path(os.environ.get("AIRFLOW_HOME", "/tmp/tidelake-airflow-deploy")))}
    proc = subprocess.run([sys.executable, "-c", code], cwd=DEPLOY.parent, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "['tidelake_crm', 'tidelake_shop']"


def test_helm_values_and_spark_defaults() -> None:
    values = yaml.safe_load((DEPLOY / "airflow/values.yaml").read_text())
    env = {e["name"]: e["value"] for e in values["env"]}
    assert env["TIDELAKE_PIPELINES"].endswith("deploy/pipelines")
    assert {s["envName"] for s in values["secret"]} >= {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
    assert values["dags"]["gitSync"]["subPath"] == "dags"
    from pyspark import SparkConf

    pairs = [line.split(None, 1) for line in (DEPLOY / "spark/spark-defaults.conf").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    conf = SparkConf(loadDefaults=False).setAll([(k, v.strip()) for k, v in pairs])
    assert conf.get("spark.sql.session.timeZone") == "UTC"
    assert conf.get("spark.pyspark.python") == "/opt/venv/bin/python"
