"""Upstream column types -> Iceberg and Arrow types, and typed values -> Arrow columns.

The mapping is the one in ``cdc_codecs.types`` (and docs/protocols.md): unsigned bigint ->
decimal(20, 0), datetime -> timestamp, timestamp -> timestamptz, time -> long
microseconds, enum/set/json -> string, decimal(p > 38) -> string. Every Iceberg table
also carries two metadata columns: the commitTs and the op of the last change of the row.

Upstream names are data and never collide with the metadata columns. These are named
``_tidelake_commit_ts`` and ``_tidelake_op`` unless an upstream column of the table has that name
(ignoring case, as MySQL, Spark and DuckDB match names): then the metadata column takes one more
leading underscore per colliding name (``__tidelake_op``). The table property
``tidelake.metadata-columns`` records their field ids (JSON ``[commit_ts id, op id]``), so the
metadata columns are found in the table's schema at any W, and an ADD or RENAME COLUMN that
takes a metadata column's name renames the metadata column (by field id) first. Tables made
before the property have no upstream column of those names (it could not be created).
"""

from __future__ import annotations

import datetime as dt
import json
import struct
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Context, Decimal, InvalidOperation
from typing import Any, Iterable, Mapping, Sequence

import pyarrow as pa
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    TimestampType,
    TimestamptzType,
)

from cdc_codecs import ColumnType, TableSchema, TidelakeError, TypeKind
from cdc_codecs.types import ColumnValueError, EnumIndex, SetMask, member_label, parse_mysql_type

COMMIT_TS = "_tidelake_commit_ts"
OP = "_tidelake_op"
METADATA_COLUMNS = (COMMIT_TS, OP)  # their names where no upstream column has them (see metadata_columns)
METADATA_PROPERTY = "tidelake.metadata-columns"  # table property: JSON [commit_ts field id, op field id]
# The Open protocol carries no DECIMAL precision; without the table's DDL we keep 38 digits.
UNKNOWN_DECIMAL = (38, 10)


class UnsupportedValue(TidelakeError):
    """A value does not fit its column's Iceberg type."""


def iceberg_type(ct: ColumnType) -> IcebergType:
    k = ct.kind
    if k is TypeKind.DECIMAL:
        p = ct.precision if ct.precision is not None else UNKNOWN_DECIMAL[0]
        s = ct.scale if ct.scale is not None else (UNKNOWN_DECIMAL[1] if ct.precision is None else 0)
        return DecimalType(p, s) if p <= 38 else StringType()
    if k is TypeKind.BIT:
        return DecimalType(20, 0) if (ct.length or 1) > 63 else LongType()
    return _ICEBERG[k]


_ICEBERG: dict[TypeKind, IcebergType] = {
    TypeKind.BOOLEAN: BooleanType(),
    TypeKind.INT: IntegerType(),
    TypeKind.LONG: LongType(),
    TypeKind.UNSIGNED_LONG: DecimalType(20, 0),
    TypeKind.FLOAT: FloatType(),
    TypeKind.DOUBLE: DoubleType(),
    TypeKind.STRING: StringType(),
    TypeKind.JSON: StringType(),
    TypeKind.ENUM: StringType(),
    TypeKind.SET: StringType(),
    TypeKind.BINARY: BinaryType(),
    TypeKind.GEOMETRY: BinaryType(),
    TypeKind.DATE: DateType(),
    TypeKind.TIME: LongType(),
    TypeKind.TIMESTAMP: TimestampType(),
    TypeKind.TIMESTAMPTZ: TimestamptzType(),
    TypeKind.YEAR: IntegerType(),
}


def arrow_type(t: IcebergType) -> pa.DataType:
    if isinstance(t, DecimalType):
        return pa.decimal128(t.precision, t.scale)
    return _ARROW[type(t)]


_ARROW: dict[type, pa.DataType] = {
    BooleanType: pa.bool_(),
    IntegerType: pa.int32(),
    LongType: pa.int64(),
    FloatType: pa.float32(),
    DoubleType: pa.float64(),
    StringType: pa.string(),
    BinaryType: pa.binary(),
    DateType: pa.date32(),
    TimestampType: pa.timestamp("us"),
    TimestamptzType: pa.timestamp("us", tz="UTC"),
}


