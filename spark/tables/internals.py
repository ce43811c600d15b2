"""The one module that touches pyiceberg's private API.

Written for pyiceberg 0.12.0. pyiceberg has no public "write these rows to data files and give me
their ``DataFile``s" nor "commit this set of removed and added files as one snapshot"; both exist
inside it (``Transaction.append``/``overwrite`` use them). Every private name tidelake relies on is
used here, once, in a small function; ``tests/spark/tables/test_internals.py`` asserts the names,
signatures and round-trip behaviour, so an upgrade that changes them fails there, loudly, and not
in a pipeline.
"""

from __future__ import annotations

import importlib.util
import struct
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pyiceberg.io.pyarrow as pyiceberg_arrow

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.exceptions import CommitFailedException, ValidationException
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files, _read_deletes
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriterV2,
)
from pyiceberg.table import FileScanTask, Table, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.snapshots import Operation, SnapshotSummaryCollector, Summary, update_snapshot_summaries
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER, UNSORTED_SORT_ORDER_ID
from pyiceberg.partitioning import PARTITION_FIELD_ID_START, PartitionField, PartitionSpec
from pyiceberg.table.sorting import SortOrder
from pyiceberg.table.update import (
    AddPartitionSpecUpdate,
    AddSnapshotUpdate,
    AddSortOrderUpdate,
    SetCurrentSchemaUpdate,
    SetDefaultSortOrderUpdate,
    SetDefaultSpecUpdate,
    TableUpdate,
)
from pyiceberg.table.update.snapshot import ManageSnapshots, _OverwriteFiles
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import StringType

from spark.core.key_match import ascending_unique
from spark.tables.errors import CommitConflictError, InternalsChanged, LayoutUnavailable, OverwriteRejected

WRITTEN_FOR_PYICEBERG = "0.12.0"
MAIN_BRANCH = "main"
# Iceberg's reserved field ids of a position delete file's columns (spec: "Position Delete Files").
DELETE_FILE_PATH_ID, DELETE_POS_ID = 2147483546, 2147483545
POSITION_DELETE_ARROW = pa.schema([
    pa.field("file_path", pa.string(), nullable=False, metadata={b"PARQUET:field_id": str(DELETE_FILE_PATH_ID).encode()}),
    pa.field("pos", pa.int64(), nullable=False, metadata={b"PARQUET:field_id": str(DELETE_POS_ID).encode()}),
])


def unbounded_columns(parquet_metadata: pq.FileMetaData, field_ids: Mapping[str, int]) -> set[int]:
    """The field ids (``field_ids``: Parquet column path -> field id) of the columns that some row
    group holds values of without a min/max: the file's statistics do not bound them.

    Parquet writers leave out a row group's min/max when a value is too long for the statistics
    (pyarrow 26: over 4096 bytes; parquet-mr likewise); pyiceberg (and Iceberg Java reading a
    footer) then takes the file's bounds from the other row groups, which a value of that row
    group can lie outside of. A row group of NULLs only has no min/max and bounds nothing: fine.
    """
    out: set[int] = set()
    for r in range(parquet_metadata.num_row_groups):
        row_group = parquet_metadata.row_group(r)
        for pos in range(row_group.num_columns):
            column = row_group.column(pos)
            field_id = field_ids.get(column.path_in_schema)
            if field_id is None or field_id in out:
                continue
            stats = column.statistics if column.is_stats_set else None
            if stats is not None and stats.has_min_max:
                continue
            if stats is not None and stats.has_null_count and stats.null_count >= column.num_values:
                continue  # NULLs only
            out.add(field_id)
    return out


def text_upper_bound(value: str, length: int | None) -> str | None:
    """An upper bound of ``value`` of at most ``length`` characters, as Iceberg truncates string
    bounds (None: there is none, every kept character is U+10FFFF).

    pyiceberg's ``truncate_upper_bound_text_string`` increments the last kept character by one
    code point, which turns U+D7FF into a lone surrogate that UTF-8 cannot encode (the write
    fails). Here the increment skips the surrogates (U+D7FF -> U+E000): in code point order,
    which is UTF-8 byte order and the order bounds compare in, nothing lies between them.
    """
    kept = value if length is None else value[:length]
    if kept == value:
        return value
    for i in range(len(kept) - 1, -1, -1):
        following = ord(kept[i]) + 1
        if 0xD800 <= following <= 0xDFFF:
            following = 0xE000
        if following <= 0x10FFFF:
            return kept[:i] + chr(following)
    return None


_pyiceberg_file_statistics = pyiceberg_arrow.data_file_statistics_from_parquet_metadata


