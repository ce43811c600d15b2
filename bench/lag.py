"""Lag behind a live stream (issue 26): ``tidelake run`` every interval while a producer writes at a steady rate.

    python -m bench lag [--rate 1000] [--intervals 15] [--interval-seconds 60] [--spark local[2]]
                        [--protocol canal-json] [--tables 10] [--partitions 3] [--workdir DIR]

An embedded Kafka (noida-db, as the demo and the tests start it) gets a TiDB-like workload
(``spark.demo.workload``: inserts, updates, some moving the key, deletes over ``--tables`` tables)
encoded the way TiCDC sends it, at ``--rate`` row changes per second with commit timestamps and
broker timestamps from the wall clock, and a watermark (resolved ts) on every partition every
second. The bench is the scheduler: intervals are the clock's consecutive periods of
``--interval-seconds`` ([minute, minute + 1) by default, what cron ``* * * * *`` gives), and right
after each one ends it runs ``tidelake run --config F --start A --end B --spark MASTER`` as a
subprocess, the way an Airflow task would start it (a run still going when the next interval ends
delays the next, as ``max_active_runs=1`` does). ``--spark ''`` runs the intervals in-process.

Per interval it prints the row changes produced in it, the run's wall time, when it finished
after the interval's end, and from the run's apply report the published W's lag behind the
interval end (``lag_seconds``) and W's age when it was published. Then the medians and maxima,
and beside them Spark alone (``bench/spark_alone.py``: start a context, a task per slot, stop),
submitted on the same master in the same session: between intervals when it fits twice over in the
slack before the next run (up to 5 times), else (to 3 at least) after the last; its median.

Targets (issue 26, at 1k events/s on local[2]): every interval's run finishes inside the next
interval (before the scheduler would start the next run), and readers are never more than
interval + 30 s behind: the newest published W, just before the next one is published, is at
most interval + 30 s older than the wall clock.
"""

from __future__ import annotations

import argparse
import bisect
import dataclasses
import datetime as dt
import itertools
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import orjson

from cdc_codecs import DdlChange, Event, RowChange, SourcePosition, Watermark, get_encoder
from cdc_codecs.registry import PROTOCOLS
from spark.archive import layout
from spark.demo.workload import Workload, WorkloadSpec, tso

REPO = Path(__file__).resolve().parents[1]
PIPELINE = "lag"
TOPIC = "cdc"
WATERMARK_EVERY = 1.0  # seconds between watermarks on every partition (TiCDC's resolved ts is about as frequent)
TICK = 0.05  # seconds between the producer's batches
KEY_SPACE = 20_000  # keys per table: inserts first, then a mix of updates and deletes as tables fill
TARGET_BEHIND = 30.0  # seconds readers may be behind beyond one interval
SPARK_ALONE_MIN = 3  # Spark alone measurements at least (topped up after the last interval)
SPARK_ALONE_IN_SLACK = 5  # Spark alone measurements at most between intervals
UTC = dt.UTC


def watermark_protocols() -> list[str]:
    """TiCDC's protocols: ordered by commitTs, with watermarks (resolved ts). The others' W is derived from
    event times and binlog positions (README, "Derived watermarks"), which the workload does not generate."""
    mark = Watermark(1, SourcePosition(TOPIC, 0, 0))
    return [name for name, spec in PROTOCOLS.items()
            if spec.carries_commit_ts() and get_encoder(name).encode_watermark(mark) is not None]


