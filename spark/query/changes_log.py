"""The change feed's window (W1, W2] in the archive: the runs that applied it, the keys they touched, their DDL.

``read_changes`` (``spark.query.changes``) compares rows of the tables at ``wm_<W1>`` and ``wm_<W2>``, but
only those of the keys this module finds in the decoded change log (``spark.decode.changelog``):

- the *runs* of the window are the applied intervals after the one that published W1, up to the
  one that published W2, each opened as its run opened it (``spark.fold.window.IntervalWindow``,
  the one place a run's offsets, segments and DDL are decided) with the W its checkpoint reached;
- the change-log files are those of the raw segments the runs read; segments not yet decoded by
  this decoder version are decoded as a run would (``ensure_change_log``);
- the *touched keys* are the rows each run's ``select`` marks applied, folded by the one fold rule
  (``net_change.greatest``): one row per table and key, the greatest change of the window, whose
  ``ts`` is the commitTs of the last change to that key. Every effect on a key has the key's
  ``key_hash``, so the fold cuts into key-hash slices as a run's does (``spark.fold.slices``):
  with a runner (``SparkRunner``) a task per slice of ``fold_slice_rows`` rows reads only its
  row groups of the change log, on the executors; without one, one slice in this process;
- the window's *DDL* are the statements each run applied (``IntervalWindow.select_ddl``), each
  with the commitTs it was applied at.

Archive retention keeps every segment a retained W replays from (``maintain.archive_retention``:
its floors are the retained checkpoints' pending offsets), so the change log of any window
between two retained Ws is there; a window reaching into what retention deleted fails with
``ChangesUnavailable``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from cdc_codecs import DdlChange, TidelakeError
from spark.archive import layout
from spark.archive.checkpoint import read_checkpoint
from spark.runtime.runners import LocalRunner
from spark.archive.manifest import list_manifests, read_manifest
from spark.archive.storage import Storage
from spark.config import PipelineConfig
from spark.decode.changelog import CHANGE_LOG_SCHEMA, SideOutput, decode_schema, ensure_change_log, undecoded
from spark.decode.topic_clock import settle_topic_clocks
from spark.core.keys import change_order
from spark.fold.net_change import greatest
from spark.fold.select import APPLY, FoldWindow, select
from spark.archive.records import damaged_file
from spark.fold.slices import EVERYTHING, Slice, slice_row_groups
from spark.fold.window import IntervalWindow, merged
from spark.archive.floors import ArchivePruned
from spark.runtime import credentials
from spark.archive.storage import open_storage

PKey = tuple[str, int]
TableRef = tuple[str, str]

class ChangesError(TidelakeError):
    """The change feed cannot answer as asked."""


class ChangesUnavailable(ChangesError):
    """The window's change log is gone: archive retention deleted segments it needs."""


class ChangesNeedDecoding(ChangesError):
    """The window's change log is not decoded by this tidelake's decoders, and this reader cannot
    take the pipeline's lease to decode it (read-only credentials, or a run holds it)."""


@dataclass(frozen=True)
class Run:
    """One applied interval of the window: its ``IntervalWindow`` (what its run read) and the W it reached."""

    window: IntervalWindow
    w: int

    @property
    def selects(self) -> FoldWindow:
        """What the run applied of its change-log rows (``spark.fold.select``)."""
        return self.window.fold_window(self.w)


@dataclass
class Window:
    """What the archive says about the window (from_w, to_w]."""

    from_w: int
    to_w: int
    runs: list[Run]
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
        tasks = [TouchedTask(carried, tuple(self.paths), tuple(run.selects for run in self.runs),
                             frozenset(tables) if tables is not None else None, Slice(i, count) if count > 1 else EVERYTHING)
                 for i in range(count)]
        parts = [p for p in (runner or LocalRunner()).map(touched_slice, tasks) if p.num_rows]
        if not parts:
            return select(CHANGE_LOG_SCHEMA.empty_table(), FoldWindow(self.from_w, self.to_w, {}))
        return pa.concat_tables(parts)

    def ddls(self) -> list[DdlChange]:
        """The DDL the window's runs applied, in commit order, each with the commitTs it was applied at:
        each run's selection (``IntervalWindow.select_ddl``) at its W."""
        out = [e for run in self.runs for e in run.window.select_ddl(run.window.own(self.sides), run.w).applied]
        return sorted(out, key=change_order)  # type: ignore[arg-type]


@dataclass(frozen=True)
class TouchedTask:
    """One key-hash slice of a window's change log to fold (``config``: ``credentials.task_config``'s)."""

    config: PipelineConfig
    paths: tuple[str, ...]
    runs: tuple[FoldWindow, ...]  # what each run of the window applied
    tables: frozenset[TableRef] | None
    part: Slice = EVERYTHING


