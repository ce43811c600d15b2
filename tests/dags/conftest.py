"""Airflow for tests: a private AIRFLOW_HOME on SQLite, set before Airflow is imported."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_HOME = Path(tempfile.mkdtemp(prefix="tidelake-airflow-"))
_PIPELINES = _HOME / "pipelines"
_PIPELINES.mkdir()
AIRFLOW_ENV = {
    "AIRFLOW_HOME": str(_HOME),
    "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__CORE__PARALLELISM": "2",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{_HOME / 'airflow.db'}",
    "AIRFLOW_CONN_SPARK_DEFAULT": '{"conn_type": "spark", "host": "local[2]"}',
    "TIDELAKE_PIPELINES": str(_PIPELINES),
    "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
}
os.environ.update(AIRFLOW_ENV)


@pytest.fixture
def pipelines() -> Path:
    """The pipelines folder the DAG file reads; emptied before each test."""
    for p in _PIPELINES.iterdir():
        p.unlink()
    return _PIPELINES


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    subprocess.run([str(Path(sys.executable).parent / "airflow"), "db", "migrate"], check=True, env={**os.environ, **AIRFLOW_ENV},
                   capture_output=True, timeout=600)
    return _HOME
