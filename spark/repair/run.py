"""``tidelake repair``: re-derive published history from the archive and move the tags that changed.

A run of an interval whose W is already published *confirms* it and writes nothing, so a
rerun never rewrites history. When what the current code derives from the archive changes
(a decoder fix), ``repair`` brings the published tags in line with it (SPEC §5):

1. It holds the pipeline's lease throughout: no run writes while it works.
2. It re-derives the whole history in a *scratch* pipeline (``<name>.repair``, namespace
   ``<namespace>__repair``) that reads the same raw segments (its manifests are copies of
   the pipeline's) but shares none of its state, up to the interval of the latest published W.
3. It compares: every interval must reach the same W, and every published W the same tables
   with the same columns -- otherwise the archive now derives a different history, which no
   tag move can express, and ``RepairError`` says where and changes nothing. Then it compares
   each table's rows at tag ``wm_<W>`` with the scratch's at W.
4. Per differing table, in one Iceberg transaction: snapshots on a branch ``tidelake-repair``
   from ``main``'s head, one per differing W in ascending order, with the schema the tag had
   at W; each tag moves to its snapshot; if the latest W changed, ``main`` moves once to the
   branch's head (a descendant of its old head: main never moves back); the branch goes.
5. Checkpoints whose derived state changed are replaced, the published records of repaired
   Ws get the new snapshot ids and a ``repaired`` entry, and ``<pipeline>/repairs/<time>.json``
   records what moved (rows before and after). Downstream hears of it with the next new W
   (``spark.commit.published.announcement``).

Tables isolated by ``on_table_error = "isolate"`` are replayed first (``apply_interval`` of the
latest published interval walks them forward from their held W, as every run does): a version
that handles them brings them to the pipeline's W before the comparison. The report says which
it caught up (``caught_up``) and which stay held, and why (``stays_held``: the error again, or
``Isolated.stays``, a table no replay can reach).

A crash leaves every published W readable (each table is repaired in one commit, readers
follow the tags) and the repair record ``started``; the next ``repair`` finishes the job.
"""

from __future__ import annotations

import warnings

import dataclasses
import datetime as dt
from dataclasses import dataclass, field
from typing import Any, Callable

import orjson
import pyarrow as pa
from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchNamespaceError
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.table import Table
from pyiceberg.table.update.snapshot import ManageSnapshots

from cdc_codecs import TidelakeError
from spark.tables import catalog as cat
from spark.archive import layout
from spark.archive.checkpoint import Checkpoint, checkpoint_path
from spark.archive.format import require_format
from spark.commit.apply import apply_interval
from spark.decode.topic_clock import settle_topic_clocks
from spark.tables.properties import INTERVAL, WATERMARK, table_watermark
from spark.config import PipelineConfig
from spark.tables import internals
from spark.tables.internals import writing_with_schema
from spark.runtime.runners import LocalRunner, Runner
from spark.archive.lease import Lease
from spark.archive.manifest import list_manifests
from spark.commit.isolation import Isolated, read_isolated
from spark.commit.published import (
    REPAIR_DONE, REPAIR_STARTED, REPAIR_SUPERSEDED, PublishedTable, isolated_at, published_path, published_tables,
    published_watermarks, read_published, repair_records, repair_record_path, retained_watermarks,
)
from spark.archive.storage import Storage, open_storage
from spark.core.watermark import tag_name

REPAIR_BRANCH = "tidelake-repair"
REPAIRED_BY = "tidelake.repaired-by"  # table property: the repair record that last rewrote the table's tags
SCRATCH_SUFFIX = ".repair"


class RepairError(TidelakeError):
    """The archive now derives a history that a repair cannot express by moving tags."""


