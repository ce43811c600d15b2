"""One type system for every protocol, and the conversions into it.

Every upstream column type (a MySQL/TiDB type string, an Open-protocol type code, a
Debezium schema type, a DTS dataTypeNumber) is normalised to a ``ColumnType`` whose
``kind`` decides the Python value type in events and the Iceberg type in tables:

==============  ======================  ==========================================
kind            Python value            Iceberg type
==============  ======================  ==========================================
boolean         bool                    boolean
int             int                     int        (tinyint..mediumint, int signed)
long            int                     long       (bigint signed, int unsigned)
unsigned_long   int (0 .. 2**64-1)      decimal(20, 0)
float           float                   float
double          float                   double
decimal         decimal.Decimal         decimal(p, s); p > 38 -> string
string          str                     string
binary          bytes                   binary
date            datetime.date           date
time            datetime.timedelta      long (microseconds; MySQL TIME is a signed
                                        interval up to 838:59:59, not a time of day)
timestamp       datetime (naive)        timestamp   (MySQL DATETIME)
timestamptz     datetime (UTC)          timestamptz (MySQL TIMESTAMP)
json            str                     string
enum            str                     string
set             str                     string (comma-separated members)
bit             int                     long; bit(64) -> decimal(20, 0)
year            int                     int
geometry        bytes                   binary (WKB as MySQL stores it)
==============  ======================  ==========================================

MySQL zero dates ('0000-00-00', '0000-00-00 00:00:00') have no calendar value; they
decode to None, as Debezium does.
"""

from __future__ import annotations

import binascii
import datetime as dt
import enum
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from functools import lru_cache, partial
from typing import Any, Callable

UTC = dt.timezone.utc


class TypeKind(str, enum.Enum):
    BOOLEAN = "boolean"
    INT = "int"
    LONG = "long"
    UNSIGNED_LONG = "unsigned_long"
    FLOAT = "float"
    DOUBLE = "double"
    DECIMAL = "decimal"
    STRING = "string"
    BINARY = "binary"
    DATE = "date"
    TIME = "time"
    TIMESTAMP = "timestamp"
    TIMESTAMPTZ = "timestamptz"
    JSON = "json"
    ENUM = "enum"
    SET = "set"
    BIT = "bit"
    YEAR = "year"
    GEOMETRY = "geometry"


class ColumnValueError(ValueError):
    """A value does not fit its column type. Codecs turn it into a DecodeError."""


@dataclass(frozen=True, slots=True)
class ColumnType:
    kind: TypeKind
    mysql_type: str
    unsigned: bool = False
    precision: int | None = None
    scale: int | None = None
    length: int | None = None
    elements: tuple[str, ...] | None = None

    def __reduce__(self) -> tuple:
        # Pickled with every change in the change log: the dataclass default (a state dict
        # built through dataclasses.fields()) costs most of a row's encoding time.
        return _column_type, (self.kind.value, self.mysql_type, self.unsigned, self.precision, self.scale, self.length,
                              self.elements)

    def iceberg_type(self) -> str:
        """The Iceberg type this column maps to, as Iceberg spells it."""
        k = self.kind
        if k is TypeKind.DECIMAL:
            if self.precision is None:  # not carried by the protocol: as spark.tables.schema_map.iceberg_type
                return f"decimal(38, {10 if self.scale is None else self.scale})"
            p, s = self.precision, self.scale or 0
            return f"decimal({p}, {s})" if p <= 38 else "string"
        if k is TypeKind.BIT:
            return "decimal(20, 0)" if (self.length or 1) > 63 else "long"
        return _ICEBERG[k]

    def __str__(self) -> str:
        text = self.mysql_type
        if self.elements is not None:
            text += "(" + ",".join("'" + e.replace("'", "''") + "'" for e in self.elements) + ")"
        elif self.precision is not None:
            text += f"({self.precision},{self.scale or 0})"
        elif self.kind is TypeKind.DECIMAL and self.scale is not None:
            # A scale without a precision (Connect's Decimal without connect.decimal.precision): the
            # 38 digits Iceberg gives it (iceberg_type), so that the scale survives ``stored_type``.
            text += f"(38,{self.scale})"
        elif self.length is not None:
            text += f"({self.length})"
        return text + (" unsigned" if self.unsigned else "")


