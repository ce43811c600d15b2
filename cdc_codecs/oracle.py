"""The reference model: events applied one by one in commitTs order. Tests and the demo only.

It is deliberately plain, so that a reader can check it against docs/contract.md §3 line by line:

- the pipeline watermark is the minimum, over every partition of every topic (including
  partitions that saw nothing), of the greatest watermark seen on that partition;
- a cut applies exactly the rows with ``previous < commit_ts <= watermark``, ordered by
  commitTs, then partition offset, then index in the message;
- DDL is ordered with rows by commitTs and applied once however many partitions carry it;
- an update that changes the key deletes the old key and writes the new one;
- a table without a primary key uses the whole row as its key;
- table DDL as the MySQL 8 manual defines it (15.1.36 RENAME TABLE, 15.1.32 DROP TABLE):
  ``RENAME TABLE a TO b, c TO d`` renames left to right, each pair seeing the ones before it
  (so ``a TO tmp, b TO a, tmp TO b`` swaps), and takes effect as one statement;
  ``ALTER TABLE a ... RENAME TO b`` renames after its other changes (15.1.9);
  ``DROP TABLE [IF EXISTS] a, b`` drops every table named; comments are not SQL.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable

from cdc_codecs.events import DdlChange, Event, Op, RowChange, SchemaSnapshot, TableSchema, Watermark

TableName = tuple[str, str]
Key = tuple[Any, ...]

# A statement's words: comments skipped (MySQL's executable `/*! ... */` kept), `quoted` names
# unquoted, other words as written. Enough for the table-level statements below.
_TOKEN = re.compile(r"\s+|/\*!\d*|\*/|/\*.*?\*/|--[^\n]*|#[^\n]*|`((?:[^`]|``)*)`|([\w$]+)|(.)", re.DOTALL)


def _tokens(sql: str) -> list[tuple[str, bool]]:
    """(text, quoted) per word or punctuation mark."""
    out = []
    for m in _TOKEN.finditer(sql):
        if m.group(1) is not None:
            out.append((m.group(1).replace("``", "`"), True))
        elif m.group(2) is not None or m.group(3) is not None:
            out.append((m.group(2) or m.group(3), False))
    return out


def _is(token: tuple[str, bool], *words: str) -> bool:
    return not token[1] and token[0].upper() in words


def _table_names(tokens: list[tuple[str, bool]], default_db: str) -> list[TableName]:
    """``a, db.b, ...``: every table of a comma-separated list."""
    return [(words[0], words[1]) if len(words) == 2 else (default_db, words[0])
            for part in _split(tokens, ",") if (words := [w for w, quoted in part if quoted or w != "."])]


def _split(tokens: list[tuple[str, bool]], *separators: str) -> list[list[tuple[str, bool]]]:
    parts: list[list[tuple[str, bool]]] = [[]]
    for t in tokens:
        if _is(t, *separators):
            parts.append([])
        elif t != (";", False):
            parts[-1].append(t)
    return parts


def _table_statement(sql: str, default_db: str) -> tuple[str, list[TableName]] | None:
    """A table-level statement as (verb, tables), RENAME's as [old, new, old, new, ...]; None for others."""
    tokens = _tokens(sql)
    if len(tokens) > 1 and _is(tokens[0], "CREATE", "DROP") and _is(tokens[1], "TEMPORARY"):
        return None  # temporary tables are not replicated
    if len(tokens) < 2 or not (_is(tokens[1], "TABLE", "TABLES") or _is(tokens[0], "TRUNCATE")):
        return None
    verb = tokens[0][0].upper()
    rest = tokens[2:] if _is(tokens[1], "TABLE", "TABLES") else tokens[1:]
    if verb == "RENAME":
        return verb, [name for side in _split(rest, "TO", ",") for name in _table_names(side, default_db)]
    if len(rest) > 1 and _is(rest[0], "IF"):
        rest = rest[3:] if _is(rest[1], "NOT") else rest[2:]
    if verb == "DROP":
        return verb, _table_names([t for t in rest if not _is(t, "RESTRICT", "CASCADE")], default_db)
    if verb in ("TRUNCATE", "CREATE"):
        end = next((i for i, t in enumerate(rest) if t == ("(", False) or _is(t, "LIKE", "AS", "SELECT")), len(rest))
        return verb, _table_names(rest[:end], default_db)[:1]
    if verb == "ALTER":  # ALTER TABLE t ... RENAME [TO | AS] u (15.1.9): the table, and its new name if renamed
        end = 3 if len(rest) > 2 and rest[1] == (".", False) else 1
        table, clauses, depth = _table_names(rest[:end], default_db), [[]], 0
        for t in rest[end:]:
            depth += (t == ("(", False)) - (t == (")", False))
            if t == (",", False) and not depth:
                clauses.append([])
            else:
                clauses[-1].append(t)
        for clause in clauses:
            if clause and _is(clause[0], "RENAME") and not (len(clause) > 1 and _is(clause[1], "COLUMN", "INDEX", "KEY")):
                target = clause[2:] if len(clause) > 2 and _is(clause[1], "TO", "AS") else clause[1:]
                return verb, table + _table_names(target, default_db)
        return verb, table
    return None


