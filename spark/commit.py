"""Execute a table's apply plan against Iceberg: one transaction per table (renames aside).

Progress is recorded with the data: the transaction sets the table property
``tidelake.watermark`` and stamps every snapshot it writes with the watermark and the
interval, so a table is either fully at the new watermark or untouched. Rows are
written copy-on-write by the executors (``Fold.rewrite``: the data files that can hold a
touched key are rewritten without it, the net rows written as new files); the driver stages
the removed and added files as one overwrite snapshot per data step (``iceberg.internals``)
in the table's transaction, next to its schema changes, and commits once. An ADD COLUMN
whose default MySQL gives the rows the table holds is one more such step (``_fill``).

A run whose plans rename or copy tables commits them one after another, in the plans' order
(``spark.apply_plan``), and every commit a plan makes stamps the table with ``tidelake.plan``
(``<interval>:<place of the plan in that order>``), creations included. A retry of the run
(``resume_from``) skips every plan before the latest stamp: later plans may have moved their
tables' names on (``RENAME TABLE t TO _t_del, _t_gho TO t``), so a name alone no longer says
which plan its table is at. A RENAME onto the name of a dropped table first moves the dropped
one aside (``catalog.release_name``): its history stays readable at the Ws before its drop.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.schema import Schema
from pyiceberg.table import Table, Transaction
from pyiceberg.table.update.snapshot import ManageSnapshots
from pyiceberg.types import DecimalType, DoubleType, FloatType, IcebergType, IntegerType, LongType

from cdc_codecs import Column, ColumnType, DdlChange, TableSchema, TidelakeError, parse_mysql_type, protocol_spec
from cdc_codecs._base import parse_timezone
from spark import catalog as cat
from spark.apply_plan import DataStep, SchemaStep, TablePlan
from spark.config import PipelineConfig, TopicConfig
from spark.ddl import (
    AddColumn,
    AddPartitions,
    ChangeColumnType,
    CreateTable,
    CreateTableLike,
    DropColumn,
    DropPartitions,
    DropTable,
    MoveColumn,
    RenameColumn,
    RenameTable,
    ReorganizePartitions,
    SetKeyColumns,
    SetPartitioning,
    TruncatePartitions,
    TruncateTable,
    ValueNotReproducible,
    existing_rows_value,
)
from spark.iceberg import internals
from spark.iceberg.files import LiveFiles, live_files
from spark.iceberg.layout import lay_out
from spark.iceberg.rewrite import FileRewrite
from spark.iceberg.target import TableTarget
from spark.iceberg.upsert import UpsertTarget
from spark.partitioning import Partitioning, UnknownPartitionRows
from spark.plane import FillRequest, RewriteRequest
from spark.schema_map import (
    COMMIT_TS,
    METADATA_PROPERTY,
    OP,
    arrow_table,
    iceberg_schema,
    iceberg_type,
    metadata_columns,
    metadata_field_ids,
    metadata_name,
    table_columns,
)
from spark.watermark import tag_name

if TYPE_CHECKING:
    from spark.plane import Fold

WATERMARK = "tidelake.watermark"
PREVIOUS = "tidelake.previous-watermark"
INTERVAL = "tidelake.interval"
DROPPED = "tidelake.dropped"
RENAME_PENDING = "tidelake.rename-pending"
RENAMED_FROM = "tidelake.renamed-from"
PLAN = "tidelake.plan"  # "<interval>:<n>": the last plan of that interval's run to commit to the table
CREATED_AT = "tidelake.created-at-watermark"  # the first W the table (its Iceberg identity) exists at
UPSTREAM_TYPE_PREFIX = "tidelake.column-type."
SCHEMA_CHANGED_AT = "tidelake.schema-changed-at"  # commitTs of the last DDL that changed the columns or key
PARTITIONING = "tidelake.partitioning"  # the upstream table's partitioning as the stream defined it (JSON)


# Iceberg's table properties for how updates, deletes and merges drop old rows.
WRITE_MODE_PROPERTIES = ("write.update.mode", "write.delete.mode", "write.merge.mode")
DELETE_GRANULARITY = "write.delete.granularity"


class UnsupportedSchemaChange(TidelakeError):
    """A DDL that Iceberg cannot express for this table."""


@dataclass(frozen=True)
class RunContext:
    watermark: int
    previous: int
    interval: str


def table_watermark(table: Table) -> int:
    return int(table.properties.get(WATERMARK, "0"))


def created_at(table: Table) -> int:
    """The first W the table exists at (0: unknown, a table made before this was recorded)."""
    return int(table.properties.get(CREATED_AT, "0"))


def walk_watermark(table: Table) -> int:
    """How far the run walk (``spark.apply``) counts a table: its watermark, or, for a table a run
    created and died before committing, just below the W it was created at -- no earlier interval
    has anything for it, so the walk need not replay them."""
    return table_watermark(table) or max(created_at(table) - 1, 0)


def _widened(old: IcebergType, new: IcebergType) -> bool:
    if old == new:
        return True
    if isinstance(old, IntegerType) and isinstance(new, LongType):
        return True
    if isinstance(old, FloatType) and isinstance(new, DoubleType):
        return True
    if isinstance(old, DecimalType) and isinstance(new, DecimalType):
        return new.scale == old.scale and new.precision >= old.precision
    return False


def _key_columns(properties: dict[str, str]) -> tuple[str, ...]:
    return tuple(json.loads(properties.get(cat.KEY_COLUMNS, "[]")))


def _field_name(fields: dict[str, Any], column: str) -> str | None:
    """The table's name for upstream column ``column`` among ``fields`` (upstream columns): MySQL
    column names ignore case."""
    if column in fields:
        return column
    folded = [n for n in fields if n.casefold() == column.casefold()]
    return folded[0] if len(folded) == 1 else None


def _upstream_fields(metadata: Any) -> dict[str, Any]:
    """The table's upstream columns (its metadata columns left out), by name."""
    meta = metadata_columns(metadata.schema(), metadata.properties).names
    return {f.name: f for f in metadata.schema().fields if f.name not in meta}


