"""spark.runtime.pyspark_path: Spark's zips move behind the installed package they came from, and only then."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from spark.runtime import pyspark_path


def _installation(root: Path, name: str) -> tuple[str, str, str]:
    """A site directory with a pyspark package and its zips: (site, pyspark.zip, py4j zip)."""
    home = root / name / "pyspark"
    (home / "python" / "lib").mkdir(parents=True)
    (home / "__init__.py").write_text("")
    zips = home / "python" / "lib"
    (zips / "pyspark.zip").write_bytes(b"")
    (zips / "py4j-0.10.9.9-src.zip").write_bytes(b"")
    return str(root / name), str(zips / "pyspark.zip"), str(zips / "py4j-0.10.9.9-src.zip")


def test_the_zips_of_the_installed_package_move_to_the_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site, spark_zip, py4j_zip = _installation(tmp_path, "site")
    monkeypatch.setattr(sys, "path", [spark_zip, py4j_zip, "/elsewhere", site])
    monkeypatch.setattr(pyspark_path, "_version", lambda name: "0.10.9.9")
    assert pyspark_path.prefer_installed_pyspark() == [spark_zip, py4j_zip]
    assert sys.path == ["/elsewhere", site, spark_zip, py4j_zip]


def test_a_py4j_of_another_version_keeps_its_zip_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site, spark_zip, py4j_zip = _installation(tmp_path, "site")
    monkeypatch.setattr(sys, "path", [spark_zip, py4j_zip, site])
    monkeypatch.setattr(pyspark_path, "_version", lambda name: "0.10.9.7")
    assert pyspark_path.prefer_installed_pyspark() == [spark_zip]
    assert sys.path == [py4j_zip, site, spark_zip]


def test_zips_of_another_spark_home_stay_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cluster's SPARK_HOME holds the PySpark its JVM speaks to: a pip-installed one may differ."""
    site, _, _ = _installation(tmp_path, "site")
    _, cluster_zip, cluster_py4j = _installation(tmp_path, "cluster")
    monkeypatch.setattr(sys, "path", [cluster_zip, cluster_py4j, site])
    monkeypatch.setattr(pyspark_path, "_version", lambda name: "0.10.9.9")
    assert pyspark_path.prefer_installed_pyspark() == []
    assert sys.path == [cluster_zip, cluster_py4j, site]


def test_without_an_installed_package_nothing_moves(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, spark_zip, py4j_zip = _installation(tmp_path, "cluster")
    monkeypatch.setattr(sys, "path", [spark_zip, py4j_zip, str(tmp_path / "empty")])
    assert pyspark_path.prefer_installed_pyspark() == []
    assert sys.path == [spark_zip, py4j_zip, str(tmp_path / "empty")]


def test_the_daemon_module_is_set_for_local_masters_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cluster's executors may run without tidelake installed (deploy/README.md ships it with
    --py-files, which a worker adds to its path only after the daemon forked it): the daemon
    module is PySpark's own there, and wherever tidelake itself comes from a zip."""
    import importlib.util

    from spark.runtime import session

    assert session._local("local[2]") and session._local("local") and session._local("local[*]")
    assert not session._local("spark://master:7077") and not session._local("yarn") and not session._local("k8s://https://k:443")
    real = importlib.util.find_spec

    for archive in ("tidelake-0.1.0.zip", "tidelake-0.1.0.egg", "tidelake-0.1.0.jar"):  # what PySpark puts on sys.path
        def from_an_archive(name: str, *args, archive: str = archive):  # noqa: ANN002, ANN202
            if name == "spark.runtime.daemon":
                return SimpleNamespace(origin=f"/opt/tidelake/{archive}/spark/runtime/daemon.py")
            return real(name, *args)

        monkeypatch.setattr(importlib.util, "find_spec", from_an_archive)
        assert not session._local("local[2]"), archive
