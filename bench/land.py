"""Landing throughput: Kafka -> Parquet segments + manifest, as a ratio to a bare consume loop.

200,000 messages of 1 KB over 4 partitions are produced to a local Kafka-protocol broker
(noida-db). Then, in the same run: the bare loop (confluent-kafka consumers reading every
message, touching nothing, with the cyclic GC paused as landing pauses it) and
``land_interval`` over the same offsets, with the in-process runner, with 2 warm worker
processes (Spark's local[2] minus the JVM) and with Spark local[2] itself (a warm session:
one landing is run first to start its Python workers). The bare loop runs two ways, one
consumer assigned all partitions and one consumer per partition in turn; the baseline is
the faster of the two, so the ratio is the stricter one.
ratio = bare time / landing time; target >= 0.7.

The test broker shares this machine's two cores and its fetch latency varies from run to
run (it persists its log in the background), so one warm-up read is discarded and every
variant runs ``--rounds`` times, interleaved; the best time of each is reported (as
``timeit`` does: the minimum is the run least disturbed by the rest of the machine), with
the median beside it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable, Sequence

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from spark.config import PipelineConfig
from spark.archive.land import land_interval
from spark.runtime.runners import LocalRunner, SparkRunner
from spark.runtime.session import build_context
from spark.runtime.tasks import no_cyclic_gc

UTC = dt.timezone.utc
T0 = dt.datetime(2024, 1, 1, tzinfo=UTC)
BARE_ALL = "bare consume, 1 consumer, all partitions"
BARE_EACH = "bare consume, 1 consumer per partition"


def _warm(_: int) -> int:
    import spark.archive.land  # noqa: F401 - imports pyarrow, confluent-kafka, as a reused Spark worker has

    return os.getpid()


class ProcessRunner:
    """Chunks on a warm process pool: Spark's local[N] with reused Python workers, minus the JVM."""

    where = "spark"  # it stands for Spark's executors
    start_seconds = 0.0

    def __init__(self, workers: int) -> None:
        self.pool = ProcessPoolExecutor(workers)
        list(self.pool.map(_warm, range(workers * 2)))

    def map(self, fn: Callable[[Any], Any], tasks: Sequence[Any]) -> list[Any]:
        return list(self.pool.map(fn, tasks))

    def close(self) -> None:
        self.pool.shutdown()


def produce(bootstrap: str, topic: str, messages: int, size: int, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, partitions, 1, config={"retention.ms": "-1"})]).values():
        f.result(60)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10_000, "queue.buffering.max.messages": 1_000_000})
    payload = os.urandom(size // 2).hex().encode()
    at = int(T0.timestamp() * 1000)
    for i in range(messages):
        p.produce(topic, key=str(i).encode(), value=payload, partition=i % partitions, timestamp=at + i)
        if i % 50_000 == 0:
            p.flush(120)
    assert p.flush(300) == 0


def bare_consume(bootstrap: str, topic: str, partitions: Sequence[int], messages: int) -> float:
    """Seconds for one consumer, assigned ``partitions`` from offset 0, to receive ``messages``."""
    started = time.perf_counter()
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-bare", "enable.auto.commit": False,
                  "receive.message.max.bytes": 1_000_000_000})
    c.assign([TopicPartition(topic, p, 0) for p in partitions])
    seen = 0
    with no_cyclic_gc():
        while seen < messages:
            for m in c.consume(min(10_000, messages - seen), timeout=5):  # never wait for more than remain
                if m.error() is None:
                    seen += 1
    c.close()
    return time.perf_counter() - started


def bare_consume_each(bootstrap: str, topic: str, partitions: int, messages: int) -> float:
    """One consumer per partition, one after another (what a task per partition does)."""
    return sum(bare_consume(bootstrap, topic, [p], messages // partitions) for p in range(partitions))


def land_once(bootstrap: str, topic: str, messages: int, archive: Path, runner: Any) -> float:
    config = PipelineConfig.from_mapping({
        "name": "bench", "kafka": {"bootstrap_servers": bootstrap},
        "topics": [{"name": topic, "protocol": "canal-json"}], "storage": {"url": str(archive)},
    }, "bench")
    started = time.perf_counter()
    result = land_interval(config, T0, T0 + dt.timedelta(days=1), runner=runner)
    took = time.perf_counter() - started
    assert result.manifest.messages == messages, result.manifest.messages
    return took


RUNNERS = ("local", "processes", "spark")


def open_runner(name: str, stack: ExitStack) -> tuple[str, Any]:
    """A landing runner by name, closed with ``stack``."""
    if name == "local":
        return "land_interval, in-process runner", LocalRunner()
    if name == "processes":
        pool = ProcessRunner(2)
        stack.callback(pool.close)
        return "land_interval, 2 worker processes", pool
    context = build_context("tidelake-bench-land", "local[2]", **{"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"})
    context.setLogLevel("ERROR")
    stack.callback(context.stop)
    return "land_interval, Spark local[2]", SparkRunner(context)


def main(argv: list[str] | None = None) -> int:
    from spark.runtime.embedded import kafka_service

    parser = argparse.ArgumentParser(prog="python -m bench land")
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5, help="interleaved repetitions of every variant")
    parser.add_argument("--runners", default=",".join(RUNNERS), help=f"comma-separated subset of {', '.join(RUNNERS)}")
    args = parser.parse_args(argv)
    runners = [r for r in args.runners.split(",") if r]
    unknown = set(runners) - set(RUNNERS)
    if unknown:
        parser.error(f"unknown runner(s) {', '.join(sorted(unknown))}; choose from {', '.join(RUNNERS)}")
    with tempfile.TemporaryDirectory() as tmp, kafka_service(Path(tmp)) as kafka, ExitStack() as stack:
        topic = "bench"
        t = time.perf_counter()
        produce(kafka.bootstrap, topic, args.messages, args.size, args.partitions)
        print(f"landing {args.messages:,} messages of {args.size} B over {args.partitions} partitions "
              f"(produced in {time.perf_counter() - t:.1f}s), best of {args.rounds} interleaved rounds; "
              f"ratio = bare consume time / landing time, target >= 0.7", flush=True)
        all_partitions = range(args.partitions)
        bare_consume(kafka.bootstrap, topic, all_partitions, args.messages)  # warm-up, discarded

        def landing(name: str, runner: Any) -> Callable[[int], float]:
            return lambda r: land_once(kafka.bootstrap, topic, args.messages, Path(tmp) / f"{name}-{r}", runner)

        variants: dict[str, Callable[[int], float]] = {
            BARE_ALL: lambda r: bare_consume(kafka.bootstrap, topic, all_partitions, args.messages),
            BARE_EACH: lambda r: bare_consume_each(kafka.bootstrap, topic, args.partitions, args.messages),
        }
        for name in runners:
            label, runner = open_runner(name, stack)
            variants[label] = landing(name, runner)
            variants[label](-1)  # warm-up: Spark starts its Python workers, pools import their modules
        times: dict[str, list[float]] = {label: [] for label in variants}
        for r in range(args.rounds):
            for label, run in variants.items():
                times[label].append(run(r))
        bare = min(min(times[BARE_ALL]), min(times[BARE_EACH]))  # the stricter baseline
        print(f"{'':40} {'best':>7} {'median':>7} {'msg/s (best)':>13} {'ratio':>6}")
        for label, ts in times.items():
            best = min(ts)
            print(f"{label:40} {best:6.2f}s {statistics.median(ts):6.2f}s {args.messages / best:>13,.0f} {bare / best:6.2f}")
    return 0
