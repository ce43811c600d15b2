"""MySQL 8 column types and values at their extremes, for the model-based histories.

The typed tables of ``tests/spark/history.py`` have a column of every type the codecs carry
(``cdc_codecs/types.py``), each named after its type (``c_decimal_65_30``), so that a column's
name alone says what it holds at any W, whichever table it is in. Values are drawn by
hypothesis strategies that favour the ends of each type's range (MySQL 8 manual, chapter 13
"Data Types"): the minimum and maximum of every integer width, DECIMAL(65,30) with 35 digits
before the point and 30 after, FLOAT / DOUBLE extremes, denormals and -0.0, the first and
last DATE and DATETIME, TIMESTAMP's 1970-2038 range, TIME's -838:59:59..838:59:59, YEAR's
1901..2155, strings with multi-byte characters and emoji, longer than 4 KiB, any bytes, ENUM
and SET members, BIT(64), JSON documents, and NULL. Key columns take only the types and values
MySQL accepts in a PRIMARY KEY (at most 3072 bytes; no TEXT, BLOB or JSON), each key pool
distinct under MySQL's comparison (case-, accent- and trailing-space-insensitive collations
too: every string key starts with its own digits).

``iceberg_value`` is the README's "Type mapping" transcribed for the comparison: what a
table read at W holds for a value the reference model holds.
"""

from __future__ import annotations

import datetime as dt
import json
import struct
from decimal import Context, Decimal
from typing import Any, NamedTuple

from hypothesis import strategies as st

from cdc_codecs.types import ColumnType, EnumIndex, SetMask, TypeKind, parse_mysql_type

UTC = dt.timezone.utc
ENUM = "enum('a','b c','É','🦆')"
SET = "set('a','b','é','🦆')"

# Every column a typed table has besides its key: (name, MySQL type). All nullable.
VALUE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("c_tinyint", "tinyint"), ("c_tinyint_u", "tinyint unsigned"), ("c_bool", "tinyint(1)"),
    ("c_smallint", "smallint"), ("c_smallint_u", "smallint unsigned"),
    ("c_mediumint", "mediumint"), ("c_mediumint_u", "mediumint unsigned"),
    ("c_int", "int"), ("c_int_u", "int unsigned"), ("c_bigint", "bigint"), ("c_bigint_u", "bigint unsigned"),
    ("c_decimal_65_30", "decimal(65,30)"), ("c_decimal_38_10", "decimal(38,10)"), ("c_decimal_10_0", "decimal(10,0)"),
    ("c_float", "float"), ("c_double", "double"),
    ("c_date", "date"), ("c_datetime", "datetime"), ("c_datetime_6", "datetime(6)"), ("c_timestamp_6", "timestamp(6)"),
    ("c_time_6", "time(6)"), ("c_year", "year"),
    ("c_char", "char(16)"), ("c_varchar", "varchar(5000)"), ("c_text", "text"),
    ("c_binary", "binary(8)"), ("c_varbinary", "varbinary(5000)"), ("c_blob", "blob"),
    ("c_enum", ENUM), ("c_set", SET), ("c_bit_64", "bit(64)"), ("c_bit_1", "bit(1)"), ("c_json", "json"),
)
# The key a typed table may have: (name, MySQL type).
KEY_COLUMNS: tuple[tuple[str, str], ...] = (
    ("k_bigint_u", "bigint unsigned"), ("k_varchar", "varchar(768)"), ("k_decimal", "decimal(65,30)"),
    ("k_varbinary", "varbinary(255)"), ("k_datetime", "datetime(6)"), ("k_double", "double"), ("k_time", "time(6)"),
)
# The columns of the other tables of the histories (spark/demo/workload.py), and the bag's.
OTHER_COLUMNS: tuple[tuple[str, str], ...] = (
    ("id", "bigint"), ("name", "varchar(64)"), ("amount", "decimal(12,2)"), ("qty", "int"), ("updated_at", "datetime(6)"),
    ("created_at", "timestamp"), ("payload", "varbinary(32)"), ("big", "bigint unsigned"), ("note", "text"),
    ("x", "int"), ("s", "varchar(8)"),
)
COLUMN_TYPES: dict[str, ColumnType] = {name: parse_mysql_type(t) for name, t in (*VALUE_COLUMNS, *KEY_COLUMNS, *OTHER_COLUMNS)}

