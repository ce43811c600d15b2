"""Execute a table's apply plan against Iceberg: one transaction per table (renames aside).

Progress is recorded with the data: the transaction sets the table property
``tidelake.watermark`` and stamps every snapshot it writes with the watermark and the
interval, so a table is either fully at the new watermark or untouched; in a run without
renames it also tags the table ``wm_<W>`` (``_stage_tag``), so the tag exists exactly when the
data does, and the table costs one catalog commit. Rows are
written by the executors (``Fold.rewrite``: the data files that can hold a touched key get a
position delete file naming its rows -- merge-on-read, the default -- or are rewritten without it
-- copy-on-write --, the net rows written as new files); the driver stages
the removed and added files as one overwrite snapshot per data step (``spark.tables.internals``)
in the table's transaction, next to its schema changes, and commits once. Each DDL change is one
small update staged in that transaction (``spark.tables.updates``); this module only decides
their order, the renames (which are catalog operations, not transactional) and the commit. An
ADD COLUMN whose default MySQL gives the rows the table holds is one more rewrite (``_fill``).

A run whose plans rename or copy tables commits them one after another, in the plans' order
(``spark.commit.plan``), and every commit a plan makes stamps the table with ``tidelake.plan``
(``<interval>:<place of the plan in that order>``), creations included. A retry of the run
(``resume_from``) skips every plan before the latest stamp: later plans may have moved their
tables' names on (``RENAME TABLE t TO _t_del, _t_gho TO t``), so a name alone no longer says
which plan its table is at. A RENAME onto the name of a dropped table first moves the dropped
one aside (``catalog.release_name``): its history stays readable at the Ws before its drop.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table, Transaction
from pyiceberg.table.update.snapshot import ManageSnapshots

from cdc_codecs import ColumnType, DdlChange, protocol_spec
from cdc_codecs._base import parse_timezone
from spark.commit.isolation import the_runs
from spark.commit.plan import DataStep, SchemaStep, TablePlan
from spark.core.watermark import tag_name
from spark.config import PipelineConfig, TopicConfig
from spark.write.plane import FillRequest, RewriteRequest
from spark.tables import catalog as cat
from spark.tables import exchange, updates
from spark.tables.partitioning import MYSQL, upstream_server
from spark.tables.ddl_changes import (
    AddColumn,
    ChangeColumnType,
    CreateTable,
    CreateTableLike,
    DropColumn,
    DropPartitions,
    DropTable,
    ExchangePartition,
    RenameColumn,
    RenameTable,
    SetKeyColumns,
    TruncatePartitions,
    TruncateTable,
)
from spark.tables.properties import (
    CREATED_AT,
    DELETE_GRANULARITY,
    DROPPED,
    INTERVAL,
    PARTITIONING,
    PLAN,
    PREVIOUS,
    RENAME_PENDING,
    RENAMED_FROM,
    SCHEMA_CHANGED_AT,
    UPSTREAM_TYPE_PREFIX,
    WATERMARK,
    upstream_schema_record,
    WRITE_MODE_PROPERTIES,
    created_at,
    key_columns,
    table_watermark,
    upstream_keys,
    upstream_types,
)
from spark.tables.ddl_defaults import OlderValue, ValueNotReproducible, existing_rows_value
from spark.tables.schema_map import arrow_table, iceberg_schema, table_columns
from spark.tables.updates import RowSchemaMismatch, UnsupportedSchemaChange
from spark.tables import internals
from spark.tables.files import LiveFiles, live_files
from spark.write.rewrite import FileRewrite
from spark.write.target import TableTarget
from spark.write.upsert import UpsertTarget, group_costs, small_file_merges

if TYPE_CHECKING:
    from spark.write.plane import Fold


@dataclass(frozen=True)
class RunContext:
    watermark: int
    previous: int
    interval: str



# A plan's commit, paused at each data step (and each ADD COLUMN that fills the table's rows):
# yields the step's rewrite request, is sent its rewrites.
CommitSteps = Generator[RewriteRequest | FillRequest, list[FileRewrite], Table | None]


def drive(steps: CommitSteps, rewrite: Callable[[RewriteRequest | FillRequest], list[FileRewrite]]) -> Table | None:
    """Run a plan's ``commit_steps`` to the end, answering each request with ``rewrite``."""
    try:
        request = next(steps)
        while True:
            request = steps.send(rewrite(request))
    except StopIteration as stop:
        return stop.value