def _metadata_aside(tx: Transaction, upstream: list[str], *, new_table: bool = False) -> None:
    """Rename the metadata columns (by field id) that an upstream column of ``upstream`` (the
    table's upstream columns after a change) names, and record their ids (see ``schema_map``).
    A metadata column keeps a derived name once it has one (its name at earlier Ws stays its
    name), except for ``new_table`` (CREATE over an old table), named as a new table would be."""
    metadata = tx.table_metadata
    schema = metadata.schema()
    ids = metadata_field_ids(schema, metadata.properties)
    taken = {u.casefold() for u in upstream}
    renames = {}
    for field_id, base in zip(ids, (COMMIT_TS, OP)):
        if field_id is None:
            continue
        name = schema.find_column_name(field_id)
        if new_table or name.casefold() in taken:
            wanted = metadata_name(base, upstream)
            if name != wanted:
                renames[name] = wanted
    if renames:
        with tx.update_schema() as u:
            for old, new in renames.items():
                u.rename_column((old,), new)
    if METADATA_PROPERTY not in metadata.properties and None not in ids:
        tx.set_properties({METADATA_PROPERTY: json.dumps(list(ids))})


def _reset_columns(tx: Transaction, wanted: Schema) -> None:
    """Give an emptied table exactly ``wanted``'s columns, in its order (CREATE over an old table):
    upstream columns of the same name and type stay, the metadata columns stay (renamed as ``wanted`` names them)."""
    have = _upstream_fields(tx.table_metadata)
    wanted_upstream = list(wanted.fields[:-2])  # an iceberg_schema: the metadata columns last
    kept = {f.name for f in wanted_upstream if f.name in have and have[f.name].field_type == f.field_type}
    if set(have) - kept:
        with tx.update_schema(allow_incompatible_changes=True) as u:
            for name in set(have) - kept:
                u.delete_column((name,))
    _metadata_aside(tx, [f.name for f in wanted_upstream], new_table=True)
    added = [f for f in wanted_upstream if f.name not in kept]
    if added:
        with tx.update_schema(allow_incompatible_changes=True) as u:
            for f in added:
                u.add_column((f.name,), f.field_type)
    names = [f.name for f in wanted.fields]
    if [f.name for f in tx.table_metadata.schema().fields] != names:
        with tx.update_schema() as u:
            u.move_first((names[0],))
            for before, name in itertools.pairwise(names):
                u.move_after((name,), (before,))


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
    """Runs plans for one pipeline against one catalog."""

    def __init__(self, catalog: Catalog, config: PipelineConfig, fault: Callable[[str], None] | None = None,
                 check: Callable[[], None] | None = None) -> None:
        self.catalog = catalog
        self.config = config
        # Called with "staged:<table>" when data files are written but not committed (tests crash there).
        self.fault = fault or (lambda step: None)
        # Called before every commit: the run still holds the pipeline's lease (raises if not).
        self.check = check or (lambda: None)

    # -- entry point

    def resume_from(self, run: RunContext) -> int:
        """The place of the latest plan of ``run`` an earlier attempt committed to any table (-1:
        none). Plans run one after another (a run with renames or copies), so every plan before it
        is done, whatever tables and names it left."""
        prefix = f"{run.interval}:"
        stamps = [t.properties.get(PLAN, "") for t in cat.pipeline_tables(self.catalog, self.config)]
        return max((int(p[len(prefix):]) for p in stamps if p.startswith(prefix)), default=-1)

    def commit_plan(self, plan: TablePlan, run: RunContext, fold: Fold) -> Table | None:
        """Apply ``plan`` if the table is not already at ``run.watermark``; returns the table after it.

        ``fold`` holds the run's net changes on the executors and rewrites files for a data step.
        """
        return drive(self.commit_steps(plan, run, fold), lambda request: fold.rewrite([request])[0])

    def commit_steps(self, plan: TablePlan, run: RunContext, fold: Fold) -> CommitSteps:
        """``commit_plan`` as a generator that yields a ``RewriteRequest`` per data step and is sent
        that request's file rewrites: a run advances every table's plan to its next data step, has
        the executors rewrite all of those tables in one job, and sends each its files (``drive``
        does it for one plan)."""
        table = cat.load_table(self.catalog, self.config, plan.database, plan.table)
        if table is not None and table_watermark(table) >= run.watermark:
            return table  # committed by an earlier attempt of this run
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
        statement: DdlChange | None = None
        for step in plan.steps:
            if fills and (not isinstance(step, SchemaStep) or step.ddl is not statement):
                yield from self._fill(current, tx, fills, run)  # type: ignore[arg-type]
                fills = {}
            if isinstance(step, SchemaStep):
                statement = step.ddl
                for change in step.changes:
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
                        tx = tx or current.transaction()
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
                    tx = tx or current.transaction()
                    fields = {f.name: f for f in tx.table_metadata.schema().fields}
                    added = isinstance(change, AddColumn) and _field_name(fields, change.column.name) is None
                    self._schema_change(current, tx, change, step)
                    if added:
                        fills.update(self._existing_rows_fill(current, tx, change, step))  # type: ignore[arg-type]
            else:
                if current is None:
                    if not step.upserts:
                        continue  # only deletes, of a table the lake never had: nothing to delete
                    current = create_from_rows(self.catalog, self.config, plan, step, fold,
                                               {**_stamp(plan, run), CREATED_AT: str(run.watermark)})
                tx = tx or current.transaction()
                if step.upserts and DROPPED in tx.table_metadata.properties:
                    # Rows for a dropped table (a changefeed re-sending old messages after the
                    # DROP, ordered by offset): the table lives again, as a table the lake never
                    # saw created is made by its rows.
                    tx.remove_properties(DROPPED)
                yield from self._write_rows(current, tx, plan, step, run, fold)
        if fills:
            yield from self._fill(current, tx, fills, run)  # type: ignore[arg-type]
        if current is None:
            return None
        if not isinstance(plan.steps[-1], SchemaStep) or not isinstance(plan.steps[-1].changes[-1], RenameTable):
            self._finish(current, tx, plan, run)
        # else: a rename ends its plan; the renamed table's own plan (if any) records progress.
        return self.catalog.load_table(current.name())

    # -- steps

    def _create(self, table: Table | None, tx: Transaction | None, change: CreateTable | CreateTableLike, step: SchemaStep,
                plan: TablePlan, run: RunContext):
        copied: dict[str, str] = {}
        if isinstance(change, CreateTableLike):
            like, partitioning = self._like_schema(change, step, run)
            change = CreateTable(like, change.if_not_exists)
            if partitioning is not None:  # LIKE copies the source's partitioning too
                copied[PARTITIONING] = partitioning
        schema = change.schema
        types = {f"{UPSTREAM_TYPE_PREFIX}{c.name}": str(c.type) for c in schema.columns}
        changed_at = {SCHEMA_CHANGED_AT: str(step.ddl.commit_ts or 0)}
        if table is None:
            table = cat.create_table(self.catalog, self.config, schema.database, schema.table,
                                     iceberg_schema(table_columns(schema)), schema.key_columns,
                                     properties={**_stamp(plan, run), CREATED_AT: str(run.watermark)})
            tx = table.transaction()
            tx.set_properties({**types, **changed_at, **copied, CREATED_AT: str(run.watermark)})
            return table, tx
        props = (tx.table_metadata if tx is not None else table.metadata).properties
        # Upstream has the table if an earlier run committed it (a crashed attempt of this run
        # leaves a table without a watermark) or this plan made it, and no DROP came since.
        exists_upstream = DROPPED not in props and (tx is not None or WATERMARK in props)
        if change.if_not_exists and exists_upstream:
            return table, tx  # CREATE TABLE IF NOT EXISTS on a table upstream kept as it was
        # The table exists: a retry, or CREATE after DROP. Make it empty with the new columns.
        tx = tx or table.transaction()
        _remove_all_rows(table, tx)
        lay_out(tx, (), 0)  # the old key's columns may go
        _reset_columns(tx, iceberg_schema(table_columns(schema)))
        lay_out(tx, schema.key_columns, self.config.layout.buckets)  # as a new table with this key
        stale = [k for k in tx.table_metadata.properties if k in (DROPPED, PARTITIONING) or k.startswith(UPSTREAM_TYPE_PREFIX)]
        if stale:
            tx.remove_properties(*stale)
        tx.set_properties({**types, **changed_at, **copied, cat.KEY_COLUMNS: json.dumps(list(schema.key_columns))})
        return table, tx

    def _like_schema(self, change: CreateTableLike, step: SchemaStep, run: RunContext) -> tuple[TableSchema, str | None]:
        """The columns, upstream types and key of ``CREATE TABLE x LIKE y``'s source, as the lake holds
        them (or as the protocol carried them), and its partitioning (JSON, None if unknown)."""
        where = f"{change.table[0]}.{change.table[1]}: {step.ddl.sql!r}"
        src = f"{change.source[0]}.{change.source[1]}"
        # A rename later in the run, committed before this plan, may have moved the source (apply_plan).
        source = cat.load_table(self.catalog, self.config, *(step.source_at or change.source))
        if change.schema is not None:  # the protocol carried the columns: the source gives its partitioning, if known
            held = source is not None and DROPPED not in source.properties
            return change.schema, source.properties.get(PARTITIONING) if held else None  # type: ignore[union-attr]
        if source is None or DROPPED in source.properties:
            raise UnsupportedSchemaChange(
                f"{where} copies {src}, which tidelake does not hold; start the pipeline before {src}'s CREATE TABLE, "
                "or use a protocol that carries the schema after each DDL (Simple, Debezium)"
            )
        # The source's plan in this run may have run first, changing its columns after this
        # statement: then the lake no longer holds the columns this statement copied.
        changed_at = int(source.properties.get(SCHEMA_CHANGED_AT, "0"))
        if table_watermark(source) == run.watermark and (step.ddl.commit_ts or 0) < changed_at <= run.watermark:
            raise UnsupportedSchemaChange(
                f"{where} copies {src}, whose columns changed at commitTs {changed_at}, after this statement and in the "
                "same run, so its columns at the statement are unknown; use a protocol that carries the schema after "
                "each DDL (Simple, Debezium)"
            )
        types = {k[len(UPSTREAM_TYPE_PREFIX):]: v for k, v in source.properties.items() if k.startswith(UPSTREAM_TYPE_PREFIX)}
        columns = []
        for f in _upstream_fields(source.metadata).values():
            if f.name not in types:
                raise UnsupportedSchemaChange(f"{where}: {src} has no upstream type recorded for column {f.name!r}")
            columns.append(Column(f.name, parse_mysql_type(types[f.name]), True))
        keys = _key_columns(source.properties)
        return TableSchema(change.table[0], change.table[1], tuple(columns), keys), source.properties.get(PARTITIONING)

    def _schema_change(self, table: Table, tx: Transaction, change: Any, step: SchemaStep) -> None:
        """Stage one column, key, truncate or drop change. Upstream names are single-element
        Iceberg paths (`a.b` is a column, not field b of a), matched as MySQL does: without case."""
        name = f"{table.properties.get(cat.UPSTREAM_DATABASE)}.{table.properties.get(cat.UPSTREAM_TABLE)}"
        sql = step.ddl.sql
        fields = _upstream_fields(tx.table_metadata)
        props = tx.table_metadata.properties
        keys = _key_columns(props)

        def field(column: str) -> str:
            found = _field_name(fields, column)
            if found is None:
                raise UnsupportedSchemaChange(
                    f"{name}: {sql!r} names column {column!r}, which the table does not have "
                    f"(it has {', '.join(repr(n) for n in fields)})"
                )
            return found

        if isinstance(change, AddColumn):
            column = change.column.name
            existing = _field_name(fields, column)
            if existing is not None:
                if change.if_not_exists:
                    return  # ADD COLUMN IF NOT EXISTS: upstream kept the column it had
                if fields[existing].field_type != iceberg_type(change.column.type):
                    raise UnsupportedSchemaChange(f"{name}: {sql!r} adds column {column!r}, which the table already has as {fields[existing].field_type}")
            else:
                _metadata_aside(tx, [*fields, column])
                first_metadata = metadata_columns(tx.table_metadata.schema(), tx.table_metadata.properties).commit_ts
                with tx.update_schema() as u:
                    u.add_column((column,), iceberg_type(change.column.type))
                    if first_metadata is not None:  # last of the upstream columns, as MySQL adds it
                        u.move_before((column,), (first_metadata,))
            tx.set_properties({f"{UPSTREAM_TYPE_PREFIX}{existing or column}": str(change.column.type)})
        elif isinstance(change, DropColumn):
            column = _field_name(fields, change.name)
            if column is None:
                return  # DROP COLUMN IF EXISTS, or a column the lake never had
            _stop_laying_out_by(table, tx, fields[column].field_id, name, sql)
            with tx.update_schema() as u:
                u.delete_column((column,))
            if f"{UPSTREAM_TYPE_PREFIX}{column}" in props:
                tx.remove_properties(f"{UPSTREAM_TYPE_PREFIX}{column}")
            if column in keys:  # MySQL drops a dropped column from the primary key too
                remaining = [k for k in keys if k != column]
                tx.set_properties({cat.KEY_COLUMNS: json.dumps(remaining)})
                lay_out(tx, remaining, self.config.layout.buckets)  # new files follow the new key
        elif isinstance(change, RenameColumn):
            old = field(change.old)
            clash = _field_name(fields, change.new)
            if clash is not None and clash != old:
                raise UnsupportedSchemaChange(f"{name}: {sql!r} renames {old!r} to {change.new!r}, but the table has column {clash!r}")
            _metadata_aside(tx, [change.new if n == old else n for n in fields])
            with tx.update_schema() as u:
                u.rename_column((old,), change.new)
            old_type = props.get(f"{UPSTREAM_TYPE_PREFIX}{old}")
            if old_type:
                tx.remove_properties(f"{UPSTREAM_TYPE_PREFIX}{old}")
                tx.set_properties({f"{UPSTREAM_TYPE_PREFIX}{change.new}": old_type})
            if old in keys:
                tx.set_properties({cat.KEY_COLUMNS: json.dumps([change.new if k == old else k for k in keys])})
        elif isinstance(change, ChangeColumnType):
            column = field(change.name)
            new_type = iceberg_type(change.type)
            old_type = fields[column].field_type
            if not _widened(old_type, new_type):
                raise UnsupportedSchemaChange(
                    f"{name}: {sql!r} changes {column!r} from {old_type} to {new_type}, which Iceberg "
                    "cannot do in place (only int->long, float->double, decimal precision widening). Add a new column "
                    "upstream and backfill it, or re-create the table and replay the archive"
                )
            if old_type != new_type:
                with tx.update_schema() as u:
                    u.update_column((column,), field_type=new_type)
            tx.set_properties({f"{UPSTREAM_TYPE_PREFIX}{column}": str(change.type)})
        elif isinstance(change, MoveColumn):
            column = field(change.name)
            with tx.update_schema() as u:
                if change.after is None:
                    u.move_first((column,))
                else:
                    u.move_after((column,), (field(change.after),))
        elif isinstance(change, SetKeyColumns):
            new_keys = [field(k) for k in change.columns]
            tx.set_properties({cat.KEY_COLUMNS: json.dumps(new_keys)})
            if tuple(new_keys) != keys:
                lay_out(tx, new_keys, self.config.layout.buckets)  # new files follow the new key
        elif isinstance(change, TruncateTable) or (isinstance(change, TruncatePartitions) and change.names is None):
            _remove_all_rows(table, tx)  # TRUNCATE TABLE, TRUNCATE PARTITION ALL
            return
        elif isinstance(change, (SetPartitioning, AddPartitions, ReorganizePartitions, DropPartitions, TruncatePartitions)):
            self._partition_change(table, tx, change, name, sql, fields)
            return
        elif isinstance(change, DropTable):
            # Kept, empty and marked, so tags before the drop stay readable and backfills can restore.
            _remove_all_rows(table, tx)
            tx.set_properties({DROPPED: str(step.ddl.commit_ts)})
            return
        else:
            raise UnsupportedSchemaChange(f"{name}: {sql!r}: no committer for {type(change).__name__}")
        # CREATE TABLE ... LIKE this table, later in the run, checks this (see _like_schema).
        tx.set_properties({SCHEMA_CHANGED_AT: str(step.ddl.commit_ts or 0)})

    def _existing_rows_fill(self, table: Table, tx: Transaction, change: AddColumn, step: SchemaStep) -> dict[int, Any]:
        """{field id: value} for a column ``change`` just added, when MySQL gives the rows the table
        holds a value other than NULL (its DEFAULT, explicit or implicit; ``existing_rows_value``);
        {} for NULL (what a column added to Iceberg reads in older files) or a table without rows.

        Raises:
            UnsupportedSchemaChange: the table holds rows and their value cannot be known.
        """
        head = tx.table_metadata.snapshot_by_name(internals.MAIN_BRANCH)
        live = live_files(table.io, head) if head is not None else LiveFiles((), {})
        if not live.data:
            return {}  # an empty table: nothing to fill, whatever the default
        ddl = step.ddl
        topic = next((t for t in self.config.topics if t.name == ddl.position.topic), None)
        try:
            value = existing_rows_value(change.column, change.default, _statement_ms(ddl, topic),
                                        parse_timezone(topic.options.get("timezone", "UTC") if topic else "UTC"))
        except ValueNotReproducible as exc:
            # Files whose rows are all deleted hold no row to fill (our delete files name a position once).
            if sum(f.record_count for f in live.data) <= sum(d.record_count for f in live.data for d in live.deletes_of(f)):
                return {}
            name = f"{table.properties.get(cat.UPSTREAM_DATABASE)}.{table.properties.get(cat.UPSTREAM_TABLE)}"
            raise UnsupportedSchemaChange(
                f"{name}: {ddl.sql!r} at commitTs {ddl.commit_ts} adds column {change.column.name!r} to a table holding rows, "
                f"and the value MySQL gave those rows cannot be known: {exc}. Re-create the table from a snapshot "
                "that includes the column"
            ) from None
        if value is None:
            return {}
        field = next(f for f in tx.table_metadata.schema().fields if f.name == change.column.name)
        return {field.field_id: value}

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

    def _partition_change(self, table: Table, tx: Transaction, change: Any, name: str, sql: str, fields: dict[str, Any]) -> None:
        """Keep the table's partitioning as the stream defines it; delete the rows of a truncated or
        dropped partition by its bounds (upstream sends no row events for them)."""
        props = tx.table_metadata.properties
        known = Partitioning.from_json(props[PARTITIONING]) if PARTITIONING in props else None
        if isinstance(change, SetPartitioning):
            if change.partitioning is not None:
                tx.set_properties({PARTITIONING: change.partitioning.to_json()})
            elif known is not None:
                tx.remove_properties(PARTITIONING)
            return
        if isinstance(change, (AddPartitions, ReorganizePartitions)):
            if known is None:
                return  # still unknown: a later TRUNCATE / DROP PARTITION says so
            try:
                known = known.with_added(change.partitions) if isinstance(change, AddPartitions) else known.reorganized(change.names, change.into)
            except UnknownPartitionRows:
                tx.remove_properties(PARTITIONING)  # the stream and the lake disagree: forget the bounds
                return
            tx.set_properties({PARTITIONING: known.to_json()})
            return
        names = change.names
        what = (f"{name}: {sql!r} deletes the rows of partition(s) {', '.join(names)} without row events, and tidelake "
                "cannot tell which rows those are")
        if known is None:
            raise UnsupportedSchemaChange(
                f"{what}: the stream never defined the table's partitioning (CREATE TABLE or ALTER TABLE ... PARTITION BY "
                "after the pipeline's start). Re-create the table from a snapshot")
        columns = {c: f for c in known.columns if (f := _field_name(fields, c)) is not None}
        types = {c: parse_mysql_type(props[f"{UPSTREAM_TYPE_PREFIX}{f}"]) for c, f in columns.items()
                 if f"{UPSTREAM_TYPE_PREFIX}{f}" in props}
        try:
            _remove_partition_rows(table, tx, known.holding(names, columns, types))
        except UnknownPartitionRows as exc:
            raise UnsupportedSchemaChange(f"{what}: {exc}. Re-create the table from a snapshot") from None
        if isinstance(change, DropPartitions):
            tx.set_properties({PARTITIONING: known.without(names).to_json()})

    def _rename(self, table: Table, change: RenameTable, plan: TablePlan, run: RunContext) -> Table:
        new_id = cat.identifier(self.config, change.database, change.table)
        try:
            existing = self.catalog.load_table(new_id)
        except NoSuchTableError:
            existing = None
        if existing is not None and DROPPED in existing.properties:
            # A dropped table's history holds the name (its tags, read at the Ws before its drop):
            # it moves aside. The table renamed here carries this plan's stamp already.
            self.check()
            cat.release_name(self.catalog, self.config, existing)
        elif existing is not None:
            raise UnsupportedSchemaChange(
                f"RENAME to {change.database}.{change.table}: the Iceberg table {new_id} holds that name and is not dropped, "
                "while upstream renames only onto a free name: the stream lacks that table's DROP or RENAME"
            )
        self.check()
        renamed = cat.rename_table(self.catalog, table, new_id)  # creates the target database's namespace
        self.fault(f"renamed:{'.'.join(new_id[1:])}")
        return self._mark_renamed(renamed, change, plan, run)

    def _mark_renamed(self, renamed: Table, change: RenameTable, plan: TablePlan, run: RunContext) -> Table:
        """The rename's second commit: the table answers to its new upstream name and records the
        old one; the pending marker goes."""
        self.check()
        old = f"{renamed.properties.get(cat.UPSTREAM_DATABASE)}.{renamed.properties.get(cat.UPSTREAM_TABLE)}"
        with renamed.transaction() as tx:
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
            renamed = cat.load_table(self.catalog, self.config, rename.database, rename.table)
            if renamed is None:
                return None
            if renamed.properties.get(RENAMED_FROM) == f"{run.interval}:{plan.database}.{plan.table}":
                return renamed  # already renamed by the earlier attempt
            if (renamed.properties.get(RENAME_PENDING) == pending
                    and cat.upstream_name(renamed) == (plan.database, plan.table)):
                return self._mark_renamed(renamed, rename, plan, run)  # renamed, second commit missing
        return None

    def _write_rows(self, table: Table, tx: Transaction, plan: TablePlan, step: DataStep, run: RunContext,
                    fold: Fold) -> Generator[RewriteRequest, list[FileRewrite], None]:
        """One data step: the executors rewrite the files holding touched keys and write the net
        rows; the driver stages their files as one overwrite snapshot in ``tx``."""
        target, head = upsert_target(table, tx.table_metadata, plan, step, fold, self.config.layout.merge_on_read)
        rewrites = yield RewriteRequest(plan.database, plan.table, step.segment, target)
        internals.stage_overwrite(
            tx, target.table.name, expected_snapshot_id=head,
            removed=[r.removed for r in rewrites if r.removed is not None], added=[f for r in rewrites for f in r.added],
            deletes_added=[d for r in rewrites for d in r.deletes_added],
            deletes_removed=[d for r in rewrites for d in r.deletes_removed],
            snapshot_properties={WATERMARK: str(run.watermark), INTERVAL: run.interval},
        )

    def _finish(self, table: Table, tx: Transaction | None, plan: TablePlan, run: RunContext) -> None:
        tx = tx or table.transaction()
        progress = {WATERMARK: str(run.watermark), PREVIOUS: str(run.previous), INTERVAL: run.interval, **_stamp(plan, run)}
        if CREATED_AT not in tx.table_metadata.properties:
            progress[CREATED_AT] = str(run.watermark)
        # How this pipeline writes, for other engines that write the table. File-scoped position deletes
        # (Spark's write.delete.granularity) are the only ones tidelake can read and compact.
        wanted = {**dict.fromkeys(WRITE_MODE_PROPERTIES, self.config.layout.write_mode), DELETE_GRANULARITY: "file"}
        progress.update({k: v for k, v in wanted.items() if tx.table_metadata.properties.get(k) != v})
        tx.set_properties(progress)
        self.fault(f"staged:{'.'.join(table.name()[1:])}")
        self.check()
        tx.commit_transaction()


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
    with table.transaction() as tx:
        tx.set_properties({f"{UPSTREAM_TYPE_PREFIX}{n}": str(t) for n, t in columns.items()})
    return table