def iceberg_schema(columns: Sequence[tuple[str, ColumnType]]) -> Schema:
    """A new table's schema: the upstream columns, then the metadata columns (named by ``metadata_name``)."""
    fields = [NestedField(i + 1, name, iceberg_type(ct), required=False) for i, (name, ct) in enumerate(columns)]
    n = len(fields)
    upstream = [name for name, _ in columns]
    fields.append(NestedField(n + 1, metadata_name(COMMIT_TS, upstream), LongType(), required=False))
    fields.append(NestedField(n + 2, metadata_name(OP, upstream), StringType(), required=False))
    return Schema(*fields)


def metadata_name(name: str, upstream: Iterable[str]) -> str:
    """Metadata column ``name`` (``COMMIT_TS`` or ``OP``) with one more leading underscore per
    upstream column that has it, ignoring case."""
    taken = {u.casefold() for u in upstream}
    while name.casefold() in taken:
        name = "_" + name
    return name


def metadata_property(schema: Schema) -> dict[str, str]:
    """The ``METADATA_PROPERTY`` of a table made with ``schema`` (an ``iceberg_schema``: the metadata columns last)."""
    commit_ts, op = schema.fields[-2:]
    return {METADATA_PROPERTY: json.dumps([commit_ts.field_id, op.field_id])}


@dataclass(frozen=True)
class MetadataColumns:
    """A table's metadata columns as one of its schemas names them (None: not in that schema)."""

    commit_ts: str | None
    op: str | None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n in (self.commit_ts, self.op) if n is not None)


def metadata_field_ids(schema: Schema, properties: Mapping[str, str]) -> tuple[int | None, int | None]:
    """The field ids of a table's metadata columns: from its ``METADATA_PROPERTY``, or for a table
    made before it, of the fields named ``COMMIT_TS`` and ``OP`` in ``schema``."""
    raw = properties.get(METADATA_PROPERTY)
    if raw is not None:
        commit_ts, op = json.loads(raw)
        return int(commit_ts), int(op)
    names = {f.name: f.field_id for f in schema.fields}
    return names.get(COMMIT_TS), names.get(OP)


def metadata_columns(schema: Schema, properties: Mapping[str, str]) -> MetadataColumns:
    """The names of a table's metadata columns in ``schema`` (the table's schema at any W)."""
    ids = {f.field_id: f.name for f in schema.fields}
    commit_ts, op = metadata_field_ids(schema, properties)
    return MetadataColumns(ids.get(commit_ts) if commit_ts is not None else None, ids.get(op) if op is not None else None)


def table_columns(schema: TableSchema) -> list[tuple[str, ColumnType]]:
    return [(c.name, c.type) for c in schema.columns]


# Python's default decimal context holds 28 digits: quantizing a decimal(38, s) value in it
# raises (or, for other operations, rounds). Iceberg decimals hold at most 38 digits, so a
# context of 38 digits (one per precision, below) is exact for every value that fits, and
# traps every value that does not instead of rounding it.
_DECIMAL_CONTEXTS = {p: Context(prec=p, rounding=ROUND_HALF_EVEN, traps=[InvalidOperation]) for p in range(1, 66)}


def _decimal_context(precision: int) -> Context:
    return _DECIMAL_CONTEXTS.get(precision) or Context(prec=precision, rounding=ROUND_HALF_EVEN, traps=[InvalidOperation])
_FLOAT32 = struct.Struct("<f")