def _bounding_file_statistics(parquet_metadata: pq.FileMetaData, stats_columns: dict[int, Any],
                              parquet_column_mapping: dict[str, int]) -> Any:
    """pyiceberg's statistics of a written Parquet file, with only bounds that bound every row:
    no bounds for a column ``unbounded_columns`` names, string upper bounds from ``text_upper_bound``."""
    statistics = _pyiceberg_file_statistics(parquet_metadata, stats_columns, parquet_column_mapping)
    for field_id in unbounded_columns(parquet_metadata, parquet_column_mapping):
        statistics.column_aggregates.pop(field_id, None)
    for aggregate in statistics.column_aggregates.values():
        if aggregate.primitive_type == StringType() and aggregate.current_max is not None:
            # Bounded here: pyiceberg keeps a string of at most trunc_length characters as it is.
            aggregate.current_max = text_upper_bound(aggregate.current_max, aggregate.trunc_length)
    return statistics


def _install_bounding_file_statistics() -> None:
    """Every Parquet data file pyiceberg writes in this process (``write_data_files``, and
    pyiceberg's own append/overwrite that repair and tagging use) gets its statistics from
    ``_bounding_file_statistics``.

    Written for pyiceberg 0.12.0: its Parquet writer (``ParquetFormatWriter.close``) looks
    ``data_file_statistics_from_parquet_metadata`` up in ``pyiceberg.io.pyarrow`` at each call;
    the name is rebound there, once per process. The planner trusts a file's key bounds to hold
    every key of the file: a bound that misses a row group loses that row group's deletes.
    """
    if not callable(getattr(pyiceberg_arrow, "data_file_statistics_from_parquet_metadata", None)):
        raise InternalsChanged("pyiceberg.io.pyarrow has no data_file_statistics_from_parquet_metadata(): "
                               "spark/tables/internals.py needs updating for this pyiceberg")
    pyiceberg_arrow.data_file_statistics_from_parquet_metadata = _bounding_file_statistics


_install_bounding_file_statistics()

_LOWER_BOUNDS, _UPPER_BOUNDS = 10, 11  # DataFile's struct positions (Iceberg spec field ids 125, 128)


def without_bounds(data_file: DataFile, field_ids: Iterable[int]) -> DataFile:
    """A copy of ``data_file`` without lower and upper bounds for ``field_ids`` (the planner then
    treats it as holding any value there).

    Raises:
        InternalsChanged: ``DataFile``'s struct positions changed.
    """
    gone = set(field_ids)
    lower = {k: v for k, v in (data_file.lower_bounds or {}).items() if k not in gone}
    upper = {k: v for k, v in (data_file.upper_bounds or {}).items() if k not in gone}
    copy = DataFile(*(data_file[i] for i in range(len(data_file))))
    copy[_LOWER_BOUNDS], copy[_UPPER_BOUNDS] = lower, upper
    if copy.lower_bounds is not lower or copy.upper_bounds is not upper:
        raise InternalsChanged("pyiceberg's DataFile moved lower_bounds/upper_bounds: spark/tables/internals.py needs updating")
    if hasattr(data_file, "_spec_id"):
        copy.spec_id = data_file.spec_id
    return copy


def pyiceberg_core_available() -> bool:
    """Whether ``pyiceberg-core`` is installed: pyiceberg 0.12 computes every partition transform
    but identity (bucket, truncate, year...) through it when it writes."""
    return importlib.util.find_spec("pyiceberg_core") is not None


def require_writable_spec(metadata: TableMetadata) -> None:
    """Raise ``LayoutUnavailable`` if writing ``metadata``'s default partition spec needs pyiceberg-core
    and it is missing (pyiceberg 0.12 only fails once a write computes the partition values)."""
    spec = metadata.spec()
    needs_core = [f for f in spec.fields if not isinstance(f.transform, IdentityTransform)]
    if needs_core and not pyiceberg_core_available():
        fields = ", ".join(f"{f.transform}({metadata.schema().find_column_name(f.source_id)})" for f in needs_core)
        raise LayoutUnavailable(
            f"table at {metadata.location}: partition spec [{fields}] needs pyiceberg-core to write; "
            "install pyiceberg[pyiceberg-core] (pinned with pyiceberg) or set [layout] buckets = 0"
        )


def write_data_files(io: FileIO, metadata: TableMetadata, rows: pa.Table) -> list[DataFile]:
    """Write ``rows`` as Parquet data files under the table's location and return their ``DataFile``s.

    Written for pyiceberg 0.12.0: wraps ``pyiceberg.io.pyarrow._dataframe_to_data_files`` (what
    ``Transaction.append`` uses), which splits by the default partition spec, bin-packs to
    ``write.target-file-size-bytes`` and computes column statistics (the key bounds the planner
    reads). A fresh write uuid per call keeps file names unique across concurrent executors.
    Nothing is committed: the files are invisible until a snapshot adds them.

    Raises:
        LayoutUnavailable: the partition spec needs pyiceberg-core, which is missing.
    """
    if rows.num_rows == 0:
        return []
    require_writable_spec(metadata)
    files = list(_dataframe_to_data_files(table_metadata=metadata, df=rows, io=io, write_uuid=uuid.uuid4()))
    for data_file in files:
        # pyiceberg 0.12 passes spec_id to DataFile.from_args, which drops it (not a struct field);
        # files read from manifests have it, and reading a file (ArrowScan) needs it.
        data_file.spec_id = metadata.default_spec_id
    return files


