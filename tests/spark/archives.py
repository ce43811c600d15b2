"""Build an archive straight from encoder output, exactly as landing lays it out (no broker).

Apply tests need many archives with chosen interval boundaries, duplicates and skew;
producing them through Kafka would only add minutes. ``tests/spark/archive/test_land.py`` proves
landing writes this same layout from a real broker.
"""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path
from typing import Sequence

from cdc_codecs import ProducerRecord, RawMessage, SourcePosition, get_decoder, get_encoder
from tests.model.oracle import Oracle
from spark.demo.workload import Workload, WorkloadSpec
from spark.archive import layout
from spark.config import PipelineConfig
from spark.archive.land import SegmentChecksum, open_segment_writer, range_checksum, segment_table
from spark.archive.manifest import Manifest, PartitionRange, Segment
from spark.archive.storage import Storage, open_storage

from .mysql_values import iceberg_value, row_order


class ArchiveWriter:
    """Append intervals of records to an archive; offsets continue per partition."""

    def __init__(self, config: PipelineConfig, storage: Storage, partitions: dict[str, int]) -> None:
        self.config, self.storage, self.partitions = config, storage, partitions
        self.next_offset = {(t, p): 0 for t, n in partitions.items() for p in range(n)}
        self.previous: Manifest | None = None

    def interval(self, start: dt.datetime, end: dt.datetime, records: Sequence[tuple[str, ProducerRecord]]) -> Manifest:
        by_part: dict[tuple[str, int], list[ProducerRecord]] = {}
        for topic, r in records:
            by_part.setdefault((topic, r.partition), []).append(r)
        parts = []
        for key in sorted(self.next_offset):
            topic, p = key
            rs = by_part.get(key, [])
            first = self.next_offset[key]
            segments: tuple[Segment, ...] = ()
            checksum = SegmentChecksum()
            if rs:
                offsets = list(range(first, first + len(rs)))
                path = layout.segment_path(self.config.name, topic, p, first, first + len(rs))
                out, writer = open_segment_writer(self.storage, path)
                at = int(start.timestamp() * 1000)
                table = segment_table(topic, p, offsets, [at] * len(rs), [1] * len(rs),
                                      [r.key for r in rs], [r.value for r in rs], [None] * len(rs))
                writer.write_table(table)
                writer.close()
                out.close()
                checksum.update(table)
                size = self.storage.arrow_fs.get_file_info(self.storage.arrow_path(path)).size
                segments = (Segment(path, first, first + len(rs), len(rs), size),)
            self.next_offset[key] = first + len(rs)
            # One chunk per partition and interval, summed up as landing sums its chunks.
            parts.append(PartitionRange(topic, p, first, first + len(rs), None, segments, len(rs),
                                        range_checksum([checksum.digest()] if rs else [])))
        manifest = Manifest(self.config.name, start, end, tuple(parts), self.previous.path if self.previous else None)
        self.storage.create(manifest.path, manifest.to_json())
        self.previous = manifest
        return manifest


def oracle_from_records(protocol: str, topic: str, records, partitions: int, oracle=None):
    """Feed encoder records, in delivery order, through per-partition decoders into the reference model."""
    from cdc_codecs import RawMessage, SourcePosition, get_decoder
    from tests.model.oracle import Oracle

    oracle = oracle if oracle is not None else Oracle()
    decoders = [get_decoder(protocol) for _ in range(partitions)]
    offsets = [0] * partitions
    for r in records:
        oracle.add(decoders[r.partition].decode(RawMessage(r.key, r.value, SourcePosition(topic, r.partition, offsets[r.partition]))))
        offsets[r.partition] += 1
    return oracle


# ---------------------------------------------------------------- generated histories for apply tests

UTC = dt.timezone.utc
T0 = dt.datetime(2024, 1, 1, tzinfo=UTC)
HOUR = dt.timedelta(hours=1)


