"""An upstream database and its changefeed, as the model-based tests drive them.

``Upstream`` is a TiDB-like database whose history the test writes step by step: row
changes (inserts, updates, key changes, deletes), ADD COLUMN, RENAME / DROP / CREATE /
TRUNCATE TABLE, DROP DATABASE, TRUNCATE / DROP PARTITION, gh-ost migrations, and resolved
timestamps. Besides its plain tables it may have a table without a primary key holding
identical rows (``bag``), and typed tables (``mysql_values``): ``typed`` with a key of a drawn
type, ``typed_bag`` without one, their rows drawn from values at each type's extremes.
``Changefeed`` encodes that history once per protocol and lets the test deliver it the way
real changefeeds do: in order, with a whole range sent again after a restart from an older
checkpoint, single duplicates, a partition whose watermarks lag, and undecodable messages --
on protocols with commitTs, only where docs/contract.md §3 says what a key-less table then
holds (``Changefeed.counted``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from cdc_codecs import PROTOCOLS, DecodeError, ProducerRecord, RawMessage, SourcePosition, get_decoder, get_encoder
from cdc_codecs.events import BinlogPosition, Column, DdlChange, Event, Op, RowChange, TableSchema, Watermark
from cdc_codecs.types import parse_mysql_type
from spark.demo.workload import ADDED_COLUMN, Workload, WorkloadSpec, create_sql, quote_ident, table_schema

from .mysql_values import COLUMN_TYPES, VALUE_COLUMNS, TypedTables

GARBAGE = b"\x00not a message\xff"
# The partitions of a partitioned table, as (name, LESS THAN bound); None is MAXVALUE.
RANGES = (("p0", 6), ("p1", 12), ("p2", None))


def _ident(database: str, table: str) -> str:
    return f"{quote_ident(database)}.{quote_ident(table)}"


# The key-less table's rows: few images, so that identical rows are the rule.
BAG_IMAGES = ({"x": 1, "s": "a"}, {"x": 1, "s": "b"}, {"x": 2, "s": None})
# A plain table's name made again with its columns' types changed (a DROP and CREATE, as a MODIFY
# done by hand): id narrower (BIGINT -> INT), amount and qty wider, name another kind (VARCHAR ->
# INT), the rest gone. The change feed keeps every W1 value: id shown as W1's long, name's W1 texts apart.
REMADE_COLUMNS = (("id", "int"), ("name", "int"), ("amount", "decimal(14,2)"), ("qty", "bigint"))
REMADE_IMAGES = ({"name": 7, "amount": Decimal("1.50"), "qty": 5_000_000_000}, {"name": None, "amount": Decimal("-3.25"), "qty": 1},
                 {"name": -1, "amount": None, "qty": None})


@dataclass
class Shape:
    """A table that is not one of the plain ones: its key (() for none), the key values its rows
    take, and the images (every other column) they take. A key-less table's rows are keyed by a
    row number of the test's own: MySQL identifies them by nothing but their values."""

    key: tuple[str, ...]
    keys: list[Any]
    images: list[dict[str, Any]]


