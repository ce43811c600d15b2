"""The change feed's window (W1, W2] in the archive: the runs that applied it, the keys they touched, their DDL.

``read_changes`` (``spark.query.changes``) compares rows of the tables at ``wm_<W1>`` and ``wm_<W2>``, but
only those of the keys this module finds in the decoded change log (``spark.decode.changelog``):

- the *runs* of the window are the applied intervals after the one that published W1, up to the
  one that published W2, each with the window it applied: its checkpoint's W and the previous
  one's, and per partition the offsets it read (the previous checkpoint's pending offset to the
  end of its manifest) -- exactly what ``spark.commit.apply`` gave ``spark.fold.select``;
- the change-log files are those of the raw segments holding these offsets (the checkpoint of W1's
  interval names the ones before its manifest); segments not yet decoded by this decoder version
  are decoded as a run would (``ensure_change_log``);
- the *touched keys* are the rows each run's ``select`` marks applied, folded by the one fold rule
  (``net_change.greatest``): one row per table and key, the greatest change of the window, whose
  ``ts`` is the commitTs of the last change to that key. Every effect on a key has the key's
  ``key_hash``, so the fold cuts into key-hash slices as a run's does (``spark.fold.slices``):
  with a runner (``SparkRunner``) a task per slice of ``fold_slice_rows`` rows reads only its
  row groups of the change log, on the executors; without one, one slice in this process;
- the window's *DDL* are the side outputs' statements each run applied (the same window and
  commitTs rules as ``spark.commit.apply``), each with the commitTs it was applied at.

Archive retention keeps every segment a retained W replays from (``maintain.archive_retention``:
its floors are the retained checkpoints' pending offsets), so the change log of any window
between two retained Ws is there; a window reaching into what retention deleted fails with
``ChangesUnavailable``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from cdc_codecs import DdlChange, TidelakeError, protocol_spec
from spark.archive import layout
from spark.runtime import credentials
from spark.commit.apply import Checkpoint, checkpoint_path
from spark.config import PipelineConfig
from spark.decode.changelog import (
    CHANGE_LOG_SCHEMA,
    SegmentRef,
    SideOutput,
    decode_schema,
    decoder_version,
    ensure_change_log,
)
from spark.decode.topic_clock import settle_topic_clocks
from spark.fold.select import APPLY, FoldWindow, select
from spark.archive.land import LocalRunner
from spark.archive.manifest import Manifest, list_manifests, read_manifest
from spark.archive.storage import Storage, open_storage
from spark.fold.net_change import change_order, greatest
from spark.fold.slices import EVERYTHING, Slice, slice_row_groups
from spark.maintain.archive_retention import ArchivePruned, require_replayable

PKey = tuple[str, int]
TableRef = tuple[str, str]

class ChangesError(TidelakeError):
    """The change feed cannot answer as asked."""


class ChangesUnavailable(ChangesError):
    """The window's change log is gone: archive retention deleted segments it needs."""


@dataclass(frozen=True)
class Run:
    """One applied interval of the window: the commitTs window (w_prev, w] and, per partition, the offsets it read."""

    interval: str
    w_prev: int
    w: int
    offsets: Mapping[PKey, tuple[int, int]]


