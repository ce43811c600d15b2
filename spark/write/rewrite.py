"""What the executors run: drop the touched keys from one data file, write new rows.

A file's touched keys are dropped by copy-on-write (``rewrite_file``: the file is rewritten
without them) or by merge-on-read (``delete_keys``: a position delete file names their rows;
the data file stays). ``[layout] write_mode`` picks one per pipeline. A key-less table drops a
number of copies of each touched image instead (``drop_copies``), its first ones in position order.

Pure functions of plain picklable arguments (a ``TableTarget``, ``DataFile``s, Arrow tables), so a
Spark task can call them with nothing captured but values; they write data files and return their
``DataFile`` metadata, and never commit (the driver does, once, for all of a table's tasks).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.manifest import DataFile
from pyiceberg.schema import Schema

from cdc_codecs import TidelakeError
from spark.tables import internals
from spark.core.key_match import ascending_unique, key_mask, key_matches
from spark.write.target import TableTarget


class RowsDoNotFitTable(TidelakeError):
    """Rows to write lack a column of the table (or carry values its types cannot hold)."""


@dataclass(frozen=True)
class FileRewrite:
    """The outcome of one file's rewrite: ``removed`` is None when the file is unchanged.

    ``deletes_added`` is the file's new position delete file (merge-on-read); ``deletes_removed``
    are the delete files it replaces, or those of ``removed`` (its rewrite applied them).
    """

    removed: DataFile | None
    added: tuple[DataFile, ...]
    rows_kept: int
    rows_dropped: int
    deletes_added: tuple[DataFile, ...] = ()
    deletes_removed: tuple[DataFile, ...] = ()


def rewrite_file(
    target: TableTarget, data_file: DataFile, key_columns: Sequence[str], touched: pa.Table,
    upserts: pa.Table | None = None, deletes: Sequence[DataFile] = (),
) -> FileRewrite:
    """Rewrite ``data_file`` without the rows whose key is in ``touched``, plus ``upserts``.

    ``upserts`` (optional) are new rows to write into the replacement, for a caller that routes
    each touched key's new row to the file (or bucket) its key belongs to; the replacement is then
    sorted by key. ``deletes`` (the file's position delete files) are applied to the rows read,
    and go with the file. A file holding no touched key, with no upserts, is left alone
    (``removed`` None, nothing written); a file left with no rows is removed and replaced by nothing.
    """
    metadata, io = target.metadata(), target.io()
    rows = internals.read_data_file(io, metadata, data_file, deletes)
    hit = key_mask(rows, touched, key_columns)
    dropped = int(pc.sum(hit).as_py() or 0)
    has_upserts = upserts is not None and upserts.num_rows > 0
    if not dropped and not has_upserts:
        return FileRewrite(None, (), rows.num_rows, 0)
    kept = rows.filter(pc.invert(hit))
    if has_upserts:
        assert upserts is not None
        kept = _sorted(pa.concat_tables([kept, fit_rows(upserts, metadata.schema(), target.name)]), key_columns)
    added = internals.write_data_files(io, metadata, kept)
    return FileRewrite(data_file, tuple(added), rows.num_rows - dropped, dropped, deletes_removed=tuple(deletes))


def delete_keys(
    target: TableTarget, data_file: DataFile, key_columns: Sequence[str], touched: pa.Table,
    deletes: Sequence[DataFile] = (),
) -> FileRewrite:
    """Merge-on-read: the rows of ``data_file`` whose key is in ``touched`` join the file's deleted rows.

    Reads the key columns only. A data file keeps one position delete file, rewritten whole,
    like Iceberg v3's deletion vectors: the new one holds the positions ``deletes`` (the file's
    delete files) already deleted and the new ones, and replaces them. So a file touched by many
    runs costs each later run and each read one delete file, not one per run, and a position is
    deleted once. A file holding no live touched key is left alone (nothing added or removed).
    """
    metadata, io = target.metadata(), target.io()
    keys = internals.read_data_file(io, metadata, data_file, columns=key_columns)
    hit = key_mask(keys, touched, key_columns).to_numpy(zero_copy_only=False)
    positions = np.flatnonzero(hit).astype(np.int64)
    deleted = internals.deleted_positions(io, data_file, deletes) if len(positions) and deletes else np.zeros(0, np.int64)
    new = np.setdiff1d(positions, deleted, assume_unique=True)
    if not len(new):
        return FileRewrite(None, (), keys.num_rows - len(deleted), 0)
    written = internals.write_position_deletes(io, metadata, data_file,
                                               ascending_unique(np.concatenate([deleted, new])))
    return FileRewrite(None, (), keys.num_rows - len(deleted) - len(new), len(new), deletes_added=(written,),
                       deletes_removed=tuple(deletes))


def fill_columns(target: TableTarget, data_file: DataFile, values: pa.Table, deletes: Sequence[DataFile] = ()) -> FileRewrite:
    """Rewrite ``data_file`` with each column of ``values`` (one row) set to its value in every row:
    the rows a table holds when ``ADD COLUMN`` gives them the column's default. ``deletes`` (the
    file's position delete files) are applied and go with the file."""
    metadata, io = target.metadata(), target.io()
    rows = internals.read_data_file(io, metadata, data_file, deletes)
    for name in values.column_names:
        at = rows.schema.get_field_index(name)
        if at < 0:
            raise RowsDoNotFitTable(f"{target.name}: the table has no column {name!r} to fill")
        field = rows.schema.field(at)
        rows = rows.set_column(at, field, pa.repeat(values.column(name)[0].cast(field.type), rows.num_rows))
    added = internals.write_data_files(io, metadata, rows) if rows.num_rows else []
    return FileRewrite(data_file, tuple(added), rows.num_rows, 0, deletes_removed=tuple(deletes))


