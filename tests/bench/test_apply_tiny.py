"""`python -m bench apply --only tiny` at its smallest: the archive, and one round of every figure."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench import apply_tiny
from bench.archive import HOUR, T0, clone_archive, pipeline_config
from spark.commit.apply import apply_interval


def test_the_archive_holds_the_asked_row_changes_over_two_tables(tmp_path: Path) -> None:
    facts = apply_tiny.build_archive(tmp_path / "archive", 100, 2)
    assert facts["row_changes"] == 100 and facts["messages"] >= 100
    result = apply_interval(pipeline_config(clone_archive(tmp_path / "archive", tmp_path / "run")), T0, T0 + HOUR)
    assert result.outcome == "published" and len(result.report["tables"]) == apply_tiny.TABLES
    assert result.report["ran_in"] == "driver"


@pytest.mark.slow
@pytest.mark.bench
def test_the_tiny_bench_prints_each_figure_beside_spark_alone(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    apply_tiny.main([40], 2, 1, tmp_path, {})
    out = capsys.readouterr().out
    row = re.search(r"^ +40 +\d+ +([\d.]+)s +([\d.]+)s +driver +([\d.]+)s +([+-][\d.]+)s +([\d.]+)s +([\d.]+)s +[\d,]+ MiB  [\d./]+$", out, re.M)
    assert row, out
    alone, default, spark, extra, confirm, dag = map(float, row.groups())
    assert abs(default - alone - extra) < 0.02 and min(alone, default, spark, confirm, dag) > 0
    assert "targets: a tiny interval adds <= 3 s to Spark alone" in out
