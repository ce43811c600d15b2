"""Generated upstream histories: what a TiDB/MySQL database would emit, as events.

Used by the demo, the benchmarks and the tests. A history is deterministic for a seed:
CREATE TABLE for each table, then transactions of inserts, updates (some changing the
key), deletes, an ``ALTER TABLE ... ADD COLUMN`` half-way through, and a watermark
every ``watermark_every`` events. Commit timestamps are TiDB TSOs (physical ms << 18).
"""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Iterator

from cdc_codecs.events import Column, DdlChange, Event, Op, RowChange, SourcePosition, TableSchema, Watermark
from cdc_codecs.types import ColumnType, parse_mysql_type

UTC = dt.timezone.utc
BASE_COLUMNS: tuple[tuple[str, str, bool], ...] = (
    ("id", "bigint", False),
    ("name", "varchar(64)", True),
    ("amount", "decimal(12,2)", True),
    ("qty", "int", True),
    ("updated_at", "datetime(6)", True),
    ("created_at", "timestamp", True),
    ("payload", "varbinary(32)", True),
    ("big", "bigint unsigned", True),
)
ADDED_COLUMN = ("note", "text", True)


def tso(physical_ms: int, logical: int = 0) -> int:
    """TiDB TSO: physical milliseconds << 18 | logical."""
    return physical_ms << 18 | logical


@dataclass
class WorkloadSpec:
    database: str = "shop"
    tables: int = 3
    events: int = 1000
    seed: int = 0
    watermark_every: int = 50
    key_space: int = 200
    start_ms: int = 1_700_000_000_000
    spacing_ms: int = 3  # mean upstream time between changes
    alter: bool = True
    table_names: list[str] = field(default_factory=list)


def table_schema(database: str, table: str, with_note: bool = False) -> TableSchema:
    cols = BASE_COLUMNS + ((ADDED_COLUMN,) if with_note else ())
    return TableSchema(database, table, tuple(Column(n, parse_mysql_type(t), nullable) for n, t, nullable in cols), ("id",))


def quote_ident(name: str) -> str:
    """A MySQL identifier, quoted: backticks inside the name are doubled."""
    return "`" + name.replace("`", "``") + "`"


def create_sql(schema: TableSchema) -> str:
    cols = ", ".join(f"{quote_ident(c.name)} {c.type}{'' if c.nullable else ' NOT NULL'}" for c in schema.columns)
    if schema.key_columns:  # a table without one is a multiset (MySQL allows identical rows in it)
        cols += ", PRIMARY KEY (" + ", ".join(quote_ident(k) for k in schema.key_columns) + ")"
    return f"CREATE TABLE {quote_ident(schema.database)}.{quote_ident(schema.table)} ({cols})"


class Workload:
    """Iterate ``events()`` for the history; ``schemas`` holds each table's current schema."""

    def __init__(self, spec: WorkloadSpec) -> None:
        self.spec = spec
        self.rng = random.Random(spec.seed)
        names = spec.table_names or [f"t{i}" for i in range(spec.tables)]
        self.schemas = {n: table_schema(spec.database, n) for n in names}
        self.rows: dict[str, dict[int, dict[str, Any]]] = {n: {} for n in names}
        self._clock = spec.start_ms
        self._seq = 0

    def _next_ts(self) -> int:
        self._clock += self.rng.randint(1, 2 * self.spec.spacing_ms - 1)
        return tso(self._clock, self.rng.randint(0, 3))

    def _pos(self) -> SourcePosition:
        self._seq += 1
        return SourcePosition("generated", 0, self._seq)

    def _row(self, table: str, key: int) -> dict[str, Any]:
        r = self.rng
        row: dict[str, Any] = {
            "id": key,
            "name": r.choice(["alice", "bob", "carol", "dave", "émile", "李雷"]) + str(r.randint(0, 999)),
            "amount": Decimal(r.randint(-10**6, 10**6)).scaleb(-2),
            "qty": r.randint(-(2**31), 2**31 - 1) if r.random() < 0.05 else r.randint(0, 1000),
            "updated_at": dt.datetime(2024, 1, 1) + dt.timedelta(microseconds=r.randint(0, 10**13)),
            "created_at": dt.datetime(2023, 1, 1, tzinfo=UTC) + dt.timedelta(seconds=r.randint(0, 10**8)),
            "payload": bytes(r.randint(0, 255) for _ in range(r.randint(0, 16))),
            "big": r.choice([0, 1, 2**63, 2**64 - 1, r.randint(0, 2**64 - 1)]),
        }
        if r.random() < 0.1:
            row[r.choice(["name", "amount", "qty", "payload"])] = None
        if self.schemas[table].column("note") is not None:
            row["note"] = r.choice([None, "hello", "multi\nline", "quote ' and \" and \\"])
        return row

    def creates(self) -> Iterator[DdlChange]:
        """The CREATE TABLE of every table, in order."""
        for name, schema in self.schemas.items():
            yield DdlChange(self.spec.database, name, create_sql(schema), self._next_ts(), self._pos(), "CREATE", None, schema,
                            self._clock)

    def events(self) -> Iterator[Event]:
        spec = self.spec
        yield from self.creates()
        alter_at = spec.events // 2 if spec.alter else -1
        for i in range(spec.events):
            table = self.rng.choice(list(self.schemas))
            if i == alter_at:
                before = self.schemas[table]
                after = table_schema(spec.database, table, with_note=True)
                self.schemas[table] = after
                sql = f"ALTER TABLE {quote_ident(spec.database)}.{quote_ident(table)} ADD COLUMN `note` text"
                yield DdlChange(spec.database, table, sql, self._next_ts(), self._pos(), "ALTER", before, after, self._clock)
            yield self.change(table)
            if spec.watermark_every and (i + 1) % spec.watermark_every == 0:
                yield Watermark(self._next_ts(), self._pos())
        yield Watermark(self._next_ts(), self._pos())

    def change(self, table: str) -> RowChange:
        """The next change of ``table``: an insert of a free key, else an update (some moving the key) or a delete."""
        r = self.rng
        rows = self.rows[table]
        schema = self.schemas[table]
        types: dict[str, ColumnType] = schema.column_types
        ts = self._next_ts()
        key = r.randrange(self.spec.key_space)
        if key not in rows:
            after = self._row(table, key)
            rows[key] = after
            return RowChange(Op.INSERT, schema.database, table, None, after, ("id",), types, ts, self._pos(), self._clock)
        before = rows[key]
        if r.random() < 0.25:
            del rows[key]
            return RowChange(Op.DELETE, schema.database, table, before, None, ("id",), types, ts, self._pos(), self._clock)
        after = self._row(table, key)
        if r.random() < 0.1:  # an update that moves the row to a free key
            new_key = r.randrange(self.spec.key_space, self.spec.key_space * 2)
            if new_key not in rows:
                after["id"] = new_key
                del rows[key]
                key = new_key
        rows[key] = after
        before = {**before, **{c.name: None for c in schema.columns if c.name not in before}}
        return RowChange(Op.UPDATE, schema.database, table, before, after, ("id",), types, ts, self._pos(), self._clock)
