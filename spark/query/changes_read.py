"""Rows of a table at one snapshot: all of them, or only those of some keys (the change feed's images).

``read_rows`` projects every data file onto a given Iceberg schema by field id (columns renamed,
widened or added since a file was written read as the table reads them; a column the file lacks
is NULL) and applies the file's position deletes.

With touched keys it reads only what can hold them: the files the key-bounded plan keeps
(``spark.tables.files.key_file_pairs``: key bounds and partition values of each file), in each of those
the row groups whose key statistics meet a key, of those the key columns first, and the other
columns only of the row groups where a touched key is live (a lone row group is read whole at once). Files are written sorted by key, so
the keys a window changes find their rows in few row groups when the changes are clustered
(recent rows, a key range); keys spread over the whole key space meet every row group, and then
every row group is read (Parquet is read by column chunk, not by row).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.conversions import from_bytes
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.manifest import DataFile
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import LongType

from spark.tables import internals
from spark.tables.files import key_file_pairs, live_files
from spark.core.key_match import key_mask
from spark.core.watermark import tag_name

_THREADS = 4
_POOL = ThreadPoolExecutor(max_workers=_THREADS, thread_name_prefix="tidelake-changes-read")


def arrow_schema(schema: Schema) -> pa.Schema:
    return schema_to_pyarrow(schema, include_field_ids=False)


def added_since(t1: Table, w1: int, t2: Table, w2: int) -> int | None:
    """The sequence number of W1's tag snapshot if it is an ancestor of W2's (``read_rows``'
    ``added_after`` for the W2 read: what the table had at W1 holds no row written after it); None if
    not, or if an expired snapshot between them hides it. Repair tags W on a snapshot of its own,
    made after a later W2's on a branch: its sequence number tells nothing of W2's files."""
    first = t1.snapshot_by_name(tag_name(w1))
    snapshot = t2.snapshot_by_name(tag_name(w2))
    if first is None:
        return None
    while snapshot is not None and snapshot.sequence_number >= first.sequence_number:
        if snapshot.snapshot_id == first.snapshot_id:
            return first.sequence_number
        parent = snapshot.parent_snapshot_id
        snapshot = t2.metadata.snapshot_by_id(parent) if parent is not None else None
    return None


def read_rows(table: Table, snapshot_id: int, schema: Schema, match: Sequence[str] = (),
              touched: pa.Table | None = None, newer_than: tuple[int, int] | None = None,
              manifests_read: dict[str, list] | None = None, added_after: int | None = None) -> pa.Table:
    """The rows of ``table`` at snapshot ``snapshot_id`` in ``schema``'s columns (by field id);
    with ``touched``, only those whose ``match`` columns equal one of its rows (NULL equals NULL).

    ``match`` names columns of the snapshot's own schema (and of ``schema``); ``touched`` has one
    column per ``match`` column. ``newer_than`` (field id, value): leave out the files whose
    upper bound of that long column is at most the value (the caller knows no row it wants is).
    ``manifests_read``: manifests read before, shared between the reads of one table's two Ws;
    ``added_after``: only the files added after this sequence number (``spark.tables.files.live_files``)."""
    metadata, io = table.metadata, table.io
    snapshot = metadata.snapshot_by_id(snapshot_id)
    out_schema = arrow_schema(schema)
    if snapshot is None or (touched is not None and touched.num_rows == 0):
        return out_schema.empty_table()
    live = live_files(io, snapshot, manifests_read, added_after)
    files = list(live.data)
    if newer_than is not None:
        field_id, value = newer_than
        files = [f for f in files if (bound := (f.upper_bounds or {}).get(field_id)) is None
                 or from_bytes(LongType(), bound) > value]
    if touched is not None and files:
        # The plan reads key columns by their names at the snapshot: its schema, not today's.
        at = metadata.model_copy(update={"current_schema_id": snapshot.schema_id}) \
            if snapshot.schema_id is not None else metadata
        _, hit = key_file_pairs(at, list(match), touched, files)
        files = [files[i] for i in np.flatnonzero(np.bincount(hit, minlength=len(files)))]
    if not files:
        return out_schema.empty_table()
    parts = list(_POOL.map(lambda f: _read_file(io, f, live.deletes_of(f), schema, out_schema, match, touched), files))
    return pa.concat_tables(parts)


def _read_file(io: FileIO, data_file: DataFile, deletes: Sequence[DataFile], schema: Schema, out_schema: pa.Schema,
               match: Sequence[str], touched: pa.Table | None) -> pa.Table:
    with io.new_input(data_file.file_path).open() as stream:
        source = pq.ParquetFile(stream)
        by_id = _columns_by_field_id(source.schema_arrow)
        sizes = [source.metadata.row_group(i).num_rows for i in range(source.num_row_groups)]
        starts = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
        deleted = internals.deleted_positions(io, data_file, deletes) if deletes else np.zeros(0, np.int64)
        groups = list(range(source.num_row_groups))
        wanted = None
        if touched is None:
            rows = source.read_row_groups(groups, columns=_names(by_id, schema))
        else:
            fields = {f.name: f for f in schema.fields}
            key_schema = Schema(*[fields[m] for m in match])
            groups = _groups_meeting(source, by_id, key_schema.fields[0], touched.column(match[0]), groups)
            if not groups:
                return out_schema.empty_table()
            # One row group to look in: its other columns are read with the keys (reading the keys
            # first saves a read only when the group holds no touched key, which its statistics
            # just said it may).
            first = source.read_row_groups(groups, columns=_names(by_id, schema if len(groups) == 1 else key_schema))
            keys = _project(first, key_schema, by_id)
            positions = _positions(groups, starts, sizes)
            live = _outside(positions, deleted)
            keys, positions = keys.filter(pa.array(live)), positions[live]
            wanted = positions[key_mask(keys, touched.select(list(match)), list(match)).to_numpy(zero_copy_only=False)]
            if not len(wanted):
                return out_schema.empty_table()
            if len(groups) == 1:
                rows = first
            else:
                groups = sorted({int(g) for g in np.searchsorted(starts, wanted, "right") - 1})
                rows = source.read_row_groups(groups, columns=_names(by_id, schema))
    positions = _positions(groups, starts, sizes)
    if wanted is not None:  # ascending, and each one of ``positions``
        rows = rows.take(pa.array(np.searchsorted(positions, wanted), pa.int64()))
    elif len(deleted):
        rows = rows.filter(pa.array(_outside(positions, deleted)))
    return _project(rows, schema, by_id).cast(out_schema)


def _columns_by_field_id(arrow: pa.Schema) -> dict[int, str]:
    out = {}
    for f in arrow:
        field_id = (f.metadata or {}).get(b"PARQUET:field_id")
        if field_id is not None:
            out[int(field_id)] = f.name
    return out


def _names(by_id: dict[int, str], schema: Schema) -> list[str]:
    return [by_id[f.field_id] for f in schema.fields if f.field_id in by_id]


def _positions(groups: Sequence[int], starts: np.ndarray, sizes: Sequence[int]) -> np.ndarray:
    if not groups:
        return np.zeros(0, np.int64)
    return np.concatenate([np.arange(starts[g], starts[g] + sizes[g], dtype=np.int64) for g in groups])


def _outside(positions: np.ndarray, deleted: np.ndarray) -> np.ndarray:
    """True for each of ``positions`` (ascending, unique) not in ``deleted`` (ascending, unique):
    ``~np.isin`` by a binary search of the few deleted, not a sort of every position."""
    out = np.ones(len(positions), dtype=bool)
    if len(deleted) and len(positions):
        at = np.searchsorted(positions, deleted)
        inside = at < len(positions)
        at = at[inside]
        out[at[positions[at] == deleted[inside]]] = False
    return out


def _project(rows: pa.Table, schema: Schema, by_id: dict[int, str]) -> pa.Table:
    """``rows`` (a data file's columns) as ``schema``'s columns: matched by field id, cast to the
    schema's types (widened), NULL where the file has no such column."""
    target = arrow_schema(schema)
    columns = []
    for f, t in zip(schema.fields, target):
        name = by_id.get(f.field_id)
        columns.append(rows.column(name).cast(t.type) if name is not None else pa.nulls(rows.num_rows, t.type))
    return pa.Table.from_arrays(columns, schema=target)


def _groups_meeting(source: pq.ParquetFile, by_id: dict[int, str], key_field: object, keys: pa.ChunkedArray,
                    groups: list[int]) -> list[int]:
    """The row groups whose statistics of the first key column admit one of ``keys`` (all of them
    where statistics are missing, or the column is not an integer or string)."""
    name = by_id.get(key_field.field_id)  # type: ignore[attr-defined]
    if name is None:
        return groups if keys.null_count else []  # the file predates the column: every row holds NULL there
    column = next((i for i in range(source.metadata.num_columns) if source.metadata.schema.column(i).path == name), None)
    kind = source.schema_arrow.field(name).type
    if column is None or not (pa.types.is_integer(kind) or pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        return groups
    has_null = keys.null_count > 0
    values = sorted(set(pc.drop_null(keys).to_pylist()))
    out = []
    for g in groups:
        stats = source.metadata.row_group(g).column(column).statistics
        if stats is None or not stats.has_min_max:
            out.append(g)
            continue
        if has_null and (not stats.has_null_count or stats.null_count > 0):
            out.append(g)
            continue
        lo = bisect.bisect_left(values, stats.min)
        if lo < len(values) and values[lo] <= stats.max:
            out.append(g)
    return out
