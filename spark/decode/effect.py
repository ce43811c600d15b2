"""The change log's ``change`` column: a key effect's operation and row image, as MessagePack.

Every change-log row carries one, written once per change on decode and read once per touched
key on rewrite, so its cost is per row on both sides. msgspec's MessagePack carries None, bool,
64-bit ints, floats, str and bytes exactly, in ~0.6 us for a typical row where pickle took ~12 us
(a tz-aware datetime alone cost 5 us to pickle). Values MessagePack cannot carry exactly travel
as extensions: Decimal as its text (exponent kept), datetime (naive or UTC), date and time as
their packed fields (``isoformat`` alone costs 1.5-2.5 us); anything else (ints beyond 64 bits, the codecs'
``EnumIndex``/``SetMask``, lists, other time zones) pickled, so the encoding is lossless for any
value a decoder yields.
"""

from __future__ import annotations

import datetime as dt
import pickle
import struct
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import msgspec

from cdc_codecs import Op

_DECIMAL, _DATETIME, _DATETIME_UTC, _DATE, _TIME, _PICKLED = 1, 2, 3, 4, 5, 6
_DATETIME_FIELDS = struct.Struct("<HBBBBBI")  # year, month, day, hour, minute, second, microsecond
_DATE_FIELDS = struct.Struct("<HBB")
_TIME_FIELDS = struct.Struct("<BBBI")
_EXACT = frozenset({str, bool, float, bytes, type(None)})  # MessagePack carries these exactly...
_AS_IS = _EXACT | {int}  # ... and ints within 64 bits, which the encoder checks (OverflowError)
_INT_RANGE = (-(1 << 63), 1 << 64)  # MessagePack's int64 and uint64

_encoder = msgspec.msgpack.Encoder()


def _value(v: Any) -> Any:
    t = type(v)
    if t is int:
        return v if _INT_RANGE[0] <= v < _INT_RANGE[1] else msgspec.msgpack.Ext(_PICKLED, pickle.dumps(v, protocol=5))
    if t is Decimal:
        return msgspec.msgpack.Ext(_DECIMAL, str(v).encode("ascii"))
    if t is dt.datetime and not v.fold and (v.tzinfo is None or v.tzinfo is dt.UTC):
        fields = _DATETIME_FIELDS.pack(v.year, v.month, v.day, v.hour, v.minute, v.second, v.microsecond)
        return msgspec.msgpack.Ext(_DATETIME if v.tzinfo is None else _DATETIME_UTC, fields)
    if t is dt.date:
        return msgspec.msgpack.Ext(_DATE, _DATE_FIELDS.pack(v.year, v.month, v.day))
    if t is dt.time and not v.fold and v.tzinfo is None:
        return msgspec.msgpack.Ext(_TIME, _TIME_FIELDS.pack(v.hour, v.minute, v.second, v.microsecond))
    return msgspec.msgpack.Ext(_PICKLED, pickle.dumps(v, protocol=5))


def _ext(code: int, data: memoryview) -> Any:
    if code == _DECIMAL:
        return Decimal(bytes(data).decode("ascii"))
    if code == _DATETIME:
        return dt.datetime(*_DATETIME_FIELDS.unpack(data))
    if code == _DATETIME_UTC:
        return dt.datetime(*_DATETIME_FIELDS.unpack(data), tzinfo=dt.UTC)
    if code == _DATE:
        return dt.date(*_DATE_FIELDS.unpack(data))
    if code == _TIME:
        return dt.time(*_TIME_FIELDS.unpack(data))
    if code == _PICKLED:
        return pickle.loads(data)
    raise ValueError(f"change-log value: unknown MessagePack extension {code}")


_decoder = msgspec.msgpack.Decoder(ext_hook=_ext)


def encode_effect(op: Op, image: Mapping[str, Any]) -> bytes:
    """A key effect's ``change`` column: the operation and the row image (the deleted key's for a delete)."""
    as_is = _AS_IS
    # ``op`` as it is: msgspec encodes a str enum as its value, without Enum.value's descriptor call.
    try:
        return _encoder.encode((op, {k: v if type(v) in as_is else _value(v) for k, v in image.items()}))
    except OverflowError:  # an int beyond 64 bits: rare, so ints are not range-checked one by one
        return _encoder.encode((op, {k: v if type(v) in _EXACT else _value(v) for k, v in image.items()}))


_OPS = {op.value: op for op in Op}  # a dict lookup: Op(value) costs ~1 us a row


def decode_effect(blob: bytes) -> tuple[Op, dict[str, Any]]:
    op, image = _decoder.decode(blob)
    return _OPS[op], image
