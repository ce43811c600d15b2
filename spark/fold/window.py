"""One interval's window: what a run reads of the archive and what it selects from it.

The run that applies an interval (``spark.commit.apply``) and the change feed that reads the
changes of applied intervals (``spark.query.changes_log``) both open the interval's window here,
so a rule about the window lives once:

- per partition, the offsets read: ``[pending, end)``, the previous checkpoint's pending offset
  (the first offset holding a change not applied yet) to the end of the interval's manifest;
- the raw segments holding them (``needed``) and the recent segments of each partition
  (``history``: the previous checkpoint's and the manifest's), whose side outputs carry the
  decoder state;
- the side outputs those segments decode to (``decode``), the undecodable messages inside the
  window (``errors``), the partition watermarks and W (``watermark``);
- the DDL the run applies (``select_ddl``): in (W_prev, W] by commit order, a derived clock lifted
  above W_prev, a protocol's DDL only from the partition it sends DDL to, broadcast copies once;
- the change-log rows (``change_log_paths``, ``fold_window`` for ``spark.fold.select``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cdc_codecs import DdlChange, DecodeError, protocol_spec
from spark.archive import layout
from spark.archive.checkpoint import Checkpoint
from spark.archive.manifest import Manifest, SegmentRef, list_manifests, read_manifest
from spark.archive.storage import Storage
from spark.core.watermark import PartitionWatermarks, compute_watermark
from spark.config import PipelineConfig
from spark.decode.changelog import SideOutput, decoder_version, ensure_change_log
from spark.core.keys import Order, change_order
from spark.fold.select import FoldWindow, link_runs
from spark.archive.floors import require_replayable

PKey = tuple[str, int]
TableRef = tuple[str, str]
Sides = dict[PKey, list[SideOutput]]


def derived_topics(config: PipelineConfig) -> frozenset[str]:
    """The pipeline's topics ordered by the derived clock (their protocol, as configured, carries no commitTs)."""
    return frozenset(t.name for t in config.topics if not protocol_spec(t.protocol).carries_commit_ts(t.options))


@dataclass(frozen=True)
class DdlSelection:
    """The DDL of a window at its W: ``applied`` in commit order (each with the commitTs it is
    applied at), ``pending`` per partition the first offset of a DDL above W (it waits for a later
    run), ``derived`` the identities of DDL applied from derived-clock topics, the previous ones
    included (``Checkpoint.ddl_applied``)."""

    applied: list[DdlChange]
    pending: dict[PKey, int]
    derived: list[tuple[Any, ...]]


