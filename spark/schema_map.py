"""Upstream column types -> Iceberg and Arrow types, and typed values -> Arrow columns.

The mapping is the one in ``cdc_codecs.types`` (and the README): unsigned bigint ->
decimal(20, 0), datetime -> timestamp, timestamp -> timestamptz, time -> long
microseconds, enum/set/json -> string, decimal(p > 38) -> string. Every Iceberg table
also carries two metadata columns: the commitTs and the op of the last change of the row.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
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

COMMIT_TS = "_tidelake_commit_ts"
OP = "_tidelake_op"
METADATA_COLUMNS = (COMMIT_TS, OP)
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
    fields = [NestedField(i + 1, name, iceberg_type(ct), required=False) for i, (name, ct) in enumerate(columns)]
    n = len(fields)
    fields.append(NestedField(n + 1, COMMIT_TS, LongType(), required=False))
    fields.append(NestedField(n + 2, OP, StringType(), required=False))
    return Schema(*fields)


def table_columns(schema: TableSchema) -> list[tuple[str, ColumnType]]:
    return [(c.name, c.type) for c in schema.columns]


def to_iceberg_value(t: IcebergType, value: Any) -> Any:
    """A decoded value in the form Arrow builds the column from."""
    if value is None:
        return None
    if isinstance(t, DecimalType):
        d = value if isinstance(value, Decimal) else Decimal(int(value)) if isinstance(value, (int, bool)) else Decimal(str(value))
        q = d.quantize(Decimal(1).scaleb(-t.scale))
        if q != d or len(q.as_tuple().digits) > t.precision:
            raise UnsupportedValue(f"{value} does not fit decimal({t.precision}, {t.scale})")
        return q
    if isinstance(t, StringType):
        return value if isinstance(value, str) else str(value)
    if isinstance(t, LongType) and isinstance(value, dt.timedelta):
        return value // dt.timedelta(microseconds=1)
    if isinstance(t, (LongType, IntegerType)) and isinstance(value, bool):
        return int(value)
    if isinstance(t, BooleanType) and isinstance(value, int):
        return bool(value)
    return value


def arrow_table(schema: Schema, rows: Iterable[Mapping[str, Any]]) -> pa.Table:
    """Rows (column -> decoded value) as an Arrow table of exactly ``schema``'s columns."""
    rows = list(rows)
    arrays = []
    fields = []
    for f in schema.fields:
        at = arrow_type(f.field_type)
        values = [to_iceberg_value(f.field_type, r.get(f.name)) for r in rows]
        try:
            arrays.append(pa.array(values, at))
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
            raise UnsupportedValue(f"column {f.name!r}: {exc}") from None
        fields.append(pa.field(f.name, at, nullable=True))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))
