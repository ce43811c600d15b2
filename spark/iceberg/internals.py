"""The one module that touches pyiceberg's private API.

Written for pyiceberg 0.12.0. pyiceberg has no public "write these rows to data files and give me
their ``DataFile``s" nor "commit this set of removed and added files as one snapshot"; both exist
inside it (``Transaction.append``/``overwrite`` use them). Every private name tidelake relies on is
used here, once, in a small function; ``tests/spark/iceberg/test_internals.py`` asserts the names,
signatures and round-trip behaviour, so an upgrade that changes them fails there, loudly, and not
in a pipeline.
"""

from __future__ import annotations

import importlib.util
import uuid
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
from pyiceberg.exceptions import CommitFailedException, ValidationException
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files
from pyiceberg.manifest import DataFile, ManifestFile
from pyiceberg.table import FileScanTask, Table, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.snapshots import Operation, Summary
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER, UNSORTED_SORT_ORDER_ID
from pyiceberg.table.update import AddSnapshotUpdate, AddSortOrderUpdate, SetCurrentSchemaUpdate, SetDefaultSortOrderUpdate, TableUpdate
from pyiceberg.table.update.snapshot import ManageSnapshots, _OverwriteFiles
from pyiceberg.transforms import IdentityTransform

from spark.iceberg.errors import CommitConflictError, InternalsChanged, LayoutUnavailable, OverwriteRejected

WRITTEN_FOR_PYICEBERG = "0.12.0"
MAIN_BRANCH = "main"


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


def read_data_file(io: FileIO, metadata: TableMetadata, data_file: DataFile) -> pa.Table:
    """Read one data file projected onto the table's current schema (columns matched by field id,
    so files written before a rename, an added column or a widening read as the table does).

    Written for pyiceberg 0.12.0: ``ArrowScan`` and ``FileScanTask`` are what ``DataScan.to_arrow``
    runs. Delete files are not applied: the planner refuses snapshots that have any.
    """
    scan = ArrowScan(metadata, io, metadata.schema(), AlwaysTrue())
    return scan.to_table([FileScanTask(data_file)])


def _branch_head(metadata: TableMetadata, branch: str) -> int | None:
    snapshot = metadata.snapshot_by_name(branch)
    return snapshot.snapshot_id if snapshot is not None else None


