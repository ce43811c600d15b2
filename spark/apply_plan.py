"""Events of one run -> an apply plan per table: a value you can print and assert.

``build_apply_plans`` walks the run's changes in commit order. Rows are buffered per
table; a DDL on a table closes its buffer into a ``DataStep`` (the net change of those
rows) and adds a ``SchemaStep``, so rows before a DDL use the old schema and rows after
it the new one. Nothing here touches a catalog.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Union

from cdc_codecs import DdlChange, RowChange, TableSchema
from spark.ddl import AddColumn, Change, ChangeColumnType, CreateTable, CreateTableLike, RenameTable, SetKeyColumns, parse_ddl
from spark.net_change import NetChange, net_change

TableRef = tuple[str, str]


@dataclass(frozen=True)
class SchemaStep:
    changes: tuple[Change, ...]
    ddl: DdlChange


@dataclass(frozen=True)
class DataStep:
    net: NetChange
    events: int


Step = Union[SchemaStep, DataStep]


@dataclass
class TablePlan:
    database: str
    table: str
    sequence: int  # position of its first step in the run: plans execute in this order
    steps: list[Step] = field(default_factory=list)

    @property
    def ref(self) -> TableRef:
        return (self.database, self.table)

    def summary(self) -> str:
        parts = []
        for s in self.steps:
            if isinstance(s, SchemaStep):
                parts.append(f"schema({', '.join(type(c).__name__ for c in s.changes)})")
            else:
                parts.append(f"data({s.events} events -> {len(s.net.upserts)} upserts, {len(s.net.touched) - len(s.net.upserts)} deletes)")
        return f"{self.database}.{self.table}: " + "; ".join(parts)


def ordered(changes: Iterable[RowChange | DdlChange]) -> list[RowChange | DdlChange]:
    """Commit order: commitTs, then partition offset, then index in the message."""
    return sorted(changes, key=lambda e: (e.commit_ts or 0, e.position.topic, e.position.partition, e.position.offset, e.position.index))


def ddl_changes(ddl: DdlChange) -> list[tuple[TableRef, Change]]:
    """The table changes of a DDL, with exact types from the schema the protocol carries.

    ``schema_after`` describes the DDL's own table after the whole statement, so it fixes
    the columns a CREATE makes and the type of every column an ADD / MODIFY / CHANGE leaves;
    changes to other tables of the statement (``RENAME TABLE a TO b, c TO d``,
    ``DROP TABLE a, b``) keep what the SQL says.
    """
    changes = parse_ddl(ddl.sql, ddl.database)
    after = ddl.schema_after
    if after is None:
        return changes
    described = {(ddl.database, ddl.table), (after.database, after.table)}
    out: list[tuple[TableRef, Change]] = []
    for ref, change in changes:
        if ref in described:
            change = _with_schema_after(ref, change, after)
        out.append((ref, change))
    if not changes and ddl.ddl_type in ("CREATE", "CREATE TABLE"):
        out.append(((after.database, after.table), CreateTable(after)))
    return out


def _with_schema_after(ref: TableRef, change: Change, after: TableSchema) -> Change:
    if isinstance(change, CreateTable):
        return CreateTable(TableSchema(ref[0], ref[1], after.columns, after.key_columns or change.schema.key_columns), change.if_not_exists)
    if isinstance(change, CreateTableLike):
        # The protocol knows what the source looked like: no need to read it from the lake.
        return CreateTable(TableSchema(ref[0], ref[1], after.columns, after.key_columns), change.if_not_exists)
    if isinstance(change, AddColumn):
        column = after.column(change.column.name)
        return AddColumn(column, change.if_not_exists) if column is not None else change
    if isinstance(change, ChangeColumnType):
        column = after.column(change.name)
        return ChangeColumnType(change.name, column.type) if column is not None else change
    return change


def build_apply_plans(
    changes: Iterable[RowChange | DdlChange],
    key_columns: dict[TableRef, tuple[str, ...]] | None = None,
) -> list[TablePlan]:
    """Plans for every table the changes touch, in the order they must execute.

    ``key_columns`` gives the primary key of tables whose key the rows do not carry.
    """
    keys = dict(key_columns or {})
    plans: dict[TableRef, TablePlan] = {}
    finished: list[TablePlan] = []
    pending: dict[TableRef, list[RowChange]] = {}
    seq = 0

    def plan(ref: TableRef) -> TablePlan:
        nonlocal seq
        if ref not in plans:
            plans[ref] = TablePlan(ref[0], ref[1], seq)
            seq += 1
        return plans[ref]

    def flush(ref: TableRef) -> None:
        rows = pending.pop(ref, [])
        if rows:
            k = rows[-1].key_columns or keys.get(ref, ())
            plan(ref).steps.append(DataStep(net_change(rows, k), len(rows)))

    for e in ordered(changes):
        if isinstance(e, RowChange):
            ref = (e.database, e.table)
            plan(ref)
            pending.setdefault(ref, []).append(e)
            continue
        for ref, change in ddl_changes(e):
            flush(ref)
            p = plan(ref)
            if isinstance(change, CreateTable):
                keys[ref] = change.schema.key_columns
            elif isinstance(change, SetKeyColumns):
                keys[ref] = change.columns
            p.steps.append(SchemaStep((change,), e))
            if isinstance(change, RenameTable):
                # Later changes name the table by its new name: a new plan, run after this one.
                finished.append(plans.pop(ref))
                new = (change.database, change.table)
                if ref in keys:
                    keys[new] = keys[ref]
    for ref in list(pending):
        flush(ref)
    return sorted(finished + list(plans.values()), key=lambda p: p.sequence)

