"""The change feed without before images (``read_changes(before_images=False)``): per key the
window touched, an ``upsert`` with its row at W2 or a ``delete`` with its key columns.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.schema import Schema
from pyiceberg.types import NestedField

from spark.core.key_match import key_matches, unmatched
from spark.core.watermark import tag_name
from spark.query.changes_ddl import TableDdl
from spark.query.changes_diff import DELETE, UPSERT, comparable, output_schema
from spark.query.changes_keys import TouchedKeys
from spark.query.changes_read import added_since, arrow_schema, read_rows
from spark.query.changes_removals import Removals
from spark.query.changes_ts import deleted_ts, fallback_ts, logged_ts
from spark.tables.updates import field_name, widened


def key_fields_at(key: tuple[str, ...], fields2: Mapping[str, NestedField], up1: list[NestedField],
                  same: bool) -> list[NestedField] | None:
    """W1's fields of W2's key columns, in the feed's types (by field id in the same table, else by
    name, ignoring case); None if one is not a column at W1, or of a type the feed's column does not hold
    (``changes._matched_by_name`` keeps such a column apart)."""
    ids1, names1 = {f.field_id for f in up1}, {f.name: f for f in up1}
    out = []
    for k in key:
        f = fields2[k]
        if same and f.field_id in ids1:
            out.append(f)
        elif not same and (k1 := field_name(names1, k)) is not None and widened(names1[k1].field_type, f.field_type):
            out.append(NestedField(names1[k1].field_id, k, f.field_type, required=False))
        else:
            return None
    return out


def after_images(t1: Any, t2: Any, w1: int, w2: int, key: tuple[str, ...], shown: list[NestedField],
                 dropped_out: list[NestedField], change_col: str, ts_col: str, commit_field: NestedField | None,
                 typed: TouchedKeys | None, keys_arg: pa.Table | None, w1_keys: list[NestedField],
                 ddl: TableDdl, removals: Removals) -> tuple[pa.Table, dict[str, int]]:
    """``read_changes(before_images=False)`` for one keyed table: ``upsert`` each touched key's row at
    W2 (every row, ``keys_arg`` None: a table the window changed wholesale), ``delete`` each touched
    key without one (wholesale: each key of W1, read alone, without one at W2)."""
    match = list(key)
    fallback = fallback_ts(ddl, w2)
    if t2 is not None:
        # Only files written after W1 can hold a touched key's row at W2 (its change came after W1):
        # not the files the table had at W1 (the same table, as ``keys_arg`` says, W1's snapshot an ancestor
        # of W2's: ``added_since``), whose manifests go unread.
        recent = (commit_field.field_id, w1) if keys_arg is not None and commit_field is not None else None
        since = added_since(t1, w1, t2, w2) if recent is not None else None
        rows2 = read_rows(t2, t2.snapshot_by_name(tag_name(w2)).snapshot_id, Schema(*shown, commit_field), match,
                          keys_arg, recent, added_after=since)
    else:
        rows2 = arrow_schema(Schema(*shown)).empty_table()
    after = rows2.select([f.name for f in shown])
    after_ts = np.zeros(after.num_rows, np.int64)
    if t2 is not None and after.num_rows:
        after_ts = pc.fill_null(rows2.column(commit_field.name), 0).to_numpy().astype(np.int64)  # type: ignore[union-attr]
    older = np.flatnonzero(after_ts <= w1)
    after_ts[older] = logged_ts(after, older, typed, match, fallback)[0]
    after_ts = np.maximum(after_ts, max([*ddl.filled, *ddl.arrived], default=0))
    if keys_arg is not None:  # the touched keys without a row at W2
        gone_keys = keys_arg.select(match)
        _, present = key_matches(after.select(match), gone_keys, match) if after.num_rows else (None, np.zeros(0, np.int64))
        gone = unmatched(gone_keys.num_rows, present)
        gone_ts = typed.ts[gone] if typed is not None else np.full(len(gone), fallback, np.int64)
    else:  # W1's keys (their columns alone) without a row at W2
        keys1 = read_rows(t1, t1.snapshot_by_name(tag_name(w1)).snapshot_id, Schema(*w1_keys)) if t1 is not None \
            else arrow_schema(Schema(*w1_keys)).empty_table()
        gone_keys = keys1.rename_columns(match)
        matched = key_matches(gone_keys, after.select(match), match)[0] if gone_keys.num_rows and after.num_rows \
            else np.zeros(0, np.int64)
        gone = unmatched(gone_keys.num_rows, matched)
        gone_ts = deleted_ts(gone_keys, gone, typed, match, fallback, removals, w1)
    schema = output_schema(shown, dropped_out, change_col, ts_col)
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
    order = pa.table({**{f"c{i}": comparable(table.column(k)) for i, k in enumerate(match)},
                      "side": np.concatenate([np.zeros(len(gone), np.int8), np.ones(after.num_rows, np.int8)])})
    table = table.take(pc.sort_indices(order, sort_keys=[(c, "ascending") for c in order.column_names]))
    return table, {UPSERT: after.num_rows, DELETE: len(gone)}