def _column_type(kind: str, *fields: Any) -> ColumnType:
    """Unpickles a ``ColumnType`` (its kind pickled by value: an enum member pickles slowly)."""
    return ColumnType(TypeKind(kind), *fields)


_ICEBERG = {
    TypeKind.BOOLEAN: "boolean",
    TypeKind.INT: "int",
    TypeKind.LONG: "long",
    TypeKind.UNSIGNED_LONG: "decimal(20, 0)",
    TypeKind.FLOAT: "float",
    TypeKind.DOUBLE: "double",
    TypeKind.STRING: "string",
    TypeKind.BINARY: "binary",
    TypeKind.DATE: "date",
    TypeKind.TIME: "long",
    TypeKind.TIMESTAMP: "timestamp",
    TypeKind.TIMESTAMPTZ: "timestamptz",
    TypeKind.JSON: "string",
    TypeKind.ENUM: "string",
    TypeKind.SET: "string",
    TypeKind.YEAR: "int",
    TypeKind.GEOMETRY: "binary",
}

# MySQL integer widths, for range checks and for the signed/unsigned kind choice.
INT_BITS = {"tinyint": 8, "smallint": 16, "mediumint": 24, "int": 32, "bigint": 64}

_ALIASES = {
    "integer": "int",
    "int1": "tinyint",
    "int2": "smallint",
    "int3": "mediumint",
    "middleint": "mediumint",
    "int4": "int",
    "int8": "bigint",
    "bool": "tinyint",
    "boolean": "tinyint",
    "real": "double",
    "double precision": "double",
    "float4": "float",
    "float8": "double",
    "numeric": "decimal",
    "fixed": "decimal",
    "dec": "decimal",
    "long varchar": "mediumtext",
    "long": "mediumtext",
    "character": "char",
    "character varying": "varchar",
    "national char": "char",
    "nchar": "char",
    "nvarchar": "varchar",
    "national varchar": "varchar",
    "long varbinary": "mediumblob",
    "var_string": "varchar",
    "string": "char",
}

_KINDS: dict[str, TypeKind] = {
    "float": TypeKind.FLOAT,
    "double": TypeKind.DOUBLE,
    "decimal": TypeKind.DECIMAL,
    "char": TypeKind.STRING,
    "varchar": TypeKind.STRING,
    "tinytext": TypeKind.STRING,
    "text": TypeKind.STRING,
    "mediumtext": TypeKind.STRING,
    "longtext": TypeKind.STRING,
    "vector": TypeKind.STRING,
    "binary": TypeKind.BINARY,
    "varbinary": TypeKind.BINARY,
    "tinyblob": TypeKind.BINARY,
    "blob": TypeKind.BINARY,
    "mediumblob": TypeKind.BINARY,
    "longblob": TypeKind.BINARY,
    "date": TypeKind.DATE,
    "time": TypeKind.TIME,
    "datetime": TypeKind.TIMESTAMP,
    "timestamp": TypeKind.TIMESTAMPTZ,
    "year": TypeKind.YEAR,
    "json": TypeKind.JSON,
    "enum": TypeKind.ENUM,
    "set": TypeKind.SET,
    "bit": TypeKind.BIT,
    "geometry": TypeKind.GEOMETRY,
    "point": TypeKind.GEOMETRY,
    "linestring": TypeKind.GEOMETRY,
    "polygon": TypeKind.GEOMETRY,
    "multipoint": TypeKind.GEOMETRY,
    "multilinestring": TypeKind.GEOMETRY,
    "multipolygon": TypeKind.GEOMETRY,
    "geometrycollection": TypeKind.GEOMETRY,
    "geomcollection": TypeKind.GEOMETRY,
}

_TYPE_RE = re.compile(
    r"^\s*(?P<base>[a-z_][a-z0-9_ ]*?)\s*(?:\((?P<args>.*)\))?\s*(?P<mods>(?:\s*(?:unsigned|signed|zerofill))*)\s*$",
    re.IGNORECASE | re.DOTALL,
)
_ENUM_ELEMENT_RE = re.compile(r"'((?:[^'\\]|''|\\.)*)'")