def upsert_target(table: Table, metadata: Any, plan: TablePlan, step: DataStep, fold: Fold,
                  merge_on_read: bool) -> tuple[UpsertTarget, int | None]:
    """What the executors need to rewrite ``table`` (as ``metadata`` has it) for a data step, and the
    snapshot id of the branch head that plan is made against."""
    props = metadata.properties
    keys = _key_columns(props)
    if not keys:
        keys = fold.row_schema(plan.database, plan.table, step.segment)[1]
    multiset = not keys
    if multiset:  # without a key the whole row is the key, and rows equal in every column are copies
        keys = tuple(_upstream_fields(metadata))
    upstream = {k[len(UPSTREAM_TYPE_PREFIX):]: v for k, v in props.items() if k.startswith(UPSTREAM_TYPE_PREFIX)}
    head = metadata.snapshot_by_name(internals.MAIN_BRANCH)
    live = live_files(table.io, head) if head is not None else LiveFiles((), {})
    target = TableTarget.from_metadata(".".join(table.name()), metadata, table.io.properties)
    deletes = tuple(live.deletes_of(f) for f in live.data) if live.deletes else ()
    merge_on_read = merge_on_read and metadata.format_version >= 2  # a v1 table (made by hand) holds no delete files
    return (UpsertTarget(target, live.data, keys, upstream, deletes, merge_on_read, multiset),
            head.snapshot_id if head is not None else None)