def read_data_file(io: FileIO, metadata: TableMetadata, data_file: DataFile, deletes: Iterable[DataFile] = (),
                   columns: Iterable[str] | None = None) -> pa.Table:
    """Read one data file projected onto the table's current schema (columns matched by field id,
    so files written before a rename, an added column or a widening read as the table does).

    Written for pyiceberg 0.12.0: ``ArrowScan`` and ``FileScanTask`` are what ``DataScan.to_arrow``
    runs. ``deletes`` (position delete files) are applied: their rows of this file are left out.
    ``columns`` (default: all) projects the read.
    """
    schema = metadata.schema() if columns is None else metadata.schema().select(*columns)
    scan = ArrowScan(metadata, io, schema, AlwaysTrue())
    return scan.to_table([FileScanTask(data_file, delete_files=set(deletes))])


def deleted_positions(io: FileIO, data_file: DataFile, deletes: Iterable[DataFile]) -> np.ndarray:
    """The row positions of ``data_file`` that ``deletes`` (position delete files) delete, sorted, unique.

    Written for pyiceberg 0.12.0: ``_read_deletes`` is what ``ArrowScan`` reads delete files with.
    """
    found = [np.asarray(positions.to_numpy(), dtype=np.int64) for d in deletes
             for path, positions in _read_deletes(io, d).items() if path == data_file.file_path]
    return ascending_unique(np.concatenate(found)) if found else np.zeros(0, dtype=np.int64)


def write_position_deletes(io: FileIO, metadata: TableMetadata, data_file: DataFile, positions: np.ndarray) -> DataFile:
    """Write a position delete file deleting ``positions`` (sorted) of ``data_file``; return its ``DataFile``.

    One delete file names one data file: its ``file_path`` bounds are that path, so readers
    (pyiceberg's ``DeleteFileIndex``, Spark) apply it to that file only, and compaction knows
    which delete files go with the data files it replaces. Nothing is committed.
    """
    positions = np.asarray(positions, dtype=np.int64)
    rows = pa.table([pa.repeat(pa.scalar(data_file.file_path, pa.string()), len(positions)),
                     pa.array(positions, pa.int64())], schema=POSITION_DELETE_ARROW)
    path = f"{metadata.location}/data/{uuid.uuid4()}-deletes.parquet"
    sink = pa.BufferOutputStream()
    pq.write_table(rows, sink)
    written = sink.getvalue()
    with io.new_output(path).create(overwrite=False) as out:
        out.write(written.to_pybytes())
    path_bytes = data_file.file_path.encode()
    deletes = DataFile.from_args(
        content=DataFileContent.POSITION_DELETES, file_path=path, file_format=FileFormat.PARQUET,
        partition=data_file.partition, record_count=len(positions), file_size_in_bytes=written.size,
        value_counts={DELETE_FILE_PATH_ID: len(positions), DELETE_POS_ID: len(positions)},
        null_value_counts={DELETE_FILE_PATH_ID: 0, DELETE_POS_ID: 0},
        lower_bounds={DELETE_FILE_PATH_ID: path_bytes, DELETE_POS_ID: struct.pack("<q", int(positions[0]))},
        upper_bounds={DELETE_FILE_PATH_ID: path_bytes, DELETE_POS_ID: struct.pack("<q", int(positions[-1]))},
    )
    deletes.spec_id = data_file.spec_id  # see write_data_files
    return deletes


def referenced_data_file(delete_file: DataFile) -> str | None:
    """The one data file a position delete file names (equal ``file_path`` bounds), else None."""
    lower, upper = delete_file.lower_bounds or {}, delete_file.upper_bounds or {}
    path = lower.get(DELETE_FILE_PATH_ID)
    return path.decode() if path is not None and path == upper.get(DELETE_FILE_PATH_ID) else None


class _Transaction(Transaction):
    """pyiceberg's ``Transaction`` whose ``table_metadata`` is computed once per staged state.

    Written for pyiceberg 0.12.0: ``Transaction.table_metadata`` replays every staged update onto
    the table's metadata and returns a deep copy, at every access; pyiceberg's own producers read
    it a dozen times per snapshot, and the copy grows with the table's snapshots, tags and
    schemas (it was half of a commit's driver time). The metadata only changes when an update
    is staged (``_updates`` is a new tuple) or a commit replaces the table's metadata, so the
    copy is kept until either happens. It is frozen (pydantic), and pyiceberg's updates build
    new containers, so sharing it between readers is safe.
    """

    _memo: tuple[TableMetadata, tuple[TableUpdate, ...], TableMetadata] | None = None

    @property
    def table_metadata(self) -> TableMetadata:
        memo = self._memo
        if memo is not None and memo[0] is self._table.metadata and memo[1] is self._updates:
            return memo[2]
        metadata = Transaction.table_metadata.fget(self)  # type: ignore[attr-defined]
        self._memo = (self._table.metadata, self._updates, metadata)
        return metadata


