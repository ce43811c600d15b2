"""`python -m bench apply --only growth` at a tiny size, both write modes: every figure printed,
merge-on-read replaces no data file, copy-on-write does, the second mode is compared to the first,
and a warm-up comes before anything measured."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench import apply_growth

pytestmark = pytest.mark.slow


@pytest.mark.bench
def test_the_growth_bench_measures_each_write_mode_and_compares_them(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    apply_growth.main([2000, 4000], 200, ["uniform"], 2, 1, 0, tmp_path, {}, ["merge-on-read", "copy-on-write"], rounds=2)
    out = capsys.readouterr().out
    tables = {m.group(1): m.group(2) for m in re.finditer(r"^    uniform keys, ([\w-]+): +rows.*\n((?:^ {16}.*\n)+)", out, re.M)}
    assert set(tables) == {"merge-on-read", "copy-on-write"}, out
    rows = {mode: [line.split() for line in body.splitlines()] for mode, body in tables.items()}
    assert [r[0] for r in rows["merge-on-read"]] == ["2,000", "4,000"] and all(len(r) == 6 for r in rows["copy-on-write"])
    # Data files replaced: merge-on-read only the small files it merged -- none: the seeded file holds
    # more rows than a batch writes, and the table is compacted as it grows (the first size's batch
    # file folded in; without the compaction the second size's batch merged it) -- copy-on-write
    # every file it touched.
    assert [r[4] for r in rows["merge-on-read"]] == ["0", "0"]
    assert all(int(m[4]) < int(c[4]) for m, c in zip(rows["merge-on-read"], rows["copy-on-write"]))
    assert all(r[5].endswith("x") for r in rows["copy-on-write"])  # its seconds as a ratio to merge-on-read's
    assert out.count("growth ") == 2 + 2 * 2  # each write mode's figure, and each of its rounds'
    # The first mode's smallest size is applied once unmeasured first, and only the measured batches are listed.
    assert out.count("warm-up, not measured: the smallest size's 1 uniform batches applied 3 times") == 1, out
    assert out.count(" rows: batch ") == 2 * 2, out  # the first round's, of each write mode
    assert out.count(", round 1: growth ") == 2 and out.count(", round 2: growth ") == 2, out
