"""Snapshot expiry, and deletion of the files only expired snapshots referenced.

pyiceberg 0.12's ``expire_snapshots()`` removes snapshots from the metadata and deletes no file.
Per table, after retention removed the tags of retired watermarks:

1. **Expire** every snapshot that no ref points at: what stays is exactly the snapshots of the
   retained tags and the branch heads (``main``, and any other branch). Ancestors of a head are
   not kept: nothing reads history between tags.
2. **Files.** The *referenced* set is every file a remaining snapshot reads: its manifest list,
   its manifests and their live data and delete files. The candidates are the files the
   expired snapshots read, minus the referenced set. Each candidate gets an upper bound of
   its write time, the commit time of the earliest expired snapshot that read it (a file is
   written before the snapshot that reads it is committed); one younger than the grace
   period is kept for a later run.
3. **Journal first.** The candidates are written to ``<pipeline>/maintenance/expired-files/
   <table uuid>/<time>.json`` *before* the expiry commit, because afterwards no metadata knows
   them. Deleting then goes through the table's FileIO; the journal is rewritten with what is
   left (files still within the grace period) or removed. Every run first works through the
   journals earlier runs left (a crash between commit and deletion, or young files), always
   against the referenced set of the table as it is *now*, so a file some snapshot reads is
   never deleted, whoever made that snapshot.
"""

from __future__ import annotations

import datetime as dt
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import orjson
from pyiceberg.manifest import DataFileContent
from pyiceberg.table import Table
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.snapshots import Snapshot

from spark.tables import catalog as cat
from spark.archive import layout
from spark.archive.lease import Lease
from spark.archive.storage import Storage

MANIFEST_LIST, MANIFEST, DATA, DELETE = "manifest-list", "manifest", "data", "delete"
KINDS = (DATA, DELETE, MANIFEST, MANIFEST_LIST)
SAMPLE = 20  # paths kept in a report per table: enough to see what is meant, not a file listing


@dataclass(frozen=True)
class FileRef:
    """A file of a table's metadata tree: its kind and size (manifest lists: size unknown, 0)."""

    kind: str
    size: int


def snapshot_files(io: Any, snapshots: Iterable[Snapshot], cache: dict[str, list[tuple[str, FileRef]]] | None = None) -> dict[str, tuple[FileRef, int]]:
    """Every file ``snapshots`` read: path -> (FileRef, commit time in ms of the earliest snapshot reading it).

    Manifests are shared between snapshots: each is read once (``cache`` keeps their live entries).
    """
    cache = {} if cache is None else cache
    snapshots = list(snapshots)
    lists = {s.snapshot_id: s.manifests(io) for s in snapshots}
    todo = {m.manifest_path: m for ms in lists.values() for m in ms if m.manifest_path not in cache}
    with ThreadPoolExecutor(max_workers=8) as pool:
        for path, entries in zip(todo, pool.map(lambda m: m.fetch_manifest_entry(io, discard_deleted=True), todo.values())):
            cache[path] = [(e.data_file.file_path, FileRef(DATA if e.data_file.content == DataFileContent.DATA else DELETE,
                                                            e.data_file.file_size_in_bytes)) for e in entries]
    out: dict[str, tuple[FileRef, int]] = {}

    def add(path: str, ref: FileRef, ts: int) -> None:
        known = out.get(path)
        out[path] = (ref, ts) if known is None or ts < known[1] else known

    for s in snapshots:
        add(s.manifest_list, FileRef(MANIFEST_LIST, 0), s.timestamp_ms)
        for m in lists[s.snapshot_id]:
            add(m.manifest_path, FileRef(MANIFEST, m.manifest_length), s.timestamp_ms)
            for path, ref in cache[m.manifest_path]:
                add(path, ref, s.timestamp_ms)
    return out


def kept_snapshot_ids(table: Table) -> set[int]:
    """Snapshots some ref (a tag or a branch head) points at: the ones expiry keeps."""
    return {ref.snapshot_id for ref in table.metadata.refs.values()}


@dataclass(frozen=True)
class Footprint:
    """What a table's metadata tree holds: every file any snapshot reads, and its bytes."""

    files: int
    bytes: int
    data_files: int  # of the branch head (what a read of main opens)
    data_bytes: int
    snapshots: int
    tags: int


def footprint(table: Table) -> Footprint:
    files = snapshot_files(table.io, table.metadata.snapshots)
    head = table.current_snapshot()
    live = snapshot_files(table.io, [head]) if head is not None else {}
    data = [ref for ref, _ in live.values() if ref.kind == DATA]
    tags = sum(1 for ref in table.metadata.refs.values() if ref.snapshot_ref_type == SnapshotRefType.TAG)
    return Footprint(len(files), sum(ref.size for ref, _ in files.values()), len(data), sum(r.size for r in data),
                     len(table.metadata.snapshots), tags)


