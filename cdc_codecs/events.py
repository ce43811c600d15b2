"""The one event model every decoder yields and every encoder consumes.

Events are immutable records of typed Python values (never stringified): see
``cdc_codecs.types`` for the value type of each column kind. The per-message types
(positions, raw messages, events) are NamedTuples rather than frozen dataclasses:
they are built once per decoded row, and a frozen dataclass costs five times as much
to construct, which is a third of the decoder's budget.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from functools import partial
from typing import Any, Mapping, NamedTuple, Union

from cdc_codecs.types import ColumnType

Row = Mapping[str, Any]


class SourcePosition(NamedTuple):
    """Where an event came from: a Kafka message, and the event's index inside it.

    Batched protocols (Open Protocol, Canal with several rows, CloudCanal) put several
    events in one message; ``index`` keeps them apart and in order.
    """

    topic: str
    partition: int
    offset: int
    index: int = 0

    def with_index(self, index: int) -> SourcePosition:
        if index == self[3]:
            return self
        return SourcePosition(self[0], self[1], self[2], index)

    def __str__(self) -> str:
        return f"{self.topic}/{self.partition}@{self.offset}[{self.index}]"


class RawMessage(NamedTuple):
    """One Kafka message as landed in the archive: bytes plus where it sits."""

    key: bytes | None
    value: bytes | None
    position: SourcePosition
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp_ms: int | None = None


class Op(str, enum.Enum):
    INSERT = "insert"
    UPDATE = "update"
    DELETE = "delete"


class Clock(str, enum.Enum):
    """What a timestamp counts.

    TSO is TiDB's hybrid clock (physical ms << 18 | logical): commitTs and resolved ts.
    EPOCH_MS is a wall-clock time in milliseconds, the only clock MySQL-side tools give.
    """

    TSO = "tso"
    EPOCH_MS = "epoch_ms"


@dataclass(frozen=True, slots=True)
class BinlogPosition:
    """MySQL binlog coordinates of a row or DDL event: file, byte position, row in the event.

    ``server`` is the MySQL ``server_id`` that wrote the binlog (0: not carried): coordinates
    of two servers (a failover) say nothing about each other's order.
    """

    file: str
    pos: int
    row: int = 0
    server: int = 0

    def sort_key(self) -> tuple[str, int, int, int]:
        """Binlog order on one server. Files sort by base name, then by their numeric suffix:
        MySQL zero-pads it to six digits, but mysql-bin.999999 rotates to mysql-bin.1000000."""
        base, dot, suffix = self.file.rpartition(".")
        if not dot:
            base, suffix = "", self.file
        return (base, int(suffix) if suffix.isdigit() else -1, self.pos, self.row)


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type: ColumnType
    nullable: bool = True


@dataclass(frozen=True, slots=True)
class TableSchema:
    """A table's schema as a protocol carries it (Simple tableSchema, Debezium tableChanges)."""

    database: str
    table: str
    columns: tuple[Column, ...]
    key_columns: tuple[str, ...] = ()
    version: int | None = None

    def column(self, name: str) -> Column | None:
        for c in self.columns:
            if c.name == name:
                return c
        return None

    @property
    def column_types(self) -> dict[str, ColumnType]:
        return {c.name: c.type for c in self.columns}

    def to_dict(self) -> dict[str, Any]:
        return {
            "database": self.database, "table": self.table, "version": self.version,
            "key_columns": list(self.key_columns),
            "columns": [{"name": c.name, "type": str(c.type), "nullable": c.nullable} for c in self.columns],
        }

    @staticmethod
    def from_dict(doc: Mapping[str, Any]) -> TableSchema:
        from cdc_codecs.types import stored_type

        columns = tuple(Column(c["name"], stored_type(c["type"]), c["nullable"]) for c in doc["columns"])
        return TableSchema(doc["database"], doc["table"], columns, tuple(doc["key_columns"]), doc["version"])


class RowChange(NamedTuple):
    """An insert, update or delete of one row.

    ``before`` is the old image (update, delete) and ``after`` the new one (insert,
    update). Either may hold only some columns when the protocol sends only changed
    or key columns (``partial_before``). ``commit_ts`` is the TiDB TSO of the
    transaction, or None for protocols without one (official Canal, CloudCanal,
    Debezium MySQL, DTS), which are ordered by offset and ``binlog`` instead.
    """

    op: Op
    database: str
    table: str
    before: Row | None
    after: Row | None
    key_columns: tuple[str, ...]
    column_types: Mapping[str, ColumnType] | None
    commit_ts: int | None
    position: SourcePosition
    event_time_ms: int | None = None
    binlog: BinlogPosition | None = None
    partial_before: bool = False
    physical_table_id: int | None = None

    @property
    def image(self) -> Row:
        """The image that identifies the row: after for insert/update, before for delete."""
        return (self.before if self.op is Op.DELETE else self.after) or {}


new_row_change = partial(tuple.__new__, RowChange)
"""``new_row_change((op, ..., physical_table_id))``: a RowChange from all thirteen fields in
order. The decoders' hot paths build millions; ``RowChange(...)`` runs the NamedTuple's
Python ``__new__`` and costs ~200 ns more per row."""


class DdlChange(NamedTuple):
    """A schema change, ordered with rows by ``commit_ts`` (or offset, without one)."""

    database: str
    table: str
    sql: str
    commit_ts: int | None
    position: SourcePosition
    ddl_type: str | None = None
    schema_before: TableSchema | None = None
    schema_after: TableSchema | None = None
    event_time_ms: int | None = None
    binlog: BinlogPosition | None = None


class Watermark(NamedTuple):
    """Every event of this partition with a timestamp < ``ts`` has been sent."""

    ts: int
    position: SourcePosition
    clock: Clock = Clock.TSO

    @property
    def partition(self) -> int:
        return self.position.partition


class SchemaSnapshot(NamedTuple):
    """A table's full schema at a point, without a change (Simple BOOTSTRAP)."""

    schema: TableSchema
    position: SourcePosition
    commit_ts: int | None = None


Event = Union[RowChange, DdlChange, Watermark, SchemaSnapshot]

EVENT_TYPES: tuple[type, ...] = (RowChange, DdlChange, Watermark, SchemaSnapshot)


class ProducerRecord(NamedTuple):
    """What an encoder hands to a Kafka producer."""

    partition: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
