"""The change feed: the net changes of every table between two published watermarks (contract §8).

``read_changes(config, W1, W2)`` gives, per upstream table, an Arrow table of what turns the
table at W1 into the table at W2: one row per row that differs, with ``_change_type``
(``insert``, ``delete``, ``update_before``, ``update_after``, the names Spark's and Delta's change
views use), ``_commit_ts`` (the commitTs of the last change to that key in the window) and the
row's columns. Every table's changes span the same two published Ws, so the changes of
``orders`` and ``order_items`` never show half a transaction.

How (cost grows with the keys the window changed, not with the tables' sizes):

1. The keys: the window's runs and their change log (``spark.query.changes_log``): the rows each run
   applied, folded by the one fold rule (``net_change.greatest``) into the last change per key.
2. The images: the rows of those keys only, read at tag ``wm_<W1>`` (before) and ``wm_<W2>``
   (after) with the key-bounded file planning (``spark.query.changes_read``).
3. The difference: before and after compared as multisets of rows in W2's columns; rows equal on
   both sides are no change (a key changed and changed back has no row), a key with one row on
   each side that differs is an ``update_before``/``update_after`` pair, the rest are deletes and
   inserts. A key-less table is a multiset: a row held n times more (or fewer) at W2 is n inserts
   (deletes).

Tables are matched by upstream name: ``db.t``'s changes turn ``db.t`` at W1 into ``db.t`` at W2.
A table is read whole on both sides (and its changes are still only the rows that differ) when the
window changed more than its rows: created, dropped, renamed or replaced (a name held by another
table at W2: gh-ost's cut-over), truncated (TABLE or PARTITION), its key changed, a key column
renamed, dropped or retyped, a column added with a value for the existing rows (``DEFAULT``, or
NOT NULL), a column of a key-less table changed, a DDL of it tidelake cannot parse. Its columns
are those of W2; a column dropped in the window is kept in the before images (``delete``,
``update_before``) and NULL in the after images, and rows are compared on W2's columns only.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.schema import Schema
from pyiceberg.types import IntegerType, LongType, NestedField, StringType

from spark.tables import catalog as cat
from spark.query import read as query
from spark.query.names import QueryError
from spark.commit.plan import ddl_changes
from spark.query.changes_log import ChangesError, ChangesNeedDecoding, ChangesUnavailable, Window, open_window
from spark.query.changes_read import arrow_schema, read_rows
from spark.tables.properties import upstream_schema_at
from spark.config import PipelineConfig
from spark.tables.ddl import (
    AddColumn,
    AddPartitions,
    CoalescePartitions,
    MoveColumn,
    ReorganizePartitions,
    SetPartitioning,
    ChangeColumnType,
    CreateTable,
    CreateTableLike,
    DdlParseError,
    DropColumn,
    DropDatabase,
    DropPartitions,
    DropTable,
    ExchangePartition,
    RenameColumn,
    RenameTable,
    SetKeyColumns,
    TruncatePartitions,
    TruncateTable,
)
from spark.decode.effect import decode_effect
from spark.core.key_match import key_matches
from spark.commit.isolation import statement_tables
from spark.tables.schema_map import UnsupportedValue, arrow_table, metadata_columns
from spark.archive.storage import Storage, open_storage
from spark.core.watermark import tag_name, watermark_time

__all__ = ["CHANGE_TYPES", "ChangeSet", "ChangesError", "ChangesNeedDecoding", "ChangesRequestError", "ChangesUnavailable",
           "TableChanges",
           "read_changes"]

TableRef = tuple[str, str]


class ChangesRequestError(ChangesError, QueryError):
    """The request is wrong: ``from_w`` after ``to_w``, or a table the pipeline does not have."""


INSERT, DELETE, UPDATE_BEFORE, UPDATE_AFTER = "insert", "delete", "update_before", "update_after"
CHANGE_TYPES = (INSERT, DELETE, UPDATE_BEFORE, UPDATE_AFTER)
# Without before images (``before_images=False``): a touched key's row at W2, or its deletion (the
# key's columns, the others NULL). What a MERGE, a cache or a search index applies, idempotently.
UPSERT = "upsert"
AFTER_IMAGE_TYPES = (UPSERT, DELETE)
CHANGE_TYPE, COMMIT_TS = "_change_type", "_commit_ts"
KEYS, WHOLE, NOTHING = "keys", "whole", "nothing"  # how a table's images were read
# DDL that keeps every row as it is (none is read whole for them): the partitioning's layout and
# the columns' order. Any other change not handled by name reads its table whole.
ROW_PRESERVING = (SetPartitioning, AddPartitions, CoalescePartitions, ReorganizePartitions, MoveColumn)


@dataclass(frozen=True)
class TableChanges:
    """What ``read_changes`` did for one table."""

    database: str
    table: str
    read: str  # KEYS: the touched keys' rows only; WHOLE: every row at both Ws; NOTHING: no change in the window
    reason: str | None  # why WHOLE
    keys_touched: int  # keys the window's change log touched
    counts: dict[str, int]  # rows per change type
    change_type_column: str = CHANGE_TYPE
    commit_ts_column: str = COMMIT_TS
    dropped_columns: tuple[str, ...] = ()  # columns of W1 dropped in the window (in before images only)

    def to_dict(self) -> dict[str, Any]:
        return {"database": self.database, "table": self.table, "read": self.read, "reason": self.reason,
                "keys_touched": self.keys_touched, "rows": self.counts, "change_type_column": self.change_type_column,
                "commit_ts_column": self.commit_ts_column, "dropped_columns": list(self.dropped_columns)}


class ChangeSet(dict):
    """``(database, table) -> Arrow table`` of the net changes between ``from_watermark`` and
    ``to_watermark``, with what was done per table (``details``) and the tables left out because
    one of the two Ws lists them as isolated (``isolated``: their entries in that W's record)."""

    def __init__(self, from_watermark: int, to_watermark: int, before_images: bool = True) -> None:
        super().__init__()
        self.from_watermark = from_watermark
        self.to_watermark = to_watermark
        self.before_images = before_images
        self.details: dict[TableRef, TableChanges] = {}
        self.isolated: dict[TableRef, dict[str, Any]] = {}
        # Tables whose changes start at an earlier W than from_watermark (``take``): the W they start at.
        self.from_watermarks: dict[TableRef, int] = {}

    def take(self, other: ChangeSet) -> None:
        """Put ``other``'s tables in this set, in place of its own, with what was done for them:
        for a table an Asset event names under ``caught_up``, its changes since the W it was held
        at (``read_changes(config, from_watermark, to_watermark, [name])``), which the window from
        ``from_watermark`` left out while it was held or lacks before it. ``manifest()`` then gives
        that table its own ``from_watermark``. Assigning ``changes[name]`` instead would keep this
        window's description of the table (its counts, its first W) beside the other window's rows."""
        if (other.to_watermark, other.before_images) != (self.to_watermark, self.before_images):
            raise ChangesRequestError(
                f"cannot take changes to W {other.to_watermark} (before_images={other.before_images}) into changes to W "
                f"{self.to_watermark} (before_images={self.before_images}): a table's changes must end at the same W, "
                "read the same way")
        for name, rows in other.items():
            self[name] = rows
            self.details[name] = other.details[name]
            self.isolated.pop(name, None)
            self.from_watermarks[name] = other.from_watermarks.get(name, other.from_watermark)

    def manifest(self, files: Mapping[TableRef, str] | None = None) -> dict[str, Any]:
        """The change set's description (``tidelake changes --out`` writes it as ``manifest.json``)."""
        return {
            "from_watermark": self.from_watermark, "from_time": watermark_time(self.from_watermark),
            "to_watermark": self.to_watermark, "to_time": watermark_time(self.to_watermark),
            "before_images": self.before_images,
            # Each table's changes start at from_watermark, or at its own (a table caught up: ``take``).
            "tables": [{**self.details[name].to_dict(), "from_watermark": self.from_watermarks.get(name, self.from_watermark),
                        **({"file": files[name]} if files and name in files else {})} for name in sorted(self)],
            "isolated": [{"database": db, "table": t, **entry} for (db, t), entry in sorted(self.isolated.items())],
        }


# ---------------------------------------------------------------- the watermarks


def resolve(config: PipelineConfig, at: query.At, storage: Storage, *, start: bool = False) -> int:
    """A published W: an exact W (int, or its digits) must be published; "latest" or a time resolves
    as ``query`` does (the greatest published W at or before it). 0 is before the first W, and so
    is, for a window's ``start``, a time before the first W (nothing was published then)."""
    if isinstance(at, int) or (isinstance(at, str) and at.isdigit()):
        w = int(at)
        if w:  # 0: before the first W, when no table had a row
            query.published(config, w, storage)
        return w
    if start and at != "latest":
        first = next(iter(query.published_watermarks(config, storage)), None)
        instant = at if isinstance(at, dt.datetime) else dt.datetime.fromisoformat(str(at).replace("Z", "+00:00"))
        if instant.tzinfo is not None and (first is None or query.to_tso(instant) < first):
            return 0
    return query.resolve_watermark(config, at, storage)


def as_typed(at: query.At, w: int) -> str:
    """A window's end as the user gave it: a W as itself, a time or "latest" with the W it resolved to."""
    if isinstance(at, int) or (isinstance(at, str) and at.isdigit()):
        return str(w)
    text = at.isoformat().replace("+00:00", "Z") if isinstance(at, dt.datetime) else str(at)
    return f"{text} (watermark {w})"


def _names(wanted: Iterable[str | TableRef], known: set[TableRef]) -> set[TableRef]:
    """``db.t`` texts (a dot inside a name is found by trying each split) or (db, t) pairs."""
    out = set()
    for item in wanted:
        if isinstance(item, tuple):
            candidates = [item]
        else:
            candidates = [(item[:i], item[i + 1:]) for i, c in enumerate(item) if c == "."]
        found = [c for c in candidates if c in known]
        if len(found) != 1:
            what = ".".join(item) if isinstance(item, tuple) else item
            tables = ", ".join(f"{d}.{t}" for d, t in sorted(known)[:20])
            raise ChangesRequestError(f"{what!r} {'is ambiguous' if found else 'is not a table'} of the pipeline at either "
                               f"watermark; the tables are: {tables or 'none'}")
        out.add(found[0])
    return out


# ---------------------------------------------------------------- the window's DDL, per table


@dataclass
class _Ddl:
    """What the window's DDL did to one table name."""

    whole: list[str] = field(default_factory=list)  # why its images must be read whole
    columns: set[str] = field(default_factory=set)  # columns a column DDL named (casefolded)
    last_ts: int = 0  # commitTs of the last DDL naming it
    rows_ts: int = 0  # ... of the last one that changed its rows wholesale (a reason in ``whole``)
    # CommitTs of the DDL that changed rows under the name without row events: that filled a column
    # for the existing rows (ADD COLUMN ... DEFAULT), that brought rows to the name (a rename onto
    # it), that took rows from it (TRUNCATE, DROP TABLE / DATABASE / PARTITION, a rename away).
    filled: list[int] = field(default_factory=list)
    arrived: list[int] = field(default_factory=list)
    removed: list[int] = field(default_factory=list)

    def merged(self, other: _Ddl) -> _Ddl:
        return _Ddl([*self.whole, *other.whole], self.columns | other.columns, max(self.last_ts, other.last_ts),
                    max(self.rows_ts, other.rows_ts), sorted([*self.filled, *other.filled]),
                    sorted([*self.arrived, *other.arrived]), sorted([*self.removed, *other.removed]))


def _ddl_by_table(window: Window, config: PipelineConfig) -> tuple[dict[TableRef, _Ddl], dict[str, _Ddl], list[str]]:
    """Per table name and per database (DROP DATABASE), what the window's DDL did; and reasons that
    hold for every table (a DDL that names no table tidelake can tell)."""
    tables: dict[TableRef, _Ddl] = {}
    databases: dict[str, _Ddl] = {}
    everywhere: list[str] = []

    def note(ref: TableRef, ts: int, whole: str | None = None, column: str | None = None, filled: bool = False,
             arrived: bool = False, removed: bool = False) -> None:
        d = tables.setdefault(ref, _Ddl())
        d.last_ts = max(d.last_ts, ts)
        if whole:
            d.whole.append(whole)
            d.rows_ts = max(d.rows_ts, ts)
        if column is not None:
            d.columns.add(column.casefold())
        if filled:
            d.filled.append(ts)
        if arrived:
            d.arrived.append(ts)
        if removed:
            d.removed.append(ts)

    for e in window.ddls():
        ts, sql = e.commit_ts or 0, e.sql
        try:
            changes = ddl_changes(e)
        except DdlParseError:
            refs = statement_tables(e)
            if not refs:
                everywhere.append(f"a DDL tidelake cannot parse, naming no table: {sql!r}")
            for ref in sorted(refs):
                note(ref, ts, f"a DDL tidelake cannot parse: {sql!r}")
            continue
        for ref, change in changes:
            if isinstance(change, RenameTable):
                note(ref, ts, f"renamed in the window: {sql!r}", removed=True)
                note((change.database, change.table), ts, f"renamed in the window: {sql!r}", arrived=True)
            elif isinstance(change, DropDatabase):
                d = databases.setdefault(change.database, _Ddl())
                d.whole.append(f"its database was dropped in the window: {sql!r}")
                d.last_ts = d.rows_ts = max(d.last_ts, ts)
                d.removed.append(ts)
            elif isinstance(change, (CreateTable, CreateTableLike, DropTable, TruncateTable, DropPartitions,
                                     TruncatePartitions, SetKeyColumns)):
                what = type(change).__name__
                takes = isinstance(change, (DropTable, TruncateTable, DropPartitions, TruncatePartitions))
                note(change.table if isinstance(change, CreateTableLike) else ref, ts, f"{what} in the window: {sql!r}",
                     removed=takes)
            elif isinstance(change, AddColumn):
                fills = change.default is not None or not change.column.nullable
                note(ref, ts, f"a column added with a value for the existing rows: {sql!r}" if fills else None,
                     change.column.name, filled=fills)
            elif isinstance(change, DropColumn):
                note(ref, ts, column=change.name)
            elif isinstance(change, RenameColumn):
                note(ref, ts, column=change.old)
                note(ref, ts, column=change.new)
            elif isinstance(change, ChangeColumnType):
                note(ref, ts, column=change.name)
            elif isinstance(change, ExchangePartition):  # rows move both ways without row events
                note(ref, ts, f"a partition exchanged in the window: {sql!r}", arrived=True, removed=True)
            elif isinstance(change, ROW_PRESERVING):
                note(ref, ts)
            else:  # a change not known to keep the rows: read whole rather than miss rows it moved
                note(ref, ts, f"{type(change).__name__} in the window: {sql!r}")
    return tables, databases, everywhere


# ---------------------------------------------------------------- the change feed


def read_changes(config: PipelineConfig, from_w: query.At, to_w: query.At = "latest",
                 tables: Iterable[str | TableRef] | None = None, *, catalog: Any = None,
                 storage: Storage | None = None, progress: Callable[[str, int, int], None] | None = None,
                 runner: Any = None, before_images: bool = True) -> ChangeSet:
    """The net changes of every table (or of ``tables``: ``"db.t"`` or ``(db, t)``) between two
    published watermarks, ``from_w`` < ``to_w`` (each a W, a TSO or time resolving to the greatest
    published W at or before it, or "latest"). ``from_w`` 0 is before the first W: every row at
    ``to_w`` is an insert (a first load in the change feed's form).

    Tables either W lists as isolated are left out and named in ``isolated`` (asked for by name,
    they raise ``IsolatedTable``). ``progress(step, done, total)`` is called with step ``"change log"``
    (the window's change log read and folded) and ``"tables"`` (one per table). With ``runner``
    (``spark.runtime.runners.SparkRunner``) the window's change log is folded on the executors, a task per
    key-hash slice of ``fold_slice_rows`` rows; without, in this process.

    ``before_images=False``: after images and deleted keys only, for consumers that apply changes by
    key (a MERGE, a cache, a search index): per key the window touched, an ``upsert`` with its row at
    W2, or a ``delete`` with its key columns (the others NULL). It reads no data file of W1 for a
    keyed table whose rows only row changes touched; a table the window changed wholesale (a
    TRUNCATE, a rename, ...) reads W1's key columns for its deleted keys, and a key-less table,
    whose deleted copies are whole rows, is compared as with before images (``insert``/``delete``).
    Idempotent rather than minimal: a key changed and changed back is an ``upsert`` of the row it has.

    Raises:
        NoSuchWatermark: a W is not published; RetiredWatermark: retention retired it (naming the
            nearest retained Ws); IsolatedTable: a table asked for is isolated at either W.
        ChangesUnavailable: archive retention deleted change log the window needs.
        ChangesNeedDecoding: the window's change log is not decoded by this version's decoders and the
            caller cannot take the pipeline's lease to decode it (read-only credentials): says what to run.
        ChangesError: ``from_w`` is after ``to_w``, or a table asked for is not the pipeline's.
    """
    storage = storage or open_storage(config.storage)
    catalog = catalog or cat.open_catalog(config)
    progress = progress or (lambda step, done, total: None)
    w1, w2 = resolve(config, from_w, storage, start=True), resolve(config, to_w, storage)
    if w1 > w2:
        raise ChangesRequestError(f"pipeline {config.name}: from {as_typed(from_w, w1)} is after to {as_typed(to_w, w2)}")
    after = query.view_at(config, w2, catalog, storage)
    before = query.view_at(config, w1, catalog, storage)
    isolated = {**{n: {**e, "isolated_at": w1} for n, e in before.isolated.items()},
                **{n: {**e, "isolated_at": w2} for n, e in after.isolated.items()}}
    known = set(before.tables) | set(after.tables) | set(isolated)
    names = known if tables is None else _names(tables, known)
    out = ChangeSet(w1, w2, before_images)
    for name in sorted(names & set(isolated)):
        if tables is not None:
            view = after if name in after.isolated else before
            view.require_readable(name)
        out.isolated[name] = isolated[name]
    names = names - set(isolated)
    progress("change log", 0, 1)
    if w1 == w2 or not w1 or not names:  # from 0 every table is new: read whole, nothing to learn from the log
        window = None
    else:
        window = open_window(config, storage, query.published(config, w1, storage), query.published(config, w2, storage))
    touched = window.touched(None if tables is None else names, runner) if window is not None else None
    by_table, by_database, everywhere = _ddl_by_table(window, config) if window is not None else ({}, {}, [])
    progress("change log", 1, 1)
    progress("tables", 0, len(names))
    for i, name in enumerate(sorted(names)):
        ddl = by_table.get(name, _Ddl())
        dropped_db = by_database.get(name[0])
        if dropped_db is not None:
            ddl = ddl.merged(dropped_db)
        rows = _rows_of(touched, name) if touched is not None else None
        changes, details = _table_changes(name, before, after, rows, ddl, everywhere, window, before_images)
        out[name], out.details[name] = changes, details
        progress("tables", i + 1, len(names))
    return out


def _rows_of(touched: pa.Table, name: TableRef) -> pa.Table:
    if touched.num_rows == 0:
        return touched
    return touched.filter(pc.and_(pc.equal(touched.column("database"), name[0]), pc.equal(touched.column("table"), name[1])))


def _free(name: str, taken: set[str]) -> str:
    """``name``, or with as many more leading underscores as make it no upstream column's (ignoring
    case): the rule of the metadata columns (``schema_map.metadata_name``)."""
    while name.casefold() in taken:
        name = "_" + name
    taken.add(name.casefold())
    return name


def _upstream(view: query.View, name: TableRef) -> tuple[Schema, list[NestedField], NestedField]:
    """The table's schema at the view's W, its upstream fields, and its commitTs field."""
    schema = view.schema(name, metadata=True)
    meta = metadata_columns(schema, view.tables[name].properties)
    upstream = [f for f in schema.fields if f.name not in meta.names]
    commit = next(f for f in schema.fields if f.name == meta.commit_ts)
    return schema, upstream, commit


def _table_changes(name: TableRef, before: query.View, after: query.View, touched: pa.Table | None, ddl: _Ddl,
                   everywhere: list[str], window: Window | None, before_images: bool = True,
                   ) -> tuple[pa.Table, TableChanges]:
    t1, t2 = before.tables.get(name), after.tables.get(name)
    w1, w2 = before.watermark, after.watermark
    same = t1 is not None and t2 is not None and t1.metadata.table_uuid == t2.metadata.table_uuid
    up1 = _upstream(before, name)[1] if t1 is not None else []
    if t2 is not None:
        _, up2, commit_field = _upstream(after, name)
        shown = up2
    else:
        up2, commit_field, shown = [], None, up1
    taken = {f.name.casefold() for f in [*up1, *up2]}
    change_col, ts_col = _free(CHANGE_TYPE, taken), _free(COMMIT_TS, taken)
    if same:
        ids2 = {f.field_id for f in up2}
        dropped = [f for f in up1 if f.field_id not in ids2]
    elif t2 is not None:
        names2 = {f.name for f in up2}
        dropped = [f for f in up1 if f.name not in names2]
    else:
        dropped = []
    # A dropped column keeps its name unless a column of W2 (or a change column) has it.
    taken = {f.name.casefold() for f in shown} | {change_col.casefold(), ts_col.casefold()}
    dropped_out = [NestedField(f.field_id, _free(f.name, taken), f.field_type, required=False) for f in dropped]
    keys_touched = touched.num_rows if touched is not None else 0

    # How to read: only the touched keys' rows, unless the window changed more than rows.
    # The key and upstream types the table had at W2 (W1 for a table gone by then), not today's:
    # a later key change or ALTER does not change what an older window returns.
    key_property, upstream_types = upstream_schema_at((t2 or t1).properties, w2 if t2 is not None else w1)  # type: ignore[union-attr]
    seen_keys = window.key_columns(touched.column("schema_id").to_pylist()) if window is not None and keys_touched else set()
    key = next(iter(seen_keys)) if len(seen_keys) == 1 else key_property
    reasons = list(everywhere) + list(ddl.whole)
    if t1 is None or t2 is None:
        reasons.append("created in the window" if t1 is None else "dropped in the window")
    elif not same:
        reasons.append("another table holds its name at the later W")
    if len(seen_keys) > 1:
        reasons.append("its key columns changed in the window")
    elif key != key_property:
        reasons.append("its change log's key differs from the table's")
    if key and ddl.columns & {k.casefold() for k in key}:
        reasons.append("a key column changed in the window")
    if not key and ddl.columns:
        reasons.append("a column of a table without a key changed in the window")
    names2 = {f.name for f in shown}
    if any(k not in names2 for k in key):
        reasons.append("its key columns are not all columns at the later W")
        key = ()  # the rows are compared whole, unpaired
    kinds = CHANGE_TYPES if before_images or not key else AFTER_IMAGE_TYPES
    if w1 == w2 or (not reasons and not keys_touched):
        return _empty(shown, dropped_out, change_col, ts_col), TableChanges(
            *name, NOTHING, None, 0, dict.fromkeys(kinds, 0), change_col, ts_col, tuple(f.name for f in dropped_out))

    fields2 = {f.name: f for f in shown}
    match = list(key) if key else [f.name for f in shown]
    typed = _typed_keys(touched, Schema(*[fields2[m] for m in match]), upstream_types, bool(key)) if keys_touched else None
    if typed is None and not reasons:
        reasons.append("a touched key's values do not fit the table's columns")
    whole = bool(reasons)
    if not before_images and key:
        w1_keys = _key_fields_at(key, fields2, up1, same) if whole and t1 is not None else []
        if not whole or t1 is None or w1_keys is not None:
            table, counts = _after_images(t1, t2, w1, w2, key, shown, dropped_out, change_col, ts_col, commit_field,
                                          typed, None if whole else typed.keys, w1_keys, ddl)  # type: ignore[union-attr]
            return table, TableChanges(*name, WHOLE if whole else KEYS, "; ".join(dict.fromkeys(reasons)) or None,
                                       keys_touched, counts, change_col, ts_col, tuple(f.name for f in dropped_out))

    # The images: W1's rows in W2's columns (+ the dropped ones), W2's rows with their commitTs.
    read1 = Schema(*shown, *dropped_out) if same else Schema(*up1)
    read2 = Schema(*up2, commit_field) if t2 is not None else None
    keys_arg = None if whole else typed.keys  # type: ignore[union-attr]
    if t1 is None:
        rows1 = arrow_schema(Schema(*shown, *dropped_out)).empty_table()
    else:
        rows1 = read_rows(t1, t1.snapshot_by_name(tag_name(w1)).snapshot_id, read1, match, keys_arg)
        if not same:
            rows1 = _by_name(rows1, shown, dropped, dropped_out)
    # A touched key's row at W2 was written in the window (its change was applied after W1, with
    # its commitTs): files whose commitTs bound is at most W1 hold none of them. Not so for a
    # key-less table's copies, nor for rows a DDL changed (read whole anyway).
    recent = (commit_field.field_id, w1) if key and not whole and commit_field is not None else None
    rows2 = read_rows(t2, t2.snapshot_by_name(tag_name(w2)).snapshot_id, read2, match, keys_arg, recent) \
        if t2 is not None else None
    if rows2 is not None and rows2.num_rows:
        # Newest first: of a key-less table's equal rows, the copies the window added are its newest
        # (``multiset_difference`` takes the first), whatever order the files hold them in.
        own = pc.fill_null(rows2.column(commit_field.name), 0).to_numpy()  # type: ignore[union-attr]
        rows2 = rows2.take(pa.array(np.argsort(-own, kind="stable")))
    after_rows = rows2.select([f.name for f in shown]) if rows2 is not None else arrow_schema(Schema(*shown)).empty_table()
    compare = [f.name for f in shown]
    removed, added = multiset_difference(rows1.select(compare), after_rows, compare)
    pair_key = key if key and all(k in compare for k in key) else ()
    pairs = _pairs(rows1.take(pa.array(removed, pa.int64())), after_rows.take(pa.array(added, pa.int64())), pair_key)

    # _commit_ts, the commitTs of what produced the row: an after image's own (its last change) when
    # the window wrote it, else its key's last change in the change log (a key-less table's image),
    # else the table's last DDL in the window -- but a column filled for the existing rows (ADD
    # COLUMN ... DEFAULT) after that produced the image, and a rename onto the name after it produced
    # an insert. An update's before image has its after image's. A row deleted whose key's last
    # change wrote it was taken by a DDL (TRUNCATE, a DROP, a rename away): the first after that write.
    fallback = ddl.rows_ts or ddl.last_ts or w2
    before_pair, after_pair = pairs
    after_ts = np.zeros(len(added), np.int64)
    if rows2 is not None and len(added):
        own = pc.fill_null(rows2.column(commit_field.name).take(pa.array(added, pa.int64())), 0)  # type: ignore[union-attr]
        after_ts = own.to_numpy().astype(np.int64)
    older = np.flatnonzero(after_ts <= w1)
    after_ts[older] = _logged(after_rows, added[older], typed, match, fallback)[0]
    after_ts = np.maximum(after_ts, max(ddl.filled, default=0))
    inserts = np.setdiff1d(np.arange(len(added)), after_pair)
    after_ts[inserts] = np.maximum(after_ts[inserts], max(ddl.arrived, default=0))
    before_ts = np.zeros(len(removed), np.int64)
    before_ts[before_pair] = after_ts[after_pair]  # an update's before image: the update's commitTs
    alone = np.setdiff1d(np.arange(len(removed)), before_pair)
    before_ts[alone] = _deleted_ts(rows1, removed[alone], typed, match, fallback, ddl.removed, w1)

    table, counts = _assemble(rows1, removed, before_ts, before_pair, after_rows, added, after_ts, after_pair, shown,
                              dropped_out, change_col, ts_col, pair_key)
    details = TableChanges(*name, WHOLE if whole else KEYS, "; ".join(dict.fromkeys(reasons)) or None, keys_touched, counts,
                           change_col, ts_col, tuple(f.name for f in dropped_out))
    return table, details


@dataclass(frozen=True)
class _TouchedKeys:
    """The window's touched keys in the table's own types (``keys``: the key columns, or a key-less
    table's whole rows), with per key the commitTs of its last change and whether that change
    deleted it -- beside the keys, not as columns among them: an upstream column may have any name."""

    keys: pa.Table
    ts: np.ndarray
    deleted: np.ndarray


def _key_fields_at(key: tuple[str, ...], fields2: Mapping[str, NestedField], up1: list[NestedField],
                   same: bool) -> list[NestedField] | None:
    """W1's fields of W2's key columns, in W2's types (by field id in the same table, else by name);
    None if one is not a column at W1."""
    ids1, names1 = {f.field_id for f in up1}, {f.name: f for f in up1}
    out = []
    for k in key:
        f = fields2[k]
        if same and f.field_id in ids1:
            out.append(f)
        elif not same and k in names1:
            out.append(NestedField(names1[k].field_id, k, f.field_type, required=False))
        else:
            return None
    return out


def _after_images(t1: Any, t2: Any, w1: int, w2: int, key: tuple[str, ...], shown: list[NestedField],
                  dropped_out: list[NestedField], change_col: str, ts_col: str, commit_field: NestedField | None,
                  typed: _TouchedKeys | None, keys_arg: pa.Table | None, w1_keys: list[NestedField],
                  ddl: _Ddl) -> tuple[pa.Table, dict[str, int]]:
    """``read_changes(before_images=False)`` for one keyed table: ``upsert`` each touched key's row at
    W2 (every row, ``keys_arg`` None: a table the window changed wholesale), ``delete`` each touched
    key without one (wholesale: each key of W1, read alone, without one at W2)."""
    match = list(key)
    fallback = ddl.rows_ts or ddl.last_ts or w2
    if t2 is not None:
        # Only files written after W1 can hold a touched key's row at W2 (its change came after W1).
        recent = (commit_field.field_id, w1) if keys_arg is not None and commit_field is not None else None
        rows2 = read_rows(t2, t2.snapshot_by_name(tag_name(w2)).snapshot_id, Schema(*shown, commit_field), match,
                          keys_arg, recent)
    else:
        rows2 = arrow_schema(Schema(*shown)).empty_table()
    after = rows2.select([f.name for f in shown])
    after_ts = np.zeros(after.num_rows, np.int64)
    if t2 is not None and after.num_rows:
        after_ts = pc.fill_null(rows2.column(commit_field.name), 0).to_numpy().astype(np.int64)  # type: ignore[union-attr]
    older = np.flatnonzero(after_ts <= w1)
    after_ts[older] = _logged(after, older, typed, match, fallback)[0]
    after_ts = np.maximum(after_ts, max([*ddl.filled, *ddl.arrived], default=0))
    if keys_arg is not None:  # the touched keys without a row at W2
        gone_keys = keys_arg.select(match)
        _, present = key_matches(after.select(match), gone_keys, match) if after.num_rows else (None, np.zeros(0, np.int64))
        gone = np.setdiff1d(np.arange(gone_keys.num_rows), present)
        gone_ts = typed.ts[gone] if typed is not None else np.full(len(gone), fallback, np.int64)
    else:  # W1's keys (their columns alone) without a row at W2
        keys1 = read_rows(t1, t1.snapshot_by_name(tag_name(w1)).snapshot_id, Schema(*w1_keys)) if t1 is not None \
            else arrow_schema(Schema(*w1_keys)).empty_table()
        gone_keys = keys1.rename_columns(match)
        matched = key_matches(gone_keys, after.select(match), match)[0] if gone_keys.num_rows and after.num_rows \
            else np.zeros(0, np.int64)
        gone = np.setdiff1d(np.arange(gone_keys.num_rows), matched)
        gone_ts = _deleted_ts(gone_keys, gone, typed, match, fallback, ddl.removed, w1)
    schema = _output_schema(shown, dropped_out, change_col, ts_col)
    columns = arrow_schema(Schema(*shown, *dropped_out))
    deleted = gone_keys.take(pa.array(gone, pa.int64()))
    upserts = pa.Table.from_arrays(
        [pa.array(np.full(after.num_rows, UPSERT, object), pa.string()), pa.array(after_ts, pa.int64()),
         *after.columns, *(pa.nulls(after.num_rows, columns.field(f.name).type) for f in dropped_out)], schema=schema)
    deletes = pa.Table.from_arrays(
        [pa.array(np.full(len(gone), DELETE, object), pa.string()), pa.array(gone_ts, pa.int64()),
         *(deleted.column(f.name).cast(columns.field(f.name).type) if f.name in match
           else pa.nulls(len(gone), columns.field(f.name).type) for f in [*shown, *dropped_out])], schema=schema)
    table = pa.concat_tables([deletes, upserts])
    order = pa.table({**{f"c{i}": _comparable(table.column(k)) for i, k in enumerate(match)},
                      "side": np.concatenate([np.zeros(len(gone), np.int8), np.ones(after.num_rows, np.int8)])})
    table = table.take(pc.sort_indices(order, sort_keys=[(c, "ascending") for c in order.column_names]))
    return table, {UPSERT: after.num_rows, DELETE: len(gone)}


def _logged(rows: pa.Table, taken: np.ndarray, typed: _TouchedKeys | None, match: list[str],
            default: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row ``taken`` of ``rows``: the commitTs of its key's last change in the change log (or
    ``default`` where the change log has none), and whether the change log has one."""
    out, found = np.full(len(taken), default, np.int64), np.zeros(len(taken), bool)
    if typed is None or not len(taken) or typed.keys.num_rows == 0:
        return out, found
    row, hit = key_matches(rows.take(pa.array(taken, pa.int64())).select(match), typed.keys.select(match), match)
    if not len(row):
        return out, found
    latest = np.zeros(len(taken), np.int64)
    np.maximum.at(latest, row, typed.ts[hit])
    found[row] = True
    return np.where(found, latest, out), found


def _deleted_ts(rows: pa.Table, taken: np.ndarray, typed: _TouchedKeys | None, match: list[str], default: int,
                removals: list[int], w1: int) -> np.ndarray:
    """The commitTs of what deleted each row ``taken`` of ``rows`` (rows of W1 not at W2, no update's
    before image): its key's last change when that deleted it, else the first DDL that took rows from
    the table after that change (after W1 when the change log has none); else ``default``."""
    ts, found = _logged(rows, taken, typed, match, default)
    if not removals or not len(taken):
        return ts
    wrote = np.ones(len(taken), bool)  # without a change in the log, the row was last written at or before W1
    if typed is not None and found.any():
        row, hit = key_matches(rows.take(pa.array(taken, pa.int64())).select(match), typed.keys.select(match), match)
        last = np.full(len(taken), -1, np.int64)
        np.maximum.at(last, row, typed.ts[hit])
        deleted = np.zeros(len(taken), bool)
        newest = typed.ts[hit] == last[row]
        deleted[row[newest]] = typed.deleted[hit][newest]
        wrote = ~deleted
    since = np.where(found, ts, w1)
    ordered = np.sort(np.asarray(removals, np.int64))
    at = np.searchsorted(ordered, since, side="right")  # the first removal after the key's last write
    taken_by_ddl = wrote & (at < len(ordered))
    return np.where(taken_by_ddl, ordered[np.minimum(at, len(ordered) - 1)], ts)


def _typed_keys(touched: pa.Table, schema: Schema, upstream_types: Mapping[str, str], keyed: bool) -> _TouchedKeys | None:
    """The touched keys in the table's own types (as ``spark.write.upsert`` types a run's net
    rows); None if a value does not fit.

    Integer and string keys are read back from the change log's canonical key bytes
    (``net_change.key_bytes``); other keys, and a key-less table's images, from the change."""
    typed = _key_column_from_bytes(touched.column("key"), schema, upstream_types) if keyed else None
    if typed is None:
        images = _keys_from_bytes(touched.column("key").to_pylist(), schema, upstream_types) if keyed else None
        if images is None:
            images = [decode_effect(blob)[1] for blob in touched.column("change").to_pylist()]
        try:
            typed = arrow_table(schema, images, upstream_types)
        except UnsupportedValue:
            return None
    return _TouchedKeys(typed, touched.column("ts").to_numpy().astype(np.int64),
                        touched.column("deletes").to_numpy(zero_copy_only=False).astype(bool))