class TableCommitter:
    """Runs plans for one pipeline against one catalog.

    ``tables``: the run's tables (``catalog.RunTables``), read and written through."""

    def __init__(self, catalog: Catalog, config: PipelineConfig, fault: Callable[[str], None] | None = None,
                 check: Callable[[], None] | None = None, tables: cat.RunTables | None = None) -> None:
        self.catalog = catalog
        self.config = config
        self.tables = tables or cat.RunTables(catalog, config)
        # Called with "staged:<table>" when data files are written but not committed (tests crash there).
        # Its errors and the lease check's are the run's, never the table's (isolation.the_runs).
        self.fault = the_runs(fault) if fault else (lambda step: None)
        # Called before every commit: the run still holds the pipeline's lease (raises if not).
        self.check = the_runs(check) if check else (lambda: None)
        # Names a held table left in this run for a new table (spark.commit.isolation, RunIsolation.gone):
        # the Iceberg table under one is still the held table's, which upstream no longer has there.
        self.released: frozenset[tuple[str, str]] = frozenset()

    # -- entry point

    def resume_from(self, run: RunContext) -> int:
        """The place of the latest plan of ``run`` an earlier attempt committed to any table (-1:
        none). Plans run one after another (a run with renames or copies), so every plan before it
        is done, whatever tables and names it left."""
        prefix = f"{run.interval}:"
        stamps = [t.properties.get(PLAN, "") for t in self.tables.all()]
        return max((int(p[len(prefix):]) for p in stamps if p.startswith(prefix)), default=-1)

    def commit_plan(self, plan: TablePlan, run: RunContext, fold: Fold, tag: bool = False) -> Table | None:
        """Apply ``plan`` if the table is not already at ``run.watermark``; returns the table after it.

        ``fold`` holds the run's net changes on the executors and rewrites files for a data step;
        ``tag``: see ``commit_steps``.
        """
        return drive(self.commit_steps(plan, run, fold, tag), lambda request: fold.rewrite([request])[0])

    def commit_steps(self, plan: TablePlan, run: RunContext, fold: Fold, tag: bool = False) -> CommitSteps:
        """``commit_plan`` as a generator that yields a ``RewriteRequest`` per data step and is sent
        that request's file rewrites: a run advances every table's plan to its next data step, has
        the executors rewrite all of those tables in one job, and sends each its files (``drive``
        does it for one plan). ``tag``: the plan's commit tags the table ``wm_<W>`` too
        (``_stage_tag``), for a run that will tag every table it commits."""
        table = self.tables.load(plan.database, plan.table)
        if table is not None and table_watermark(table) >= run.watermark:
            return table  # committed by an earlier attempt of this run
        if table is not None and plan.continues and table.properties.get(PLAN) == _stamp(plan, run)[PLAN]:
            return table  # its part committed by an earlier attempt (progress is the table's later plan's)
        if table is not None and created_at(table) > run.watermark:
            return None  # a later run made the table that has the name now: this plan's table is elsewhere, done
        self.check()  # before the first catalog write of the plan (creating a table is one)
        rename = next((c for s in plan.steps if isinstance(s, SchemaStep) for c in s.changes if isinstance(c, RenameTable)), None)
        if rename is not None:
            done = self._resume_rename(table, plan, rename, run)
            if done is not None:
                return done
        tx: Transaction | None = None
        current = table
        # Columns a statement added with a value for the rows the table holds: {field id: value},
        # filled in one rewrite once the statement's changes are staged (ADD a ..., ADD b ...).
        fills: dict[int, Any] = {}
        # What the plan's statements gave the rows of before them in the columns they added: {field id:
        # (OlderValue, the statement's commitTs and partition)} (``older_rows``), whether or not the lake
        # holds rows.
        older: dict[int, tuple[OlderValue, int, tuple[str, int]]] = {}
        statement: DdlChange | None = None
        for step in plan.steps:
            if fills and (not isinstance(step, SchemaStep) or step.ddl is not statement):
                yield from self._fill(current, tx, fills, run)  # type: ignore[arg-type]
                fills = {}
            if isinstance(step, SchemaStep):
                statement = step.ddl
                for change in step.changes:
                    if isinstance(change, (CreateTable, CreateTableLike, DropTable)):
                        older = {}  # another table's columns from here
                    if isinstance(change, (CreateTable, CreateTableLike)):
                        current, tx = self._create(current, tx, change, step, plan, run)
                        continue
                    if current is None and isinstance(change, (DropTable, TruncateTable, TruncatePartitions, DropPartitions)):
                        continue  # DROP TABLE [IF EXISTS] / TRUNCATE of a table the lake never had: no rows to delete
                    if current is None:
                        raise UnsupportedSchemaChange(
                            f"{plan.database}.{plan.table}: {step.ddl.sql!r} at commitTs {step.ddl.commit_ts} changes a table "
                            "tidelake has not seen created; start the pipeline before the table's CREATE TABLE, or create it "
                            "from a BOOTSTRAP/tableChanges-carrying protocol"
                        )
                    if isinstance(change, RenameTable):
                        # Renames are not transactional: commit the data with a marker, then rename.
                        tx = tx or internals.transaction(current)
                        if fills:  # ALTER TABLE t ADD c ... DEFAULT 1, RENAME TO u
                            yield from self._fill(current, tx, fills, run)
                            fills = {}
                        tx.set_properties({RENAME_PENDING: f"{run.interval}:{change.database}.{change.table}", **_stamp(plan, run)})
                        props = tx.table_metadata.properties
                        if CREATED_AT not in props and WATERMARK not in props:
                            # Made by this run (or its crashed attempt), and a rename ends the plan
                            # before _finish: the table exists from this W on, not at earlier ones.
                            tx.set_properties({CREATED_AT: str(run.watermark)})
                        self.check()
                        tx.commit_transaction()
                        tx = None
                        current = self._rename(current, change, plan, run)
                        continue
                    tx = tx or internals.transaction(current)
                    update = updates.SchemaUpdate(current, tx, step.ddl.sql, step.ddl.commit_ts, self.config.layout.buckets,
                                                  self._server(step.ddl))
                    if isinstance(change, ExchangePartition):  # reads the other table: not a one-table update
                        exchange.stage(self.tables, update, change, plan.ref, step.ddl, step.exchange)
                        continue
                    added = isinstance(change, AddColumn) and updates.field_name(update.fields(), change.column.name) is None
                    if isinstance(change, ChangeColumnType) and (field_id := _field_id(update, change.name)) in older:
                        # The rows of before the ADD hold the value converted (FLOAT to DOUBLE: 1.1 reads 1.100000023841858).
                        value, at, where = older[field_id]
                        older[field_id] = value.retyped(change.type, self._statement_clock(step.ddl)[1]), at, where
                    updates.stage(change, update)
                    if added:
                        fills.update(self._existing_rows_fill(update, change, step.ddl))
                        older.update(self._older_rows_value(update, change, step.ddl))
            else:
                if current is None:
                    if not step.upserts:
                        continue  # only deletes, of a table the lake never had: nothing to delete
                    current = self.tables.add(create_from_rows(self.catalog, self.config, plan, step, fold,
                                                               {**_stamp(plan, run), CREATED_AT: str(run.watermark)}))
                tx = tx or internals.transaction(current)
                if step.upserts and DROPPED in tx.table_metadata.properties:
                    # Rows for a dropped table (a changefeed re-sending old messages after the
                    # DROP, ordered by offset): the table lives again, as a table the lake never
                    # saw created is made by its rows.
                    tx.remove_properties(DROPPED)
                yield from self._write_rows(current, tx, plan, step, run, fold, older)
        if fills:
            yield from self._fill(current, tx, fills, run)  # type: ignore[arg-type]
        if current is None:
            return None
        if plan.continues:  # the table's later plan in the run records progress
            if tx is not None:
                tx.set_properties(_stamp(plan, run))
                self.check()
                tx.commit_transaction()
        elif not isinstance(plan.steps[-1], SchemaStep) or not isinstance(plan.steps[-1].changes[-1], RenameTable):
            self._finish(current, tx, plan, run, tag)
        # else: a rename ends its plan; the renamed table's own plan (if any) records progress.
        return current  # its commits replaced its metadata

    # -- steps

    def _create(self, table: Table | None, tx: Transaction | None, change: CreateTable | CreateTableLike, step: SchemaStep,
                plan: TablePlan, run: RunContext):
        copied: dict[str, str] = {}
        if isinstance(change, CreateTableLike):
            like, partitioning = updates.like_schema(self.catalog, self.config, change, step.ddl.sql, step.ddl.commit_ts,
                                                     step.source_at, run.watermark)
            change = CreateTable(like, change.if_not_exists)
            if partitioning is not None:  # LIKE copies the source's partitioning too
                copied[PARTITIONING] = partitioning
        schema = change.schema
        types = {f"{UPSTREAM_TYPE_PREFIX}{c.name}": str(c.type) for c in schema.columns}
        changed_at = {SCHEMA_CHANGED_AT: str(step.ddl.commit_ts or 0)}
        if table is None:
            table = self.tables.add(cat.create_table(self.catalog, self.config, schema.database, schema.table,
                                                     iceberg_schema(table_columns(schema)), schema.key_columns,
                                                     properties={**_stamp(plan, run), CREATED_AT: str(run.watermark)}))
            tx = internals.transaction(table)
            tx.set_properties({**types, **changed_at, **copied, CREATED_AT: str(run.watermark)})
            return table, tx
        props = (tx.table_metadata if tx is not None else table.metadata).properties
        # Upstream has the table if an earlier run committed it (a crashed attempt of this run
        # leaves a table without a watermark) or this plan made it, and no DROP came since.
        exists_upstream = DROPPED not in props and (tx is not None or WATERMARK in props) and not (
            tx is None and plan.ref in self.released)
        if change.if_not_exists and exists_upstream:
            return table, tx  # CREATE TABLE IF NOT EXISTS on a table upstream kept as it was
        # The table exists: a retry, or CREATE after DROP. Make it empty with the new columns.
        tx = tx or internals.transaction(table)
        updates.recreate(table, tx, schema, self.config.layout.buckets, {**types, **changed_at, **copied})
        return table, tx

    def _server(self, ddl: DdlChange) -> str:
        """The server upstream of the statement's topic (where it places a HASH partitioned row)."""
        topic = next((t for t in self.config.topics if t.name == ddl.position.topic), None)
        return upstream_server(topic.protocol) if topic is not None else MYSQL

    def _existing_rows_fill(self, update: updates.SchemaUpdate, change: AddColumn, ddl: DdlChange) -> dict[int, Any]:
        """{field id: value} the rows the table holds get in the column ``change`` added, when not NULL
        (``updates.existing_rows_fill``, at the statement's time in the topic's time zone)."""
        return updates.existing_rows_fill(update, change, *self._statement_clock(ddl))

    def _older_rows_value(self, update: updates.SchemaUpdate, change: AddColumn, ddl: DdlChange,
                          ) -> dict[int, tuple[OlderValue, int, tuple[str, int]]]:
        """{field id: (what MySQL gives a row of before the statement in the column ``change`` added
        (``OlderValue``: known or not), the statement's commitTs, its topic and partition)}, whether or
        not the lake holds rows."""
        field_id = _field_id(update, change.column.name)
        older = OlderValue.of(change.column, change.default, *self._statement_clock(ddl))
        where = (ddl.position.topic, ddl.position.partition)
        return {field_id: (older, ddl.commit_ts or 0, where)} if field_id is not None else {}

    def _statement_clock(self, ddl: DdlChange) -> tuple[int, dt.tzinfo]:
        """When a statement ran (epoch ms) and the time zone of its topic's upstream."""
        topic = next((t for t in self.config.topics if t.name == ddl.position.topic), None)
        return _statement_ms(ddl, topic), parse_timezone(topic.options.get("timezone", "UTC") if topic else "UTC")

    def _fill(self, table: Table, tx: Transaction, fills: dict[int, Any],
              run: RunContext) -> Generator[FillRequest, list[FileRewrite], None]:
        """Give every row the table holds the ``fills`` (field id -> value) of the columns a statement
        added: MySQL gives them the column's default. The executors rewrite the live data files with
        them, staged in the table's transaction after the run's rows before the statement (so those
        get it too) and before the rows after it (which carry their own values). Iceberg v3's
        ``initial-default`` would say it in metadata, but pyiceberg 0.12 writes no v3 table and
        Iceberg Java refuses the field on a v2 one."""
        metadata = tx.table_metadata
        columns = [f for f in metadata.schema().fields if f.field_id in fills]  # by id: a later clause may rename
        if not columns:
            return  # dropped again by the same statement
        head = metadata.snapshot_by_name(internals.MAIN_BRANCH)
        assert head is not None  # fills are only made for a table with rows
        live = live_files(table.io, head)
        values = arrow_table(Schema(*columns), [{f.name: fills[f.field_id] for f in columns}])
        target = TableTarget.from_metadata(".".join(table.name()), metadata, table.io.properties)
        deletes = tuple(live.deletes_of(f) for f in live.data) if live.deletes else ()
        rewrites = yield FillRequest(*cat.upstream_name(table), target, live.data, deletes, values)
        internals.stage_overwrite(
            tx, target.name, expected_snapshot_id=head.snapshot_id,
            removed=[r.removed for r in rewrites if r.removed is not None], added=[f for r in rewrites for f in r.added],
            deletes_removed=[d for r in rewrites for d in r.deletes_removed],
            snapshot_properties={WATERMARK: str(run.watermark), INTERVAL: run.interval},
        )

    def _rename(self, table: Table, change: RenameTable, plan: TablePlan, run: RunContext) -> Table:
        new_id = cat.identifier(self.config, change.database, change.table)
        existing = self.tables.load(change.database, change.table)
        if existing is not None and DROPPED not in existing.properties and (change.database, change.table) in self.released:
            # A held table that left the name (spark.commit.isolation): upstream has no table there, so it
            # is marked gone from it -- rows and tags as they were, read at the Ws before it was held -- and
            # moves aside as a dropped one does; what it went on as stays held.
            self.check()
            with internals.transaction(existing) as tx:
                tx.set_properties({DROPPED: str(run.watermark), WATERMARK: str(run.watermark), **_stamp(plan, run)})
            existing = self.catalog.load_table(existing.name())
        if existing is not None and DROPPED in existing.properties:
            # A dropped table's history holds the name (its tags, read at the Ws before its drop):
            # it moves aside. The table renamed here carries this plan's stamp already.
            self.check()
            self.tables.moved()
            cat.release_name(self.catalog, self.config, existing)
        elif existing is not None:
            raise UnsupportedSchemaChange(
                f"RENAME to {change.database}.{change.table}: the Iceberg table {new_id} holds that name and is not dropped, "
                "while upstream renames only onto a free name: the stream lacks that table's DROP or RENAME"
            )
        self.check()
        self.tables.moved()
        renamed = cat.rename_table(self.catalog, table, new_id)  # creates the target database's namespace
        self.fault(f"renamed:{'.'.join(new_id[1:])}")
        return self._mark_renamed(renamed, change, plan, run)

    def _mark_renamed(self, renamed: Table, change: RenameTable, plan: TablePlan, run: RunContext) -> Table:
        """The rename's second commit: the table answers to its new upstream name and records the
        old one; the pending marker goes."""
        self.check()
        old = f"{renamed.properties.get(cat.UPSTREAM_DATABASE)}.{renamed.properties.get(cat.UPSTREAM_TABLE)}"
        with internals.transaction(renamed) as tx:
            tx.set_properties({cat.UPSTREAM_DATABASE: change.database, cat.UPSTREAM_TABLE: change.table,
                               RENAMED_FROM: f"{run.interval}:{old}", **_stamp(plan, run)})
            if RENAME_PENDING in renamed.properties:
                tx.remove_properties(RENAME_PENDING)
        return self.catalog.load_table(renamed.name())

    def _resume_rename(self, table: Table | None, plan: TablePlan, rename: RenameTable, run: RunContext) -> Table | None:
        """A retry of a run that died around a rename: finish it instead of replaying the plan.

        Three points to resume from: the data committed with the pending marker (rename it, after
        moving aside a dropped table that holds the name, if that did not happen yet); the catalog
        renamed it but the second commit is missing (the new name holds the marker and still the
        old upstream name: mark it); or both done. Which plan of the run to resume at is the
        run's ``resume_from``."""
        pending = f"{run.interval}:{rename.database}.{rename.table}"
        if table is not None and table.properties.get(RENAME_PENDING) == pending:
            return self._rename(table, rename, plan, run)  # data committed, rename not done
        if table is None:
            renamed = self.tables.load(rename.database, rename.table)
            if renamed is None:
                return None
            if renamed.properties.get(RENAMED_FROM) == f"{run.interval}:{plan.database}.{plan.table}":
                return renamed  # already renamed by the earlier attempt
            if (renamed.properties.get(RENAME_PENDING) == pending
                    and cat.upstream_name(renamed) == (plan.database, plan.table)):
                return self._mark_renamed(renamed, rename, plan, run)  # renamed, second commit missing
        return None

    def _write_rows(self, table: Table, tx: Transaction, plan: TablePlan, step: DataStep, run: RunContext,
                    fold: Fold, older: dict[int, tuple[OlderValue, int, tuple[str, int]]],
                    ) -> Generator[RewriteRequest, list[FileRewrite], None]:
        """One data step: the executors rewrite the files holding touched keys and write the net
        rows; the driver stages their files as one overwrite snapshot in ``tx``."""
        # Only where every topic sends whole rows: an after image of Canal's may lack an unchanged column
        # (MINIMAL), which is no row of before the ADD COLUMN (with omitted_columns = "null": NULL, as before).
        target, head = upsert_target(table, tx.table_metadata, plan, step, fold, self.config.layout.merge_on_read,
                                     self.config.maintenance.target_file_size, self.config.holds_omitted_columns,
                                     older if self.config.whole_rows else None)
        rewrites = yield RewriteRequest(plan.database, plan.table, step.segment, target)
        internals.stage_overwrite(
            tx, target.table.name, expected_snapshot_id=head,
            removed=[r.removed for r in rewrites if r.removed is not None], added=[f for r in rewrites for f in r.added],
            deletes_added=[d for r in rewrites for d in r.deletes_added],
            deletes_removed=[d for r in rewrites for d in r.deletes_removed],
            snapshot_properties={WATERMARK: str(run.watermark), INTERVAL: run.interval},
        )

    def _finish(self, table: Table, tx: Transaction | None, plan: TablePlan, run: RunContext, tag: bool = False) -> None:
        tx = tx or internals.transaction(table)
        progress = {WATERMARK: str(run.watermark), PREVIOUS: str(run.previous), INTERVAL: run.interval, **_stamp(plan, run)}
        if CREATED_AT not in tx.table_metadata.properties:
            progress[CREATED_AT] = str(run.watermark)
        # How this pipeline writes, for other engines that write the table. File-scoped position deletes
        # (Spark's write.delete.granularity) are the only ones tidelake can read and compact.
        wanted = {**dict.fromkeys(WRITE_MODE_PROPERTIES, self.config.layout.write_mode), DELETE_GRANULARITY: "file"}
        properties = tx.table_metadata.properties
        progress.update({k: v for k, v in wanted.items() if properties.get(k) != v})
        # The key and column types upstream gave the table at this W, for readers of this W later.
        progress.update(upstream_schema_record(properties, run.watermark))
        tx.set_properties(progress)
        if tag:
            _stage_tag(tx, run.watermark)
        self.fault(f"staged:{'.'.join(table.name()[1:])}")
        self.check()
        tx.commit_transaction()


