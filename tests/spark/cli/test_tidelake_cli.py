"""The tidelake command: run, backfill, watermarks, tables, query, decode, demo."""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata
import io
import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Producer

from cdc_codecs import TidelakeError, get_encoder
from spark.demo.workload import Workload, WorkloadSpec
from spark.jobs.interval import intervals
from spark.cli.main import main, parser, query
from spark.config import load_pipeline_config

from tests.spark.archives import oracle_from_records
from tests.spark.archives import normalise, oracle_rows

pytestmark = pytest.mark.slow  # whole intervals, Spark or services: make test-fast leaves it out (docs/testing.md)

UTC = dt.timezone.utc
T0 = dt.datetime(2024, 1, 1, tzinfo=UTC)


@pytest.fixture
def pipeline(kafka, make_topic, tmp_path: Path):
    topic = make_topic(2)
    spec = WorkloadSpec(tables=2, events=150, seed=12, watermark_every=10, start_ms=int(T0.timestamp() * 1000), spacing_ms=40_000)
    records = get_encoder("simple").encode_all(list(Workload(spec).events()), 2)
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    stamps = [int(T0.timestamp() * 1000) + i * 10_800_000 // len(records) for i in range(len(records))]
    for r, at in zip(records, stamps):
        producer.produce(topic, key=r.key, value=r.value, partition=r.partition, timestamp=at)
    assert producer.flush(30) == 0
    path = tmp_path / "pipeline.toml"
    path.write_text(f'name = "cli"\n[kafka]\nbootstrap_servers = "{kafka.bootstrap}"\n[[topics]]\nname = "{topic}"\n'
                    f'protocol = "simple"\n[storage]\nurl = "{tmp_path / "archive"}"\n')
    first_hour = [r for r, at in zip(records, stamps) if at < int((T0 + dt.timedelta(hours=1)).timestamp() * 1000)]
    return path, topic, oracle_from_records("simple", topic, first_hour, 2), oracle_from_records("simple", topic, records, 2)


HUMAN = r"(\d+s|\d+m \d\ds|\d+h \d\dm|\d+d \d\dh|\d+mo \d\dd|\d+y \d\dmo)"


def test_run_backfill_and_query_at_an_older_watermark(pipeline, capsys) -> None:
    path, topic, first_hour, everything = pipeline
    assert main(["run", "--config", str(path), "--start", "2024-01-01T00:00:00Z", "--end", "2024-01-01T01:00:00Z"]) == 0
    run = capsys.readouterr()
    assert "interval 2024-01-01T00:00:00+00:00 .. 2024-01-01T01:00:00+00:00" in run.out and "watermark  " in run.out
    assert re.search(rf"\(lag {HUMAN} behind the interval end\)", run.out), run.out
    assert "outcome    published:" in run.out and "reused" not in run.out
    # A bar for every long step, each finished: land, decode per partition, the net change (one fold), commit per
    # table, tag.
    for step, done in (("land", 1), ("decode", 2), ("net change", 1), ("commit", 2), ("tag", 2)):
        assert re.search(rf"^{step} .* {done}/{done} ", run.err, re.MULTILINE), (step, run.err)
    # The same interval again: the manifest is reused, W confirmed, nothing written.
    assert main(["run", "--config", str(path), "--start", "2024-01-01T00:00:00Z", "--end", "2024-01-01T01:00:00Z"]) == 0
    again = capsys.readouterr().out
    assert "messages (reused: an earlier run landed this interval" in again
    assert "outcome    confirmed: W was already published by an earlier run" in again
    assert re.search(rf"\(lag {HUMAN} behind the interval end\)", again), again
    assert main(["backfill", "--config", str(path), "2024-01-01T01:00:00Z", "2024-01-01T03:00:00Z"]) == 0
    back = capsys.readouterr()
    assert re.search(rf"^2024-01-01T02:00:00\+00:00 \.\. 2024-01-01T03:00:00\+00:00: [\d,]+ messages, W=\d+ "
                     rf"\(\S+, lag {HUMAN}\) published$", back.out, re.MULTILINE), back.out
    assert re.search(r"^backfill cli .* 2/2 ", back.err, re.MULTILINE) and re.search(r"^commit .* (\d+)/\1 ", back.err, re.MULTILINE)
    assert main(["watermarks", "--config", str(path)]) == 0
    lines = [l for l in capsys.readouterr().out.splitlines() if l.strip() and l.strip()[0].isdigit()]
    marks = [int(l.split()[0]) for l in lines]
    assert len(marks) == 3 and marks == sorted(marks)
    assert all(re.search(rf"Z +{HUMAN} +retained +\d{{4}}", l) for l in lines), lines  # age now, in human units
    assert all(re.search(r"\dy \d\dmo", l) for l in lines)  # data from 2024: more than a year old
    config = load_pipeline_config(str(path))
    # At the first W (after newer runs) and at the latest: every table equals the reference model.
    for oracle, at in ((first_hour, marks[0]), (everything, "latest")):
        w = oracle.cut([(topic, 0), (topic, 1)])
        for name in oracle.tables:
            got_w, rows = query(config, f'SELECT * FROM "{name[0]}"."{name[1]}"', at)
            assert got_w == w
            assert normalise(rows.to_pylist()) == oracle_rows(oracle, name), (at, name)
    assert main(["query", "--config", str(path), "--at", str(marks[0]), "--json", "SELECT count(*) AS n FROM shop.t0"]) == 0
    result = capsys.readouterr()
    assert json.loads(result.out) == {"n": len(oracle_rows(first_hour, ("shop", "t0")))}
    assert result.err.startswith(f"-- cli at W={marks[0]} (")  # a diagnostic: through logging, on stderr
    assert main(["-q", "query", "--config", str(path), "--json", "SELECT count(*) AS n FROM shop.t0"]) == 0
    assert capsys.readouterr().err == ""
    assert main(["run", "-q", "--config", str(path), "--start", "2024-01-01T00:00:00Z", "--end", "2024-01-01T01:00:00Z"]) == 0
    quiet = capsys.readouterr()
    assert quiet.err == "" and "outcome    confirmed" in quiet.out  # -q: no bars; results still on stdout
    assert main(["-v", "run", "--config", str(path), "--start", "2024-01-01T00:00:00Z", "--end", "2024-01-01T01:00:00Z"]) == 0
    assert re.search(r"^debug: landed \d+ messages \(manifest reused\); applying$", capsys.readouterr().err, re.MULTILINE)
    assert main(["tables", "--config", str(path), "--at", "2024-01-01T01:30:00Z"]) == 0
    assert "shop.t0:" in capsys.readouterr().out


def test_decode_a_raw_segment(pipeline, capsys, tmp_path: Path) -> None:
    path, topic, _, _ = pipeline
    assert main(["run", "--config", str(path), "--start", "2024-01-01T00:00:00Z", "--end", "2024-01-01T01:00:00Z"]) == 0
    capsys.readouterr()
    segment = next((tmp_path / "archive" / "cli" / "segments").rglob("*.parquet"))
    assert main(["decode", "--protocol", "simple", str(segment)]) == 0
    events = [json.loads(l) for l in capsys.readouterr().out.splitlines()]
    assert events and {e["event"] for e in events} <= {"row", "ddl", "watermark", "schema"}
    assert all(e["position"].startswith(f"{topic}/") for e in events)


def test_errors_are_one_line_with_exit_codes(tmp_path: Path, offline_config: Path, capsys) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\n[kafka]\nbootstrap_servers = "k"\n[[topics]]\nname = "t"\nprotocol = "nope"\n[storage]\nurl = "/tmp/x"\n')
    assert main(["watermarks", "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {bad}: topics[0].protocol: expected one of") and err.count("\n") == 1
    assert main(["query", "--config", str(offline_config), "SELECT 1"]) == 1
    assert "no watermark is published" in capsys.readouterr().err


def test_intervals_follow_the_cron() -> None:
    spans = intervals("0 */6 * * *", T0, T0 + dt.timedelta(days=1))
    assert len(spans) == 4 and spans[0] == (T0, T0 + dt.timedelta(hours=6)) and spans[-1][1] == T0 + dt.timedelta(days=1)


@pytest.mark.slow
def test_demo_end_to_end(tmp_path: Path) -> None:
    tidelake = Path(sys.executable).parent / "tidelake"
    run = subprocess.run([str(tidelake), "demo", "--workdir", str(tmp_path / "demo"), "--events", "300"],
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "query at the latest consistent watermark W=" in run.stdout
    assert "sales.t0:" in run.stdout and "inventory.t0:" in run.stdout and "crm.t0:" in run.stdout
    # librdkafka writes to the process's stderr: no client may outlive the embedded broker.
    assert "rdkafka" not in run.stderr, run.stderr[-3000:]


def _parsers(p: argparse.ArgumentParser, name: str = "tidelake"):
    yield name, p
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for command, sp in action.choices.items():
                assert helps.get(command), f"{name} {command}: no help in the command list"
                yield from _parsers(sp, f"{name} {command}")


def test_every_flag_of_every_command_has_help() -> None:
    seen = []
    for name, p in _parsers(parser()):
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                continue
            label = "/".join(action.option_strings) or action.dest
            assert action.help and action.help is not argparse.SUPPRESS, f"{name} {label}: no help text"
            seen.append(f"{name} {label}")
    assert "tidelake demo --events" in seen and "tidelake decode files" in seen and "tidelake query -v/--verbose" in seen


def test_version_is_the_installed_package_version(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"tidelake {importlib.metadata.version('tidelake')}\n"


@pytest.fixture
def offline_config(tmp_path: Path) -> Path:
    """A valid pipeline nothing has run for: enough for errors that come before Kafka is asked."""
    path = tmp_path / "p.toml"
    path.write_text(f'name = "x"\n[kafka]\nbootstrap_servers = "127.0.0.1:9"\n[[topics]]\nname = "t"\nprotocol = "simple"\n'
                    f'[storage]\nurl = "{tmp_path}/a"\n')
    return path


def test_user_errors_are_one_line_exit_2_and_echo_what_was_typed(offline_config: Path, tmp_path: Path, capsys) -> None:
    c = str(offline_config)
    cases = [
        (["run", "--config", c, "--start", "2024-01-01T01:00:00Z", "--end", "2024-01-01T00:00:00Z"],
         "error: --end '2024-01-01T00:00:00Z' is not after --start '2024-01-01T01:00:00Z'"),
        (["run", "--config", c, "--start", "2024-01-01T00:00:00Z", "--end", "2024-01-01T00:00:00Z"],
         "error: --end '2024-01-01T00:00:00Z' is not after --start '2024-01-01T00:00:00Z'"),
        (["run", "--config", c, "--start", "2024-13-01T00:00:00Z", "--end", "2024-01-02T00:00:00Z"],
         "error: --start: expected an ISO-8601 time such as 2024-01-01T00:00:00Z, found '2024-13-01T00:00:00Z'"),
        (["run", "--config", c, "--start", "2024-01-01T00:00:00", "--end", "2024-01-02T00:00:00Z"],
         "error: --start: '2024-01-01T00:00:00' has no time zone; write it in UTC with a trailing Z"),
        (["backfill", "--config", c, "2024-01-02T00:00:00Z", "2024-01-01T00:00:00Z"],
         "error: TO '2024-01-01T00:00:00Z' is not after FROM '2024-01-02T00:00:00Z'"),
        (["backfill", "--config", c, "2024-01-01T00:10:00Z", "2024-01-01T00:50:00Z"],
         "error: no '0 * * * *' interval fits between FROM '2024-01-01T00:10:00Z' and TO '2024-01-01T00:50:00Z'"),
        (["repair", "--config", c, "--from", "last tuesday"],
         "error: --from: expected an ISO-8601 time such as 2024-01-01T00:00:00Z, found 'last tuesday'"),
        (["watermarks", "--config", str(tmp_path / "missing.toml")],
         f"error: {tmp_path / 'missing.toml'}: cannot read: No such file or directory"),
        (["decode", "--protocol", "simple", "--option", "encoding", "f"],
         "error: --option 'encoding': expected KEY=VALUE, e.g. --option timezone=Asia/Shanghai"),
        (["decode", "--protocol", "simple", str(tmp_path / "gone.parquet")],
         f"error: {tmp_path / 'gone.parquet'}: cannot read: "),
    ]
    for argv, message in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith(message) and err.count("\n") == 1 and "Traceback" not in err, (argv, err)
    with pytest.raises(TidelakeError, match="is not after"):  # --debug: the exception itself, traceback and all
        main(["run", "--debug", "--config", c, "--start", "2024-01-02T00:00:00Z", "--end", "2024-01-01T00:00:00Z"])


def test_verbosity_sets_logging_levels(offline_config: Path, capsys) -> None:
    own, root = logging.getLogger("tidelake"), logging.getLogger()
    root_level = root.level
    try:
        for argv, level in ((["watermarks"], logging.INFO), (["-v", "watermarks"], logging.DEBUG),
                            (["watermarks", "-q"], logging.ERROR)):
            assert main([*argv, "--config", str(offline_config)]) == 0
            assert own.getEffectiveLevel() == level, argv
        assert root.level == logging.ERROR  # -q quiets libraries too
        assert main(["watermarks", "--config", str(offline_config)]) == 0 and root.level == logging.WARNING
        assert main(["-q", "watermarks", "--config", str(offline_config)]) == 0
        capsys.readouterr()
        logging.getLogger("tidelake.cli").warning("hidden")  # still -q from the last call
        logging.getLogger("tidelake.cli").error("shown")
        assert capsys.readouterr().err == "error: shown\n"
        with pytest.raises(SystemExit):
            main(["-v", "-q", "watermarks", "--config", str(offline_config)])  # usage error: one or the other
        assert "not allowed with argument" in capsys.readouterr().err
    finally:
        root.setLevel(root_level)


class ClosedBinaryPipe(io.BytesIO):
    def write(self, data: bytes) -> int:  # type: ignore[override]
        raise BrokenPipeError(32, "Broken pipe")


class ClosedPipe(io.StringIO):
    """stdout after the reader left (`tidelake ... | head -1`): every write fails, text or bytes."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    @property
    def buffer(self) -> ClosedBinaryPipe:
        return ClosedBinaryPipe()


def test_a_closed_pipe_is_one_line_and_exit_1_for_every_command(pipeline, monkeypatch, capsys, tmp_path: Path) -> None:
    path, _, _, _ = pipeline
    c = str(path)
    assert main(["run", "-q", "--config", c, "--start", "2024-01-01T00:00:00Z", "--end", "2024-01-01T01:00:00Z"]) == 0
    segment = next((tmp_path / "archive" / "cli" / "segments").rglob("*.parquet"))
    capsys.readouterr()
    commands = [
        ["run", "--config", c, "--start", "2024-01-01T00:00:00Z", "--end", "2024-01-01T01:00:00Z"],
        ["backfill", "--config", c, "2024-01-01T00:00:00Z", "2024-01-01T01:00:00Z"],
        ["watermarks", "--config", c],
        ["tables", "--config", c],
        ["query", "--config", c, "SELECT * FROM shop.t0"],
        ["query", "--config", c, "--format", "csv", "SELECT * FROM shop.t0"],
        ["repair", "--config", c, "--dry-run"],
        ["maintain", "--config", c, "--dry-run"],
        ["decode", "--protocol", "simple", str(segment)],
        ["changes", "--config", c, "--from", "0"],
        ["engines", "--config", c],
    ]
    every_command = {name.split()[1] for name, _ in _parsers(parser()) if name != "tidelake"}
    assert {argv[0] for argv in commands} == every_command - {"demo"}  # demo starts its own broker: too slow here
    for argv in commands:
        monkeypatch.setattr(sys, "stdout", ClosedPipe())
        assert main(argv) == 1, argv
        err = capsys.readouterr().err
        assert err.splitlines()[-1] == "error: the output was closed before everything was written", (argv, err)
        assert "Traceback" not in err


def test_a_pipe_closed_by_the_reader_in_a_real_process(offline_config: Path) -> None:
    """A real EPIPE, not a stand-in: one line, exit 1, no "Exception ignored" at interpreter exit."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first byte
    try:
        run = subprocess.run([sys.executable, "-m", "spark.cli", "watermarks", "--config", str(offline_config)],
                             stdout=write, stderr=subprocess.PIPE, text=True, timeout=120, check=False,
                             env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])})
    finally:
        os.close(write)
    assert run.returncode == 1, run.stderr
    assert run.stderr == "error: the output was closed before everything was written\n"