def transaction(table: Table) -> Transaction:
    """``table.transaction()``, with ``table_metadata`` computed once per staged state (``_Transaction``).
    Every transaction tidelake opens is opened here."""
    return _Transaction(table)


def _branch_head(metadata: TableMetadata, branch: str) -> int | None:
    snapshot = metadata.snapshot_by_name(branch)
    return snapshot.snapshot_id if snapshot is not None else None


def _stage(
    tx: Transaction, table_name: str, *, expected_snapshot_id: int | None, removed: Iterable[DataFile],
    added: Iterable[DataFile], snapshot_properties: Mapping[str, str] | None, branch: str, replace: bool = False,
    deletes_added: Iterable[DataFile] = (), deletes_removed: Iterable[DataFile] = (),
) -> _OverwriteFiles | None:
    if tx._snapshot_producers:
        # A transaction with registered producers retries a failed commit by re-running only them
        # and dropping every other staged snapshot: this overwrite would silently vanish.
        raise OverwriteRejected(f"{table_name}: the transaction already stages a snapshot (append/delete); "
                                "the overwrite must be its only snapshot")
    found = _branch_head(tx.table_metadata, branch)
    if found != expected_snapshot_id:
        raise CommitConflictError(table_name, branch, expected_snapshot_id, found)
    removed, added = list(removed), list(added)
    deletes_added, deletes_removed = list(deletes_added), list(deletes_removed)
    if not removed and not added and not deletes_added and not deletes_removed:
        return None
    if (deletes_added or deletes_removed) and tx.table_metadata.format_version < 2:
        raise OverwriteRejected(f"{table_name}: a format v1 table cannot hold delete files (merge-on-read needs v2)")
    producer = tx.update_snapshot(snapshot_properties=dict(snapshot_properties or {}), branch=branch).overwrite()
    _keep_live_manifests(producer, deletes_added, deletes_removed, table_name)
    for data_file in removed:
        producer.delete_data_file(data_file)
    for data_file in added:
        producer.append_data_file(data_file)
    try:
        updates, requirements = producer._commit()
    except ValidationException as exc:
        producer._clean_all_uncommitted()
        raise OverwriteRejected(f"{table_name}: branch {branch!r} at snapshot {found}: {exc}") from exc
    if replace:
        removed_paths = {f.file_path for f in removed}
        folded = sum(d.record_count for d in deletes_removed if referenced_data_file(d) in removed_paths)
        try:
            updates = _as_replace(updates, table_name, folded)
        except OverwriteRejected:
            producer._clean_all_uncommitted()
            raise
    # Staged without registering the producer: a commit that fails because the branch moved then
    # raises instead of being rebased onto the new head (the plan was made against this one). The
    # update carries an AssertRefSnapshotId(branch, expected) requirement the catalog checks.
    tx._apply(updates, requirements)
    return producer


def _keep_live_manifests(producer: _OverwriteFiles, deletes_added: list[DataFile] = (),  # type: ignore[assignment]
                         deletes_removed: list[DataFile] = (), table_name: str = "") -> None:  # type: ignore[assignment]
    """The new snapshot keeps only manifests with a live (added or existing) file, and those it
    writes itself; it adds ``deletes_added`` and removes ``deletes_removed`` (position delete files).

    pyiceberg 0.12's overwrite writes the files it removes into a manifest of ``DELETED`` entries,
    then carries every manifest of the parent into the new snapshot, those holding nothing but
    ``DELETED`` entries of older snapshots included. So each overwrite that removes a file adds a
    manifest every later snapshot lists, reads on every commit (``_deleted_entries``,
    ``_existing_manifests``) and every scan plans: after N runs a head has N of them, and neither
    compaction (it is an overwrite too) nor snapshot expiry (the head still lists them) drops them.
    Iceberg's Java ``MergingSnapshotProducer`` keeps exactly the manifests that have added or
    existing files or were written by the committing snapshot; so does this. A ``DELETED`` entry
    only tells what its own snapshot removed: the snapshot that wrote it keeps it.

    pyiceberg 0.12's producer writes data manifests only (``delete_data_file`` of a delete file
    would even rewrite a delete manifest as a data manifest), so delete files go through the
    same hook: a ``DELETES`` manifest of the added ones, and every delete manifest holding a
    removed one rewritten (the rest ``EXISTING``, the removed ``DELETED``). The summary counts
    them as pyiceberg counts data files (``added-position-deletes``, ``total-delete-files``...).
    """
    if not callable(getattr(producer, "_process_manifests", None)) or not callable(getattr(producer, "_summary", None)):
        raise InternalsChanged("pyiceberg's snapshot producer has no _process_manifests()/_summary(): "
                               "spark/tables/internals.py needs updating for this pyiceberg")
    own = producer.snapshot_id
    removing = {f.file_path for f in deletes_removed}

    def live_or_own(manifests: list[ManifestFile]) -> list[ManifestFile]:
        shaped: list[ManifestFile] = []
        found: set[str] = set()
        for manifest in manifests:
            if removing and manifest.content == ManifestContent.DELETES and manifest.added_snapshot_id != own:
                entries = manifest.fetch_manifest_entry(producer._io, discard_deleted=True)
                gone = [e for e in entries if e.data_file.file_path in removing]
                if gone:
                    found.update(e.data_file.file_path for e in gone)
                    shaped.append(_write_delete_manifest(producer, manifest.partition_spec_id, [
                        *(_entry(e, ManifestEntryStatus.EXISTING, e.snapshot_id) for e in entries if e not in gone),
                        *(_entry(e, ManifestEntryStatus.DELETED, own) for e in gone),
                    ]))
                    continue
            shaped.append(manifest)
        if found != removing:
            raise OverwriteRejected(f"{table_name}: delete file(s) not live at the head: {sorted(removing - found)[:3]}")
        by_spec: dict[int, list[DataFile]] = {}
        for f in deletes_added:
            by_spec.setdefault(f.spec_id, []).append(f)
        for spec_id, files in sorted(by_spec.items()):
            shaped.append(_write_delete_manifest(producer, spec_id, [
                ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=own, sequence_number=None,
                                        file_sequence_number=None, data_file=f) for f in files]))
        kept = [m for m in shaped if m.has_added_files() or m.has_existing_files() or m.added_snapshot_id == own]
        return _merged(producer, kept)

    producer._process_manifests = live_or_own  # type: ignore[method-assign]
    if deletes_added or deletes_removed:
        producer._summary = lambda props=None: _summary_with_deletes(  # type: ignore[method-assign]
            producer, deletes_added, deletes_removed, props or {})


