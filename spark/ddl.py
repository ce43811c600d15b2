"""DDL statements -> schema changes, parsed with sqlglot's MySQL dialect.

Protocols that carry only SQL (Canal, Open protocol, DTS) need this; protocols that also
carry the schema after the change (Simple, Debezium, CloudCanal) get the same changes,
and the schema they carry fixes the exact column types.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Union

import sqlglot
from sqlglot import exp

from cdc_codecs import ColumnType, TableSchema, TidelakeError
from cdc_codecs.events import Column
from cdc_codecs.types import ColumnValueError, parse_mysql_type


class DdlParseError(TidelakeError):
    """A DDL statement that changes a table could not be understood."""


@dataclass(frozen=True)
class CreateTable:
    schema: TableSchema


@dataclass(frozen=True)
class AddColumn:
    column: Column


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
class RenameTable:
    database: str
    table: str


@dataclass(frozen=True)
class TruncateTable:
    pass


@dataclass(frozen=True)
class DropTable:
    pass


Change = Union[CreateTable, AddColumn, DropColumn, RenameColumn, ChangeColumnType, RenameTable, TruncateTable, DropTable]
TableRef = tuple[str, str]

_RENAME_RE = re.compile(r"^\s*RENAME\s+TABLES?\s+(.*)$", re.IGNORECASE | re.DOTALL)
_COMMENT_RE = re.compile(r"/\*.*?\*/", re.DOTALL)


def _ref(table: exp.Table, default_db: str) -> TableRef:
    return (table.db or default_db, table.name)


def column_type_of(kind: exp.DataType) -> ColumnType:
    text = kind.sql(dialect="mysql")
    try:
        return parse_mysql_type(text)
    except ColumnValueError as exc:
        raise DdlParseError(str(exc)) from None


def _column(coldef: exp.ColumnDef) -> Column:
    nullable = not any(isinstance(c.kind, (exp.NotNullColumnConstraint, exp.PrimaryKeyColumnConstraint)) and not getattr(c.kind, "args", {}).get("allow_null") for c in coldef.constraints)
    return Column(coldef.name, column_type_of(coldef.args["kind"]), nullable)


def parse_ddl(sql: str, default_db: str) -> list[tuple[TableRef, Change]]:
    """The table changes a DDL statement makes; [] for statements that change no table data.

    Raises:
        DdlParseError: a CREATE/ALTER/RENAME/TRUNCATE/DROP TABLE whose effect is unclear.
    """
    text = _COMMENT_RE.sub(" ", sql).strip().rstrip(";")
    m = _RENAME_RE.match(text)
    if m:
        return _rename_tables(m.group(1), default_db)
    try:
        statement = sqlglot.parse_one(text, read="mysql")
    except sqlglot.errors.ParseError as exc:
        if re.match(r"^\s*(CREATE|ALTER|DROP|TRUNCATE)\s+TABLE", text, re.IGNORECASE):
            raise DdlParseError(f"cannot parse {sql!r}: {exc}") from None
        return []
    if isinstance(statement, exp.Create) and statement.kind == "TABLE":
        schema = statement.this
        if not isinstance(schema, exp.Schema):
            raise DdlParseError(f"CREATE TABLE without columns (LIKE / AS SELECT) is not supported: {sql!r}")
        ref = _ref(schema.this, default_db)
        columns, keys = [], []
        for e in schema.expressions:
            if isinstance(e, exp.ColumnDef):
                columns.append(_column(e))
                if any(isinstance(c.kind, exp.PrimaryKeyColumnConstraint) for c in e.constraints):
                    keys.append(e.name)
            elif isinstance(e, exp.PrimaryKey):
                keys = [c.name for c in e.expressions]
        return [(ref, CreateTable(TableSchema(ref[0], ref[1], tuple(columns), tuple(keys))))]
    if isinstance(statement, exp.Alter) and statement.args.get("kind") == "TABLE":
        ref = _ref(statement.this, default_db)
        out: list[tuple[TableRef, Change]] = []
        for action in statement.args.get("actions") or []:
            if isinstance(action, exp.ColumnDef):
                out.append((ref, AddColumn(_column(action))))
            elif isinstance(action, exp.Drop) and action.args.get("kind") == "COLUMN":
                out += [(ref, DropColumn(c.name)) for c in action.args.get("tables") or []]
            elif isinstance(action, exp.RenameColumn):
                out.append((ref, RenameColumn(action.this.name, action.args["to"].name)))
            elif isinstance(action, exp.ModifyColumn):
                coldef = action.this
                old = action.args.get("rename_from")
                if old is not None and old.name != coldef.name:
                    out.append((ref, RenameColumn(old.name, coldef.name)))
                out.append((ref, ChangeColumnType(coldef.name, column_type_of(coldef.args["kind"]))))
            elif isinstance(action, exp.AlterRename):
                new = _ref(action.this, ref[0])
                out.append((ref, RenameTable(*new)))
            # Index, constraint, comment and option changes do not change the table's data.
        return out
    if isinstance(statement, exp.TruncateTable):
        return [(_ref(t, default_db), TruncateTable()) for t in statement.expressions]
    if isinstance(statement, exp.Drop) and statement.args.get("kind") == "TABLE":
        return [(_ref(t, default_db), DropTable()) for t in statement.args.get("tables") or []]
    return []


def _rename_tables(pairs: str, default_db: str) -> list[tuple[TableRef, Change]]:
    out: list[tuple[TableRef, Change]] = []
    for pair in _split_top_level(pairs, ","):
        parts = re.split(r"\s+TO\s+", pair.strip(), flags=re.IGNORECASE)
        if len(parts) != 2:
            raise DdlParseError(f"cannot parse RENAME TABLE clause {pair!r}")
        old = _ref(exp.to_table(parts[0].strip(), dialect="mysql"), default_db)
        new = _ref(exp.to_table(parts[1].strip(), dialect="mysql"), default_db)
        out.append((old, RenameTable(*new)))
    return out


def _split_top_level(text: str, sep: str) -> list[str]:
    parts, depth, current, quote = [], 0, [], None
    for ch in text:
        if quote:
            current.append(ch)
            if ch == quote:
                quote = None
            continue
        if ch in "`'\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append("".join(current))
            current = []
            continue
        current.append(ch)
    parts.append("".join(current))
    return [p for p in parts if p.strip()]
