"""The change log's ``change`` column: a key effect's operation and row image, as MessagePack.

Every change-log row carries one, written once per change on decode and read once per touched
key on rewrite, so its cost is per row on both sides. msgspec's MessagePack carries None, bool,
64-bit ints, floats, str and bytes exactly, in ~0.6 us for a typical row where pickle took ~12 us.
Every other value a decoder yields travels as one of the extension types below, each a
documented byte layout (docs/archive.md, "change"), so any MessagePack reader can read the
change log and reading it never runs code. A value of any other type fails the write
(``UnsupportedChangeValue``) instead of being stored in a form only Python could read.

| code | value | bytes |
|---|---|---|
| 1 | Decimal | its text, ASCII (``str(value)``: exponent and trailing zeros kept) |
| 2 | naive datetime | little-endian u16 year, u8 month, day, hour, minute, second, u32 microsecond (``fold`` is not kept: it means nothing without a zone) |
| 3 | datetime in UTC | as 2 |
| 4 | date | u16 year, u8 month, u8 day |
| 5 | time of day (no zone) | u8 hour, minute, second, u32 microsecond |
| 6 | (retired: a pickle, format <= 4; refused) | |
| 7 | int beyond 64 bits | its decimal text, ASCII |
| 8 | datetime in another zone | ISO 8601 text with its UTC offset, ASCII (read back in that fixed offset) |
| 9 | timedelta (MySQL TIME) | i32 days, i32 seconds, i32 microseconds |
| 10 | ENUM as its index (``EnumIndex``) | the index text, UTF-8 |
| 11 | SET as its mask (``SetMask``) | the mask text, UTF-8 |
| 12 | list | a MessagePack array of values encoded the same way |
"""

from __future__ import annotations

import datetime as dt
import struct
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

import msgspec

from cdc_codecs import Op, TidelakeError
from cdc_codecs.types import ColumnType, EnumIndex, SetMask, TypeKind

(_DECIMAL, _DATETIME, _DATETIME_UTC, _DATE, _TIME, _RETIRED_PICKLE, _BIG_INT, _DATETIME_ZONED, _TIMEDELTA,
 _ENUM_INDEX, _SET_MASK, _LIST) = range(1, 13)
_DATETIME_FIELDS = struct.Struct("<HBBBBBI")  # year, month, day, hour, minute, second, microsecond
_DATE_FIELDS = struct.Struct("<HBB")
_TIME_FIELDS = struct.Struct("<BBBI")
_TIMEDELTA_FIELDS = struct.Struct("<iii")  # days, seconds, microseconds: timedelta's own normal form
_EXACT = frozenset({str, bool, float, bytes, type(None)})  # MessagePack carries these exactly...
_AS_IS = _EXACT | {int}  # ... and ints within 64 bits, which the encoder checks (OverflowError)
_INT_RANGE = (-(1 << 63), 1 << 64)  # MessagePack's int64 and uint64

_encoder = msgspec.msgpack.Encoder()


class UnsupportedChangeValue(TidelakeError):
    """A decoded value of a type the change log has no documented encoding for."""


class CorruptChangeValue(TidelakeError):
    """A change-log value this version does not read: an unknown extension, a retired pickle, bytes
    no value has (DECIMAL text that is not a number, a TIME or date beyond Python's range, a layout
    of the wrong length), or a change that is not an operation and a row image (a map)."""


def _value(v: Any) -> Any:
    t = type(v)
    if t is int:
        return v if _INT_RANGE[0] <= v < _INT_RANGE[1] else msgspec.msgpack.Ext(_BIG_INT, str(v).encode("ascii"))
    if t is Decimal:
        return msgspec.msgpack.Ext(_DECIMAL, str(v).encode("ascii"))
    if t is dt.datetime:
        if v.tzinfo is None or v.tzinfo is dt.UTC:
            fields = _DATETIME_FIELDS.pack(v.year, v.month, v.day, v.hour, v.minute, v.second, v.microsecond)
            return msgspec.msgpack.Ext(_DATETIME if v.tzinfo is None else _DATETIME_UTC, fields)
        return msgspec.msgpack.Ext(_DATETIME_ZONED, v.isoformat().encode("ascii"))
    if t is dt.date:
        return msgspec.msgpack.Ext(_DATE, _DATE_FIELDS.pack(v.year, v.month, v.day))
    if t is dt.time and v.tzinfo is None:
        return msgspec.msgpack.Ext(_TIME, _TIME_FIELDS.pack(v.hour, v.minute, v.second, v.microsecond))
    if t is dt.timedelta:
        return msgspec.msgpack.Ext(_TIMEDELTA, _TIMEDELTA_FIELDS.pack(v.days, v.seconds, v.microseconds))
    if t is EnumIndex:
        return msgspec.msgpack.Ext(_ENUM_INDEX, v.encode("utf-8"))
    if t is SetMask:
        return msgspec.msgpack.Ext(_SET_MASK, v.encode("utf-8"))
    if t is list:
        return msgspec.msgpack.Ext(_LIST, _encoder.encode([x if type(x) in _EXACT else _value(x) for x in v]))
    raise UnsupportedChangeValue(f"change log: a value of type {t.__module__}.{t.__qualname__} has no documented encoding")


