"""An added column's DEFAULT, and the value it gives the rows the table already holds.

``column_default`` reads what an ``ADD COLUMN``'s definition says (``DefaultLiteral``, ``DefaultNow``,
``DefaultUnknown``: ``spark.tables.ddl`` keeps it on ``AddColumn``); ``existing_rows_value`` is the
value MySQL 8 / TiDB store in every existing row, once the column's exact type is known
(``spark.tables.updates`` fills the column with it). Apart from the statement parser: these are
MySQL's values type by type (implicit defaults, BINARY padding, the statement's time in the
upstream's time zone), not the reading of SQL.
"""

from __future__ import annotations

import datetime as dt
import re
import struct
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, localcontext
from typing import Any

from sqlglot import exp

from cdc_codecs import ColumnType, TidelakeError
from cdc_codecs.events import Column
from cdc_codecs.types import (
    BYTES_KINDS,
    INTEGER_KINDS,
    ColumnValueError,
    TypeKind,
    from_text,
    stored_binary,
    to_int,
)
from spark.tables.ddl_changes import ColumnDefault, DefaultLiteral, DefaultNow, DefaultUnknown

# sqlglot's nodes for MySQL's synonyms of the statement's time (NOW() and CURDATE() stay Anonymous).
_NOW_NODES = (exp.CurrentTimestamp, exp.Localtime, exp.Localtimestamp, exp.CurrentDate)
_NOW_NAMES = frozenset({"NOW", "CURRENT_TIMESTAMP", "LOCALTIME", "LOCALTIMESTAMP", "CURRENT_DATE", "CURDATE"})


def column_default(coldef: exp.ColumnDef, type_text: str = "") -> ColumnDefault | None:
    """What an added column's definition (of type ``type_text``) says the existing rows get (see
    ``existing_rows_value``)."""
    default: ColumnDefault | None = None
    for constraint in coldef.constraints:
        kind = constraint.kind
        if isinstance(kind, exp.AutoIncrementColumnConstraint):
            return DefaultUnknown("AUTO_INCREMENT numbers the existing rows in an order the stream does not show")
        if isinstance(kind, (exp.ComputedColumnConstraint, exp.GeneratedAsIdentityColumnConstraint)):
            return DefaultUnknown("a generated column computes the existing rows' values from columns tidelake may not hold")
        if isinstance(kind, exp.DefaultColumnConstraint):
            default = _default_of(kind.this)
    if isinstance(default, DefaultLiteral) and (digits := _float_decimals(type_text)) is not None:
        try:  # FLOAT(M,D) / DOUBLE(M,D) round what they store to D decimals, the DEFAULT too (1.234 is 1.23)
            rounded = Decimal(default.value.strip()).quantize(Decimal(1).scaleb(-digits), ROUND_HALF_UP)  # type: ignore[union-attr]
            default = DefaultLiteral(str(rounded), default.is_string)
        except (ArithmeticError, AttributeError, ValueError):
            pass  # not a number: the literal's own error, later (``existing_rows_value``)
    return default


_FLOAT_M_D = re.compile(r"^\s*(?:float|double(?:\s+precision)?|real)\s*\(\s*\d+\s*,\s*(\d+)\s*\)", re.IGNORECASE)


def _float_decimals(type_text: str) -> int | None:
    """D of a FLOAT(M,D) or DOUBLE(M,D) column (MySQL 8.0 manual, "Floating-Point Types"), else None."""
    m = _FLOAT_M_D.match(type_text)
    return int(m.group(1)) if m else None