# ---------------------------------------------------------------- values

_CHARS = st.characters(exclude_categories=("Cs",))  # any code point but lone surrogates, NUL and emoji included
_FLOAT_MAX = struct.unpack("<f", struct.pack("<I", 0x7F7FFFFF))[0]
_FLOAT_DENORMAL = struct.unpack("<f", struct.pack("<I", 1))[0]
_EXACT = Context(prec=100)  # DECIMAL(65, 30) has 65 digits: more than the default context's 28
_TIME_MAX = dt.timedelta(hours=838, minutes=59, seconds=59)
_TIMESTAMP_MIN = dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC)
_TIMESTAMP_MAX = dt.datetime(2038, 1, 19, 3, 14, 7, 999999, tzinfo=UTC)


def _ends(edges: list[Any], anything: st.SearchStrategy) -> st.SearchStrategy:
    """One of the type's edge values half of the time, anything in its range otherwise."""
    return st.one_of(st.sampled_from(edges), anything)


def _integer(bits: int, unsigned: bool) -> st.SearchStrategy:
    lo, hi = (0, 2**bits - 1) if unsigned else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    return _ends([lo, hi, 0, 1, lo + 1, hi - 1], st.integers(lo, hi))


def _decimal(precision: int, scale: int) -> st.SearchStrategy:
    top = Decimal("9" * (precision - scale) + ("." + "9" * scale if scale else ""))
    step = Decimal(10) ** -scale
    edges = [top, top.copy_negate(), Decimal(0), step, step.copy_negate(), Decimal(1)]
    # MySQL stores a DECIMAL at its scale (and has no -0): 1 is 1.000...0.
    return _ends(edges, st.decimals(top.copy_negate(), top, places=scale, allow_nan=False, allow_infinity=False)).map(
        lambda d: _EXACT.add(d, 0).quantize(step, context=_EXACT))


def _text(max_size: int, long: bool = False) -> st.SearchStrategy:
    short = st.text(_CHARS, max_size=min(max_size, 24))
    if not long:
        return short
    # Longer than 4 KiB: a drawn piece repeated (emoji make it 4 bytes a character).
    longer = st.tuples(st.text(_CHARS, min_size=1, max_size=6), st.integers(4097, max_size)).map(
        lambda p: (p[0] * p[1])[:p[1]])
    return st.one_of(short, short, longer)


def _bytes(max_size: int, long: bool = False) -> st.SearchStrategy:
    short = _ends([b"", b"\x00", b"\xff" * 8], st.binary(max_size=min(max_size, 24)))
    if not long:
        return short
    return st.one_of(short, short, st.tuples(st.binary(min_size=1, max_size=6), st.integers(4097, max_size)).map(
        lambda p: (p[0] * p[1])[:p[1]]))


def _json() -> st.SearchStrategy:
    """A JSON document as MySQL prints it (", " and ": " separators, object keys by length, then bytes)."""
    leaves = st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(_CHARS, max_size=8)
    documents = st.recursive(leaves, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.text(_CHARS, max_size=5), inner, max_size=3), max_leaves=6)
    return documents.map(_mysql_json)


