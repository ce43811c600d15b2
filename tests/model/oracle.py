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
- ``DROP DATABASE d`` drops every table of d (MySQL 8 manual, DROP DATABASE); ``CREATE
  DATABASE`` changes no table;
- ``ALTER TABLE t TRUNCATE / DROP PARTITION p`` deletes the rows that live in p (no row events
  come for them); ``EXCHANGE PARTITION p WITH TABLE nt`` moves p's rows to nt and nt's rows into
  t (26.3.3). A row lives in the partition its value selects (MySQL 8 manual, 26.2): RANGE, the
  first partition whose ``LESS THAN`` bound is above the value (NULL: the first partition, 26.2.7);
  LIST, the partition that lists the value (NULL only where listed); HASH over num partitions,
  MOD(value, num) (26.2.4; of a negative value the remainder's magnitude, as the server computes
  it, since MOD's result there is negative), NULL as 0 (26.2.7); LINEAR HASH, the manual's
  powers-of-two rule (26.2.4.1) -- on MySQL; a TiDB upstream ignores LINEAR (TiDB's manual,
  "Linear Hash partitioning"): ``Oracle(server="tidb")``. ``PARTITIONS n`` names them p0 ...;
  ``ADD PARTITION PARTITIONS n`` adds p<num> ..., ``COALESCE PARTITION n`` removes the last n,
  ``REORGANIZE PARTITION a INTO (...)`` replaces a in place, ``REMOVE PARTITIONING`` and
  ``ALTER TABLE ... PARTITION BY`` set it, rows staying (26.3.1, 26.3.2); TiDB's LIST ``DEFAULT``
  partition holds the values no other lists. Followed for ``PARTITION BY RANGE | LIST [COLUMNS]
  (`column`)``, ``RANGE | LIST | [LINEAR] HASH (YEAR(`column`))``, ``[LINEAR] HASH (`column`)`` with
  integer bounds; ``[LINEAR] KEY`` is kept (its ADD, COALESCE and TRUNCATE PARTITION ALL apply) but
  which rows one of its partitions holds is MySQL's internal hash, which the model does not compute:
  it raises there, as for a partitioning it does not read (never misreading it). What MySQL refuses,
  the model refuses (``Refused``, the manual's error named): DROP PARTITION of HASH / KEY,
  COALESCE of RANGE / LIST or of every partition, dropping every partition, RANGE bounds not
  increasing, a LIST value listed twice, REORGANIZE of RANGE partitions not adjacent or not covering
  their range (the last one's may grow), of HASH / KEY into another number, an unknown partition,
  a row no partition holds (INSERT, UPDATE, ``PARTITION BY`` over the rows, REORGANIZE), and
  EXCHANGE WITH VALIDATION of such a row; WITHOUT VALIDATION the row would live in p against its
  definition, which the model does not follow;
- an update that changes the key deletes the old key and writes the new one;
- a table without a primary key is a multiset of rows (MySQL allows identical rows in it): a
  row event changes one row, so an INSERT adds one copy of its image, a DELETE removes one
  copy of its before-image, an UPDATE does both. The model counts every change it is given:
  feed it each upstream change once (a changefeed's re-sends are delivery, not history) --
  except ``BinlogOracle``, which is fed what was delivered (see there).
- ``ALTER TABLE ... ADD COLUMN`` gives every row the table holds the column's default, as MySQL 8
  does (manual, 13.6 "Data Type Default Values"): the DEFAULT literal; without one NULL, or for a
  NOT NULL column the type's implicit default (0, '', the first ENUM member, the zero date, which
  reads as NULL); ``DEFAULT CURRENT_TIMESTAMP`` is the statement's time (the commitTs's physical
  part, or the binlog event time without one). Read from the statement with sqlglot alone.
- table DDL as the MySQL 8 manual defines it (15.1.36 RENAME TABLE, 15.1.32 DROP TABLE):
  ``RENAME TABLE a TO b, c TO d`` renames left to right, each pair seeing the ones before it
  (so ``a TO tmp, b TO a, tmp TO b`` swaps), and takes effect as one statement;
  ``ALTER TABLE a ... RENAME TO b`` renames after its other changes (15.1.9);
  ``DROP TABLE [IF EXISTS] a, b`` drops every table named; comments are not SQL.
- a row a table could not hold is kept with the W that applies it (``unfit``): a write naming a column the
  table does not have by its DDL (CREATE TABLE's columns, ADD and DROP COLUMN; a table whose
  columns the model cannot follow is not judged), or lacking one it has (a binlog row image holds
  every column), or into a name no table has (dropped or renamed away). MySQL never writes one; a
  changefeed without commitTs delivers one when it re-sends a change after its table's DDL (every
  delivered change counts there). What a table then holds is not MySQL's to say: the table may be
  held from there (docs/contract.md §6).
- every removal of a keyed row from a table name is kept with its commitTs (``removals``): a
  DELETE's, or the DDL's that took it without row events -- TRUNCATE, DROP, DROP DATABASE, a
  rename away, a partition's TRUNCATE / DROP / EXCHANGE (the rows that partition held then). A
  row the table held at W1 and not at W2 was removed by the last of them in the window
  (``removed_at``): what the change feed's ``delete`` of it must carry as ``_commit_ts``.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, Iterable, NamedTuple

import sqlglot
from sqlglot import exp

from cdc_codecs.events import DdlChange, Event, Op, RowChange, SchemaSnapshot, TableSchema, Watermark
from cdc_codecs.types import ColumnType, TypeKind, from_text, parse_mysql_type

TableName = tuple[str, str]
Key = tuple[Any, ...]

# Table-level DDL in the one form the test histories write it (`db`.`table`, backticks doubled).
_NAME = r"`((?:[^`]|``)*)`\.`((?:[^`]|``)*)`"
_PARTITION_BY = re.compile(r"PARTITION BY (LINEAR )?(RANGE|LIST|HASH|KEY)( COLUMNS)? ?\(((?:[^()]|\([^()]*\))*)\)"
                           r"(?: PARTITIONS (\d+))?(?: ?\((.*)\))?\s*$", re.IGNORECASE | re.DOTALL)
_PARTITION = re.compile(r"PARTITION\s+`?(\w+)`?(?:\s+VALUES\s+(?:LESS\s+THAN\s*(?:\(([^)]*)\)|(MAXVALUE))"
                        r"|IN\s*\(((?:[^()]|\([^()]*\))*)\))|\s+(DEFAULT))?", re.IGNORECASE)
_DEFAULT = "DEFAULT"  # TiDB's LIST partition ``DEFAULT`` / ``VALUES IN (DEFAULT)``: the values no other lists
_PARTITION_DDL = re.compile(rf"^ALTER TABLE {_NAME} ((?:TRUNCATE|DROP|ADD|COALESCE|REORGANIZE|EXCHANGE) PARTITION .*"
                            r"|REMOVE PARTITIONING|PARTITION BY .*)$", re.IGNORECASE | re.DOTALL)
_EXCHANGE = re.compile(rf"EXCHANGE PARTITION `?(\w+)`? WITH TABLE {_NAME}(?: WITH(?:OUT)? VALIDATION)?$", re.IGNORECASE)
_DROP_DATABASE = re.compile(r"^DROP (?:DATABASE|SCHEMA) (?:IF EXISTS )?(?:`((?:[^`]|``)*)`|(\w+))$", re.IGNORECASE)
# MySQL 8 (ALTER TABLE, "DISCARD TABLESPACE"): deletes the table's .ibd file, its rows with it,
# and sends no row events.
_DISCARD = re.compile(rf"^ALTER TABLE {_NAME} DISCARD TABLESPACE$", re.IGNORECASE)
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


def _like_source(sql: str, default_db: str) -> TableName | None:
    """The source of ``CREATE TABLE x LIKE source`` (MySQL 8 manual, 15.1.20.3), or None."""
    tokens = _tokens(sql)
    at = next((i for i, t in enumerate(tokens) if _is(t, "LIKE")), None)
    names = _table_names(tokens[at + 1:], default_db) if at is not None else []
    return names[0] if names else None


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


class Refused(ValueError):
    """A statement or row MySQL 8 refuses (the manual's error named): no upstream sends it, so a
    history holding it is wrong, not the model."""


def _integer(text: str, what: str) -> int:
    text = text.strip()
    if not re.fullmatch(r"[-+]?\d+", text):
        raise ValueError(f"the model follows partitions by one integer column, not {what} {text!r}")
    return int(text)


def _partitions(text: str) -> list[tuple[str, Any]]:
    """``PARTITION p VALUES LESS THAN (n) | MAXVALUE`` -> (p, n or None); ``VALUES IN (a, NULL)`` -> (p, {a, None});
    TiDB's ``DEFAULT`` -> (p, _DEFAULT); a HASH / KEY partition ``PARTITION p`` -> (p, None). Bounds of
    several columns or of other types raise: the model does not follow them (never reads them wrong)."""
    out: list[tuple[str, Any]] = []
    for name, bound, maxvalue, listed, default in _PARTITION.findall(text):
        if default or (listed and listed.strip().upper() == "DEFAULT"):
            out.append((name, _DEFAULT))
        elif listed:
            if "(" in listed:
                raise ValueError(f"the model follows partitions by one integer column, not the list {listed!r}")
            out.append((name, frozenset(None if v.strip().upper() == "NULL" else _integer(v, "the value") for v in listed.split(","))))
        elif maxvalue or bound.strip().upper() == "MAXVALUE":
            out.append((name, None))
        elif bound:
            if bound.strip().upper() == "NULL":
                raise Refused(f"VALUES LESS THAN (NULL) in {text!r} (ER_NULL_IN_VALUES_LESS_THAN)")
            out.append((name, _integer(bound, "the bound")))
        else:
            out.append((name, _NO_VALUES))
    return out


_NO_VALUES = "no values"  # ``PARTITION p`` without VALUES: HASH's and KEY's (None once checked)


@dataclass
class _Partitioning:
    """A table's ``PARTITION BY``: kind RANGE | LIST | HASH | KEY, the column (of ``function``),
    the partitions; ``column`` None where the expression is one the model does not compute (KEY's
    internal hash, other expressions): which rows such a partition holds, it cannot say."""

    kind: str
    linear: bool
    column: str | None
    function: str | None
    partitions: list[tuple[str, Any]]

    @staticmethod
    def parse(sql: str) -> _Partitioning | None:
        m = _PARTITION_BY.search(sql)
        if m is None:
            if re.search(r"\bPARTITION\s+BY\b", sql, re.IGNORECASE):
                raise ValueError(f"the model does not read the partitioning of {sql!r}")
            return None
        linear, kind, columns, expression, count, defs = m.groups()
        kind = kind.upper()
        if (linear and kind not in ("HASH", "KEY")) or (columns and kind not in ("RANGE", "LIST")):
            raise Refused(f"{m.group(0)!r} is not MySQL syntax: LINEAR goes with HASH and KEY, COLUMNS with RANGE and LIST")
        column = re.fullmatch(r"\s*`?(\w+)`?\s*", expression)
        year = re.fullmatch(r"\s*YEAR\s*\(\s*`?(\w+)`?\s*\)\s*", expression, re.IGNORECASE)
        if columns and not column:
            raise ValueError(f"the model follows {kind} COLUMNS of one column, not ({expression})")
        if kind in ("RANGE", "LIST") and not defs:
            raise Refused(f"{sql!r}: {kind} partitioning must define its partitions (ER_PARTITIONS_MUST_BE_DEFINED_ERROR)")
        parts = _partitions(defs) if defs else [(f"p{i}", None) for i in range(int(count or 1))]  # PARTITIONS 1 by default
        by = _Partitioning(kind, bool(linear), None if kind == "KEY" else (column or year).group(1) if column or year else None,
                           "YEAR" if year and not column and kind != "KEY" else None, parts)
        by.check(sql, ())
        return by

    def copy(self) -> _Partitioning:
        return _Partitioning(self.kind, self.linear, self.column, self.function, list(self.partitions))

    def names(self) -> list[str]:
        return [p.lower() for p, _ in self.partitions]

    def named(self, sql: str, text: str) -> list[str]:
        """The partitions ``text`` names (``a, `b```), lower-cased; every one must exist (ER_UNKNOWN_PARTITION)."""
        names = [n.strip().strip("`").lower() for n in text.split(",")]
        missing = [n for n in names if n not in self.names()]
        if missing:
            raise Refused(f"{sql!r}: the table has no partition {', '.join(missing)} (ER_UNKNOWN_PARTITION)")
        return names

    def check(self, sql: str, rows: Iterable[dict[str, Any]]) -> None:
        """What MySQL requires of a definition (26.2, 26.3) and of the rows it holds: raises ``Refused``."""
        names = self.names()
        if not names:
            raise Refused(f"{sql!r} leaves no partition (ER_DROP_LAST_PARTITION: use DROP TABLE)")
        if len(set(names)) != len(names):
            raise Refused(f"{sql!r}: two partitions of one name (ER_SAME_NAME_PARTITION)")
        bounds = [b for _, b in self.partitions]
        if self.kind in ("HASH", "KEY"):
            if any(b not in (None, _NO_VALUES) for b in bounds):
                raise Refused(f"{sql!r}: a {self.kind} partition with VALUES (ER_PARTITION_WRONG_VALUES_ERROR)")
            self.partitions[:] = [(p, None) for p, _ in self.partitions]
            return
        if _NO_VALUES in bounds:
            raise Refused(f"{sql!r}: a {self.kind} partition without VALUES (ER_PARTITION_REQUIRES_VALUES_ERROR)")
        if self.kind == "RANGE":
            if any(isinstance(b, (frozenset, str)) for b in bounds):
                raise Refused(f"{sql!r}: RANGE partitions are VALUES LESS THAN (ER_PARTITION_WRONG_VALUES_ERROR)")
            for a, b in zip(bounds, bounds[1:]):
                if a is None or (b is not None and b <= a):
                    raise Refused(f"{sql!r}: VALUES LESS THAN must be strictly increasing, MAXVALUE last "
                                  "(ER_RANGE_NOT_INCREASING_ERROR)")
        else:
            if any(not isinstance(b, frozenset) and b != _DEFAULT for b in bounds) or bounds.count(_DEFAULT) > 1:
                raise Refused(f"{sql!r}: LIST partitions are VALUES IN (ER_PARTITION_WRONG_VALUES_ERROR)")
            listed = [v for b in bounds if isinstance(b, frozenset) for v in b]
            if len(set(listed)) != len(listed):
                raise Refused(f"{sql!r}: a value listed twice (ER_MULTIPLE_DEF_CONST_IN_LIST_PART_ERROR)")
        for row in rows:
            if self.partition_of(row, "mysql") is None:
                raise Refused(f"{sql!r}: no partition holds the row {row} (ER_NO_PARTITION_FOR_GIVEN_VALUE)")

    def computed(self, sql: str) -> None:
        """Raises where the model cannot tell which partition holds a row."""
        if self.column is None:
            raise ValueError(f"{sql!r}: which rows a partition holds is decided by "
                             f"{'the server internal hash (KEY)' if self.kind == 'KEY' else 'an expression'}, which the model does not compute")

    def partition_of(self, row: dict[str, Any], server: str) -> str | None:
        """The partition (lower-cased name) a row lives in (MySQL 8 manual, 26.2); None: none
        (RANGE above every bound without MAXVALUE, LIST not listed: MySQL refuses the row)."""
        self.computed("")
        value = row.get(self.column)  # type: ignore[arg-type]
        if value is not None and self.function == "YEAR":
            value = value.year
        if self.kind == "HASH":
            num = len(self.partitions)
            v = 0 if value is None else int(value)  # NULL is 0 (26.2.7)
            if self.linear and server == "mysql":  # 26.2.4.1
                big = 1
                while big < num:
                    big *= 2  # V = POWER(2, CEILING(LOG(2, num)))
                n = v & (big - 1)
                while n >= num:
                    big //= 2
                    n = n & (big - 1)
            else:
                n = abs(v) - num * (abs(v) // num)  # MOD(v, num), its magnitude
            return self.partitions[n][0].lower()
        for partition, bound in self.partitions:
            if self.kind == "RANGE" and (value is None or bound is None or value < bound):
                return partition.lower()
            if self.kind == "LIST" and bound != _DEFAULT and value in bound:
                return partition.lower()
        if self.kind == "LIST":
            return next((p.lower() for p, b in self.partitions if b == _DEFAULT), None)
        return None

    def reorganize(self, sql: str, names: list[str], into: list[tuple[str, Any]]) -> None:
        """``REORGANIZE PARTITION names INTO (...)`` (26.3.1, 26.3.2): RANGE partitions adjacent
        (ER_CONSECUTIVE_REORG_PARTITIONS), their range the same but for the last partition's, which
        may grow (ER_REORG_OUTSIDE_RANGE); HASH and KEY as many as before (ER_REORG_HASH_ONLY_ON_SAME_N)."""
        at = sorted(self.names().index(n) for n in names)
        if self.kind == "RANGE":
            if at != list(range(at[0], at[0] + len(at))):
                raise Refused(f"{sql!r}: the partitions reorganized are not adjacent (ER_CONSECUTIVE_REORG_PARTITIONS)")
            old, new = self.partitions[at[-1]][1], into[-1][1] if into else None
            last = at[-1] == len(self.partitions) - 1
            if not (old == new or (last and old is not None and (new is None or (isinstance(new, int) and new > old)))):
                raise Refused(f"{sql!r}: the new partitions end at {new}, the old ones at {old} (ER_REORG_OUTSIDE_RANGE)")
        if self.kind in ("HASH", "KEY") and len(into) != len(names):
            raise Refused(f"{sql!r}: {len(names)} {self.kind} partitions into {len(into)} (ER_REORG_HASH_ONLY_ON_SAME_N)")
        kept = [p for p in self.partitions if p[0].lower() not in names]
        self.partitions[:] = kept[:at[0]] + into + kept[at[0]:]


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
    # The tables' PARTITION BY, as CREATE TABLE or ALTER TABLE set it
    partitioning: dict[TableName, _Partitioning] = field(default_factory=dict)
    server: str = "mysql"  # the server upstream: "tidb" ignores LINEAR (see the module's docstring)
    watermark: int = 0
    timezone: dt.tzinfo = dt.timezone.utc  # upstream's time zone: what DATETIME DEFAULT CURRENT_TIMESTAMP reads in
    _pending: list[RowChange | DdlChange] = field(default_factory=list)
    _partition_marks: dict[tuple[str, int], int] = field(default_factory=dict)
    # Every removal of a keyed row from a table name, in the order applied: (commitTs, name, key) --
    # a row event's (a DELETE, an UPDATE's before image), or a DDL's that took rows without row
    # events (TRUNCATE, DROP, DROP DATABASE, a rename away, a partition's TRUNCATE / DROP / EXCHANGE).
    removals: list[tuple[int, TableName, Key]] = field(default_factory=list)
    _ts: int | None = None  # the commitTs of the DDL being applied
    # Each table name's columns by its DDL: None where the model cannot follow them, empty where no
    # table has the name (dropped, renamed away); a name without DDL (made from rows) has none.
    columns: dict[TableName, frozenset[str] | None] = field(default_factory=dict)
    unfit: list[tuple[int, TableName]] = field(default_factory=list)  # (the W applying it, name): see the module
    _unfit: list[TableName] = field(default_factory=list)  # of the cut being applied

    def removed_at(self, name: TableName, key: Key, w1: int, w2: int) -> int | None:
        """The commitTs of the last removal of ``key`` from ``name`` in (w1, w2]: what removed a row
        the table held at w1 and not at w2 (the change feed's ``_commit_ts`` of its ``delete``)."""
        return max((ts for ts, n, k in self.removals if n == name and k == key and w1 < ts <= w2), default=None)

    def _took(self, ts: int | None, name: TableName, keys: Iterable[Key]) -> None:
        self.removals.extend((ts or 0, name, k) for k in keys if not isinstance(k, _Copy))

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
        self._cut_unfit(w)
        return w

    def _cut_unfit(self, w: int) -> None:
        self.unfit.extend((w, name) for name in self._unfit)
        self._unfit.clear()

    def _apply_transaction(self, rows: list[RowChange]) -> None:
        """One commitTs's rows: every before-image removed, then every after-image written."""
        for e in rows:
            self._remove(e)
        for e in rows:
            self._write(e)

    def _apply_ddl(self, e: DdlChange) -> None:
        sql = e.sql.strip()
        self._ts = e.commit_ts
        partition_ddl = _PARTITION_DDL.match(sql)
        if partition_ddl:
            self._partition_ddl(_name(*partition_ddl.group(1, 2)), partition_ddl.group(3))
            return
        drop_database = _DROP_DATABASE.match(sql)
        if drop_database:
            database = drop_database.group(2) or _name(drop_database.group(1) or "", "")[0]
            for name in self.tables:
                if name[0] == database:
                    self._took(e.commit_ts, name, self.tables[name])
                    self.tables[name] = {}
            for name in [n for n in {*self.columns, *self.tables} if n[0] == database]:
                self.columns[name] = frozenset()
            return
        discard = _DISCARD.match(sql)
        if discard:
            self._took(e.commit_ts, _name(*discard.group(1, 2)), self.tables.get(_name(*discard.group(1, 2)), {}))
            self.tables[_name(*discard.group(1, 2))] = {}
            return
        statement = _table_statement(e.sql, e.database)
        verb, names = statement if statement is not None else ("", [])
        if verb == "RENAME":
            for old, new in zip(names[::2], names[1::2]):  # left to right: each pair sees the ones before
                self._rename(old, new)
            return
        if verb in ("DROP", "TRUNCATE"):
            for name in names:
                self._took(e.commit_ts, name, self.tables.get(name, {}))
                self.tables[name] = {}
                if verb == "DROP":
                    self.columns[name] = frozenset()
            return
        name = names[0] if verb == "CREATE" else (e.database, e.table)
        if verb == "CREATE":  # a new, empty table (a dropped one's rows are long gone)
            self.tables[name] = {}
            self.partitioning.pop(name, None)
            partition_by = _Partitioning.parse(sql)
            source = _like_source(sql, e.database)
            if partition_by:
                self.partitioning[name] = partition_by
            elif source in self.partitioning:  # CREATE TABLE ... LIKE copies the definition, partitioning too
                self.partitioning[name] = self.partitioning[source].copy()
        had = {c for row in self.tables.get(name, {}).values() for c in row}
        self._follow_columns(verb, name, e)
        if e.schema_after is not None:
            self.schemas[name] = e.schema_after
            table = self.tables.setdefault(name, {})
            for row in table.values():
                for c in e.schema_after.columns:
                    row.setdefault(c.name, None)
                for gone in [c for c in row if e.schema_after.column(c) is None]:
                    del row[gone]
        for column, value in self._added_columns(e, name, had):
            for row in self.tables.get(name, {}).values():
                row[column] = value
        table = self.tables.get(name)
        if table:  # a key-less row's key is all its columns: it follows them (or the primary key added)
            keys = e.schema_after.key_columns if e.schema_after is not None else ()
            for row in [table.pop(k) for k in list(table) if isinstance(k, _Copy)]:
                self._put(table, keys, row)
        if verb == "ALTER" and len(names) == 2:  # renamed after its other changes
            self._rename(*names)

    def _follow_columns(self, verb: str, name: TableName, e: DdlChange) -> None:
        """``columns`` of ``name`` after a CREATE or ALTER TABLE (see the module's docstring)."""
        if e.schema_after is not None:
            self.columns[name] = frozenset(c.name for c in e.schema_after.columns)
            return
        try:
            statement = sqlglot.parse_one(_without_partitioning(e.sql), read="mysql")
        except sqlglot.errors.SqlglotError:
            statement = None
        if verb == "CREATE":
            if isinstance(statement, exp.Create) and statement.args.get("exists") and self.columns.get(name):
                return  # CREATE TABLE IF NOT EXISTS of a table the name has: MySQL leaves it as it is (15.1.20)
            source = _like_source(e.sql, e.database)
            schema = statement.this if isinstance(statement, exp.Create) else None
            if source is not None:
                self.columns[name] = self.columns.get(source)
            elif isinstance(schema, exp.Schema) and all(isinstance(d, (exp.ColumnDef, exp.Constraint, exp.PrimaryKey))
                                                        for d in schema.expressions):
                self.columns[name] = frozenset(d.name for d in schema.expressions if isinstance(d, exp.ColumnDef))
            else:
                self.columns[name] = None
        elif verb == "ALTER":
            known = self.columns.get(name)
            for action in (statement.args.get("actions") or []) if isinstance(statement, exp.Alter) else [None]:
                if known is None:
                    break
                if isinstance(action, exp.ColumnDef):
                    known = known | {action.name}
                elif isinstance(action, exp.Drop) and (action.args.get("kind") or "").upper() == "COLUMN":
                    # sqlglot keeps the dropped columns in ``tables`` (a Drop's own name is ''); MySQL's
                    # column names ignore case (manual, 11.2.3).
                    gone = {c.name.casefold() for c in action.args.get("tables") or []}
                    known = frozenset(c for c in known if c.casefold() not in gone)
                elif not isinstance(action, exp.AlterRename):
                    known = None
            if name in self.columns or known is not None:
                self.columns[name] = known

    def _rename(self, old: TableName, new: TableName) -> None:
        self._took(self._ts, old, self.tables.get(old, {}))
        if old in self.columns:
            self.columns[new] = self.columns[old]
        else:
            self.columns.pop(new, None)
        self.columns[old] = frozenset()
        self.tables[new] = self.tables.pop(old, {})
        if old in self.schemas:
            self.schemas[new] = self.schemas.pop(old)
        if old in self.partitioning:
            self.partitioning[new] = self.partitioning.pop(old)

    def _statement_ms(self, e: DdlChange) -> int:
        return e.commit_ts >> 18  # type: ignore[operator]

    def _added_columns(self, e: DdlChange, name: TableName, had: set[str]) -> list[tuple[str, Any]]:
        """(column, value every existing row gets) for each column ``ALTER TABLE ... ADD`` adds."""
        try:
            statement = sqlglot.parse_one(e.sql, read="mysql")
        except sqlglot.errors.SqlglotError:
            return []
        if not isinstance(statement, exp.Alter):
            return []
        out = []
        for action in statement.args.get("actions") or []:
            if not isinstance(action, exp.ColumnDef):
                continue
            if action.args.get("exists") and action.name in had:
                continue  # ADD COLUMN IF NOT EXISTS of a column the table has: its rows keep their values
            carried = self.schemas.get(name).column(action.name) if name in self.schemas else None
            ct = carried.type if carried is not None else parse_mysql_type(action.args["kind"].sql(dialect="mysql"))
            out.append((action.name, self._default_value(action, ct, e)))
        return out

    def _default_value(self, coldef: exp.ColumnDef, ct: ColumnType, e: DdlChange) -> Any:
        kinds = {type(c.kind): c.kind for c in coldef.constraints}
        if exp.AutoIncrementColumnConstraint in kinds or exp.ComputedColumnConstraint in kinds:
            raise ValueError(f"{e.sql!r}: the model cannot know the values MySQL computes for the existing rows")
        default = kinds.get(exp.DefaultColumnConstraint)
        if default is None:
            not_null = exp.NotNullColumnConstraint in kinds or exp.PrimaryKeyColumnConstraint in kinds
            return _implicit_default(ct) if not_null else None
        value = default.this
        while isinstance(value, exp.Paren):
            value = value.this
        if isinstance(value, exp.Null):
            return None
        if isinstance(value, (exp.CurrentTimestamp, exp.Localtimestamp, exp.Localtime)) or (
                isinstance(value, exp.Anonymous) and value.name.upper() == "NOW"):
            at = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(milliseconds=self._statement_ms(e))
            digits = value.this if not isinstance(value, exp.Anonymous) else (value.expressions or [None])[0]
            cut = 10 ** (6 - int(digits.this)) if isinstance(digits, exp.Literal) else 1_000_000
            at = at.replace(microsecond=at.microsecond - at.microsecond % cut)
            return at if ct.kind is TypeKind.TIMESTAMPTZ else at.astimezone(self.timezone).replace(tzinfo=None)
        text = {exp.Boolean: lambda v: "1" if v.this else "0", exp.Neg: lambda v: "-" + v.this.this}.get(type(value), lambda v: v.this)(value)
        if not isinstance(value, (exp.Literal, exp.Boolean, exp.Neg)):
            raise ValueError(f"{e.sql!r}: the model cannot evaluate the default {value.sql(dialect='mysql')}")
        if ct.kind is TypeKind.YEAR:  # "The YEAR Type": 1-69 -> 2001-2069, 70-99 -> 1970-1999; as strings '0'-'69' -> 2000-2069
            year = int(Decimal(text).to_integral_value(ROUND_HALF_UP))
            short = len(text) <= 2 if isinstance(value, exp.Literal) and value.is_string else 1 <= year <= 99
            return year + (2000 if year < 70 else 1900) if short and 0 <= year <= 99 else year
        if ct.kind in (TypeKind.INT, TypeKind.LONG, TypeKind.UNSIGNED_LONG):
            return int(Decimal(text).to_integral_value(ROUND_HALF_UP))
        if ct.kind is TypeKind.DECIMAL:
            return Decimal(text).quantize(Decimal(1).scaleb(-(ct.scale or 0)), ROUND_HALF_UP)
        if ct.kind is TypeKind.ENUM:
            return text
        if ct.kind is TypeKind.BINARY:  # a BINARY(n) is right-padded with 0x00 to n ("The BINARY and VARBINARY Types")
            return text.encode("utf-8").ljust(ct.length or 0 if ct.mysql_type == "binary" else 0, b"\0")
        if ct.mysql_type == "char":  # trailing spaces are removed when a CHAR is read ("The CHAR and VARCHAR Types")
            text = text.rstrip(" ")
        return from_text(ct, text, self.timezone)

    def _partition_ddl(self, name: TableName, clause: str) -> None:
        """One partitioning clause of ``ALTER TABLE name`` (MySQL 8 manual, 26.3); one MySQL refuses raises ``Refused``."""
        words = clause.split(None, 2)
        verb, rest = words[0].upper(), words[2] if len(words) > 2 else ""
        table = self.tables.setdefault(name, {})
        if clause.upper().startswith("PARTITION BY"):
            by = _Partitioning.parse(clause)
            assert by is not None, clause
            if by.column is not None:
                by.check(clause, table.values())  # every row must have a partition (26.3.1)
            self.partitioning[name] = by
            return
        if verb == "REMOVE":
            self.partitioning.pop(name, None)
            return
        if name not in self.partitioning:
            raise ValueError(f"{clause!r}: the history never partitioned {name[0]}.{name[1]} "
                             "(ER_PARTITION_MGMT_ON_NONPARTITIONED, or partitioned before the history began)")
        by = self.partitioning[name]
        hashed = by.kind in ("HASH", "KEY")
        if verb == "EXCHANGE":
            m = _EXCHANGE.match(clause)
            assert m, clause
            p, other = by.named(clause, m.group(1))[0], _name(*m.group(2, 3))
            if other in self.partitioning:
                raise Refused(f"{clause!r}: {other[1]} is partitioned (ER_PARTITION_EXCHANGE_PART_TABLE)")
            by.computed(clause)
            incoming = self.tables.get(other, {})
            outside = [row for row in incoming.values() if by.partition_of(row, self.server) != p]
            if outside and not clause.upper().endswith("WITHOUT VALIDATION"):
                raise Refused(f"{clause!r}: {other[1]} has rows p does not hold, e.g. {outside[0]} "
                              "(ER_ROW_DOES_NOT_MATCH_PARTITION)")
            if outside:  # they would live in p against its definition: a later statement on p is another matter
                raise ValueError(f"{clause!r}: the model does not follow rows WITHOUT VALIDATION puts into a partition "
                                 "whose definition does not hold them")
            moving = {k: row for k, row in table.items() if by.partition_of(row, self.server) == p}
            self._took(self._ts, name, moving)
            self._took(self._ts, other, incoming)
            for k in moving:
                del table[k]
            table.update(incoming)
            self.tables[other] = moving
            return
        if verb == "ADD" and rest.upper().startswith("PARTITIONS"):
            if not hashed:
                raise Refused(f"{clause!r}: ADD PARTITION PARTITIONS n is for HASH and KEY (ER_PARTITIONS_MUST_BE_DEFINED_ERROR)")
            have = len(by.partitions)
            by.partitions += [(f"p{have + i}", None) for i in range(int(rest.split()[1]))]
        elif verb == "ADD":
            by.partitions.extend(_partitions(rest))
        elif verb == "COALESCE":
            if not hashed:
                raise Refused(f"{clause!r}: COALESCE PARTITION is for HASH and KEY (ER_COALESCE_ONLY_ON_HASH_PARTITION)")
            if not 0 < int(rest) < len(by.partitions):
                raise Refused(f"{clause!r}: {len(by.partitions)} partitions (ER_DROP_LAST_PARTITION)")
            del by.partitions[-int(rest):]
        elif verb == "REORGANIZE":
            names_text, into = re.split(r"\s+INTO\s+", rest, maxsplit=1, flags=re.IGNORECASE)
            by.reorganize(clause, by.named(clause, names_text), _partitions(into))
        else:  # TRUNCATE | DROP PARTITION names: their rows go, without row events
            every = verb == "TRUNCATE" and rest.strip().upper() == "ALL"  # TRUNCATE PARTITION ALL
            if verb == "DROP" and hashed:
                raise Refused(f"{clause!r}: DROP PARTITION is for RANGE and LIST (26.3.2, ER_ONLY_ON_RANGE_LIST_PARTITION)")
            names = set() if every else set(by.named(clause, rest))
            if not every:
                by.computed(clause)
            gone = [k for k, row in table.items() if every or by.partition_of(row, self.server) in names]
            self._took(self._ts, name, gone)
            for key in gone:
                del table[key]
            if verb == "DROP":
                by.partitions[:] = [p for p in by.partitions if p[0].lower() not in names]
        by.check(clause, table.values() if by.column is not None else ())

    def _apply_row(self, e: RowChange) -> None:
        self._remove(e)
        self._write(e)

    def _remove(self, e: RowChange) -> None:
        table = self.tables.setdefault((e.database, e.table), {})
        if e.op is not Op.INSERT and e.before is not None:
            key = row_key(e.key_columns, dict(e.before))
            if e.key_columns:
                if table.pop(key, None) is not None:
                    self._took(e.commit_ts, (e.database, e.table), [key])
            elif copies := _copies(table, key):  # one row of a key-less table: one copy of its image
                del table[_Copy(key, copies - 1)]

    def _write(self, e: RowChange) -> None:
        if e.op is not Op.DELETE and e.after is not None:
            by = self.partitioning.get((e.database, e.table))
            if by is not None and by.column is not None and by.partition_of(dict(e.after), self.server) is None:
                raise Refused(f"no partition of {e.database}.{e.table} holds the row {dict(e.after)} "
                              "(ER_NO_PARTITION_FOR_GIVEN_VALUE: MySQL refuses it)")
            known = self.columns.get((e.database, e.table))
            if known is not None and {c.casefold() for c in dict(e.after)} != {c.casefold() for c in known}:
                self._unfit.append((e.database, e.table))
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


def _without_partitioning(sql: str) -> str:
    """A CREATE TABLE without its partition options (``PARTITION BY ...``, last in the statement:
    manual 15.1.20), which name no column: sqlglot does not read ``VALUES LESS THAN MAXVALUE``
    without parentheses, which MySQL does."""
    at = sql.upper().rfind(" PARTITION BY ")
    return sql[:at] if at > 0 and sql.upper().startswith("CREATE") else sql


def _implicit_default(ct: ColumnType) -> Any:
    """MySQL's implicit default of a NOT NULL column without DEFAULT (manual, 13.6.3)."""
    k = ct.kind
    if k in (TypeKind.INT, TypeKind.LONG, TypeKind.UNSIGNED_LONG, TypeKind.BIT, TypeKind.YEAR):
        return 0
    if k in (TypeKind.FLOAT, TypeKind.DOUBLE):
        return 0.0
    if k is TypeKind.DECIMAL:
        return Decimal(0)
    if k in (TypeKind.STRING, TypeKind.SET):
        return ""
    if k is TypeKind.ENUM:
        return ct.elements[0] if ct.elements else None
    if k is TypeKind.BINARY:
        return b"\0" * (ct.length or 0) if ct.mysql_type == "binary" else b""
    if k is TypeKind.TIME:
        return dt.timedelta(0)
    if k is TypeKind.BOOLEAN:
        return False
    return None  # the zero date, which reads as NULL


@dataclass
class BinlogOracle(Oracle):
    """The reference model for protocols without commitTs (official Canal, CloudCanal, Debezium MySQL, DTS,
    TiCDC's Canal-JSON without its TiDB extension).

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
    - with ``binlog_events`` (connectors whose changes carry binlog coordinates), a binlog
      event happens once: a change whose coordinates (server, file, position, row) a
      partition already delivered is the connector re-sending it, and is not a change.
      Without ``binlog_events`` nothing tells a re-sent range from new changes, so it is fed
      what was delivered: a re-sent change applies again, and a re-sent INSERT into a key-less
      table adds a copy (README, known gaps).
    """

    binlog_events: bool = False
    _changes: dict[tuple[str, int], list[RowChange | DdlChange]] = field(default_factory=dict)
    _cursor: dict[tuple[str, int], int] = field(default_factory=dict)
    _ddl_seen: set[tuple[Any, ...]] = field(default_factory=set)
    _binlog_seen: set[tuple[Any, ...]] = field(default_factory=set)

    def add(self, events: Iterable[Event]) -> None:
        for e in events:
            key = (e.position.topic, e.position.partition)
            binlog = getattr(e, "binlog", None)
            if self.binlog_events and binlog is not None:
                if (key, binlog) in self._binlog_seen:
                    continue
                self._binlog_seen.add((key, binlog))
            if isinstance(e, Watermark):  # a heartbeat: wall-clock milliseconds
                self._partition_marks[key] = max(self._partition_marks.get(key, 0), (e.ts << 18) - 1)
            elif isinstance(e, SchemaSnapshot):
                self.schemas.setdefault((e.schema.database, e.schema.table), e.schema)
            elif isinstance(e, (RowChange, DdlChange)):
                if e.event_time_ms is None:
                    raise ValueError("a change without commitTs needs its event time")
                self._changes.setdefault(key, []).append(e)
                self._partition_marks[key] = max(self._partition_marks.get(key, 0), (e.event_time_ms << 18) - 1)

    def _statement_ms(self, e: DdlChange) -> int:
        return e.event_time_ms  # type: ignore[return-value]

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
        self._cut_unfit(w)
        return w