def _key_column_from_bytes(keys: pa.ChunkedArray, schema: Schema, upstream_types: Mapping[str, str]) -> pa.Table | None:
    """``_keys_from_bytes`` for a one-column key, in Arrow: ``<length>:<tag><value>`` per key."""
    if len(schema.fields) != 1 or not len(keys):
        return None
    field = schema.fields[0]
    tag = _KEY_TAGS.get(type(field.field_type))
    if tag is None or upstream_types.get(field.name, "").lower().startswith(("enum", "set")):
        return None
    try:
        text = pc.cast(keys, pa.string())
    except pa.ArrowInvalid:
        return None  # a lone surrogate (key_bytes keeps it): the Python path reads it
    parts = pc.split_pattern(text, ":", max_splits=1)
    length, value = pc.list_element(parts, 0), pc.list_element(parts, 1)
    if not pc.all(pc.equal(pc.cast(length, pa.int64()), pc.utf8_length(value).cast(pa.int64()))).as_py():
        return None  # more than one key part
    null = pc.equal(value, "0")
    body = pc.utf8_slice_codeunits(value, 1)
    tagged = pc.or_(null, pc.starts_with(value, tag))
    if tag == "n":
        tagged = pc.and_(tagged, pc.or_(null, pc.match_substring_regex(body, r"^-?[0-9]+$")))
    if not pc.all(tagged).as_py():
        return None
    values = pc.if_else(null, pa.scalar(None, pa.string()), body)
    target = arrow_schema(schema).field(0).type
    try:
        column = pc.cast(values, target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None  # out of the column's range: the rows decide
    return pa.table({field.name: column})


_KEY_TAGS = {IntegerType: "n", LongType: "n", StringType: "s"}


def _keys_from_bytes(keys: list[bytes], schema: Schema, upstream_types: Mapping[str, str]) -> list[dict[str, Any]] | None:
    """Key values parsed from ``key_bytes`` (length-prefixed tagged texts), when every key column is
    an integer or a string (not an ENUM or SET, which some protocols send as an index or a mask)
    and every key reads as such; else None."""
    tags = [_KEY_TAGS.get(type(f.field_type)) for f in schema.fields]
    if None in tags or any(upstream_types.get(f.name, "").lower().startswith(("enum", "set")) for f in schema.fields):
        return None
    names = [f.name for f in schema.fields]
    out = []
    for raw in keys:
        text, at, values = raw.decode("utf-8", "surrogatepass"), 0, []
        while at < len(text):
            colon = text.index(":", at)
            end = colon + 1 + int(text[at:colon])
            values.append(text[colon + 1:end])
            at = end
        if len(values) != len(tags):
            return None
        row = {}
        for name, tag, value in zip(names, tags, values):
            if value == "0":
                row[name] = None
            elif value[:1] != tag or (tag == "n" and not value[1:].lstrip("-").isdigit()):
                return None
            else:
                row[name] = int(value[1:]) if tag == "n" else value[1:]
        out.append(row)
    return out


def _by_name(rows: pa.Table, shown: list[NestedField], dropped: list[NestedField], dropped_out: list[NestedField]) -> pa.Table:
    """Rows of another table (the one a name held at W1) in W2's columns by name, then the dropped ones."""
    columns, out = [], arrow_schema(Schema(*shown, *dropped_out))
    for f, target in zip([*shown, *dropped], out):
        if f.name in rows.column_names:
            try:
                columns.append(rows.column(f.name).cast(target.type))
                continue
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                pass  # a type no cast reaches: not comparable, every row differs there
        columns.append(pa.nulls(rows.num_rows, target.type))
    return pa.Table.from_arrays(columns, schema=out)


def _empty(shown: list[NestedField], dropped_out: list[NestedField], change_col: str, ts_col: str) -> pa.Table:
    return _output_schema(shown, dropped_out, change_col, ts_col).empty_table()


def _output_schema(shown: list[NestedField], dropped_out: list[NestedField], change_col: str, ts_col: str) -> pa.Schema:
    columns = arrow_schema(Schema(*shown, *dropped_out))
    return pa.schema([pa.field(change_col, pa.string()), pa.field(ts_col, pa.int64()), *columns])


# ---------------------------------------------------------------- comparing images


def multiset_difference(before: pa.Table, after: pa.Table, columns: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Which rows of ``before`` are not in ``after`` and the other way round, as multisets of rows
    over ``columns``: (indices of ``before`` removed, indices of ``after`` added). Of k equal rows
    that lose n copies, the first n go; NULL equals NULL, NaN equals NaN."""
    n1, n2 = before.num_rows, after.num_rows
    if n1 + n2 == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    both = pa.table({f"c{i}": _comparable(pa.chunked_array([*before.column(c).chunks, *after.column(c).chunks],
                                                           before.column(c).type))
                     for i, c in enumerate(columns)}) if columns else pa.table({"c": pa.nulls(n1 + n2, pa.int8())})
    order = pc.sort_indices(both, sort_keys=[(c, "ascending") for c in both.column_names]).to_numpy()
    new_group = np.zeros(len(order), bool)
    new_group[0] = True
    for name in both.column_names:
        values = both.column(name).take(pa.array(order)).combine_chunks()
        if len(values) > 1:
            new_group[1:] |= ~_same(values.slice(1), values.slice(0, len(values) - 1))
    group = np.empty(len(order), np.int64)
    group[order] = np.cumsum(new_group) - 1
    g1, g2 = group[:n1], group[n1:]
    groups = int(group.max()) + 1
    c1, c2 = np.bincount(g1, minlength=groups), np.bincount(g2, minlength=groups)
    return _first_copies(g1, np.maximum(c1 - c2, 0)), _first_copies(g2, np.maximum(c2 - c1, 0))


def _first_copies(group: np.ndarray, excess: np.ndarray) -> np.ndarray:
    """Indices of the first ``excess[g]`` rows of each group g (in index order)."""
    order = np.argsort(group, kind="stable")
    ordered = group[order]
    rank = np.arange(len(order)) - np.searchsorted(ordered, ordered, "left")
    return np.sort(order[rank < excess[ordered]]).astype(np.int64)


def _comparable(column: pa.ChunkedArray) -> pa.Array:
    """A column Arrow can sort and compare: nested values as their JSON text."""
    t = column.type
    if pa.types.is_nested(t) or pa.types.is_dictionary(t):
        return pa.array([None if v is None else orjson.dumps(v, default=str).decode() for v in column.to_pylist()], pa.string())
    return column.combine_chunks()


def _same(a: pa.Array, b: pa.Array) -> np.ndarray:
    equal = pc.fill_null(pc.equal(a, b), False).to_numpy(zero_copy_only=False)
    both_null = pc.and_(pc.is_null(a), pc.is_null(b)).to_numpy(zero_copy_only=False)
    out = equal | both_null
    if pa.types.is_floating(a.type):
        out |= pc.fill_null(pc.and_(pc.is_nan(a), pc.is_nan(b)), False).to_numpy(zero_copy_only=False)
    return out


def _pairs(removed: pa.Table, added: pa.Table, key: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(positions in ``removed``, positions in ``added``) of rows sharing a key with exactly one row
    on each side: an update's before and after images."""
    if not key or not removed.num_rows or not added.num_rows:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    row, other = key_matches(removed.select(list(key)), added.select(list(key)), list(key))
    once = (np.bincount(row, minlength=removed.num_rows)[row] == 1) & (np.bincount(other, minlength=added.num_rows)[other] == 1)
    return row[once], other[once]


def _assemble(rows1: pa.Table, removed: np.ndarray, before_ts: np.ndarray, before_pair: np.ndarray, rows2: pa.Table,
              added: np.ndarray, after_ts: np.ndarray, after_pair: np.ndarray, shown: list[NestedField],
              dropped_out: list[NestedField], change_col: str, ts_col: str, key: tuple[str, ...],
              ) -> tuple[pa.Table, dict[str, int]]:
    schema = _output_schema(shown, dropped_out, change_col, ts_col)
    before_type = np.full(len(removed), DELETE, object)
    before_type[before_pair] = UPDATE_BEFORE
    after_type = np.full(len(added), INSERT, object)
    after_type[after_pair] = UPDATE_AFTER
    b = rows1.take(pa.array(removed, pa.int64()))
    a = rows2.take(pa.array(added, pa.int64()))
    a = pa.Table.from_arrays([*a.columns, *(pa.nulls(a.num_rows, arrow_schema(Schema(f)).field(0).type) for f in dropped_out)],
                             schema=arrow_schema(Schema(*shown, *dropped_out)))
    b = b.select([f.name for f in [*shown, *dropped_out]])
    parts = [pa.Table.from_arrays([pa.array(before_type, pa.string()), pa.array(before_ts, pa.int64()), *b.columns], schema=schema),
             pa.Table.from_arrays([pa.array(after_type, pa.string()), pa.array(after_ts, pa.int64()), *a.columns], schema=schema)]
    table = pa.concat_tables(parts)
    # Each update's two images together, in key order, before images first; a key-less table's rows
    # in the order of their values: the same bytes whatever order the data files hold the rows in.
    # The sort's columns are a table of their own: an upstream column may have any name.
    by = list(key) or [f.name for f in shown]
    order = pa.table({**{f"c{i}": _comparable(table.column(c)) for i, c in enumerate(by)},
                      "side": np.concatenate([np.zeros(len(removed), np.int8), np.ones(len(added), np.int8)]),
                      "ts": np.concatenate([before_ts, after_ts]).astype(np.int64)})
    table = table.take(pc.sort_indices(order, sort_keys=[(c, "ascending") for c in order.column_names]))
    counts = {t: int(n) for t, n in zip(CHANGE_TYPES, (np.sum(after_type == INSERT), np.sum(before_type == DELETE),
                                                       len(before_pair), len(after_pair)))}
    return table, counts
