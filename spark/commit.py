"""Execute a table's apply plan against Iceberg: one transaction per table (renames aside).

Progress is recorded with the data: the transaction sets the table property
``tidelake.watermark`` and stamps every snapshot it writes with the watermark and the
interval, so a table is either fully at the new watermark or untouched. Rows are
written copy-on-write: rows whose key the plan touches are deleted (pyiceberg rewrites
only the data files whose key ranges can hold them) and the net rows appended.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.expressions import AlwaysTrue, And, BooleanExpression, EqualTo, In, IsNull, Or
from pyiceberg.schema import Schema
from pyiceberg.table import Table, Transaction
from pyiceberg.table.update import SetCurrentSchemaUpdate
from pyiceberg.types import DecimalType, DoubleType, FloatType, IcebergType, IntegerType, LongType

from cdc_codecs import ColumnType, TidelakeError
from spark import catalog as cat
from spark.apply_plan import DataStep, SchemaStep, TablePlan
from spark.config import PipelineConfig
from spark.ddl import AddColumn, ChangeColumnType, CreateTable, DropColumn, DropTable, RenameColumn, RenameTable, TruncateTable
from spark.schema_map import COMMIT_TS, OP, arrow_table, fit_upstream_value, iceberg_schema, iceberg_type, table_columns, to_iceberg_value
from spark.watermark import tag_name

WATERMARK = "tidelake.watermark"
PREVIOUS = "tidelake.previous-watermark"
INTERVAL = "tidelake.interval"
DROPPED = "tidelake.dropped"
RENAME_PENDING = "tidelake.rename-pending"
RENAMED_FROM = "tidelake.renamed-from"
UPSTREAM_TYPE_PREFIX = "tidelake.column-type."
DELETE_BATCH = 100_000  # keys per delete: each delete re-plans and rewrites the files it touches


class UnsupportedSchemaChange(TidelakeError):
    """A DDL that Iceberg cannot express for this table."""


class CommitConflictError(TidelakeError):
    """The table moved while the plan ran (another writer)."""


@dataclass(frozen=True)
class RunContext:
    watermark: int
    previous: int
    interval: str


def table_watermark(table: Table) -> int:
    return int(table.properties.get(WATERMARK, "0"))


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


def _key_filter(keys: tuple[str, ...], values: list[tuple[Any, ...]], schema: Schema) -> BooleanExpression:
    if len(keys) == 1:
        name = keys[0]
        field_type = schema.find_field(name).field_type
        return In(name, [to_iceberg_value(field_type, v[0]) for v in values])
    terms: list[BooleanExpression] = []
    for v in values:
        parts = [IsNull(k) if x is None else EqualTo(k, to_iceberg_value(schema.find_field(k).field_type, x)) for k, x in zip(keys, v)]
        term = parts[0]
        for p in parts[1:]:
            term = And(term, p)
        terms.append(term)
    expr = terms[0]
    for t in terms[1:]:
        expr = Or(expr, t)
    return expr


class TableCommitter:
    """Runs plans for one pipeline against one catalog."""

    def __init__(self, catalog: Catalog, config: PipelineConfig, fault: Callable[[str], None] | None = None) -> None:
        self.catalog = catalog
        self.config = config
        # Called with "staged:<table>" when data files are written but not committed (tests crash there).
        self.fault = fault or (lambda step: None)

    # -- entry point

    def commit_plan(self, plan: TablePlan, run: RunContext) -> Table | None:
        """Apply ``plan`` if the table is not already at ``run.watermark``; returns the table after it."""
        table = cat.load_table(self.catalog, self.config, plan.database, plan.table)
        if table is not None and table_watermark(table) >= run.watermark:
            return table  # committed by an earlier attempt of this run
        rename = next((c for s in plan.steps if isinstance(s, SchemaStep) for c in s.changes if isinstance(c, RenameTable)), None)
        if rename is not None:
            done = self._resume_rename(table, plan, rename, run)
            if done is not None:
                return done
        tx: Transaction | None = None
        current = table
        for step in plan.steps:
            if isinstance(step, SchemaStep):
                for change in step.changes:
                    if isinstance(change, CreateTable):
                        current, tx = self._create(current, tx, change, step, run)
                        continue
                    if current is None:
                        raise UnsupportedSchemaChange(
                            f"{plan.database}.{plan.table}: {step.ddl.sql!r} at commitTs {step.ddl.commit_ts} changes a table "
                            "tidelake has not seen created; start the pipeline before the table's CREATE TABLE, or create it "
                            "from a BOOTSTRAP/tableChanges-carrying protocol"
                        )
                    if isinstance(change, RenameTable):
                        # Renames are not transactional: commit the data with a marker, then rename.
                        tx = tx or current.transaction()
                        tx.set_properties({RENAME_PENDING: f"{run.interval}:{change.database}.{change.table}"})
                        tx.commit_transaction()
                        tx = None
                        current = self._rename(current, change, run)
                        continue
                    tx = tx or current.transaction()
                    self._schema_change(current, tx, change, step)
            else:
                if current is None:
                    current, tx = self._create_from_rows(step, plan, run)
                tx = tx or current.transaction()
                self._write_rows(tx, step, run)
        if current is None:
            return None
        if not isinstance(plan.steps[-1], SchemaStep) or not isinstance(plan.steps[-1].changes[-1], RenameTable):
            self._finish(current, tx, run)
        # else: a rename ends its plan; the renamed table's own plan (if any) records progress.
        return self.catalog.load_table(current.name())

    # -- steps

    def _create(self, table: Table | None, tx: Transaction | None, change: CreateTable, step: SchemaStep, run: RunContext):
        schema = change.schema
        types = {f"{UPSTREAM_TYPE_PREFIX}{c.name}": str(c.type) for c in schema.columns}
        if table is None:
            table = cat.create_table(self.catalog, self.config, schema.database, schema.table,
                                     iceberg_schema(table_columns(schema)), schema.key_columns)
            tx = table.transaction()
            tx.set_properties(types)
            return table, tx
        # The table exists: a retry, or CREATE after DROP. Make it empty with the new columns.
        tx = tx or table.transaction()
        tx.delete(AlwaysTrue())
        wanted = iceberg_schema(table_columns(schema))
        with tx.update_schema(allow_incompatible_changes=True) as u:
            have = {f.name for f in tx.table_metadata.schema().fields}
            for f in wanted.fields:
                if f.name not in have:
                    u.add_column(f.name, f.field_type)
            for name in have - {f.name for f in wanted.fields}:
                u.delete_column(name)
        stale = [k for k in table.properties if k == DROPPED or k.startswith(UPSTREAM_TYPE_PREFIX)]
        if stale:
            tx.remove_properties(*stale)
        tx.set_properties({**types, cat.KEY_COLUMNS: json.dumps(list(schema.key_columns))})
        return table, tx

    def _create_from_rows(self, step: DataStep, plan: TablePlan, run: RunContext):
        """Rows for a table no DDL created (the pipeline started after it): the rows' types make it."""
        first = next(iter(step.net.rows.values()), None)
        columns: dict[str, ColumnType] = {}
        for v in step.net.rows.values():
            if v is not None:
                columns.update(v[1].column_types or {})
        if not columns and first is None:
            raise UnsupportedSchemaChange(f"{plan.database}.{plan.table}: rows without column types and no CREATE TABLE")
        table = cat.create_table(self.catalog, self.config, plan.database, plan.table,
                                 iceberg_schema(list(columns.items())), step.net.key_columns)
        tx = table.transaction()
        tx.set_properties({f"{UPSTREAM_TYPE_PREFIX}{n}": str(t) for n, t in columns.items()})
        return table, tx

    def _schema_change(self, table: Table, tx: Transaction, change: Any, step: SchemaStep) -> None:
        name = f"{table.properties.get(cat.UPSTREAM_DATABASE)}.{table.properties.get(cat.UPSTREAM_TABLE)}"
        schema = tx.table_metadata.schema()
        fields = {f.name: f for f in schema.fields}
        if isinstance(change, AddColumn):
            if change.column.name not in fields:
                with tx.update_schema() as u:
                    u.add_column(change.column.name, iceberg_type(change.column.type))
            tx.set_properties({f"{UPSTREAM_TYPE_PREFIX}{change.column.name}": str(change.column.type)})
        elif isinstance(change, DropColumn):
            if change.name in fields:
                if change.name in _key_columns(tx.table_metadata.properties):
                    raise UnsupportedSchemaChange(f"{name}: {step.ddl.sql!r} drops key column {change.name!r}; re-create the table")
                with tx.update_schema() as u:
                    u.delete_column(change.name)
            if f"{UPSTREAM_TYPE_PREFIX}{change.name}" in tx.table_metadata.properties:
                tx.remove_properties(f"{UPSTREAM_TYPE_PREFIX}{change.name}")
        elif isinstance(change, RenameColumn):
            if change.old in fields and change.new not in fields:
                with tx.update_schema() as u:
                    u.rename_column(change.old, change.new)
                old_type = tx.table_metadata.properties.get(f"{UPSTREAM_TYPE_PREFIX}{change.old}")
                if old_type:
                    tx.remove_properties(f"{UPSTREAM_TYPE_PREFIX}{change.old}")
                    tx.set_properties({f"{UPSTREAM_TYPE_PREFIX}{change.new}": old_type})
                keys = _key_columns(tx.table_metadata.properties)
                if change.old in keys:
                    tx.set_properties({cat.KEY_COLUMNS: json.dumps([change.new if k == change.old else k for k in keys])})
        elif isinstance(change, ChangeColumnType):
            new_type = iceberg_type(change.type)
            old = fields.get(change.name)
            if old is None:
                raise UnsupportedSchemaChange(f"{name}: {step.ddl.sql!r} changes column {change.name!r}, which the table does not have")
            if not _widened(old.field_type, new_type):
                raise UnsupportedSchemaChange(
                    f"{name}: {step.ddl.sql!r} changes {change.name!r} from {old.field_type} to {new_type}, which Iceberg "
                    "cannot do in place (only int->long, float->double, decimal precision widening). Add a new column "
                    "upstream and backfill it, or re-create the table and replay the archive"
                )
            if old.field_type != new_type:
                with tx.update_schema() as u:
                    u.update_column(change.name, field_type=new_type)
            tx.set_properties({f"{UPSTREAM_TYPE_PREFIX}{change.name}": str(change.type)})
        elif isinstance(change, TruncateTable):
            tx.delete(AlwaysTrue())
        elif isinstance(change, DropTable):
            # Kept, empty and marked, so tags before the drop stay readable and backfills can restore.
            tx.delete(AlwaysTrue())
            tx.set_properties({DROPPED: str(step.ddl.commit_ts)})

    def _rename(self, table: Table, change: RenameTable, run: RunContext) -> Table:
        new_id = cat.identifier(self.config, change.database, change.table)
        try:
            existing = self.catalog.load_table(new_id)
        except NoSuchTableError:
            existing = None
        if existing is not None:
            raise UnsupportedSchemaChange(f"RENAME to {change.database}.{change.table}: the Iceberg table {new_id} already exists")
        renamed = self.catalog.rename_table(table.name(), new_id)
        with renamed.transaction() as tx:
            tx.set_properties({cat.UPSTREAM_DATABASE: change.database, cat.UPSTREAM_TABLE: change.table,
                               RENAMED_FROM: f"{run.interval}:{table.properties.get(cat.UPSTREAM_DATABASE)}.{table.properties.get(cat.UPSTREAM_TABLE)}"})
            if RENAME_PENDING in renamed.properties:
                tx.remove_properties(RENAME_PENDING)
        return self.catalog.load_table(new_id)

    def _resume_rename(self, table: Table | None, plan: TablePlan, rename: RenameTable, run: RunContext) -> Table | None:
        """A retry of a run that died around a rename: finish it instead of replaying the plan."""
        target = f"{rename.database}.{rename.table}"
        if table is not None and table.properties.get(RENAME_PENDING) == f"{run.interval}:{target}":
            return self._rename(table, rename, run)  # data committed, rename not done
        if table is None:
            renamed = cat.load_table(self.catalog, self.config, rename.database, rename.table)
            if renamed is not None and renamed.properties.get(RENAMED_FROM) == f"{run.interval}:{plan.database}.{plan.table}":
                return renamed  # already renamed by the earlier attempt
        return None

    def _write_rows(self, tx: Transaction, step: DataStep, run: RunContext) -> None:
        schema = tx.table_metadata.schema()
        props = tx.table_metadata.properties
        keys = _key_columns(props) or step.net.key_columns
        upstream = {k[len(UPSTREAM_TYPE_PREFIX):]: v for k, v in props.items() if k.startswith(UPSTREAM_TYPE_PREFIX)}
        touched = step.net.touched
        summary = {WATERMARK: str(run.watermark), INTERVAL: run.interval}
        # Deleting keys a table does not hold yet is normal here (inserts); pyiceberg warns on it.
        warnings.filterwarnings("ignore", message="Delete operation did not match any records")
        if keys:
            for i in range(0, len(touched), DELETE_BATCH):
                batch = touched[i : i + DELETE_BATCH]
                tx.delete(_key_filter(keys, batch, schema), snapshot_properties=summary)
        else:
            # Without a key the whole row is the key: delete rows equal in every column.
            names = [f.name for f in schema.fields if f.name not in (COMMIT_TS, OP)]
            for key in touched:
                row = dict(key)
                tx.delete(_key_filter(tuple(names), [tuple(row.get(n) for n in names)], schema), snapshot_properties=summary)
        rows = []
        for image, change in step.net.upserts:
            row = {n: _fit_value(v, upstream.get(n)) for n, v in image.items()}
            row[COMMIT_TS] = change.commit_ts
            row[OP] = change.op.value
            rows.append(row)
        if rows:
            tx.append(arrow_table(schema, rows), snapshot_properties=summary)

    def _finish(self, table: Table, tx: Transaction | None, run: RunContext) -> None:
        tx = tx or table.transaction()
        tx.set_properties({WATERMARK: str(run.watermark), PREVIOUS: str(run.previous), INTERVAL: run.interval})
        self.fault(f"staged:{'.'.join(table.name()[1:])}")
        tx.commit_transaction()


