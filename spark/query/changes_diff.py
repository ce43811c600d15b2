"""The change feed's rows: the change types, the output schema, and the difference that makes them.

Before and after images are compared as multisets of rows (``multiset_difference``): rows equal on
both sides are no change; of the rest, a key with one row on each side is an update
(``update_pairs``: its ``update_before`` and ``update_after``), the others deletes and inserts
(``assemble``).
"""

from __future__ import annotations

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.schema import Schema
from pyiceberg.types import NestedField

from spark.core.key_match import key_matches, unmatched
from spark.query.changes_read import arrow_schema

INSERT, DELETE, UPDATE_BEFORE, UPDATE_AFTER = "insert", "delete", "update_before", "update_after"
CHANGE_TYPES = (INSERT, DELETE, UPDATE_BEFORE, UPDATE_AFTER)
# Without before images (``before_images=False``): a touched key's row at W2, or its deletion (the
# key's columns, the others NULL). What a MERGE, a cache or a search index applies, idempotently.
UPSERT = "upsert"
AFTER_IMAGE_TYPES = (UPSERT, DELETE)
CHANGE_TYPE, COMMIT_TS = "_change_type", "_commit_ts"
_CHANGE_TYPE_TEXT = pa.array(CHANGE_TYPES, pa.string())


def output_schema(shown: list[NestedField], dropped_out: list[NestedField], change_col: str, ts_col: str) -> pa.Schema:
    """The change rows' columns: the change type, the commitTs, W2's columns, then the dropped ones."""
    columns = arrow_schema(Schema(*shown, *dropped_out))
    return pa.schema([pa.field(change_col, pa.string()), pa.field(ts_col, pa.int64()), *columns])