@dataclass
class TableExpiry:
    """One table's expiry: snapshots expired, files deleted (by kind), files left for a later run."""

    name: str
    uuid: str
    snapshots_expired: int = 0
    files_deleted: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    bytes_deleted: int = 0
    files_within_grace: int = 0  # candidates younger than the grace period: kept, journaled for a later run
    sample: list[str] = field(default_factory=list)  # a few of the deleted (or, in a dry run, deletable) paths

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "uuid": self.uuid, "snapshots_expired": self.snapshots_expired,
                "files_deleted": dict(self.files_deleted), "bytes_deleted": self.bytes_deleted,
                "files_within_grace": self.files_within_grace, "sample": list(self.sample)}


def expire_table(
    config_name: str, storage: Storage, table: Table, *, now: dt.datetime, grace: dt.timedelta, lease: Lease,
    dry_run: bool = False, step: Callable[[str], None] = lambda at: None,
    progress: Callable[[str, int, int], None] = lambda s, d, t: None,
) -> TableExpiry:
    """Expire the table's unreferenced snapshots and delete the files only they read (module docstring)."""
    uuid = str(table.metadata.table_uuid)
    out = TableExpiry(cat.table_label(table), uuid)
    keep = kept_snapshot_ids(table)
    expired = [s for s in table.metadata.snapshots if s.snapshot_id not in keep]
    cache: dict[str, list[tuple[str, FileRef]]] = {}
    referenced = snapshot_files(table.io, [s for s in table.metadata.snapshots if s.snapshot_id in keep], cache)
    candidates = {p: v for p, v in snapshot_files(table.io, expired, cache).items() if p not in referenced}
    out.snapshots_expired = len(expired)
    journals = storage.list(layout.expired_files_dir(config_name, uuid))
    if dry_run:
        earlier = {p: v for j in journals for p, v in _files(storage, j).items()}
        _settle({**earlier, **candidates}, referenced, now, grace, out, delete=None)
        return out
    if expired:
        lease.check()
        journal = layout.expired_files_path(config_name, uuid, now)
        if storage.exists(journal):  # a run at the same ``now`` (a retried task): keep what it left
            candidates = {**_files(storage, journal), **candidates}
        storage.write(journal, _journal(candidates))  # before the commit: afterwards no metadata knows these files
        journals.append(journal)
        step("expiry:journaled")
        lease.check()
        table.maintenance.expire_snapshots().by_ids([s.snapshot_id for s in expired]).commit()
        table.refresh()
        step("expiry:committed")
        if kept_snapshot_ids(table) != keep or {s.snapshot_id for s in table.metadata.snapshots} != keep:
            referenced = snapshot_files(table.io, table.metadata.snapshots, cache)  # changed meanwhile: ask again
    for i, journal in enumerate(sorted(set(journals))):
        files = _files(storage, journal)
        lease.check()
        left = _settle(files, referenced, now, grace, out, delete=table.io.delete)
        if left:
            storage.write(journal, _journal(left))
        else:
            storage.delete(journal)
        progress("delete", i + 1, len(journals))
    step("expiry:deleted")
    return out


def _settle(files: dict[str, tuple[FileRef, int]], referenced: dict[str, Any], now: dt.datetime, grace: dt.timedelta,
            out: TableExpiry, delete: Callable[[str], None] | None) -> dict[str, tuple[FileRef, int]]:
    """Delete (``delete`` None: count only) the files no snapshot reads that are older than the grace period;
    return those kept for a later run (younger than the grace period)."""
    horizon_ms = int((now - grace).timestamp() * 1000)
    left = {}
    # Manifest lists and manifests last: a crash midway leaves metadata pointing at data, never the reverse.
    for path, (ref, written_before) in sorted(files.items(), key=lambda kv: KINDS.index(kv[1][0].kind)):
        if path in referenced:
            continue  # a remaining snapshot reads it (it was re-added, or a journal is older than a commit)
        if written_before > horizon_ms:
            left[path] = (ref, written_before)
            out.files_within_grace += 1
            continue
        if delete is not None:
            try:
                delete(path)
            except FileNotFoundError:
                pass  # deleted by an earlier attempt that crashed before rewriting its journal
        out.files_deleted[ref.kind] += 1
        out.bytes_deleted += ref.size
        if len(out.sample) < SAMPLE:
            out.sample.append(path)
    return left


def _journal(files: dict[str, tuple[FileRef, int]]) -> bytes:
    return orjson.dumps({"files": {p: {"kind": r.kind, "size": r.size, "written_before_ms": ts}
                                   for p, (r, ts) in sorted(files.items())}}, option=orjson.OPT_INDENT_2)


def _files(storage: Storage, journal: str) -> dict[str, tuple[FileRef, int]]:
    doc = orjson.loads(storage.read(journal))["files"]
    return {p: (FileRef(f["kind"], f["size"]), f["written_before_ms"]) for p, f in doc.items()}
