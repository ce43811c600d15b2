"""The change feed's window DDL, per table: what the window's DDL did to each table name (``read_changes``).

A DDL that changed a table's rows without row events (a rename, a TRUNCATE, a DROP, a column
added with a value for the existing rows, a partition exchanged, a DDL tidelake cannot parse)
makes the feed read the table whole, and dates the images it produced (``spark.query.changes_ts``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from spark.commit.isolation import statement_tables
from spark.commit.plan import ddl_changes
from spark.config import PipelineConfig
from spark.query.changes_log import Window
from spark.tables.ddl_changes import (
    AddColumn,
    AddPartitions,
    ChangeColumnType,
    CoalescePartitions,
    CreateTable,
    CreateTableLike,
    DdlParseError,
    DropColumn,
    DropDatabase,
    DropPartitions,
    DropTable,
    ExchangePartition,
    MoveColumn,
    RenameColumn,
    RenameTable,
    ReorganizePartitions,
    SetKeyColumns,
    SetPartitioning,
    TruncatePartitions,
    TruncateTable,
)
from spark.tables.partitioning import MYSQL, upstream_server
from spark.tables.updates import PARTITION_CHANGES

TableRef = tuple[str, str]
# DDL that keeps every row as it is (none is read whole for them): the partitioning's layout and
# the columns' order. Any other change not handled by name reads its table whole.
ROW_PRESERVING = (SetPartitioning, AddPartitions, CoalescePartitions, ReorganizePartitions, MoveColumn)


@dataclass
class TableDdl:
    """What the window's DDL did to one table name."""

    whole: list[str] = field(default_factory=list)  # why its images must be read whole
    columns: set[str] = field(default_factory=set)  # columns a column DDL named (casefolded)
    last_ts: int = 0  # commitTs of the last DDL naming it
    rows_ts: int = 0  # ... of the last one that changed its rows wholesale (a reason in ``whole``)
    # CommitTs of the DDL that changed rows under the name without row events: that filled a column
    # for the existing rows (ADD COLUMN ... DEFAULT), that brought rows to the name (a rename onto
    # it), that took rows from it (TRUNCATE, DROP TABLE / DATABASE / PARTITION, a rename away).
    filled: list[int] = field(default_factory=list)
    arrived: list[int] = field(default_factory=list)
    removed: list[int] = field(default_factory=list)
    # In commit order, what decides which rows each removal took (``spark.query.changes_removals``):
    # (commitTs, the change, the server upstream of its topic). A change is a partition DDL
    # (``PARTITION_CHANGES``), an ``ExchangePartition`` of this partitioned table, or one of
    # ``EVERY_ROW`` (its rows all went), ``NEW_TABLE`` (CREATE: none known yet), ``ANOTHER_TABLE``
    # (a table whose partitioning the feed does not follow took the name: CREATE ... LIKE, a rename onto it).
    steps: list[tuple[int, Any, str]] = field(default_factory=list)

    def merged(self, other: TableDdl) -> TableDdl:
        return TableDdl([*self.whole, *other.whole], self.columns | other.columns, max(self.last_ts, other.last_ts),
                    max(self.rows_ts, other.rows_ts), sorted([*self.filled, *other.filled]),
                    sorted([*self.arrived, *other.arrived]), sorted([*self.removed, *other.removed]),
                    sorted([*self.steps, *other.steps], key=lambda s: s[0]))


EVERY_ROW, NEW_TABLE, ANOTHER_TABLE = "every row", "new table", "another table"