@dataclass(frozen=True)
class IntervalWindow:
    """What one run of ``interval`` reads: see the module's docstring."""

    config: PipelineConfig
    storage: Storage
    manifest: Manifest
    w_prev: int
    offsets: Mapping[PKey, tuple[int, int]]
    needed: Mapping[PKey, list[SegmentRef]]
    history: Mapping[PKey, list[SegmentRef]]
    derived_topics: frozenset[str]
    ddl_applied: tuple[tuple[Any, ...], ...] = ()
    previous_marks: Mapping[PKey, int] = field(default_factory=dict)

    @classmethod
    def open(cls, config: PipelineConfig, storage: Storage, manifest: Manifest, previous: Checkpoint | None,
             ) -> IntervalWindow:
        """The window of the run applying ``manifest`` after the interval whose checkpoint is ``previous``.

        Raises:
            ArchivePruned: a partition's pending offset is in what archive retention deleted.
        """
        offsets: dict[PKey, tuple[int, int]] = {}
        needed: dict[PKey, list[SegmentRef]] = {}
        history: dict[PKey, list[SegmentRef]] = {}
        full = None if previous is not None and previous.segments is not None else all_segments(storage, config.name,
                                                                                                 manifest)
        for part in manifest.partitions:
            key = (part.topic, part.partition)
            start = min(previous.pending.get(key, part.start) if previous else part.start, part.start)
            offsets[key] = (start, part.end)
            if full is not None:
                known = full.get(key, [])
            else:
                assert previous is not None and previous.segments is not None
                known = [*previous.segments.get(key, ()), *(s.ref for s in part.segments)]
            history[key] = sorted({s for s in known if s.start < part.end}, key=lambda s: s.start)
            needed[key] = [s for s in history[key] if s.end > start]
        # A replay into a range archive retention deleted fails here, naming it.
        require_replayable(storage, config.name, {key: lo for key, (lo, _) in offsets.items()})
        return cls(config, storage, manifest, previous.watermark if previous else 0, offsets, needed, history,
                   derived_topics(config), previous.ddl_applied if previous else (),
                   dict(previous.marks) if previous else {})

    @property
    def interval(self) -> str:
        return f"{layout.instant(self.manifest.interval_start)}_{layout.instant(self.manifest.interval_end)}"

    def inside(self, key: PKey, offset: int) -> bool:
        lo, hi = self.offsets.get(key, (0, 0))
        return lo <= offset < hi

    def decode(self, runner: Any) -> Sides:
        """The side outputs of the window's raw segments, decoding those not decoded yet (on ``runner``)."""
        return ensure_change_log(self.config, self.storage, runner, self.needed, self.history, self.full_history)

    def full_history(self, key: PKey) -> list[SegmentRef]:
        """Every raw segment of a partition up to the window's interval (a decode walking back past ``history``)."""
        return all_segments(self.storage, self.config.name, self.manifest).get(key, [])

    def own(self, sides: Mapping[PKey, Sequence[SideOutput]]) -> Sides:
        """Of side outputs decoded for several windows, those of this window's segments."""
        out: Sides = {}
        for key, segments in self.needed.items():
            ranges = {(s.start, s.end) for s in segments}
            out[key] = [side for side in sides.get(key, ()) if (side.start, side.end) in ranges]
        return out

    def errors(self, sides: Sides) -> list[DecodeError]:
        """The undecodable messages of the window's offsets (and those without a position)."""
        return [err for key, outputs in sides.items() for side in outputs for err in side.errors
                if err.position is None or self.inside(key, err.position.offset)]

    def watermark(self, sides: Sides) -> tuple[PartitionWatermarks, int]:
        """Every partition's greatest watermark so far, and W: their minimum over every partition of
        the interval, never below W_prev."""
        marks = PartitionWatermarks(dict(self.previous_marks))
        for key, outputs in sides.items():
            for side in outputs:
                if side.mark is not None and side.mark > marks.marks.get(key, 0):
                    marks.marks[key] = side.mark
        partitions = [(p.topic, p.partition) for p in self.manifest.partitions]
        return marks, compute_watermark(marks, partitions, self.w_prev)

    def select_ddl(self, sides: Sides, w: int) -> DdlSelection:
        """The window's DDL at W (``DdlSelection``): the first copy in commit order is the one applied."""
        topics = {t.name: t.protocol for t in self.config.topics}
        candidates = []
        for key, outputs in sides.items():
            for side in outputs:
                for e in side.ddl:
                    if not self.inside(key, e.position.offset):
                        continue
                    if key[0] in self.derived_topics:  # the derived clock, lifted above W_prev (docs/data-plane.md)
                        e = e._replace(commit_ts=max(e.commit_ts or 0, self.w_prev + 1))
                    candidates.append((e, key))
        candidates.sort(key=lambda c: change_order(c[0]))  # type: ignore[arg-type]
        seen = set(self.ddl_applied)
        applied: list[DdlChange] = []
        pending: dict[PKey, int] = {}
        derived = list(self.ddl_applied)
        for e, key in candidates:
            if e.commit_ts > w:
                pending[key] = min(pending.get(key, e.position.offset), e.position.offset)
                continue
            if e.commit_ts <= self.w_prev:
                continue
            only = protocol_spec(topics[key[0]]).ddl_partition
            if only is not None and key[1] != only:
                continue
            is_derived = key[0] in self.derived_topics
            ident = ((e.event_time_ms if is_derived else e.commit_ts), e.database, e.table, e.sql)
            if ident not in seen:  # broadcast to every partition: applied once
                seen.add(ident)
                applied.append(e)
                if is_derived:
                    derived.append(ident)
        return DdlSelection(applied, pending, derived)

    def fold_window(self, w: int, ddl_orders: Mapping[TableRef, Iterable[Order]] | None = None,
                    sides: Mapping[PKey, Sequence[SideOutput]] | None = None) -> FoldWindow:
        """What ``spark.fold.select`` selects of the window's change-log rows at W: with ``ddl_orders``
        (the commit order of the run's DDL per table), rows are cut into DDL segments; with ``sides``,
        a key-less table's run that goes on across segments is linked (``link_runs``)."""
        return FoldWindow(self.w_prev, w, dict(self.offsets), self.derived_topics,
                          {ref: tuple(sorted(o)) for ref, o in (ddl_orders or {}).items()},
                          link_runs(sides) if sides is not None else {})

    def change_log_paths(self) -> list[str]:
        """The change-log Parquet files of the window's raw segments, in partition and offset order."""
        version = {t.name: decoder_version(t.protocol) for t in self.config.topics}
        return [layout.changelog_paths(self.config.name, version[key[0]], key[0], key[1], s.start, s.end)[0]
                for key, segments in sorted(self.needed.items()) for s in segments]

    def rows(self, sides: Sides) -> int:
        """The change-log rows of the offsets the window reads, each segment's counted by the share
        of its offsets inside the window: a message may carry many rows, and the segment holding the
        previous interval's pending changes is read whole but only its last changes are selected
        (on a one-minute schedule, ~1k of ~60k rows: bench lag)."""
        total = 0
        for key, outputs in sides.items():
            lo, hi = self.offsets[key]
            for side in outputs:
                inside = min(side.end, hi) - max(side.start, lo)
                if inside > 0:
                    total += -(-side.rows * inside // (side.end - side.start))
        return total


def all_segments(storage: Storage, pipeline: str, upto: Manifest) -> dict[PKey, list[SegmentRef]]:
    """Every raw segment of every partition up to ``upto``'s interval, from all manifests."""
    out: dict[PKey, list[SegmentRef]] = {}
    for _, end, path in list_manifests(storage, pipeline):
        if end <= upto.interval_end:
            for p in read_manifest(storage, path).partitions:
                out.setdefault((p.topic, p.partition), []).extend(s.ref for s in p.segments)
    return {k: sorted(set(v), key=lambda s: s.start) for k, v in out.items()}


def carried_segments(history: Mapping[PKey, list[SegmentRef]], pending: Mapping[PKey, int],
                     ) -> dict[PKey, tuple[SegmentRef, ...]]:
    """What the next run reads of each partition's history (``Checkpoint.segments``): from the last
    segment wholly before the pending offset (its side output holds the decoder state) on."""
    carried = {}
    for key, segments in history.items():
        first = next((i for i, s in enumerate(segments) if s.end > pending.get(key, s.end)), len(segments))
        carried[key] = tuple(segments[max(0, first - 1):])
    return carried


def merged(windows: Sequence[IntervalWindow]) -> tuple[dict[PKey, list[SegmentRef]], dict[PKey, list[SegmentRef]]]:
    """(needed, history) of several consecutive windows, to decode them together."""
    needed: dict[PKey, set[SegmentRef]] = {}
    history: dict[PKey, set[SegmentRef]] = {}
    for window in windows:
        for key, segments in window.needed.items():
            needed.setdefault(key, set()).update(segments)
        for key, segments in window.history.items():
            history.setdefault(key, set()).update(segments)
    return ({k: _in_order(v) for k, v in needed.items() if v}, {k: _in_order(v) for k, v in history.items()})


def _in_order(segments: Iterable[SegmentRef]) -> list[SegmentRef]:
    return sorted(segments, key=lambda s: s.start)
