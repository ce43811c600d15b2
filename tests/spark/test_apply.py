"""Apply: tables at every published watermark equal the reference model, for every TiDB protocol."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdc_codecs import PROTOCOLS
from spark.apply import apply_interval
from spark.query import published_watermarks, read_pipeline

from .archive import HOUR, T0, normalise, run_history

TIDB = sorted(p for p, s in PROTOCOLS.items() if s.has_commit_ts)


@pytest.mark.parametrize("protocol", TIDB)
def test_every_published_watermark_matches_the_oracle(tmp_path: Path, protocol: str) -> None:
    config, checks = run_history(tmp_path, protocol, seed=3, intervals=3, partitions=3, dup_rate=0.05)
    for i, w, expected in checks:
        result = apply_interval(config, T0 + i * HOUR, T0 + (i + 1) * HOUR)
        assert result.watermark == w
    assert published_watermarks(config) == sorted({w for _, w, _ in checks if w})
    for i, w, expected in checks:
        if not w:
            continue
        got_w, tables = read_pipeline(config, w)
        assert got_w == w
        got = {name: normalise(t.to_pylist()) for name, t in tables.items()}
        want = {name: rows for name, rows in expected.items() if name in got or rows}
        assert got == want, (protocol, w)
