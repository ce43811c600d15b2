"""An upstream database and its changefeed, as the model-based tests drive them.

``Upstream`` is a TiDB-like database whose history the test writes step by step: row
changes (inserts, updates, key changes, deletes), ADD COLUMN, RENAME / DROP / CREATE /
TRUNCATE TABLE, DROP DATABASE, TRUNCATE / DROP PARTITION, gh-ost migrations, and resolved timestamps. ``Changefeed`` encodes that history once per
protocol and lets the test deliver it the way real changefeeds do: in order, with a whole
range sent again after a restart from an older checkpoint, single duplicates, a partition
whose watermarks lag, and undecodable messages.
"""

from __future__ import annotations

import random
from dataclasses import replace

from cdc_codecs import ProducerRecord, RawMessage, SourcePosition, get_decoder, get_encoder
from cdc_codecs.events import BinlogPosition, DdlChange, Event, Op, RowChange, Watermark
from spark.demo.workload import Workload, WorkloadSpec, create_sql, quote_ident, table_schema

GARBAGE = b"\x00not a message\xff"
# The partitions of a partitioned table, as (name, LESS THAN bound); None is MAXVALUE.
RANGES = (("p0", 6), ("p1", 12), ("p2", None))


def _ident(database: str, table: str) -> str:
    return f"{quote_ident(database)}.{quote_ident(table)}"


class Upstream(Workload):
    """A database whose tables come and go; ``events`` holds its whole history so far."""

    def __init__(self, seed: int, tables: tuple[str, ...] = ("t0", "t.1"), key_space: int = 12, skew_ms: int = 0,
                 partitioned: bool = False) -> None:
        super().__init__(WorkloadSpec(database="shop", tables=len(tables), seed=seed, key_space=key_space,
                                      alter=False, table_names=list(tables)))
        self.history: list[Event] = []
        self._binlog_events = 0
        # MySQL stamps a row event with its statement's start time: later events may carry earlier times.
        self.skew_ms = skew_ms
        self._last_ddl_ms = 0
        self.dropped: list[str] = []
        self._created = 0
        # Tables are created PARTITION BY RANGE (`id`) (RANGES): their partitions, as they are now.
        self.partitioned = partitioned
        self.partitions: dict[str, list[tuple[str, int | None]]] = {}
        for name, schema in self.schemas.items():
            self._create(name, schema)

    def _create(self, table: str, schema) -> None:  # noqa: ANN001
        sql = create_sql(schema)
        self.partitions.pop(table, None)
        if self.partitioned:
            self.partitions[table] = list(RANGES)
            sql += " PARTITION BY RANGE (`id`) (" + ", ".join(
                f"PARTITION {p} VALUES LESS THAN {'MAXVALUE' if bound is None else f'({bound})'}" for p, bound in RANGES) + ")"
        self._ddl(table, sql, "CREATE", None, schema)

    def _ddl(self, table: str, sql: str, kind: str, before, after) -> None:  # noqa: ANN001
        self.history.append(DdlChange(self.spec.database, table, sql, self._next_ts(), self._pos(), kind, before, after,
                                      self._clock, self._binlog()))
        self._last_ddl_ms = self._clock

    def _binlog(self) -> BinlogPosition:
        """The next binlog coordinates (connectors that carry them send them along), rotating
        files every 50 events so that file order counts too."""
        self._binlog_events += 1
        file, pos = divmod(self._binlog_events, 50)
        return BinlogPosition(f"{file + 1:06d}", 4 + 100 * pos, 0, server=1)

    def changes(self, n: int) -> None:
        for _ in range(n):
            if self.schemas:
                change = self.change(self.rng.choice(sorted(self.schemas)))
                if self.skew_ms:
                    # A statement starts after the DDL before it completed (MySQL's metadata lock):
                    # its time may go back, but never before the last DDL's.
                    skewed = change.event_time_ms - self.rng.randint(0, self.skew_ms)
                    change = change._replace(event_time_ms=max(skewed, self._last_ddl_ms + 1))
                self.history.append(change._replace(binlog=self._binlog()))

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
            # Every other one with a DEFAULT, which MySQL gives the rows the table holds (chosen
            # without the random generator, so that seeded histories stay as they were).
            default = "n/a" if len(self.history) % 2 else None
            clause = " DEFAULT ('n/a')" if default else ""
            self._ddl(t, f"ALTER TABLE {_ident(self.spec.database, t)} ADD COLUMN `note` text{clause}", "ALTER", before, after)
            if default:  # new dicts: the old ones are the images of changes already in the history
                self.rows[t] = {k: {**row, "note": default} for k, row in self.rows[t].items()}

    def rename(self) -> None:
        if self.schemas:
            old = self.rng.choice(sorted(self.schemas))
            self._created += 1
            new = f"r{self._created}"
            before = self.schemas.pop(old)
            after = replace(before, table=new)
            self.schemas[new], self.rows[new] = after, self.rows.pop(old)
            if old in self.partitions:
                self.partitions[new] = self.partitions.pop(old)
            self._ddl(old, f"RENAME TABLE {_ident(self.spec.database, old)} TO {_ident(self.spec.database, new)}",
                      "RENAME", before, after)

    def gh_ost(self) -> None:
        """gh-ost migrates a table (adds ``note``, or rebuilds it): changelog and ghost tables, the
        ghost filled by copy and by the table's binlog rows, the atomic cut-over onto a sentry
        ``_<t>_del`` dropped just before, and the cleanup drops (github/gh-ost, go/logic/applier.go)."""
        if not self.schemas:
            return
        db, t = self.spec.database, self.rng.choice(sorted(self.schemas))
        ghost, changelog, old = f"_{t}_gho", f"_{t}_ghc", f"_{t}_del"
        before = self.schemas[t]
        after = table_schema(db, ghost, with_note=True)
        self._ddl(changelog, f"drop /* gh-ost */ table if exists {_ident(db, changelog)}", "DROP", None, None)
        self._ddl(changelog, create_sql(table_schema(db, changelog)).replace("CREATE TABLE", "create /* gh-ost */ table", 1),
                  "CREATE", None, table_schema(db, changelog))
        self._ddl(ghost, f"create /* gh-ost */ table {_ident(db, ghost)} like {_ident(db, t)}", "CREATE", None, replace(before, table=ghost))
        alter = "add column `note` text" if before.column("note") is None else "engine=InnoDB"
        self._ddl(ghost, f"alter /* gh-ost */ table {_ident(db, ghost)} {alter}", "ALTER", replace(before, table=ghost), after)

        def to_ghost(op: Op, before_row, after_row) -> None:  # noqa: ANN001
            padded = [None if r is None else {c.name: r.get(c.name) for c in after.columns} for r in (before_row, after_row)]
            self.history.append(RowChange(op, db, ghost, *padded, ("id",), after.column_types, self._next_ts(),
                                          self._pos(), self._clock))

        for row in list(self.rows[t].values()):  # insert ignore into the ghost select from t
            to_ghost(Op.INSERT, None, row)
        for _ in range(self.rng.randint(0, 3)):  # t's binlog rows, applied to the ghost too
            change = self.change(t)
            self.history.append(change)
            to_ghost(change.op, change.before, change.after)
        self._ddl(old, f"drop /* gh-ost */ table if exists {_ident(db, old)}", "DROP", None, None)
        self._ddl(old, f"create /* gh-ost */ table {_ident(db, old)} (id int auto_increment primary key) "
                       "engine=InnoDB comment='ghost-cut-over-sentry'", "CREATE", None, None)
        self._ddl(old, f"drop /* gh-ost */ table if exists {_ident(db, old)}", "DROP", None, None)
        self.schemas[t] = replace(after, table=t)
        self._ddl(t, f"rename /* gh-ost */ table {_ident(db, t)} to {_ident(db, old)}, {_ident(db, ghost)} to {_ident(db, t)}",
                  "RENAME", before, self.schemas[t])
        self._ddl(changelog, f"drop /* gh-ost */ table if exists {_ident(db, changelog)}", "DROP", None, None)
        self._ddl(old, f"drop /* gh-ost */ table if exists {_ident(db, old)}", "DROP", None, None)

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

    def discard(self) -> None:
        """DISCARD TABLESPACE (rows gone without row events: tidelake cannot apply it and isolates the
        table), then the DROP TABLE MySQL allows on a discarded table."""
        if len(self.schemas) > 1:
            t = self.rng.choice(sorted(self.schemas))
            self._ddl(t, f"ALTER TABLE {_ident(self.spec.database, t)} DISCARD TABLESPACE", "ALTER", None, None)
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
        self._create(t, schema)

    def truncate_partition(self) -> None:
        """ALTER TABLE ... TRUNCATE PARTITION, or DROP PARTITION of the lowest one (the next then
        holds its range): the partition's rows go, without row events."""
        tables = sorted(t for t in self.partitions if t in self.schemas)
        if not tables:
            return
        t = self.rng.choice(tables)
        parts = self.partitions[t]
        drop = len(parts) > 1 and self.rng.random() < 0.3
        i = 0 if drop else self.rng.randrange(len(parts))
        lower, (name, upper) = parts[i - 1][1] if i else None, parts[i]
        for key in [k for k in self.rows[t] if (lower is None or k >= lower) and (upper is None or k < upper)]:
            del self.rows[t][key]
        if drop:
            del parts[0]
        self._ddl(t, f"ALTER TABLE {_ident(self.spec.database, t)} {'DROP' if drop else 'TRUNCATE'} PARTITION {name}",
                  "ALTER", self.schemas[t], self.schemas[t])

    def drop_database(self) -> None:
        """DROP DATABASE (as TiCDC sends it: table ""): every table goes; the database and a table
        are made again so that the history goes on."""
        self.dropped += sorted(self.schemas)
        self.schemas.clear()
        self.rows.clear()
        self._ddl("", f"DROP DATABASE IF EXISTS {quote_ident(self.spec.database)}", "QUERY", None, None)
        self._ddl("", f"CREATE DATABASE {quote_ident(self.spec.database)}", "QUERY", None, None)
        self.create()


