"""File planning: which data files of a snapshot can hold any of a set of touched keys.

pyiceberg prunes files for an ``In`` predicate only up to 200 literals; above that a delete by key
reads every file. Here the manifests' per-file facts are tested against the keys directly, with
no limit on their number:

- each key column's lower/upper bounds and NULL counts (``DataFile.lower_bounds``/``upper_bounds``,
  ``null_value_counts``, ``value_counts``);
- the file's partition value of every partition field whose source is a key column (identity,
  bucket, truncate): the value is exact for every row of the file, so ``bucket(key, N)`` prunes
  to one bucket even where the files' key ranges all overlap.

A file is a candidate if some touched key passes every test. The tests are necessary conditions
only (a key inside a file's range need not be in the file), so the plan never misses a file that
holds a key, and is exact at the level of ranges: a file is left out iff no key falls in its box.
Missing bounds or counts (metrics off, other writers) count as "anything". Floating-point key
columns are not pruned on (NaN is outside every min/max yet can be a key).

A file's bounds must bound every row group: Parquet writers keep no min/max for a row group
holding a value over the statistics size limit (4 KiB), and a bound taken from the other row
groups would prune the file for that row group's keys. tidelake's writer leaves such bounds out
(``internals.unbounded_columns``); for files of more than one row group, whoever wrote them,
``live_files`` reads the Parquet footer once per file and process and drops the bounds it does
not confirm.

Values are compared through dense ranks (one Arrow sort of keys and bounds together), so every
orderable Arrow type works the same; the keys are sorted once and each file takes a binary search
on the first test plus a vectorised check of the others over the keys in that range.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.conversions import from_bytes
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat, ManifestContent
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.transforms import BucketTransform, IdentityTransform, TruncateTransform
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    IcebergType,
    IntegerType,
    LongType,
    StringType,
    TimestampType,
    TimestamptzType,
    TimeType,
)

from spark.tables import internals
from spark.tables.errors import DeleteFilesPresent
from spark.core.key_match import KeyColumnsMissing

# Key types whose bounds order exactly like their Arrow values (floats are left out: NaN).
_RANGE_TYPES = (IntegerType, LongType, DecimalType, DateType, TimeType, TimestampType, TimestamptzType, StringType,
                BinaryType, BooleanType)
_TEMPORAL_AS_INT = {DateType: pa.int32(), TimeType: pa.int64(), TimestampType: pa.int64(), TimestamptzType: pa.int64()}
_PRUNING_TRANSFORMS = (IdentityTransform, BucketTransform, TruncateTransform)
_UNBOUNDED = np.iinfo(np.int64).max // 2


@dataclass(frozen=True)
class FilePlan:
    """The files of snapshot ``snapshot_id`` a change to the touched keys must rewrite."""

    snapshot_id: int | None
    candidates: tuple[DataFile, ...]
    files_in_snapshot: int


@dataclass(frozen=True)
class LiveFiles:
    """A snapshot's live data files and, per data file path, the position delete files naming it."""

    data: tuple[DataFile, ...]
    deletes: Mapping[str, tuple[DataFile, ...]]

    def deletes_of(self, data_file: DataFile) -> tuple[DataFile, ...]:
        return self.deletes.get(data_file.file_path, ())

    @property
    def dangling(self) -> tuple[DataFile, ...]:
        """Delete files naming a data file that is no longer live (pyiceberg's own overwrite, used by
        repair, removes data files and leaves their deletes): they delete nothing, compaction drops them."""
        live = {f.file_path for f in self.data}
        return tuple(d for path, ds in self.deletes.items() if path not in live for d in ds)

    @property
    def delete_files(self) -> tuple[DataFile, ...]:
        return tuple(d for ds in self.deletes.values() for d in ds)