class Upstream(Workload):
    """A database whose tables come and go; ``events`` holds its whole history so far."""

    def __init__(self, seed: int, tables: tuple[str, ...] = ("t0", "t.1"), key_space: int = 12, skew_ms: int = 0,
                 partitioned: bool = False, keyless: bool = False, typed: TypedTables | None = None, remade: bool = False) -> None:
        super().__init__(WorkloadSpec(database="shop", tables=len(tables), seed=seed, key_space=key_space,
                                      alter=False, table_names=list(tables)))
        # The shaped tables' own draws: a seed's plain history stays as it was without them.
        self.shape_rng = random.Random(seed + 3)
        self.shapes: dict[str, Shape] = {}
        self._row_numbers = 0
        self.remade = remade  # a dropped plain table's name may come back of REMADE_COLUMNS (``create``)
        if keyless:
            self._shape("bag", (("x", "int"), ("s", "varchar(8)")), Shape((), [], [dict(i) for i in BAG_IMAGES]))
        if typed is not None:
            key_type = next(str(t) for name, t in COLUMN_TYPES.items() if name == typed.key)
            self._shape("typed", ((typed.key, key_type), *VALUE_COLUMNS), Shape((typed.key,), list(typed.keys), typed.images))
            if keyless:
                self._shape("typed_bag", VALUE_COLUMNS, Shape((), [], typed.images))
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

    def _shape(self, table: str, columns: tuple[tuple[str, str], ...], shape: Shape) -> None:
        self.shapes[table] = shape
        self.schemas[table] = TableSchema(self.spec.database, table, tuple(
            Column(name, parse_mysql_type(t), name not in shape.key) for name, t in columns), shape.key)
        self.rows[table] = {}

    def _plain(self) -> list[str]:
        """The tables of ``table_schema``'s shape (the ones the base workload writes), sorted."""
        return sorted(t for t in self.schemas if t not in self.shapes)

    def _create(self, table: str, schema) -> None:  # noqa: ANN001
        sql = create_sql(schema)
        self.partitions.pop(table, None)
        if self.partitioned and table not in self.shapes:
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
                t = self.rng.choice(sorted(self.schemas))
                transaction = self._shaped_transaction(t) if t in self.shapes else [self.change(t)]
                if not transaction:
                    continue
                skew = self.rng.randint(0, self.skew_ms) if self.skew_ms else 0
                for change in transaction:
                    if self.skew_ms:
                        # A statement starts after the DDL before it completed (MySQL's metadata lock):
                        # its time may go back, but never before the last DDL's.
                        change = change._replace(event_time_ms=max(change.event_time_ms - skew, self._last_ddl_ms + 1))
                    self.history.append(change._replace(binlog=self._binlog()))

    def _shaped_transaction(self, t: str) -> list[RowChange]:
        """One transaction on a shaped table: its changes, one commitTs. Each changes a different
        row, as a TiDB transaction commits one final mutation per row."""
        shape, schema, rows, r = self.shapes[t], self.schemas[t], self.rows[t], self.shape_rng
        ts = self._next_ts()
        out: list[RowChange] = []

        def change(op: Op, before: dict | None, after: dict | None) -> None:
            out.append(RowChange(op, schema.database, t, before, after, shape.key, schema.column_types, ts, self._pos(),
                                 self._clock))

        def image() -> dict[str, Any]:
            row = {c.name: None for c in schema.columns if c.name not in shape.key}
            row.update(r.choice(shape.images))
            if "note" in row:
                row["note"] = r.choice([None, "n/a", "é🦆"])
            return {c.name: row[c.name] for c in schema.columns if c.name in row}

        def full(row: dict) -> dict[str, Any]:  # a stored row read back: a column it never had is NULL
            return {c.name: row.get(c.name) for c in schema.columns}

        if shape.key:  # one row by its key: inserted, updated (maybe onto a free key) or deleted
            (column,) = shape.key
            free = [k for k in shape.keys if k not in rows]
            if free and (not rows or r.random() < 0.5):
                key = r.choice(free)
                rows[key] = {column: key, **image()}
                change(Op.INSERT, None, rows[key])
                return out
            key = r.choice(list(rows))
            before = full(rows[key])
            if r.random() < 0.3:
                del rows[key]
                change(Op.DELETE, before, None)
                return out
            after = {column: key, **image()}
            if free and r.random() < 0.3:
                after[column] = r.choice(free)
                del rows[key]
            if after == before:
                return out  # MySQL logs no row event for an UPDATE that changes nothing
            rows[after[column]] = after
            change(Op.UPDATE, before, after)
            return out
        # Key-less: copies of an image inserted (several in one statement), one copy deleted, one updated.
        touched: set[int] = set()
        for _ in range(r.choice([1, 1, 2, 3])):
            untouched = sorted(set(rows) - touched)
            pick = r.random()
            if untouched and pick < 0.3:
                number = r.choice(untouched)
                change(Op.DELETE, full(rows.pop(number)), None)
            elif untouched and pick < 0.55:
                number = r.choice(untouched)
                before, after = full(rows[number]), image()
                if full(after) == before:
                    continue
                rows[number] = after
                touched.add(number)
                change(Op.UPDATE, before, after)
            else:
                # Often an image some row already has: identical rows.
                same = [rows[n] for n in untouched]
                after = dict(r.choice(same)) if same and r.random() < 0.5 else image()
                for _ in range(r.choice([1, 1, 2, 3])):
                    self._row_numbers += 1
                    rows[self._row_numbers] = dict(after)
                    touched.add(self._row_numbers)
                    change(Op.INSERT, None, full(after))
        return out

    def move_and_reuse_key(self) -> None:
        """One TiDB transaction (one commitTs): a row moves from key k to a free key and a new row
        takes k (a non-clustered primary key). TiCDC dispatches each change by its key, so the two
        may reach different partitions, in either order."""
        if not self._plain():
            return
        t = self.rng.choice(self._plain())
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
            before = self.schemas[t]
            after = (replace(before, columns=before.columns + (Column(ADDED_COLUMN[0], parse_mysql_type(ADDED_COLUMN[1])),))
                     if t in self.shapes else table_schema(self.spec.database, t, with_note=True))
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
            if old in self.shapes:
                self.shapes[new] = self.shapes.pop(old)
            self._ddl(old, f"RENAME TABLE {_ident(self.spec.database, old)} TO {_ident(self.spec.database, new)}",
                      "RENAME", before, after)

    def gh_ost(self) -> None:
        """gh-ost migrates a table (adds ``note``, or rebuilds it): changelog and ghost tables, the
        ghost filled by copy and by the table's binlog rows, the atomic cut-over onto a sentry
        ``_<t>_del`` dropped just before, and the cleanup drops (github/gh-ost, go/logic/applier.go)."""
        if not self._plain():
            return
        db, t = self.spec.database, self.rng.choice(self._plain())
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
            self.shapes.pop(t, None)
            self.dropped.append(t)
            self._ddl(t, f"DROP TABLE {_ident(self.spec.database, t)}", "DROP", None, None)

    def discard(self) -> None:
        """DISCARD TABLESPACE (rows gone without row events: tidelake cannot apply it and isolates the
        table), then the DROP TABLE MySQL allows on a discarded table."""
        if len(self.schemas) > 1:
            t = self.rng.choice(sorted(self.schemas))
            self._ddl(t, f"ALTER TABLE {_ident(self.spec.database, t)} DISCARD TABLESPACE", "ALTER", None, None)
            del self.schemas[t], self.rows[t]
            self.shapes.pop(t, None)
            self.dropped.append(t)
            self._ddl(t, f"DROP TABLE {_ident(self.spec.database, t)}", "DROP", None, None)

    def create(self) -> None:
        """CREATE TABLE: a dropped table's name again, or a new one."""
        if self.dropped and self.rng.random() < 0.7:
            t = self.dropped.pop(0)
            if self.remade and self.shape_rng.random() < 0.5:  # the shapes' own draws: a seed's plain history stays
                self._shape(t, REMADE_COLUMNS, Shape(("id",), list(range(self.spec.key_space)), [dict(i) for i in REMADE_IMAGES]))
                self._create(t, self.schemas[t])
                return
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
        self.shapes.clear()
        self._ddl("", f"DROP DATABASE IF EXISTS {quote_ident(self.spec.database)}", "QUERY", None, None)
        self._ddl("", f"CREATE DATABASE {quote_ident(self.spec.database)}", "QUERY", None, None)
        self.create()


