"""Every deploy file parses, builds what it configures, and gives spark-submit exactly what deploy/README.md says."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml
from sqlalchemy import create_engine

import spark.jobs
from cdc_codecs import ConfigError
from spark.tables.catalog import catalog_properties
from spark.config import load_pipeline_config
from spark.runtime.credentials import KAFKA_SECRET_OPTIONS, from_environment, kafka_env_name

from .submit import build_code_archive, submit_commands

pytestmark = pytest.mark.slow  # whole intervals, Spark or services: make test-fast leaves it out (docs/testing.md)

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
PIPELINES = sorted((DEPLOY / "pipelines").glob("*.toml"))
# Where values.yaml's git-sync puts the repo in the Airflow pods.
GIT_SYNC_ROOT = "/opt/airflow/dags/repo"
JOBS = Path(spark.jobs.__file__).resolve().parent  # the DAG's applications: the installed tidelake's entry points
UTC = dt.UTC


def helm_values() -> dict:
    return yaml.safe_load((DEPLOY / "airflow/values.yaml").read_text())


def spark_defaults() -> dict[str, str]:
    pairs = [line.split(None, 1) for line in (DEPLOY / "spark/spark-defaults.conf").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    return {k: v.strip() for k, v in pairs}


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
        # Credentials are never in the files: not S3 keys, not Kafka secret options.
        assert config.storage.access_key_id is None and config.storage.secret_access_key is None
        assert not set(config.kafka_options) & set(KAFKA_SECRET_OPTIONS)
        assert not any(v for k, v in props.items() if "secret" in k)


def test_the_production_pipeline_takes_its_sasl_credentials_from_the_environment_values_yaml_sets() -> None:
    config = load_pipeline_config(str(DEPLOY / "pipelines/shop-production.toml"))
    with pytest.raises(ConfigError, match="set TIDELAKE_KAFKA_SASL_USERNAME and TIDELAKE_KAFKA_SASL_PASSWORD"):
        from_environment(config, {})
    secrets = {s["envName"] for s in helm_values()["secret"]}
    environ = {kafka_env_name("sasl.username"): "shop-archiver", kafka_env_name("sasl.password"): "pw"}
    assert set(environ) <= secrets
    resolved = from_environment(config, environ)
    assert resolved.kafka_options == {"security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512",
                                      "sasl.username": "shop-archiver", "sasl.password": "pw"}


def test_the_dag_file_builds_one_dag_per_deploy_pipeline() -> None:
    code = (
        "from airflow.dag_processing.dagbag import DagBag; b = DagBag(dag_folder='dags');"
        "assert not b.import_errors, b.import_errors; print(sorted(b.dags))"
    )
    env = {**os.environ, "TIDELAKE_PIPELINES": str(DEPLOY / "pipelines"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "AIRFLOW_HOME": str(Path(os.environ.get("AIRFLOW_HOME", "/tmp/tidelake-airflow-deploy")))}
    proc = subprocess.run([sys.executable, "-c", code], cwd=DEPLOY.parent, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "['tidelake-maintenance-crm', 'tidelake-maintenance-shop', 'tidelake_crm', 'tidelake_shop']"


def test_helm_values_and_spark_defaults_describe_client_mode_with_the_code_archive() -> None:
    values = helm_values()
    env = {e["name"]: e["value"] for e in values["env"]}
    assert values["dags"]["gitSync"]["subPath"] == "dags"
    # Every path values.yaml names inside the git-synced repo exists in the repo.
    for name in ("TIDELAKE_PIPELINES", "TIDELAKE_SPARK_PROPERTIES"):
        assert env[name].startswith(GIT_SYNC_ROOT + "/") and (REPO / env[name][len(GIT_SYNC_ROOT) + 1:]).exists(), name
    assert env["TIDELAKE_SPARK_PROPERTIES"].endswith("deploy/spark/spark-defaults.conf")
    # The archive the Airflow image carries (README "Images"): the wheel renamed .zip.
    assert env["TIDELAKE_PY_FILES"] == "/opt/tidelake/tidelake-0.1.0.zip"
    secrets = {s["envName"] for s in values["secret"]}
    assert secrets >= {"AIRFLOW_CONN_SPARK_CLUSTER", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "PGPASSWORD",
                       "TIDELAKE_KAFKA_SASL_USERNAME", "TIDELAKE_KAFKA_SASL_PASSWORD"}
    extra = yaml.safe_load(values["extraEnv"])
    assert extra == [{"name": "SPARK_LOCAL_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]

    from pyspark import SparkConf

    defaults = spark_defaults()
    conf = SparkConf(loadDefaults=False).setAll(list(defaults.items()))
    assert conf.get("spark.submit.deployMode") == "client"
    assert conf.get("spark.pyspark.python") == "/opt/venv/bin/python"  # the Spark image's venv
    # The master comes from the Airflow connection; nothing Kubernetes-cluster-mode is left.
    assert "spark.master" not in defaults and not any(k.startswith("spark.kubernetes.") for k in defaults)


SPARK_CLUSTER = '{"conn_type": "spark", "host": "spark://spark-master.spark.svc:7077", "extra": {"deploy-mode": "client"}}'
PRODUCTION_ENV = {
    "AIRFLOW_CONN_SPARK_CLUSTER": SPARK_CLUSTER,
    "TIDELAKE_PY_FILES": "/opt/tidelake/tidelake-0.1.0.zip",
    "TIDELAKE_SPARK_PROPERTIES": f"{GIT_SYNC_ROOT}/deploy/spark/spark-defaults.conf",
}


def test_spark_submit_argv_of_the_production_deploy() -> None:
    """values.yaml's environment + the shop pipeline: client mode on the standalone cluster, code from the archive."""
    start = dt.datetime(2024, 6, 1, 0, 15, tzinfo=UTC)
    commands = submit_commands(DEPLOY / "pipelines", "tidelake_shop", start, start + dt.timedelta(minutes=15), PRODUCTION_ENV)
    pipeline = str(DEPLOY / "pipelines/shop-production.toml")
    head = [
        "spark-submit", "--master", "spark://spark-master.spark.svc:7077",
        "--conf", "spark.executor.memory=4g", "--conf", "spark.executor.cores=2", "--conf", "spark.cores.max=16",
        "--properties-file", f"{GIT_SYNC_ROOT}/deploy/spark/spark-defaults.conf",
        "--py-files", "/opt/tidelake/tidelake-0.1.0.zip",
        "--name", "tidelake-shop", "--deploy-mode", "client",
    ]
    interval = ["--start", "2024-06-01T00:15:00+00:00", "--end", "2024-06-01T00:30:00+00:00"]
    assert commands["land"]["argv"] == [*head, str(JOBS / "land.py"), "--config", pipeline, *interval]
    assert commands["apply"]["argv"] == [*head, str(JOBS / "apply.py"), "--config", pipeline, *interval,
                                         "--on-bad-message", "fail", "--on-table-error", "isolate",
                                         "--run-id", "tidelake_shop/scheduled__2024-06-01T00:15:00+00:00"]
    # No credentials in the command, and none set by the hook: spark-submit inherits the worker's environment.
    assert commands["land"]["env"] is None and commands["apply"]["env"] is None
    # deploy/README.md shows this command, with the repo where git-sync puts it.
    readme = (DEPLOY / "README.md").read_text()
    documented = readme[readme.index("```\nspark-submit") + 4:].split("```", 1)[0].split()
    built = [a.replace(str(REPO), GIT_SYNC_ROOT) for a in commands["land"]["argv"]]
    built[built.index(str(JOBS / "land.py").replace(str(REPO), GIT_SYNC_ROOT))] = "<site-packages>/spark/jobs/land.py"
    assert documented == built