def _stage(
    tx: Transaction, table_name: str, *, expected_snapshot_id: int | None, removed: Iterable[DataFile],
    added: Iterable[DataFile], snapshot_properties: Mapping[str, str] | None, branch: str, replace: bool = False,
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
    if not removed and not added:
        return None
    producer = tx.update_snapshot(snapshot_properties=dict(snapshot_properties or {}), branch=branch).overwrite()
    _keep_live_manifests(producer)
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
        try:
            updates = _as_replace(updates, table_name)
        except OverwriteRejected:
            producer._clean_all_uncommitted()
            raise
    # Staged without registering the producer: a commit that fails because the branch moved then
    # raises instead of being rebased onto the new head (the plan was made against this one). The
    # update carries an AssertRefSnapshotId(branch, expected) requirement the catalog checks.
    tx._apply(updates, requirements)
    return producer


def _keep_live_manifests(producer: _OverwriteFiles) -> None:
    """The new snapshot keeps only manifests with a live (added or existing) file, and those it writes itself.

    pyiceberg 0.12's overwrite writes the files it removes into a manifest of ``DELETED`` entries,
    then carries every manifest of the parent into the new snapshot, those holding nothing but
    ``DELETED`` entries of older snapshots included. So each overwrite that removes a file adds a
    manifest every later snapshot lists, reads on every commit (``_deleted_entries``,
    ``_existing_manifests``) and every scan plans: after N runs a head has N of them, and neither
    compaction (it is an overwrite too) nor snapshot expiry (the head still lists them) drops them.
    Iceberg's Java ``MergingSnapshotProducer`` keeps exactly the manifests that have added or
    existing files or were written by the committing snapshot; so does this. A ``DELETED`` entry
    only tells what its own snapshot removed: the snapshot that wrote it keeps it.
    """
    if not callable(getattr(producer, "_process_manifests", None)):
        raise InternalsChanged("pyiceberg's snapshot producer has no _process_manifests(): spark/iceberg/internals.py "
                               "needs updating for this pyiceberg")
    own = producer.snapshot_id

    def live_or_own(manifests: list[ManifestFile]) -> list[ManifestFile]:
        return [m for m in manifests if m.has_added_files() or m.has_existing_files() or m.added_snapshot_id == own]

    producer._process_manifests = live_or_own  # type: ignore[method-assign]


def stage_overwrite(
    tx: Transaction, table_name: str, *, expected_snapshot_id: int | None, removed: Iterable[DataFile],
    added: Iterable[DataFile], snapshot_properties: Mapping[str, str] | None = None, branch: str = MAIN_BRANCH,
) -> int | None:
    """Stage one snapshot on ``branch`` that removes ``removed`` and adds ``added``, in ``tx``.

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
                      snapshot_properties=snapshot_properties, branch=branch)
    return None if producer is None else producer.snapshot_id


def commit_overwrite(
    table: Table, *, expected_snapshot_id: int | None, removed: Iterable[DataFile], added: Iterable[DataFile],
    snapshot_properties: Mapping[str, str] | None = None, branch: str = MAIN_BRANCH,
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
    tx = table.transaction()
    producer = _stage(tx, name, expected_snapshot_id=expected_snapshot_id, removed=removed, added=added,
                      snapshot_properties=snapshot_properties, branch=branch)
    return _commit(table, tx, producer, expected_snapshot_id, branch)


def commit_replace(
    table: Table, *, expected_snapshot_id: int, removed: Iterable[DataFile], added: Iterable[DataFile],
    snapshot_properties: Mapping[str, str] | None = None, branch: str = MAIN_BRANCH, schema_id: int | None = None,
    move_tags: Iterable[str] = (),
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
    schema, fewer files.

    Raises:
        CommitConflictError: see ``commit_overwrite``.
        OverwriteRejected: the added files do not hold as many rows as the removed ones, or see
            ``stage_overwrite``.
    """
    name = ".".join(table.name())
    tx = table.transaction()
    move_tags = tuple(move_tags)
    for tag in move_tags:
        ref = tx.table_metadata.refs.get(tag)
        if ref is None or ref.snapshot_ref_type != SnapshotRefType.TAG or ref.snapshot_id != expected_snapshot_id:
            raise OverwriteRejected(f"{name}: {tag!r} is not a tag on snapshot {expected_snapshot_id}")
    schema_id = tx.table_metadata.current_schema_id if schema_id is None else schema_id
    if schema_id == tx.table_metadata.current_schema_id:
        producer = _stage(tx, name, expected_snapshot_id=expected_snapshot_id, removed=removed, added=added,
                          snapshot_properties=snapshot_properties, branch=branch, replace=True)
    else:
        with writing_with_schema(tx, schema_id):
            producer = _stage(tx, name, expected_snapshot_id=expected_snapshot_id, removed=removed, added=added,
                              snapshot_properties=snapshot_properties, branch=branch, replace=True)
    if producer is not None:
        for tag in move_tags:
            ManageSnapshots(tx).remove_tag(tag).create_tag(producer.snapshot_id, tag).commit()
    return _commit(table, tx, producer, expected_snapshot_id, branch)


def _as_replace(updates: tuple[TableUpdate, ...], table_name: str) -> tuple[TableUpdate, ...]:
    out: list[TableUpdate] = []
    for update in updates:
        if isinstance(update, AddSnapshotUpdate):
            summary = update.snapshot.summary
            if summary is None or summary.operation != Operation.OVERWRITE:
                raise InternalsChanged(f"{table_name}: pyiceberg staged a {summary and summary.operation} snapshot "
                                       "where an overwrite was expected")
            props = summary.additional_properties
            added, deleted = props.get("added-records", "0"), props.get("deleted-records", "0")
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
        raise InternalsChanged("pyiceberg's Transaction has no _stage(): spark/iceberg/internals.py needs updating "
                                 "for this pyiceberg version")
    current = tx.table_metadata.current_schema_id
    if tx.table_metadata.schema_by_id(schema_id) is None:
        raise InternalsChanged(f"table {tx._table.name()} has no schema {schema_id} to write with")
    stage((SetCurrentSchemaUpdate(schema_id=schema_id),))
    try:
        yield
    finally:
        stage((SetCurrentSchemaUpdate(schema_id=current),))


def unsort(tx: Transaction) -> None:
    """Stage the table's default sort order back to unsorted (order id 0).

    Written for pyiceberg 0.12.0: ``UpdateSortOrder`` with no fields asks for "the last added" sort
    order without adding one (ValueError); the ``add-sort-order`` (when the table never had the
    unsorted order: one created sorted) and ``set-default-sort-order`` updates are staged with
    ``Transaction._stage`` instead.

    Raises:
        InternalsChanged: pyiceberg's internals changed.
    """
    stage = getattr(tx, "_stage", None)
    if stage is None:
        raise InternalsChanged("pyiceberg's Transaction has no _stage(): spark/iceberg/internals.py needs updating "
                               "for this pyiceberg version")
    metadata = tx.table_metadata
    if metadata.default_sort_order_id == UNSORTED_SORT_ORDER_ID:
        return
    updates: tuple[Any, ...] = (SetDefaultSortOrderUpdate(sort_order_id=UNSORTED_SORT_ORDER_ID),)
    if not any(order.order_id == UNSORTED_SORT_ORDER_ID for order in metadata.sort_orders):
        updates = (AddSortOrderUpdate(sort_order=UNSORTED_SORT_ORDER), *updates)
    stage(updates)