def column_type(
    mysql_type: str,
    *,
    unsigned: bool = False,
    precision: int | None = None,
    scale: int | None = None,
    length: int | None = None,
    elements: tuple[str, ...] | None = None,
) -> ColumnType:
    """Build the ColumnType of a MySQL base type name (``bigint``, ``varchar``...)."""
    base = mysql_type.strip().lower()
    base = _ALIASES.get(base, base)
    if base == "serial":
        return ColumnType(TypeKind.UNSIGNED_LONG, "bigint", unsigned=True)
    if base in INT_BITS:
        bits = INT_BITS[base]
        if bits < 32 or (bits == 32 and not unsigned):
            kind = TypeKind.INT
        elif bits == 64 and unsigned:
            kind = TypeKind.UNSIGNED_LONG
        else:
            kind = TypeKind.LONG
        return ColumnType(kind, base, unsigned=unsigned, length=length)
    kind = _KINDS.get(base)
    if kind is None:
        raise ColumnValueError(f"unknown MySQL type {mysql_type!r}")
    if kind is TypeKind.DECIMAL:
        return ColumnType(kind, base, unsigned, precision if precision is not None else 10, scale or 0)
    if kind in (TypeKind.ENUM, TypeKind.SET):
        return ColumnType(kind, base, elements=elements)
    return ColumnType(kind, base, unsigned=unsigned, length=length)


@lru_cache(maxsize=4096)  # decoders and the commit step parse the same few types per row; ColumnType is immutable
def parse_mysql_type(text: str) -> ColumnType:
    """Parse a MySQL column type as Canal, CloudCanal and Simple write it.

    Accepts ``int``, ``INT(11) unsigned zerofill``, ``decimal(10, 4)``,
    ``enum('a','b')``, ``DOUBLE PRECISION(10,7) unsigned``, ``datetime(3)``.
    """
    m = _TYPE_RE.match(text)
    if not m:
        raise ColumnValueError(f"cannot parse MySQL type {text!r}")
    base = " ".join(m.group("base").lower().split())
    args = m.group("args")
    unsigned = "unsigned" in (m.group("mods") or "").lower()
    norm = _ALIASES.get(base, base)
    if norm in ("enum", "set"):
        elements = None
        if args is not None:
            elements = tuple(_unquote_element(e) for e in _ENUM_ELEMENT_RE.findall(args))
        return column_type(norm, elements=elements)
    numbers: list[int] = []
    if args:
        try:
            numbers = [int(a) for a in args.split(",")]
        except ValueError:
            raise ColumnValueError(f"cannot parse MySQL type arguments in {text!r}") from None
    if norm == "decimal":
        return column_type(
            norm,
            unsigned=unsigned,
            precision=numbers[0] if numbers else 10,
            scale=numbers[1] if len(numbers) > 1 else 0,
        )
    if norm == "float" and len(numbers) == 1 and 24 < numbers[0] <= 53:
        # FLOAT(p) is a DOUBLE from p = 25 (MySQL 8.0 manual, "Floating-Point Types"), as the server makes it
        return column_type("double", unsigned=unsigned)
    return column_type(norm, unsigned=unsigned, length=numbers[0] if numbers else None)


def stored_type(text: str) -> ColumnType:
    """The inverse of ``str(ct)``: a column type as tidelake wrote it (side-output schemas, table
    schemas in the archive, the tables' ``tidelake.column-type.*`` properties).

    ``str`` writes every known DECIMAL precision and scale (``decimal(10,0)``), so a bare
    ``decimal`` there is one whose precision and scale the protocol did not carry (TiCDC's
    Canal-JSON without content-compatible, the Open protocol, Connect's Decimal without
    parameters): left unknown, for the table's DDL (or ``decimal(38, 10)``) to type. Read as
    MySQL DDL it would be DECIMAL(10, 0), which refuses the values such a column holds.
    """
    ct = parse_mysql_type(text)
    if ct.kind is TypeKind.DECIMAL and "(" not in text:
        return ColumnType(TypeKind.DECIMAL, ct.mysql_type, ct.unsigned)
    return ct


def _unquote_element(raw: str) -> str:
    return raw.replace("''", "'").replace("\\'", "'").replace("\\\\", "\\")


# ---------------------------------------------------------------- value checks


def int_range(ct: ColumnType) -> tuple[int, int]:
    if ct.kind is TypeKind.BIT:
        return 0, (1 << (ct.length or 64)) - 1
    if ct.kind is TypeKind.YEAR:
        return 0, 2155
    bits = INT_BITS.get(ct.mysql_type, 64)
    if ct.unsigned or ct.kind is TypeKind.UNSIGNED_LONG:
        return 0, (1 << bits) - 1
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