def test_the_documented_backfill_command_parses_with_airflows_cli() -> None:
    readme = (DEPLOY / "README.md").read_text()
    command = readme[readme.index("airflow backfill create"):].split("```", 1)[0].replace("\\\n", " ").split()
    assert "--reprocess-behavior" in command
    code = ("import sys; from airflow.cli import cli_parser; a = cli_parser.get_parser().parse_args(sys.argv[1:]);"
            "print(a.dag_id, a.reprocess_behavior, a.max_active_runs)")
    env = {**os.environ, "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "AIRFLOW_HOME": str(Path(os.environ.get("AIRFLOW_HOME", "/tmp/tidelake-airflow-deploy")))}
    proc = subprocess.run([sys.executable, "-c", code, *command[1:]], env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[-3:] == ["tidelake_shop", "failed", "1"]


def test_spark_submit_argv_of_a_development_setup(tmp_path: Path) -> None:
    """No deploy settings: a local master runs the installed code; only the pipeline's own conf is passed."""
    (tmp_path / "dev.toml").write_text(
        'name = "dev"\n[kafka]\nbootstrap_servers = "127.0.0.1:9092"\n[[topics]]\nname = "cdc"\nprotocol = "canal-json"\n'
        f'[storage]\nurl = "{tmp_path / "archive"}"\n[schedule]\nspark_conf = {{ "spark.sql.shuffle.partitions" = "4" }}\n'
    )
    start = dt.datetime(2024, 1, 1, tzinfo=UTC)
    env = {"AIRFLOW_CONN_SPARK_DEFAULT": '{"conn_type": "spark", "host": "local[2]"}',
           "TIDELAKE_PY_FILES": "", "TIDELAKE_SPARK_PROPERTIES": ""}
    commands = submit_commands(tmp_path, "tidelake_dev", start, start + dt.timedelta(hours=1), env)
    head = ["spark-submit", "--master", "local[2]", "--conf", "spark.sql.shuffle.partitions=4", "--name", "tidelake-dev"]
    interval = ["--start", "2024-01-01T00:00:00+00:00", "--end", "2024-01-01T01:00:00+00:00"]
    config = str(tmp_path / "dev.toml")
    assert commands["land"]["argv"] == [*head, str(JOBS / "land.py"), "--config", config, *interval]
    assert commands["apply"]["argv"] == [*head, str(JOBS / "apply.py"), "--config", config, *interval, "--on-bad-message", "fail",
                                         "--on-table-error", "isolate", "--run-id", "tidelake_dev/scheduled__2024-01-01T00:00:00+00:00"]


def test_the_code_archive_builds_from_the_repo_with_every_package_and_its_data(tmp_path: Path) -> None:
    archive = build_code_archive(tmp_path)
    assert archive.name == "tidelake-0.1.0.zip"
    names = set(zipfile.ZipFile(archive).namelist())
    for module in ("cdc_codecs/__init__.py", "cdc_codecs/canal_json.py", "spark/__init__.py", "spark/archive/land.py",
                   "spark/commit/apply.py", "spark/runtime/credentials.py", "spark/jobs/land.py", "spark/jobs/apply.py"):
        assert module in names, module
    schemas = sorted(p.name for p in (REPO / "cdc_codecs/schemas").glob("*.json"))
    assert schemas and {f"cdc_codecs/schemas/{s}" for s in schemas} <= names
    # Imported from the archive alone (first on sys.path, as PySpark puts --py-files), package data included.
    probe = (
        f"import sys; sys.path.insert(0, {str(archive)!r});"
        "import spark.archive.land, cdc_codecs.dts_avro as d;"
        "from importlib import resources;"
        "print(spark.archive.land.__file__); print(len(resources.files('cdc_codecs.schemas').joinpath('simple_message.json').read_text()))"
    )
    run = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    module_file, schema_size = run.stdout.split()
    assert module_file == f"{archive}/spark/archive/land.py"
    assert int(schema_size) == len((REPO / "cdc_codecs/schemas/simple_message.json").read_text())


def test_the_documented_build_commands_are_the_ones_the_tests_run() -> None:
    from .submit import documented_build_commands

    assert documented_build_commands() == [
        "python -m pip wheel --no-deps -w dist .",
        "cp dist/tidelake-0.1.0-py3-none-any.whl dist/tidelake-0.1.0.zip",
    ]


def _spark_submit_land(site: Path, archive: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    """The land task's spark-submit as the Airflow image runs it: the installed entry script, the archive as --py-files."""
    bin_dir = Path(sys.executable).parent
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    missing = tmp_path / "no-such-pipeline.toml"
    return subprocess.run(
        [str(bin_dir / "spark-submit"), "--master", "local[1]", "--py-files", str(archive), "--name", "tidelake-shop",
         "--deploy-mode", "client", str(site / "spark/jobs/land.py"), "--config", str(missing),
         "--start", "2024-06-01T00:15:00+00:00", "--end", "2024-06-01T00:30:00+00:00"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False)


def test_a_stale_code_archive_stops_the_job_naming_both_builds(tmp_path: Path) -> None:
    """deploy/README's build, the wheel installed as in the Airflow image, then spark-submit with the archive: the same
    build passes the check (and fails on the missing pipeline file); an archive of another build stops the job first."""
    archive = build_code_archive(tmp_path / "build")
    wheel = archive.with_suffix(".whl").with_name(archive.stem + "-py3-none-any.whl")
    site = tmp_path / "site-packages"  # the Airflow image's `pip install ... dist/tidelake-0.1.0-py3-none-any.whl`
    installed = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile", "--target", str(site),
                                str(wheel)], capture_output=True, text=True, timeout=600, check=False)
    assert installed.returncode == 0, installed.stderr[-2000:]

    same = _spark_submit_land(site, archive, tmp_path)
    assert same.returncode == 2, (same.stdout + same.stderr)[-3000:]
    said = same.stdout + same.stderr  # spark-submit passes the Python driver's stderr on as its stdout
    assert "two different builds" not in said and "no-such-pipeline.toml: cannot read" in said, said[-3000:]

    stale = tmp_path / "stale" / archive.name  # an archive of an earlier build: one module differs
    stale.parent.mkdir()
    with zipfile.ZipFile(archive) as old, zipfile.ZipFile(stale, "w") as new:
        for item in old.infolist():
            data = old.read(item)
            new.writestr(item, data + b"# an earlier build\n" if item.filename == "spark/archive/land.py" else data)
    stopped = _spark_submit_land(site, stale, tmp_path)
    said = stopped.stdout + stopped.stderr
    assert stopped.returncode == 2, said[-3000:]
    assert "two different builds" in said, said[-3000:]
    assert f"entry script {site / 'spark/jobs/land.py'} is from the tidelake installed at {site}" in said
    assert f"its library is imported from {stale}" in said
    assert "no-such-pipeline.toml" not in said  # stopped before it read anything
