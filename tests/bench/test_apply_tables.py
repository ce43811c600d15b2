"""`python -m bench apply --only tables` at a tiny size: the archive touches every table in its second
interval, and the bench prints both runs, the stages per table and Spark alone."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench import apply_tables
from bench.archive import HOUR, T0, clone_archive, pipeline_config
from spark.commit.apply import apply_interval


def test_the_second_interval_changes_every_table_and_each_table_reads_its_rows(tmp_path: Path) -> None:
    facts = apply_tables.build_archive(tmp_path / "archive", 4, 3, 2)
    assert facts == {"row_changes": [12, 12]}
    run = clone_archive(tmp_path / "archive", tmp_path / "run")
    config = pipeline_config(run)
    first = apply_interval(config, T0, T0 + HOUR)
    second = apply_interval(config, T0 + HOUR, T0 + 2 * HOUR)
    assert first.outcome == second.outcome == "published"
    assert {name: t["events_applied"] for name, t in second.report["tables"].items()} == {f"shop.t{i}": 3 for i in range(4)}


@pytest.mark.slow
@pytest.mark.bench
def test_the_tables_bench_prints_both_runs_per_table_and_spark_alone(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    apply_tables.main(3, 2, 2, 1, tmp_path, {}, None)
    out = capsys.readouterr().out
    assert re.search(r"round 1 \(load [\d./]+\): creating run [\d.]+s, measured run [\d.]+s \(commit and tag [\d.]+s\), "
                     r"Spark alone [\d.]+s", out), out
    for line in ("baseline: Spark alone", "creating run", "measured run, submit to exit", "commit and tag", "rewrite"):
        assert re.search(rf"^ +{re.escape(line)}.* +[\d.]+( +[\d.]+)?$", out, re.M), (line, out)
    assert re.search(r"target: 3 tables end to end <= 60 s: (met|not met)", out), out