def _stop_laying_out_by(table: Table, tx: Transaction, field_id: int, name: str, sql: str) -> None:
    """Before a column goes: a sort order using it goes first (Iceberg cannot drop a column the
    table is sorted by; new files are then written unsorted). A bucket partition on it cannot go,
    in the default spec nor in the spec of a live file (an older key's, before a key change):
    pyiceberg 0.12's overwrite cannot read manifests of a spec whose source column is gone."""
    metadata = tx.table_metadata
    head = metadata.snapshot_by_name(internals.MAIN_BRANCH)
    in_use = {metadata.default_spec_id} | ({f.spec_id for f in live_files(table.io, head).data} if head else set())
    specs = metadata.specs()
    if any(f.source_id == field_id for spec_id in in_use for f in specs[spec_id].fields):
        raise UnsupportedSchemaChange(
            f"{name}: {sql!r} drops the column the table is bucketed by ([layout] buckets); pyiceberg 0.12 cannot "
            "write the table after that. Rebuild the pipeline under a new name with [layout] buckets = 0 over the same "
            "archive (README, Repairing history)"
        )
    if any(f.source_id == field_id for f in metadata.sort_order().fields):
        internals.unsort(tx)


def _remove_all_rows(table: Table, tx: Transaction) -> None:
    """Stage a snapshot without any data file (TRUNCATE, DROP, CREATE over an old table)."""
    head = tx.table_metadata.snapshot_by_name(internals.MAIN_BRANCH)
    if head is None:
        return
    live = live_files(table.io, head)
    internals.stage_overwrite(tx, ".".join(table.name()), expected_snapshot_id=head.snapshot_id,
                              removed=live.data, added=[], deletes_removed=live.delete_files)


