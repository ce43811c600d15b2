"""Publish, after stage 5: a watermark W is published once every table of the pipeline carries ``wm_<W>``.

The published record ``<pipeline>/published/<W>.json`` is what readers trust: a query "at W"
reads every table at tag ``wm_<W>`` only if the record exists. It is created once, by the
run that first reached W; later runs of the same interval (retries, backfills, an operator
clearing it) *confirm* it and change nothing.

Downstream (an Airflow Asset, a notification) is told about a watermark once: when the
run that published it finishes. ``announcement`` reads the interval's apply report and says
whether there is anything new to announce.

Retention (spark/maintain/retention.py) may later *retire* a published W: a create-only marker
``<pipeline>/retired/<W>.json`` first (from then on readers treat W as gone), then a
``retired`` entry in W's record, then its tags go from every table. The record itself stays:
runs still see that W was published (an old interval is confirmed, never re-applied).

Compaction (spark/maintain/compaction.py) moves the tags on a table's head to its ``replace``
snapshot (same rows, fewer files); W's record then names that snapshot.

A table held back (``on_table_error = "isolate"``, spark/commit/isolation.py) is listed under
``isolated`` in the record of every W it misses, with why and the W it is held at; once a
later run replays it to W, W's record moves it to ``tables`` (and notes it under ``caught_up``).

``tidelake repair`` (spark/repair/run.py) may later move tags of published Ws; it records what it
did in ``<pipeline>/repairs/<time>.json``. Downstream hears of a repair once, with the next
new W: that W is announced with ``repair=True`` and ``repaired_from`` = the first W the
repair changed. The claim is a create-only marker ``repairs/announced/<time>.json`` naming
the W that announced it, so a retried publish task of that W says the same again and any
other W says nothing of it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import orjson

from cdc_codecs import TidelakeError
from spark.archive import layout, records
from spark.archive.records import CorruptArchiveFile
from spark.config import PipelineConfig
from spark.archive.floors import require_interval_kept
from spark.archive.storage import AlreadyExists, Storage, open_storage

# What an apply run did to the interval's watermark (the report's "outcome").
PUBLISHED = "published"  # this run published W for the first time
CONFIRMED = "confirmed"  # W was already published; the run found every table consistent with it
NOT_CONSISTENT = "not-consistent"  # W = 0: some partition has not reported a watermark yet
# A run that only confirms an applied interval reports beside the applying run's report
# (``reports/<interval>/apply.json``), in ``apply.confirmed.json``: the latest confirmation.
CONFIRMATION_REPORT = "apply.confirmed"


# The status of a repair record.
REPAIR_STARTED = "started"  # tags may be partly moved; the next repair finishes the job
REPAIR_DONE = "done"
REPAIR_SUPERSEDED = "superseded"  # a repair that died, finished by a later one (which reports its Ws)


class NotPublishedError(TidelakeError):
    """The interval has not been applied (or its watermark not published) yet."""


def published_path(pipeline: str, watermark: int) -> str:
    return f"{layout.pipeline_root(pipeline)}/published/{watermark:020d}.json"


def published_watermarks(storage: Storage, pipeline: str) -> list[int]:
    """Every published W, ascending."""
    out = []
    for path in storage.list(f"{layout.pipeline_root(pipeline)}/published"):
        name = path.rsplit("/", 1)[-1]
        if name.endswith(".json") and name[:-5].isdigit():
            out.append(int(name[:-5]))
    return sorted(out)


def retired_watermarks(storage: Storage, pipeline: str) -> list[int]:
    """Every W retired by the retention policy (``spark.maintain.retention``), ascending.

    A W is retired from the moment its marker ``<pipeline>/retired/<W>.json`` exists: readers
    treat it as gone, even while maintenance is still removing its tags.
    """
    out = []
    for path in storage.list(layout.retired_dir(pipeline)):
        name = path.rsplit("/", 1)[-1]
        if name.endswith(".json") and name[:-5].isdigit():
            out.append(int(name[:-5]))
    return sorted(out)


def retained_watermarks(storage: Storage, pipeline: str) -> list[int]:
    """The published Ws a reader may read: published and not retired, ascending."""
    retired = set(retired_watermarks(storage, pipeline))
    return [w for w in published_watermarks(storage, pipeline) if w not in retired]


def is_retired(storage: Storage, pipeline: str, watermark: int) -> bool:
    return storage.exists(layout.retired_path(pipeline, watermark))


def mark_retired(storage: Storage, pipeline: str, watermark: int, retired: dict[str, Any]) -> bool:
    """Retire W: create its marker (create-only). Returns False when it was retired already."""
    try:
        storage.create(layout.retired_path(pipeline, watermark), orjson.dumps({"watermark": watermark, **retired}))
        return True
    except AlreadyExists:
        return False


def record_retired(storage: Storage, pipeline: str, watermark: int, retired: dict[str, Any]) -> None:
    """Say in W's published record that it is retired (after its marker exists; idempotent)."""
    doc = read_published(storage, pipeline, watermark)
    if doc is not None and "retired" not in doc:
        doc["retired"] = retired
        storage.write(published_path(pipeline, watermark), orjson.dumps(doc, option=orjson.OPT_INDENT_2))


