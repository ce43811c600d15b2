"""``python -m bench changes`` at a tiny size: it builds both pipelines, the feed, the feed without
before images and the full diff agree (``measure`` raises when they do not), and it prints a line per
size with every ratio."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import changes


@pytest.mark.slow
def test_the_change_feed_bench_agrees_with_the_full_diff_and_prints_its_ratios(tmp_path: Path, capsys) -> None:
    assert changes.main(["--sizes", "2000,6000", "--changed", "300", "--repeat", "1", "--workdir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for keys in ("hot", "uniform"):
        assert f"{keys} keys:" in out and f"{keys} keys: targets:" in out
    rows = [line.split() for line in out.splitlines() if line.strip().startswith(("2,000", "6,000"))]
    assert [r[0] for r in rows] == ["2,000", "6,000"] * 2
    assert all(r[6].endswith("x") and r[7].endswith("x") for r in rows), rows  # diff/feed, diff/after
