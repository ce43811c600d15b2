"""A MySQL / TiDB table's partitioning, as the stream defined it, and which rows a partition holds.

``ALTER TABLE ... TRUNCATE PARTITION`` and ``DROP PARTITION`` delete a partition's rows without
row events (binlog and TiCDC send none). Where the stream defined the table's partitioning
(``CREATE TABLE ... PARTITION BY`` or ``ALTER TABLE ... PARTITION BY``, then ``ADD`` / ``DROP`` /
``REORGANIZE PARTITION``), the committer deletes the rows the partition's bounds hold, by the
rules of the MySQL 8 manual (26.2 Partitioning Types, 26.2.7 How MySQL Partitioning Handles NULL):

- RANGE and RANGE COLUMNS: partition *k* holds the rows whose value (tuple of values, compared
  left to right) is below its ``LESS THAN`` bound and not below the bound of the partition
  before it (the partitions in definition order: after a DROP the next one takes over the
  dropped range). ``MAXVALUE`` is above every value; NULL is below every value, so a row with a
  NULL partitioning value lives in the first partition.
- LIST and LIST COLUMNS: the rows whose value (tuple) is one of the partition's ``VALUES IN``;
  NULL only where the list names NULL. TiDB's ``VALUES IN (DEFAULT)`` partition holds the rest.
- HASH: partition ``N = MOD(value, num)`` of the ``num`` partitions (26.2.4), a negative value's
  remainder taken positive, as both servers compute it (MySQL's sql_partition.cc
  ``get_part_id_hash``: ``|v % num|``; TiDB's ``locateHashPartition`` the same).
  LINEAR HASH (26.2.4.1): ``V = POWER(2, CEILING(LOG(2, num)))``, ``N = value & (V - 1)``, while
  ``N >= num``: ``V = V / 2``, ``N = N & (V - 1)`` -- on MySQL. TiDB reads ``LINEAR`` and ignores
  it (its manual, "Linear Hash partitioning"): a TiDB upstream places rows by plain HASH, so the
  server the stream comes from decides (``upstream_server``: TiCDC's protocols are TiDB's).
  NULL: TiDB hashes it as 0 (the manual's 26.2.7 says so for MySQL too); MySQL's server hashes
  it as ``LLONG_MIN`` (``part_val_int``), the same partition 0 for LINEAR HASH and for a power of
  two partitions, but partition ``2^63 mod num`` otherwise. There manual and server disagree, so a
  row with NULL under MySQL HASH over such a ``num`` is not placed: ``UnknownPartitionRows``.
  ``PARTITIONS num`` names them ``p0`` ... (or the statement names them); ``ADD PARTITION
  PARTITIONS n`` adds ``p<num>`` ...; ``COALESCE PARTITION n`` removes the last ``n``.

Computed for partitioning by columns (``RANGE (col)``, ``RANGE COLUMNS (a, b)``, ``HASH (col)``...)
of integer, DATE or DATETIME type (HASH: integer), and by ``YEAR(col)`` or ``TO_DAYS(col)`` of a
DATE or DATETIME column (the manual's examples), with literal bounds or ``TO_DAYS('date')``.
Everything else -- [LINEAR] KEY (the server's internal hash of the column's bytes), other
expressions, string columns (compared by a collation the stream does not carry), TiDB's INTERVAL
partitioning (partitions it names itself), a table whose partitioning the stream never showed --
raises ``UnknownPartitionRows`` naming why.

The definition is kept in the table's property ``tidelake.partitioning`` (JSON), so it
survives across runs and renames.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from cdc_codecs import ColumnType, TidelakeError, protocol_spec
from cdc_codecs.types import TypeKind, parse_mysql_type

# A literal of a partition definition: ("int", "-5"), ("str", "2020-01-01"), ("null",),
# ("max",) for MAXVALUE, ("expr", text) for anything else (not computed).
Literal = tuple[str, ...]
MAXVALUE: Literal = ("max",)
NULL: Literal = ("null",)
# The server upstream: where it places a row of a (LINEAR) HASH partitioned table.
MYSQL, TIDB = "mysql", "tidb"
_LLONG_MIN = -(1 << 63)


class UnknownPartitionRows(TidelakeError):
    """Which rows a partition holds cannot be computed (the message says why)."""


@dataclass(frozen=True)
class PartitionDef:
    """One ``PARTITION name VALUES ...``: ``less_than`` (RANGE: a bound per partitioning column),
    ``values_in`` (LIST: the value tuples), or ``default`` (TiDB's LIST ``VALUES IN (DEFAULT)``)."""

    name: str
    less_than: tuple[Literal, ...] | None = None
    values_in: tuple[tuple[Literal, ...], ...] | None = None
    default: bool = False


@dataclass(frozen=True)
class Partitioning:
    """``PARTITION BY method (expression)``: ``columns`` are the partitioning columns when the
    expression is columns, or ``function`` of one column (``YEAR(d)``, ``TO_DAYS(d)``), ``()``
    for other expressions; ``partitions`` in definition order, None where MySQL / TiDB name them
    (HASH, KEY, TiDB's INTERVAL)."""

    method: str  # RANGE | LIST | HASH | KEY
    expression: str
    columns: tuple[str, ...]
    partitions: tuple[PartitionDef, ...] | None
    function: str | None = None  # YEAR | TO_DAYS
    linear: bool = False  # LINEAR HASH | LINEAR KEY

    def to_json(self) -> str:
        return json.dumps({
            "method": self.method, "expression": self.expression, "columns": list(self.columns), "function": self.function,
            **({"linear": True} if self.linear else {}),
            "partitions": None if self.partitions is None else [
                {"name": p.name, "less_than": None if p.less_than is None else [list(v) for v in p.less_than],
                 "values_in": None if p.values_in is None else [[list(v) for v in t] for t in p.values_in],
                 "default": p.default} for p in self.partitions],
        })

    @staticmethod
    def from_json(text: str) -> Partitioning:
        d = json.loads(text)
        parts = None if d["partitions"] is None else tuple(
            PartitionDef(p["name"], None if p["less_than"] is None else tuple(tuple(v) for v in p["less_than"]),
                         None if p["values_in"] is None else tuple(tuple(tuple(v) for v in t) for t in p["values_in"]),
                         p["default"])
            for p in d["partitions"])
        return Partitioning(d["method"], d["expression"], tuple(d["columns"]), parts, d.get("function"), d.get("linear", False))

    def describe(self) -> str:
        return f"PARTITION BY {'LINEAR ' if self.linear else ''}{self.method} ({self.expression})"

    # -- the definition as partition maintenance changes it

    def _index(self, name: str) -> int | None:
        return next((i for i, p in enumerate(self.partitions or ()) if p.name.casefold() == name.casefold()), None)

    def named(self, names: tuple[str, ...]) -> tuple[PartitionDef, ...]:
        """The partitions called ``names`` (MySQL's partition names ignore case)."""
        if self.partitions is None:
            return ()
        missing = [n for n in names if self._index(n) is None]
        if missing:
            raise UnknownPartitionRows(f"{self.describe()} has no partition {', '.join(map(repr, missing))} "
                                       f"(it has {', '.join(p.name for p in self.partitions)})")
        return tuple(self.partitions[self._index(n)] for n in names)  # type: ignore[index]

    def with_added(self, partitions: tuple[PartitionDef, ...]) -> Partitioning:
        """``ADD PARTITION (...)``: RANGE partitions go last (MySQL requires their bounds to be greater)."""
        if self.partitions is None:
            return self
        return replace(self, partitions=self.partitions + partitions)

    def with_more(self, count: int) -> Partitioning:
        """``ADD PARTITION PARTITIONS n`` (HASH / KEY): ``n`` more, named ``p<i>`` from the count on
        (MySQL's names for partitions a statement does not name)."""
        if self.partitions is None:
            return self
        at = len(self.partitions)
        return replace(self, partitions=self.partitions + tuple(PartitionDef(f"p{at + i}") for i in range(count)))

    def coalesced(self, count: int) -> Partitioning:
        """``COALESCE PARTITION n`` (HASH / KEY): the last ``n`` partitions go, their rows spread over
        the others (MySQL requires fewer than it has)."""
        if self.partitions is None:
            return self
        if not 0 < count < len(self.partitions):
            raise UnknownPartitionRows(f"{self.describe()} has {len(self.partitions)} partitions: cannot coalesce {count}")
        return replace(self, partitions=self.partitions[:-count])

    def without(self, names: tuple[str, ...]) -> Partitioning:
        """``DROP PARTITION``."""
        if self.partitions is None:
            return self
        gone = {n.casefold() for n in names}
        return replace(self, partitions=tuple(p for p in self.partitions if p.name.casefold() not in gone))

    def reorganized(self, names: tuple[str, ...], into: tuple[PartitionDef, ...]) -> Partitioning:
        """``REORGANIZE PARTITION names INTO (...)``: the new partitions take the place of the named
        ones (MySQL requires them to be adjacent and, for RANGE, to cover the same range)."""
        if self.partitions is None or not names:
            return self
        at = [self._index(n) for n in names]
        if None in at:
            self.named(names)  # raises, naming the missing partition
        first = min(at)  # type: ignore[type-var]
        return replace(self, partitions=tuple(p for i, p in enumerate(self.partitions) if i < first and i not in at) + into
                       + tuple(p for i, p in enumerate(self.partitions) if i > first and i not in at))

    # -- rows

    def holding(self, names: tuple[str, ...], columns: dict[str, str], types: dict[str, ColumnType],
                server: str = MYSQL) -> Callable[[pa.Table], pa.Array]:
        """A function of a table's rows: the boolean mask of those partitions ``names`` hold.

        Args:
            columns: the table's column name for each partitioning column (MySQL names ignore case).
            types: each partitioning column's upstream type.
            server: the server upstream, ``MYSQL`` or ``TIDB`` (``upstream_server``): they place
                rows of a LINEAR HASH table, and NULLs of a HASH table, differently.

        Raises:
            UnknownPartitionRows: which rows the partitions hold cannot be computed (before any row is read).
        """
        why = self._not_computed(columns, types)
        if why:
            raise UnknownPartitionRows(f"{self.describe()}: {why}")
        wanted = {p.name.casefold() for p in self.named(names)}
        compared = [_INTEGER if self.function else types[c] for c in self.columns]  # what a bound is compared with
        for p in self.partitions or ():  # every bound converts to it
            for bound in [p.less_than or (), *(p.values_in or ())]:
                for literal, column_type in zip(bound, compared):
                    if literal not in (MAXVALUE, NULL):
                        _value(literal, column_type)

        def mask(rows: pa.Table) -> pa.Array:
            values = [rows.column(columns[c]).combine_chunks() for c in self.columns]
            if self.function:
                values = [_apply(self.function, v) for v in values]
            if self.method == "HASH":
                return self._hash_mask(wanted, values[0], server)
            return self._mask(wanted, list(zip(values, compared)))

        return mask

    def _hash_mask(self, wanted: set[str], values: pa.Array, server: str) -> pa.Array:
        assert self.partitions is not None
        count = len(self.partitions)
        held = {i for i, p in enumerate(self.partitions) if p.name.casefold() in wanted}
        out = []
        for value in values.to_pylist():
            if value is None and server == MYSQL and not self.linear and count & (count - 1):
                raise UnknownPartitionRows(
                    f"{self.describe()}: a row whose value is NULL, over {count} partitions: MySQL's manual (26.2.7) "
                    "places it in partition 0, its server (sql_partition.cc, NULL hashed as LLONG_MIN) in partition "
                    f"{(1 << 63) % count}; which one holds it cannot be told from the stream")
            out.append(hash_partition(None if value is None else int(value), count, server, self.linear) in held)
        return pa.array(out, pa.bool_())

    def _mask(self, wanted: set[str], values: list[tuple[pa.Array, ColumnType]]) -> pa.Array:
        n = len(values[0][0])
        mask = pa.array([False] * n, pa.bool_())
        assert self.partitions is not None
        below_previous = pa.array([False] * n, pa.bool_())
        for p in self.partitions:
            if self.method == "RANGE":
                below = _less_than(values, p.less_than or ())
                held = pc.and_(below, pc.invert(below_previous))
                below_previous = below
            elif p.default:
                held = pc.invert(_in(values, tuple(v for q in self.partitions if not q.default for v in q.values_in or ())))
            else:
                held = _in(values, p.values_in or ())
            if p.name.casefold() in wanted:
                mask = pc.or_(mask, held)
        return mask

    def _not_computed(self, columns: dict[str, str], types: dict[str, ColumnType]) -> str | None:
        if self.method == "KEY":
            return ("the rows of a partition are decided by the server's internal hash of the columns' bytes "
                    f"({'LINEAR ' if self.linear else ''}KEY partitioning), which tidelake does not compute")
        if self.partitions is None:
            what = "a number of partitions the stream never showed" if self.method == "HASH" else "partitions TiDB names itself (INTERVAL)"
            return f"the rows of a partition are decided by {what}, which tidelake does not compute"
        if not self.columns:
            return f"the rows of a partition are decided by the expression {self.expression}, which tidelake does not compute"
        if self.function and (types[self.columns[0]].kind if self.columns[0] in types else None) not in (TypeKind.DATE, TypeKind.TIMESTAMP):
            return f"{self.function}() of column {self.columns[0]!r} is computed for DATE and DATETIME columns only"
        for c in self.columns:
            if c not in columns:
                return f"the table has no column {c!r}"
            kind = types[c].kind if c in types else None
            if self.method == "HASH" and not self.function and kind not in _INTEGER_KINDS:
                return f"column {c!r} ({types[c].mysql_type if c in types else 'type unknown'}) is not an integer"
            if kind not in _COMPUTED_KINDS:
                why = "compared by its collation, which the stream does not carry" if kind is TypeKind.STRING else "not an integer, DATE or DATETIME"
                return f"column {c!r} ({types[c].mysql_type if c in types else 'type unknown'}) is {why}"
        for p in self.partitions:
            if self.method in ("RANGE", "LIST") and p.less_than is None and p.values_in is None and not p.default:
                return f"partition {p.name} has no VALUES (MySQL refuses it): which rows it holds is not known"
            for literal in [*(p.less_than or ()), *(v for t in p.values_in or () for v in t)]:
                if literal[0] == "expr" and not _TO_DAYS.fullmatch(literal[1]):
                    return f"partition {p.name} is bounded by the expression {literal[1]}, which tidelake does not compute"
        return None


_INTEGER_KINDS = frozenset({TypeKind.INT, TypeKind.LONG, TypeKind.UNSIGNED_LONG, TypeKind.YEAR})
_COMPUTED_KINDS = _INTEGER_KINDS | {TypeKind.DATE, TypeKind.TIMESTAMP}


def upstream_server(protocol: str) -> str:
    """The server a topic's rows come from: TiCDC's protocols (those carrying TiDB's commitTs) are
    TiDB's, the others (Canal, Debezium's MySQL connector, DTS, CloudCanal) MySQL's."""
    return TIDB if protocol_spec(protocol).has_commit_ts else MYSQL


def hash_partition(value: int | None, count: int, server: str = MYSQL, linear: bool = False) -> int:
    """The partition (0 ...) of ``count`` that a (LINEAR) HASH value lands in on ``server``; the
    value as the server's 64-bit signed integer (an unsigned BIGINT above 2^63 wraps, as there)."""
    if value is not None:
        value = (value - _LLONG_MIN) % (1 << 64) + _LLONG_MIN
    if server == TIDB:  # NULL is 0, LINEAR is ignored: pkg/table/tables/partition.go locateHashPartition
        return abs(value or 0) % count
    value = _LLONG_MIN if value is None else value  # sql_partition.cc part_val_int
    if not linear:
        return abs(value) % count  # get_part_id_hash: v % num in C (the dividend's sign), made positive
    v = 1 << (count - 1).bit_length()  # POWER(2, CEILING(LOG(2, num)))
    n = value & (v - 1)
    while n >= count:
        v //= 2
        n = n & (v - 1)
    return n


_INTEGER = parse_mysql_type("bigint")
_TO_DAYS = re.compile(r"TO_DAYS\s*\(\s*'(\d{4}-\d{2}-\d{2})'\s*\)", re.IGNORECASE)
_DAYS_BEFORE_1970 = 719528  # TO_DAYS('1970-01-01')


def _to_days(day: dt.date) -> int:
    """MySQL's TO_DAYS: days since year 0 (TO_DAYS('0001-01-01') = 366)."""
    return day.toordinal() + 365


def _apply(function: str, column: pa.Array) -> pa.Array:
    """``YEAR(col)`` or ``TO_DAYS(col)`` of a DATE or DATETIME column, as int64 (NULL stays NULL)."""
    if function == "YEAR":
        return pc.cast(pc.year(column), pa.int64())
    if pa.types.is_timestamp(column.type):
        column = pc.cast(pc.floor_temporal(column, unit="day"), pa.date32())
    return pc.add(pc.cast(pc.cast(column, pa.int32()), pa.int64()), _DAYS_BEFORE_1970)


def _value(literal: Literal, column_type: ColumnType) -> Any:
    """A literal as a value of the column's Arrow type (MySQL converts the bound to the column's type)."""
    kind, text = literal[0], literal[1] if len(literal) > 1 else ""
    to_days = _TO_DAYS.fullmatch(text) if kind == "expr" else None
    if to_days and column_type.kind in (TypeKind.INT, TypeKind.LONG, TypeKind.UNSIGNED_LONG):
        value = _to_days(dt.date.fromisoformat(to_days.group(1)))
        return Decimal(value) if column_type.kind is TypeKind.UNSIGNED_LONG else value
    try:
        if column_type.kind is TypeKind.DATE:
            return dt.date.fromisoformat(text.strip())
        if column_type.kind is TypeKind.TIMESTAMP:
            return dt.datetime.fromisoformat(text.strip())
        if kind == "str":
            text = text.strip()
        value = int(text)
    except ValueError:
        raise UnknownPartitionRows(f"bound {text!r} is not a {column_type.mysql_type}") from None
    return Decimal(value) if column_type.kind is TypeKind.UNSIGNED_LONG else value


def _less_than(values: list[tuple[pa.Array, ColumnType]], bound: tuple[Literal, ...]) -> pa.Array:
    """Rows whose value tuple is below ``bound``, compared left to right; MAXVALUE is above
    every value and NULL below every value."""
    if len(bound) != len(values):
        raise UnknownPartitionRows(f"a bound of {len(bound)} values for {len(values)} partitioning columns")
    n = len(values[0][0])
    below = pa.array([False] * n, pa.bool_())
    equal_so_far = pa.array([True] * n, pa.bool_())
    for (column, column_type), literal in zip(values, bound):
        if literal == MAXVALUE:
            return pc.or_(below, equal_so_far)  # every value is below MAXVALUE; none equals it
        value = pa.scalar(_value(literal, column_type), column.type)
        lower = pc.fill_null(pc.less(column, value), True)  # NULL is below every value
        same = pc.fill_null(pc.equal(column, value), False)
        below = pc.or_(below, pc.and_(equal_so_far, lower))
        equal_so_far = pc.and_(equal_so_far, same)
    return below


def _in(values: list[tuple[pa.Array, ColumnType]], listed: tuple[tuple[Literal, ...], ...]) -> pa.Array:
    """Rows whose value tuple is one of ``listed`` (NULL matches a listed NULL)."""
    n = len(values[0][0])
    out = pa.array([False] * n, pa.bool_())
    for item in listed:
        if len(item) != len(values):
            raise UnknownPartitionRows(f"a list value of {len(item)} values for {len(values)} partitioning columns")
        match = pa.array([True] * n, pa.bool_())
        for (column, column_type), literal in zip(values, item):
            if literal == NULL:
                hit = pc.is_null(column)
            else:
                hit = pc.fill_null(pc.equal(column, pa.scalar(_value(literal, column_type), column.type)), False)
            match = pc.and_(match, hit)
        out = pc.or_(out, match)
    return out