def record_snapshots(storage: Storage, pipeline: str, watermark: int, snapshots: dict[str, int]) -> bool:
    """W's record names, for each table uuid of ``snapshots``, that snapshot: compaction moved the
    tables' tags of W to snapshots with the same rows (``spark.maintain.compaction``). Idempotent:
    written only when something differs; returns whether it was."""
    doc = read_published(storage, pipeline, watermark)
    stale = [t for t in (doc or {}).get("tables", []) if t["uuid"] in snapshots and t["snapshot"] != snapshots[t["uuid"]]]
    if doc is None or not stale:
        return False
    for entry in stale:
        entry["snapshot"] = snapshots[entry["uuid"]]
    storage.write(published_path(pipeline, watermark), orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    return True


class CorruptPublishedRecord(CorruptArchiveFile):
    """A published record (or an apply report) is not one tidelake writes."""


def read_published(storage: Storage, pipeline: str, watermark: int) -> dict[str, Any] | None:
    """W's published record (``records.Published``), None if W was not published.

    Raises:
        CorruptPublishedRecord: naming the file and the field.
    """
    path = published_path(pipeline, watermark)
    if not storage.exists(path):
        return None
    return records.read_record(storage.read(path), records.Published, f"{storage.url}/{path}", "published record",
                               CorruptPublishedRecord)


def read_report(storage: Storage, path: str, shape: Any = records.ApplyReport) -> dict[str, Any]:
    """An apply run's report (or a confirming run's: ``records.Confirmation``), checked as far as runs read it back.

    Raises:
        CorruptPublishedRecord: naming the file and the field.
    """
    return records.read_record(storage.read(path), shape, f"{storage.url}/{path}", "run report", CorruptPublishedRecord)


@dataclass(frozen=True)
class PublishedTable:
    """One table of the consistent view at W: its upstream name *at W* and its Iceberg identity.

    Tables are found by UUID, not by name: a later RENAME TABLE changes the Iceberg
    identifier and the upstream name, and a query at W must still see the name of W.
    """

    database: str
    table: str
    uuid: str
    snapshot: int

    def to_dict(self) -> dict[str, Any]:
        return {"database": self.database, "table": self.table, "uuid": self.uuid, "snapshot": self.snapshot}


def published_tables(doc: dict[str, Any]) -> list[PublishedTable]:
    return [PublishedTable(t["database"], t["table"], t["uuid"], t["snapshot"]) for t in doc["tables"]]


def publish_watermark(storage: Storage, pipeline: str, watermark: int, interval: str, tables: list[PublishedTable],
                      isolated: list[dict[str, Any]] | None = None) -> bool:
    """Record W as consistent. Create-only: returns False when an earlier run published it.

    ``isolated``: the tables held at an earlier W (``spark.commit.isolation.Isolated.to_dict``), listed
    under ``isolated`` -- readers refuse them at W, naming the W they are held at."""
    doc = {"watermark": watermark, "interval": interval,
           "tables": [t.to_dict() for t in sorted(tables, key=lambda t: (t.database, t.table))],
           **({"isolated": isolated} if isolated else {}),
           "published_at": dt.datetime.now(dt.timezone.utc).isoformat()}
    try:
        storage.create(published_path(pipeline, watermark), orjson.dumps(doc, option=orjson.OPT_INDENT_2))
        return True
    except AlreadyExists:
        return False


def isolated_at(doc: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """The tables W's record lists as isolated (held at an earlier W), by upstream name at W."""
    return {(e["database"], e["table"]): e for e in doc.get("isolated", [])}


def record_caught_up(storage: Storage, pipeline: str, watermark: int, view: list[PublishedTable]) -> list[str]:
    """W's record names the tables it listed as isolated that ``view`` (tagged at W now: a later run
    replayed them to W) holds, moved from ``isolated`` to ``tables``. Idempotent; returns their names."""
    doc = read_published(storage, pipeline, watermark)
    held = isolated_at(doc) if doc is not None else {}
    back = [t for t in view if (t.database, t.table) in held]
    if doc is None or not back:
        return []
    doc["isolated"] = [e for ref, e in held.items() if ref not in {(t.database, t.table) for t in back}]
    if not doc["isolated"]:
        del doc["isolated"]
    doc["tables"] = sorted([*doc["tables"], *(t.to_dict() for t in back)], key=lambda t: (t["database"], t["table"]))
    doc.setdefault("caught_up", []).extend({"database": t.database, "table": t.table,
                                            "at": dt.datetime.now(dt.timezone.utc).isoformat()} for t in back)
    storage.write(published_path(pipeline, watermark), orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    return sorted(f"{t.database}.{t.table}" for t in back)


# ---------------------------------------------------------------- catch-ups, for downstream mirrors
#
# An isolated table is left out of every W published while it is held; when a later run replays
# it (a fixed version, a repair), the Ws it missed change: a mirror built from the change feed of
# each new W holds it at its held W. Each catch-up is recorded once (``caught_up/<held W>_<db>.<t>.json``)
# and claimed by the next W announced, whose Asset event names it: the mirror reads that table's
# changes from its held W instead of the previous W.


def catch_ups_dir(pipeline: str) -> str:
    return f"{layout.pipeline_root(pipeline)}/caught_up"


def record_catch_up(storage: Storage, pipeline: str, database: str, table: str, held_at: int, released_at: int) -> None:
    """A table held at ``held_at`` goes on from the W ``released_at`` (create-only: a retry records nothing new)."""
    path = f"{catch_ups_dir(pipeline)}/{held_at:020d}_{layout.encode_name(database)}.{layout.encode_name(table)}.json"
    try:
        storage.create(path, orjson.dumps({"database": database, "table": table, "held_at": held_at,
                                           "released_at": released_at}, option=orjson.OPT_INDENT_2))
    except AlreadyExists:
        pass


def _claim_catch_ups(storage: Storage, pipeline: str, watermark: int) -> list[dict[str, Any]]:
    """The catch-ups ``watermark`` announces: released at or before it, not announced by another W yet."""
    root = catch_ups_dir(pipeline)
    claimed = []
    for path in sorted(p for p in storage.list(root) if p.endswith(".json") and p.rsplit("/", 1)[0] == root):
        doc = orjson.loads(storage.read(path))
        if doc["released_at"] > watermark:
            continue
        marker = f"{root}/announced/{path.rsplit('/', 1)[-1]}"
        try:
            storage.create(marker, orjson.dumps({"watermark": watermark}))
        except AlreadyExists:
            if orjson.loads(storage.read(marker))["watermark"] != watermark:
                continue  # announced by an earlier W
        claimed.append(doc)
    return claimed


def repairs_dir(pipeline: str) -> str:
    return f"{layout.pipeline_root(pipeline)}/repairs"


def repair_record_path(pipeline: str, at: dt.datetime) -> str:
    return f"{repairs_dir(pipeline)}/{layout.instant(at)}.json"


def repair_records(storage: Storage, pipeline: str) -> list[tuple[str, dict[str, Any]]]:
    """(path, record) of every repair, oldest first."""
    root = repairs_dir(pipeline)
    return [(p, orjson.loads(storage.read(p))) for p in storage.list(root)
            if p.endswith(".json") and p.rsplit("/", 1)[0] == root]


def _claim_repairs(storage: Storage, pipeline: str, watermark: int) -> list[dict[str, Any]]:
    """The finished repairs ``watermark`` announces: those not announced by another W yet."""
    claimed = []
    for path, doc in repair_records(storage, pipeline):
        if doc.get("status") != REPAIR_DONE or not doc.get("repaired_watermarks") or watermark <= doc["latest_published"]:
            continue  # unfinished, moved no tag, or W is one the repair covered (a publish retried from before it)
        marker = f"{repairs_dir(pipeline)}/announced/{path.rsplit('/', 1)[-1]}"
        try:
            storage.create(marker, orjson.dumps({"watermark": watermark}))
        except AlreadyExists:
            if orjson.loads(storage.read(marker))["watermark"] != watermark:
                continue
        claimed.append(doc)
    return claimed


@dataclass(frozen=True)
class Announcement:
    """A watermark downstream has not been told about: a new W, or a repair of published ones."""

    watermark: int
    repair: bool
    repaired_from: int | None  # the first W a repair re-derived
    interval_end: dt.datetime
    previous_watermark: int = 0  # the W published before it (0: none): read_changes(previous, W) is what is new
    # Tables isolated until now, caught up since the W announced before (``record_catch_up``): each
    # {"database", "table", "held_at", "released_at"}; read its changes from ``held_at``, not ``previous``.
    caught_up: tuple[dict[str, Any], ...] = ()


def announcement(config: PipelineConfig, interval_start: dt.datetime, interval_end: dt.datetime,
                 storage: Storage | None = None) -> Announcement | None:
    """What the interval's last apply run has to announce, or None (it only confirmed).

    A new W published after a ``tidelake repair`` is announced as a repair (once per repair).

    Raises:
        NotPublishedError: the interval was not applied, or its W is checkpointed but not published.
    """
    storage = storage or open_storage(config.storage)
    path = layout.report_path(config.name, interval_start, interval_end, "apply")
    if not storage.exists(path):
        require_interval_kept(storage, config.name, interval_start, interval_end, "announce")
        raise NotPublishedError(f"interval {layout.instant(interval_start)}..{layout.instant(interval_end)} is not applied yet")
    report = read_report(storage, path)
    w = report["watermark"]
    if w and read_published(storage, config.name, w) is None:
        raise NotPublishedError(f"watermark {w} is checkpointed but not published; rerun the apply task")
    outcome = report.get("outcome")
    confirmed = layout.report_path(config.name, interval_start, interval_end, CONFIRMATION_REPORT)
    if storage.exists(confirmed):
        # The last apply run confirmed what an earlier one applied: nothing new to announce.
        # (A repair that applies the interval again writes apply.json after it.)
        at = read_report(storage, confirmed, records.Confirmation).get("confirmed_at", "")
        if at >= report.get("finished_at", ""):
            return None
    if outcome == PUBLISHED:
        previous = report.get("previous_watermark") or 0  # runs publish in order: the W published before
        repairs = _claim_repairs(storage, config.name, w)
        caught_up = tuple(_claim_catch_ups(storage, config.name, w))
        if repairs:
            return Announcement(w, True, min(r["repaired_from"] for r in repairs), interval_end, previous, caught_up)
        return Announcement(w, False, None, interval_end, previous, caught_up)
    return None