def live_files(io: FileIO, snapshot: Snapshot, manifests_read: dict[str, list[Any]] | None = None,
               added_after: int | None = None) -> LiveFiles:
    """The data files of ``snapshot`` and their position delete files, read from its manifests
    (in parallel: each is one object read). ``manifests_read``: the live entries of manifests
    already read, by path, taken from and added to (a manifest file never changes: two snapshots
    of a table share most of theirs, e.g. the change feed's W1 and W2). ``added_after``: a sequence
    number of the table: only the files added after it, and their deletes (a manifest added at or
    before it is not read: no entry is newer than its manifest, and a delete file is newer than the
    data files it names; a data file a newer manifest carries is left out by its own sequence number).
    The caller knows the snapshot of that sequence number is an ancestor of ``snapshot``.

    Raises:
        DeleteFilesPresent: the snapshot has equality deletes, or position deletes that do not
            name one data file (another engine wrote them): tidelake cannot tell which rows of
            a file they delete without reading every one.
    """
    manifests = snapshot.manifests(io)
    if added_after:  # 0 (format v1): no sequence numbers to tell by
        manifests = [m for m in manifests if m.sequence_number > added_after]
    known = {} if manifests_read is None else manifests_read
    unread = [m for m in manifests if m.manifest_path not in known]
    if unread:
        with ThreadPoolExecutor(max_workers=min(8, len(unread))) as pool:
            known.update(zip((m.manifest_path for m in unread),
                             pool.map(lambda m: m.fetch_manifest_entry(io, discard_deleted=True), unread)))
    entries = [known[m.manifest_path] for m in manifests]
    files: list[DataFile] = []
    deletes: dict[str, list[DataFile]] = {}
    for manifest, live in zip(manifests, entries):
        if manifest.content == ManifestContent.DELETES:
            for entry in live:
                named = internals.referenced_data_file(entry.data_file)
                if entry.data_file.content != DataFileContent.POSITION_DELETES or named is None:
                    raise DeleteFilesPresent(
                        f"snapshot {snapshot.snapshot_id}: delete file {entry.data_file.file_path} "
                        f"({entry.data_file.content.name.lower()}, not naming one data file); compact the table "
                        "with the engine that wrote it (rewrite_data_files with deletes applied) before a tidelake run"
                    )
                deletes.setdefault(named, []).append(entry.data_file)
            continue
        # A later manifest may carry older files (a commit that removed a file from theirs, a merge):
        # by their own sequence number they are left out too, as their deletes (in older manifests) are.
        files.extend(e.data_file for e in live if not added_after or (e.sequence_number or 0) > added_after)
    return LiveFiles(tuple(_bounding(io, files)), {path: tuple(ds) for path, ds in deletes.items()})


# Per data file path (files never change): the field ids its footer shows its bounds do not bound.
_UNBOUNDED_BY_FOOTER: dict[str, frozenset[int]] = {}
_FOOTER_CACHE_LIMIT = 100_000


def _bounding(io: FileIO, files: list[DataFile]) -> list[DataFile]:
    """``files``, each without the bounds of a column one of its row groups holds values of
    without min/max (see the module doc). Only files of more than one row group (or an unknown
    number) with bounds can be wrong: a single row group without min/max gives no bounds."""
    doubtful = [f for f in files if f.file_format == FileFormat.PARQUET and (f.lower_bounds or f.upper_bounds)
                and len(f.split_offsets or ()) != 1 and f.file_path not in _UNBOUNDED_BY_FOOTER]
    if doubtful:
        with ThreadPoolExecutor(max_workers=8) as pool:
            found = list(pool.map(lambda f: _footer_unbounded(io, f.file_path), doubtful))
        if len(_UNBOUNDED_BY_FOOTER) + len(found) > _FOOTER_CACHE_LIMIT:
            _UNBOUNDED_BY_FOOTER.clear()
        _UNBOUNDED_BY_FOOTER.update((f.file_path, u) for f, u in zip(doubtful, found))
    out = []
    for f in files:
        unbounded = _UNBOUNDED_BY_FOOTER.get(f.file_path, frozenset()) & (set(f.lower_bounds or ()) | set(f.upper_bounds or ()))
        out.append(internals.without_bounds(f, unbounded) if unbounded else f)
    return out


def _footer_unbounded(io: FileIO, path: str) -> frozenset[int]:
    with io.new_input(path).open() as stream:
        metadata = pq.read_metadata(stream)
    field_ids = {}
    for field in metadata.schema.to_arrow_schema():
        field_id = (field.metadata or {}).get(b"PARQUET:field_id")
        if field_id is not None:
            field_ids[field.name] = int(field_id)
    return frozenset(internals.unbounded_columns(metadata, field_ids))


def live_data_files(io: FileIO, snapshot: Snapshot) -> list[DataFile]:
    """The data files of ``snapshot`` (see ``live_files``)."""
    return list(live_files(io, snapshot).data)


def plan_rewrite(
    metadata: TableMetadata, io: FileIO, key_columns: Sequence[str], touched: pa.Table, *, snapshot_id: int | None = None,
) -> FilePlan:
    """The data files of the snapshot (default: the current one) that can hold a key in ``touched``.

    Args:
        metadata: the table's metadata (driver side: the plan reads manifests, not data).
        key_columns: top-level column names forming the key (all columns of a key-less table).
        touched: the touched keys, one row each, with a column per key column (NULLs allowed).
    """
    snapshot = metadata.current_snapshot() if snapshot_id is None else metadata.snapshot_by_id(snapshot_id)
    if snapshot is None:
        return FilePlan(snapshot_id, (), 0)
    files = live_data_files(io, snapshot)
    if not files or touched.num_rows == 0:
        return FilePlan(snapshot.snapshot_id, (), len(files))
    tests = _partition_tests(metadata, key_columns, touched, files) + _bound_tests(metadata, key_columns, touched, files)
    hit = _files_hit(tests, len(files))
    return FilePlan(snapshot.snapshot_id, tuple(f for f, h in zip(files, hit) if h), len(files))