def _field_id(update: updates.SchemaUpdate, column: str) -> int | None:
    """The field id of upstream column ``column`` in the table as ``update`` has staged it."""
    name = updates.field_name(update.fields(), column)
    return next((f.field_id for f in update.tx.table_metadata.schema().fields if f.name == name), None)


def _statement_ms(ddl: DdlChange, topic: TopicConfig | None) -> int:
    """When the statement ran (epoch ms): its commitTs's physical part where the protocol carries
    TiDB's commitTs, else its binlog event time (the statement's start, which MySQL's NOW() returns)."""
    derived = topic is not None and not protocol_spec(topic.protocol).has_commit_ts
    if (derived or ddl.commit_ts is None) and ddl.event_time_ms is not None:
        return ddl.event_time_ms
    return (ddl.commit_ts or 0) >> 18


def _stamp(plan: TablePlan, run: RunContext) -> dict[str, str]:
    """The property that says this plan of this run committed to a table (``TableCommitter.resume_from``)."""
    return {PLAN: f"{run.interval}:{plan.sequence}"}


def create_from_rows(catalog: Catalog, config: PipelineConfig, plan: TablePlan, step: DataStep, fold: Fold,
                     properties: dict[str, str] | None = None) -> Table:
    """Rows for a table no DDL created (the pipeline started after it): the rows' types make it.

    Committed at once, like every table creation: a run that stops before its data commit leaves
    an empty table without a watermark, which the retry finds and fills.
    """
    columns: dict[str, ColumnType]
    columns, keys = fold.row_schema(plan.database, plan.table, step.segment)
    if not columns:
        raise UnsupportedSchemaChange(f"{plan.database}.{plan.table}: rows without column types and no CREATE TABLE")
    table = cat.create_table(catalog, config, plan.database, plan.table, iceberg_schema(list(columns.items())), keys,
                             properties=properties)
    with internals.transaction(table) as tx:
        tx.set_properties({f"{UPSTREAM_TYPE_PREFIX}{n}": str(t) for n, t in columns.items()})
    return table