# Manifests of a head are merged once this many of one content and spec accumulate (the table property
# ``commit.manifest.min-count-to-merge`` overrides it): a minute-schedule pipeline adds a data manifest
# (and, merge-on-read, a delete manifest) per run, which every later commit and every scan plan reads.
MANIFEST_MIN_MERGE_COUNT = 16


def _merged(producer: _OverwriteFiles, manifests: list[ManifestFile]) -> list[ManifestFile]:
    """``manifests`` with the data manifests merged by pyiceberg's ``_ManifestMergeManager`` (as Iceberg
    Java's ``commit.manifest-merge.enabled`` does on append: bins of ``commit.manifest.target-size-bytes``,
    the bin holding this commit's own manifest only from ``min-count-to-merge`` manifests on), and the
    delete manifests of each spec merged into one once there are ``min-count-to-merge`` of them. Entries
    keep their sequence numbers (position deletes apply by them) and their status within this commit."""
    from pyiceberg.table import TableProperties
    from pyiceberg.table.update.snapshot import _ManifestMergeManager
    from pyiceberg.utils.properties import property_as_int

    props = producer._transaction.table_metadata.properties
    min_count = property_as_int(props, TableProperties.MANIFEST_MIN_MERGE_COUNT, MANIFEST_MIN_MERGE_COUNT) or MANIFEST_MIN_MERGE_COUNT
    target = property_as_int(props, TableProperties.MANIFEST_TARGET_SIZE_BYTES,
                             TableProperties.MANIFEST_TARGET_SIZE_BYTES_DEFAULT)
    data = [m for m in manifests if m.content == ManifestContent.DATA]
    deletes = [m for m in manifests if m.content == ManifestContent.DELETES]
    if len(data) >= min_count:
        data = _ManifestMergeManager(target_size_bytes=target, min_count_to_merge=min_count, merge_enabled=True,
                                     snapshot_producer=producer).merge_manifests(data)
    own = producer.snapshot_id
    by_spec: dict[int, list[ManifestFile]] = {}
    for m in deletes:
        by_spec.setdefault(m.partition_spec_id, []).append(m)
    merged_deletes: list[ManifestFile] = []
    for spec_id, group in sorted(by_spec.items()):
        if len(group) < min_count:
            merged_deletes += group
            continue
        entries = []
        for m in group:
            for e in m.fetch_manifest_entry(producer._io, discard_deleted=False):
                if e.status == ManifestEntryStatus.DELETED:
                    if e.snapshot_id == own:  # only what this commit removes stays recorded
                        entries.append(_entry(e, ManifestEntryStatus.DELETED, own))
                elif e.status == ManifestEntryStatus.ADDED and e.snapshot_id == own:
                    # This commit's own: its sequence number is assigned when it commits (read back from the
                    # uncommitted manifest, it would be the manifest's unassigned -1).
                    entries.append(ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=own,
                                                           sequence_number=None, file_sequence_number=None,
                                                           data_file=e.data_file))
                else:
                    entries.append(_entry(e, ManifestEntryStatus.EXISTING, e.snapshot_id))
        merged_deletes.append(_write_delete_manifest(producer, spec_id, entries))
    return data + merged_deletes


