"""Which rows each of a window's removals took from a table: the change feed's ``_commit_ts`` of a row
a DDL removed (``spark.query.changes_ts.deleted_ts``).

A TRUNCATE TABLE, DROP TABLE, DROP DATABASE, ``TRUNCATE PARTITION ALL``, a rename away, and an
EXCHANGE PARTITION for the table exchanged with, took every row the table held. ``TRUNCATE
PARTITION p`` and ``DROP PARTITION p`` took the rows p held, and ``EXCHANGE PARTITION p`` moved
them out, under the partitioning the table had at that statement (MySQL 8 manual, 26.3): the
partitioning the table had at W1 (``properties.partitioning_at``: recorded per W by the runs),
followed through the window's partition DDL in commit order by the rule the apply keeps it by
(``updates.partitioning_after``), its rows computed as the apply computes them (``updates.held_rows``).

Where that cannot be told -- W1's partitioning not recorded (a table made before it was), a
table another took the name of in the window (CREATE ... LIKE, a rename onto it), a partitioning
tidelake does not compute -- the caller keeps the first removal after a row's last write and
says so (``Removals.inexact``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from spark.query.changes_ddl import ANOTHER_TABLE, EVERY_ROW, NEW_TABLE, TableDdl
from spark.tables.ddl_changes import DropPartitions, ExchangePartition, SetPartitioning, TruncatePartitions
from spark.tables.partitioning import Partitioning, UnknownPartitionRows
from spark.tables.properties import partitioning_at
from spark.tables.updates import held_rows, partitioning_after

Mask = Callable[[pa.Table], pa.Array]
_UNKNOWN = object()  # a partitioning the feed cannot tell


@dataclass(frozen=True)
class Removal:
    """A DDL that took rows from the table at commitTs ``ts``: those ``holds`` marks (None: every row)."""

    ts: int
    holds: Mask | None = None


@dataclass
class Removals:
    """The window's removals from one table, in commit order; ``inexact``: why which rows each took
    cannot be told (then each took every row it could: the first after a row's last write)."""

    at: list[Removal] = field(default_factory=list)
    inexact: str | None = None
    arrived: list[int] = field(default_factory=list)  # commitTs of the DDL that brought rows to the name


def removals(ddl: TableDdl, properties: dict[str, str] | None, w1: int, fields: Iterable[str],
             types: dict[str, str]) -> Removals:
    """The removals of ``ddl`` (a table's window DDL) from a table whose properties are ``properties``
    (the table that held the name at W1; None: none did), over rows with columns ``fields`` whose
    upstream types are ``types``."""
    if not ddl.steps:
        return Removals([Removal(ts) for ts in ddl.removed], arrived=list(ddl.arrived))
    known, text = partitioning_at(properties, w1) if properties is not None else (True, None)
    state: Any = (Partitioning.from_json(text) if text is not None else None) if known else _UNKNOWN
    why = None if known else f"its partitioning at W {w1} is not recorded (a table made before tidelake kept it)"
    fields = list(fields)
    out = Removals(arrived=list(ddl.arrived))
    for ts, change, server in ddl.steps:
        if change == EVERY_ROW or (isinstance(change, TruncatePartitions) and change.names is None):
            out.at.append(Removal(ts))
            continue
        if change == NEW_TABLE:
            state = None
            continue
        if change == ANOTHER_TABLE:
            state, why = _UNKNOWN, "another table took its name in the window, whose partitioning the feed does not follow"
            continue
        names = (change.partition,) if isinstance(change, ExchangePartition) else getattr(change, "names", None)
        if isinstance(change, (DropPartitions, TruncatePartitions, ExchangePartition)):
            try:
                if state is _UNKNOWN:
                    raise UnknownPartitionRows(why)
                out.at.append(Removal(ts, held_rows(state, names, fields, types, server)))
            except UnknownPartitionRows as exc:
                return Removals([Removal(t) for t in ddl.removed],
                                f"which rows {type(change).__name__} at commitTs {ts} took cannot be told: {exc}",
                                list(ddl.arrived))
        if state is not _UNKNOWN or isinstance(change, SetPartitioning):  # PARTITION BY: known again, whatever it was
            state = partitioning_after(None if state is _UNKNOWN else state, change)
    return out
