"""An upstream database and its changefeed, as the model-based tests drive them.

``Upstream`` is a TiDB-like database whose history the test writes step by step: row
changes (inserts, updates, key changes, deletes), ADD COLUMN, RENAME / DROP / CREATE /
TRUNCATE TABLE, and resolved timestamps. ``Changefeed`` encodes that history once per
protocol and lets the test deliver it the way real changefeeds do: in order, with a whole
range sent again after a restart from an older checkpoint, single duplicates, a partition
whose watermarks lag, and undecodable messages.
"""

from __future__ import annotations

import random
from dataclasses import replace

from cdc_codecs import ProducerRecord, RawMessage, SourcePosition, get_decoder, get_encoder
from cdc_codecs.events import DdlChange, Event, Op, RowChange, Watermark
from cdc_codecs.workload import Workload, WorkloadSpec, create_sql, quote_ident, table_schema

GARBAGE = b"\x00not a message\xff"


def _ident(database: str, table: str) -> str:
    return f"{quote_ident(database)}.{quote_ident(table)}"


class Upstream(Workload):
    """A database whose tables come and go; ``events`` holds its whole history so far."""

    def __init__(self, seed: int, tables: tuple[str, ...] = ("t0", "t.1"), key_space: int = 12, skew_ms: int = 0) -> None:
        super().__init__(WorkloadSpec(database="shop", tables=len(tables), seed=seed, key_space=key_space,
                                      alter=False, table_names=list(tables)))
        self.history: list[Event] = []
        # MySQL stamps a row event with its statement's start time: later events may carry earlier times.
        self.skew_ms = skew_ms
        self._last_ddl_ms = 0
        self.dropped: list[str] = []
        self._created = 0
        for name, schema in self.schemas.items():
            self._ddl(name, create_sql(schema), "CREATE", None, schema)

    def _ddl(self, table: str, sql: str, kind: str, before, after) -> None:  # noqa: ANN001
        self.history.append(DdlChange(self.spec.database, table, sql, self._next_ts(), self._pos(), kind, before, after, self._clock))
        self._last_ddl_ms = self._clock

    def changes(self, n: int) -> None:
        for _ in range(n):
            if self.schemas:
                change = self._change(self.rng.choice(sorted(self.schemas)))
                if self.skew_ms:
                    # A statement starts after the DDL before it completed (MySQL's metadata lock):
                    # its time may go back, but never before the last DDL's.
                    skewed = change.event_time_ms - self.rng.randint(0, self.skew_ms)
                    change = change._replace(event_time_ms=max(skewed, self._last_ddl_ms + 1))
                self.history.append(change)

    def move_and_reuse_key(self) -> None:
        """One TiDB transaction (one commitTs): a row moves from key k to a free key and a new row
        takes k (a non-clustered primary key). TiCDC dispatches each change by its key, so the two
        may reach different partitions, in either order."""
        t = self.rng.choice(sorted(self.schemas))
        rows, schema = self.rows[t], self.schemas[t]
        new_key = self.rng.randrange(self.spec.key_space, self.spec.key_space * 2)
        if not rows or new_key in rows:
            return
        key = self.rng.choice(sorted(rows))
        ts = self._next_ts()
        old = rows.pop(key)
        before = {**old, **{c.name: None for c in schema.columns if c.name not in old}}
        moved, fresh = self._row(t, new_key), self._row(t, key)
        rows[new_key], rows[key] = moved, fresh
        transaction = [RowChange(Op.UPDATE, schema.database, t, before, moved, ("id",), schema.column_types, ts, self._pos(),
                                 self._clock),
                       RowChange(Op.INSERT, schema.database, t, None, fresh, ("id",), schema.column_types, ts, self._pos(),
                                 self._clock)]
        self.history.extend(transaction if self.rng.random() < 0.5 else transaction[::-1])

    def resolved(self) -> None:
        self.history.append(Watermark(self._next_ts(), self._pos()))

    def add_column(self) -> None:
        plain = [t for t, s in self.schemas.items() if s.column("note") is None]
        if plain:
            t = self.rng.choice(sorted(plain))
            before, after = self.schemas[t], table_schema(self.spec.database, t, with_note=True)
            self.schemas[t] = after
            self._ddl(t, f"ALTER TABLE {_ident(self.spec.database, t)} ADD COLUMN `note` text", "ALTER", before, after)

    def rename(self) -> None:
        if self.schemas:
            old = self.rng.choice(sorted(self.schemas))
            self._created += 1
            new = f"r{self._created}"
            before = self.schemas.pop(old)
            after = replace(before, table=new)
            self.schemas[new], self.rows[new] = after, self.rows.pop(old)
            self._ddl(old, f"RENAME TABLE {_ident(self.spec.database, old)} TO {_ident(self.spec.database, new)}",
                      "RENAME", before, after)

    def truncate(self) -> None:
        if self.schemas:
            t = self.rng.choice(sorted(self.schemas))
            self.rows[t] = {}
            self._ddl(t, f"TRUNCATE TABLE {_ident(self.spec.database, t)}", "TRUNCATE", None, None)

    def drop(self) -> None:
        if len(self.schemas) > 1:
            t = self.rng.choice(sorted(self.schemas))
            del self.schemas[t], self.rows[t]
            self.dropped.append(t)
            self._ddl(t, f"DROP TABLE {_ident(self.spec.database, t)}", "DROP", None, None)

    def create(self) -> None:
        """CREATE TABLE: a dropped table's name again, or a new one."""
        if self.dropped and self.rng.random() < 0.7:
            t = self.dropped.pop(0)
        else:
            self._created += 1
            t = f"c{self._created}"
        schema = table_schema(self.spec.database, t)
        self.schemas[t], self.rows[t] = schema, {}
        self._ddl(t, create_sql(schema), "CREATE", None, schema)


