"""`python -m bench apply --only throughput` at a tiny size: both masters submitted, every figure printed,
and where each job's time went (its report's stages)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench import apply_throughput

pytestmark = pytest.mark.slow


def test_the_throughput_bench_prints_events_per_second_and_the_stages_of_both_masters(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    apply_throughput.main(3000, 2, 2, None, 1, 0, tmp_path, {})
    out = capsys.readouterr().out
    for master in ("local[2]", "local[1]"):
        assert re.search(rf"apply job {re.escape(master)}, spark-submit to exit +[\d.]+ +[\d,]+ +[\d.]+", out), out
    assert len(re.findall(r"^ {8}(decode|fold|commit and tag) +[\d.]+$", out, re.M)) == 6, out
    assert re.search(r"speed-up per stage local\[1\] -> local\[2\]: decode [\d.]+x, fold [\d.]+x, commit and tag [\d.]+x", out), out