@dataclass(frozen=True)
class TableDifference:
    """One table whose rows at tag ``wm_<W>`` differ from what the archive derives for W."""

    watermark: int
    database: str  # the upstream name at W
    table: str
    uuid: str
    rows_before: int
    rows_after: int
    snapshot_before: int | None  # None: the tag was lost (it is recreated)
    snapshot_after: int | None = None  # the repaired snapshot (None until moved, or in a dry run)

    @property
    def name(self) -> str:
        return f"{self.database}.{self.table}"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class RepairReport:
    pipeline: str
    from_watermark: int | None
    dry_run: bool
    compared: list[int]  # the published Ws whose tags were compared
    differences: list[TableDifference]
    checkpoints: list[str]  # checkpoints whose derived state changed (replaced unless a dry run)
    main_moved: list[str] = field(default_factory=list)  # tables whose main moved to the repaired head
    record: str | None = None  # <pipeline>/repairs/<time>.json
    resumed: list[str] = field(default_factory=list)  # records of unfinished repairs this one finished
    # Isolated tables (on_table_error = "isolate"): those the repair replayed to the pipeline's W
    # ("db.table"), and those still held after it, with why (``Isolated.reason``, ``Isolated.stays``).
    caught_up: list[str] = field(default_factory=list)
    stays_held: list[Isolated] = field(default_factory=list)

    @property
    def repaired_from(self) -> int | None:
        return min((d.watermark for d in self.differences), default=None)


def scratch_config(config: PipelineConfig) -> PipelineConfig:
    """The scratch pipeline a repair re-derives in: same topics and archive, its own name and namespace."""
    name = f"{config.name}{SCRATCH_SUFFIX}"
    if len(name) > 128:
        raise RepairError(f"pipeline {config.name}: its name is too long for the repair's scratch pipeline {name!r} "
                          "(128 characters at most)")
    # Isolating in the scratch: a table the archive no longer derives at a published W shows as a difference.
    return dataclasses.replace(config, name=name, on_bad_message="continue", on_table_error="isolate",
                               catalog=dataclasses.replace(config.catalog, namespace=f"{config.namespace}__repair"))


def repair(
    config: PipelineConfig,
    from_watermark: int | None = None,
    *,
    dry_run: bool = False,
    storage: Storage | None = None,
    catalog: Any = None,
    runner: Runner | None = None,
    fault: Callable[[str], None] | None = None,
) -> RepairReport:
    """Re-derive every published W >= ``from_watermark`` (all if None) and move the tags whose rows changed.

    ``fault`` is called with a step name at each step boundary; tests inject crashes there.

    Raises:
        RepairError: nothing is published, a run is unfinished, or the archive now derives
            different watermarks, tables or columns (nothing is changed then).
        LeaseHeldError: another run of the pipeline holds its lease.
    """
    storage = storage or open_storage(config.storage)
    # The scratch orders every topic as the pipeline does (its clock as recorded, not decided anew).
    config = settle_topic_clocks(config, storage)
    catalog = catalog or cat.open_catalog(config)
    step = fault or (lambda at: None)
    scratch = scratch_config(config)
    held_before = read_isolated(storage, config.name)
    if not dry_run and held_before:
        _catch_up(config, storage, catalog, runner)
    held_after = read_isolated(storage, config.name)
    caught_up = sorted(e.name for ref, e in held_before.items() if ref not in held_after)
    stays_held = [held_after[ref] for ref in sorted(held_after)]
    with Lease(storage, config.name, ttl_seconds=config.lease_ttl_seconds, wait_seconds=config.lease_wait_seconds) as lease:
        require_format(storage, config.name)  # the catch-up's run checked it too: not an archive a newer tidelake wrote
        published = published_watermarks(storage, config.name)
        if not published:
            raise RepairError(f"pipeline {config.name}: no watermark is published yet, so there is nothing to repair")
        chain = list_manifests(storage, config.name)
        checkpoints = [_checkpoint(storage, config.name, s, e) for s, e, _ in chain]
        last = max((i for i, cp in enumerate(checkpoints) if cp is not None and cp.watermark in published), default=None)
        if last is None:
            raise RepairError(f"pipeline {config.name}: no checkpoint of a landed interval reaches a published watermark; "
                              "the archive's manifests or checkpoints are missing, so it cannot be re-derived")
        _refuse_unfinished_runs(config, catalog, chain, checkpoints, last, published)

        _clear_scratch(storage, catalog, scratch)
        try:
            for s, e, path in chain:
                storage.write(layout.manifest_path(scratch.name, s, e), storage.read(path))
            apply_interval(scratch, chain[last][0], chain[last][1], runner=runner or LocalRunner(), storage=storage,
                           catalog=_with_namespace(catalog, scratch.namespace))
            step("re-derived")
            derived = [_checkpoint(storage, scratch.name, s, e) for s, e, _ in chain[: last + 1]]
            # Retired Ws have no tags to compare or move (the retention policy removed them).
            retained = retained_watermarks(storage, config.name)
            _check_same_history(config, storage, catalog, scratch, chain, checkpoints, derived, retained)
            compared = [w for w in retained if from_watermark is None or w >= from_watermark]
            differences = _compare_rows(config, storage, catalog, scratch, compared)
            stale = [checkpoint_path(config.name, s, e) for (s, e, _), old, new in zip(chain, checkpoints, derived)
                     if old is not None and new is not None and old.to_json() != new.to_json()]
            report = RepairReport(config.name, from_watermark, dry_run, compared, differences, stale,
                                  caught_up=caught_up, stays_held=stays_held)
            if dry_run:
                return report
            unfinished = [(p, d) for p, d in repair_records(storage, config.name) if d["status"] == REPAIR_STARTED]
            if not differences and not stale and not unfinished:
                return report
            _apply_repair(config, storage, catalog, scratch, report, unfinished, published, lease, step)
            return report
        finally:
            _clear_scratch(storage, catalog, scratch)  # only a means: never left behind when it can be helped


