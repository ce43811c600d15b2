"""`python -m bench apply --only throughput` at a tiny size: both masters submitted, every figure printed,
where each job's time went (its report's stages), and what Spark alone costs on each master."""

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
    # Every job starts Spark (driver_max_messages = 0), counted apart from the stage that started it.
    assert len(re.findall(r"^ {8}(start Spark|decode|fold|commit and tag) +[\d.]+$", out, re.M)) == 8, out
    assert re.search(r"speed-up per stage local\[1\] -> local\[2\]: start Spark [\d.]+x, decode [\d.]+x, fold [\d.]+x, "
                     r"rewrite [\d.]+x, commit and tag [\d.]+x", out), out
    assert re.search(r"^    decode vs parse: [\d.]+x \(the decode stage's CPU a message", out, re.M), out
    for master in ("local[2]", "local[1]"):
        assert re.search(rf"Spark alone {re.escape(master)}: start, a task per slot, stop +[\d.]+$", out, re.M), out
    assert re.search(r"speed-up local\[1\] -> local\[2\]: [\d.]+x \(target >= 1.7\); beyond Spark alone: -?[\d.]+x; "
                     r"the bound if all of that scaled perfectly: [\d.]+x", out), out
