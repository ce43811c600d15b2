"""Benchmark archives: raw segments and manifests written straight from encoder output, cached.

A benchmark needs millions of protocol messages in the archive; producing them through a
broker and landing them would take longer than the apply being measured. ``ArchiveBuilder``
streams encoder records into segments laid out as landing lays them out (one segment per
``segment_max_messages`` chunk of a partition, ``spark.archive.land``'s writer and checksum, one
manifest per interval), holding at most one chunk per partition in memory.

``cached_archive`` builds an archive once per set of parameters under ``<workdir>/archives``
(the directory is complete when its ``params.json`` exists); ``clone_archive`` hard-links
it into a fresh run directory, so every measured run starts from the same landed archive
and writes its own catalog, warehouse, checkpoints and reports.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import shutil
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import orjson

from cdc_codecs import ProducerRecord, TidelakeError
from spark.archive import layout
from spark.config import LayoutConfig, PipelineConfig
from spark.archive.land import SegmentChecksum, open_segment_writer, segment_table
from spark.archive.manifest import Manifest, PartitionRange, Segment
from spark.archive.storage import open_storage

UTC = dt.UTC
T0 = dt.datetime(2024, 1, 1, tzinfo=UTC)
HOUR = dt.timedelta(hours=1)
TOPIC = "cdc"
PIPELINE = "bench"
# Bumped when what an archive holds for the same parameters changes, so stale caches are not reused.
FORMAT = 1


class BenchArchiveError(TidelakeError):
    """A cached benchmark archive is missing or inconsistent."""


def pipeline_document(root: Path, protocol: str = "canal-json", buckets: int = 0, segment_max_messages: int = 50_000,
                      write_mode: str = LayoutConfig.write_mode,
                      driver_max_messages: int = PipelineConfig.driver_max_messages) -> dict[str, Any]:
    """The pipeline file of a benchmark run over the archive at ``root`` (no broker is contacted)."""
    return {
        "name": PIPELINE, "kafka": {"bootstrap_servers": "unused:9092"},
        "topics": [{"name": TOPIC, "protocol": protocol}], "storage": {"url": str(root)},
        "segment_max_messages": segment_max_messages, "layout": {"buckets": buckets, "write_mode": write_mode},
        "driver_max_messages": driver_max_messages,
    }


def pipeline_config(root: Path, **options: Any) -> PipelineConfig:
    return PipelineConfig.from_mapping(pipeline_document(root, **options), f"bench:{root}")


class ArchiveBuilder:
    """Append intervals of encoder records to an archive; offsets continue per partition."""

    def __init__(self, config: PipelineConfig, partitions: int) -> None:
        self.config, self.partitions = config, partitions
        self.storage = open_storage(config.storage)
        self.next_offset = [0] * partitions
        self.previous: Manifest | None = None
        self._open_interval()

    def _open_interval(self) -> None:
        self._first = list(self.next_offset)
        self._pending: list[list[ProducerRecord]] = [[] for _ in range(self.partitions)]
        self._segments: list[list[Segment]] = [[] for _ in range(self.partitions)]
        self._crc = [0] * self.partitions

    def add(self, records: Iterable[ProducerRecord], at: dt.datetime) -> None:
        """Queue records (in delivery order) into the open interval; full chunks become segments."""
        limit = self.config.segment_max_messages
        for r in records:
            pending = self._pending[r.partition]
            pending.append(r)
            if len(pending) >= limit:
                self._flush(r.partition, at)

    def _flush(self, partition: int, at: dt.datetime) -> None:
        rs = self._pending[partition]
        if not rs:
            return
        first = self.next_offset[partition]
        end = first + len(rs)
        path = layout.segment_path(self.config.name, TOPIC, partition, first, end)
        table = segment_table(TOPIC, partition, list(range(first, end)), [int(at.timestamp() * 1000)] * len(rs),
                              [1] * len(rs), [r.key for r in rs], [r.value for r in rs], [None] * len(rs))
        checksum = SegmentChecksum()
        checksum.update(table)
        self._crc[partition] = zlib.crc32(checksum.digest().to_bytes(4, "big"), self._crc[partition])
        out, writer = open_segment_writer(self.storage, path)
        writer.write_table(table, row_group_size=10_000)
        writer.close()
        out.close()
        size = self.storage.arrow_fs.get_file_info(self.storage.arrow_path(path)).size
        self._segments[partition].append(Segment(path, first, end, len(rs), size))
        self.next_offset[partition] = end
        self._pending[partition] = []

    def close_interval(self, start: dt.datetime, end: dt.datetime) -> Manifest:
        """Write the open interval's last segments and its manifest; the next interval starts."""
        parts = []
        for p in range(self.partitions):
            self._flush(p, start)
            segments = tuple(self._segments[p])
            parts.append(PartitionRange(TOPIC, p, self._first[p], self.next_offset[p], None, segments,
                                        sum(s.messages for s in segments), f"{self._crc[p]:08x}"))
        manifest = Manifest(self.config.name, start, end, tuple(parts), self.previous.path if self.previous else None)
        self.storage.create(manifest.path, manifest.to_json())
        self.previous = manifest
        self._open_interval()
        return manifest


def cached_archive(workdir: Path, kind: str, params: dict[str, Any], build: Callable[[Path], dict[str, Any]]) -> tuple[Path, dict[str, Any]]:
    """The archive root for ``kind`` and ``params``, built by ``build(root)`` unless cached; with its facts.

    ``build`` returns facts about the archive (event counts, intervals); they are kept in
    ``params.json`` beside it, written last: an archive without it is incomplete and rebuilt.
    """
    key = hashlib.sha256(orjson.dumps({"kind": kind, "format": FORMAT, **params}, option=orjson.OPT_SORT_KEYS)).hexdigest()[:12]
    root = workdir / "archives" / f"{kind}-{key}"
    done = root / "params.json"
    if done.exists():
        doc = orjson.loads(done.read_bytes())
        return root / "archive", doc["facts"]
    if root.exists():
        shutil.rmtree(root)
    (root / "archive").mkdir(parents=True)
    facts = build(root / "archive")
    done.write_bytes(orjson.dumps({"kind": kind, "params": params, "facts": facts}, option=orjson.OPT_INDENT_2))
    return root / "archive", facts


def clone_archive(archive: Path, run: Path) -> Path:
    """A fresh run directory holding the archive's manifests and segments as hard links."""
    if run.exists():
        shutil.rmtree(run)
    source = archive / layout.pipeline_root(PIPELINE)
    if not source.is_dir():
        raise BenchArchiveError(f"{archive}: no pipeline {PIPELINE!r} in the cached archive; delete it and run again")
    for step in ("manifests", "segments"):
        shutil.copytree(source / step, run / layout.pipeline_root(PIPELINE) / step, copy_function=os.link)
    return run


def segment_paths(archive: Path) -> list[tuple[int, list[Path]]]:
    """Each partition's segment files in offset order."""
    base = archive / layout.pipeline_root(PIPELINE) / "segments" / layout.encode_name(TOPIC)
    return [(int(p.name), sorted(p.glob("*.parquet"))) for p in sorted(base.iterdir(), key=lambda p: int(p.name))]
