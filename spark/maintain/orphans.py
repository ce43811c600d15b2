"""Orphan cleanup: delete files nothing references, once they are older than a grace period.

Orphans are what crashed or refused work leaves: data files and manifests written for a commit
that never happened (a run or a compaction that died, a ``CommitConflictError``), metadata files
that fell out of the metadata log, raw segments of a land attempt that never wrote its manifest,
change-log Parquet files whose side output (written last) never appeared.

Referenced, for a table: the current ``metadata.json`` and those in its metadata log; every
snapshot's manifest list, manifests and every file their entries name (deleted entries too:
a cheap superset); statistics files. For the archive: every segment a manifest lists; a
change-log Parquet file when its side output exists.

Never deleted: a referenced file, or a file younger than ``grace_seconds`` (a run may be writing
it now: the grace period must exceed the longest run), or one whose store gives no time. The
table's metadata is read again after listing; if it changed, files it now references are kept.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pyarrow.fs as pafs
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.table import Table

from cdc_codecs import TidelakeError
from spark.archive import layout
from spark.maintain.archive_files import archive_file
from spark.archive.manifest import list_manifests, read_manifest
from spark.archive.storage import Storage, StoredFile


class OrphanCleanupUnavailable(TidelakeError):
    """A table's FileIO cannot list its location (only pyarrow's FileIO can)."""


@dataclass(frozen=True)
class OrphanReport:
    dry_run: bool
    table_files: int = 0
    table_bytes: int = 0
    archive_files: int = 0
    archive_bytes: int = 0
    young: int = 0  # unreferenced but within the grace period: kept
    paths: tuple[str, ...] = field(default=(), repr=False)  # dry run: what would be deleted


def remove_orphans(
    storage: Storage, catalog_tables: Sequence[Table], *, grace_seconds: float, now: dt.datetime,
    dry_run: bool = False, pipelines: Sequence[str] = (),
) -> OrphanReport:
    """Delete the unreferenced files older than ``grace_seconds`` under each table's location and,
    for each of ``pipelines``, in its archive segments and change log.

    Raises:
        OrphanCleanupUnavailable: a table's FileIO is not pyarrow's (it cannot list).
    """
    cutoff = now - dt.timedelta(seconds=grace_seconds)
    # Tables sharing a location are cleaned together: a table renamed keeps its location, and a
    # table created later under the old name gets the same one, so neither's files are orphans
    # of the other.
    by_root: dict[str, tuple[pafs.FileSystem, list[Table]]] = {}
    for t in catalog_tables:
        fs, root = _root(t)
        by_root.setdefault(root, (fs, []))[1].append(t)
    table_files = table_bytes = archive_files = archive_bytes = young = 0
    paths: list[str] = []
    for root, (fs, tables) in by_root.items():
        table = tables[0]
        nested = [r for r in by_root if r != root and r.startswith(root + "/")]
        candidates, kept = _table_orphans(tables, fs, root, nested, cutoff)
        young += kept
        location = table.location().rstrip("/")
        for info in candidates:
            uri = location + info.path[len(root):]
            paths.append(uri)
            table_files, table_bytes = table_files + 1, table_bytes + (info.size or 0)
            if not dry_run:
                _delete(table, uri)
    for pipeline in pipelines:
        candidates_a, kept = _archive_orphans(storage, pipeline, cutoff)
        young += kept
        for f in candidates_a:
            paths.append(f"{storage.url}/{f.path}")
            archive_files, archive_bytes = archive_files + 1, archive_bytes + f.size
            if not dry_run:
                storage.delete(f.path)
    return OrphanReport(dry_run, table_files, table_bytes, archive_files, archive_bytes, young,
                        tuple(paths) if dry_run else ())


def _delete(table: Table, uri: str) -> None:
    try:
        table.io.delete(uri)
    except FileNotFoundError:
        pass  # gone already: a rerun of a cleanup that died half-way


def _root(table: Table) -> tuple[pafs.FileSystem, str]:
    if not isinstance(table.io, PyArrowFileIO):
        raise OrphanCleanupUnavailable(f"table {'.'.join(table.name())}: FileIO {type(table.io).__name__} cannot list "
                                       "files; orphan cleanup needs pyarrow's (py-io-impl unset)")
    scheme, netloc, path = PyArrowFileIO.parse_location(table.location(), table.io.properties)
    return table.io.fs_by_scheme(scheme, netloc), path.rstrip("/")


def _normalised(table: Table, locations: Iterable[str]) -> set[str]:
    return {PyArrowFileIO.parse_location(loc, table.io.properties)[2] for loc in locations}


def referenced_files(table: Table) -> set[str]:
    """Every file ``table``'s metadata references, as full locations."""
    metadata = table.metadata
    out: set[str] = {table.metadata_location, *(entry.metadata_file for entry in metadata.metadata_log)}
    out.update(s.statistics_path for s in metadata.statistics)
    out.update(s.statistics_path for s in metadata.partition_statistics)
    manifests = {}
    for snapshot in metadata.snapshots:
        out.add(snapshot.manifest_list)
        for m in snapshot.manifests(table.io):
            manifests.setdefault(m.manifest_path, m)  # manifests are shared by many snapshots: read each once
    out.update(manifests)
    with ThreadPoolExecutor(max_workers=8) as pool:
        for entries in pool.map(lambda m: m.fetch_manifest_entry(table.io, discard_deleted=False), manifests.values()):
            out.update(e.data_file.file_path for e in entries)
    return out


def _table_orphans(tables: list[Table], fs: pafs.FileSystem, root: str, nested: list[str],
                   cutoff: dt.datetime) -> tuple[list[pafs.FileInfo], int]:
    """Unreferenced files under ``root``, the location of every table of ``tables``: (old enough to delete, kept as young)."""
    referenced = {p for t in tables for p in _normalised(t, referenced_files(t))}
    listed = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    unreferenced = [info for info in listed if info.type == pafs.FileType.File and info.path not in referenced
                    and not any(info.path.startswith(n + "/") for n in nested)]  # another table's files
    old = [info for info in unreferenced if info.mtime is not None and info.mtime < cutoff]
    for table in tables:
        location = table.metadata_location
        table.refresh()
        if table.metadata_location != location:  # committed meanwhile: keep what it references now
            now_referenced = _normalised(table, referenced_files(table))
            old = [info for info in old if info.path not in now_referenced]
    return old, len(unreferenced) - len(old)


def _archive_orphans(storage: Storage, pipeline: str, cutoff: dt.datetime) -> tuple[list[StoredFile], int]:
    """Segments no manifest lists; change-log Parquet files without their side output; net change
    a run left behind (a run removes its own when it ends, and maintenance holds the lease runs take)."""
    listed = [f for f in storage.list_files(layout.segments_dir(pipeline))] + storage.list_files(layout.changelog_root(pipeline))
    paths = {f.path for f in listed}
    in_manifests = {s.path for _, _, m in list_manifests(storage, pipeline)
                    for p in read_manifest(storage, m).partitions for s in p.segments}
    orphans = storage.list_files(layout.net_change_dir(pipeline))
    for f in listed:
        what = archive_file(pipeline, f.path)
        if what is None:
            continue  # not a file maintenance knows: left alone
        if what.kind == "segment" and f.path not in in_manifests or what.kind == "changelog" and f.path.removesuffix(".parquet") + ".json" not in paths:
            orphans.append(f)
    old = [f for f in orphans if f.modified is not None and f.modified < cutoff]
    return old, len(orphans) - len(old)