class _DeleteManifestWriter(ManifestWriterV2):
    """pyiceberg 0.12 writes v2 data manifests only; a delete manifest differs in its content alone."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


def _entry(entry: ManifestEntry, status: ManifestEntryStatus, snapshot_id: int | None) -> ManifestEntry:
    return ManifestEntry.from_args(status=status, snapshot_id=snapshot_id, sequence_number=entry.sequence_number,
                                   file_sequence_number=entry.file_sequence_number, data_file=entry.data_file)


def _write_delete_manifest(producer: _OverwriteFiles, spec_id: int, entries: list[ManifestEntry]) -> ManifestFile:
    writer = _DeleteManifestWriter(producer.spec(spec_id), producer.schema(), producer.new_manifest_output(),
                                   producer.snapshot_id, producer._compression)
    with writer:
        for entry in entries:
            writer.add_entry(entry)
    return writer.to_manifest_file()


def _summary_with_deletes(producer: _OverwriteFiles, deletes_added: list[DataFile], deletes_removed: list[DataFile],
                          snapshot_properties: Mapping[str, str]) -> Summary:
    """pyiceberg's ``_summary`` with the delete files counted too (its collector knows their content)."""
    from pyiceberg.table import TableProperties

    metadata = producer._transaction.table_metadata
    collector = SnapshotSummaryCollector(partition_summary_limit=int(metadata.properties.get(
        TableProperties.WRITE_PARTITION_SUMMARY_LIMIT, TableProperties.WRITE_PARTITION_SUMMARY_LIMIT_DEFAULT)))
    schema, specs = metadata.schema(), metadata.specs()
    for f in [*producer._added_data_files, *deletes_added]:
        collector.add_file(f, schema=schema, partition_spec=specs[f.spec_id])
    for f in [*producer._deleted_data_files, *deletes_removed]:
        collector.remove_file(f, schema=schema, partition_spec=specs[f.spec_id])
    parent = metadata.snapshot_by_id(producer._parent_snapshot_id) if producer._parent_snapshot_id is not None else None
    return update_snapshot_summaries(
        summary=Summary(operation=producer._operation, **collector.build(), **snapshot_properties),
        previous_summary=parent.summary if parent is not None else None,
    )


def stage_overwrite(
    tx: Transaction, table_name: str, *, expected_snapshot_id: int | None, removed: Iterable[DataFile],
    added: Iterable[DataFile], snapshot_properties: Mapping[str, str] | None = None, branch: str = MAIN_BRANCH,
    deletes_added: Iterable[DataFile] = (), deletes_removed: Iterable[DataFile] = (),
) -> int | None:
    """Stage one snapshot on ``branch`` that removes ``removed`` and adds ``added`` (data files),
    and adds ``deletes_added`` and removes ``deletes_removed`` (position delete files), in ``tx``.

    Written for pyiceberg 0.12.0: ``Transaction.update_snapshot().overwrite()`` gives the private
    ``_OverwriteFiles`` producer (``delete_data_file``/``append_data_file``); its ``_commit()``
    returns the snapshot updates and requirements, staged with ``Transaction._apply``. The snapshot
    is an "overwrite" (an "append" on a branch without snapshots) carrying ``snapshot_properties``
    in its summary. Schema and property changes staged earlier in ``tx`` commit with it, and the
    snapshot records the transaction's current schema. The overwrite must be ``tx``'s only snapshot.

    Returns:
        The new snapshot's id, or None when there is nothing to remove or add (nothing staged).

    Raises:
        CommitConflictError: the branch head in ``tx`` is not ``expected_snapshot_id``.
        OverwriteRejected: a removed file is not live at the head, or ``tx`` already stages a snapshot.
    """
    producer = _stage(tx, table_name, expected_snapshot_id=expected_snapshot_id, removed=removed, added=added,
                      snapshot_properties=snapshot_properties, branch=branch, deletes_added=deletes_added,
                      deletes_removed=deletes_removed)
    return None if producer is None else producer.snapshot_id


def commit_overwrite(
    table: Table, *, expected_snapshot_id: int | None, removed: Iterable[DataFile], added: Iterable[DataFile],
    snapshot_properties: Mapping[str, str] | None = None, branch: str = MAIN_BRANCH,
    deletes_added: Iterable[DataFile] = (), deletes_removed: Iterable[DataFile] = (),
) -> int | None:
    """Commit one overwrite snapshot (see ``stage_overwrite``) in its own transaction.

    Returns:
        The committed snapshot's id, or None when there was nothing to commit.

    Raises:
        CommitConflictError: the branch head is not ``expected_snapshot_id``, before or at the
            catalog commit (another writer got in between); nothing is committed.
        OverwriteRejected: see ``stage_overwrite``.
    """
    name = ".".join(table.name())
    tx = transaction(table)
    producer = _stage(tx, name, expected_snapshot_id=expected_snapshot_id, removed=removed, added=added,
                      snapshot_properties=snapshot_properties, branch=branch, deletes_added=deletes_added,
                      deletes_removed=deletes_removed)
    return _commit(table, tx, producer, expected_snapshot_id, branch)