def schedule(now: float, seconds: int, count: int, lead: float = 3.0) -> list[tuple[dt.datetime, dt.datetime]]:
    """``count`` consecutive intervals of ``seconds``, aligned on the clock, the first starting at least ``lead`` s after ``now``."""
    first = -(-int(now + lead) // seconds) * seconds
    return [(dt.datetime.fromtimestamp(first + i * seconds, UTC), dt.datetime.fromtimestamp(first + (i + 1) * seconds, UTC))
            for i in range(count)]


class WallClock:
    """TiDB commit timestamps from the wall clock, strictly increasing (the logical part breaks ties)."""

    def __init__(self) -> None:
        self.last = 0

    def next(self) -> int:
        self.last = max(tso(int(time.time() * 1000)), self.last + 1)
        return self.last


class LiveProducer(threading.Thread):
    """Row changes at ``rate`` per second into ``topic``, a watermark on every partition every second.

    Every event is stamped with the wall clock at its tick (commit ts and broker timestamp), so a
    watermark sent at t covers what was committed before t, as TiCDC's resolved ts does.
    """

    def __init__(self, bootstrap: str, protocol: str, tables: int, partitions: int, rate: float) -> None:
        super().__init__(name="lag-producer", daemon=True)
        from confluent_kafka import Producer

        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        self.encoder = get_encoder(protocol)
        self.workload = Workload(WorkloadSpec(database="live", tables=tables, key_space=KEY_SPACE, seed=26, alter=False))
        self.partitions, self.rate = partitions, rate
        self.clock = WallClock()
        self.stop = threading.Event()
        self.sent_at: list[int] = []  # broker timestamp (ms) of each tick's row changes, increasing
        self.sent: list[int] = []  # row changes of each tick
        self.errors: list[str] = []
        self.failure: BaseException | None = None

    def _send(self, events: list[Event], at_ms: int) -> None:
        for r in self.encoder.encode_all(events, self.partitions):
            self.producer.produce(TOPIC, key=r.key, value=r.value, partition=r.partition, timestamp=at_ms,
                                  on_delivery=self._delivered)
        self.producer.poll(0)

    def _delivered(self, err: Any, _msg: Any) -> None:
        if err is not None:
            self.errors.append(str(err))

    def _stamped(self, event: Event) -> Event:
        ts = self.clock.next()
        assert isinstance(event, (RowChange, DdlChange))
        return event._replace(commit_ts=ts, event_time_ms=ts >> 18)

    def run(self) -> None:
        try:
            self._produce()
        except BaseException as exc:  # the bench checks after every interval: a dead producer ends it
            self.failure = exc
            raise

    def _produce(self) -> None:
        self._send([self._stamped(e) for e in self.workload.creates()], int(time.time() * 1000))
        names = list(self.workload.schemas)
        started = time.time()
        total = 0
        next_mark = started
        while not self.stop.is_set():
            now = time.time()
            due = int((now - started) * self.rate) - total
            events: list[Event] = [self._stamped(self.workload.change(self.workload.rng.choice(names))) for _ in range(due)]
            if now >= next_mark:  # after this tick's changes: every change sent so far is below it
                events.append(Watermark(self.clock.next(), SourcePosition(TOPIC, 0, 0)))
                next_mark += WATERMARK_EVERY
            at_ms = int(time.time() * 1000)  # sent after it commits: no broker timestamp below a commit ts of its tick
            self._send(events, at_ms)
            if due:
                self.sent_at.append(at_ms)
                self.sent.append(due)
                total += due
            self.stop.wait(max(0.0, TICK - (time.time() - now)))
        self.producer.flush(30)
        self.producer = None  # dropped now: a client alive when the broker stops logs reconnect errors

    def events_before(self, instant: dt.datetime) -> int:
        """Row changes sent with a broker timestamp before ``instant`` (the ones the interval ending there lands)."""
        n = bisect.bisect_left(self.sent_at, int(instant.timestamp() * 1000))
        return sum(self.sent[:n])


@dataclasses.dataclass
class IntervalRun:
    start: dt.datetime
    end: dt.datetime
    events: int  # row changes produced with broker timestamps in [start, end) (the first: since the producer began)
    seconds: float  # the run's wall time, process start to exit
    finished: float  # when the run exited, seconds after the interval's end
    returncode: int
    report: dict[str, Any]  # the apply report ({} if the run wrote none)
    tail: str = ""

    @property
    def watermark(self) -> int | None:
        return self.report.get("watermark")

    @property
    def lag(self) -> float | None:
        """W behind the interval end, as the apply report states it."""
        return self.report.get("lag_seconds")

    @property
    def published_at(self) -> float | None:
        """When W became readable: the apply report's ``finished_at``."""
        at = self.report.get("finished_at")
        return dt.datetime.fromisoformat(at).timestamp() if at and self.watermark else None

    @property
    def age_at_publish(self) -> float | None:
        """How far W was behind the wall clock when it was published."""
        return self.published_at - (self.watermark >> 18) / 1000 if self.published_at and self.watermark else None


def pipeline_toml(bootstrap: str, archive: Path, protocol: str, interval_seconds: int, first: dt.datetime) -> str:
    lines = [f'name = "{PIPELINE}"', 'start = "earliest"', "", "[kafka]", f'bootstrap_servers = "{bootstrap}"', "",
             "[storage]", f'url = "{archive}"', "", "[[topics]]", f'name = "{TOPIC}"', f'protocol = "{protocol}"']
    if interval_seconds % 60 == 0:  # the DAG's schedule for the same intervals (sub-minute ones have no cron)
        minutes = interval_seconds // 60
        lines += ["", "[schedule]", f'cron = "{"*" if minutes == 1 else f"*/{minutes}"} * * * *"',
                  f'start_date = "{first.isoformat().replace("+00:00", "Z")}"']
    return "\n".join(lines) + "\n"


def run_interval(config_file: Path, archive: Path, start: dt.datetime, end: dt.datetime, master: str) -> tuple[float, int, dict, str]:
    """``tidelake run`` over [start, end) as a subprocess: its wall time, exit code, apply report and output's tail."""
    argv = [sys.executable, "-m", "spark.cli", "run", "-q", "--config", str(config_file), "--start", _iso(start), "--end", _iso(end)]
    if master:
        argv += ["--spark", master]
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "TIDELAKE_SPARK_LOG_LEVEL": "ERROR"}
    began = time.perf_counter()
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - began
    report_file = archive / layout.report_path(PIPELINE, start, end, "apply")
    report = orjson.loads(report_file.read_bytes()) if report_file.exists() else {}
    return seconds, done.returncode, report, (done.stdout + done.stderr)[-2000:]