def upsert_target(table: Table, metadata: Any, plan: TablePlan, step: DataStep, fold: Fold,
                  merge_on_read: bool, target_file_size: int = 0, hold_omitted: bool = False,
                  older: dict[int, tuple[OlderValue, int, tuple[str, int]]] | None = None,
                  ) -> tuple[UpsertTarget, int | None]:
    """What the executors need to rewrite ``table`` (as ``metadata`` has it) for a data step, and the
    snapshot id of the branch head that plan is made against. Merge-on-read, the small files
    (``files.is_small`` of ``target_file_size``; 0: none) that ``upsert.small_file_merges`` picks
    are merged into the files the step writes. ``hold_omitted``: ``row_columns``'. ``older``: the
    values the run's ADD COLUMNs before the step gave the rows of before them (``older_rows``)."""
    props = metadata.properties
    renames = row_columns(metadata, plan, step, fold, hold_omitted)
    keys = key_columns(props)
    if not keys:
        keys = fold.row_schema(plan.database, plan.table, step.segment)[1]
    multiset = not keys
    if multiset:  # without a key the whole row is the key, and rows equal in every column are copies
        keys = tuple(updates.upstream_fields(metadata))
    upstream = upstream_types(props)
    head = metadata.snapshot_by_name(internals.MAIN_BRANCH)
    live = live_files(table.io, head) if head is not None else LiveFiles((), {})
    target = TableTarget.from_metadata(".".join(table.name()), metadata, table.io.properties)
    deletes = tuple(live.deletes_of(f) for f in live.data) if live.deletes else ()
    merge_on_read = merge_on_read and metadata.format_version >= 2  # a v1 table (made by hand) holds no delete files
    merged = (small_file_merges(metadata, live.data, keys, step.upserts, target_file_size)
              if merge_on_read and not multiset and target_file_size else ())
    older_values = {} if hold_omitted or multiset else older_rows(
        metadata, older or {}, fold.written_column_sets(plan.database, plan.table, step.segment), renames,
        _rows_written(plan, step))
    planned = UpsertTarget(target, live.data, keys, upstream, deletes, merge_on_read, merged, step.upserts,
                           multiset=multiset, renames=renames, older_rows=older_values)
    return dataclasses.replace(planned, costs=group_costs(planned, metadata)), head.snapshot_id if head is not None else None