INTEGER_KINDS = frozenset({TypeKind.INT, TypeKind.LONG, TypeKind.UNSIGNED_LONG, TypeKind.BIT, TypeKind.YEAR})
TEXT_KINDS = frozenset({TypeKind.STRING, TypeKind.JSON, TypeKind.ENUM, TypeKind.SET})
BYTES_KINDS = frozenset({TypeKind.BINARY, TypeKind.GEOMETRY})


def check_int(ct: ColumnType, value: int) -> int:
    lo, hi = int_range(ct)
    if not lo <= value <= hi:
        raise ColumnValueError(f"{value} is outside {ct} range [{lo}, {hi}]")
    return value


def to_int(ct: ColumnType, value: Any) -> int:
    """An integer column value from a JSON number or a decimal string."""
    if isinstance(value, bool):
        return check_int(ct, int(value))
    if isinstance(value, int):
        return check_int(ct, value)
    if isinstance(value, float) and value.is_integer():
        return check_int(ct, int(value))
    if isinstance(value, str):
        try:
            return check_int(ct, int(value.strip()))
        except ValueError as exc:
            if isinstance(exc, ColumnValueError):
                raise
    raise ColumnValueError(f"expected an integer for {ct}, found {value!r}")


def to_decimal(ct: ColumnType, value: Any) -> Decimal:
    if isinstance(value, bool):
        raise ColumnValueError(f"expected a decimal for {ct}, found {value!r}")
    try:
        if isinstance(value, float):
            d = Decimal(repr(value))
        elif isinstance(value, (int, str)):
            d = Decimal(value)
        else:
            raise ColumnValueError(f"expected a decimal for {ct}, found {value!r}")
    except InvalidOperation:
        raise ColumnValueError(f"expected a decimal for {ct}, found {value!r}") from None
    if not d.is_finite():
        raise ColumnValueError(f"expected a finite decimal for {ct}, found {value!r}")
    return d


def to_float(ct: ColumnType, value: Any) -> float:
    if isinstance(value, bool):
        raise ColumnValueError(f"expected a number for {ct}, found {value!r}")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    raise ColumnValueError(f"expected a number for {ct}, found {value!r}")


def _text(ct: ColumnType, value: Any) -> str:
    if not isinstance(value, str):
        raise ColumnValueError(f"expected a string for {ct}, found {value!r}")
    return value


def _is_zero_date(s: str) -> bool:
    # '0000-00-00' and the partial zero dates MySQL accepts without NO_ZERO_IN_DATE.
    return s[:4] == "0000" or s[5:7] == "00" or s[8:10] == "00"


def parse_date(ct: ColumnType, value: Any) -> dt.date | None:
    s = _text(ct, value)
    if _is_zero_date(s):
        return None
    try:
        return dt.date.fromisoformat(s[:10])
    except ValueError:
        raise ColumnValueError(f"expected a date YYYY-MM-DD for {ct}, found {value!r}") from None


def parse_datetime(ct: ColumnType, value: Any) -> dt.datetime | None:
    s = _text(ct, value)
    if _is_zero_date(s):
        return None
    try:
        parsed = dt.datetime.fromisoformat(s)
    except ValueError:
        raise ColumnValueError(f"expected a datetime YYYY-MM-DD hh:mm:ss[.ffffff] for {ct}, found {value!r}") from None
    return parsed


def parse_timestamp(ct: ColumnType, value: Any, tz: dt.tzinfo) -> dt.datetime | None:
    """A MySQL TIMESTAMP as text in the encoder's time zone ``tz`` -> aware UTC datetime."""
    parsed = parse_datetime(ct, value)
    if parsed is None:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=tz)
    return parsed.astimezone(UTC)


_TIME_RE = re.compile(r"^(-)?(\d{1,3}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?$")


def parse_time(ct: ColumnType, value: Any) -> dt.timedelta:
    s = _text(ct, value)
    m = _TIME_RE.match(s.strip())
    if not m:
        raise ColumnValueError(f"expected a time [-]hh:mm:ss[.ffffff] for {ct}, found {value!r}")
    sign, h, mi, sec, frac = m.groups()
    micros = int((frac or "0").ljust(6, "0"))
    delta = dt.timedelta(hours=int(h), minutes=int(mi), seconds=int(sec), microseconds=micros)
    return -delta if sign else delta


