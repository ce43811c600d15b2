"""Which rows carry one of a set of keys: vectorised, NULL-safe, for one or many key columns.

A key is one column or several (a composite primary key; every column of a key-less table).
Key parts may be NULL (key-less tables), and a NULL part matches a NULL part, as upstream
equality of whole rows does. Touched keys are cast to the rows' column types first, so keys
decoded as int64 match an int32 column. Values compare as MySQL (and the fold's
``net_change.key_bytes``) compare them: ``-0.0`` equals ``0.0`` in a FLOAT or DOUBLE key, so
the row a key's net change replaces is found whichever zero either side holds.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cdc_codecs import TidelakeError


class KeyColumnsMissing(TidelakeError):
    """Rows or touched keys lack a key column."""


def _column(table: pa.Table, name: str, where: str) -> pa.Array:
    if name not in table.column_names:
        raise KeyColumnsMissing(f"{where}: no key column {name!r} (columns: {', '.join(table.column_names)})")
    return table.column(name).combine_chunks()


def key_mask(rows: pa.Table, touched: pa.Table, key_columns: Sequence[str]) -> pa.BooleanArray:
    """True for each row of ``rows`` whose key (``key_columns``) is one of ``touched``'s rows."""
    if not key_columns:
        raise KeyColumnsMissing("key_mask: no key columns")
    left = [_comparable(_column(rows, k, "rows")) for k in key_columns]
    right = [_comparable(_column(touched, k, "touched keys").cast(col.type)) for k, col in zip(key_columns, left)]
    if rows.num_rows == 0 or touched.num_rows == 0:
        return pa.array(np.zeros(rows.num_rows, dtype=bool))
    if len(key_columns) == 1:
        ascending = _ascending_integers(left[0])
        if ascending is not None:
            return pa.array(_sorted_mask(ascending, right[0]))
        return pc.is_in(left[0], value_set=right[0], skip_nulls=False)
    left_cols, right_cols = _joinable(left, right)
    join_keys = list(left_cols)
    left_cols["row"] = pa.array(np.arange(rows.num_rows, dtype=np.int64))
    right_keys = pa.table(right_cols).group_by(join_keys).aggregate([])  # distinct keys
    hits = pa.table(left_cols).join(right_keys, keys=join_keys, join_type="left semi").column("row")
    mask = np.zeros(rows.num_rows, dtype=bool)
    mask[hits.to_numpy()] = True
    return pa.array(mask)


