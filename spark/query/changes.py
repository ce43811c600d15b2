"""The change feed: the net changes of every table between two published watermarks (contract §8).

``read_changes(config, W1, W2)`` gives, per upstream table, an Arrow table of what turns the
table at W1 into the table at W2: one row per row that differs, with ``_change_type``
(``insert``, ``delete``, ``update_before``, ``update_after``, the names Spark's and Delta's change
views use), ``_commit_ts`` (the commitTs of the last change to that key in the window) and the
row's columns. Every table's changes span the same two published Ws, so the changes of
``orders`` and ``order_items`` never show half a transaction.

How (cost grows with the keys the window changed, not with the tables' sizes):

1. The keys: the window's runs and their change log (``spark.query.changes_log``): the rows each run
   applied, folded by the one fold rule (``net_change.greatest``) into the last change per key, in
   the table's own types (``spark.query.changes_keys``); and what the window's DDL did to each
   table (``spark.query.changes_ddl``).
2. The images: the rows of those keys only, read at tag ``wm_<W1>`` (before) and ``wm_<W2>``
   (after) with the key-bounded file planning (``spark.query.changes_read``).
3. The difference (``spark.query.changes_diff``): before and after compared as multisets of rows
   in W2's columns, each change row dated by ``spark.query.changes_ts``; rows equal on
   both sides are no change (a key changed and changed back has no row), a key with one row on
   each side that differs is an ``update_before``/``update_after`` pair, the rest are deletes and
   inserts. A key-less table is a multiset: a row held n times more (or fewer) at W2 is n inserts
   (deletes). Without before images, ``spark.query.changes_after`` instead.

Tables are matched by upstream name: ``db.t``'s changes turn ``db.t`` at W1 into ``db.t`` at W2.
A table is read whole on both sides (and its changes are still only the rows that differ) when the
window changed more than its rows: created, dropped, renamed or replaced (a name held by another
table at W2: gh-ost's cut-over), truncated (TABLE or PARTITION), its key changed, a key column
renamed, dropped or retyped, a column added with a value for the existing rows (``DEFAULT``, or
NOT NULL), a column of a key-less table changed, a DDL of it tidelake cannot parse. Its columns
are those of W2; a column dropped in the window is kept in the before images (``delete``,
``update_before``) and NULL in the after images, and rows are compared on W2's columns only.
Another table under the name at W1 (made anew, renamed onto it) has its columns matched by name,
every W1 value kept as it was (``_matched_by_name``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.schema import Schema
from pyiceberg.types import NestedField

from spark.archive.storage import Storage, open_storage
from spark.config import PipelineConfig
from spark.core.watermark import tag_name, watermark_time
from spark.query import read as query
from spark.query.changes_after import after_images, key_fields_at
from spark.query.changes_ddl import ANOTHER_TABLE, EVERY_ROW, NEW_TABLE, TableDdl, TableRef, ddl_by_table
from spark.query.changes_diff import (
    AFTER_IMAGE_TYPES,
    CHANGE_TYPE,
    CHANGE_TYPES,
    COMMIT_TS,
    DELETE,
    INSERT,
    UPDATE_AFTER,
    UPDATE_BEFORE,
    UPSERT,
    assemble,
    multiset_difference,
    output_schema,
    update_pairs,
)
from spark.query.changes_keys import typed_keys
from spark.query.changes_log import ChangesError, ChangesNeedDecoding, ChangesUnavailable, Window, open_window
from spark.query.changes_read import added_since, arrow_schema, read_rows
from spark.query.changes_removals import Removals, removals
from spark.query.changes_ts import image_ts
from spark.query.names import QueryError
from spark.tables import catalog as cat
from spark.tables.properties import upstream_schema_at
from spark.tables.schema_map import metadata_columns
from spark.tables.updates import field_name, widened

__all__ = ["AFTER_IMAGE_TYPES", "CHANGE_TYPES", "DELETE", "INSERT", "KEYS", "NOTHING", "UPDATE_AFTER", "UPDATE_BEFORE",
           "UPSERT", "WHOLE", "ChangeSet", "ChangesError", "ChangesNeedDecoding", "ChangesRequestError",
           "ChangesUnavailable", "TableChanges", "multiset_difference", "read_changes"]


class ChangesRequestError(ChangesError, QueryError):
    """The request is wrong: ``from_w`` after ``to_w``, or a table the pipeline does not have."""


KEYS, WHOLE, NOTHING = "keys", "whole", "nothing"  # how a table's images were read


@dataclass(frozen=True)
class TableChanges:
    """What ``read_changes`` did for one table."""

    database: str
    table: str
    read: str  # KEYS: the touched keys' rows only; WHOLE: every row at both Ws; NOTHING: no change in the window
    reason: str | None  # why WHOLE; and why a removed row's _commit_ts may not be the removal that took it
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
    by_table, by_database, everywhere = ddl_by_table(window, config) if window is not None else ({}, {}, [])
    progress("change log", 1, 1)
    progress("tables", 0, len(names))
    for i, name in enumerate(sorted(names)):
        ddl = by_table.get(name, TableDdl())
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


def _recreated(ddl: TableDdl) -> bool:
    """Whether the window made a new table under the name: a CREATE TABLE, or a DDL that took the
    name after a DROP (or a rename away) emptied it. W1's and W2's tables are then two tables, their
    columns matched by name, even where tidelake kept one Iceberg table (and its uuid) for both: by
    field id, W1's ``id`` was a dropped column whose name W2's new ``id`` held, and every before
    image carried it renamed (the model-based test found it: a gh-ost cut-over's sentry table)."""
    emptied = False
    for _, step, _ in ddl.steps:
        if step == NEW_TABLE or (step == ANOTHER_TABLE and emptied):
            return True
        emptied = emptied or step == EVERY_ROW
    return False


def _upstream(view: query.View, name: TableRef) -> tuple[Schema, list[NestedField], NestedField]:
    """The table's schema at the view's W, its upstream fields, and its commitTs field."""
    schema = view.schema(name, metadata=True)
    meta = metadata_columns(schema, view.tables[name].properties)
    upstream = [f for f in schema.fields if f.name not in meta.names]
    commit = next(f for f in schema.fields if f.name == meta.commit_ts)
    return schema, upstream, commit


def _table_changes(name: TableRef, before: query.View, after: query.View, touched: pa.Table | None, ddl: TableDdl,
                   everywhere: list[str], window: Window | None, before_images: bool = True,
                   ) -> tuple[pa.Table, TableChanges]:
    t1, t2 = before.tables.get(name), after.tables.get(name)
    w1, w2 = before.watermark, after.watermark
    same = (t1 is not None and t2 is not None and t1.metadata.table_uuid == t2.metadata.table_uuid
            and not _recreated(ddl))
    up1 = _upstream(before, name)[1] if t1 is not None else []
    if t2 is not None:
        _, up2, commit_field = _upstream(after, name)
        shown = up2
    else:
        up2, commit_field, shown = [], None, up1
    taken = {f.name.casefold() for f in [*up1, *up2]}
    change_col, ts_col = _free(CHANGE_TYPE, taken), _free(COMMIT_TS, taken)
    retyped: list[str] = []  # what the reason says of columns matched by name whose types differ
    sources: list[str | None] = [f.name for f in shown]  # the W1 column of each shown one (``_by_name``)
    if same:
        ids2 = {f.field_id for f in up2}
        dropped = [f for f in up1 if f.field_id not in ids2]
    elif t2 is not None:
        shown, sources, dropped, retyped = _matched_by_name(up1, up2)
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
        reasons += retyped
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
    typed = typed_keys(touched, Schema(*[fields2[m] for m in match]), upstream_types, bool(key)) if keys_touched else None
    if typed is None and not reasons:
        reasons.append("a touched key's values do not fit the table's columns")
    whole = bool(reasons)
    if not before_images and key:
        w1_keys = key_fields_at(key, fields2, up1, same) if whole and t1 is not None else []
        if not whole or t1 is None or w1_keys is not None:
            gone = _removals(ddl, t1, w1, key, (t2 or t1).properties, w2)  # type: ignore[union-attr]
            table, counts = after_images(t1, t2, w1, w2, key, shown, dropped_out, change_col, ts_col, commit_field,
                                         typed, None if whole else typed.keys, w1_keys, ddl, gone)  # type: ignore[union-attr]
            _inexact(reasons, gone)
            return table, TableChanges(*name, WHOLE if whole else KEYS, "; ".join(dict.fromkeys(reasons)) or None,
                                       keys_touched, counts, change_col, ts_col, tuple(f.name for f in dropped_out))

    # The images: W1's rows in W2's columns (+ the dropped ones), W2's rows with their commitTs.
    read1 = Schema(*shown, *dropped_out) if same else Schema(*up1)
    read2 = Schema(*shown, commit_field) if t2 is not None else None  # W2's columns, some widened to W1's types
    keys_arg = None if whole else typed.keys  # type: ignore[union-attr]
    manifests: dict[str, list] = {}  # read whole, W1 and W2 share most manifests: each read once
    if t1 is None:
        rows1 = arrow_schema(Schema(*shown, *dropped_out)).empty_table()
    else:
        rows1 = read_rows(t1, t1.snapshot_by_name(tag_name(w1)).snapshot_id, read1, match, keys_arg,
                          manifests_read=manifests)
        if not same:
            rows1 = _by_name(rows1, shown, sources, dropped, dropped_out)
    # A touched key's row at W2 was written in the window (its change was applied after W1, with
    # its commitTs): files whose commitTs bound is at most W1 hold none of them. Not so for a
    # key-less table's copies, nor for rows a DDL changed (read whole anyway).
    # Nor can files the table had at W1 (the same table: ``whole`` otherwise; its W1 snapshot an ancestor
    # of its W2 one, which a repaired tag's is not): their manifests go unread.
    recent = (commit_field.field_id, w1) if key and not whole and commit_field is not None else None
    since = added_since(t1, w1, t2, w2) if recent is not None else None
    rows2 = read_rows(t2, t2.snapshot_by_name(tag_name(w2)).snapshot_id, read2, match, keys_arg, recent, manifests, since) \
        if t2 is not None else None
    if rows2 is not None and rows2.num_rows:
        # Newest first: of a key-less table's equal rows, the copies the window added are its newest
        # (``multiset_difference`` takes the first), whatever order the files hold them in.
        own = pc.fill_null(rows2.column(commit_field.name), 0).to_numpy()  # type: ignore[union-attr]
        rows2 = rows2.take(pa.array(np.argsort(-own, kind="stable")))
    after_rows = rows2.select([f.name for f in shown]) if rows2 is not None else arrow_schema(Schema(*shown)).empty_table()
    compare = [f.name for f in shown]
    pair_key = key if key and all(k in compare for k in key) else ()
    removed, added = multiset_difference(rows1.select(compare), after_rows, compare, pair_key)
    pairs = update_pairs(rows1.take(pa.array(removed, pa.int64())), after_rows.take(pa.array(added, pa.int64())), pair_key)

    # _commit_ts (``spark.query.changes_ts``): an after image's own when the window wrote it.
    before_pair, after_pair = pairs
    own_ts = np.zeros(len(added), np.int64)
    if rows2 is not None and len(added):
        own = pc.fill_null(rows2.column(commit_field.name).take(pa.array(added, pa.int64())), 0)  # type: ignore[union-attr]
        own_ts = own.to_numpy().astype(np.int64)
    gone = _removals(ddl, t1, w1, rows1.column_names, (t2 or t1).properties, w2)  # type: ignore[union-attr]
    before_ts, after_ts = image_ts(rows1, removed, before_pair, after_rows, added, after_pair, own_ts, typed, match,
                                   ddl, gone, w1, w2)
    _inexact(reasons, gone)

    table, counts = assemble(rows1, removed, before_ts, before_pair, after_rows, added, after_ts, after_pair, shown,
                             dropped_out, change_col, ts_col, pair_key)
    details = TableChanges(*name, WHOLE if whole else KEYS, "; ".join(dict.fromkeys(reasons)) or None, keys_touched, counts,
                           change_col, ts_col, tuple(f.name for f in dropped_out))
    return table, details


def _removals(ddl: TableDdl, t1: Any, w1: int, fields: list[str], properties2: dict[str, str], w2: int) -> Removals:
    """The window's removals from the table, over W1's rows in W2's column names (``fields``): the
    upstream types of W1, and W2's for a column W1 did not have."""
    if not ddl.removed:
        return Removals()
    types = {**upstream_schema_at(properties2, w2)[1], **(upstream_schema_at(t1.properties, w1)[1] if t1 is not None else {})}
    return removals(ddl, t1.properties if t1 is not None else None, w1, fields, types)


def _inexact(reasons: list[str], gone: Removals) -> None:
    """Say where the ``_commit_ts`` of a row a DDL removed is the first removal after its last write,
    not necessarily the one that took it (``Removals.inexact``)."""
    if gone.inexact is not None:
        reasons.append(f"_commit_ts of a removed row: the first removal after its last write, which may not be the "
                       f"one that took it ({gone.inexact})")


def _matched_by_name(up1: list[NestedField], up2: list[NestedField],
                     ) -> tuple[list[NestedField], list[str | None], list[NestedField], list[str]]:
    """For another table under the name at W1 (made anew in the window, or renamed onto it), columns
    matched by name as MySQL matches them (ignoring case, ``field_name``): W2's fields as the feed
    shows them, the W1 column each one takes its W1 values from (None: NULL in W1's rows), W1's
    fields kept apart (as dropped ones are), and what the reason says of the columns whose types
    differ. Every W1 value stays as it was: a column takes the wider of its two types where one
    holds every value of the other (``widened``: Iceberg's promotions; a BIGINT id of W1 in W2's
    INT would not fit); where neither does (a VARCHAR made an INT), W1's column is kept apart."""
    fields1 = {f.name: f for f in up1}
    shown, sources, notes = [], [], []
    for f in up2:
        name1 = field_name(fields1, f.name)
        f1 = fields1[name1] if name1 is not None else None
        if f1 is not None and not widened(f1.field_type, f.field_type):
            if widened(f.field_type, f1.field_type):
                notes.append(f"column {f.name!r} is {f1.field_type} at W1 and {f.field_type} at W2: shown as {f1.field_type}")
                f = NestedField(f.field_id, f.name, f1.field_type, required=f.required, doc=f.doc)
            else:
                notes.append(f"column {f.name!r} is {f1.field_type} at W1 and {f.field_type} at W2: W1's values are "
                             f"kept apart, as a dropped column's")
                name1 = None
        shown.append(f)
        sources.append(name1)
    return shown, sources, [f for f in up1 if f.name not in sources], notes


def _by_name(rows: pa.Table, shown: list[NestedField], sources: list[str | None], dropped: list[NestedField],
             dropped_out: list[NestedField]) -> pa.Table:
    """Rows of another table (the one a name held at W1) in W2's columns, each from its W1 column of
    ``sources`` (``_matched_by_name``: a cast to the same or a wider type, exact), then the dropped ones."""
    out = arrow_schema(Schema(*shown, *dropped_out))
    columns = [rows.column(name).cast(target.type) if name is not None else pa.nulls(rows.num_rows, target.type)
               for name, target in zip([*sources, *(f.name for f in dropped)], out)]
    return pa.Table.from_arrays(columns, schema=out)


def _empty(shown: list[NestedField], dropped_out: list[NestedField], change_col: str, ts_col: str) -> pa.Table:
    return output_schema(shown, dropped_out, change_col, ts_col).empty_table()
