"""A run's DDL and net changes -> an apply plan per table: a value you can print and assert.

``build_apply_plans`` walks the run's DDL and its net changes (one per table and DDL segment,
placed at their first row) in commit order. A table's net change waits until a DDL on the
table closes it into a ``DataStep`` and adds a ``SchemaStep``, so rows before a DDL use the old
schema and rows after it the new one. The rows themselves stay on the executors (the fold's
``rewrite`` writes them); nothing here touches a catalog.

A statement about a database names no table: ``UpstreamTables`` follows which tables exist
as the walk goes (the lake's when the run starts, then the run's creates, renames, drops and
rows), so ``DROP DATABASE d`` becomes a ``DropTable`` of each table of d existing at its commitTs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol, Union

from cdc_codecs import DdlChange, TableSchema
from spark.ddl import (
    AddColumn,
    Change,
    ChangeColumnType,
    CreateTable,
    CreateTableLike,
    DropDatabase,
    DropTable,
    RenameTable,
    parse_ddl,
)
from spark.net_change import Order, change_order

TableRef = tuple[str, str]


@dataclass(frozen=True)
class SchemaStep:
    changes: tuple[Change, ...]
    ddl: DdlChange


class NetSummary(Protocol):
    """One table's net change in one DDL segment (``spark.fold.slices.NetSummary``)."""

    database: str
    table: str
    segment: int
    keys: int
    deletes: int
    first: Order


@dataclass(frozen=True)
class DataStep:
    segment: int  # which of the table's net changes in the run (its DDL segment)
    keys: int
    deletes: int

    @property
    def upserts(self) -> int:
        return self.keys - self.deletes


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
                parts.append(f"data({s.upserts} upserts, {s.deletes} deletes)")
        return f"{self.database}.{self.table}: " + "; ".join(parts)


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
        return dataclasses.replace(change, column=column) if column is not None else change
    if isinstance(change, ChangeColumnType):
        column = after.column(change.name)
        return ChangeColumnType(change.name, column.type) if column is not None else change
    return change


class UpstreamTables:
    """The upstream tables that exist as a run's DDL and rows apply in commit order, so that a
    statement about a database reaches the tables it has at that point.

    ``lake`` lists the tables the lake holds (not dropped) when the run starts; it is read only
    when a statement needs it (a catalog listing)."""

    def __init__(self, lake: Callable[[], Iterable[TableRef]]) -> None:
        self._lake = lake
        self._live: set[TableRef] | None = None
        self._created: set[TableRef] = set()  # made before the lake was read
        self._gone: set[TableRef] = set()

    def changes(self, ddl: DdlChange) -> list[tuple[TableRef, Change]]:
        """``ddl_changes(ddl)``, with ``DropDatabase(d)`` as a ``DropTable`` of each table of d that exists."""
        out: list[tuple[TableRef, Change]] = []
        for ref, change in ddl_changes(ddl):
            if isinstance(change, DropDatabase):
                out += [(t, DropTable()) for t in sorted(self._tables()) if t[0] == change.database]
                continue
            out.append((ref, change))
            if isinstance(change, (CreateTable, CreateTableLike)):
                self.exists(ref)
            elif isinstance(change, RenameTable):
                self._drop(ref)
                self.exists((change.database, change.table))
        for ref, change in out:
            if isinstance(change, DropTable):
                self._drop(ref)
        return out

    def exists(self, ref: TableRef) -> None:
        """``ref`` exists from here on (created, renamed to, or written by rows)."""
        self._gone.discard(ref)
        (self._live if self._live is not None else self._created).add(ref)

    def _drop(self, ref: TableRef) -> None:
        self._gone.add(ref)
        if self._live is not None:
            self._live.discard(ref)
        self._created.discard(ref)

    def _tables(self) -> set[TableRef]:
        if self._live is None:
            self._live = (set(self._lake()) - self._gone) | self._created
        return self._live


def build_apply_plans(ddls: Iterable[DdlChange], net: Iterable[NetSummary],
                      lake: Callable[[], Iterable[TableRef]] = lambda: ()) -> list[TablePlan]:
    """Plans for every table the run changes, in the order they must execute.

    ``lake``: the upstream names of the tables the lake holds when the run starts (not dropped);
    read only for a ``DROP DATABASE``."""
    events: list[tuple[Order, int, DdlChange | NetSummary]] = [(change_order(d), 1, d) for d in ddls]  # type: ignore[arg-type]
    events += [(s.first, 0, s) for s in net]
    tables = UpstreamTables(lake)
    plans: dict[TableRef, TablePlan] = {}
    finished: list[TablePlan] = []
    pending: dict[TableRef, NetSummary] = {}
    seq = 0

    def plan(ref: TableRef) -> TablePlan:
        nonlocal seq
        if ref not in plans:
            plans[ref] = TablePlan(ref[0], ref[1], seq)
            seq += 1
        return plans[ref]

    def flush(ref: TableRef) -> None:
        summary = pending.pop(ref, None)
        if summary is not None:
            plan(ref).steps.append(DataStep(summary.segment, summary.keys, summary.deletes))

    for _, _, e in sorted(events, key=lambda x: (x[0], x[1])):
        if not isinstance(e, DdlChange):
            ref = (e.database, e.table)
            plan(ref)
            assert ref not in pending, f"{ref}: two net changes without a DDL between them"
            pending[ref] = e
            if e.keys > e.deletes:  # rows make a table the lake does not have (create_from_rows)
                tables.exists(ref)
            continue
        for ref, change in tables.changes(e):
            flush(ref)
            p = plan(ref)
            p.steps.append(SchemaStep((change,), e))
            if isinstance(change, RenameTable):
                # Later changes name the table by its new name: a new plan, run after this one.
                finished.append(plans.pop(ref))
    for ref in list(pending):
        flush(ref)
    return sorted(finished + list(plans.values()), key=lambda p: p.sequence)