def _remove_partition_rows(table: Table, tx: Transaction, held: Callable[[pa.Table], pa.Array]) -> None:
    """Stage a snapshot without the rows ``held`` marks (TRUNCATE / DROP PARTITION): every data
    file is read on the driver (a rare statement), and the files holding such rows are rewritten
    without them (their position deletes applied)."""
    head = tx.table_metadata.snapshot_by_name(internals.MAIN_BRANCH)
    if head is None:
        return
    live = live_files(table.io, head)
    removed, added, deletes_removed = [], [], []
    for data_file in live.data:
        rows = internals.read_data_file(table.io, tx.table_metadata, data_file, live.deletes_of(data_file))
        hit = held(rows)
        if not pc.any(hit).as_py():
            continue
        removed.append(data_file)
        deletes_removed += live.deletes_of(data_file)
        added += internals.write_data_files(table.io, tx.table_metadata, rows.filter(pc.invert(hit)))
    internals.stage_overwrite(tx, ".".join(table.name()), expected_snapshot_id=head.snapshot_id, removed=removed,
                              added=added, deletes_removed=deletes_removed)


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
        with table.transaction() as tx:
            tx.append(pa.Table.from_pylist([], schema=tx.table_metadata.schema().as_arrow()), snapshot_properties={WATERMARK: str(watermark)})
        snapshot = table.current_snapshot()
        assert snapshot is not None
    tx = table.transaction()
    ManageSnapshots(tx).create_tag(snapshot.snapshot_id, name).commit()  # staged: the transaction commits once
    if table_watermark(table) < watermark:
        tx.set_properties({WATERMARK: str(watermark)})
    tx.commit_transaction()