def multiset_difference(before: pa.Table, after: pa.Table, columns: list[str],
                        key: tuple[str, ...] = ()) -> tuple[np.ndarray, np.ndarray]:
    """Which rows of ``before`` are not in ``after`` and the other way round, as multisets of rows
    over ``columns``: (indices of ``before`` removed, indices of ``after`` added). Of k equal rows
    that lose n copies, the first n go; NULL equals NULL, NaN equals NaN.

    ``key`` (columns among ``columns``): a row can equal only rows of its key on the other side, so
    where each row has at most one (a keyed table's images), the pairs are compared instead of
    sorting every row; else every row is compared as a multiset."""
    n1, n2 = before.num_rows, after.num_rows
    if n1 + n2 == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if key and n1 and n2:
        pairs = _keyed_difference(before, after, columns, key)
        if pairs is not None:
            return pairs
    both = pa.table({f"c{i}": comparable(pa.chunked_array([*before.column(c).chunks, *after.column(c).chunks],
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


def _keyed_difference(before: pa.Table, after: pa.Table, columns: list[str],
                      key: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray] | None:
    """``multiset_difference`` where no row meets two of the other side's by ``key``; None where one does.
    (Rows of one side sharing a key, met by none of the other's, go either way.) None too where a
    FLOAT or DOUBLE key part holds NaN: the multiset has NaN equal NaN, the key's hash join only NaN
    of the same bits."""
    for k in key:
        for side in (before, after):
            column = side.column(k)
            if pa.types.is_floating(column.type) and pc.any(pc.is_nan(column)).as_py():
                return None
    row, other = key_matches(before.select(list(key)), after.select(list(key)), list(key))
    if (np.bincount(row, minlength=before.num_rows) > 1).any() or (np.bincount(other, minlength=after.num_rows) > 1).any():
        return None
    equal = np.ones(len(row), bool)
    for c in columns:
        if not equal.any():
            break
        equal &= _same(comparable(before.column(c).take(pa.array(row))), comparable(after.column(c).take(pa.array(other))))
    return unmatched(before.num_rows, row[equal]), unmatched(after.num_rows, other[equal])


def _first_copies(group: np.ndarray, excess: np.ndarray) -> np.ndarray:
    """Indices of the first ``excess[g]`` rows of each group g (in index order)."""
    order = np.argsort(group, kind="stable")
    ordered = group[order]
    rank = np.arange(len(order)) - np.searchsorted(ordered, ordered, "left")
    return np.sort(order[rank < excess[ordered]]).astype(np.int64)


def comparable(column: pa.ChunkedArray) -> pa.Array:
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


def update_pairs(removed: pa.Table, added: pa.Table, key: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(positions in ``removed``, positions in ``added``) of rows sharing a key with exactly one row
    on each side: an update's before and after images."""
    if not key or not removed.num_rows or not added.num_rows:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    row, other = key_matches(removed.select(list(key)), added.select(list(key)), list(key))
    once = (np.bincount(row, minlength=removed.num_rows)[row] == 1) & (np.bincount(other, minlength=added.num_rows)[other] == 1)
    return row[once], other[once]


def assemble(rows1: pa.Table, removed: np.ndarray, before_ts: np.ndarray, before_pair: np.ndarray, rows2: pa.Table,
             added: np.ndarray, after_ts: np.ndarray, after_pair: np.ndarray, shown: list[NestedField],
             dropped_out: list[NestedField], change_col: str, ts_col: str, key: tuple[str, ...],
             ) -> tuple[pa.Table, dict[str, int]]:
    """The change rows of one table: the rows ``removed`` of ``rows1`` (``delete``, or ``update_before``
    at ``before_pair``) and ``added`` of ``rows2`` (``insert``, or ``update_after`` at ``after_pair``),
    with their commitTs, in key order; and the rows per change type."""
    schema = output_schema(shown, dropped_out, change_col, ts_col)
    before_type = np.full(len(removed), CHANGE_TYPES.index(DELETE), np.int8)  # codes: CHANGE_TYPES' positions
    before_type[before_pair] = CHANGE_TYPES.index(UPDATE_BEFORE)
    after_type = np.full(len(added), CHANGE_TYPES.index(INSERT), np.int8)
    after_type[after_pair] = CHANGE_TYPES.index(UPDATE_AFTER)
    b = rows1.take(pa.array(removed, pa.int64()))
    a = rows2.take(pa.array(added, pa.int64()))
    a = pa.Table.from_arrays([*a.columns, *(pa.nulls(a.num_rows, arrow_schema(Schema(f)).field(0).type) for f in dropped_out)],
                             schema=arrow_schema(Schema(*shown, *dropped_out)))
    b = b.select([f.name for f in [*shown, *dropped_out]])
    parts = [pa.Table.from_arrays([_CHANGE_TYPE_TEXT.take(before_type), pa.array(before_ts, pa.int64()), *b.columns], schema=schema),
             pa.Table.from_arrays([_CHANGE_TYPE_TEXT.take(after_type), pa.array(after_ts, pa.int64()), *a.columns], schema=schema)]
    table = pa.concat_tables(parts)
    # Each update's two images together, in key order, before images first; a key-less table's rows
    # in the order of their values: the same bytes whatever order the data files hold the rows in.
    # The sort's columns are a table of their own: an upstream column may have any name.
    by = list(key) or [f.name for f in shown]
    order = pa.table({**{f"c{i}": comparable(table.column(c)) for i, c in enumerate(by)},
                      "side": np.concatenate([np.zeros(len(removed), np.int8), np.ones(len(added), np.int8)]),
                      "ts": np.concatenate([before_ts, after_ts]).astype(np.int64)})
    table = table.take(pc.sort_indices(order, sort_keys=[(c, "ascending") for c in order.column_names]))
    counts = {t: int(n) for t, n in zip(CHANGE_TYPES, np.bincount(before_type, minlength=len(CHANGE_TYPES))
                                                      + np.bincount(after_type, minlength=len(CHANGE_TYPES)))}
    return table, counts