class Changefeed:
    """Deliveries of one protocol's records to the partitions of one topic.

    The whole history is encoded once (encoders batch and broadcast as upstream does); the
    test releases records in their order, so ``released[p]`` is what partition p holds, and
    ``counted[p]`` which of those the reference model takes as upstream changes.

    What the model counts follows docs/contract.md §3 and the README's known gaps. Without
    commitTs every delivered change counts (the derived clock cannot tell a re-send). With
    commitTs a re-sent record is a change again only where it continues a run the model
    counts -- it follows, with nothing between, a counted row of its own transaction (a
    message or a transaction re-sent right after itself): that stream is byte for byte the
    one of a transaction holding those rows twice, and a key-less table then holds the
    copies. A re-send starting a run of its own is not counted (a re-sent transaction
    repeats its run). So that this is all a stream can show, faults on these protocols keep
    to what TiCDC's ordered sink does, for transactions that write key-less tables: no
    message lands between two rows of one transaction's first send, a restart re-sends whole
    transactions, and a re-send never continues a run the model does not count.
    """

    def __init__(self, protocol: str, partitions: int, seed: int, options: dict[str, str] | None = None) -> None:
        self.protocol, self.partitions = protocol, partitions
        self.options = dict(options or {})  # the upstream's configuration: its encoder's and the topic's decoder's
        self.rng = random.Random(seed)
        self.records: list[ProducerRecord] = []
        self.sent = 0  # records of ``records`` released so far
        self.released: list[list[ProducerRecord]] = [[] for _ in range(partitions)]
        self.sources: list[list[int | None]] = [[] for _ in range(partitions)]  # index in ``records``; None: garbage
        self.counted: list[list[bool]] = [[] for _ in range(partitions)]
        self.lagging: int | None = None  # a partition whose watermark records are being lost
        self.by_commit_ts = PROTOCOLS[protocol].carries_commit_ts(self.options)

    def encode(self, history: list[Event]) -> None:
        self.records = get_encoder(self.protocol, **self.options).encode_all(history, self.partitions)
        self.watermarks = {i for i, r in enumerate(self.records) if _is_watermark(self.protocol, r, self.options)}
        # Per record: the commitTs of its first and last row (None without rows); and the
        # commitTs of the transactions that write a key-less table.
        self.row_ts: list[tuple[int, int] | None] = [None] * len(self.records)
        self.keyless_ts: set[int] = set()
        decoders = [get_decoder(self.protocol, **self.options) for _ in range(self.partitions)]
        for i, r in enumerate(self.records):
            try:
                events = decoders[r.partition].decode(RawMessage(r.key, r.value, SourcePosition("x", r.partition, i)))
            except DecodeError:
                continue
            changes = [e for e in events if isinstance(e, RowChange)]
            if changes and changes[0].commit_ts is not None:
                self.row_ts[i] = (changes[0].commit_ts, changes[-1].commit_ts)
                self.keyless_ts |= {e.commit_ts for e in changes if not e.key_columns}

    def _release(self, p: int, source: int | None, record: ProducerRecord, first: bool) -> None:
        self.counted[p].append(first or not self.by_commit_ts or self._continues(p, source, counted=True))
        self.released[p].append(record)
        self.sources[p].append(source)

    def _continues(self, p: int, source: int | None, counted: bool) -> bool:
        """Whether ``records[source]`` would continue partition p's current run of rows of one
        commitTs, and that run is (``counted``) or is not counted by the model."""
        if not self.released[p] or source is None or self.sources[p][-1] is None:
            return False
        last, this = self.row_ts[self.sources[p][-1]], self.row_ts[source]
        return last is not None and this is not None and last[1] == this[0] and self.counted[p][-1] == counted

    def _keyless(self, p: int, source: int | None) -> bool:
        row_ts = self.row_ts[source] if source is not None else None
        return row_ts is not None and row_ts[0] in self.keyless_ts

    def _inside_transaction(self, p: int) -> bool:
        """Whether partition p is inside the first send of a transaction that writes a key-less
        table: its last record and the next one it will get are rows of that commitTs."""
        if not self.released[p] or self.sources[p][-1] is None:
            return False
        last = self.row_ts[self.sources[p][-1]]
        following = next((j for j in range(self.sent, len(self.records)) if self.records[j].partition == p), None)
        this = self.row_ts[following] if following is not None else None
        return last is not None and this is not None and last[1] == this[0] and last[1] in self.keyless_ts

    def _resend_allowed(self, p: int, source: int | None, right_after_itself: bool = False) -> bool:
        """Whether a re-send of ``records[source]`` to partition p now keeps to what the contract
        says a key-less table then holds (the class's docstring); always, without commitTs."""
        if not self.by_commit_ts:
            return True
        if self._keyless(p, source) and self._continues(p, source, counted=False):
            return False
        return right_after_itself or not self._inside_transaction(p)

    def deliver(self, n: int) -> int:
        """Release the next ``n`` records in order; the lagging partition loses its watermarks."""
        count = 0
        while count < n and self.sent < len(self.records):
            i, r = self.sent, self.records[self.sent]
            self.sent += 1
            if r.partition == self.lagging and i in self.watermarks:
                continue
            self._release(r.partition, i, r, first=True)
            count += 1
        return count

    def replay(self, back: int) -> None:
        """A changefeed restarted from an older checkpoint: each partition gets its last ``back``
        records again (on protocols with commitTs: from the first record of the transaction they
        start in, as a restart re-sends whole transactions)."""
        for p in range(self.partitions):
            start = max(0, len(self.released[p]) - back)
            if self.by_commit_ts:
                while 0 < start < len(self.released[p]) and self._keyless(p, self.sources[p][start]) and \
                        self.sources[p][start - 1] is not None and \
                        self.row_ts[self.sources[p][start - 1]] is not None and \
                        self.row_ts[self.sources[p][start - 1]][1] == self.row_ts[self.sources[p][start]][0]:
                    start -= 1
                if start < len(self.released[p]) and not self._resend_allowed(p, self.sources[p][start]):
                    continue
            for k in range(start, len(self.released[p])):
                self._release(p, self.sources[p][k], self.released[p][k], first=False)

    def resend(self, p: int, source: int) -> None:
        """``records[source]`` sent to partition p again, now (a scripted fault)."""
        self._release(p, source, self.records[source], first=False)

    def duplicate(self) -> None:
        """One earlier record sent again, later (at-least-once delivery)."""
        p = self.rng.randrange(self.partitions)
        if self.released[p]:
            k = self.rng.randrange(len(self.released[p]))
            source = self.sources[p][k]
            if self._resend_allowed(p, source, right_after_itself=k == len(self.released[p]) - 1 and source is not None):
                self._release(p, source, self.released[p][k], first=False)

    def bad_message(self) -> None:
        p = self.rng.randrange(self.partitions)
        if not self.by_commit_ts or not self._inside_transaction(p):
            self._release(p, None, ProducerRecord(p, b"k", GARBAGE), first=True)


def _is_watermark(protocol: str, record: ProducerRecord, options: dict[str, str]) -> bool:
    decoded = get_decoder(protocol, **options).decode(RawMessage(record.key, record.value, SourcePosition("x", 0, 0)))
    return bool(decoded) and all(isinstance(e, Watermark) for e in decoded)