def to_iceberg_value(t: IcebergType, value: Any) -> Any:
    """A decoded value in the form Arrow builds the column from.

    Raises:
        UnsupportedValue: the value does not fit ``t`` exactly (a decimal with more digits
        than its precision or scale, a finite float beyond float32).
    """
    if value is None:
        return None
    if isinstance(t, DecimalType):
        return _fit_decimal(t, value)
    if isinstance(t, StringType):
        if isinstance(value, str):
            return str(value) if type(value) is not str else value  # EnumIndex/SetMask -> plain text
        if isinstance(value, Decimal):
            return format(value, "f")  # decimal(p > 38): digits, never '1E+40'
        if isinstance(value, (bytes, bytearray, dict, list)):
            raise UnsupportedValue(f"{type(value).__name__} value {value!r:.60} for a string column")
        return str(value)
    if isinstance(t, LongType) and isinstance(value, dt.timedelta):
        return value // dt.timedelta(microseconds=1)
    if isinstance(t, (LongType, IntegerType)) and isinstance(value, bool):
        return int(value)
    if isinstance(t, BooleanType) and isinstance(value, int):
        return bool(value)
    if isinstance(t, FloatType) and isinstance(value, float):
        try:
            _FLOAT32.pack(value)  # Arrow would turn a finite value beyond float32 into inf
        except OverflowError:
            raise UnsupportedValue(f"{value!r} is beyond the range of float (float32)") from None
    if isinstance(t, TimestampType) and isinstance(value, dt.datetime) and value.tzinfo is not None:
        # Arrow would shift an aware value to UTC: a MySQL DATETIME is a wall-clock time.
        raise UnsupportedValue(f"{value.isoformat()} has a time zone; timestamp (MySQL DATETIME) holds wall-clock times")
    return value


def _wide_decimal(upstream_type: str) -> tuple[int, int] | None:
    """(p, s) of the DECIMAL(p > 38, s) an upstream type is (Iceberg holds it as a string), or None."""
    try:
        ct = parse_mysql_type(upstream_type)
    except ColumnValueError:
        return None
    if ct.kind is not TypeKind.DECIMAL or (ct.precision or 0) <= 38:
        return None
    return ct.precision or 0, ct.scale or 0


def _fit_decimal(t: DecimalType, value: Any) -> Decimal:
    return _fit_digits(t.precision, t.scale, value)


def _fit_digits(precision: int, scale: int, value: Any) -> Decimal:
    """``value`` at ``scale``, if it fits DECIMAL(precision, scale) exactly."""
    if isinstance(value, Decimal):
        d = value
    elif isinstance(value, int):
        d = Decimal(int(value))  # bool too
    elif isinstance(value, float):
        d = Decimal(repr(value))
    else:
        try:
            d = Decimal(str(value))
        except InvalidOperation:
            raise UnsupportedValue(f"{value!r} is not a number for decimal({precision}, {scale})") from None
    try:
        q = d.quantize(Decimal((0, (1,), -scale)), context=_decimal_context(precision))
    except InvalidOperation:
        q = None  # more digits than the precision, or not finite
    if q is None or q != d:
        raise UnsupportedValue(f"{value} does not fit decimal({precision}, {scale})")
    return q


def fit_upstream_value(value: Any, upstream_type: str | None) -> Any:
    """A decoded value fitted to its column's upstream (DDL) type before it becomes an Iceberg value.

    That is ENUM indexes and SET masks from protocols that send them without the members
    (``EnumIndex`` / ``SetMask``, marked by the decoder): the DDL's member list names them;
    and a DECIMAL(p > 38, s), which Iceberg holds as a string of digits: at the column's scale,
    as MySQL prints it (1 in a DECIMAL(65, 30) is ``1.000000000000000000000000000000``, however
    the protocol wrote it), and within its precision, as a decimal(p <= 38) is. Any other value,
    digit text included, already is what the column holds.

    Raises:
        UnsupportedValue: an index or mask outside the DDL's members; a decimal that does not
        fit its DECIMAL(p, s).
    """
    if upstream_type is None:
        return value
    if type(value) is Decimal:
        wide = _wide_decimal(upstream_type)
        return value if wide is None else _fit_digits(*wide, value)
    if not isinstance(value, (EnumIndex, SetMask)):
        return value
    try:
        return member_label(parse_mysql_type(upstream_type), value)
    except ColumnValueError as exc:
        raise UnsupportedValue(f"{exc} (the table's upstream type)") from None


