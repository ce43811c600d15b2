"""`python -m bench maintenance` at a tiny size: both pipelines, the fresh compaction's comparison, --without-runs."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from bench import maintenance as bench

pytestmark = pytest.mark.slow  # whole intervals, Spark or services: make test-fast leaves it out (docs/testing.md)


def _args(**overrides: int) -> argparse.Namespace:
    return argparse.Namespace(**{"runs": 4, "tables": 2, "changes": 60, "key_space": 200, "every": 2, "baseline": 2,
                                 "repeat": 1, "target_file_size": 128 << 20, **overrides})


def test_the_fresh_compaction_reads_the_same_rows_from_one_file_per_table(tmp_path: Path) -> None:
    args = _args()
    records = bench.encode(args)
    arm = bench.run(tmp_path / "without", args, False, records)
    assert arm.runs == 4 and sorted(arm.measures) == [2, 4] and len(arm.apply_seconds) == 4 and not arm.maintain_seconds
    m = arm.measures[4]
    assert m.snapshots == m.tags == 4  # one tagged snapshot per run
    # A file written per run, the smaller ones merged by later runs (upsert.small_file_merges): fewer than the runs.
    assert 1 < m.files == m.latest_files < 4
    assert m.metadata_log > 0
    # compacted: one file per (unpartitioned) table; fresh_compaction raises if the head's rows differ from the latest W's
    assert arm.fresh is not None and arm.fresh.files == 1
    assert arm.fresh.latest_seconds > 0 and arm.fresh.fresh_seconds > 0


def test_maintenance_compacts_main_and_the_latest_tag_moves_with_it(tmp_path: Path) -> None:
    args = _args()
    arm = bench.run(tmp_path / "with", args, True, bench.encode(args))
    assert len(arm.maintain_seconds) == 2
    m = arm.measures[4]
    assert m.files == 1  # main's head: compaction's replace snapshot
    assert m.latest_files == 1  # the latest W's tag moved to it
    assert m.snapshots <= bench.KEEP_WS + 2  # and the head it replaced, until the next maintenance
    # The fresh compaction found nothing left to do: the latest W and the head read the same file.
    assert arm.fresh is not None and arm.fresh.files == 1


def test_the_report_prints_both_pipelines_and_the_ratio_to_fresh_compaction(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--runs", "4", "--tables", "2", "--changes", "60", "--key-space", "200", "--every", "2",
                       "--baseline", "2", "--repeat", "1", "--without-runs", "3"]) == 0
    out = capsys.readouterr().out
    assert "stopped at run 3 by --without-runs" in out
    for row in ("files/table", "metadata.json KiB", "count at latest s", "files read at latest", "metadata-log entries",
                "count, compacted head s", "ratio latest/compacted:", "with: apply"):
        assert row in out, row


def test_without_runs_before_the_baseline_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        bench.main(["--runs", "10", "--baseline", "5", "--without-runs", "4"])
    assert "is before the baseline run 5" in capsys.readouterr().err