# ---------------------------------------------------------------- re-deriving and comparing


def _catch_up(config: PipelineConfig, storage: Storage, catalog: Any, runner: Runner | None) -> None:
    """Isolated tables replayed from their held W to the latest published one (a run of that interval)."""
    published = set(published_watermarks(storage, config.name))
    for s, e, _ in reversed(list_manifests(storage, config.name)):
        cp = _checkpoint(storage, config.name, s, e)
        if cp is not None and cp.watermark in published:
            apply_interval(config, s, e, runner=runner or LocalRunner(), storage=storage, catalog=catalog)
            return


def _checkpoint(storage: Storage, pipeline: str, start: dt.datetime, end: dt.datetime) -> Checkpoint | None:
    path = checkpoint_path(pipeline, start, end)
    return Checkpoint.from_json(storage.read(path)) if storage.exists(path) else None


def _with_namespace(catalog: Any, namespace: str) -> Any:
    try:
        catalog.create_namespace(namespace)
    except NamespaceAlreadyExistsError:
        pass
    return catalog


def _clear_scratch(storage: Storage, catalog: Any, scratch: PipelineConfig) -> None:
    """Drop what a repair (this one, or an earlier one that died) left in its scratch pipeline."""
    root = cat.pipeline_namespace(scratch)
    try:
        databases = catalog.list_namespaces(root)
    except NoSuchNamespaceError:
        databases = []
    for namespace in databases:  # (namespace, db): one per upstream database
        for identifier in catalog.list_tables(namespace):
            catalog.purge_table(identifier)
        catalog.drop_namespace(namespace)
    if root in catalog.list_namespaces():
        catalog.drop_namespace(root)
    for path in storage.list(layout.pipeline_root(scratch.name)):
        storage.delete(path)


def _refuse_unfinished_runs(config: PipelineConfig, catalog: Any, chain: list, checkpoints: list[Checkpoint | None],
                            last: int, published: list[int]) -> None:
    """A run that committed or checkpointed past the latest published W must finish first."""
    unfinished = [layout.instant(chain[i][1]) for i in range(last + 1, len(chain))
                  if checkpoints[i] is not None and checkpoints[i].watermark]  # type: ignore[union-attr]
    ahead = sorted(".".join(cat.upstream_name(t)) for t in cat.pipeline_tables(catalog, config)
                   if table_watermark(t) > published[-1])
    if unfinished or ahead:
        what = (f"the interval ending {', '.join(unfinished)} is checkpointed but its W is not published" if unfinished
                else f"{', '.join(ahead)} are past the latest published watermark {published[-1]}")
        raise RepairError(f"pipeline {config.name}: a run is unfinished ({what}); rerun that interval so it publishes, "
                          "then repair")


def _schema_shape(table: Table, snapshot_id: int) -> list[tuple[str, str, bool]]:
    schema_id = table.metadata.snapshot_by_id(snapshot_id).schema_id  # type: ignore[union-attr]
    schema = table.metadata.schema_by_id(schema_id) if schema_id is not None else table.schema()
    return [(f.name, str(f.field_type), f.required) for f in schema.fields]  # type: ignore[union-attr]