class Changefeed:
    """Deliveries of one protocol's records to the partitions of one topic.

    The whole history is encoded once (encoders batch and broadcast as upstream does); the
    test releases records in their order, so ``released[p]`` is what partition p holds.
    """

    def __init__(self, protocol: str, partitions: int, seed: int, options: dict[str, str] | None = None) -> None:
        self.protocol, self.partitions = protocol, partitions
        self.options = dict(options or {})  # the upstream's configuration: its encoder's and the topic's decoder's
        self.rng = random.Random(seed)
        self.records: list[ProducerRecord] = []
        self.sent = 0  # records of ``records`` released so far
        self.released: list[list[ProducerRecord]] = [[] for _ in range(partitions)]
        self.lagging: int | None = None  # a partition whose watermark records are being lost

    def encode(self, history: list[Event]) -> None:
        self.records = get_encoder(self.protocol, **self.options).encode_all(history, self.partitions)
        self.watermarks = {i for i, r in enumerate(self.records) if _is_watermark(self.protocol, r, self.options)}

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


def _is_watermark(protocol: str, record: ProducerRecord, options: dict[str, str]) -> bool:
    decoded = get_decoder(protocol, **options).decode(RawMessage(record.key, record.value, SourcePosition("x", 0, 0)))
    return bool(decoded) and all(isinstance(e, Watermark) for e in decoded)