def _iso(instant: dt.datetime) -> str:
    return instant.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


HEADER = f"{'interval':<19} {'events':>8} {'run s':>7} {'done at end+ s':>15} {'W lag s':>8} {'W age at publish s':>19}"


def interval_line(run: IntervalRun) -> str:
    span = f"{run.start:%H:%M:%S}..{run.end:%H:%M:%S}"
    line = (f"{span:<19} {run.events:>8,} {run.seconds:>7.1f} {run.finished:>15.1f} {_seconds(run.lag):>8} "
            f"{_seconds(run.age_at_publish):>19}")
    if run.returncode:
        return line + f"  FAILED (exit {run.returncode}): {run.tail.strip().splitlines()[-1] if run.tail.strip() else ''}"
    if not run.watermark:
        return line + "  no consistent W yet"
    return line + ("" if run.report.get("outcome") == "published" else f"  {run.report.get('outcome')}")


def behind_before_next_publish(runs: list[IntervalRun]) -> list[float]:
    """For each published W followed by another: how far it was behind the wall clock just before the next one replaced it."""
    published = [r for r in runs if r.published_at]
    return [b.published_at - (a.watermark >> 18) / 1000 for a, b in itertools.pairwise(published)]


def summary_lines(runs: list[IntervalRun], interval_seconds: int, master: str, spark_alone: list[float],
                  in_slack: int = 0) -> list[str]:
    """The medians and maxima, Spark alone (the first ``in_slack`` measured between intervals) and the targets."""
    def stats(values: list[float]) -> tuple[str, str]:
        return (f"{statistics.median(values):.1f}", f"{max(values):.1f}") if values else ("-", "-")

    columns = [[float(r.events) for r in runs], [r.seconds for r in runs], [r.finished for r in runs],
               [r.lag for r in runs if r.lag is not None], [r.age_at_publish for r in runs if r.age_at_publish is not None]]
    med, top = zip(*(stats(c) for c in columns))
    lines = [f"{'median':<19} {float(med[0]):>8,.0f} {med[1]:>7} {med[2]:>15} {med[3]:>8} {med[4]:>19}",
             f"{'max':<19} {float(top[0]):>8,.0f} {top[1]:>7} {top[2]:>15} {top[3]:>8} {top[4]:>19}"]
    if master and spark_alone:
        alone = statistics.median(spark_alone)
        lines.append(f"Spark alone on {master} (start, a task per slot, stop): {alone:.1f} s, median of {len(spark_alone)} "
                     f"({', '.join(f'{s:.1f}' for s in spark_alone)}; {in_slack} between intervals, "
                     f"{len(spark_alone) - in_slack} after the last); a run's median wall time is "
                     f"{statistics.median(columns[1]) / alone:.2f}x Spark alone")
    elif master:
        lines.append(f"Spark alone on {master}: not measured (no slack between intervals)")
    else:
        lines.append("Spark alone: not measured (--spark '': the intervals ran in-process)")
    failed = [r for r in runs if r.returncode or not r.watermark]
    late = [r for r in runs if r.finished > interval_seconds]
    inside = not late and not failed
    lines.append(f"target: every interval's run finished inside the next {interval_seconds} s interval: "
                 f"{'yes' if inside else 'NO'} (latest {max(columns[2], default=0):.1f} s after its interval's end"
                 f"{f'; {len(late)} late' if late else ''}{f'; {len(failed)} without a published W' if failed else ''})")
    behind = behind_before_next_publish(runs)
    bound = interval_seconds + TARGET_BEHIND
    if behind:
        lines.append(f"target: readers at most interval + {TARGET_BEHIND:.0f} s = {bound:.0f} s behind (the newest W's age just "
                     f"before the next W replaces it): {'yes' if max(behind) <= bound and not failed else 'NO'} "
                     f"(median {statistics.median(behind):.1f} s, max {max(behind):.1f} s)")
    else:
        lines.append("target: readers' lag: not measured (fewer than two Ws published)")
    return lines