def format_time(value: dt.timedelta) -> str:
    total = value // dt.timedelta(microseconds=1)
    sign = "-" if total < 0 else ""
    total = abs(total)
    secs, micros = divmod(total, 1_000_000)
    mins, s = divmod(secs, 60)
    h, m = divmod(mins, 60)
    text = f"{sign}{h:02d}:{m:02d}:{s:02d}"
    return text + (f".{micros:06d}" if micros else "")


def format_datetime(value: dt.datetime) -> str:
    # isoformat, not strftime: strftime("%Y") does not pad years before 1000 to four digits.
    text = value.replace(tzinfo=None, microsecond=0).isoformat(sep=" ")
    return text + (f".{value.microsecond:06d}" if value.microsecond else "")


class EnumIndex(str):
    """An ENUM value as the 1-based index its protocol sent, members unknown to the decoder.

    TiCDC's Canal-JSON (without ``content-compatible``: ``mysqlType`` is a bare ``enum``)
    and its Open protocol send an ENUM as its index and a SET as its bit mask, and never
    the member list. Only the table's DDL can name the label, at apply time. A label is
    also text, and can be digits (``enum('0','1')``, ``enum('small','10')``): so the
    decoder, the one place that knows whether its protocol sent an index, marks it by
    this type, and only values of this type are mapped (``member_label``). It is a
    ``str`` so that events compare, pickle and serialise as the index text they carry.
    """

    __slots__ = ()


class SetMask(str):
    """A SET value as the bit mask its protocol sent, members unknown: see ``EnumIndex``."""

    __slots__ = ()


def enum_label(ct: ColumnType, value: Any) -> str:
    """An ENUM from a protocol that sends its 1-based index (Canal family, Simple, Open).

    With the members known (``ct.elements``) the index becomes the label; without them
    it stays an ``EnumIndex`` for the DDL to map.
    """
    s = value if isinstance(value, str) else str(to_int(ct, value)) if isinstance(value, int) else _text(ct, value)
    if not s.isdigit():
        return s
    if not ct.elements:
        return EnumIndex(s)
    i = int(s)
    if i == 0:
        return ""  # MySQL's error value for an invalid member
    if i <= len(ct.elements):
        return ct.elements[i - 1]
    raise ColumnValueError(f"enum index {i} is outside {ct}")


def set_members(ct: ColumnType, value: Any) -> str:
    """A SET from a protocol that sends its bit mask; comma-separated members when known, else a ``SetMask``."""
    s = value if isinstance(value, str) else str(value) if isinstance(value, int) and not isinstance(value, bool) else _text(ct, value)
    if not s.isdigit():
        return s
    if not ct.elements:
        return SetMask(s)
    mask = int(s)
    if mask >> len(ct.elements):
        raise ColumnValueError(f"set mask {mask} has bits outside {ct}")
    return ",".join(e for i, e in enumerate(ct.elements) if mask >> i & 1)


def member_label(ct: ColumnType, value: Any) -> Any:
    """``value`` with an ``EnumIndex`` / ``SetMask`` turned into its label by ``ct`` (the DDL's type).

    Any other value is returned unchanged: it already is a label, whatever its characters.
    Without members in ``ct`` (or when ``ct`` is not the matching kind) the index text stays.
    """
    kind = type(value)
    if kind is EnumIndex and ct.kind is TypeKind.ENUM and ct.elements:
        return enum_label(ct, str(value))
    if kind is SetMask and ct.kind is TypeKind.SET and ct.elements:
        return set_members(ct, str(value))
    return value


def binary_length(ct: ColumnType) -> int | None:
    """n of a BINARY(n) column, whose values MySQL right-pads with 0x00 to n bytes and keeps so
    (8.0 manual, "The BINARY and VARBINARY Types"); None for any other type."""
    return ct.length if ct.kind is TypeKind.BINARY and ct.mysql_type == "binary" and ct.length else None


def stored_binary(ct: ColumnType, value: bytes) -> bytes:
    """A BINARY(n) value as MySQL holds it: padded with 0x00 to n bytes. A binlog row event drops
    the trailing zeros (Canal passes that on; Debezium pads them back), so 'ab' of a BINARY(4)
    column arrives as b'ab' and is b'ab\\0\\0' in MySQL. Each decoder whose messages name the
    column's length converts its bytes through this (the TiCDC protocols' and DTS's name none:
    TiDB pads the value itself)."""
    n = binary_length(ct)
    return value.ljust(n, b"\0") if n is not None and len(value) < n else value