def _tables_at(config: PipelineConfig, storage: Storage, catalog: Any, w: int) -> dict[tuple[str, str], tuple[PublishedTable, Table]]:
    """The view at W: (database, table) -> (its published entry, its Iceberg table, which may have lost its tag)."""
    doc = read_published(storage, config.name, w)
    assert doc is not None
    by_uuid = {str(t.metadata.table_uuid): t for t in cat.pipeline_tables(catalog, config)}
    out = {}
    for entry in published_tables(doc):
        table = by_uuid.get(entry.uuid)
        if table is None:
            raise RepairError(f"pipeline {config.name}: {entry.database}.{entry.table} at {w}: its Iceberg table "
                              f"{entry.uuid} is gone, so its tags cannot be moved; rebuild the pipeline under a new name")
        out[(entry.database, entry.table)] = (entry, table)
    return out


def _tag_snapshot(table: Table, w: int) -> int | None:
    snapshot = table.snapshot_by_name(tag_name(w))
    return snapshot.snapshot_id if snapshot is not None else None


def _check_same_history(config: PipelineConfig, storage: Storage, catalog: Any, scratch: PipelineConfig, chain: list,
                        checkpoints: list[Checkpoint | None], derived: list[Checkpoint | None], published: list[int]) -> None:
    """Same W per interval, same tables and columns per W: or RepairError listing every difference."""
    found = []
    for (s, e, _), old, new in zip(chain, checkpoints, derived):
        if old is not None and (new is None or new.watermark != old.watermark):
            found.append(f"interval {layout.instant(s)}..{layout.instant(e)} published W {old.watermark}, the archive "
                         f"now derives {new.watermark if new else 'nothing'}")
    if not found:
        for w in published:
            mine, theirs = _tables_at(config, storage, catalog, w), _tables_at(scratch, storage, catalog, w)
            held = isolated_at(read_published(storage, config.name, w) or {})  # no tags at W to compare or move
            theirs = {name: v for name, v in theirs.items() if name not in held}
            if set(mine) != set(theirs):
                names = lambda view: ", ".join(".".join(n) for n in sorted(view)) or "none"  # noqa: E731
                found.append(f"W {w}: tables {names(mine)} are published, the archive now derives {names(theirs)}")
                continue
            for name, (_, table) in sorted(mine.items()):
                other = theirs[name][1]
                tagged = _tag_snapshot(table, w)
                if tagged is None:
                    continue  # a lost tag: recreated with the derived rows (and a schema of the table like the derived one)
                a = _schema_shape(table, tagged)
                b = _schema_shape(other, _tag_snapshot(other, w))  # type: ignore[arg-type]
                if a != b:
                    cols = lambda shape: ", ".join(f"{n} {t}" for n, t, _ in shape)  # noqa: E731
                    found.append(f"W {w} {'.'.join(name)}: columns ({cols(a)}) are published, the archive now derives ({cols(b)})")
    if found:
        more = f" (and {len(found) - 5} more)" if len(found) > 5 else ""
        raise RepairError(
            f"pipeline {config.name}: the archive now derives a different history, which moving tags cannot express: "
            f"{'; '.join(found[:5])}{more}. Nothing was changed. Rebuild the pipeline under a new name (a new `name`, "
            f"hence a new namespace), over the same archive: copy {layout.manifests_dir(config.name)}/ to the new "
            "name's manifests folder and backfill it; the old pipeline's tables and tags stay as they are"
        )


def _rows(table: Table, snapshot_id: int) -> pa.Table:
    return table.scan(snapshot_id=snapshot_id).to_arrow()


def _same_rows(a: pa.Table, b: pa.Table) -> bool:
    """Equal as multisets of rows (files order rows arbitrarily)."""
    if a.num_rows != b.num_rows or a.column_names != b.column_names:
        return False
    order = [(c, "ascending") for c in a.column_names]
    return a.sort_by(order).equals(b.cast(a.schema).sort_by(order))


