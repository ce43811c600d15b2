"""A run's DDL and net changes -> an apply plan per table: a value you can print and assert.

``build_apply_plans`` walks the run's DDL and its net changes (one per table and DDL segment,
placed at their first row) in commit order. A table's net change waits until a DDL on the
table closes it into a ``DataStep`` and adds a ``SchemaStep``, so rows before a DDL use the old
schema and rows after it the new one. The rows themselves stay on the executors (the fold's
``rewrite`` writes them); nothing here touches a catalog.

A statement about a database names no table: ``UpstreamTables`` follows which tables exist
as the walk goes (the lake's when the run starts, then the run's creates, renames, drops and
rows), so ``DROP DATABASE d`` becomes a ``DropTable`` of each table of d existing at its commitTs.

A plan holds one name for a span of the run: a RENAME ends the plan of the table it renames and
the plan of the (dropped) table that held the target name, and later changes under either name
start new plans. Plans run one after another in an order that follows, for every name, who held
it in DDL order: the table there before a rename, then the table renamed into it, then the plans
after. So ``RENAME TABLE t TO _t_del, _t_gho TO t`` (gh-ost's cut-over) runs t's plan, then the
ghost's, then t's rows after the cut-over, whichever rows came first in the run; a swap
``a TO tmp, b TO a, tmp TO b`` runs a's, b's, then tmp's. A ``CREATE TABLE ... LIKE`` reads its
source where that table is when the statement runs (``SchemaStep.source_at``).
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol, Union

from cdc_codecs import DdlChange, TableSchema, TidelakeError
from spark.tables.ddl import parse_ddl
from spark.tables.ddl_changes import (
    AddColumn,
    Change,
    ChangeColumnType,
    CreateTable,
    CreateTableLike,
    DropDatabase,
    DropTable,
    ExchangePartition,
    RenameTable,
)
from spark.core.keys import Order, change_order

TableRef = tuple[str, str]


class UnorderableDdl(TidelakeError):
    """The run's DDL renames and copies tables in an order no sequence of table commits follows."""


@dataclass(frozen=True)
class SchemaStep:
    changes: tuple[Change, ...]
    ddl: DdlChange
    # CREATE TABLE ... LIKE: where the source table is when this plan runs, if a rename after the
    # statement (and run before this plan) moved it; None: under the name the statement gives.
    source_at: TableRef | None = None
    # EXCHANGE PARTITION: whether this plan runs before the other table's ("first") or after it
    # ("second"; spark.tables.exchange).
    exchange: str | None = None


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
    sequence: int  # its place in the order the run's plans execute
    steps: list[Step] = field(default_factory=list)
    # The table's changes go on in a later plan of the run (an EXCHANGE of two tables the run changes
    # before it ends both plans there): this one commits its steps without recording progress.
    continues: bool = False

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


# Changes that move state between two tables: each is applied exactly or held with the other.
LINKING = (RenameTable, CreateTableLike, ExchangePartition)


def linked_tables(ref: TableRef, change: Change) -> set[TableRef]:
    """The tables ``change`` (of table ``ref``) moves state between; empty for a one-table change."""
    if isinstance(change, RenameTable):
        return {ref, (change.database, change.table)}
    if isinstance(change, CreateTableLike):
        return {ref, change.source}
    if isinstance(change, ExchangePartition):
        return {change.partitioned, change.table}
    return set()


def ddl_changes(ddl: DdlChange) -> list[tuple[TableRef, Change]]:
    """The table changes of a DDL, with exact types from the schema the protocol carries.

    ``schema_after`` describes the DDL's own table after the whole statement, so it fixes
    the columns a CREATE makes and the type of every column an ADD / MODIFY / CHANGE leaves;
    changes to other tables of the statement (``RENAME TABLE a TO b, c TO d``,
    ``DROP TABLE a, b``) keep what the SQL says.
    """
    changes = _event_spelling(parse_ddl(ddl.sql, ddl.database), ddl)
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