def latin1_bytes(ct: ColumnType, value: Any) -> bytes:
    """Canal (official and TiCDC) writes bytes as one ISO-8859-1 character per byte."""
    s = _text(ct, value)
    try:
        return stored_binary(ct, s.encode("latin-1"))
    except UnicodeEncodeError:
        raise ColumnValueError(f"binary value for {ct} has a character above U+00FF, so it is not ISO-8859-1 bytes") from None


# base64.b64decode(s, validate=True) in one C call: the same bytes and the same rejections
# (checked on 200k generated strings), without its Python-level regex check (~1.5 us).
b64decode_strict: Callable[[str | bytes], bytes] = partial(binascii.a2b_base64, strict_mode=True)


def b64_bytes(ct: ColumnType, value: Any) -> bytes:
    s = _text(ct, value)
    try:
        return b64decode_strict(s)
    except (ValueError, TypeError):
        raise ColumnValueError(f"expected base64 for {ct}, found {value!r:.80}") from None


def from_text(ct: ColumnType, value: Any, tz: dt.tzinfo = UTC) -> Any:
    """Convert a value as the text-based protocols carry it (Canal, CloudCanal, Simple JSON)."""
    if value is None:
        return None
    k = ct.kind
    if k in INTEGER_KINDS:
        return to_int(ct, value)
    if k is TypeKind.STRING or k is TypeKind.JSON:
        return _text(ct, value)
    if k is TypeKind.DECIMAL:
        return to_decimal(ct, value)
    if k is TypeKind.FLOAT or k is TypeKind.DOUBLE:
        return to_float(ct, value)
    if k in BYTES_KINDS:
        return latin1_bytes(ct, value)
    if k is TypeKind.TIMESTAMP:
        return parse_datetime(ct, value)
    if k is TypeKind.TIMESTAMPTZ:
        return parse_timestamp(ct, value, tz)
    if k is TypeKind.DATE:
        return parse_date(ct, value)
    if k is TypeKind.TIME:
        return parse_time(ct, value)
    if k is TypeKind.ENUM:
        return enum_label(ct, value)
    if k is TypeKind.SET:
        return set_members(ct, value)
    if k is TypeKind.BOOLEAN:
        if isinstance(value, bool):
            return value
        if value in ("1", "true", 1):
            return True
        if value in ("0", "false", 0):
            return False
        raise ColumnValueError(f"expected a boolean for {ct}, found {value!r}")
    raise ColumnValueError(f"no conversion for {ct}")  # pragma: no cover - every kind is handled


def to_text(ct: ColumnType, value: Any, tz: dt.tzinfo = UTC) -> str | None:
    """The inverse of ``from_text``: how Canal-style encoders write a typed value."""
    if value is None:
        return None
    k = ct.kind
    if k in BYTES_KINDS:
        return bytes(value).decode("latin-1")
    if k is TypeKind.TIMESTAMPTZ:
        return format_datetime(value.astimezone(tz).replace(tzinfo=None))
    if k is TypeKind.TIMESTAMP:
        return format_datetime(value)
    if k is TypeKind.TIME:
        return format_time(value)
    if k is TypeKind.DATE:
        return value.isoformat()
    if k is TypeKind.BOOLEAN:
        return "1" if value else "0"
    if k is TypeKind.FLOAT or k is TypeKind.DOUBLE:
        return repr(float(value))
    if k is TypeKind.ENUM and ct.elements and value in ct.elements:
        return str(ct.elements.index(value) + 1)
    if k is TypeKind.SET and ct.elements:
        members = set(value.split(",")) if value else set()
        return str(sum(1 << i for i, e in enumerate(ct.elements) if e in members))
    return str(value)


# ---------------------------------------------------------------- fast converters

Converter = Callable[[Any], Any]

# Kinds whose final Python value has one exact type (integers also need their range).
_FINAL_TYPES: dict[TypeKind, type] = {
    TypeKind.STRING: str, TypeKind.JSON: str, TypeKind.FLOAT: float, TypeKind.DOUBLE: float,
    TypeKind.DECIMAL: Decimal, TypeKind.BINARY: bytes, TypeKind.DATE: dt.date, TypeKind.TIME: dt.timedelta,
}


def final_type(ct: ColumnType) -> type | None:
    """The one Python type a value of ``ct`` has once converted (what ``passthrough`` lets by), or None."""
    k = ct.kind
    if k in INTEGER_KINDS:
        return int
    if k is TypeKind.TIMESTAMP or k is TypeKind.TIMESTAMPTZ:
        return dt.datetime
    return _FINAL_TYPES.get(k)