def _default_of(e: exp.Expression) -> ColumnDefault | None:
    """A DEFAULT clause's value: a literal, the statement's time, or an expression (unknown)."""
    while isinstance(e, exp.Paren):  # MySQL 8's expression default (7) is the literal 7
        e = e.this
    if isinstance(e, exp.Null):
        return None
    if isinstance(e, exp.Literal):
        return DefaultLiteral(e.this, e.is_string)
    if isinstance(e, exp.Neg) and isinstance(e.this, exp.Literal) and not e.this.is_string:
        return DefaultLiteral(f"-{e.this.this}")
    if isinstance(e, exp.Boolean):
        return DefaultLiteral("1" if e.this else "0")
    if isinstance(e, exp.Introducer) and isinstance(e.expression, exp.Literal):  # _utf8mb4'x'
        return DefaultLiteral(e.expression.this, True)
    if isinstance(e, exp.National):  # N'x'
        return DefaultLiteral(e.this, True)
    if isinstance(e, exp.HexString):  # X'41', 0x41
        digits = e.this
        return DefaultLiteral(bytes.fromhex(digits.rjust(len(digits) + len(digits) % 2, "0")))
    if isinstance(e, exp.BitString):  # b'101'
        bits = e.this or "0"
        return DefaultLiteral(int(bits, 2).to_bytes((len(bits) + 7) // 8, "big"))
    name = e.name.upper() if isinstance(e, exp.Anonymous) else None
    if isinstance(e, _NOW_NODES) or name in _NOW_NAMES:
        args = [e.this] if not isinstance(e, exp.Anonymous) else e.expressions
        fsp = args[0] if args and isinstance(args[0], exp.Literal) else None
        return DefaultNow(int(fsp.this) if fsp is not None else 0)
    return DefaultUnknown(f"the expression default {e.sql(dialect='mysql')} cannot be evaluated for the existing rows")


class ValueNotReproducible(TidelakeError):
    """The values MySQL gave the existing rows of an added column cannot be known from the stream."""


def existing_rows_value(column: Column, default: ColumnDefault | None, at_ms: int, tz: dt.tzinfo) -> Any:
    """The value MySQL 8 / TiDB store in ``column`` for every row the table has when ``ADD COLUMN``
    adds it (MySQL 8.0 manual, 13.6 Data Type Default Values), as the codecs type values
    (``cdc_codecs.types``): the DEFAULT; without one, NULL for a nullable column and the type's
    implicit default for a NOT NULL one (0, '', the first ENUM member, the zero date, which reads as
    NULL as every zero date does). ``DEFAULT CURRENT_TIMESTAMP`` is the statement's time ``at_ms``
    (epoch milliseconds), at the default's precision; a DATETIME or DATE reads it in ``tz``, the
    upstream's time zone (the topic's ``timezone``).

    Raises:
        ValueNotReproducible: an expression, AUTO_INCREMENT or generated column, a NOT NULL column
            whose implicit default tidelake does not know (JSON, spatial), or a literal that does
            not fit the type (MySQL would have refused the statement).
    """
    ct = column.type
    if isinstance(default, DefaultUnknown):
        raise ValueNotReproducible(default.what)
    if default is None:
        return None if column.nullable else _implicit_default(ct)
    if isinstance(default, DefaultNow):
        return _statement_time(ct, default.fsp, at_ms, tz)
    try:
        return _stored(ct, _literal_value(ct, default, tz))
    except (ColumnValueError, ArithmeticError, ValueError) as exc:
        raise ValueNotReproducible(f"DEFAULT {default.value!r} does not fit {ct}: {exc}") from None


def _stored(ct: ColumnType, value: Any) -> Any:
    """``value`` as a column of ``ct`` stores it: a FLOAT holds single precision (1.1 is
    1.100000023841858 once widened to DOUBLE)."""
    if ct.kind is TypeKind.FLOAT and isinstance(value, float):
        return struct.unpack("f", struct.pack("f", value))[0]
    return value


@dataclass(frozen=True)
class OlderValue:
    """What MySQL gave the rows of before an ``ADD COLUMN`` in the column it added: ``value`` (as
    the codecs type values) in a column of ``type``, or ``unknown``: why it cannot be known -- a row
    that needs it holds its table rather than read NULL (``spark.commit.table.older_rows``)."""

    type: ColumnType
    value: Any = None
    unknown: str | None = None

    @classmethod
    def of(cls, column: Column, default: ColumnDefault | None, at_ms: int, tz: dt.tzinfo) -> OlderValue:
        try:
            return cls(column.type, existing_rows_value(column, default, at_ms, tz))
        except ValueNotReproducible as exc:
            return cls(column.type, unknown=str(exc))

    def retyped(self, new: ColumnType, tz: dt.tzinfo) -> OlderValue:
        """The value once ``MODIFY COLUMN`` gives the column the type ``new``. MySQL converts a stored
        number or string as it converts a literal of its text (``_literal_value``: a FLOAT's 1.1 reads
        1.100000023841858 as a DOUBLE, 7.5 becomes 8 in an INT); a value of another kind is kept only
        where the type is the same, else unknown."""
        value = self.value
        if self.unknown is not None or value is None or new == self.type:
            return OlderValue(new, value, self.unknown)
        if new.kind is self.type.kind and isinstance(value, (dt.date, dt.timedelta)):
            return OlderValue(new, _fsp_rounded(value, new.length or 0))  # DATETIME -> DATETIME(3): the same instant
        if new.kind is self.type.kind and isinstance(value, bytes) and (new.length is None or len(value) <= new.length):
            return OlderValue(new, stored_binary(new, value))  # BINARY(4) -> BINARY(6): padded with zero bytes
        if isinstance(value, (bool, int, float, Decimal, str)) and new.kind is not TypeKind.JSON:  # MySQL reformats JSON text
            text = repr(value) if isinstance(value, float) else str(int(value) if isinstance(value, bool) else value)
            try:
                return OlderValue(new, _stored(new, _literal_value(new, DefaultLiteral(text, isinstance(value, str)), tz)))
            except (ColumnValueError, ArithmeticError, ValueError) as exc:
                return OlderValue(new, unknown=f"{value!r} of a {self.type} column as {new}: {exc}")
        return OlderValue(new, unknown=f"tidelake does not convert a {self.type} value to {new}")


def _fsp_rounded(value: dt.date | dt.timedelta, fsp: int) -> dt.date | dt.timedelta:
    """A DATETIME, TIMESTAMP or TIME at ``fsp`` fractional digits: MySQL rounds the fraction (a DATE has none)."""
    step = 10 ** (6 - max(0, min(fsp, 6)))
    micros = value.microseconds if isinstance(value, dt.timedelta) else getattr(value, "microsecond", 0)
    cut = micros % step
    if not cut:
        return value
    return value + dt.timedelta(microseconds=(step - cut) if cut * 2 >= step else -cut)


def _implicit_default(ct: ColumnType) -> Any:
    k = ct.kind
    if k in INTEGER_KINDS:
        return 0
    if k is TypeKind.BOOLEAN:
        return False
    if k in (TypeKind.FLOAT, TypeKind.DOUBLE):
        return 0.0
    if k is TypeKind.DECIMAL:
        return Decimal(0).scaleb(-(ct.scale or 0))
    if k in (TypeKind.STRING, TypeKind.SET):
        return ""
    if k is TypeKind.ENUM and ct.elements:
        return ct.elements[0]
    if k is TypeKind.BINARY:
        return stored_binary(ct, b"")
    if k in (TypeKind.DATE, TypeKind.TIMESTAMP, TypeKind.TIMESTAMPTZ):
        return None  # the zero date
    if k is TypeKind.TIME:
        return dt.timedelta(0)
    raise ValueNotReproducible(f"the implicit default of a NOT NULL {ct} column is not known to tidelake")


def _statement_time(ct: ColumnType, fsp: int, at_ms: int, tz: dt.tzinfo) -> Any:
    instant = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(milliseconds=at_ms)
    step = 10 ** (6 - max(0, min(fsp, 6)))
    instant = instant.replace(microsecond=instant.microsecond - instant.microsecond % step)
    if ct.kind is TypeKind.TIMESTAMPTZ:
        return instant
    if ct.kind is TypeKind.TIMESTAMP:
        return instant.astimezone(tz).replace(tzinfo=None)
    if ct.kind is TypeKind.DATE:
        return instant.astimezone(tz).date()
    raise ValueNotReproducible(f"a {ct} column defaulting to the statement's time")


MAX_DECIMAL_DIGITS = 65  # MySQL's DECIMAL holds at most 65 digits


def _year(text: str, is_string: bool) -> int:
    """A YEAR from a literal (MySQL 8.0 manual, "The YEAR Type"): a 1- or 2-digit number 1-69 is
    2001-2069 and 70-99 is 1970-1999 (0 is the year 0); a 1- or 2-digit string '0'-'69' is
    2000-2069 and '70'-'99' 1970-1999."""
    n = int(Decimal(text).to_integral_value(ROUND_HALF_UP))
    two_digits = len(text.strip().lstrip("+-")) <= 2 if is_string else 0 < n <= 99
    if two_digits and 0 <= n <= 99:
        return n + (2000 if n < 70 else 1900)
    return n


def _literal_value(ct: ColumnType, literal: DefaultLiteral, tz: dt.tzinfo) -> Any:
    k, value = ct.kind, literal.value
    if isinstance(value, bytes):  # hexadecimal and bit literals: a number in a numeric column, else bytes
        if k in INTEGER_KINDS or k in (TypeKind.BOOLEAN, TypeKind.DECIMAL, TypeKind.FLOAT, TypeKind.DOUBLE):
            value = str(int.from_bytes(value, "big"))
        elif k in BYTES_KINDS:
            return stored_binary(ct, value)
        else:
            value = value.decode("utf-8")
    if k in BYTES_KINDS:
        return stored_binary(ct, value.encode("utf-8"))
    if ct.mysql_type == "char":
        # MySQL removes a CHAR value's trailing spaces when it is read (and so the binlog carries
        # none): DEFAULT 'ab  ' reads 'ab' (8.0 manual, "The CHAR and VARCHAR Types").
        value = value.rstrip(" ")
    if k is TypeKind.ENUM and literal.is_string:
        return value  # a member's name, even when it is digits (a number is the member's index)
    if k is TypeKind.SET and literal.is_string and ct.elements:
        members = set(value.split(",")) if value else set()
        return ",".join(e for e in ct.elements if e in members)  # MySQL stores members in definition order
    if k is TypeKind.BOOLEAN:
        return Decimal(value) != 0
    if k is TypeKind.YEAR:
        return to_int(ct, _year(value, literal.is_string))
    if k in INTEGER_KINDS and k is not TypeKind.BIT:
        return to_int(ct, str(Decimal(value).to_integral_value(ROUND_HALF_UP)))  # MySQL rounds 7.5 to 8
    if k is TypeKind.DECIMAL:
        with localcontext() as exact:  # DECIMAL(65, 30): beyond the default context's 28 digits
            exact.prec = MAX_DECIMAL_DIGITS
            return Decimal(value).quantize(Decimal(1).scaleb(-(ct.scale or 0)), ROUND_HALF_UP)
    return from_text(ct, value, tz)