def _event_spelling(changes: list[tuple[TableRef, Change]], ddl: DdlChange) -> list[tuple[TableRef, Change]]:
    """The statement's table as the event names it, where the two differ in lettercase only.

    TiDB compares table names without case (lower_case_table_names=2 only), and TiCDC's DDL event
    names the table as TiDB has it (``Items``) beside the statement as the user wrote it
    (``ALTER TABLE items``); MySQL with lower_case_table_names=1 likewise. A connector that copies
    the name from the statement gives the same spelling, and then nothing changes. A statement
    naming two tables that differ in case only (``RENAME TABLE Items TO items`` on a case-sensitive
    MySQL) is left as written: which one the event means cannot be told; so is a statement moving
    state between tables (``LINKING``: a rename, ``CREATE ... LIKE``, an exchange), whose event may
    name either of them."""
    if not ddl.table or any(isinstance(change, LINKING) for _, change in changes):
        return changes
    event = (ddl.database, ddl.table)
    folded = (ddl.database.casefold(), ddl.table.casefold())
    alike = {ref for ref, _ in changes if (ref[0].casefold(), ref[1].casefold()) == folded}
    if len(alike) != 1 or event in alike:
        return changes
    (written,) = alike
    return [(event if ref == written else ref, change) for ref, change in changes]


def _with_schema_after(ref: TableRef, change: Change, after: TableSchema) -> Change:
    if isinstance(change, CreateTable):
        return CreateTable(TableSchema(ref[0], ref[1], after.columns, after.key_columns or change.schema.key_columns), change.if_not_exists)
    if isinstance(change, CreateTableLike):
        # The protocol knows the source's columns; its partitioning (which LIKE copies too) only the lake does.
        return dataclasses.replace(change, schema=TableSchema(ref[0], ref[1], after.columns, after.key_columns))
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
    read only for a ``DROP DATABASE``.

    Raises:
        UnorderableDdl: renames and ``CREATE TABLE ... LIKE`` that no order of the plans satisfies.
    """
    events: list[tuple[Order, int, DdlChange | NetSummary]] = [(change_order(d), 1, d) for d in ddls]  # type: ignore[arg-type]
    events += [(s.first, 0, s) for s in net]
    tables = UpstreamTables(lake)
    plans: dict[TableRef, TablePlan] = {}
    finished: list[TablePlan] = []
    pending: dict[TableRef, NetSummary] = {}
    # Per name, the plans that hold it in turn: made under it, or renaming a table into it.
    holders: dict[TableRef, list[TablePlan]] = {}
    likes: list[_LikeRead] = []
    # Per EXCHANGE statement: the table whose plan runs first (None: both change before it), and each table's plan.
    exchanges: dict[int, TableRef | None] = {}
    exchanged: dict[int, dict[TableRef, TablePlan]] = {}
    split: dict[int, dict[TableRef, TablePlan]] = {}  # the plans an EXCHANGE ended, per table
    seq = 0

    def plan(ref: TableRef) -> TablePlan:
        nonlocal seq
        if ref not in plans:
            plans[ref] = TablePlan(ref[0], ref[1], seq)
            holders.setdefault(ref, []).append(plans[ref])
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
            if isinstance(change, ExchangePartition) and id(e) not in exchanges:
                exchanges[id(e)] = _exchange_first(change, holders)
                if exchanges[id(e)] is None:
                    # Both change before it: each one's changes up to it commit first, in plans of their own,
                    # and the exchange starts a new plan of each, which reads the other as committed.
                    before = {}
                    for r in (change.partitioned, change.table):
                        flush(r)
                        if r in plans:
                            plans[r].continues = True
                            finished.append(plans.pop(r))
                        before[r] = holders[r][-1]
                    split[id(e)] = before
                    exchanges[id(e)] = change.partitioned
            flush(ref)
            p = plan(ref)
            if isinstance(change, ExchangePartition):
                first = exchanges[id(e)]
                assert first is not None
                p.steps.append(SchemaStep((change,), e, exchange="first" if ref == first else "second"))
                exchanged.setdefault(id(e), {})[ref] = p
                continue
            p.steps.append(SchemaStep((change,), e))
            if isinstance(change, CreateTableLike):
                source = holders.get(change.source, [])
                likes.append(_LikeRead(p, len(p.steps) - 1, change.source, len(source), plans.get(change.source)))
            if isinstance(change, RenameTable):
                # Later changes name the table by its new name: a new plan, run after this one.
                finished.append(plans.pop(ref))
                target = (change.database, change.table)
                if target in plans:  # the table that had the name (dropped: upstream renames onto no live table)
                    flush(target)
                    finished.append(plans.pop(target))
                holders.setdefault(target, []).append(p)
    for ref in list(pending):
        flush(ref)
    every = finished + list(plans.values())
    after: dict[int, set[int]] = {id(p): set() for p in every}  # plan -> the plans that must run before it
    for held in holders.values():
        for before, then in zip(held, held[1:]):
            after[id(then)].add(id(before))
    for like in likes:
        _order_like_read(like, holders, after)
    for key, first in exchanges.items():
        both = exchanged.get(key, {})
        if first is not None and len(both) == 2:
            second = next(r for r in both if r != first)
            after[id(both[second])].add(id(both[first]))
            if key in split:  # the first reads the second as its changes before the statement left it
                after[id(both[first])].add(id(split[key][second]))
    return _in_order(every, after)


def _exchange_first(change: ExchangePartition, holders: dict[TableRef, list[TablePlan]]) -> TableRef | None:
    """The table of an EXCHANGE whose plan runs first: the one the run changes before the statement
    (the other is then read as the lake holds it), the partitioned one if neither; None if both
    (the caller then ends both plans at the statement)."""
    changed = [r for r in (change.partitioned, change.table) if r in holders]
    if len(changed) == 2:
        return None
    return changed[0] if changed else change.partitioned


@dataclass(frozen=True)
class _LikeRead:
    """A ``CREATE TABLE ... LIKE source`` step: its plan and step, and what held the source name then."""

    plan: TablePlan
    step: int
    source: TableRef
    held_before: int  # how many plans had held the source name before the statement
    open_plan: TablePlan | None  # the source's plan then, if it had steps before the statement


def _order_like_read(like: _LikeRead, holders: dict[TableRef, list[TablePlan]], after: dict[int, set[int]]) -> None:
    """The copying plan runs after the source's changes before the statement, and reads the source
    before anything moves or changes it later -- or, when the source's only later changes are rows
    and a rename away (gh-ost: ``CREATE _t_gho LIKE t`` ... ``RENAME t TO _t_del, _t_gho TO t``,
    where the ghost's plan must wait for t's), after them, under the source's new name."""
    def first(before: TablePlan, then: TablePlan) -> None:
        if before is not then:
            after[id(then)].add(id(before))

    held = holders.get(like.source, [])
    if like.held_before:
        first(held[like.held_before - 1], like.plan)
    source = like.open_plan
    if source is None and like.held_before < len(held) and held[like.held_before].ref == like.source:
        source = held[like.held_before]  # made under the name after the statement: the same table's later steps
    if source is None or source is like.plan:
        if like.held_before < len(held):
            first(like.plan, held[like.held_before])
        return
    last = source.steps[-1]
    renamed = last.changes[-1] if isinstance(last, SchemaStep) and isinstance(last.changes[-1], RenameTable) else None
    schema_steps = [s for s in source.steps if isinstance(s, SchemaStep)]
    if source is not like.open_plan and schema_steps != ([last] if renamed else []):
        first(like.plan, source)  # changes the source after the statement: copy it first
        return
    first(source, like.plan)
    at = (renamed.database, renamed.table) if renamed is not None else like.source
    there = holders.get(at, [])
    place = next((i for i, p in enumerate(there) if p is source), len(there))
    if place + 1 < len(there):
        first(like.plan, there[place + 1])
    if at != like.source:
        step = like.plan.steps[like.step]
        assert isinstance(step, SchemaStep)
        like.plan.steps[like.step] = SchemaStep(step.changes, step.ddl, at)