def _fit_value(value: Any, upstream_type: str | None) -> Any:
    """ENUM indexes and SET masks the decoder marked (protocols that send no members) -> labels by the DDL's type."""
    return fit_upstream_value(value, upstream_type)


def restore(table: Table, watermark: int, *, empty: bool = False) -> Table:
    """Put a table back at its ``wm_<watermark>`` tag: data, schema and progress.

    ``empty``: the table did not exist at ``watermark``; delete its rows instead.
    """
    if empty:
        with table.transaction() as tx:
            tx.delete(AlwaysTrue(), snapshot_properties={WATERMARK: str(watermark)})
            tx.set_properties({WATERMARK: str(watermark)})
        return table
    snapshot = table.snapshot_by_name(tag_name(watermark))
    if snapshot is None:
        raise CommitConflictError(f"{table.name()}: no tag {tag_name(watermark)} to restore to")
    table.manage_snapshots().set_current_snapshot(snapshot_id=snapshot.snapshot_id).commit()
    tx = table.transaction()
    if snapshot.schema_id is not None and snapshot.schema_id != table.metadata.current_schema_id:
        tx._apply((SetCurrentSchemaUpdate(schema_id=snapshot.schema_id),), ())  # no public API for this in 0.12
    tx.set_properties({WATERMARK: str(watermark)})
    tx.commit_transaction()
    return table


def tag_table(table: Table, watermark: int) -> None:
    """Tag the current snapshot ``wm_<W>`` (an empty table gets an empty snapshot to tag)."""
    name = tag_name(watermark)
    if name in table.refs():
        return
    snapshot = table.current_snapshot()
    if snapshot is None:
        with table.transaction() as tx:
            tx.append(pa.Table.from_pylist([], schema=tx.table_metadata.schema().as_arrow()), snapshot_properties={WATERMARK: str(watermark)})
        snapshot = table.current_snapshot()
        assert snapshot is not None
    table.manage_snapshots().create_tag(snapshot.snapshot_id, name).commit()