def _mysql_json(value: Any) -> str:
    if isinstance(value, dict):
        keys = sorted(value, key=lambda k: (len(k.encode()), k.encode()))
        return "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)}: {_mysql_json(value[k])}" for k in keys) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_mysql_json(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def _members(ct: ColumnType) -> st.SearchStrategy:
    elements = ct.elements or ()
    if ct.kind is TypeKind.ENUM:
        return st.sampled_from(elements)
    return st.lists(st.sampled_from(elements), unique=True).map(lambda chosen: ",".join(e for e in elements if e in chosen))


def values(column: str) -> st.SearchStrategy:
    """The values a column takes (without NULL), favouring its type's extremes."""
    ct, name = COLUMN_TYPES[column], column
    k = ct.kind
    if name == "c_bool":
        return _ends([0, 1], _integer(8, False))
    if k in (TypeKind.INT, TypeKind.LONG, TypeKind.UNSIGNED_LONG):
        bits = {"tinyint": 8, "smallint": 16, "mediumint": 24, "int": 32, "bigint": 64}[ct.mysql_type]
        return _integer(bits, ct.unsigned)
    if k is TypeKind.DECIMAL:
        return _decimal(ct.precision or 10, ct.scale or 0)
    if k is TypeKind.FLOAT:
        edges = [_FLOAT_MAX, -_FLOAT_MAX, _FLOAT_DENORMAL, -_FLOAT_DENORMAL, -0.0, 0.0, 1.0]
        return _ends(edges, st.floats(width=32, allow_nan=False, allow_infinity=False))
    if k is TypeKind.DOUBLE:
        edges = [1.7976931348623157e308, -1.7976931348623157e308, 5e-324, -5e-324, -0.0, 0.0, 0.1]
        return _ends(edges, st.floats(allow_nan=False, allow_infinity=False))
    if k is TypeKind.DATE:
        return _ends([dt.date(1000, 1, 1), dt.date(9999, 12, 31), dt.date(1970, 1, 1)],
                     st.dates(dt.date(1000, 1, 1), dt.date(9999, 12, 31)))
    if k is TypeKind.TIMESTAMP:
        fsp = ct.length or 0
        edges = [dt.datetime(1000, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999), dt.datetime(1969, 12, 31, 23, 59, 59)]
        drawn = _ends(edges, st.datetimes(dt.datetime(1000, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999)))
        return drawn.map(lambda v: _at_fsp(v, fsp))
    if k is TypeKind.TIMESTAMPTZ:
        fsp = ct.length or 0
        drawn = _ends([_TIMESTAMP_MIN, _TIMESTAMP_MAX], st.datetimes(
            _TIMESTAMP_MIN.replace(tzinfo=None), _TIMESTAMP_MAX.replace(tzinfo=None), timezones=st.just(UTC)))
        return drawn.map(lambda v: _at_fsp(v, fsp))
    if k is TypeKind.TIME:
        fsp = ct.length or 0
        drawn = _ends([_TIME_MAX, -_TIME_MAX, dt.timedelta(0), dt.timedelta(microseconds=-1)],
                      st.timedeltas(-_TIME_MAX, _TIME_MAX))
        return drawn.map(lambda v: v - v % dt.timedelta(microseconds=10 ** (6 - fsp)) if v >= dt.timedelta(0)
                         else -((-v) - (-v) % dt.timedelta(microseconds=10 ** (6 - fsp))))
    if k is TypeKind.YEAR:
        return _ends([1901, 2155, 2000], st.integers(1901, 2155))
    if k is TypeKind.STRING:
        if ct.mysql_type == "char":  # CHAR drops trailing spaces when read (PAD_CHAR_TO_FULL_LENGTH is off)
            return _text(ct.length or 1).map(lambda s: s[:ct.length].rstrip(" "))
        limit = ct.length or 65535 // 4
        return _text(min(limit, 5000), long=limit > 4096)
    if k is TypeKind.BINARY:
        if ct.mysql_type == "binary":  # BINARY(n) pads with 0x00 to n bytes, and keeps them
            return st.binary(max_size=ct.length or 1).map(lambda b: b.ljust(ct.length or 1, b"\x00"))
        limit = ct.length or 65535
        return _bytes(min(limit, 5000), long=limit > 4096)
    if k in (TypeKind.ENUM, TypeKind.SET):
        return _members(ct)
    if k is TypeKind.BIT:
        n = ct.length or 1
        return _ends([0, 2**n - 1, 2 ** (n - 1)], st.integers(0, 2**n - 1))
    if k is TypeKind.JSON:
        return _json()
    raise AssertionError(f"no values for {column} ({ct})")


def _at_fsp(value: dt.datetime, fsp: int) -> dt.datetime:
    """A DATETIME / TIMESTAMP at its fractional-seconds precision (the digits MySQL keeps)."""
    return value.replace(microsecond=value.microsecond - value.microsecond % 10 ** (6 - fsp), fold=0)


def key_values(column: str) -> st.SearchStrategy:
    """Distinct values of a key column (distinct under MySQL's comparison too)."""
    ct = COLUMN_TYPES[column]
    if ct.kind is TypeKind.STRING:
        # Each key starts with its own digits, so no collation makes two of them equal; some fill
        # the key's 768 characters (3072 bytes of emoji: InnoDB's longest key).
        tails = st.one_of(st.text(_CHARS, max_size=12), st.just("🦆" * 760))
        return st.lists(tails, min_size=2, max_size=6).map(
            lambda ts: [(f"{i:03d}" + t)[:ct.length or 768] for i, t in enumerate(ts)])
    if ct.kind in (TypeKind.FLOAT, TypeKind.DOUBLE):
        return st.lists(values(column), min_size=2, max_size=6, unique_by=lambda v: v + 0.0)  # -0.0 = 0.0
    return st.lists(values(column), min_size=2, max_size=6, unique=True)


def rows(columns: tuple[tuple[str, str], ...]) -> st.SearchStrategy:
    """Row images over ``columns`` (names of COLUMN_TYPES), any column NULL."""
    return st.fixed_dictionaries({name: st.none() | values(name) for name, _ in columns})


class TypedTables(NamedTuple):
    """What the typed tables of a history hold: the key column of the keyed one, the key values
    rows take, and the images (every other column) rows of both take."""

    key: str
    keys: list
    images: list[dict]


@st.composite
def typed_tables(draw: st.DrawFn) -> TypedTables:
    key = draw(st.sampled_from([name for name, _ in KEY_COLUMNS]), label="key column")
    return TypedTables(key, draw(key_values(key), label="keys"),
                       draw(st.lists(rows(VALUE_COLUMNS), min_size=1, max_size=3), label="images"))


# ---------------------------------------------------------------- what a table read at W holds

_FLOAT32 = struct.Struct("<f")


def iceberg_value(column: str, value: Any) -> Any:
    """The value a table read at W holds for ``value`` of ``column`` as the model holds it (the
    decoded value): README, "Type mapping"."""
    if value is None:
        return None
    ct = COLUMN_TYPES.get(column)
    if ct is None:  # a column of another test's tables: a TIME is its microseconds, the rest as it is
        return value // dt.timedelta(microseconds=1) if isinstance(value, dt.timedelta) else value
    k = ct.kind
    if isinstance(value, EnumIndex) and ct.elements:  # the DDL names the member (README, Type mapping)
        return ct.elements[int(value) - 1] if int(value) else ""
    if isinstance(value, SetMask) and ct.elements:
        return ",".join(e for i, e in enumerate(ct.elements) if int(value) >> i & 1)
    if k is TypeKind.UNSIGNED_LONG or (k is TypeKind.BIT and (ct.length or 1) > 63):
        return Decimal(value)
    if k is TypeKind.TIME:
        return value // dt.timedelta(microseconds=1)
    if k is TypeKind.DECIMAL:
        step = Decimal(10) ** -(ct.scale or 0)
        if (ct.precision or 10) > 38:  # a string of digits at the column's scale, as MySQL prints it
            return format(Decimal(value).quantize(step, context=_EXACT), "f")
        return Decimal(value).quantize(step, context=_EXACT)
    if k is TypeKind.FLOAT:
        return _FLOAT32.unpack(_FLOAT32.pack(value))[0]
    return value


def row_order(row: dict[str, Any]) -> str:
    """A sort key for rows that are equal under ``==`` (1 and Decimal('1.00'), -0.0 and 0.0)."""
    def canonical(v: Any) -> str:
        if isinstance(v, bool):
            return repr(v)
        if isinstance(v, (int, Decimal)) and Decimal(v).is_finite():
            return "n" + format(Decimal(v).normalize(), "f")
        if isinstance(v, float):
            return "f" + repr(v + 0.0)
        return repr(v)

    return repr(sorted((k, canonical(v)) for k, v in row.items()))


def within_float64(typed: TypedTables) -> TypedTables:
    """``typed`` as a protocol that writes DECIMAL as a float64 can carry it (TiCDC's Debezium
    protocol: seeds, "For the Decimal data type ... TiCDC uses the float64 type"): a value the
    rounding takes out of its column's range (99...9.9...9 becomes 1E+35) makes the table fail
    with UnsupportedValue (tests/spark/tables/test_schema_map.py), so such values are not drawn."""
    def fits(column: str, value: Any) -> bool:
        ct = COLUMN_TYPES[column]
        if ct.kind is not TypeKind.DECIMAL or value is None:
            return True
        rounded = Decimal(repr(float(value)))
        return rounded.adjusted() < (ct.precision or 10) - (ct.scale or 0)

    keys = [k for k in typed.keys if fits(typed.key, k)] or [Decimal(0)]
    images = [{c: v if fits(c, v) else None for c, v in image.items()} for image in typed.images]
    return TypedTables(typed.key, keys, images)