def drop_copies(
    target: TableTarget, data_file: DataFile, key_columns: Sequence[str], touched: pa.Table, copies: np.ndarray,
    deletes: Sequence[DataFile] = (), merge_on_read: bool = False,
) -> tuple[FileRewrite, np.ndarray]:
    """Drop up to ``copies[i]`` rows of ``data_file`` equal to ``touched`` image i (a key-less
    table: ``key_columns`` are all its columns), the first live ones in position order, so a
    run done again drops the same rows. Returns the file's rewrite (copy-on-write, or a position
    delete file with ``merge_on_read``) and how many copies of each image it dropped."""
    metadata, io = target.metadata(), target.io()
    if merge_on_read:
        rows = internals.read_data_file(io, metadata, data_file, columns=key_columns)
        deleted = internals.deleted_positions(io, data_file, deletes) if deletes else np.zeros(0, np.int64)
    else:
        rows = internals.read_data_file(io, metadata, data_file, deletes)
        deleted = np.zeros(0, np.int64)
    row, image = key_matches(rows, touched, key_columns)
    live = ~np.isin(row, deleted)
    row, image = row[live], image[live]
    # Matches are sorted by image, then row: the first copies[image] of each image's rows go.
    starts = np.searchsorted(image, image, "left")
    chosen = (np.arange(len(row)) - starts) < copies[image]
    dropped_rows = ascending_unique(row[chosen])
    dropped = np.bincount(image[chosen], minlength=len(copies)).astype(np.int64)
    if not len(dropped_rows):
        return FileRewrite(None, (), rows.num_rows - len(deleted), 0), dropped
    if merge_on_read:
        positions = ascending_unique(np.concatenate([deleted, dropped_rows]))
        written = internals.write_position_deletes(io, metadata, data_file, positions)
        live = rows.num_rows - len(deleted) - len(dropped_rows)
        return FileRewrite(None, (), live, len(dropped_rows), deletes_added=(written,), deletes_removed=tuple(deletes)), dropped
    keep = np.ones(rows.num_rows, dtype=bool)
    keep[dropped_rows] = False
    added = internals.write_data_files(io, metadata, rows.filter(pa.array(keep)))
    rewrite = FileRewrite(data_file, tuple(added), int(keep.sum()), len(dropped_rows), deletes_removed=tuple(deletes))
    return rewrite, dropped


def write_rows(target: TableTarget, rows: pa.Table, key_columns: Sequence[str]) -> tuple[DataFile, ...]:
    """Write new and updated rows as new data files, sorted by key (so each file's key bounds
    are tight and later plans touch few files)."""
    return merge_files(target, (), (), key_columns, None, rows)[0].added


def merge_files(
    target: TableTarget, data_files: Sequence[DataFile], deletes: Sequence[Sequence[DataFile]], key_columns: Sequence[str],
    touched: pa.Table | None, rows: pa.Table | None,
) -> list[FileRewrite]:
    """Write ``rows`` (new and updated rows) together with what is left of ``data_files`` (each
    read with its ``deletes`` applied, without the rows whose key is in ``touched``), sorted by
    key, as new files replacing them all: merge-on-read's small files folded into the files a run
    writes (``upsert``). One ``FileRewrite`` per file, the first carrying the written files; with no
    files, one carrying them alone."""
    metadata, io = target.metadata(), target.io()
    schema = metadata.schema()
    parts = [fit_rows(rows, schema, target.name)] if rows is not None and rows.num_rows else []
    replaced: list[FileRewrite] = []
    for data_file, its_deletes in zip(data_files, deletes):
        read = internals.read_data_file(io, metadata, data_file, its_deletes)
        kept = read
        if touched is not None and touched.num_rows:
            kept = read.filter(pc.invert(key_mask(read, touched, key_columns)))
        parts.append(fit_rows(kept, schema, target.name))
        replaced.append(FileRewrite(data_file, (), kept.num_rows, read.num_rows - kept.num_rows,
                                    deletes_removed=tuple(its_deletes)))
    merged = _sorted(pa.concat_tables(parts), key_columns) if parts else None
    added = tuple(internals.write_data_files(io, metadata, merged)) if merged is not None and merged.num_rows else ()
    if not replaced:
        return [FileRewrite(None, added, 0, 0)]
    replaced[0] = dataclasses.replace(replaced[0], added=added)
    return replaced


def fit_rows(rows: pa.Table, schema: Schema, where: str) -> pa.Table:
    """``rows`` with exactly the table's columns, in its order and Arrow types."""
    wanted = schema.as_arrow()
    missing = [n for n in wanted.names if n not in rows.column_names]
    if missing:
        raise RowsDoNotFitTable(f"{where}: rows lack column(s) {', '.join(map(repr, missing))}")
    extra = [n for n in rows.column_names if n not in wanted.names]
    if extra:
        raise RowsDoNotFitTable(f"{where}: rows have column(s) the table lacks: {', '.join(map(repr, extra))}")
    try:
        return rows.select(wanted.names).cast(wanted)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise RowsDoNotFitTable(f"{where}: rows do not fit the table's column types: {exc}") from exc


def _sorted(rows: pa.Table, key_columns: Sequence[str]) -> pa.Table:
    return rows.sort_by([(k, "ascending") for k in key_columns]) if key_columns else rows
