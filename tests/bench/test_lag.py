"""`python -m bench lag`: the clock-aligned schedule, the summary's figures, and a tiny live run on the embedded Kafka."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest

from bench import lag
from spark.demo.workload import tso

UTC = dt.UTC
END = dt.datetime(2026, 1, 1, 0, 1, tzinfo=UTC)


def test_intervals_sit_on_the_clock_after_the_lead() -> None:
    now = dt.datetime(2026, 1, 1, 0, 0, 58, 500000, tzinfo=UTC).timestamp()
    spans = lag.schedule(now, 60, 3)
    assert spans[0] == (dt.datetime(2026, 1, 1, 0, 2, tzinfo=UTC), dt.datetime(2026, 1, 1, 0, 3, tzinfo=UTC))
    assert [b for _, b in spans[:-1]] == [a for a, _ in spans[1:]] and spans[-1][1] == dt.datetime(2026, 1, 1, 0, 5, tzinfo=UTC)
    assert lag.schedule(now, 20, 1)[0][0] == dt.datetime(2026, 1, 1, 0, 1, 20, tzinfo=UTC)


def test_only_protocols_whose_upstream_sends_watermarks_are_offered() -> None:
    protocols = lag.watermark_protocols()
    assert {"canal-json", "open-protocol", "simple", "debezium"} <= set(protocols)
    assert not {"canal", "debezium-mysql", "dts-avro", "cloudcanal-json"} & set(protocols)


def test_the_pipeline_file_names_the_cron_of_whole_minute_intervals(tmp_path: Path) -> None:
    assert 'cron = "* * * * *"' in lag.pipeline_toml("k:1", tmp_path, "canal-json", 60, END)
    assert 'cron = "*/5 * * * *"' in lag.pipeline_toml("k:1", tmp_path, "canal-json", 300, END)
    assert "cron" not in lag.pipeline_toml("k:1", tmp_path, "canal-json", 20, END)


def _run(end: dt.datetime, finished: float, lag_seconds: float, seconds: float = 10.0) -> lag.IntervalRun:
    w = tso(int((end.timestamp() - lag_seconds) * 1000))
    report = {"watermark": w, "lag_seconds": lag_seconds, "outcome": "published",
              "finished_at": dt.datetime.fromtimestamp(end.timestamp() + finished - 0.5, UTC).isoformat()}
    return lag.IntervalRun(end - dt.timedelta(minutes=1), end, 60_000, seconds, finished, 0, report)


def test_readers_lag_is_the_newest_ws_age_just_before_the_next_is_published() -> None:
    runs = [_run(END, 20.5, 1.0), _run(END + dt.timedelta(minutes=1), 25.5, 1.0)]
    assert runs[0].age_at_publish == pytest.approx(21.0)
    # W of the first interval is read until 25 s after the second interval's end: 60 + 25 + 1 s behind the clock.
    assert lag.behind_before_next_publish(runs) == [pytest.approx(86.0)]
    lines = lag.summary_lines(runs, 60, "local[2]", [5.0, 7.0, 6.0], in_slack=2)
    assert lines[0].split()[:3] == ["median", "60,000", "10.0"] and lines[1].split()[:4] == ["max", "60,000", "10.0", "25.5"]
    assert ("Spark alone on local[2] (start, a task per slot, stop): 6.0 s, median of 3 (5.0, 7.0, 6.0; 2 between intervals, "
            "1 after the last)") in lines[2] and "1.67x Spark alone" in lines[2]
    assert "finished inside the next 60 s interval: yes (latest 25.5 s" in lines[3]
    assert "90 s behind" in lines[4] and ": yes (median 86.0 s, max 86.0 s)" in lines[4]


def test_a_late_or_failed_interval_misses_the_targets() -> None:
    late = [_run(END, 20.0, 1.0), _run(END + dt.timedelta(minutes=1), 75.0, 1.0)]
    lines = lag.summary_lines(late, 60, "local[2]", [])
    assert "inside the next 60 s interval: NO (latest 75.0 s after its interval's end; 1 late)" in lines[3]
    assert ": NO (median 135.5 s" in lines[4] and "not measured (no slack" in lines[2]
    failed = lag.IntervalRun(END, END + dt.timedelta(minutes=1), 10, 3.0, 3.0, 1, {}, "boom\nerror: it broke\n")
    assert lag.interval_line(failed).endswith("FAILED (exit 1): error: it broke")
    assert "1 without a published W" in lag.summary_lines([failed], 60, "", [])[3]


def test_an_interval_off_the_clock_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    for bad in ("7", "90", "0"):
        with pytest.raises(SystemExit):
            lag.main(["--interval-seconds", bad])
    assert "expected a divisor of 60 or whole minutes dividing an hour, found 0" in capsys.readouterr().err


@pytest.mark.slow  # the embedded Kafka and two live intervals: ~20 s
def test_a_tiny_live_run_prints_every_interval_and_the_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert lag.main(["--intervals", "2", "--interval-seconds", "5", "--rate", "100", "--tables", "2", "--spark", "",
                     "--workdir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("lag: canal-json, 2 tables, 3 partitions, 100 row changes/s, 2 intervals of 5 s, `tidelake run` "
                          "in-process; load averages ")
    rows = re.findall(r"^(\d\d:\d\d:\d\d)\.\.(\d\d:\d\d:\d\d) +([\d,]+) +([\d.]+) +([\d.]+) +([\d.]+) +([\d.]+)$", out, re.MULTILINE)
    assert len(rows) == 2, out
    assert rows[0][1] == rows[1][0]  # consecutive intervals
    assert all(int(r[2].replace(",", "")) > 0 for r in rows)  # row changes produced in each
    assert all(0 <= float(r[5]) <= 5 for r in rows), out  # W within a few watermarks of each interval's end
    for line in ("\nmedian ", "\nmax ", "Spark alone: not measured (--spark '': the intervals ran in-process)",
                 "target: every interval's run finished inside the next 5 s interval: ", "target: readers at most interval + 30 s",
                 "load averages after: "):
        assert line in out, line