def row_key(keys: tuple[str, ...], row: dict[str, Any]) -> Key:
    if keys:
        return tuple(row.get(k) for k in keys)
    return tuple(sorted((k, repr(v)) for k, v in row.items()))


@dataclass
class Oracle:
    """Feed it decoded events (``add``), then ``cut(partitions)`` as often as runs happen."""

    tables: dict[TableName, dict[Key, dict[str, Any]]] = field(default_factory=dict)
    schemas: dict[TableName, TableSchema] = field(default_factory=dict)
    watermark: int = 0
    _pending: list[RowChange | DdlChange] = field(default_factory=list)
    _partition_marks: dict[tuple[str, int], int] = field(default_factory=dict)

    def add(self, events: Iterable[Event]) -> None:
        for e in events:
            if isinstance(e, Watermark):
                key = (e.position.topic, e.position.partition)
                self._partition_marks[key] = max(self._partition_marks.get(key, 0), e.ts)
            elif isinstance(e, SchemaSnapshot):
                self.schemas.setdefault((e.schema.database, e.schema.table), e.schema)
            elif isinstance(e, (RowChange, DdlChange)):
                if e.commit_ts is None:
                    raise ValueError("the oracle orders by commitTs; this event has none")
                self._pending.append(e)

    def pipeline_watermark(self, partitions: Iterable[tuple[str, int]]) -> int:
        return min(self._partition_marks.get(p, 0) for p in partitions)

    def cut(self, partitions: Iterable[tuple[str, int]]) -> int:
        """Apply everything up to the pipeline watermark; returns it."""
        w = max(self.watermark, self.pipeline_watermark(list(partitions)))
        ready = sorted(
            (e for e in self._pending if self.watermark < e.commit_ts <= w),  # type: ignore[operator]
            key=lambda e: (e.commit_ts, e.position.offset, e.position.index),
        )
        self._pending = [e for e in self._pending if e.commit_ts > w]  # type: ignore[operator]
        applied_ddl: set[tuple[int, str]] = set()
        for e in ready:
            if isinstance(e, DdlChange):
                if (e.commit_ts, e.sql) not in applied_ddl:  # broadcast to every partition
                    applied_ddl.add((e.commit_ts, e.sql))  # type: ignore[arg-type]
                    self._apply_ddl(e)
            else:
                self._apply_row(e)
        self.watermark = w
        return w

    def _apply_ddl(self, e: DdlChange) -> None:
        statement = _table_statement(e.sql, e.database)
        verb, names = statement if statement is not None else ("", [])
        if verb == "RENAME":
            for old, new in zip(names[::2], names[1::2]):  # left to right: each pair sees the ones before
                self.tables[new] = self.tables.pop(old, {})
                if old in self.schemas:
                    self.schemas[new] = self.schemas.pop(old)
            return
        if verb in ("DROP", "TRUNCATE"):
            for name in names:
                self.tables[name] = {}
            return
        name = names[0] if verb == "CREATE" else (e.database, e.table)
        if verb == "CREATE":  # a new, empty table (a dropped one's rows are long gone)
            self.tables[name] = {}
        if e.schema_after is not None:
            self.schemas[name] = e.schema_after
            table = self.tables.setdefault(name, {})
            for row in table.values():
                for c in e.schema_after.columns:
                    row.setdefault(c.name, None)
                for gone in [c for c in row if e.schema_after.column(c) is None]:
                    del row[gone]
        if verb == "ALTER" and len(names) == 2:  # renamed after its other changes
            self.tables[names[1]] = self.tables.pop(names[0], {})
            if names[0] in self.schemas:
                self.schemas[names[1]] = self.schemas.pop(names[0])

    def _apply_row(self, e: RowChange) -> None:
        table = self.tables.setdefault((e.database, e.table), {})
        if e.op is not Op.INSERT and e.before is not None:
            table.pop(row_key(e.key_columns, dict(e.before)), None)
        if e.op is not Op.DELETE and e.after is not None:
            table[row_key(e.key_columns, dict(e.after))] = dict(e.after)

    def rows(self, database: str, table: str) -> list[dict[str, Any]]:
        """The table's rows, NULL columns left out (a column a row never had reads as NULL too)."""
        rows = [{k: v for k, v in r.items() if v is not None} for r in self.tables.get((database, table), {}).values()]
        return sorted(rows, key=lambda r: repr(sorted(r.items())))