def key_matches(rows: pa.Table, touched: pa.Table, key_columns: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Which row of ``rows`` carries which of ``touched``'s keys: parallel arrays (row, touched
    row), sorted by touched row, then row. Equal touched keys each match every such row."""
    if not key_columns:
        raise KeyColumnsMissing("key_matches: no key columns")
    left = [_comparable(_column(rows, k, "rows")) for k in key_columns]
    right = [_comparable(_column(touched, k, "touched keys").cast(col.type)) for k, col in zip(key_columns, left)]
    if rows.num_rows == 0 or touched.num_rows == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    if len(left) == 1 and _hashable(left[0].type) and pc.count_distinct(right[0], mode="all").as_py() == len(right[0]):
        # One key column, each touched key once (the fold's output): a hash lookup per row, no join.
        found = pc.index_in(left[0], value_set=right[0], skip_nulls=False)
        row = np.flatnonzero(found.is_valid().to_numpy(zero_copy_only=False))
        hit = pc.drop_null(found).to_numpy().astype(np.int64)
        order = np.argsort(hit, kind="stable")  # by touched row, then row (rows ascend already)
        return row[order], hit[order]
    left_cols, right_cols = _joinable(left, right)
    join_keys = list(left_cols)
    left_cols["row"] = pa.array(np.arange(rows.num_rows, dtype=np.int64))
    right_cols["touched"] = pa.array(np.arange(touched.num_rows, dtype=np.int64))
    pairs = pa.table(left_cols).join(pa.table(right_cols), keys=join_keys, join_type="inner") \
        .select(["touched", "row"]).sort_by([("touched", "ascending"), ("row", "ascending")])
    return pairs.column("row").to_numpy(), pairs.column("touched").to_numpy()


def ascending_unique(positions: np.ndarray) -> np.ndarray:
    """``positions`` ascending, each once: as given when already so (a delete file tidelake wrote),
    else sorted -- a stable sort merges ascending runs (two delete files, or old and new positions)
    in one pass. Not ``np.unique``: its hash-based path (numpy 2) takes ~40 ms for 200k positions
    that a check or a merge does in well under 1."""
    if len(positions) < 2 or bool(np.all(positions[1:] > positions[:-1])):
        return positions
    ordered = np.sort(positions, kind="stable")
    return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))]


def _ascending_integers(column: pa.Array) -> np.ndarray | None:
    """An integer column without NULLs whose values never decrease, as numpy; else None.

    tidelake writes every data file sorted by key (``rewrite.write_rows``), so a file's key
    column usually is: its touched rows are then found by binary search, ~3 ms a million rows
    against ~18 for a hash lookup of every row (``pc.is_in``), which a uniform batch pays over
    every file of the table. Checking the order costs one pass (~0.5 ms), cheaper than the lookup."""
    if not pa.types.is_integer(column.type) or column.null_count:
        return None
    values = column.to_numpy()
    return values if len(values) < 2 or bool(np.all(values[1:] >= values[:-1])) else None


def _sorted_mask(values: np.ndarray, touched: pa.Array) -> np.ndarray:
    """The rows of ascending ``values`` equal to one of ``touched`` (a NULL touched key matches no row)."""
    keys = pc.drop_null(touched).to_numpy()
    first, end = np.searchsorted(values, keys, "left"), np.searchsorted(values, keys, "right")
    if np.all(end - first <= 1):  # each key on one row at most (a key column): mark those rows
        mask = np.zeros(len(values), dtype=bool)
        mask[first[end > first]] = True
        return mask
    # Each touched key marks its run of equal rows [first, end): +1 where a run starts, -1 after it ends.
    edges = np.zeros(len(values) + 1, dtype=np.int64)
    np.add.at(edges, first, 1)
    np.add.at(edges, end, -1)
    return np.cumsum(edges[:-1]) > 0


def unmatched(n: int, matched: np.ndarray) -> np.ndarray:
    """The positions of ``0..n-1`` not in ``matched``, ascending (``np.setdiff1d`` of a range, by a
    mask instead of sorting both sides)."""
    mask = np.ones(n, dtype=bool)
    mask[matched] = False
    return np.flatnonzero(mask)


def _hashable(kind: pa.DataType) -> bool:
    """Types whose values Arrow's hash lookup (``index_in``) tells apart exactly as upstream equality does."""
    return pa.types.is_integer(kind) or pa.types.is_string(kind) or pa.types.is_large_string(kind) \
        or pa.types.is_binary(kind) or pa.types.is_large_binary(kind)


def _joinable(left: list[pa.Array], right: list[pa.Array]) -> tuple[dict[str, pa.Array], dict[str, pa.Array]]:
    """Join columns for key columns ``left`` and ``right``. Arrow's hash join never matches NULL
    keys: join on (value or a filler, is-NULL) pairs instead."""
    left_cols: dict[str, pa.Array] = {}
    right_cols: dict[str, pa.Array] = {}
    for i, (lcol, rcol) in enumerate(zip(left, right)):
        filler = _any_value(lcol, rcol)
        if filler is not None:
            left_cols[f"v{i}"] = pc.coalesce(lcol, filler)
            right_cols[f"v{i}"] = pc.coalesce(rcol, filler)
        left_cols[f"n{i}"] = pc.is_null(lcol)
        right_cols[f"n{i}"] = pc.is_null(rcol)
    return left_cols, right_cols


def _comparable(column: pa.Array) -> pa.Array:
    """The column with ``-0.0`` as ``0.0`` (IEEE: -0.0 + 0.0 is +0.0); Arrow's hash kernels tell them apart."""
    if pa.types.is_floating(column.type):
        return pc.add(column, pa.scalar(0, column.type))
    return column


def _any_value(*columns: pa.Array) -> pa.Scalar | None:
    """A non-NULL value of the columns' type, to stand in for NULLs; None if all are NULL."""
    for col in columns:
        values = pc.drop_null(col)
        if len(values):
            return values[0]
    return None
