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


@pytest.mark.parametrize("write_mode", ["merge-on-read", "copy-on-write"])
def test_the_write_mode_decides_delete_files_or_rewrites_and_is_recorded_on_every_table(tmp_path: Path, write_mode: str) -> None:
    import dataclasses

    from spark import catalog as cat
    from spark.iceberg.files import live_files

    config, checks = run_history(tmp_path, "canal-json", seed=3, intervals=3, partitions=2)
    config = dataclasses.replace(config, layout=dataclasses.replace(config.layout, write_mode=write_mode))
    for i, w, expected in checks:
        assert apply_interval(config, T0 + i * HOUR, T0 + (i + 1) * HOUR).watermark == w
        if not w:
            continue
        got = {name: normalise(t.to_pylist()) for name, t in read_pipeline(config, w)[1].items()}
        assert got == {name: rows for name, rows in expected.items() if name in got or rows}
    tables = cat.pipeline_tables(cat.open_catalog(config), config)
    for table in tables:
        assert {k: table.properties.get(k) for k in ("write.update.mode", "write.delete.mode", "write.merge.mode")} == dict.fromkeys(
            ("write.update.mode", "write.delete.mode", "write.merge.mode"), write_mode)
        assert table.properties.get("write.delete.granularity") == "file"
    deletes = [d for t in tables for d in live_files(t.io, t.current_snapshot()).delete_files]
    replaced = sum(int(s.summary.get("deleted-data-files") or 0) for t in tables for s in t.metadata.snapshots if s.summary)
    if write_mode == "merge-on-read":
        assert deletes and replaced == 0  # updates and deletes named rows; no data file was rewritten
    else:
        assert not deletes and replaced > 0