@dataclass
class BinlogOracle(Oracle):
    """The reference model for protocols without commitTs (official Canal, CloudCanal, Debezium MySQL, DTS).

    What a derived watermark W means, step by step:

    - a partition's watermark is (the greatest event time it has shown, in ms) << 18, minus
      one tick (the rest of that millisecond may still come); DTS heartbeats count too;
      W = the minimum over every partition, never going back;
    - what W holds is, per partition, a prefix of its changes in offset order (binlog
      order; event times may go back, as MySQL stamps a statement's start): a cut at a new
      W extends each partition's prefix while the running maximum of event times since the
      previous cut (starting just above the previous W) stays <= W;
    - the extended changes are applied one by one in (that running maximum, partition,
      offset, index) order; a DDL sent to several partitions is applied once, at its first copy.
    """

    _changes: dict[tuple[str, int], list[RowChange | DdlChange]] = field(default_factory=dict)
    _cursor: dict[tuple[str, int], int] = field(default_factory=dict)
    _ddl_seen: set[tuple[Any, ...]] = field(default_factory=set)

    def add(self, events: Iterable[Event]) -> None:
        for e in events:
            key = (e.position.topic, e.position.partition)
            if isinstance(e, Watermark):  # a heartbeat: wall-clock milliseconds
                self._partition_marks[key] = max(self._partition_marks.get(key, 0), (e.ts << 18) - 1)
            elif isinstance(e, SchemaSnapshot):
                self.schemas.setdefault((e.schema.database, e.schema.table), e.schema)
            elif isinstance(e, (RowChange, DdlChange)):
                if e.event_time_ms is None:
                    raise ValueError("a change without commitTs needs its event time")
                self._changes.setdefault(key, []).append(e)
                self._partition_marks[key] = max(self._partition_marks.get(key, 0), (e.event_time_ms << 18) - 1)

    def cut(self, partitions: Iterable[tuple[str, int]]) -> int:
        partitions = list(partitions)
        w = max(self.watermark, self.pipeline_watermark(partitions))
        if w == self.watermark:
            return w
        extended = []
        for p in partitions:
            changes, i = self._changes.get(p, []), self._cursor.get(p, 0)
            running = self.watermark + 1
            while i < len(changes) and max(running, changes[i].event_time_ms << 18) <= w:  # type: ignore[operator]
                running = max(running, changes[i].event_time_ms << 18)  # type: ignore[operator]
                e = changes[i]
                extended.append(((running, p[1], e.position.offset, e.position.index), e))
                i += 1
            self._cursor[p] = i
        for _, e in sorted(extended, key=lambda x: x[0]):
            if isinstance(e, DdlChange):
                ident = (e.event_time_ms, e.database, e.table, e.sql)
                if ident not in self._ddl_seen:
                    self._ddl_seen.add(ident)
                    self._apply_ddl(e)
            else:
                self._apply_row(e)
        self.watermark = w
        return w