def _in_order(plans: list[TablePlan], after: dict[int, set[int]]) -> list[TablePlan]:
    """``plans`` with every plan after those ``after`` names, otherwise by their first step; each
    plan's ``sequence`` becomes its place in that order."""
    by_id = {id(p): p for p in plans}
    waiting = {i: len(before) for i, before in after.items()}
    then: dict[int, list[int]] = {}
    for i, before in after.items():
        for b in before:
            then.setdefault(b, []).append(i)
    ready = [(p.sequence, id(p)) for p in plans if not waiting[id(p)]]
    heapq.heapify(ready)
    out: list[TablePlan] = []
    while ready:
        _, i = heapq.heappop(ready)
        out.append(by_id[i])
        for j in then.get(i, ()):
            waiting[j] -= 1
            if not waiting[j]:
                heapq.heappush(ready, (by_id[j].sequence, j))
    if len(out) < len(plans):
        done = {id(p) for p in out}
        stuck = sorted({f"{p.database}.{p.table}" for p in plans if id(p) not in done})
        raise UnorderableDdl(
            f"the run's RENAME TABLE and CREATE TABLE ... LIKE statements on {', '.join(stuck)} need each other's "
            "tables first: no order of commits applies them (a table copied by LIKE, then changed, then renamed "
            "onto); use a protocol that carries the schema after each DDL (Simple, Debezium)"
        )
    for i, p in enumerate(out):
        p.sequence = i
    return out