# Python types ``to_iceberg_value`` returns unchanged for a column type: a column holding only
# these (and None) goes to Arrow as it is, without a call per value.
_AS_THEY_ARE: dict[type, frozenset[type]] = {
    LongType: frozenset({int, type(None)}), IntegerType: frozenset({int, type(None)}),
    StringType: frozenset({str, type(None)}), DoubleType: frozenset({float, int, type(None)}),
    BinaryType: frozenset({bytes, type(None)}), BooleanType: frozenset({bool, type(None)}),
    DateType: frozenset({dt.date, type(None)}), TimestamptzType: frozenset({dt.datetime, type(None)}),
}


_DECIMALS = frozenset({Decimal, type(None)})
_INTS = frozenset({int, type(None)})  # not bool: Arrow refuses it for a decimal, _fit_digits takes it as 0 or 1
_MARKED = frozenset({EnumIndex, SetMask})  # values ``fit_upstream_value`` changes
_DATETIMES = frozenset({dt.datetime, type(None)})


def arrow_table(schema: Schema, rows: Iterable[Mapping[str, Any]], upstream_types: Mapping[str, str] | None = None) -> pa.Table:
    """Rows (column -> decoded value) as an Arrow table of exactly ``schema``'s columns, each
    column's ENUM indexes and SET masks first fitted to its upstream type (``upstream_types``:
    column -> MySQL type, ``fit_upstream_value``) where the column holds any.

    Raises:
        UnsupportedValue: naming the column and the value that does not fit its type.
    """
    rows = list(rows)
    arrays = []
    fields = []
    for f in schema.fields:
        at = arrow_type(f.field_type)
        values = [r.get(f.name) for r in rows]
        types = set(map(type, values))
        upstream = upstream_types.get(f.name) if upstream_types else None
        if upstream is not None and (not _MARKED.isdisjoint(types) or (
                isinstance(f.field_type, StringType) and Decimal in types and _wide_decimal(upstream))):
            try:
                values = [fit_upstream_value(v, upstream) for v in values]
            except UnsupportedValue as exc:
                raise UnsupportedValue(f"column {f.name!r} ({f.field_type}): {exc}") from None
            types = set(map(type, values))
        array = _as_they_are(f.field_type, at, values, types)
        if array is None:
            try:
                values = [to_iceberg_value(f.field_type, v) for v in values]
            except UnsupportedValue as exc:
                raise UnsupportedValue(f"column {f.name!r} ({f.field_type}): {exc}") from None
            try:
                array = pa.array(values, at)
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, ValueError) as exc:  # ValueError: NaN for an int column
                raise UnsupportedValue(f"column {f.name!r} ({f.field_type}): {exc}") from None
        arrays.append(array)
        fields.append(pa.field(f.name, at, nullable=True))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _as_they_are(t: IcebergType, at: pa.DataType, values: list[Any], types: set[type]) -> pa.Array | None:
    """``values`` (of ``types``) as an Arrow array without a call per value, when
    ``to_iceberg_value`` would return every one unchanged and Arrow takes them; else None, and
    the caller fits them one by one (for the error naming the value that does not fit). Decimals
    of at most 38 digits and exponents within 38 go to Arrow as they are, which converts them
    exactly or raises (beyond that its 128-bit parse wraps silently); ints to a decimal column
    too (BIGINT UNSIGNED is decimal(20, 0)): Arrow scales them exactly and raises where the
    digits exceed the precision, as ``_fit_digits`` does; naive datetimes too, where an aware
    one would be shifted to UTC."""
    if types <= _AS_THEY_ARE.get(type(t), frozenset()):
        pass
    elif isinstance(t, DecimalType) and types <= _DECIMALS:
        if not all(v is None or _within_decimal128(v) for v in values):
            return None
    elif isinstance(t, DecimalType) and types <= _INTS:
        pass
    elif not (isinstance(t, TimestampType) and types <= _DATETIMES
              and not any(v is not None and v.tzinfo is not None for v in values)):
        return None
    try:
        return pa.array(values, at)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, ValueError):
        return None


def _within_decimal128(value: Decimal) -> bool:
    digits, exponent = value.as_tuple()[1:]
    return isinstance(exponent, int) and len(digits) <= 38 and -38 <= exponent and value.adjusted() < 38
