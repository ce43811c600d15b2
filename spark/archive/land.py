"""Stage 1, landing: copy every planned offset range into raw Parquet segments, then publish.

``land_interval`` is idempotent: an interval whose manifest exists is returned as it is;
otherwise offsets are planned, each range is split into chunks of at most
``segment_max_messages``, every chunk is landed by one task (a Spark task with
``SparkRunner``, a plain call with ``LocalRunner``), and only when every segment is
durable is the manifest created, create-only. A run that dies part-way leaves no
manifest; its retry rewrites the same deterministic segment names.

Segment schema (one row per Kafka message, Spark-readable Parquet)::

    topic string, partition int32, offset int64, timestamp_ms int64, timestamp_type int8,
    key binary, value binary, headers list<struct<key string, value binary>>
"""

from __future__ import annotations

import datetime as dt
import logging
import time
import zlib
from dataclasses import dataclass, field
from typing import Any, Iterable

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from confluent_kafka import Message

from spark.runtime import credentials

from spark.archive import layout
from spark.config import PipelineConfig
from spark.archive.kafka import KafkaHook
from spark.archive.floors import require_interval_kept
from spark.archive.manifest import Manifest, PartitionRange, Segment, neighbours, read_manifest
from spark.archive.offsets import snapshot_offsets
from spark.archive.storage import AlreadyExists, Storage, open_storage
from spark.runtime.runners import LocalRunner, Runner
from spark.runtime.tasks import no_cyclic_gc, sized

log = logging.getLogger(__name__)

ROW_GROUP = 10_000

HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
SEGMENT_SCHEMA = pa.schema(
    [
        ("topic", pa.dictionary(pa.int32(), pa.string())),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp_ms", pa.int64()),
        ("timestamp_type", pa.int8()),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("headers", HEADERS_TYPE),  # null when the message has none
    ]
)


class SegmentChecksum:
    """CRC-32s of a segment's offsets, key and value bytes and lengths, fed batch by batch.

    Computed from Arrow buffers (no per-row Python) and independent of how the messages
    were batched, so a retry of the same range gives the same checksum.
    """

    def __init__(self) -> None:
        self._crcs = [0] * 5

    def update(self, table: pa.Table) -> None:
        parts = [table.column("offset")]
        for name in ("key", "value"):
            column = table.column(name)
            parts.append(pc.fill_null(pc.binary_length(column), -1))  # -1 tells null from empty
            parts.append(column)
        for i, part in enumerate(parts):
            for chunk in part.chunks:
                data = chunk.buffers()[-1]
                if data is not None:
                    self._crcs[i] = zlib.crc32(data, self._crcs[i])

    def digest(self) -> int:
        return zlib.crc32(b"".join(c.to_bytes(4, "big") for c in self._crcs))


def range_checksum(chunk_digests: Iterable[int]) -> str:
    """A partition range's checksum in its manifest: CRC-32 of its chunks' ``SegmentChecksum``
    digests (4 bytes big-endian each, in offset order), as 8 hex digits."""
    checksum = 0
    for digest in chunk_digests:
        checksum = zlib.crc32(digest.to_bytes(4, "big"), checksum)
    return f"{checksum:08x}"


def segment_table(
    topic: str, partition: int, offsets: list[int], timestamps: list[int | None], timestamp_types: list[int],
    keys: list[bytes | None], values: list[bytes | None], headers: list[Any],
) -> pa.Table:
    """Messages of one partition as a segment table (the archive's one row format)."""
    n = len(offsets)
    return pa.Table.from_arrays(
        [
            pa.DictionaryArray.from_arrays(pa.repeat(pa.scalar(0, pa.int32()), n), pa.array([topic])),
            pa.repeat(pa.scalar(partition, pa.int32()), n),
            pa.array(offsets, pa.int64()),
            pa.array(timestamps, pa.int64()),
            pa.array(timestamp_types, pa.int8()),
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            pa.array(headers, HEADERS_TYPE),
        ],
        schema=SEGMENT_SCHEMA,
    )


# Message bytes are unique and opaque: dictionary pages and min/max statistics over them
# cost CPU on every segment and are never used. The position columns keep both, for pruning.
_POSITION_COLUMNS = ["topic", "partition", "offset", "timestamp_ms", "timestamp_type"]


def open_segment_writer(storage: Storage, path: str) -> tuple[Any, pq.ParquetWriter]:
    out = storage.open_output(path)
    writer = pq.ParquetWriter(
        out, SEGMENT_SCHEMA, compression="zstd", compression_level=1,
        use_dictionary=["topic"], write_statistics=_POSITION_COLUMNS,
    )
    return out, writer


@dataclass(frozen=True)
class LandTask:
    """One chunk of one partition range; everything a task needs, picklable for Spark.

    ``config`` is ``credentials.task_config``'s: no secrets travel inside a task.
    """

    config: PipelineConfig
    topic: str
    partition: int
    start: int
    end: int


@dataclass(frozen=True)
class LandedChunk:
    topic: str
    partition: int
    segment: Segment | None
    messages: int
    checksum: int
    seconds: float