def touched_slice(task: TouchedTask) -> pa.Table:
    """The greatest change per key of one slice: each run's applied rows (``select``), folded (runs
    on an executor, or in process)."""
    storage = open_storage(credentials.resolve(task.config).storage)
    lo, hi = task.part.bounds
    applied, changes = [], []
    for path in task.paths:
        with (storage.arrow_fs.open_input_file(storage.arrow_path(path)) as f,
              damaged_file(f"{storage.url}/{path}", "change log")):
            source = pq.ParquetFile(f)
            groups = slice_row_groups(source.metadata, lo, hi) if task.part.count > 1 else list(range(source.num_row_groups))
            if not groups:
                continue
            rows = source.read_row_groups(groups)
            rows.validate(full=True)  # Arrow reads text without checking it is UTF-8 (as the fold's read_slice)
            rows = rows.cast(CHANGE_LOG_SCHEMA)
        # ``change`` (the row's image: most of its bytes) stays aside, named by its position, and is
        # taken once for the rows the fold keeps, not copied by every filter on the way.
        first = sum(len(c) for c in changes)
        changes.append(rows.column(_CHANGE))
        rows = rows.drop_columns([_CHANGE]).append_column(_AT, pa.array(np.arange(first, first + rows.num_rows)))
        if task.part.count > 1:
            hashes = rows.column("key_hash")
            rows = rows.filter(pc.and_(pc.greater_equal(hashes, lo), pc.less(hashes, hi)))
        if task.tables is not None and rows.num_rows:
            rows = rows.filter(_in_tables(rows, task.tables))
        if rows.num_rows == 0:
            continue
        for run in task.runs:
            selected = select(rows, run)
            selected = selected.filter(pc.equal(selected.column("state"), APPLY))
            if selected.num_rows:
                applied.append(selected)
    if not applied:
        return select(CHANGE_LOG_SCHEMA.empty_table(), FoldWindow(0, 0, {}))
    kept = greatest(pa.concat_tables(applied))
    change = pa.chunked_array([c for column in changes for c in column.chunks], pa.binary()).take(kept.column(_AT))
    return kept.drop_columns([_AT]).add_column(CHANGE_LOG_SCHEMA.get_field_index(_CHANGE), _CHANGE, change)


_CHANGE, _AT = "change", "_change_at"


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
    """The runs and change log of the window between two published records (``published/<W>.json``):
    each applied interval after W1's up to W2's, opened as its run opened it (``IntervalWindow``).

    Raises:
        ChangesUnavailable: archive retention deleted change-log segments the window needs.
        ChangesError: the archive lacks a checkpoint or manifest the window's runs left.
    """
    config = settle_topic_clocks(config, storage, record=False)  # a reader records nothing
    chain = list_manifests(storage, config.name)
    names = [_interval_name(s, e) for s, e, _ in chain]
    first, last = (names.index(doc["interval"]) if doc["interval"] in names else None for doc in (from_doc, to_doc))
    if first is None or last is None:
        missing = from_doc if first is None else to_doc
        raise ChangesError(f"pipeline {config.name}: no manifest of interval {missing['interval']}, which published "
                           f"watermark {missing['watermark']}")
    previous = read_checkpoint(storage, config.name, chain[first][0], chain[first][1])
    if previous is None:
        raise ChangesError(f"pipeline {config.name}: interval {names[first]} published watermark {from_doc['watermark']} "
                           "but has no checkpoint")
    runs: list[Run] = []
    for start, end, path in chain[first + 1:last + 1]:
        cp = read_checkpoint(storage, config.name, start, end)
        if cp is None:
            continue  # landed after a later interval took its offsets: it holds no message
        try:
            runs.append(Run(IntervalWindow.open(config, storage, read_manifest(storage, path), previous), cp.watermark))
        except ArchivePruned as exc:
            raise ChangesUnavailable(f"the changes between watermarks {from_doc['watermark']} and {to_doc['watermark']} "
                                     f"need the change log archive retention deleted: {exc}") from None
        previous = cp
    window = Window(from_doc["watermark"], to_doc["watermark"], runs, storage, config)
    if not runs:
        return window
    needed, history = merged([run.window for run in runs])
    decode = lambda: ensure_change_log(config, storage, LocalRunner(), needed, history,  # noqa: E731
                                       runs[-1].window.full_history)
    missing = undecoded(config, storage, needed)
    # Decoded already (what every run leaves): only read. Else decoding writes change logs, which
    # only the pipeline's lease holder may do (a downstream reader holds read-only credentials).
    window.sides = _decoded_under_lease(config, storage, missing, from_doc, to_doc, decode) if missing else decode()
    window.paths = sorted({p for run in runs for p in run.window.change_log_paths()})
    return window


def _decoded_under_lease(config: PipelineConfig, storage: Storage, missing: list[tuple[PKey, Any]],
                         from_doc: Mapping[str, Any], to_doc: Mapping[str, Any], decode: Any) -> Any:
    """``decode()`` while holding the pipeline's lease, or ``ChangesNeedDecoding`` saying what to run."""
    from spark.archive.lease import Lease

    lease = Lease(storage, config.name, ttl_seconds=config.lease_ttl_seconds, wait_seconds=config.lease_wait_seconds,
                  owner=f"tidelake changes {from_doc['watermark']}..{to_doc['watermark']}")
    try:
        lease.acquire()
    except Exception as exc:  # read-only credentials (the store refuses the lease's object), or a run holds it
        (topic, partition), segment = missing[0]
        raise ChangesNeedDecoding(
            f"pipeline {config.name}: the change log between watermarks {from_doc['watermark']} and "
            f"{to_doc['watermark']} is not decoded by this tidelake's decoders ({len(missing)} segment(s), the first "
            f"{topic}/{partition}@{segment.start}), and decoding it writes to the archive under the pipeline's lease, "
            f"which this reader could not take ({type(exc).__name__}: {exc}). Run the same request once with the "
            "pipeline's own credentials (e.g. `tidelake changes --config <pipeline file> --from "
            f"{from_doc['watermark']} --to {to_doc['watermark']} --out <dir>`); readers need only read access after it"
        ) from None
    with lease:
        return decode()