def commit_replace(
    table: Table, *, expected_snapshot_id: int, removed: Iterable[DataFile], added: Iterable[DataFile],
    snapshot_properties: Mapping[str, str] | None = None, branch: str = MAIN_BRANCH, schema_id: int | None = None,
    move_tags: Iterable[str] = (), deletes_removed: Iterable[DataFile] = (),
) -> int | None:
    """Commit one ``replace`` snapshot: files removed and added without changing the rows (compaction).

    Iceberg's ``replace`` tells readers and incremental consumers that no row changed. Written
    for pyiceberg 0.12.0, which has no replace producer and whose ``update_snapshot_summaries``
    only accepts append/overwrite/delete: the snapshot is produced as an overwrite (the same
    manifests, branch-head requirement and conflict handling as ``commit_overwrite``), then its
    staged ``AddSnapshotUpdate`` is rebuilt with the summary's operation set to ``replace``
    (the operation lives only in the summary, never in the manifest list or manifests).
    ``schema_id`` (default: the current schema) is the schema the snapshot records, so a
    compaction of a head written with an older schema keeps it. ``move_tags`` (tags on
    ``expected_snapshot_id``) point at the new snapshot after the same commit: same rows, same
    schema, fewer files. ``deletes_removed`` are the position delete files of the removed data
    files, applied by the rewrite (the added files hold the removed rows less those deletes).

    Raises:
        CommitConflictError: see ``commit_overwrite``.
        OverwriteRejected: the added files do not hold as many rows as the removed ones, or see
            ``stage_overwrite``.
    """
    name = ".".join(table.name())
    tx = transaction(table)
    move_tags = tuple(move_tags)
    for tag in move_tags:
        ref = tx.table_metadata.refs.get(tag)
        if ref is None or ref.snapshot_ref_type != SnapshotRefType.TAG or ref.snapshot_id != expected_snapshot_id:
            raise OverwriteRejected(f"{name}: {tag!r} is not a tag on snapshot {expected_snapshot_id}")
    schema_id = tx.table_metadata.current_schema_id if schema_id is None else schema_id
    if schema_id == tx.table_metadata.current_schema_id:
        producer = _stage(tx, name, expected_snapshot_id=expected_snapshot_id, removed=removed, added=added,
                          snapshot_properties=snapshot_properties, branch=branch, replace=True,
                          deletes_removed=deletes_removed)
    else:
        with writing_with_schema(tx, schema_id):
            producer = _stage(tx, name, expected_snapshot_id=expected_snapshot_id, removed=removed, added=added,
                              snapshot_properties=snapshot_properties, branch=branch, replace=True,
                              deletes_removed=deletes_removed)
    if producer is not None:
        for tag in move_tags:
            ManageSnapshots(tx).remove_tag(tag).create_tag(producer.snapshot_id, tag).commit()
    return _commit(table, tx, producer, expected_snapshot_id, branch)


def _as_replace(updates: tuple[TableUpdate, ...], table_name: str, folded: int) -> tuple[TableUpdate, ...]:
    out: list[TableUpdate] = []
    for update in updates:
        if isinstance(update, AddSnapshotUpdate):
            summary = update.snapshot.summary
            if summary is None or summary.operation != Operation.OVERWRITE:
                raise InternalsChanged(f"{table_name}: pyiceberg staged a {summary and summary.operation} snapshot "
                                       "where an overwrite was expected")
            props = summary.additional_properties
            added, deleted = int(props.get("added-records", "0")), int(props.get("deleted-records", "0"))
            deleted -= folded  # rows the removed delete files had deleted
            if added != deleted:
                raise OverwriteRejected(f"{table_name}: a replace must keep the rows: {deleted} removed, {added} added")
            replaced = Summary(Operation.REPLACE, **props)
            update = AddSnapshotUpdate(snapshot=update.snapshot.model_copy(update={"summary": replaced}))
        out.append(update)
    return tuple(out)


def _commit(table: Table, tx: Transaction, producer: _OverwriteFiles | None, expected_snapshot_id: int | None,
            branch: str) -> int | None:
    name = ".".join(table.name())
    if producer is None:
        return None
    try:
        tx.commit_transaction()
    except CommitFailedException as exc:
        producer._clean_all_uncommitted()  # the catalog refused it: its manifests are unreferenced
        table.refresh()
        raise CommitConflictError(name, branch, expected_snapshot_id, _branch_head(table.metadata, branch)) from exc
    return producer.snapshot_id