def chunks(ranges: Iterable[PartitionRange], config: PipelineConfig) -> list[LandTask]:
    size = config.segment_max_messages
    carried = credentials.task_config(config)
    tasks = []
    for r in ranges:
        for a in range(r.start, r.end, size):
            tasks.append(LandTask(carried, r.topic, r.partition, a, min(a + size, r.end)))
    return tasks


def land_chunk(task: LandTask, storage: Storage | None = None) -> LandedChunk:
    """Copy offsets [start, end) of one partition into one segment file (none if empty)."""
    started = time.perf_counter()
    config = credentials.resolve(task.config)
    storage = storage or open_storage(config.storage)
    path = layout.segment_path(config.name, task.topic, task.partition, task.start, task.end)
    count = 0
    checksum = SegmentChecksum()
    writer = None
    out = None
    try:
        # Prefetch no further than the chunk: librdkafka otherwise queues up to 100k messages
        # past its end, which the next chunk's task fetches again.
        options = {"queued.min.messages": str(min(max(task.end - task.start, 1), 100_000)), **config.kafka_options}
        with no_cyclic_gc(), KafkaHook(config.bootstrap_servers, options) as kafka:
            for batch in kafka.read_range(task.topic, task.partition, task.start, task.end):
                # One C-level map per column: the per-message cost is what landing costs.
                n = len(batch)
                stamps = list(map(Message.timestamp, batch))
                table = segment_table(
                    task.topic, task.partition, list(map(Message.offset, batch)),
                    [ts if kind else None for kind, ts in stamps], [kind for kind, _ in stamps],
                    list(map(Message.key, batch)), list(map(Message.value, batch)), list(map(Message.headers, batch)),
                )
                count += n
                checksum.update(table)
                if writer is None:
                    out, writer = open_segment_writer(storage, path)
                writer.write_table(table, row_group_size=ROW_GROUP)
    finally:
        if writer is not None:
            writer.close()
        if out is not None:
            out.close()
    segment = None
    if count:
        size = storage.arrow_fs.get_file_info(storage.arrow_path(path)).size
        segment = Segment(path, task.start, task.end, count, size)
    return LandedChunk(task.topic, task.partition, segment, count, checksum.digest(), time.perf_counter() - started)


@dataclass
class LandResult:
    manifest: Manifest
    reused: bool
    report: dict[str, Any] = field(default_factory=dict)


def land_interval(
    config: PipelineConfig,
    interval_start: dt.datetime,
    interval_end: dt.datetime,
    runner: Runner | None = None,
    storage: Storage | None = None,
) -> LandResult:
    """Land one data interval [start, end) and publish its manifest (stage 1 of a run)."""
    if interval_end <= interval_start:
        raise ValueError(f"interval end {interval_end} is not after its start {interval_start}")
    storage = storage or open_storage(config.storage)
    runner = runner or LocalRunner()
    require_interval_kept(storage, config.name, interval_start, interval_end, "land")  # its offsets are history now
    path = layout.manifest_path(config.name, interval_start, interval_end)
    if storage.exists(path):
        return LandResult(read_manifest(storage, path), reused=True)
    started = time.perf_counter()
    previous, _ = neighbours(storage, config.name, interval_start, interval_end)
    ranges = snapshot_offsets(config, interval_start, interval_end, storage)  # reused if already snapshotted
    runner = sized(runner, sum(r.end - r.start for r in ranges))
    landed = runner.map(land_chunk, chunks(ranges, config))
    by_partition: dict[tuple[str, int], list[LandedChunk]] = {}
    for c in landed:
        by_partition.setdefault((c.topic, c.partition), []).append(c)
    partitions = []
    for r in ranges:
        got = sorted(by_partition.get((r.topic, r.partition), []), key=lambda c: c.segment.start if c.segment else 0)
        partitions.append(
            PartitionRange(
                r.topic, r.partition, r.start, r.end, r.gap,
                tuple(c.segment for c in got if c.segment is not None),
                sum(c.messages for c in got), range_checksum(c.checksum for c in got),
            )
        )
    manifest = Manifest(config.name, interval_start, interval_end, tuple(partitions), previous.path if previous else None)
    report = {
        "step": "land",
        "pipeline": config.name,
        "interval": {"start": interval_start.isoformat(), "end": interval_end.isoformat()},
        "messages": manifest.messages,
        "segments": sum(len(p.segments) for p in partitions),
        "bytes": sum(s.bytes for p in partitions for s in p.segments),
        "seconds": round(time.perf_counter() - started, 3),
        "ran_in": runner.where,  # "driver": without Spark (driver_max_messages)
        "gaps": [{"topic": p.topic, "partition": p.partition, "start": p.gap.start, "end": p.gap.end} for p in partitions if p.gap],
        "partitions": [{"topic": p.topic, "partition": p.partition, "start": p.start, "end": p.end, "messages": p.messages} for p in partitions],
    }
    storage.write(layout.report_path(config.name, interval_start, interval_end, "land"), orjson.dumps(report, option=orjson.OPT_INDENT_2))
    try:
        storage.create(path, manifest.to_json())
    except AlreadyExists:
        # A concurrent run published first; its manifest is the truth for this interval.
        return LandResult(read_manifest(storage, path), reused=True)
    return LandResult(manifest, reused=False, report=report)
