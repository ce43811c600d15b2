"""The changes a DDL statement makes to a table, as ``spark.tables.ddl.parse_ddl`` yields them,
and ``DdlParseError``, raised for a statement that could change a table and is not understood.

Apart from the parser because most of their readers never read SQL: the committer stages them
(``spark.tables.updates``, ``spark.commit``), isolation and the change feed follow them
(``spark.commit.isolation``, ``spark.query``), and protocols that carry the schema after the
change get the same changes (``spark.commit.plan.ddl_changes``).
"""

from __future__ import annotations

from dataclasses import dataclass

from cdc_codecs import ColumnType, TableSchema, TidelakeError
from cdc_codecs.events import Column
from spark.tables.partitioning import PartitionDef, Partitioning


class DdlParseError(TidelakeError):
    """A DDL statement that changes a table could not be understood (or cannot be replicated)."""


@dataclass(frozen=True)
class CreateTable:
    schema: TableSchema
    if_not_exists: bool = False


@dataclass(frozen=True)
class CreateTableLike:
    """``CREATE TABLE table LIKE source``: the committer copies the source's columns, key and
    partitioning. ``schema``: the columns and key as the protocol carried them after the statement
    (Simple, Debezium), which the source then does not need to give."""

    table: tuple[str, str]
    source: tuple[str, str]
    if_not_exists: bool = False
    schema: TableSchema | None = None


@dataclass(frozen=True)
class DefaultLiteral:
    """``DEFAULT 'x'`` / ``DEFAULT 7`` / ``DEFAULT b'101'`` (or the same in parentheses): ``value`` is
    the literal's text (``is_string``: a quoted string, else a number; TRUE/FALSE are 1/0) or its
    bytes (hexadecimal and bit literals), converted to the column's type when it applies."""

    value: str | bytes
    is_string: bool = False


@dataclass(frozen=True)
class DefaultNow:
    """``DEFAULT CURRENT_TIMESTAMP[(fsp)]`` and its synonyms (``NOW()``, ``LOCALTIME``,
    ``LOCALTIMESTAMP``, ``(CURRENT_DATE)``): existing rows get the statement's time."""

    fsp: int = 0


@dataclass(frozen=True)
class DefaultUnknown:
    """A default whose values in the existing rows cannot be known from the stream: an expression
    (``DEFAULT (a + 1)``, ``(UUID())``), ``AUTO_INCREMENT``, a generated column. ``what`` says which."""

    what: str


ColumnDefault = DefaultLiteral | DefaultNow | DefaultUnknown


@dataclass(frozen=True)
class AddColumn:
    """``ADD COLUMN``; ``default`` is the clause's DEFAULT (None: none, or ``DEFAULT NULL``), which
    MySQL gives every row the table already has (``existing_rows_value``)."""

    column: Column
    if_not_exists: bool = False
    default: ColumnDefault | None = None


@dataclass(frozen=True)
class DropColumn:
    name: str


@dataclass(frozen=True)
class RenameColumn:
    old: str
    new: str


@dataclass(frozen=True)
class ChangeColumnType:
    name: str
    type: ColumnType


@dataclass(frozen=True)
class MoveColumn:
    """Put ``name`` right after ``after``; ``after=None`` is MySQL's FIRST."""

    name: str
    after: str | None


@dataclass(frozen=True)
class SetKeyColumns:
    """The table's primary key is now ``columns`` (``()``: the table has no key)."""

    columns: tuple[str, ...]


@dataclass(frozen=True)
class RenameTable:
    database: str
    table: str


@dataclass(frozen=True)
class TruncateTable:
    pass


@dataclass(frozen=True)
class DropTable:
    pass


@dataclass(frozen=True)
class DropDatabase:
    """``DROP {DATABASE | SCHEMA} database``: every table of the database goes. Its ref is
    ``(database, "")``; the run's plans name the tables (``spark.commit.plan.UpstreamTables``)."""

    database: str


@dataclass(frozen=True)
class SetPartitioning:
    """The table's partitioning is now this (``PARTITION BY`` in CREATE or ALTER TABLE); None:
    ``REMOVE PARTITIONING``. Rows stay where they are: the lake keeps the definition only to
    know which rows a later TRUNCATE / DROP PARTITION deletes."""

    partitioning: Partitioning | None


@dataclass(frozen=True)
class AddPartitions:
    """``ADD PARTITION (...)``, or ``ADD PARTITION PARTITIONS count`` (HASH / KEY): rows stay, or move
    between a HASH table's partitions."""

    partitions: tuple[PartitionDef, ...]
    count: int = 0


@dataclass(frozen=True)
class CoalescePartitions:
    """``COALESCE PARTITION count`` (HASH / KEY): the last ``count`` partitions go, their rows move to the others."""

    count: int


@dataclass(frozen=True)
class ExchangePartition:
    """``ALTER TABLE partitioned EXCHANGE PARTITION partition WITH TABLE table``: the partition's rows
    go to ``table`` and ``table``'s rows into the partition, without row events. Both tables get
    this change: it moves state between them, so each is applied exactly or held with the other
    (``spark.commit.isolation``). ``validation``: MySQL checked that ``table``'s rows belong in
    the partition (the default); ``WITHOUT VALIDATION`` it did not."""

    partitioned: TableRef
    partition: str
    table: TableRef
    validation: bool = True


@dataclass(frozen=True)
class ReorganizePartitions:
    """``REORGANIZE PARTITION names INTO (...)``: the rows stay, the bounds change."""

    names: tuple[str, ...]
    into: tuple[PartitionDef, ...]


@dataclass(frozen=True)
class DropPartitions:
    """``DROP PARTITION names``: the partitions and their rows go, without row events."""

    names: tuple[str, ...]


@dataclass(frozen=True)
class TruncatePartitions:
    """``TRUNCATE PARTITION names | ALL`` (``names`` None): the rows go, without row events."""

    names: tuple[str, ...] | None


Change = (
    CreateTable | CreateTableLike | AddColumn | DropColumn | RenameColumn | ChangeColumnType | MoveColumn
    | SetKeyColumns | RenameTable | TruncateTable | DropTable | DropDatabase
    | SetPartitioning | AddPartitions | ReorganizePartitions | DropPartitions | TruncatePartitions
    | CoalescePartitions | ExchangePartition
)
TableRef = tuple[str, str]
