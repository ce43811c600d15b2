"""The reference model: events applied one by one in commitTs order. Tests and the demo only.

It is deliberately plain, so that a reader can check it against docs/contract.md §3 line by line:

- the pipeline watermark is the minimum, over every partition of every topic (including
  partitions that saw nothing), of the greatest watermark seen on that partition;
- a cut applies exactly the rows with ``previous < commit_ts <= watermark``, ordered by
  commitTs, then partition offset, then index in the message;
- the rows of one commitTs are one TiDB transaction, which commits one final mutation per
  row: its before-images are removed first, then its after-images written, so the order in
  which its rows arrive (TiCDC dispatches them by key to different partitions) changes
  nothing;
- DDL is ordered with rows by commitTs and applied once however many partitions carry it;
- an update that changes the key deletes the old key and writes the new one;
- a table without a primary key is a multiset of rows (MySQL allows identical rows in it): a
  row event changes one row, so an INSERT adds one copy of its image, a DELETE removes one
  copy of its before-image, an UPDATE does both. The model counts every change it is given:
  feed it each upstream change once (a changefeed's re-sends are delivery, not history) --
  except ``BinlogOracle``, which is fed what was delivered (see there).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, NamedTuple

from cdc_codecs.events import DdlChange, Event, Op, RowChange, SchemaSnapshot, TableSchema, Watermark

TableName = tuple[str, str]
Key = tuple[Any, ...]

# Table-level DDL in the one form the test histories write it (`db`.`table`, backticks doubled).
_NAME = r"`((?:[^`]|``)*)`\.`((?:[^`]|``)*)`"
_RENAME = re.compile(rf"^RENAME TABLE {_NAME} TO {_NAME}$", re.IGNORECASE)
_TABLE_DDL = re.compile(rf"^(DROP|TRUNCATE|CREATE) TABLE {_NAME}", re.IGNORECASE)


def _name(db: str, table: str) -> TableName:
    return db.replace("``", "`"), table.replace("``", "`")


def row_key(keys: tuple[str, ...], row: dict[str, Any]) -> Key:
    if keys:
        return tuple(row.get(k) for k in keys)
    return tuple(sorted((k, repr(v)) for k, v in row.items()))


class _Copy(NamedTuple):
    """The key of a key-less table's row: the ``n``-th copy of its image (all its columns)."""

    image: Key
    n: int


def _copies(table: dict[Key, dict[str, Any]], key: Key) -> int:
    """How many copies of a key-less image ``key`` the table holds."""
    n = 0
    while _Copy(key, n) in table:
        n += 1
    return n


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
        transaction: list[RowChange] = []
        for i, e in enumerate(ready):
            if isinstance(e, DdlChange):
                if (e.commit_ts, e.sql) not in applied_ddl:  # broadcast to every partition
                    applied_ddl.add((e.commit_ts, e.sql))  # type: ignore[arg-type]
                    self._apply_ddl(e)
            else:
                transaction.append(e)
            if transaction and (i + 1 == len(ready) or ready[i + 1].commit_ts != e.commit_ts
                                or isinstance(ready[i + 1], DdlChange)):
                self._apply_transaction(transaction)
                transaction = []
        self.watermark = w
        return w

    def _apply_transaction(self, rows: list[RowChange]) -> None:
        """One commitTs's rows: every before-image removed, then every after-image written."""
        for e in rows:
            self._remove(e)
        for e in rows:
            self._write(e)

    def _apply_ddl(self, e: DdlChange) -> None:
        sql = e.sql.strip()
        rename = _RENAME.match(sql)
        if rename:
            old, new = _name(*rename.group(1, 2)), _name(*rename.group(3, 4))
            self.tables[new] = self.tables.pop(old, {})
            if old in self.schemas:
                self.schemas[new] = self.schemas.pop(old)
            return
        table_ddl = _TABLE_DDL.match(sql)
        if table_ddl and table_ddl.group(1).upper() in ("DROP", "TRUNCATE"):
            self.tables[_name(*table_ddl.group(2, 3))] = {}
            return
        name = _name(*table_ddl.group(2, 3)) if table_ddl else (e.database, e.table)
        if table_ddl:  # CREATE TABLE: a new, empty table (a dropped one's rows are long gone)
            self.tables[name] = {}
        if e.schema_after is not None:
            self.schemas[name] = e.schema_after
            table = self.tables.setdefault(name, {})
            for row in table.values():
                for c in e.schema_after.columns:
                    row.setdefault(c.name, None)
                for gone in [c for c in row if e.schema_after.column(c) is None]:
                    del row[gone]
            # A key-less row's key is all its columns: it follows them (or the primary key added).
            for row in [table.pop(k) for k in list(table) if isinstance(k, _Copy)]:
                self._put(table, e.schema_after.key_columns, row)

    def _apply_row(self, e: RowChange) -> None:
        self._remove(e)
        self._write(e)

    def _remove(self, e: RowChange) -> None:
        table = self.tables.setdefault((e.database, e.table), {})
        if e.op is not Op.INSERT and e.before is not None:
            key = row_key(e.key_columns, dict(e.before))
            if e.key_columns:
                table.pop(key, None)
            elif copies := _copies(table, key):  # one row of a key-less table: one copy of its image
                del table[_Copy(key, copies - 1)]

    def _write(self, e: RowChange) -> None:
        if e.op is not Op.DELETE and e.after is not None:
            self._put(self.tables.setdefault((e.database, e.table), {}), e.key_columns, dict(e.after))

    @staticmethod
    def _put(table: dict[Key, dict[str, Any]], keys: tuple[str, ...], row: dict[str, Any]) -> None:
        """Write ``row``: over its key's row, or as one more copy of a key-less table's image."""
        key = row_key(keys, row)
        if keys:
            table[key] = row
        else:
            table[_Copy(key, _copies(table, key))] = row

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
      offset, index) order; a DDL sent to several partitions is applied once, at its first copy;
    - nothing tells a re-sent range from new changes without commitTs (binlog positions are not
      used yet), so it is fed what was delivered: a re-sent change applies again, and a re-sent
      INSERT into a key-less table adds a copy (README, known gaps).
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
