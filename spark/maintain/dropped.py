"""Dropped tables leave the catalog once no retained W reads them.

A table dropped upstream stays in the catalog, empty, so that the Ws before its DROP still read
it (``spark.tables.catalog``); so does every helper table of an online schema change (gh-ost's
``_t_gho``/``_t_ghc``/``_t_del``, pt-osc's ``_t_new``/``_t_old``), created and dropped within
minutes. Without this step a pipeline's catalog grows by every such table for ever. Once
retention retired every W whose record names a dropped table (by UUID), nothing can read it:
maintenance removes it from the catalog and deletes the files its metadata references.

Only a table marked dropped (``tidelake.dropped``) whose walk watermark is at or below the newest
published W (the run that dropped it published) and whose UUID no retained W's record names,
neither as a table nor as isolated, is removed. Crash-safe: the files to delete are journaled
in the archive (``<pipeline>/maintenance/dropped/<uuid>.json``) before the catalog drops the
table; the next maintenance run finishes a journal whose table is gone from the catalog.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import orjson

from spark.archive import layout
from spark.archive.storage import Storage
from spark.commit.published import published_watermarks, read_published
from spark.maintain.expiry import snapshot_files
from spark.tables import catalog as cat
from spark.tables.properties import DROPPED, walk_watermark


@dataclass
class DroppedReport:
    removed: list[str] = field(default_factory=list)  # tables removed from the catalog (in a dry run: would be)
    files_deleted: int = 0
    finished: int = 0  # journals of an earlier, crashed run finished


def journal_dir(pipeline: str) -> str:
    return f"{layout.pipeline_root(pipeline)}/maintenance/dropped"


def _read_uuids(storage: Storage, pipeline: str, retained: list[int]) -> set[str]:
    uuids: set[str] = set()
    for w in retained:
        doc = read_published(storage, pipeline, w) or {}
        uuids.update(t["uuid"] for t in doc.get("tables", ()))
        uuids.update(e["uuid"] for e in doc.get("isolated", ()) if e.get("uuid"))
    return uuids


def _metadata_files(table: Any) -> list[str]:
    files = [table.metadata_location]
    files += [e.metadata_file for e in table.metadata.metadata_log]
    return files


def remove_dropped_tables(config: Any, storage: Storage, catalog: Any, *, retained: list[int], check: Callable[[], None],
                          dry_run: bool = False) -> DroppedReport:
    """Remove from the catalog every dropped table no W of ``retained`` reads (see the module docstring)."""
    report = DroppedReport()
    published = published_watermarks(storage, config.name)
    newest = max(published, default=0)
    read = _read_uuids(storage, config.name, retained)
    present = set()
    for ident in cat.pipeline_identifiers(catalog, config):
        table = catalog.load_table(ident)
        uuid = str(table.metadata.table_uuid)
        present.add(uuid)
        if DROPPED not in table.properties or uuid in read or walk_watermark(table) > newest:
            continue
        report.removed.append(cat.table_label(table))
        if dry_run:
            continue
        files = sorted({*snapshot_files(table.io, table.metadata.snapshots), *_metadata_files(table)})
        path = f"{journal_dir(config.name)}/{uuid}.json"
        check()
        storage.write(path, orjson.dumps({"table": cat.table_label(table), "uuid": uuid, "files": files}))
        check()
        catalog.drop_table(ident)  # a catalog write: fenced by the lease's epoch
        present.discard(uuid)
        report.files_deleted += _delete(table.io, files)
        storage.delete(path)
    if not dry_run:  # journals of a crashed run whose table is gone already
        for path in storage.list(journal_dir(config.name)):
            doc = orjson.loads(storage.read(path))
            if doc["uuid"] in present:
                storage.delete(path)  # crashed before the drop: decided again next time
                continue
            check()
            report.files_deleted += _delete(_io(catalog), doc["files"])
            report.finished += 1
            storage.delete(path)
    return report


def _io(catalog: Any) -> Any:
    from pyiceberg.io import load_file_io

    return load_file_io(catalog.properties)


def _delete(io: Any, files: list[str]) -> int:
    deleted = 0
    for path in files:
        try:
            io.delete(path)
            deleted += 1
        except FileNotFoundError:
            pass
        except OSError as exc:
            if "not found" not in str(exc).lower() and "does not exist" not in str(exc).lower():
                raise
    return deleted