def load_averages() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench lag", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=1000.0, help="row changes per second (default %(default)s)")
    parser.add_argument("--intervals", type=int, default=15, help="intervals run (default %(default)s)")
    parser.add_argument("--interval-seconds", type=int, default=60,
                        help="interval length; divides 60 or is whole minutes dividing an hour, so intervals sit on the "
                             "clock as a cron's do (default %(default)s)")
    parser.add_argument("--spark", default="local[2]", metavar="MASTER",
                        help="`tidelake run --spark MASTER`; '' runs the intervals in-process (default %(default)s)")
    parser.add_argument("--protocol", choices=watermark_protocols(), default="canal-json",
                        help="the topic's protocol: one whose upstream sends watermarks (canal-json: TiCDC's, with the "
                             "_tidb extension) (default %(default)s)")
    parser.add_argument("--tables", type=int, default=10, help="tables the workload changes (default %(default)s)")
    parser.add_argument("--partitions", type=int, default=3, help="partitions of the topic (default %(default)s)")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "tidelake-bench",
                        help="the broker's data and the archive go to lag/ below it, removed first (default %(default)s)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    s = args.interval_seconds
    if s < 1 or 3600 % s or (s > 60 and s % 60):
        parser.error(f"--interval-seconds: expected a divisor of 60 or whole minutes dividing an hour, found {s}")
    for flag in ("rate", "intervals", "tables", "partitions"):
        if getattr(args, flag) <= 0:
            parser.error(f"--{flag}: expected a positive number, found {getattr(args, flag)}")
    from confluent_kafka.admin import AdminClient, NewTopic

    from bench.jobs import submit_spark_alone
    from spark.runtime.embedded import kafka_service

    root = args.workdir / "lag"
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    archive = root / "archive"
    runs: list[IntervalRun] = []
    spark_alone: list[float] = []
    in_slack = 0
    print(f"lag: {args.protocol}, {args.tables} tables, {args.partitions} partitions, {args.rate:,.0f} row changes/s, "
          f"{args.intervals} intervals of {s} s, `tidelake run` {f'--spark {args.spark}' if args.spark else 'in-process'}; "
          f"load averages {load_averages()}", flush=True)
    with kafka_service(root) as kafka:
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
        for f in admin.create_topics([NewTopic(TOPIC, args.partitions, 1, config={"retention.ms": "-1"})]).values():
            f.result(30)
        del admin
        spans = schedule(time.time(), s, args.intervals)
        config_file = root / "pipeline.toml"
        config_file.write_text(pipeline_toml(kafka.bootstrap, archive, args.protocol, s, spans[0][0]))
        time.sleep(max(0.0, spans[0][0].timestamp() - 1.0 - time.time()))  # the producer starts a second before the first interval
        producer = LiveProducer(kafka.bootstrap, args.protocol, args.tables, args.partitions, args.rate)
        producer.start()
        print(HEADER, flush=True)
        try:
            counted = 0
            for i, (start, end) in enumerate(spans):
                time.sleep(max(0.0, end.timestamp() - time.time()))
                if producer.failure is not None:
                    raise RuntimeError(f"the producer stopped at {dt.datetime.now(UTC):%H:%M:%S}") from producer.failure
                seconds, code, report, tail = run_interval(config_file, archive, start, end, args.spark)
                events = producer.events_before(end) - counted
                counted += events
                run = IntervalRun(start, end, events, seconds, time.time() - end.timestamp(), code, report, tail)
                runs.append(run)
                print(interval_line(run), flush=True)
                # Spark alone in the slack before the next run, when it fits there twice over.
                slack = spans[i + 1][1].timestamp() - time.time() if i + 1 < len(spans) else 0.0
                estimate = statistics.median(spark_alone) if spark_alone else 10.0
                if args.spark and len(spark_alone) < SPARK_ALONE_IN_SLACK and slack > 2 * estimate:
                    spark_alone.append(submit_spark_alone(args.spark).seconds)
            in_slack = len(spark_alone)
            while args.spark and len(spark_alone) < SPARK_ALONE_MIN:  # after the last interval, with the producer still on
                spark_alone.append(submit_spark_alone(args.spark).seconds)
        finally:
            producer.stop.set()
            producer.join(60)
    for line in summary_lines(runs, s, args.spark, spark_alone, in_slack):
        print(line)
    if producer.errors:
        print(f"producer: {len(producer.errors)} delivery errors, first: {producer.errors[0]}")
    print(f"load averages after: {load_averages()}")
    return 0
