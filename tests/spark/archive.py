"""Build an archive straight from encoder output, exactly as landing lays it out (no broker).

Apply tests need many archives with chosen interval boundaries, duplicates and skew;
producing them through Kafka would only add minutes. ``tests/spark/test_land.py`` proves
landing writes this same layout from a real broker.
"""

from __future__ import annotations

import datetime as dt
from typing import Sequence

from cdc_codecs import ProducerRecord
from spark import layout
from spark.config import PipelineConfig
from spark.land import open_segment_writer, segment_table
from spark.manifest import Manifest, PartitionRange, Segment
from spark.storage import Storage


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
            if rs:
                offsets = list(range(first, first + len(rs)))
                path = layout.segment_path(self.config.name, topic, p, first, first + len(rs))
                out, writer = open_segment_writer(self.storage, path)
                at = int(start.timestamp() * 1000)
                writer.write_table(segment_table(topic, p, offsets, [at] * len(rs), [1] * len(rs),
                                                 [r.key for r in rs], [r.value for r in rs], [None] * len(rs)))
                writer.close()
                out.close()
                segments = (Segment(path, first, first + len(rs), len(rs), 0),)
            self.next_offset[key] = first + len(rs)
            parts.append(PartitionRange(topic, p, first, first + len(rs), None, segments, len(rs), ""))
        manifest = Manifest(self.config.name, start, end, tuple(parts), self.previous.path if self.previous else None)
        self.storage.create(manifest.path, manifest.to_json())
        self.previous = manifest
        return manifest


def oracle_from_records(protocol: str, topic: str, records, partitions: int, oracle=None):
    """Feed encoder records, in delivery order, through per-partition decoders into the reference model."""
    from cdc_codecs import RawMessage, SourcePosition, get_decoder
    from cdc_codecs.oracle import Oracle

    oracle = oracle if oracle is not None else Oracle()
    decoders = [get_decoder(protocol) for _ in range(partitions)]
    offsets = [0] * partitions
    for r in records:
        oracle.add(decoders[r.partition].decode(RawMessage(r.key, r.value, SourcePosition(topic, r.partition, offsets[r.partition]))))
        offsets[r.partition] += 1
    return oracle