@dataclass(frozen=True)
class _Test:
    """One necessary condition: key value ``keys[k]`` is in [lower[f], upper[f]] (None: unbounded),
    or is NULL and file f may hold NULLs. ``may_hold_value`` False: file f holds only NULLs there."""

    keys: pa.Array
    lower: list[Any]
    upper: list[Any]
    may_hold_null: np.ndarray
    may_hold_value: np.ndarray


def _key_column(touched: pa.Table, name: str, field_type: IcebergType) -> pa.Array:
    if name not in touched.column_names:
        raise KeyColumnsMissing(f"touched keys: no key column {name!r} (columns: {', '.join(touched.column_names)})")
    return touched.column(name).combine_chunks().cast(schema_to_pyarrow(field_type, include_field_ids=False))


def _bound_tests(metadata: TableMetadata, key_columns: Sequence[str], touched: pa.Table, files: list[DataFile]) -> list[_Test]:
    schema = metadata.schema()
    tests = []
    for name in key_columns:
        field = schema.find_field(name)
        if not isinstance(field.field_type, _RANGE_TYPES):
            continue
        fid, ftype = field.field_id, field.field_type
        nulls = [(f.null_value_counts or {}).get(fid) for f in files]
        values = [(f.value_counts or {}).get(fid) for f in files]
        tests.append(_Test(
            keys=_key_column(touched, name, ftype),
            lower=[_bound(f.lower_bounds, fid, ftype) for f in files],
            upper=[_bound(f.upper_bounds, fid, ftype) for f in files],
            may_hold_null=np.array([n is None or n > 0 for n in nulls]),
            may_hold_value=np.array([not (v is not None and n is not None and v == n) for v, n in zip(values, nulls)]),
        ))
    return tests


def _bound(bounds: dict[int, bytes] | None, field_id: int, field_type: IcebergType) -> Any:
    raw = (bounds or {}).get(field_id)
    return None if raw is None else from_bytes(field_type, raw)


def _partition_tests(metadata: TableMetadata, key_columns: Sequence[str], touched: pa.Table, files: list[DataFile]) -> list[_Test]:
    schema = metadata.schema()
    key_ids = {schema.find_field(k).field_id: k for k in key_columns}
    tests = []
    for spec in metadata.specs().values():
        for position, pfield in enumerate(spec.fields):
            if pfield.source_id not in key_ids or not isinstance(pfield.transform, _PRUNING_TRANSFORMS):
                continue
            source_type = schema.find_field(pfield.source_id).field_type
            keys = partition_values(pfield.transform, source_type, _key_column(touched, key_ids[pfield.source_id], source_type))
            in_spec = [f.spec_id == spec.spec_id for f in files]
            # Files of other specs are not partitioned by this field: no constraint for them.
            values = [f.partition[position] if s else None for f, s in zip(files, in_spec)]
            tests.append(_Test(
                keys=keys,
                lower=values,
                upper=values,
                may_hold_null=np.array([not s or v is None for v, s in zip(values, in_spec)]),
                may_hold_value=np.array([not s or v is not None for v, s in zip(values, in_spec)]),
            ))
    return tests


def partition_values(transform: Any, source_type: IcebergType, keys: pa.Array) -> pa.Array:
    """The partition values of ``keys``: pyiceberg-core's vectorised transform when installed,
    else pyiceberg's per-value one over the values' Iceberg representation (days, micros...)."""
    result_type = schema_to_pyarrow(transform.result_type(source_type), include_field_ids=False)
    if internals.pyiceberg_core_available() or isinstance(transform, IdentityTransform):
        return transform.pyarrow_transform(source_type)(keys).cast(result_type)
    as_int = _TEMPORAL_AS_INT.get(type(source_type))
    python_values = (keys.cast(as_int) if as_int is not None else keys).to_pylist()
    apply: Callable[[Any], Any] = transform.transform(source_type)
    return pa.array([apply(v) for v in python_values], type=result_type)


@dataclass(frozen=True)
class _Ranked:
    key_rank: np.ndarray  # -1: NULL key part
    lower: np.ndarray
    upper: np.ndarray
    may_hold_null: np.ndarray