# pyiceberg 0.12 has no public way to write a snapshot with a schema other than the table's
# current one, but a repaired tag must keep the schema it had at its W (a later ADD COLUMN
# must not appear in an older tag).
@contextmanager
def writing_with_schema(tx: Transaction, schema_id: int) -> Iterator[None]:
    """Snapshots staged inside the block carry schema ``schema_id``; the current schema is restored after.

    pyiceberg stamps a snapshot with the transaction's current schema and writes data files
    with it, so the block makes ``schema_id`` current for its duration: two
    ``set-current-schema`` updates around the writes, committed with them in one transaction
    (readers never see the older schema as current).

    Raises:
        InternalsChanged: the schema does not exist, or pyiceberg's internals changed.
    """
    stage = getattr(tx, "_stage", None)
    if stage is None:
        raise InternalsChanged("pyiceberg's Transaction has no _stage(): spark/tables/internals.py needs updating "
                                 "for this pyiceberg version")
    current = tx.table_metadata.current_schema_id
    if tx.table_metadata.schema_by_id(schema_id) is None:
        raise InternalsChanged(f"table {tx._table.name()} has no schema {schema_id} to write with")
    stage((SetCurrentSchemaUpdate(schema_id=schema_id),))
    try:
        yield
    finally:
        stage((SetCurrentSchemaUpdate(schema_id=current),))


def _stager(tx: Transaction) -> Callable[..., Any]:
    """``Transaction._stage``: stages metadata updates without pyiceberg's own checks.

    Raises:
        InternalsChanged: pyiceberg's internals changed.
    """
    stage = getattr(tx, "_stage", None)
    if stage is None:
        raise InternalsChanged("pyiceberg's Transaction has no _stage(): spark/tables/internals.py needs updating "
                               "for this pyiceberg version")
    return stage


def unsort(tx: Transaction) -> None:
    """Stage the table's default sort order back to unsorted (order id 0).

    Written for pyiceberg 0.12.0: ``UpdateSortOrder`` with no fields asks for "the last added" sort
    order without adding one (ValueError); the ``add-sort-order`` (when the table never had the
    unsorted order: one created sorted) and ``set-default-sort-order`` updates are staged with
    ``Transaction._stage`` instead.

    Raises:
        InternalsChanged: pyiceberg's internals changed.
    """
    stage = _stager(tx)
    metadata = tx.table_metadata
    if metadata.default_sort_order_id == UNSORTED_SORT_ORDER_ID:
        return
    updates: tuple[Any, ...] = (SetDefaultSortOrderUpdate(sort_order_id=UNSORTED_SORT_ORDER_ID),)
    if not any(order.order_id == UNSORTED_SORT_ORDER_ID for order in metadata.sort_orders):
        updates = (AddSortOrderUpdate(sort_order=UNSORTED_SORT_ORDER), *updates)
    stage(updates)


def set_layout(tx: Transaction, spec: PartitionSpec, sort_order: SortOrder) -> None:
    """Stage ``spec``'s fields and ``sort_order``'s as the table's default partition spec and sort
    order: an existing spec or order of the same fields is made the default, else one is added
    (new spec, partition field and order ids; ``spec``'s and ``sort_order``'s own ids are ignored).

    Written for pyiceberg 0.12.0: its ``UpdateSpec``/``UpdateSortOrder`` assert the default ids
    the transaction has, which the catalog checks against the committed table, so two of them
    in one transaction (clear the layout, drop and add columns, lay the table out again) can
    never commit. The updates are staged with ``Transaction._stage``, as ``unsort`` stages its own;
    the transaction's other requirements (the branch head) still guard the commit.

    Raises:
        InternalsChanged: pyiceberg's internals changed.
    """
    stage = _stager(tx)
    metadata = tx.table_metadata
    updates: list[Any] = []

    def spec_shape(s: PartitionSpec) -> list[tuple[int, str, str]]:
        return [(f.source_id, repr(f.transform), f.name) for f in s.fields]

    found = next((s for s in metadata.partition_specs if spec_shape(s) == spec_shape(spec)), None)
    if found is None:
        last = metadata.last_partition_id or PARTITION_FIELD_ID_START - 1
        found = PartitionSpec(*(PartitionField(source_id=f.source_id, field_id=last + 1 + i, transform=f.transform, name=f.name)
                                for i, f in enumerate(spec.fields)),
                              spec_id=max(s.spec_id for s in metadata.partition_specs) + 1)
        updates.append(AddPartitionSpecUpdate(spec=found))
    if found.spec_id != metadata.default_spec_id:
        updates.append(SetDefaultSpecUpdate(spec_id=found.spec_id))

    def order_shape(o: SortOrder) -> list[tuple[int, str, str, str]]:
        return [(f.source_id, repr(f.transform), str(f.direction), str(f.null_order)) for f in o.fields]

    order = next((o for o in metadata.sort_orders if order_shape(o) == order_shape(sort_order)), None)
    if order is None:
        order = SortOrder(*sort_order.fields, order_id=max(o.order_id for o in metadata.sort_orders) + 1) if sort_order.fields \
            else UNSORTED_SORT_ORDER
        updates.append(AddSortOrderUpdate(sort_order=order))
    if order.order_id != metadata.default_sort_order_id:
        updates.append(SetDefaultSortOrderUpdate(sort_order_id=order.order_id))
    if updates:
        stage(tuple(updates))
