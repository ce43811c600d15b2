"""Watermarks: per partition they only move forward; the pipeline's is their minimum.

W = min over **all** partitions of **all** topics of the pipeline (partitions that saw no
watermark yet count as 0), never below the previous W.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from cdc_codecs import Watermark

PartitionKey = tuple[str, int]


@dataclass
class PartitionWatermarks:
    marks: dict[PartitionKey, int] = field(default_factory=dict)

    def observe(self, events: Iterable[Watermark]) -> None:
        for e in events:
            key = (e.position.topic, e.position.partition)
            if e.ts > self.marks.get(key, 0):
                self.marks[key] = e.ts

    def copy(self) -> PartitionWatermarks:
        return PartitionWatermarks(dict(self.marks))


def compute_watermark(marks: PartitionWatermarks, partitions: Iterable[PartitionKey], previous: int = 0) -> int:
    """The pipeline watermark: min over every partition, never going back."""
    partitions = list(partitions)
    if not partitions:
        return previous
    return max(previous, min(marks.marks.get(p, 0) for p in partitions))


def watermark_seconds(w: int) -> float:
    """W's wall-clock time in seconds since the epoch: its TSO's physical milliseconds (the top 46 bits)."""
    return (w >> 18) / 1000


def watermark_datetime(w: int) -> dt.datetime:
    """W's wall-clock time, in UTC: what retention ages and times given for a W compare."""
    return dt.datetime.fromtimestamp(watermark_seconds(w), dt.UTC)


def watermark_time(w: int) -> str | None:
    """W as time, the one way every report, manifest and command prints it: ISO 8601 in UTC to the
    millisecond (a TSO's physical part), e.g. ``2026-11-28T21:34:07.123Z``; None for 0 (before the first W)."""
    return watermark_datetime(w).isoformat(timespec="milliseconds").replace("+00:00", "Z") if w else None


TAG_PREFIX = "wm_"


def tag_name(watermark: int) -> str:
    return f"{TAG_PREFIX}{watermark}"


def tag_watermark(name: str) -> int | None:
    """The W a ``wm_<W>`` tag names; None for any other ref (a branch, someone else's tag)."""
    digits = name.removeprefix(TAG_PREFIX)
    return int(digits) if digits != name and digits.isdigit() else None


def watermark_tags(refs: Mapping[str, Any]) -> dict[int, int]:
    """{W: snapshot id} of the ``wm_<W>`` tags among a table's ``refs`` (pyiceberg ``SnapshotRef``s)."""
    return {w: ref.snapshot_id for name, ref in refs.items()
            # "tag": pyiceberg's SnapshotRefType.TAG is a str enum. Not imported: the decode tasks
            # import this module (derived clocks), and pyiceberg.table costs each worker 0.3 s.
            if (w := tag_watermark(name)) is not None and ref.snapshot_ref_type == "tag"}


def derived_commit_ts(event_time_ms: int) -> int:
    """A commitTs for protocols without one: the event's wall-clock time as a TSO."""
    return event_time_ms << 18


def derived_mark(event_time_ms: int) -> int:
    """What seeing an event (or heartbeat) at ``event_time_ms`` on a partition proves.

    Binlog event times never go back within a partition, but several events share a
    millisecond, so only the events strictly *before* it are known complete.
    """
    return (event_time_ms << 18) - 1