def older_rows(metadata: Any, added: dict[int, tuple[OlderValue, int, tuple[str, int]]], column_sets: Any,
               renames: dict[str, str | None], where: str = "") -> dict[str, tuple[Any, int, tuple[str, int]]]:
    """{column: (value, the statement's commitTs, its topic and partition)} for a data step's rows
    that lack a column the run added before them (``added``: field id -> what MySQL gave the rows of
    before the statement, when and where) where other rows of the step carry it: not a column the
    upstream filters out, so a row lacking it at the statement's commitTs in another partition is of
    before the statement, placed after it by a derived clock (a row committed just before the ADD
    COLUMN in its second), and holds what the statement gave the rows then -- its DEFAULT, not NULL
    (the writer gives it to such rows alone: one lacking it later, or after the statement in its
    partition, whose order is the binlog's, is an older image re-sent, written as it comes). Where no row carries
    it, it may be filtered out (``omitted_columns = "null"``): NULL, as before. With
    ``omitted_columns = "hold"`` such rows hold the table instead (``_omitted``: an after image
    without an unchanged column cannot be told from them).

    Raises:
        RowSchemaMismatch: such rows where MySQL's value cannot be known (an expression DEFAULT, a
        conversion tidelake does not make): NULL would be a silent wrong answer; the table is held.
    """
    names = {f.field_id: f.name for f in metadata.schema().fields}
    out = {}
    for field_id, (older, at, position) in added.items():
        name = names.get(field_id)
        if name is None:
            continue  # dropped again in the run
        carried = [name.casefold() in {(renames.get(c) or c).casefold() for c in columns} for columns in column_sets if columns]
        if not any(carried) or all(carried):
            continue
        if older.unknown is not None:
            raise RowSchemaMismatch(
                f"{where} lack {name!r} where others of them carry it: such a row was committed just before the "
                "ADD COLUMN that made the column and placed after it, the clock being derived from binlog time "
                "(docs/consistency.md), and holds what MySQL gave the rows then, which tidelake cannot know "
                f"({older.unknown}). The table is held rather than write NULL there; re-create it from a snapshot")
        if older.value is not None:
            out[name] = (older.value, at, position)
    return out


