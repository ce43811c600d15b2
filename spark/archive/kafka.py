"""The Kafka hook: everything tidelake asks a broker, through confluent-kafka, plain Kafka only.

Offsets are read without a consumer group commit: the archive's manifests are the
consumer position, so nothing here ever commits offsets to Kafka.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass
from typing import Iterator, Mapping

from confluent_kafka import OFFSET_END, Consumer, KafkaError, KafkaException, Message, TopicPartition

from cdc_codecs import TidelakeError

from spark.runtime.services import KAFKA_CALL_TIMEOUT, KAFKA_SOCKET_TIMEOUT

TIMEOUT_S = KAFKA_CALL_TIMEOUT
BATCH = 5_000
# librdkafka's own log lines (a broker that is down: a "Connect ... failed" line every ~50 ms, ~600 in
# a call's 30 s) go to this logger, not to stderr: they reach the task log only with -v / --verbose
# (tidelake's DEBUG); otherwise the last few are kept and the failure's one line quotes the newest.
CLIENT_LOG = logging.getLogger("tidelake.kafka.client")


class KafkaHookError(TidelakeError):
    """A broker call failed; the message says which call, topic and partition."""


class _ClientLog(logging.Handler):
    """The newest librdkafka lines of one client, for the error that ends its call."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: deque[str] = deque(maxlen=5)

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _client_logger() -> tuple[logging.Logger, _ClientLog]:
    keep = _ClientLog()
    logger = logging.getLogger(f"{CLIENT_LOG.name}.{id(keep):x}")
    logger.addHandler(keep)
    logger.setLevel(logging.DEBUG)
    # Propagated (to the task log) only when tidelake's debug lines are asked for.
    logger.propagate = CLIENT_LOG.isEnabledFor(logging.DEBUG)
    return logger, keep


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
            # Bounded waits (spark.runtime.services): a broker that stops answering fails a call
            # within socket.timeout.ms; every call passes its own timeout too.
            "socket.timeout.ms": int(KAFKA_SOCKET_TIMEOUT * 1000),
            "socket.connection.setup.timeout.ms": int(KAFKA_SOCKET_TIMEOUT * 1000),
            "reconnect.backoff.ms": 100,
            "reconnect.backoff.max.ms": 2000,
        }
        conf.update(options or {})
        self._logger, self._client_log = _client_logger()
        conf["logger"] = self._logger
        self._consumer = Consumer(conf)

    def _why(self, serve: bool = True) -> str:
        """The newest librdkafka line (e.g. "Connect to ipv4#10.0.0.5:9092 failed: Connection refused"), if any.

        ``serve``: deliver the client's queued log lines first (a call outside ``read_range``, with
        nothing assigned, so polling consumes no message)."""
        if serve:
            try:
                self._consumer.poll(0)
            except Exception:  # noqa: BLE001 - only for the message
                pass
        if not self._client_log.lines:
            return ""
        line = self._client_log.lines[-1]
        return f" (last client message: {line.split(': ', 1)[-1] if line.count(': ') > 1 else line})"

    def close(self) -> None:
        try:
            self._consumer.close()
        finally:
            self._logger.removeHandler(self._client_log)
            logging.Logger.manager.loggerDict.pop(self._logger.name, None)

    def __enter__(self) -> KafkaHook:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def partitions(self, topic: str) -> list[int]:
        try:
            md = self._consumer.list_topics(topic, timeout=TIMEOUT_S)
        except KafkaException as exc:
            raise KafkaHookError(f"list_topics({topic!r}) failed: {exc}{self._why()}") from None
        t = md.topics.get(topic)
        if t is None or t.error is not None:
            reason = t.error.str() if t is not None and t.error else "not found"
            raise KafkaHookError(f"topic {topic!r}: {reason}; check the topic name and that the broker auto-creation setting is off")
        return sorted(t.partitions)

    def watermarks(self, topic: str, partition: int) -> Watermarks:
        try:
            low, high = self._consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=TIMEOUT_S, cached=False)
        except KafkaException as exc:
            raise KafkaHookError(f"watermarks of {topic}/{partition} failed: {exc}{self._why()}") from None
        return Watermarks(low, high)

    def offsets_for_time(self, topic: str, partitions: list[int], timestamp_ms: int) -> dict[int, int | None]:
        """Per partition, the first offset whose timestamp is >= ``timestamp_ms``, or None if none."""
        if not partitions:
            return {}
        query = [TopicPartition(topic, p, timestamp_ms) for p in partitions]
        try:
            answer = self._consumer.offsets_for_times(query, timeout=TIMEOUT_S)
        except KafkaException as exc:
            raise KafkaHookError(f"offsets_for_times on {topic} at {timestamp_ms} failed: {exc}{self._why()}") from None
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
                            f"(want up to {end}); is the broker reachable?{self._why(serve=False)}"
                        )
        finally:
            self._consumer.unassign()