def passthrough(ct: ColumnType, general: Converter) -> Converter:
    """``general`` for one column, skipped for a value that already is the column's final value.

    For decoders whose wire values are often final already (JSON integers and strings, or
    what a Connect decoding produced): those return at the first check, anything else goes
    to ``general``, which must return such values unchanged and handle every other case.
    """
    k = ct.kind
    if k in INTEGER_KINDS:
        lo, hi = int_range(ct)

        def pass_int(value: Any) -> Any:
            return value if type(value) is int and lo <= value <= hi else general(value)

        return pass_int
    if k is TypeKind.TIMESTAMP or k is TypeKind.TIMESTAMPTZ:
        aware = k is TypeKind.TIMESTAMPTZ

        def pass_datetime(value: Any) -> Any:
            return value if type(value) is dt.datetime and (value.tzinfo is not None) is aware else general(value)

        return pass_datetime
    final = _FINAL_TYPES.get(k)
    if final is None:
        return general

    def pass_exact(value: Any) -> Any:
        return value if type(value) is final else general(value)

    return pass_exact


def text_converter(ct: ColumnType, tz: dt.tzinfo = UTC) -> Converter:
    """A specialised ``from_text`` for one column type: the hot path of text protocols.

    Each converter handles the common well-formed string in a few C calls and falls
    back to ``from_text`` for everything else, which either converts or raises the
    precise ColumnValueError.
    """
    k = ct.kind
    slow = lambda v: from_text(ct, v, tz)  # noqa: E731
    if k is TypeKind.STRING or k is TypeKind.JSON:

        def conv_str(v: Any) -> Any:
            if v is None or type(v) is str:
                return v
            return _text(ct, v)

        return conv_str
    if k in INTEGER_KINDS and k is not TypeKind.BIT:
        lo, hi = int_range(ct)

        def conv_int(v: Any) -> Any:
            if v is None:
                return None
            try:
                x = int(v) if type(v) is str or type(v) is int else None
            except ValueError:
                x = None
            if x is None or not lo <= x <= hi:
                return to_int(ct, v)  # slow path: raises the precise error
            return x

        return conv_int
    if k is TypeKind.DECIMAL:

        def conv_decimal(v: Any) -> Any:
            if type(v) is str:
                try:
                    d = Decimal(v)
                    if d.is_finite():
                        return d
                except InvalidOperation:
                    pass
            return slow(v)

        return conv_decimal
    if k is TypeKind.FLOAT or k is TypeKind.DOUBLE:

        def conv_float(v: Any) -> Any:
            if type(v) is float:
                return v
            if type(v) is str:
                try:
                    return float(v)
                except ValueError:
                    pass
            return slow(v)

        return conv_float
    if k is TypeKind.TIMESTAMP:
        parse = dt.datetime.fromisoformat

        def conv_datetime(v: Any) -> Any:
            if type(v) is str and len(v) >= 19 and not _is_zero_date(v):
                try:
                    return parse(v)
                except ValueError:
                    pass
            return slow(v)

        return conv_datetime
    if k is TypeKind.TIMESTAMPTZ and tz is UTC:
        parse = dt.datetime.fromisoformat

        def conv_timestamp_utc(v: Any) -> Any:
            # Appending the offset lets fromisoformat build the aware value in one C call.
            if type(v) is str and 19 <= len(v) <= 26 and not _is_zero_date(v):
                try:
                    return parse(v + "+00:00")
                except ValueError:
                    pass
            return slow(v)

        return conv_timestamp_utc
    if k is TypeKind.DATE:
        parse_d = dt.date.fromisoformat

        def conv_date(v: Any) -> Any:
            if type(v) is str and len(v) == 10 and not _is_zero_date(v):
                try:
                    return parse_d(v)
                except ValueError:
                    pass
            return slow(v)

        return conv_date
    if binary_length(ct) is not None:
        return slow  # a BINARY(n): ``latin1_bytes`` pads it as MySQL holds it
    if k in BYTES_KINDS:

        def conv_bytes(v: Any) -> Any:
            if type(v) is str:
                try:
                    return v.encode("latin-1")
                except UnicodeEncodeError:
                    pass
            return slow(v)

        return conv_bytes
    return slow