def ddl_by_table(window: Window, config: PipelineConfig) -> tuple[dict[TableRef, TableDdl], dict[str, TableDdl], list[str]]:
    """Per table name and per database (DROP DATABASE), what the window's DDL did; and reasons that
    hold for every table (a DDL that names no table tidelake can tell)."""
    tables: dict[TableRef, TableDdl] = {}
    databases: dict[str, TableDdl] = {}
    everywhere: list[str] = []

    servers = {t.name: upstream_server(t.protocol) for t in config.topics}

    def note(ref: TableRef, ts: int, whole: str | None = None, column: str | None = None, filled: bool = False,
             arrived: bool = False, removed: bool = False, step: Any = None) -> None:
        d = tables.setdefault(ref, TableDdl())
        if step is not None:
            d.steps.append((ts, step, server))
        d.last_ts = max(d.last_ts, ts)
        if whole:
            d.whole.append(whole)
            d.rows_ts = max(d.rows_ts, ts)
        if column is not None:
            d.columns.add(column.casefold())
        if filled:
            d.filled.append(ts)
        if arrived:
            d.arrived.append(ts)
        if removed:
            d.removed.append(ts)

    for e in window.ddls():
        ts, sql = e.commit_ts or 0, e.sql
        server = servers.get(e.position.topic, MYSQL)
        try:
            changes = ddl_changes(e)
        except DdlParseError:
            refs = statement_tables(e)
            if not refs:
                everywhere.append(f"a DDL tidelake cannot parse, naming no table: {sql!r}")
            for ref in sorted(refs):
                note(ref, ts, f"a DDL tidelake cannot parse: {sql!r}", step=ANOTHER_TABLE)
            continue
        for ref, change in changes:
            if isinstance(change, RenameTable):
                note(ref, ts, f"renamed in the window: {sql!r}", removed=True, step=EVERY_ROW)
                note((change.database, change.table), ts, f"renamed in the window: {sql!r}", arrived=True,
                     step=ANOTHER_TABLE)
            elif isinstance(change, DropDatabase):
                d = databases.setdefault(change.database, TableDdl())
                d.whole.append(f"its database was dropped in the window: {sql!r}")
                d.last_ts = d.rows_ts = max(d.last_ts, ts)
                d.removed.append(ts)
                d.steps.append((ts, EVERY_ROW, server))
            elif isinstance(change, (CreateTable, CreateTableLike, DropTable, TruncateTable, DropPartitions,
                                     TruncatePartitions, SetKeyColumns)):
                what = type(change).__name__
                takes = isinstance(change, (DropTable, TruncateTable, DropPartitions, TruncatePartitions))
                step = (EVERY_ROW if isinstance(change, (DropTable, TruncateTable)) else
                        change if isinstance(change, PARTITION_CHANGES) else
                        NEW_TABLE if isinstance(change, CreateTable) and not change.if_not_exists else
                        ANOTHER_TABLE if isinstance(change, (CreateTable, CreateTableLike)) else None)
                note(change.table if isinstance(change, CreateTableLike) else ref, ts, f"{what} in the window: {sql!r}",
                     removed=takes, step=step)
            elif isinstance(change, AddColumn):
                fills = change.default is not None or not change.column.nullable
                note(ref, ts, f"a column added with a value for the existing rows: {sql!r}" if fills else None,
                     change.column.name, filled=fills)
            elif isinstance(change, DropColumn):
                note(ref, ts, column=change.name)
            elif isinstance(change, RenameColumn):
                note(ref, ts, column=change.old)
                note(ref, ts, column=change.new)
            elif isinstance(change, ChangeColumnType):
                note(ref, ts, column=change.name)
            elif isinstance(change, ExchangePartition):  # rows move both ways without row events
                # The partitioned table loses the partition's rows, the other table every row.
                note(ref, ts, f"a partition exchanged in the window: {sql!r}", arrived=True, removed=True,
                     step=change if ref == change.partitioned else EVERY_ROW)
            elif isinstance(change, ROW_PRESERVING):
                note(ref, ts, step=change if isinstance(change, PARTITION_CHANGES) else None)
            else:  # a change not known to keep the rows: read whole rather than miss rows it moved
                note(ref, ts, f"{type(change).__name__} in the window: {sql!r}")
    return tables, databases, everywhere