def _ranked(test: _Test) -> _Ranked:
    """Replace values by dense ranks over keys and bounds together: order kept, types gone."""
    keys = test.keys
    valid = pc.is_valid(keys).to_numpy(zero_copy_only=False)
    has_lower = np.array([v is not None for v in test.lower], dtype=bool)
    has_upper = np.array([v is not None for v in test.upper], dtype=bool)
    lowers = pa.array([v for v in test.lower if v is not None], type=keys.type)
    uppers = pa.array([v for v in test.upper if v is not None], type=keys.type)
    combined = pa.concat_arrays([pc.drop_null(keys), lowers, uppers])
    ranks = pc.rank(combined, sort_keys="ascending", tiebreaker="dense").to_numpy().astype(np.int64)
    n_keys, n_lower = int(valid.sum()), len(lowers)
    key_rank = np.full(len(keys), -1, dtype=np.int64)
    key_rank[valid] = ranks[:n_keys]
    lower = np.zeros(len(test.lower), dtype=np.int64)  # ranks start at 1: 0 is below every key
    lower[has_lower] = ranks[n_keys : n_keys + n_lower]
    upper = np.full(len(test.upper), _UNBOUNDED, dtype=np.int64)
    upper[has_upper] = ranks[n_keys + n_lower :]
    lower[~test.may_hold_value] = _UNBOUNDED  # an empty range: only NULLs in the file
    upper[~test.may_hold_value] = -_UNBOUNDED
    return _Ranked(key_rank, lower, upper, test.may_hold_null)


# A data file below this share of the target file size is *small*: compaction bin-packs it, and a
# merge-on-read run merges it into the files it writes (``spark.write.upsert``). Spark's
# rewrite_data_files uses 75% too.
SMALL_FILE_SHARE = 0.75


def is_small(data_file: DataFile, target_file_size: int) -> bool:
    return data_file.file_size_in_bytes < target_file_size * SMALL_FILE_SHARE


def key_file_pairs(
    metadata: TableMetadata, key_columns: Sequence[str], touched: pa.Table, files: Sequence[DataFile],
) -> tuple[np.ndarray, np.ndarray]:
    """Which of ``files`` can hold each touched key: parallel arrays (key row, file index).

    The same tests as ``plan_rewrite``; a key may pair with several files (files whose ranges
    overlap), and a key pairing with none is new to the table.
    """
    if not files or touched.num_rows == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    files = list(files)
    tests = _partition_tests(metadata, key_columns, touched, files) + _bound_tests(metadata, key_columns, touched, files)
    return _pairs(tests, len(files), touched.num_rows)


def _files_hit(tests: list[_Test], n_files: int) -> np.ndarray:
    if not tests:
        return np.ones(n_files, dtype=bool)  # nothing to prune on: every file may hold a key
    hit = np.zeros(n_files, dtype=bool)
    _, file_index = _pairs(tests, n_files, len(tests[0].keys))
    hit[file_index] = True
    return hit


def _pairs(tests: list[_Test], n_files: int, n_keys: int) -> tuple[np.ndarray, np.ndarray]:
    if not tests:  # nothing to prune on: every key may be in every file
        keys = np.tile(np.arange(n_keys, dtype=np.int64), n_files)
        return keys, np.repeat(np.arange(n_files, dtype=np.int64), n_keys)
    first, *rest = [_ranked(t) for t in tests]
    order = np.argsort(first.key_rank, kind="stable")
    sorted_rank = first.key_rank[order]
    n_null = int(np.searchsorted(sorted_rank, 0))  # NULL parts (-1) sort first
    starts = np.searchsorted(sorted_rank, first.lower, "left")
    ends = np.searchsorted(sorted_rank, first.upper, "right")
    null_hit = first.may_hold_null & (n_null > 0)
    key_parts: list[np.ndarray] = []
    file_parts: list[np.ndarray] = []
    for f in range(n_files):
        parts = ([order[:n_null]] if null_hit[f] else []) + ([order[starts[f] : ends[f]]] if ends[f] > starts[f] else [])
        if not parts:
            continue
        candidates = np.concatenate(parts)
        ok = np.ones(len(candidates), dtype=bool)
        for test in rest:
            kr = test.key_rank[candidates]
            ok &= np.where(kr < 0, test.may_hold_null[f], (kr >= test.lower[f]) & (kr <= test.upper[f]))
        chosen = candidates[ok]
        key_parts.append(chosen)
        file_parts.append(np.full(len(chosen), f, dtype=np.int64))
    if not key_parts:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.concatenate(key_parts), np.concatenate(file_parts)
