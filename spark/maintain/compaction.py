"""Compaction: bin-pack a table's small data files, per partition (bucket), into target-size files.

Every run leaves a few small files per table (and, merge-on-read, the default, delete files); planning and reading cost grows
with their number. Compaction uses the data plane's mechanism (``spark.write``): the driver
plans bins from the branch head's manifests (metadata only), the executors read each bin's
files and write its rows sorted by key as new files (one task per bin, ``DataFile`` metadata
back), and the driver commits one ``replace`` snapshot removing every input and adding every
output, checked against the head it planned from. The rows at the head are unchanged.

The watermark tags on the head (the latest W; every W since a table last changed) move to the
replace snapshot in the same commit: it reads the same rows with the same schema from fewer
files, so a read at the latest W gains from compaction at once, not from the next run on.
Their published records then name the new snapshot (``spark.maintain.run``). Older tags keep
their snapshots (and files) until they retire; the replaced files stay until snapshot expiry
drops the last snapshot that references them.

Files with position deletes (merge-on-read runs) are rewritten with their deletes applied,
whatever their size, and the replace removes those delete files with them: compaction is where
merge-on-read's deletes fold back into the data files.

A crash before the commit leaves the table as it was plus unreferenced output files, which
orphan cleanup deletes after its grace period; a rerun plans afresh.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata

from cdc_codecs import TidelakeError
from spark.tables.catalog import KEY_COLUMNS
from spark.tables import internals
from spark.tables.errors import CommitConflictError
from spark.tables.files import is_small, live_files
from spark.write.target import TableTarget
from spark.runtime.runners import Runner
from spark.archive.lease import LeaseLostError
from spark.core.watermark import tag_name, watermark_tags
from spark.runtime.tasks import sized

TARGET_FILE_SIZE = "write.target-file-size-bytes"
MAINTENANCE = "tidelake.maintenance"  # snapshot summary: which maintenance step wrote the snapshot


class CompactionError(TidelakeError):
    """A compaction task wrote a different number of rows than its input files hold."""


@dataclass(frozen=True)
class CompactionReport:
    table: str
    dry_run: bool
    files_before: int
    bytes_before: int
    bins: int
    files_rewritten: int
    bytes_rewritten: int
    files_written: int
    bytes_written: int
    snapshot_id: int | None  # the replace snapshot (None: nothing to do, or a dry run)
    planned: tuple[tuple[str, ...], ...] = ()  # dry run: each bin's input paths
    moved: tuple[int, ...] = ()  # the Ws whose tags moved to the replace snapshot (a dry run: would move)
    deletes_removed: int = 0  # position delete files folded into the rewritten files

    @property
    def files_after(self) -> int:
        return self.files_before - self.files_rewritten + self.files_written


@dataclass(frozen=True)
class CompactTask:
    """One bin: files of one partition whose rows become about ``target_file_size`` bytes of files."""

    target: TableTarget
    files: tuple[DataFile, ...]
    key_columns: tuple[str, ...]
    deletes: tuple[tuple[DataFile, ...], ...] = ()  # each file's position delete files (empty: none)

    def deletes_of(self, index: int) -> tuple[DataFile, ...]:
        return self.deletes[index] if self.deletes else ()


def compact_bin(task: CompactTask) -> tuple[DataFile, ...]:
    """Executor side: read the bin's files (their deletes applied), write their rows sorted by key;
    return the new files."""
    metadata, io = task.target.metadata(), task.target.io()
    # Files of other writers (pyiceberg's own append, repair) may read as large_string where ours read as string.
    rows = pa.concat_tables([internals.read_data_file(io, metadata, f, task.deletes_of(i)) for i, f in enumerate(task.files)],
                            promote_options="permissive")
    if task.key_columns:
        rows = rows.sort_by([(k, "ascending") for k in task.key_columns])
    written = tuple(internals.write_data_files(io, metadata, rows))
    # A file's delete files name each of its positions once (rewrite.delete_keys).
    expected = sum(f.record_count for f in task.files) - sum(d.record_count for ds in task.deletes for d in ds)
    if sum(f.record_count for f in written) != expected:
        raise CompactionError(f"{task.target.name}: a bin of {len(task.files)} files holds {expected} rows, "
                              f"but {sum(f.record_count for f in written)} were written")
    return written


def plan_bins(files: Sequence[DataFile], target_file_size: int, min_input_files: int,
              with_deletes: Collection[str] = frozenset()) -> list[tuple[DataFile, ...]]:
    """Bins of small files and files with deletes (paths in ``with_deletes``), each within one
    partition of one spec, of at most ``target_file_size`` input bytes (first fit, largest first);
    a bin of fewer than ``max(2, min_input_files)`` files without deletes would gain nothing and
    is left out."""
    small = [f for f in files if is_small(f, target_file_size) or f.file_path in with_deletes]
    groups: dict[tuple[int, tuple[object, ...]], list[DataFile]] = {}
    for f in small:
        groups.setdefault((f.spec_id, tuple(f.partition[i] for i in range(len(f.partition)))), []).append(f)
    bins: list[tuple[DataFile, ...]] = []
    for _, group in sorted(groups.items(), key=lambda kv: repr(kv[0])):
        open_bins: list[tuple[int, list[DataFile]]] = []
        for f in sorted(group, key=lambda f: (-f.file_size_in_bytes, f.file_path)):
            for i, (size, members) in enumerate(open_bins):
                if size + f.file_size_in_bytes <= target_file_size:
                    members.append(f)
                    open_bins[i] = (size + f.file_size_in_bytes, members)
                    break
            else:
                open_bins.append((f.file_size_in_bytes, [f]))
        bins.extend(tuple(members) for _, members in open_bins
                    if len(members) >= max(2, min_input_files) or any(f.file_path in with_deletes for f in members))
    return bins


def watermark_tags_on(metadata: TableMetadata, snapshot_id: int) -> dict[int, str]:
    """{W: tag} of the ``wm_<W>`` tags on ``snapshot_id``."""
    return {w: tag_name(w) for w, tagged in watermark_tags(metadata.refs).items() if tagged == snapshot_id}


def _write_metadata(metadata: TableMetadata, schema_id: int, target_file_size: int) -> TableMetadata:
    """What the executors write with: the head's schema, and the compaction's target size."""
    return metadata.model_copy(update={
        "current_schema_id": schema_id,
        "properties": {**metadata.properties, TARGET_FILE_SIZE: str(target_file_size)},
    })


def compact_table(
    table: Table, runner: Runner, *, target_file_size: int, min_input_files: int = 2, dry_run: bool = False,
    check: Callable[[], None] = lambda: None, snapshot_properties: Mapping[str, str] | None = None,
    move_tags: bool = True,
) -> CompactionReport:
    """Bin-pack the small data files of ``table``'s ``main`` head into files of about ``target_file_size``.

    Args:
        runner: runs one ``compact_bin`` per bin (``LocalRunner``, ``SparkRunner``, or a
            ``DriverFirstRunner``, which runs bins of at most ``driver_max_messages`` rows in the driver).
        check: called right before the commit (the pipeline lease's ``check``).
        snapshot_properties: added to the replace snapshot's summary.
        move_tags: move the head's watermark tags to the replace snapshot (False: they stay, and
            read the files they read; ``bench maintenance`` compares the two).

    Raises:
        DeleteFilesPresent: the head has equality deletes or position deletes that name no one data
            file (another engine wrote them); nothing is done.
        CommitConflictError: the head moved while the bins were written; the written files are
            deleted and nothing is committed.
    """
    name = ".".join(table.name())
    head = table.metadata.snapshot_by_name(internals.MAIN_BRANCH)
    if head is None:
        return CompactionReport(name, dry_run, 0, 0, 0, 0, 0, 0, 0, None)
    live = live_files(table.io, head)
    files = list(live.data)
    bins = plan_bins(files, target_file_size, min_input_files, live.deletes.keys())
    inputs = [f for b in bins for f in b]
    # Delete files naming a file no longer live delete nothing: the replace drops them too (alone, if no bin).
    folded = [d for f in inputs for d in live.deletes_of(f)] + list(live.dangling)
    moved = watermark_tags_on(table.metadata, head.snapshot_id) if (bins or folded) and move_tags else {}

    def report(outputs: Sequence[DataFile] = (), snapshot_id: int | None = None) -> CompactionReport:
        return CompactionReport(
            name, dry_run, len(files), sum(f.file_size_in_bytes for f in files), len(bins), len(inputs),
            sum(f.file_size_in_bytes for f in inputs), len(outputs), sum(f.file_size_in_bytes for f in outputs),
            snapshot_id, tuple(tuple(f.file_path for f in b) for b in bins) if dry_run else (), tuple(sorted(moved)),
            len(folded),
        )

    if dry_run or not (bins or folded):
        return report()
    schema_id = head.schema_id if head.schema_id is not None else table.metadata.current_schema_id
    metadata = _write_metadata(table.metadata, schema_id, target_file_size)
    schema_names = set(metadata.schema().column_names)
    keys = tuple(k for k in json.loads(table.properties.get(KEY_COLUMNS, "[]")) if k in schema_names)
    target = TableTarget.from_metadata(name, metadata, table.io.properties)
    tasks = [CompactTask(target, b, keys, tuple(live.deletes_of(f) for f in b) if live.deletes else ()) for b in bins]
    # Sized by the rows the bins rewrite: a job's DriverFirstRunner keeps small ones in the driver.
    runner = sized(runner, sum(f.record_count for f in inputs))
    outputs = [f for written in runner.map(compact_bin, tasks) for f in written] if tasks else []
    try:
        check()
        snapshot_id = internals.commit_replace(
            table, expected_snapshot_id=head.snapshot_id, removed=inputs, added=outputs, schema_id=schema_id,
            snapshot_properties={MAINTENANCE: "compaction", **(snapshot_properties or {})}, move_tags=moved.values(),
            deletes_removed=folded,
        )
    except (CommitConflictError, LeaseLostError):
        for f in outputs:  # certainly not committed: nothing references them
            table.io.delete(f.file_path)
        raise
    return report(outputs, snapshot_id)