def row_columns(metadata: Any, plan: TablePlan, step: DataStep, fold: Fold, hold_omitted: bool = False,
                ) -> dict[str, str | None]:
    """How the rows a data step writes name the table's columns: ``{row name: table column}``
    where they differ (None: a column the run dropped), empty where they do not.

    MySQL's column names ignore case, so a row naming ``id`` writes the table's ``Id``. Without
    commitTs, a row committed just before a DDL in its millisecond (or a binlog's second) can be
    placed after it (docs/consistency.md): it names a column the run's DDL dropped (the column
    goes, and its value with it) or renamed (its value goes to the new name).

    Raises:
        RowSchemaMismatch: rows naming a column the table does not have at their commitTs -- the
        stream contradicts its own DDL (a schema change it did not carry; a change re-sent, without
        commitTs, after its table was made again), and writing them would lose those values (or
        write a key such a column holds NULL): the table is held instead. And rows naming a column
        the run renamed away and added again without its new name: of before that DDL or after it,
        which a derived clock cannot tell (``_renamed_and_added_again``). With ``hold_omitted``,
        rows lacking a column the table has (``_omitted``). And rows keyed by other columns than the
        table's primary key's (``_keyed_otherwise``: Debezium's message.key.columns), which the fold
        would net as one row where they are several.
    """
    fields = updates.upstream_fields(metadata)
    folded = {name.casefold(): name for name in fields}
    index = next(i for i, s in enumerate(plan.steps) if s is step)
    changes = [c for s in plan.steps[:index] if isinstance(s, SchemaStep) for c in s.changes]
    gone = _taken_by_ddl(changes)

    def column(name: str) -> str | None | bool:
        """The table's column a row's ``name`` is (None: dropped; False: none)."""
        if name in fields:
            return name
        if name.casefold() in folded:
            return folded[name.casefold()]
        went = gone.get(name.casefold(), False)
        return folded.get(went.casefold(), False) if isinstance(went, str) else went

    renames, extra = {}, []
    row_keys = fold.row_keys(plan.database, plan.table, step.segment)
    column_sets = fold.written_column_sets(plan.database, plan.table, step.segment)
    for name in sorted({c for columns in column_sets for c in columns}):
        to = column(name)
        if to is False:
            extra.append(name)
        elif to != name:
            renames[name] = to
    for name in {k for keys in row_keys for k in keys} - renames.keys():  # a deleted key's image is its key
        if (to := column(name)) not in (False, name):
            renames[name] = to
    where = _rows_written(plan, step)
    for columns in column_sets:
        if moved := _renamed_and_added_again(columns, folded, gone):
            name, went = moved
            raise RowSchemaMismatch(
                f"{where} name {name!r} without {went!r}: the run renamed {name!r} to {went!r} and added a new "
                f"{name!r}. Written before that DDL, such a row's value is {went!r}'s; after it, the new "
                f"{name!r}'s -- which cannot be told where the clock is derived from binlog time (a row "
                "committed just before a DDL in its second can be placed after it: docs/consistency.md)")
    if extra:
        raise RowSchemaMismatch(
            f"{where} name columns the table does not have then: {_shown(extra)} (its columns: {', '.join(map(repr, fields))}). "
            "A schema change the stream did not carry, or a change re-sent after the table was made again "
            "under its name; its values have no column to go to")
    if hold_omitted and (omitted := _omitted(fields, column_sets, column, changes)):
        raise RowSchemaMismatch(
            f"{where} lack columns the table has: {_shown(omitted)}. An after image without the columns its statement "
            "did not change (MySQL's binlog_row_image NOBLOB or MINIMAL, which Canal passes on) cannot be told from "
            "rows whose columns the upstream filters out (canal.instance.filter.field), and writing them NULL would "
            "lose their values: the table is held. Set binlog_row_image=FULL upstream and re-create the table from a "
            "snapshot (the rows already sent lack those values); where the upstream filters these columns out, set "
            "the pipeline's omitted_columns = \"null\": the next run replays the table from its held W")
    ddl = [c for s in plan.steps if isinstance(s, SchemaStep) for c in s.changes]
    # DDL of the run before these rows that is not this plan's: a table renamed onto the name (its
    # plan holds the rename), whose rows a derived clock places next to it carry the old table's key.
    renamed_onto = (step.segment > sum(isinstance(s, SchemaStep) for s in plan.steps[:index])
                    and not any(isinstance(c, CreateTable) for c in ddl))
    if not renamed_onto and (otherwise := _keyed_otherwise(metadata.properties, row_keys, column, ddl)):
        keyed, key = otherwise
        raise RowSchemaMismatch(
            f"{where} are keyed by {_shown(list(keyed))}, which does not hold the table's primary key "
            f"({_shown(list(key))}) and never was its key. Changes are netted per key and written by the primary "
            "key, so such a key merges different rows that share its values and leaves the row an UPDATE of the "
            "primary key moved away: the table is held. Upstream keys this table's messages by other columns "
            "(Debezium's message.key.columns: key them by the primary key, take the table out of it, and re-create "
            "the table from a snapshot, as the changes already sent are keyed otherwise), or re-sent changes "
            "of an earlier table of this name that had another key")
    return renames