def _compare_rows(config: PipelineConfig, storage: Storage, catalog: Any, scratch: PipelineConfig,
                  compared: list[int]) -> list[TableDifference]:
    out = []
    for w in compared:
        theirs = _tables_at(scratch, storage, catalog, w)
        for name, (entry, table) in sorted(_tables_at(config, storage, catalog, w).items()):
            other = theirs[name][1]
            tagged = _tag_snapshot(table, w)
            after = _rows(other, _tag_snapshot(other, w))  # type: ignore[arg-type]
            if tagged is None:
                lost = TableDifference(w, entry.database, entry.table, entry.uuid, 0, after.num_rows, None)
                _schema_at(table, lost, _schema_shape(other, _tag_snapshot(other, w)))  # type: ignore[arg-type]  # fails before any change
                out.append(lost)
                continue
            before = _rows(table, tagged)
            if not _same_rows(before, after):
                out.append(TableDifference(w, entry.database, entry.table, entry.uuid, before.num_rows, after.num_rows, tagged))
    return out


# ---------------------------------------------------------------- moving tags


def _apply_repair(config: PipelineConfig, storage: Storage, catalog: Any, scratch: PipelineConfig, report: RepairReport,
                  unfinished: list[tuple[str, dict[str, Any]]], published: list[int], lease: Lease,
                  step: Callable[[str], None]) -> None:
    now = dt.datetime.now(dt.timezone.utc)
    record_path = repair_record_path(config.name, now)
    # Ws an earlier repair that died may have moved already: they are repaired too, so this one reports them.
    carried = [d for _, doc in unfinished for d in doc["differences"]]
    record: dict[str, Any] = {
        "pipeline": config.name, "status": REPAIR_STARTED, "started_at": now.isoformat(), "finished_at": None,
        "from": report.from_watermark, "latest_published": published[-1],
        "differences": [d.to_dict() for d in report.differences], "carried": carried,
        "checkpoints": report.checkpoints, "resumes": [p for p, _ in unfinished],
    }
    lease.check()
    storage.create(record_path, _json(record))
    report.record, report.resumed = record_path, [p for p, _ in unfinished]
    step("recorded")

    by_table: dict[str, list[TableDifference]] = {}
    for d in report.differences:
        by_table.setdefault(d.uuid, []).append(d)
    tables = {str(t.metadata.table_uuid): t for t in cat.pipeline_tables(catalog, config)}
    moved: dict[tuple[int, str], int] = {}
    for uuid, diffs in sorted(by_table.items(), key=lambda kv: (kv[1][0].name, kv[0])):
        lease.check()
        snapshots, main_moved = _repair_table(config, storage, catalog, scratch, tables[uuid], diffs, published,
                                              record_path, lease, step)
        moved.update({(w, uuid): sid for w, sid in snapshots.items()})
        if main_moved:
            report.main_moved.append(diffs[-1].name)
        step(f"table:{diffs[0].name}")
    report.differences = [dataclasses.replace(d, snapshot_after=moved.get((d.watermark, d.uuid))) for d in report.differences]

    for path in report.checkpoints:
        lease.check()
        interval = path.rsplit("/", 1)[-1]
        storage.write(path, storage.read(f"{layout.pipeline_root(scratch.name)}/checkpoints/{interval}"))
    step("checkpointed")

    repaired = sorted({d.watermark for d in report.differences} | {d["watermark"] for d in carried})
    first = repaired[0] if repaired else None
    for w in repaired:
        lease.check()
        _update_published(config, storage, catalog, w, {"at": now.isoformat(), "from": first, "record": record_path})
    step("published")

    record.update(status=REPAIR_DONE, finished_at=dt.datetime.now(dt.timezone.utc).isoformat(),
                  differences=[d.to_dict() for d in report.differences], repaired_watermarks=repaired, repaired_from=first,
                  main_moved=report.main_moved)
    storage.write(record_path, _json(record))
    for path, doc in unfinished:
        storage.write(path, _json({**doc, "status": REPAIR_SUPERSEDED, "finished_by": record_path}))


