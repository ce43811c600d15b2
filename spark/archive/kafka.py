"""The Kafka hook: everything tidelake asks a broker, through confluent-kafka, plain Kafka only.

Offsets are read without a consumer group commit: the archive's manifests are the
consumer position, so nothing here ever commits offsets to Kafka.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Mapping

from confluent_kafka import OFFSET_END, Consumer, KafkaError, KafkaException, Message, TopicPartition

from cdc_codecs import TidelakeError

TIMEOUT_S = 30.0
BATCH = 5_000


class KafkaHookError(TidelakeError):
    """A broker call failed; the message says which call, topic and partition."""


@dataclass(frozen=True)
class Watermarks:
    low: int
    high: int


class KafkaHook:
    """Metadata and range reads for one cluster. Not thread-safe; one per task."""

    def __init__(self, bootstrap_servers: str, options: Mapping[str, str] | None = None) -> None:
        conf = {
            "bootstrap.servers": bootstrap_servers,
            "group.id": "tidelake-archive",  # required by librdkafka; never committed
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "error",
            # Brokers may ignore fetch limits (and a message may be max.message.bytes large):
            # let one fetch hold whatever arrives.
            "receive.message.max.bytes": 1_000_000_000,
            "fetch.max.bytes": 500_000_000,
            "queued.max.messages.kbytes": 262_144,
        }
        conf.update(options or {})
        self._consumer = Consumer(conf)

    def close(self) -> None:
        self._consumer.close()

    def __enter__(self) -> KafkaHook:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def partitions(self, topic: str) -> list[int]:
        try:
            md = self._consumer.list_topics(topic, timeout=TIMEOUT_S)
        except KafkaException as exc:
            raise KafkaHookError(f"list_topics({topic!r}) failed: {exc}") from None
        t = md.topics.get(topic)
        if t is None or t.error is not None:
            reason = t.error.str() if t is not None and t.error else "not found"
            raise KafkaHookError(f"topic {topic!r}: {reason}; check the topic name and that the broker auto-creation setting is off")
        return sorted(t.partitions)

    def watermarks(self, topic: str, partition: int) -> Watermarks:
        try:
            low, high = self._consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=TIMEOUT_S, cached=False)
        except KafkaException as exc:
            raise KafkaHookError(f"watermarks of {topic}/{partition} failed: {exc}") from None
        return Watermarks(low, high)

    def offsets_for_time(self, topic: str, partitions: list[int], timestamp_ms: int) -> dict[int, int | None]:
        """Per partition, the first offset whose timestamp is >= ``timestamp_ms``, or None if none."""
        if not partitions:
            return {}
        query = [TopicPartition(topic, p, timestamp_ms) for p in partitions]
        try:
            answer = self._consumer.offsets_for_times(query, timeout=TIMEOUT_S)
        except KafkaException as exc:
            raise KafkaHookError(f"offsets_for_times on {topic} at {timestamp_ms} failed: {exc}") from None
        out: dict[int, int | None] = {}
        for tp in answer:
            if tp.error is not None:
                raise KafkaHookError(f"offsets_for_times on {topic}/{tp.partition} failed: {tp.error}")
            out[tp.partition] = None if tp.offset < 0 or tp.offset == OFFSET_END else tp.offset
        return out

    def read_range(self, topic: str, partition: int, start: int, end: int) -> Iterator[list[Message]]:
        """Batches of the messages with offsets in [start, end), in offset order.

        Offsets without a message (transaction markers, compacted records) are skipped;
        the read stops once the consumer position reaches ``end``.
        """
        if start >= end:
            return
        tp = TopicPartition(topic, partition, start)
        self._consumer.assign([tp])
        try:
            idle = 0
            next_offset = start
            while True:
                # Ask for no more than the range holds, so consume() returns as soon as it has them.
                batch = self._consumer.consume(max(1, min(BATCH, end - next_offset)), timeout=1.0)
                done = False
                out = batch
                if any(map(Message.error, batch)):  # rare: end-of-partition events, broker errors
                    out = [m for m in batch if m.error() is None]
                    for m in batch:
                        err = m.error()
                        if err is None:
                            continue
                        if err.code() != KafkaError._PARTITION_EOF:
                            raise KafkaHookError(f"reading {topic}/{partition} at {m.offset()}: {err.str()}")
                        done = done or m.offset() >= end
                if out and out[-1].offset() >= end - 1:
                    done = True
                    if out[-1].offset() >= end:  # never past the range, whatever the broker sent
                        out = [m for m in out if m.offset() < end]
                if out:
                    next_offset = out[-1].offset() + 1
                    yield out
                    idle = 0
                if done:
                    return
                position = self._consumer.position([TopicPartition(topic, partition)])[0].offset
                if position >= end:
                    return
                if not batch:
                    idle += 1
                    if idle * 1.0 > TIMEOUT_S:
                        raise KafkaHookError(
                            f"reading {topic}/{partition}: no progress at offset {position} for {TIMEOUT_S:.0f}s "
                            f"(want up to {end}); is the broker reachable?"
                        )
        finally:
            self._consumer.unassign()