@dataclass
class Window:
    """What the archive says about the window (from_w, to_w]."""

    from_w: int
    to_w: int
    runs: list[Run]
    derived_topics: frozenset[str]
    storage: Storage
    config: PipelineConfig  # its topic clocks settled
    paths: list[str] = field(default_factory=list)  # change-log Parquet files holding the runs' offsets
    sides: dict[PKey, list[SideOutput]] = field(default_factory=dict)

    @property
    def schemas(self) -> dict[int, bytes]:
        """schema_id -> encoded schema (key columns, column types) of every change-log row of the window."""
        return {sid: blob for outputs in self.sides.values() for side in outputs for sid, blob in side.schemas.items()}

    def key_columns(self, schema_ids: Iterable[int]) -> set[tuple[str, ...]]:
        """The distinct key columns the change-log rows of these schemas name."""
        schemas = self.schemas
        return {decode_schema(schemas[sid])[0] for sid in set(schema_ids)}

    def touched(self, tables: set[TableRef] | None = None, runner: Any = None) -> pa.Table:
        """The greatest applied change of every key the window's runs touched (``select``'s columns,
        one row per table and key; ``ts`` is the commitTs its run applied it at), of ``tables`` only
        when given. With ``runner``, a task per key-hash slice of ``fold_slice_rows`` change-log rows."""
        rows = sum(side.rows for outputs in self.sides.values() for side in outputs)
        count = max(1, -(-rows // self.config.fold_slice_rows)) if runner is not None else 1
        carried = credentials.task_config(self.config)
        tasks = [TouchedTask(carried, tuple(self.paths), tuple(self.runs), self.derived_topics,
                             frozenset(tables) if tables is not None else None, Slice(i, count) if count > 1 else EVERYTHING)
                 for i in range(count)]
        parts = [p for p in (runner or LocalRunner()).map(touched_slice, tasks) if p.num_rows]
        if not parts:
            return select(CHANGE_LOG_SCHEMA.empty_table(), FoldWindow(self.from_w, self.to_w, {}))
        return pa.concat_tables(parts)

    def ddls(self, protocols: Mapping[str, str]) -> list[DdlChange]:
        """The DDL the window's runs applied, in commit order, each with the commitTs it was applied at
        (a derived clock lifted above its run's W_prev, as ``spark.commit.apply`` lifts it)."""
        out: dict[tuple[Any, ...], DdlChange] = {}
        for run in self.runs:
            candidates = []
            for key, outputs in self.sides.items():
                lo, hi = run.offsets.get(key, (0, 0))
                for side in outputs:
                    for e in side.ddl:
                        if not lo <= e.position.offset < hi:
                            continue
                        if key[0] in self.derived_topics:
                            e = e._replace(commit_ts=max(e.commit_ts or 0, run.w_prev + 1))
                        if run.w_prev < e.commit_ts <= run.w and not (protocols[key[0]] == "canal-json" and key[1] != 0):
                            candidates.append((e, key))
            for e, key in sorted(candidates, key=lambda c: change_order(c[0])):  # type: ignore[arg-type]
                ident = ((e.event_time_ms if key[0] in self.derived_topics else e.commit_ts), e.database, e.table, e.sql)
                out.setdefault(ident, e)  # broadcast to every partition: once
        return sorted(out.values(), key=change_order)  # type: ignore[arg-type]


@dataclass(frozen=True)
class TouchedTask:
    """One key-hash slice of a window's change log to fold (``config``: ``credentials.task_config``'s)."""

    config: PipelineConfig
    paths: tuple[str, ...]
    runs: tuple[Run, ...]
    derived_topics: frozenset[str]
    tables: frozenset[TableRef] | None
    part: Slice = EVERYTHING


def touched_slice(task: TouchedTask) -> pa.Table:
    """The greatest change per key of one slice: each run's applied rows (``select``), folded (runs
    on an executor, or in process)."""
    storage = open_storage(credentials.resolve(task.config).storage)
    lo, hi = task.part.bounds
    applied = []
    for path in task.paths:
        with storage.arrow_fs.open_input_file(storage.arrow_path(path)) as f:
            source = pq.ParquetFile(f)
            groups = slice_row_groups(source.metadata, lo, hi) if task.part.count > 1 else list(range(source.num_row_groups))
            if not groups:
                continue
            rows = source.read_row_groups(groups).cast(CHANGE_LOG_SCHEMA)
        if task.part.count > 1:
            hashes = rows.column("key_hash")
            rows = rows.filter(pc.and_(pc.greater_equal(hashes, lo), pc.less(hashes, hi)))
        if task.tables is not None and rows.num_rows:
            rows = rows.filter(_in_tables(rows, task.tables))
        if rows.num_rows == 0:
            continue
        for run in task.runs:
            selected = select(rows, FoldWindow(run.w_prev, run.w, run.offsets, task.derived_topics))
            selected = selected.filter(pc.equal(selected.column("state"), APPLY))
            if selected.num_rows:
                applied.append(selected)
    if not applied:
        return select(CHANGE_LOG_SCHEMA.empty_table(), FoldWindow(0, 0, {}))
    return greatest(pa.concat_tables(applied))


def _in_tables(rows: pa.Table, tables: Iterable[TableRef]) -> pa.Array:
    databases, names = rows.column("database"), rows.column("table")
    mask = None
    for database, table in tables:
        hit = pc.and_(pc.equal(databases, database), pc.equal(names, table))
        mask = hit if mask is None else pc.or_(mask, hit)
    return mask if mask is not None else pa.array([False] * rows.num_rows)


def _interval_name(start: Any, end: Any) -> str:
    return f"{layout.instant(start)}_{layout.instant(end)}"


def open_window(config: PipelineConfig, storage: Storage, from_doc: Mapping[str, Any], to_doc: Mapping[str, Any]) -> Window:
    """The runs and change log of the window between two published records (``published/<W>.json``).

    Raises:
        ChangesUnavailable: archive retention deleted change-log segments the window needs.
        ChangesError: the archive lacks a checkpoint or manifest the window's runs left.
    """
    config = settle_topic_clocks(config, storage)
    chain = list_manifests(storage, config.name)
    names = [_interval_name(s, e) for s, e, _ in chain]
    first, last = (names.index(doc["interval"]) if doc["interval"] in names else None for doc in (from_doc, to_doc))
    if first is None or last is None:
        missing = from_doc if first is None else to_doc
        raise ChangesError(f"pipeline {config.name}: no manifest of interval {missing['interval']}, which published "
                           f"watermark {missing['watermark']}")
    derived = frozenset(t.name for t in config.topics if not protocol_spec(t.protocol).carries_commit_ts(t.options))
    start_cp = _checkpoint(storage, config, chain[first])
    if start_cp is None:
        raise ChangesError(f"pipeline {config.name}: interval {names[first]} published watermark {from_doc['watermark']} "
                           "but has no checkpoint")
    runs: list[Run] = []
    manifests: list[Manifest] = []
    previous = start_cp
    for i in range(first + 1, last + 1):
        cp = _checkpoint(storage, config, chain[i])
        if cp is None:
            continue  # landed after a later interval took its offsets: it holds no message
        manifest = read_manifest(storage, chain[i][2])
        manifests.append(manifest)
        offsets = {(p.topic, p.partition): (min(previous.pending.get((p.topic, p.partition), p.start), p.start), p.end)
                   for p in manifest.partitions}
        runs.append(Run(names[i], previous.watermark, cp.watermark, offsets))
        previous = cp
    window = Window(from_doc["watermark"], to_doc["watermark"], runs, derived, storage, config)
    if not runs:
        return window
    history = _history(storage, config, chain, first, start_cp, manifests)
    reach: dict[PKey, tuple[int, int]] = {}
    for run in runs:
        for key, (lo, hi) in run.offsets.items():
            a, b = reach.get(key, (lo, hi))
            reach[key] = (min(a, lo), max(b, hi))
    try:
        require_replayable(storage, config.name, {key: lo for key, (lo, _) in reach.items()})
    except ArchivePruned as exc:
        raise ChangesUnavailable(f"the changes between watermarks {window.from_w} and {window.to_w} need the change log "
                                 f"archive retention deleted: {exc}") from None
    needed = {key: [s for s in history.get(key, []) if s.end > lo and s.start < hi] for key, (lo, hi) in reach.items()}
    needed = {key: segments for key, segments in needed.items() if segments}
    window.sides = ensure_change_log(config, storage, LocalRunner(), needed, history,
                                     lambda key: _all_segments(storage, config, chain, last).get(key, []))
    version = {t.name: decoder_version(t.protocol) for t in config.topics}
    window.paths = [layout.changelog_paths(config.name, version[key[0]], key[0], key[1], s.start, s.end)[0]
                    for key, segments in sorted(needed.items()) for s in segments]
    return window


def _checkpoint(storage: Storage, config: PipelineConfig, interval: tuple[Any, Any, str]) -> Checkpoint | None:
    path = checkpoint_path(config.name, interval[0], interval[1])
    return Checkpoint.from_json(storage.read(path)) if storage.exists(path) else None


def _history(storage: Storage, config: PipelineConfig, chain: list[tuple[Any, Any, str]], first: int, start: Checkpoint,
             manifests: list[Manifest]) -> dict[PKey, list[SegmentRef]]:
    """Per partition, the raw segments the window's runs may read: those W1's checkpoint carries
    (from its pending offsets on) and the window's manifests'."""
    if start.segments is None:  # a checkpoint from before they were kept: every manifest up to the window's
        known = _all_segments(storage, config, chain, first)
    else:
        known = {key: list(segments) for key, segments in start.segments.items()}
    for manifest in manifests:
        for p in manifest.partitions:
            known.setdefault((p.topic, p.partition), []).extend(SegmentRef(s.path, s.start, s.end) for s in p.segments)
    return {key: sorted(set(segments), key=lambda s: s.start) for key, segments in known.items()}


def _all_segments(storage: Storage, config: PipelineConfig, chain: list[tuple[Any, Any, str]], last: int,
                  ) -> dict[PKey, list[SegmentRef]]:
    out: dict[PKey, list[SegmentRef]] = {}
    for _, _, path in chain[:last + 1]:
        for p in read_manifest(storage, path).partitions:
            out.setdefault((p.topic, p.partition), []).extend(SegmentRef(s.path, s.start, s.end) for s in p.segments)
    return {key: sorted(set(segments), key=lambda s: s.start) for key, segments in out.items()}


def protocols(config: PipelineConfig) -> dict[str, str]:
    return {t.name: t.protocol for t in config.topics}

