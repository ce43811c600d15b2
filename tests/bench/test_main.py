"""`python -m bench <suite> ...`: every suite parses its own arguments."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bench.__main__ import main
from bench.apply import build_parser
from tests.bench import REPO

SUITE_FLAGS = {
    "apply": ["--only", "--repeat", "--workdir", "--events", "--key-space", "--sizes", "--batch", "--keys", "--touch-keys", "--buckets",
              "--spark-conf", "--tiny-sizes", "--driver-max-messages"],
    "codecs": ["--events", "--protocols"],
    "land": ["--messages", "--rounds", "--runners"],
    "consistency": ["--histories", "--steps", "--seed"],
    "lag": ["--rate", "--intervals", "--interval-seconds", "--spark", "--protocol", "--tables", "--partitions", "--workdir"],
    "maintenance": ["--runs", "--changes", "--every", "--tables", "--baseline", "--repeat", "--without-runs"],
}


@pytest.mark.parametrize("suite", sorted(SUITE_FLAGS))
def test_suite_help_shows_the_suites_own_flags(suite: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([suite, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: python -m bench {suite}")
    for flag in SUITE_FLAGS[suite]:
        assert flag in out, f"{flag} missing from `python -m bench {suite} --help`"


def test_the_module_entry_point_passes_flags_to_the_suite() -> None:
    proc = subprocess.run([sys.executable, "-m", "bench", "apply", "--help"], cwd=REPO, capture_output=True, text=True, timeout=60,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert "--repeat" in proc.stdout and "--touch-keys" in proc.stdout


def test_a_bad_suite_flag_is_reported_by_the_suite(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["apply", "--repeat", "three"])
    assert exit_.value.code == 2
    assert "python -m bench apply: error: argument --repeat" in capsys.readouterr().err


def test_an_unknown_suite_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["nosuch"])
    assert exit_.value.code == 2
    assert "invalid choice: 'nosuch'" in capsys.readouterr().err


def test_apply_flags_parse_lists_and_refuse_bad_ones(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["--only", "growth,memory", "--sizes", "20000,1e5", "--keys", "uniform", "--repeat", "5"])
    assert (args.only, args.sizes, args.keys, args.repeat) == (["growth", "memory"], [20_000, 100_000], ["uniform"], 5)
    defaults = build_parser().parse_args([])
    assert (defaults.only, defaults.sizes, defaults.repeat, defaults.events, defaults.touch_keys, defaults.cluster) == (
        ["throughput", "growth", "memory", "tables", "tiny"], [500_000, 2_000_000, 5_000_000], 3, 1_000_000, 5_000_000, "local")
    assert (defaults.table_count, defaults.changes_per_table, defaults.peer_home) == (1000, 5, None)
    assert defaults.tiny_sizes == [100, 10_000, 50_000]
    assert build_parser().parse_args(["--cluster", "standalone"]).cluster == "standalone"
    assert defaults.write_modes == ["merge-on-read", "copy-on-write"]
    assert build_parser().parse_args(["--write-modes", "copy-on-write"]).write_modes == ["copy-on-write"]
    conf = build_parser().parse_args(["--spark-conf", "spark.executor.memory=2g", "--spark-conf", "spark.sql.x=a=b"]).spark_conf
    assert conf == [("spark.executor.memory", "2g"), ("spark.sql.x", "a=b")]
    for bad in (["--sizes", "100000,20000"], ["--only", "speed"], ["--keys", "warm"], ["--spark-conf", "memory=2g"],
                ["--cluster", "yarn"]):
        with pytest.raises(SystemExit):
            build_parser().parse_args(bad)
    assert "choose from throughput, growth, memory, tables, tiny" in capsys.readouterr().err


def test_same_input_needs_the_peer_home(capsys: pytest.CaptureFixture[str]) -> None:
    assert build_parser().parse_args([]).same_input is False
    with pytest.raises(SystemExit) as exit_:
        main(["apply", "--only", "throughput", "--same-input"])
    assert exit_.value.code == 2
    assert "--same-input needs --peer-home" in capsys.readouterr().err