def _ext(code: int, data: memoryview) -> Any:
    if code == _DECIMAL:
        return Decimal(bytes(data).decode("ascii"))  # InvalidOperation (an ArithmeticError) if not a number
    if code == _DATETIME:
        return dt.datetime(*_DATETIME_FIELDS.unpack(data))
    if code == _DATETIME_UTC:
        return dt.datetime(*_DATETIME_FIELDS.unpack(data), tzinfo=dt.UTC)
    if code == _DATE:
        return dt.date(*_DATE_FIELDS.unpack(data))
    if code == _TIME:
        return dt.time(*_TIME_FIELDS.unpack(data))
    if code == _BIG_INT:
        return int(bytes(data).decode("ascii"))
    if code == _DATETIME_ZONED:
        return dt.datetime.fromisoformat(bytes(data).decode("ascii"))
    if code == _TIMEDELTA:
        days, seconds, micros = _TIMEDELTA_FIELDS.unpack(data)
        return dt.timedelta(days, seconds, micros)  # OverflowError beyond 999999999 days
    if code == _ENUM_INDEX:
        return EnumIndex(bytes(data).decode("utf-8"))
    if code == _SET_MASK:
        return SetMask(bytes(data).decode("utf-8"))
    if code == _LIST:
        return _list_decoder.decode(data)
    if code == _RETIRED_PICKLE:
        raise CorruptChangeValue("a pickled value (extension 6, change-log format <= 4) is never unpickled")
    raise CorruptChangeValue(f"unknown MessagePack extension {code}")


# A change is an operation and a row image (a map of column names); msgspec checks that shape as
# it decodes, before any value is used. List values are arrays of values.
_decoder = msgspec.msgpack.Decoder(tuple[Op, dict[str, Any]], ext_hook=_ext)
_list_decoder = msgspec.msgpack.Decoder(list[Any], ext_hook=_ext)


def encode_effect(op: Op, image: Mapping[str, Any]) -> bytes:
    """A key effect's ``change`` column: the operation and the row image (the deleted key's for a delete)."""
    as_is = _AS_IS
    # ``op`` as it is: msgspec encodes a str enum as its value, without Enum.value's descriptor call.
    try:
        return _encoder.encode((op, {k: v if type(v) in as_is else _value(v) for k, v in image.items()}))
    except OverflowError:  # an int beyond 64 bits: rare, so ints are not range-checked one by one
        return _encoder.encode((op, {k: v if type(v) in _EXACT else _value(v) for k, v in image.items()}))


# The usual stored form of a column's values, by its kind, inlined by ``image_encoder``: the
# expression for value ``{v}``, which is one of the kind's usual Python type (anything else,
# None included, goes through ``store``, exactly as ``encode_effect`` would).
_INLINE = {
    TypeKind.DECIMAL: "Ext(1, str({v}).encode('ascii')) if type({v}) is Decimal else store({v})",
    TypeKind.TIMESTAMP: ("Ext(2, pack({v}.year, {v}.month, {v}.day, {v}.hour, {v}.minute, {v}.second, {v}.microsecond)) "
                         "if type({v}) is datetime and {v}.tzinfo is None else store({v})"),
    TypeKind.TIMESTAMPTZ: ("Ext(3, pack({v}.year, {v}.month, {v}.day, {v}.hour, {v}.minute, {v}.second, {v}.microsecond)) "
                           "if type({v}) is datetime and {v}.tzinfo is UTC else store({v})"),
    TypeKind.DATE: "Ext(4, pack_date({v}.year, {v}.month, {v}.day)) if type({v}) is date else store({v})",
}
assert (_DECIMAL, _DATETIME, _DATETIME_UTC, _DATE) == (1, 2, 3, 4)  # the codes written above


def _store(v: Any) -> Any:
    return v if type(v) in _AS_IS else _value(v)


def image_encoder(column_types: Mapping[str, ColumnType]) -> Callable[[Op, Mapping[str, Any]], bytes]:
    """``encode_effect`` for images of a table schema, compiled once per schema: the same bytes,
    with each column's usual values stored inline (``_INLINE``) instead of through a type
    dispatch per value -- it runs once per change on decode. An image with other columns, or in
    another order (a delete's key image, Canal's partial ``old``), and an int beyond 64 bits take
    ``encode_effect`` itself. Column names reach the code only as bound values."""
    names = tuple(column_types)
    if not names:
        return encode_effect
    namespace: dict[str, Any] = {
        "Ext": msgspec.msgpack.Ext, "Decimal": Decimal, "datetime": dt.datetime, "date": dt.date, "UTC": dt.UTC,
        "pack": _DATETIME_FIELDS.pack, "pack_date": _DATE_FIELDS.pack, "store": _store, "AS_IS": _AS_IS,
        "encode": _encoder.encode, "encode_effect": encode_effect, "names": names,
    }
    reads, items = [], []
    for i, (name, ct) in enumerate(column_types.items()):
        v, n = f"v{i}", f"n{i}"
        namespace[n] = name
        reads.append(f"{v} = image[{n}]")
        items.append(f"{n}: " + _INLINE.get(ct.kind, "{v} if type({v}) in AS_IS else store({v})").format(v=v))
    body = "\n".join([
        "def encode_image(op, image):",
        "    if tuple(image) == names:",
        *(f"        {r}" for r in reads),
        "        try:",
        f"            return encode((op, {{{', '.join(items)}}}))",
        "        except OverflowError:",
        "            pass",
        "    return encode_effect(op, image)",
    ])
    exec(compile(body, f"<image encoder for {len(names)} columns>", "exec"), namespace)
    return namespace["encode_image"]


def decode_effect(blob: bytes) -> tuple[Op, dict[str, Any]]:
    """Raises:
        CorruptChangeValue: not a change this version wrote (the caller names where it lies).
    """
    try:
        return _decoder.decode(blob)
    except CorruptChangeValue:
        raise
    except (msgspec.DecodeError, ValueError, TypeError, KeyError, struct.error, ArithmeticError, RecursionError) as exc:
        # ValueError: msgspec's ValidationError, a date out of range, text that is not ASCII or a number
        # ArithmeticError: decimal.InvalidOperation, OverflowError (a timedelta beyond Python's)
        raise CorruptChangeValue(f"not a change-log change: {type(exc).__name__}: {exc}") from None
