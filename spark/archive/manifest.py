"""Manifests: the create-only record of which offset ranges an interval landed, and where.

A manifest is written last, after every segment it lists is durable, so its existence
means the interval is in the archive. Manifests chain: each partition's ``start`` is the
previous manifest's ``end``, so intervals are contiguous in offset space.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from spark.archive import layout, records
from spark.archive.records import CorruptArchiveFile
from spark.archive.storage import Storage

FORMAT = 1


class ManifestError(CorruptArchiveFile):
    """A manifest is unreadable or contradicts its neighbours."""


class MissingSegment(CorruptArchiveFile):
    """A raw segment a manifest lists is not in the archive (deleted under it)."""


@dataclass(frozen=True)
class SegmentRef:
    """A raw segment of the archive: its path and the offsets ``[start, end)`` it holds -- what
    checkpoints, side outputs and runs name a segment by."""

    path: str
    start: int
    end: int


@dataclass(frozen=True)
class Segment:
    path: str
    start: int
    end: int  # exclusive: the next offset after the range this file covers
    messages: int
    bytes: int

    @property
    def ref(self) -> SegmentRef:
        return SegmentRef(self.path, self.start, self.end)


@dataclass(frozen=True)
class Gap:
    """Offsets retention deleted before they were archived (only with on_missing_offsets=skip)."""

    start: int
    end: int


@dataclass(frozen=True)
class PartitionRange:
    topic: str
    partition: int
    start: int
    end: int  # exclusive
    gap: Gap | None = None
    segments: tuple[Segment, ...] = ()
    messages: int = 0
    checksum: str = ""


@dataclass(frozen=True)
class Manifest:
    pipeline: str
    interval_start: dt.datetime
    interval_end: dt.datetime
    partitions: tuple[PartitionRange, ...]
    previous: str | None = None
    created_at: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.timezone.utc))

    @property
    def path(self) -> str:
        return layout.manifest_path(self.pipeline, self.interval_start, self.interval_end)

    def ends(self) -> dict[tuple[str, int], int]:
        return {(p.topic, p.partition): p.end for p in self.partitions}

    def starts(self) -> dict[tuple[str, int], int]:
        return {(p.topic, p.partition): p.start for p in self.partitions}

    @property
    def messages(self) -> int:
        return sum(p.messages for p in self.partitions)

    def to_json(self) -> bytes:
        doc: dict[str, Any] = {
            "format": FORMAT,
            "pipeline": self.pipeline,
            "interval": {"start": self.interval_start.isoformat(), "end": self.interval_end.isoformat()},
            "previous": self.previous,
            "created_at": self.created_at.isoformat(),
            "messages": self.messages,
            "partitions": [asdict(p) for p in self.partitions],
        }
        return orjson.dumps(doc, option=orjson.OPT_INDENT_2)

    @staticmethod
    def from_json(data: bytes, where: str) -> Manifest:
        """Raises:
            ManifestError: not a manifest of this format (records.Manifest), or offsets out of order.
        """
        doc = records.read_record(data, records.Manifest, where, "manifest", ManifestError)
        if doc["format"] != FORMAT:
            raise ManifestError(f"{where}: manifest format {doc['format']!r}, this tidelake reads {FORMAT}")
        parts = []
        for p in doc["partitions"]:
            gap = Gap(p["gap"]["start"], p["gap"]["end"]) if p.get("gap") else None
            segments = tuple(Segment(**{k: s[k] for k in ("path", "start", "end", "messages", "bytes")}) for s in p["segments"])
            if p["start"] > p["end"] or any(s.start > s.end for s in segments) or (gap is not None and gap.start > gap.end):
                raise ManifestError(f"{where}: damaged manifest: an offset range of {p['topic']}/{p['partition']} ends "
                                    "before it starts")
            parts.append(PartitionRange(p["topic"], p["partition"], p["start"], p["end"], gap, segments, p["messages"], p["checksum"]))
        interval = doc["interval"]
        start = records.instant(interval["start"], where, "interval.start", ManifestError)
        end = records.instant(interval["end"], where, "interval.end", ManifestError)
        if start >= end:
            raise ManifestError(f"{where}: damaged manifest: its interval ends before it starts")
        return Manifest(doc["pipeline"], start, end, tuple(parts), doc.get("previous"),
                        records.instant(doc["created_at"], where, "created_at", ManifestError))


def segment_batches(storage: Storage, path: str, columns: list[str], batch_size: int) -> Iterator[pa.RecordBatch]:
    """A raw segment's messages in offset order, ``batch_size`` at a time, read on this thread (a
    task has its core: handing a batch's columns to Arrow's pool cost CPU). Every reader of raw
    segments reads them here.

    Raises:
        MissingSegment: the file is not in the archive, naming it.
        CorruptArchiveFile: Arrow refuses it (not Parquet, other columns, damaged bytes), naming it
            (``records.damaged_file``). An ``OSError`` of the storage stays the storage's.
    """
    where = f"{storage.url}/{path}"
    try:
        source = storage.arrow_fs.open_input_file(storage.arrow_path(path))
    except FileNotFoundError:
        raise MissingSegment(f"{where}: raw segment missing from the archive, though a manifest lists it: no run can "
                             "derive its interval without it; restore the file (a backup, the bucket's versioning)") from None
    with source, records.damaged_file(where, "raw segment"):
        yield from pq.ParquetFile(source).iter_batches(batch_size=batch_size, columns=columns, use_threads=False)


def read_manifest(storage: Storage, path: str) -> Manifest:
    return Manifest.from_json(storage.read(path), f"{storage.url}/{path}")


def list_manifests(storage: Storage, pipeline: str) -> list[tuple[dt.datetime, dt.datetime, str]]:
    """(interval start, interval end, path) of every manifest, in interval order."""
    out = []
    for path in storage.list(layout.manifests_dir(pipeline)):
        parsed = layout.parse_manifest_name(path)
        if parsed is not None:
            out.append((parsed[0], parsed[1], path))
    return sorted(out)


def chain_index(chain: list[tuple[dt.datetime, dt.datetime, str]], start: dt.datetime, end: dt.datetime) -> int | None:
    """The index of the interval [start, end) in ``list_manifests``' chain; None if it is not landed."""
    return next((i for i, (s, e, _) in enumerate(chain) if (s, e) == (start, end)), None)


def neighbours(storage: Storage, pipeline: str, start: dt.datetime, end: dt.datetime) -> tuple[Manifest | None, Manifest | None]:
    """The manifest ending last at or before ``start``, and the first starting at or after ``end``."""
    before = after = None
    for s, e, path in list_manifests(storage, pipeline):
        if e <= start:
            before = path
        elif s >= end and after is None:
            after = path
        elif s < end and e > start and (s, e) != (start, end):
            raise ManifestError(
                f"interval {layout.instant(start)}..{layout.instant(end)} overlaps the landed interval "
                f"{layout.instant(s)}..{layout.instant(e)} ({path}); runs must use the DAG's fixed intervals"
            )
    return (read_manifest(storage, before) if before else None, read_manifest(storage, after) if after else None)