def make_config(tmp: Path, protocol: str, options: dict | None = None) -> PipelineConfig:
    return PipelineConfig.from_mapping({
        "name": "shop", "kafka": {"bootstrap_servers": "unused:9092"},
        "topics": [{"name": "cdc", "protocol": protocol, "options": options or {}}],
        "storage": {"url": str(tmp / "archive")},
        # Tests that expect a table's unsupported DDL or value to fail the run (tests/spark/test_isolation.py
        # covers the default, "isolate").
        "on_table_error": "fail",
    }, "test")


def normalise(rows: list[dict]) -> list[dict]:
    """Rows read from a table, as ``oracle_rows`` gives the model's: NULLs left out, in one order."""
    return sorted(({k: v for k, v in r.items() if v is not None} for r in rows), key=row_order)


def oracle_rows(oracle: Oracle, name) -> list[dict]:
    """The model's rows of table ``name`` as a table read at W holds them (README, "Type mapping")."""
    return sorted(({k: iceberg_value(k, v) for k, v in r.items()} for r in oracle.rows(*name)), key=row_order)


def build(tmp: Path, protocol: str, seed: int, partitions: int, intervals: int, dup_rate: float, lagging: bool,
          events: int = 90, key_space: int = 20, watermark_every: int = 10):
    """Archive + the oracle's tables after each interval."""
    history = list(Workload(WorkloadSpec(tables=2, events=events, seed=seed, key_space=key_space, watermark_every=watermark_every)).events())
    records = get_encoder(protocol).encode_all(history, partitions)
    rng = random.Random(seed)
    delivered = []
    for i, r in enumerate(records):
        # A lagging partition: its watermarks in the first half never arrive.
        if lagging and r.partition == 0 and i < len(records) // 2 and _is_watermark(protocol, r):
            continue
        delivered.append(r)
        if rng.random() < dup_rate:
            delivered.append(r)  # at-least-once: sent again
    config = make_config(tmp, protocol)
    writer = ArchiveWriter(config, open_storage(config.storage), {"cdc": partitions})
    cuts = sorted(set(rng.sample(range(1, len(delivered)), k=intervals - 1)) | {len(delivered)})
    oracle = Oracle()
    decoders = [get_decoder(protocol) for _ in range(partitions)]
    offsets = dict.fromkeys(range(partitions), 0)
    expected = []
    start = 0
    for i, end in enumerate(cuts):
        chunk = delivered[start:end]
        writer.interval(T0 + i * HOUR, T0 + (i + 1) * HOUR, [("cdc", r) for r in chunk])
        for r in chunk:
            oracle.add(decoders[r.partition].decode(RawMessage(r.key, r.value, SourcePosition("cdc", r.partition, offsets[r.partition]))))
            offsets[r.partition] += 1
        w = oracle.cut([("cdc", p) for p in range(partitions)])
        expected.append((w, {name: oracle_rows(oracle, name) for name in oracle.tables}))
        start = end
    return config, expected


def _is_watermark(protocol: str, record) -> bool:
    decoded = get_decoder(protocol).decode(RawMessage(record.key, record.value, SourcePosition("x", 0, 0)))
    return bool(decoded) and all(type(e).__name__ == "Watermark" for e in decoded)


def run_history(tmp: Path, protocol: str, seed: int, intervals: int, partitions: int, dup_rate: float = 0.0):
    """An archive of a generated history cut into ``intervals``, and the reference model after each."""
    config, expected = build(tmp, protocol, seed, partitions, intervals, dup_rate, lagging=False, events=120, key_space=25, watermark_every=15)
    return config, [(i, w, tables) for i, (w, tables) in enumerate(expected)]


def produce_history(bootstrap: str, topic: str, partitions: int, spec: WorkloadSpec, protocol: str = "canal-json",
                    at: dt.datetime = T0) -> list[ProducerRecord]:
    """Encode a generated history and produce it to ``topic`` (one millisecond apart from ``at``); returns the records."""
    from confluent_kafka import Producer

    records = get_encoder(protocol).encode_all(list(Workload(spec).events()), partitions)
    producer = Producer({"bootstrap.servers": bootstrap})
    first = int(at.timestamp() * 1000)
    for i, r in enumerate(records):
        producer.produce(topic, key=r.key, value=r.value, partition=r.partition, timestamp=first + i)
    assert producer.flush(30) == 0
    return records
