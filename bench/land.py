"""Landing throughput: Kafka -> Parquet segments + manifest, as a ratio to a bare consume loop.

200,000 messages of 1 KB over 4 partitions are produced to a local Kafka-protocol broker
(noida-db). Then, in the same run: the bare loop (one confluent-kafka consumer reading
every message, touching nothing) and ``land_interval`` over the same offsets, with the
in-process runner and with 2 worker processes (the size of this machine). ratio = bare
time / landing time; target >= 0.7.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Callable, Sequence

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from spark.config import PipelineConfig
from spark.land import LocalRunner, land_interval

UTC = dt.timezone.utc
T0 = dt.datetime(2024, 1, 1, tzinfo=UTC)


def _warm(_: int) -> int:
    import spark.land  # noqa: F401 - imports pyarrow, confluent-kafka, as a reused Spark worker has

    return os.getpid()


class ProcessRunner:
    """Chunks on a warm process pool: Spark's local[N] with reused Python workers, minus the JVM."""

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


def bare_consume(bootstrap: str, topic: str, partitions: int, messages: int) -> float:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-bare", "enable.auto.commit": False,
                  "receive.message.max.bytes": 1_000_000_000})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    started = time.perf_counter()
    seen = 0
    while seen < messages:
        for m in c.consume(10_000, timeout=5):
            if m.error() is None:
                seen += 1
    took = time.perf_counter() - started
    c.close()
    return took


def main(argv: list[str] | None = None) -> int:
    from spark.embedded import kafka_service

    parser = argparse.ArgumentParser(prog="python -m bench land")
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--partitions", type=int, default=4)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp, kafka_service(Path(tmp)) as kafka:
        topic = "bench"
        t = time.perf_counter()
        produce(kafka.bootstrap, topic, args.messages, args.size, args.partitions)
        print(f"landing {args.messages:,} messages of {args.size} B over {args.partitions} partitions "
              f"(produced in {time.perf_counter() - t:.1f}s); ratio = bare consume time / landing time, target >= 0.7")
        bare = bare_consume(kafka.bootstrap, topic, args.partitions, args.messages)
        print(f"{'bare confluent-kafka consume loop':40} {bare:7.2f}s {args.messages / bare:>12,.0f} msg/s   1.00")
        for label, runner in [("land_interval, in-process runner", LocalRunner()), ("land_interval, 2 worker processes", ProcessRunner(2))]:
            config = PipelineConfig.from_mapping({
                "name": f"bench-{len(label)}", "kafka": {"bootstrap_servers": kafka.bootstrap},
                "topics": [{"name": topic, "protocol": "canal-json"}], "storage": {"url": str(Path(tmp) / f"archive-{len(label)}")},
            }, "bench")
            started = time.perf_counter()
            result = land_interval(config, T0, T0 + dt.timedelta(days=1), runner=runner)
            took = time.perf_counter() - started
            assert result.manifest.messages == args.messages, result.manifest.messages
            if isinstance(runner, ProcessRunner):
                runner.close()
            print(f"{label:40} {took:7.2f}s {args.messages / took:>12,.0f} msg/s  {bare / took:5.2f}")
    return 0