def _repair_table(config: PipelineConfig, storage: Storage, catalog: Any, scratch: PipelineConfig, table: Table,
                  diffs: list[TableDifference], published: list[int], record_path: str, lease: Lease,
                  step: Callable[[str], None]) -> tuple[dict[int, int], bool]:
    """One table's differing Ws, in one transaction: branch snapshots, tag moves, main once, branch gone."""
    diffs = sorted(diffs, key=lambda d: d.watermark)
    main = table.current_snapshot()
    assert main is not None  # a table in a published view carries a tag, so it has snapshots
    tx = internals.transaction(table)
    if REPAIR_BRANCH in table.refs():
        ManageSnapshots(tx).remove_branch(REPAIR_BRANCH).commit()  # left by hand, or another tool: start clean
    ManageSnapshots(tx).create_branch(main.snapshot_id, REPAIR_BRANCH).commit()
    out: dict[int, int] = {}
    for d in diffs:
        tag = tag_name(d.watermark)
        other = _tables_at(scratch, storage, catalog, d.watermark)[(d.database, d.table)][1]
        derived = _tag_snapshot(other, d.watermark)
        assert derived is not None
        schema_id = _schema_at(table, d, _schema_shape(other, derived))
        schema = table.metadata.schema_by_id(schema_id)
        assert schema is not None
        rows = _rows(other, derived)
        target = schema.as_arrow()
        rows = rows.select(target.names).cast(target)
        doc = read_published(storage, config.name, d.watermark) or {}
        summary = {WATERMARK: str(d.watermark), INTERVAL: str(doc.get("interval", "")), REPAIRED_BY: record_path}
        with writing_with_schema(tx, schema_id):
            # Not a full-table rewrite behind main's back: the branch starts at main's head and only tags point here.
            with warnings.catch_warnings():
                # A merge-on-read table: pyiceberg 0.12 says it falls back to copy-on-write, which is what a
                # whole-table overwrite wants (the old files' delete files are left naming files no longer
                # live; compaction drops them).
                warnings.filterwarnings("ignore", message="Merge on read is not yet supported")
                tx.overwrite(rows, AlwaysTrue(), snapshot_properties=summary, branch=REPAIR_BRANCH)
        snapshot_id = tx.table_metadata.refs[REPAIR_BRANCH].snapshot_id
        moving = ManageSnapshots(tx)
        if tag in tx.table_metadata.refs:
            moving = moving.remove_tag(tag)
        moving.create_tag(snapshot_id, tag).commit()
        out[d.watermark] = snapshot_id
    main_moved = diffs[-1].watermark == published[-1]
    if main_moved:
        # Once, at the end: readers of main never see an older W's content. The branch head
        # descends from main's old head, so main only moves forward.
        ManageSnapshots(tx).set_current_snapshot(ref_name=REPAIR_BRANCH).commit()
    ManageSnapshots(tx).remove_branch(REPAIR_BRANCH).commit()
    tx.set_properties({REPAIRED_BY: record_path, WATERMARK: str(table_watermark(table))})
    step(f"staged:{diffs[0].name}")
    lease.check()
    tx.commit_transaction()
    return out, main_moved


def _schema_at(table: Table, d: TableDifference, derived: list[tuple[str, str, bool]]) -> int:
    """The schema to write W's snapshot with: the tag's, or for a lost tag the table's schema like the derived one."""
    if d.snapshot_before is not None:
        schema_id = table.metadata.snapshot_by_id(d.snapshot_before).schema_id  # type: ignore[union-attr]
        assert schema_id is not None
        return schema_id
    for schema in reversed(table.metadata.schemas):
        if [(f.name, str(f.field_type), f.required) for f in schema.fields] == derived:
            return schema.schema_id
    raise RepairError(f"{d.name}: tag {tag_name(d.watermark)} is lost and the table never had the columns the archive "
                      f"derives at W {d.watermark} ({', '.join(n for n, _, _ in derived)}); rebuild the pipeline under a new name")


def _update_published(config: PipelineConfig, storage: Storage, catalog: Any, w: int, repaired: dict[str, Any]) -> None:
    """The record of W names each table's snapshot at its (moved) tag, and says it was repaired."""
    doc = read_published(storage, config.name, w)
    assert doc is not None
    by_uuid = {str(t.metadata.table_uuid): t for t in cat.pipeline_tables(catalog, config)}
    for entry in doc["tables"]:
        table = by_uuid.get(entry["uuid"])
        snapshot = table.snapshot_by_name(tag_name(w)) if table is not None else None
        if snapshot is not None:
            entry["snapshot"] = snapshot.snapshot_id
    doc["repaired"] = repaired
    storage.write(published_path(config.name, w), _json(doc))


def _json(doc: dict[str, Any]) -> bytes:
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2)