class Changefeed:
    """Deliveries of one protocol's records to the partitions of one topic.

    The whole history is encoded once (encoders batch and broadcast as upstream does); the
    test releases records in their order, so ``released[p]`` is what partition p holds.
    """

    def __init__(self, protocol: str, partitions: int, seed: int) -> None:
        self.protocol, self.partitions = protocol, partitions
        self.rng = random.Random(seed)
        self.records: list[ProducerRecord] = []
        self.sent = 0  # records of ``records`` released so far
        self.released: list[list[ProducerRecord]] = [[] for _ in range(partitions)]
        self.lagging: int | None = None  # a partition whose watermark records are being lost

    def encode(self, history: list[Event]) -> None:
        self.records = get_encoder(self.protocol).encode_all(history, self.partitions)
        self.watermarks = {i for i, r in enumerate(self.records) if _is_watermark(self.protocol, r)}

    def deliver(self, n: int) -> int:
        """Release the next ``n`` records in order; the lagging partition loses its watermarks."""
        count = 0
        while count < n and self.sent < len(self.records):
            i, r = self.sent, self.records[self.sent]
            self.sent += 1
            if r.partition == self.lagging and i in self.watermarks:
                continue
            self.released[r.partition].append(r)
            count += 1
        return count

    def replay(self, back: int) -> None:
        """A changefeed restarted from an older checkpoint: each partition gets its last ``back`` records again."""
        for p in range(self.partitions):
            self.released[p].extend(self.released[p][-back:])

    def duplicate(self) -> None:
        """One earlier record sent again, later (at-least-once delivery)."""
        p = self.rng.randrange(self.partitions)
        if self.released[p]:
            self.released[p].append(self.rng.choice(self.released[p]))

    def bad_message(self) -> None:
        p = self.rng.randrange(self.partitions)
        self.released[p].append(ProducerRecord(p, b"k", GARBAGE))


def _is_watermark(protocol: str, record: ProducerRecord) -> bool:
    decoded = get_decoder(protocol).decode(RawMessage(record.key, record.value, SourcePosition("x", 0, 0)))
    return bool(decoded) and all(isinstance(e, Watermark) for e in decoded)