# DDL that changes which key a table's rows carry: on a derived clock a row just before or after it
# in its second is placed on its other side, carrying its neighbour's key, and is written right by
# the table's (tests/spark/test_row_keys_review.py): a key set, a table renamed, or dropped (and made
# again). A table only made in the run is not among them: no row of it comes before its CREATE.
_KEY_CHANGES = (SetKeyColumns, RenameTable, DropTable)


def _keyed_otherwise(properties: dict[str, str], row_keys: Any, column: Callable[[str], str | None | bool],
                     ddl: list[Any]) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """Rows keyed by columns that are neither a superset nor a subset of the table's primary key's
    and never were its key -- (their key columns, the table's key) -- else None.

    A key holding the primary key's columns (MySQL's names ignore case; ``column`` follows the
    run's renames) identifies one row, so the fold nets MySQL's rows by it; a table without a
    primary key is netted by its rows' own key (TiCDC's handle key: a UNIQUE NOT NULL index).
    Not told apart from a derived clock's neighbours of a key change, and so not held: rows of a
    run whose DDL on the table changes keys (``ddl``: its plan's, before the rows or after them);
    rows keyed by a key the table had (``upstream_keys``: an online ALTER's concurrent writes,
    binlogged before it with later start times, reach the runs after it with the old key); and
    rows keyed by part of the primary key's columns -- the key an ALTER is about to narrow it to
    (a row blocked by its metadata lock, binlogged after it with an earlier start time, can come a
    run before it, which a hold would hold for good: the walk replays that run's window alone),
    though a message key of part of a composite key is netted by it too (docs/known-gaps.md)."""
    key = key_columns(properties)
    if not key or any(isinstance(c, _KEY_CHANGES) for c in ddl):
        return None

    def named(keys: tuple[str, ...]) -> frozenset[str]:
        return frozenset((to if isinstance(to := column(k), str) else k).casefold() for k in keys)

    wanted, had = named(key), {named(k) for k in upstream_keys(properties)}
    for keys in row_keys:
        if keys and not named(keys) >= wanted and not named(keys) < wanted and named(keys) not in had:
            return tuple(keys), key
    return None


def _rows_written(plan: TablePlan, step: DataStep) -> str:
    """Where a hold of a data step's rows names them."""
    return f"{plan.database}.{plan.table}: rows this run writes (after {step.segment} of its DDL in the run)"


def _shown(names: list[str]) -> str:
    return ", ".join(map(repr, names[:8])) + (f" and {len(names) - 8} more" if len(names) > 8 else "")


def _omitted(fields: list[str], column_sets: set[frozenset[str]], column: Callable[[str], str | None | bool],
             changes: list[Any]) -> list[str]:
    """The table's columns some written rows lack (rows carrying no column names -- a protocol
    without column types -- lack none), but for columns the run's DDL before them added NULL to
    every existing row: on a derived clock a row committed just before an ADD COLUMN can be placed
    after it, and MySQL gave it what the ADD COLUMN gave the rows then (``existing_rows_value``),
    which the row is written with only where that is NULL. Another DEFAULT: held."""
    added = {c.column.name.casefold() for c in changes if isinstance(c, AddColumn) and _null_for_existing_rows(c)}
    missing: set[str] = set()
    for columns in column_sets:
        if columns:
            carried = {to.casefold() for to in map(column, columns) if isinstance(to, str)}
            missing |= {f for f in fields if f.casefold() not in carried and f.casefold() not in added}
    return sorted(missing)


def _null_for_existing_rows(change: AddColumn) -> bool:
    """Whether MySQL gives the rows a table holds NULL in the column ``change`` adds."""
    try:  # the statement's time and zone matter only to a DEFAULT CURRENT_TIMESTAMP, never NULL
        return existing_rows_value(change.column, change.default, 0, dt.timezone.utc) is None
    except ValueNotReproducible:
        return False


def _renamed_and_added_again(columns: frozenset[str], folded: dict[str, str], gone: dict[str, str | None],
                             ) -> tuple[str, str] | None:
    """A column of a row's set the run renamed away and added again, whose new name the row lacks:
    (its name, the name it was renamed to); None if there is none. After ``RENAME COLUMN a TO b,
    ADD COLUMN a`` a row carrying ``a`` and ``b`` is of after the DDL, one carrying ``a`` alone of
    before it (the case-only rename ``a TO A`` is no such column: its row carries its new name)."""
    names = {c.casefold() for c in columns}
    for name in sorted(columns):
        went = gone.get(name.casefold())
        if isinstance(went, str) and name.casefold() in folded and went.casefold() not in names:
            return name, went
    return None


def _taken_by_ddl(changes: list[Any]) -> dict[str, str | None]:
    """Columns the changes renamed or dropped: {old name, casefolded: its name after them (None: dropped)}
    -- since the table was last made (a column of a table dropped and made again is no column of it)."""
    gone: dict[str, str | None] = {}
    for change in changes:
        if isinstance(change, (CreateTable, CreateTableLike, DropTable)):
            gone = {}
        elif isinstance(change, (RenameColumn, DropColumn)):
            old, new = (change.old, change.new) if isinstance(change, RenameColumn) else (change.name, None)
            gone = {k: new if v is not None and v.casefold() == old.casefold() else v for k, v in gone.items()}
            gone[old.casefold()] = new
    return gone


def _stage_tag(tx: Transaction, watermark: int) -> None:
    """Tag the head of ``main`` as ``tx`` leaves it ``wm_<W>``, in ``tx``: the data and its tag in one
    commit, one catalog commit per table and run instead of two. Iceberg applies a commit's
    updates in order, so the tag may name the snapshot the same commit adds (pyiceberg 0.12 checks
    it against the transaction's metadata, which holds it). Left to ``tag_table`` when the head
    records an older schema than the table's (a schema change after the run's last rows: the tag
    needs an empty snapshot carrying it) or when W is 0 (nothing is consistent yet)."""
    metadata = tx.table_metadata
    head = metadata.snapshot_by_name(internals.MAIN_BRANCH)
    name = tag_name(watermark)
    if watermark and head is not None and head.schema_id == metadata.current_schema_id and name not in metadata.refs:
        ManageSnapshots(tx).create_tag(head.snapshot_id, name).commit()


def tag_table(table: Table, watermark: int) -> None:
    """Tag the current snapshot ``wm_<W>`` and record that the table is at W, in one commit.

    A table the run did not change is at W too; recording it keeps every table's own
    watermark exact, which is what later runs compare.
    """
    name = tag_name(watermark)
    if name in table.refs():
        return
    snapshot = table.current_snapshot()
    if snapshot is None or snapshot.schema_id != table.metadata.current_schema_id:
        # A tag reads its snapshot's schema: after a schema-only change (ALTER with no rows
        # since), an empty snapshot carries the current schema to the tag.
        with internals.transaction(table) as tx:
            tx.append(pa.Table.from_pylist([], schema=tx.table_metadata.schema().as_arrow()), snapshot_properties={WATERMARK: str(watermark)})
        snapshot = table.current_snapshot()
        assert snapshot is not None
    tx = internals.transaction(table)
    ManageSnapshots(tx).create_tag(snapshot.snapshot_id, name).commit()  # staged: the transaction commits once
    if table_watermark(table) < watermark:
        tx.set_properties({WATERMARK: str(watermark)})
    tx.commit_transaction()
