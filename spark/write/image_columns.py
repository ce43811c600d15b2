"""Row images of the change log's ``change`` column, read column-wise into a table's Arrow columns.

The rewrite turns every touched key's image back into the table's columns. One by one that is
``effect.decode_effect`` (a Python object per value, a ``Decimal`` or ``datetime`` per extension)
and ``schema_map.arrow_table`` (a Python list per column): ~5 us a row, most of a rewrite. The
images of one table mostly share one shape -- ``encode_effect`` writes ``[op, {name: value, ...}]``
with the same names in the same order -- so this module walks all of them at once in numpy: a
byte position per image, moved across each name and value by MessagePack's own length rules,
and builds each column from the values' bytes (ints from their big-endian bytes, strings and
binaries as spans of the buffer, DECIMAL text cast by Arrow, datetimes from their documented
fields; ``effect.py`` documents the extension layouts read here).

It reads only what it can read exactly as the one-by-one path does. An image is *declined* --
left to that path, which decodes it or raises the error naming it -- when its names or their
order differ from the first image's, when it is not canonical MessagePack of that shape, or when
a value is of a kind its column does not take as it is (``schema_map.to_iceberg_value`` would
change or refuse it: a bool in a LONG column, an aware datetime in a TIMESTAMP one, an ENUM index,
DECIMAL text in exponent form, a datetime field out of range, a uint64 beyond a LONG). A check
only Arrow makes over a whole column (UTF-8, a DECIMAL's precision and scale) declines every
image (``read_images`` returns None). ``tests/spark/write/test_image_columns.py`` holds the two
paths to the same table over every column type, its extremes and byte mutations.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
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
    StringType,
    TimestampType,
    TimestamptzType,
)

from cdc_codecs import Op
from spark.decode import effect
from spark.tables.schema_map import arrow_type

# What a value's first byte says it is (MessagePack's type byte), as this reader's kinds.
_BAD, _NIL, _FALSE, _TRUE, _INT, _UINT64, _FLOAT32, _FLOAT64, _STR, _BIN, _EXT = range(11)
_KIND = np.full(256, _BAD, np.int8)
_SIZE = np.zeros(256, np.int64)  # the whole value's bytes, for a fixed-size value; else 0
_HEAD = np.zeros(256, np.int64)  # bytes before the payload (type byte, length, extension type)
_LENGTH_BYTES = np.zeros(256, np.int64)  # a variable value's big-endian length width, after the type byte
_INT_BYTES = np.zeros(256, np.int64)  # an int's big-endian width after the type byte (0: the byte itself)
_SIGN_BIT = np.zeros(256, np.uint64)
for _t in range(0x00, 0x80):
    _KIND[_t], _SIZE[_t] = _INT, 1
for _t in range(0xE0, 0x100):
    _KIND[_t], _SIZE[_t] = _INT, 1
for _t in range(0xA0, 0xC0):
    _KIND[_t], _SIZE[_t], _HEAD[_t] = _STR, 1 + (_t & 0x1F), 1
for _t, _kind in ((0xC0, _NIL), (0xC2, _FALSE), (0xC3, _TRUE)):
    _KIND[_t], _SIZE[_t] = _kind, 1
for _t, _width, _signed in ((0xCC, 1, False), (0xCD, 2, False), (0xCE, 4, False), (0xD0, 1, True), (0xD1, 2, True),
                            (0xD2, 4, True), (0xD3, 8, True)):
    _KIND[_t], _SIZE[_t], _INT_BYTES[_t] = _INT, 1 + _width, _width
    if _signed and _width < 8:
        _SIGN_BIT[_t] = 1 << (8 * _width - 1)
_KIND[0xCF], _SIZE[0xCF], _INT_BYTES[0xCF] = _UINT64, 9, 8
_KIND[0xCA], _SIZE[0xCA], _HEAD[0xCA] = _FLOAT32, 5, 1
_KIND[0xCB], _SIZE[0xCB], _HEAD[0xCB] = _FLOAT64, 9, 1
for _t, _kind, _width in ((0xD9, _STR, 1), (0xDA, _STR, 2), (0xDB, _STR, 4), (0xC4, _BIN, 1), (0xC5, _BIN, 2), (0xC6, _BIN, 4)):
    _KIND[_t], _HEAD[_t], _LENGTH_BYTES[_t] = _kind, 1 + _width, _width
for _t, _payload in ((0xD4, 1), (0xD5, 2), (0xD6, 4), (0xD7, 8), (0xD8, 16)):  # fixext: type byte, extension type, payload
    _KIND[_t], _SIZE[_t], _HEAD[_t] = _EXT, 2 + _payload, 2
for _t, _width in ((0xC7, 1), (0xC8, 2), (0xC9, 4)):  # ext 8/16/32: type byte, length, extension type, payload
    _KIND[_t], _HEAD[_t], _LENGTH_BYTES[_t] = _EXT, 2 + _width, _width
_PAD = 32  # zero bytes after the buffer: a read past an image's end (at most ~20 bytes; a name's, clamped) stays in memory, and is declined

# str(Decimal) of a finite value: digits, maybe a fraction, maybe an exponent (0E-10 is 0 at scale 10).
_DECIMAL_TEXT = r"^-?(?P<int>[0-9]+)(?:\.(?P<fraction>[0-9]+))?(?:E(?P<exponent>[+-]?[0-9]{1,4}))?$"
_MAX_DIGITS = 38  # beyond them Arrow's 128-bit parse wraps (schema_map._within_decimal128)
_OPS = tuple(op.value for op in Op)


@dataclass(frozen=True)
class ImageColumns:
    """The images read: ``table`` (the requested columns of the ``read`` rows, in their order),
    ``ops`` (each read row's operation, ``Op`` values), and ``read`` (a mask over every image)."""

    table: pa.Table
    ops: pa.Array
    read: np.ndarray


def read_images(blobs: pa.Array, fields: Sequence[tuple[str, IcebergType]], names: Sequence[str]) -> ImageColumns | None:
    """The images in ``blobs`` (``encode_effect`` bytes) as Arrow columns of ``fields`` (name,
    Iceberg type; a field no image names is all null), where every image names exactly ``names``
    in that order (the first image's names). None where no image can be read column-wise."""
    column_of = {name: i for i, (name, _) in enumerate(fields)}
    if any(name not in column_of for name in names) or len(names) > 0xFFFF \
            or not all(_takes(t) for _, t in fields):
        return None
    walk = _Walk(blobs.combine_chunks() if isinstance(blobs, pa.ChunkedArray) else blobs)
    walk.expect(b"\x92")
    op_at, op_length = walk.value(_STR)
    header = bytes([0x80 | len(names)]) if len(names) < 16 else b"\xde" + len(names).to_bytes(2, "big")
    walk.expect(header)
    values: dict[str, _Values] = {}
    for name in names:
        walk.expect(_name_bytes(name))
        values[name] = walk.any_value()
    walk.ok &= walk.pos == walk.end  # nothing after the image (msgspec refuses trailing bytes)
    ops = walk.ops(op_at, op_length)
    # Each column's values read; an image with a value its column does not take is declined.
    arrays: dict[str, pa.Array] = {}
    for name, t in fields:
        if name in values:
            array = _column(walk, values[name], t)
            if array is None:
                return None
            arrays[name] = array
    read = walk.ok & (ops >= 0)
    rows = int(read.sum())
    mask = pa.array(read)
    columns = [arrays[name].filter(mask) if name in arrays else pa.nulls(rows, arrow_type(t)) for name, t in fields]
    try:
        table = pa.Table.from_arrays(columns, schema=pa.schema([pa.field(n, arrow_type(t)) for n, t in fields]))
        for array, (name, t) in zip(columns, fields):
            if isinstance(t, StringType):
                array.validate(full=True)  # UTF-8, which msgspec checks per str
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None
    return ImageColumns(table, pa.array(np.array(_OPS, object)[ops[read]], pa.string()), read)


def _name_bytes(name: str) -> bytes:
    encoded = name.encode("utf-8")
    n = len(encoded)
    if n < 32:
        return bytes([0xA0 | n]) + encoded
    if n < 0x100:
        return b"\xd9" + bytes([n]) + encoded
    if n < 0x10000:
        return b"\xda" + n.to_bytes(2, "big") + encoded
    return b"\xdb" + n.to_bytes(4, "big") + encoded


@dataclass
class _Values:
    """One column's value in every image: its kind, where it starts, its payload and payload length."""

    kind: np.ndarray
    at: np.ndarray
    payload: np.ndarray
    length: np.ndarray
    type_byte: np.ndarray


class _Walk:
    """A byte position in each image, moved across it as it is read; ``ok`` false where an image
    is not what was expected (its position then means nothing, and is kept within the buffer).

    Bytes are read eight at a time: ``words[i]`` is the little-endian uint64 of bytes i..i+7 (a
    view of the buffer with a stride of one byte), so a name, an int or a datetime's fields is one
    gather for every image at once, not one per byte."""

    def __init__(self, blobs: pa.Array) -> None:
        if not pa.types.is_binary(blobs.type) and not pa.types.is_large_binary(blobs.type):
            blobs = blobs.cast(pa.binary())
        n = len(blobs)
        width = np.int64 if pa.types.is_large_binary(blobs.type) else np.int32
        offsets, data = blobs.buffers()[1:3]
        bounds = np.frombuffer(offsets, width)[blobs.offset: blobs.offset + n + 1].astype(np.int64)
        raw = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
        self.size = len(raw)
        self.data = np.concatenate([raw, np.zeros(_PAD, np.uint8)])
        self.words = np.ndarray((self.size + _PAD - 7,), "<u8", buffer=self.data, strides=(1,))
        self.pos, self.end = bounds[:-1].copy(), bounds[1:]
        self.ok = blobs.is_valid().to_numpy(zero_copy_only=False) if blobs.null_count else np.ones(n, bool)

    def byte(self, at: np.ndarray, k: int = 0) -> np.ndarray:
        return self.data[at + k]

    def word(self, at: np.ndarray) -> np.ndarray:
        return self.words[at]

    def big_endian(self, at: np.ndarray, width: np.ndarray) -> np.ndarray:
        """The unsigned big-endian int of ``width`` (0..8) bytes at ``at``, per image."""
        swapped = self.words[at].byteswap()
        shift = (64 - 8 * np.asarray(width, np.int64)).astype(np.uint64)
        return np.where(shift >= 64, np.uint64(0), swapped >> np.minimum(shift, np.uint64(63)))

    def _advance(self, size: np.ndarray | int) -> None:
        self.pos += size
        self.ok &= self.pos <= self.end
        np.minimum(self.pos, self.size, out=self.pos)  # a declined image's garbage length stays in the buffer

    def expect(self, expected: bytes) -> None:
        for k in range(0, len(expected), 8):
            chunk = expected[k:k + 8]
            # A declined image's position may be at the buffer's end, a long name's length before its last word.
            word = self.words[np.minimum(self.pos + k, len(self.words) - 1)]
            if len(chunk) < 8:
                word &= np.uint64((1 << (8 * len(chunk))) - 1)
            self.ok &= word == np.uint64(int.from_bytes(chunk, "little"))
        self._advance(len(expected))

    def any_value(self) -> _Values:
        at = self.pos.copy()
        t = self.data[at]
        kind = _KIND[t]
        head = _HEAD[t]
        variable = _LENGTH_BYTES[t]
        length = np.where(variable > 0, self.big_endian(at + 1, variable).astype(np.int64), _SIZE[t] - head)
        self.ok &= kind != _BAD
        self._advance(head + length)
        return _Values(kind, at, at + head, length, t)

    def value(self, kind: int) -> tuple[np.ndarray, np.ndarray]:
        v = self.any_value()
        self.ok &= v.kind == kind
        return v.payload, v.length

    def ops(self, at: np.ndarray, length: np.ndarray) -> np.ndarray:
        """The index of each image's operation in ``_OPS`` (-1: none of them)."""
        out = np.full(len(at), -1, np.int64)
        word = self.words[at]
        for i, op in enumerate(_OPS):
            encoded = op.encode("ascii")
            assert len(encoded) <= 8
            mask = np.uint64((1 << (8 * len(encoded))) - 1)
            out[(length == len(encoded)) & ((word & mask) == np.uint64(int.from_bytes(encoded, "little")))] = i
        return out

    def ints(self, v: _Values) -> tuple[np.ndarray, np.ndarray]:
        """Each int value as int64, and where it is a uint64 beyond int64 (its bits are then the uint64's)."""
        raw = self.big_endian(v.at + 1, _INT_BYTES[v.type_byte])
        sign = _SIGN_BIT[v.type_byte]  # int8..int32's sign bit: 2 ** (8 * width - 1); else 0
        values = np.where((raw & sign) != 0, raw - (sign << np.uint64(1)), raw)
        t = v.type_byte
        values = np.where(t >= 0xE0, t.astype(np.int64) - 256, np.where(t < 0x80, t, values.view(np.int64)))
        return values, (v.kind == _UINT64) & (raw >= np.uint64(1 << 63))

    def spans(self, v: _Values, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Arrow offsets and data of the payloads of ``v`` (empty where not ``mask``)."""
        length = np.where(mask, v.length, 0)
        offsets = np.zeros(len(length) + 1, np.int64)
        np.cumsum(length, out=offsets[1:])
        total = int(offsets[-1])
        if total == 0:
            return offsets, np.zeros(0, np.uint8)
        return offsets, self.data[np.repeat(v.payload - offsets[:-1], length) + np.arange(total)]

    def ext(self, v: _Values) -> np.ndarray:
        """Each value's extension type (-1 where not an extension)."""
        return np.where(v.kind == _EXT, self.data[v.payload - 1].astype(np.int64), -1)


def _takes(t: IcebergType) -> bool:
    return isinstance(t, (BooleanType, IntegerType, LongType, FloatType, DoubleType, StringType, BinaryType, DecimalType,
                          DateType, TimestampType, TimestamptzType))


def _binary_array(walk: _Walk, v: _Values, mask: np.ndarray, valid: np.ndarray) -> pa.Array:
    offsets, data = walk.spans(v, mask)
    bitmap = pa.array(valid).buffers()[1]
    if offsets[-1] >= 1 << 31:
        return pa.Array.from_buffers(pa.large_binary(), len(mask), [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)])
    return pa.Array.from_buffers(pa.binary(), len(mask), [bitmap, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)])


def _column(walk: _Walk, v: _Values, t: IcebergType) -> pa.Array | None:
    """The column ``t`` of every image's value ``v``; images whose value it does not take as it is
    are declined (``walk.ok``). None: Arrow refused the column (decline every image)."""
    nil = v.kind == _NIL
    at = arrow_type(t)
    if isinstance(t, (LongType, IntegerType)):
        values, beyond = walk.ints(v)
        ok = nil | ((v.kind == _INT) | (v.kind == _UINT64)) & ~beyond
        if isinstance(t, IntegerType):
            ok &= nil | ((values >= -(1 << 31)) & (values < (1 << 31)))
        walk.ok &= ok
        return pa.array(np.where(ok & ~nil, values, 0).astype(at.to_pandas_dtype()), at, mask=nil)
    if isinstance(t, BooleanType):
        walk.ok &= nil | (v.kind == _TRUE) | (v.kind == _FALSE)
        return pa.array(v.kind == _TRUE, at, mask=nil)
    if isinstance(t, (DoubleType, FloatType)):
        is32, is64 = v.kind == _FLOAT32, v.kind == _FLOAT64
        walk.ok &= nil | is32 | is64
        raw = walk.big_endian(v.payload, np.where(is32, 4, 8))
        with np.errstate(invalid="ignore", over="ignore"):  # a declined image's bytes are no float
            doubles = np.where(is32, raw.astype(np.uint32).view(np.float32).astype(np.float64), raw.view(np.float64))
            floats = doubles.astype(np.float32)
        if isinstance(t, FloatType):
            walk.ok &= ~(np.isinf(floats) & ~np.isinf(doubles))  # beyond float32: to_iceberg_value refuses it
            return pa.array(floats, at, mask=nil)
        return pa.array(doubles, at, mask=nil)
    if isinstance(t, (StringType, BinaryType)):
        kind = _STR if isinstance(t, StringType) else _BIN
        take = v.kind == kind
        walk.ok &= nil | take
        array = _binary_array(walk, v, take & walk.ok, take)
        return array.view(pa.large_string() if pa.types.is_large_binary(array.type) else pa.string()).cast(pa.string()) \
            if kind == _STR else array.cast(pa.binary())
    ext = walk.ext(v)
    if isinstance(t, DecimalType):
        return _decimals(walk, v, ext, nil, at)
    code, width = {DateType: (effect._DATE, 4), TimestampType: (effect._DATETIME, 11),
                   TimestamptzType: (effect._DATETIME_UTC, 11)}[type(t)]
    take = (ext == code) & (v.length == width)
    walk.ok &= nil | take
    # effect.py's layouts: u16 year, u8 month, day (a date ends there), hour, minute, second, u32 microsecond.
    fields = walk.word(v.payload)
    year = (fields & np.uint64(0xFFFF)).astype(np.int64)
    month, day, hour, minute, second = ((fields >> np.uint64(8 * k)) & np.uint64(0xFF) for k in (2, 3, 4, 5, 6))
    month, day = month.astype(np.int64), day.astype(np.int64)
    # Python's date range (the one-by-one path builds datetimes): any other is declined, and raises there.
    valid = (year >= 1) & (year <= 9999) & (month >= 1) & (month <= 12) & (day >= 1)
    months = np.where(valid, (year - 1970) * 12 + month - 1, 0).astype("datetime64[M]")
    first = months.astype("datetime64[D]")
    valid &= day <= ((months + 1).astype("datetime64[D]") - first).astype(np.int64)
    days = first.astype(np.int64) + day - 1
    if isinstance(t, DateType):
        walk.ok &= nil | valid
        return pa.array(np.where(take & valid, days, 0).astype(np.int32), at, mask=~take)
    micro = (walk.word(v.payload + 7) & np.uint64(0xFFFFFFFF)).astype(np.int64)
    hour, minute, second = hour.astype(np.int64), minute.astype(np.int64), second.astype(np.int64)
    valid &= (hour < 24) & (minute < 60) & (second < 60) & (micro < 1_000_000)
    walk.ok &= nil | valid
    stamp = (((days * 24 + hour) * 60 + minute) * 60 + second) * 1_000_000 + micro
    return pa.array(np.where(take & valid, stamp, 0), at, mask=~take)


def _decimals(walk: _Walk, v: _Values, ext: np.ndarray, nil: np.ndarray, at: pa.DataType) -> pa.Array | None:
    """A DECIMAL column from DECIMAL text (extension 1) and ints (BIGINT UNSIGNED's decimal(20, 0)),
    each cast by Arrow, as Arrow builds the column from Python's Decimal and int: exactly, or
    refusing a value that does not fit (then every image is declined, and the one-by-one path
    names the value)."""
    text = ext == effect._DECIMAL
    ints, beyond = walk.ints(v)
    is_int = ((v.kind == _INT) | (v.kind == _UINT64)) & walk.ok
    text_ok = text & walk.ok & (v.length <= 48)
    digits = _binary_array(walk, v, text_ok, text_ok).view(pa.string())
    try:
        parts = pc.extract_regex(digits, _DECIMAL_TEXT)
    except pa.ArrowInvalid:  # not UTF-8
        return None
    whole, fraction = (pc.fill_null(pc.utf8_length(parts.field(k)), 0).to_numpy() for k in ("int", "fraction"))
    # One sign at most, as Decimal reads it ("1E+-5" is no number); Arrow's int parse takes no "+".
    exponent = pc.replace_substring_regex(pc.replace_substring_regex(parts.field("exponent"), r"^\+", ""), "^$", "0")
    exponent = pc.fill_null(pc.cast(exponent, pa.int64()), 0).to_numpy()
    # Where Arrow parses the text exactly: Python's Decimal.as_tuple() has at most 38 digits (the
    # digits counted here, leading zeros too, are never fewer), an exponent >= -38 and adjusted() < 38
    # (schema_map._within_decimal128); beyond them Arrow's 128-bit parse wraps.
    plain = (pc.is_valid(parts).to_numpy(zero_copy_only=False) & (whole + fraction <= _MAX_DIGITS)
             & (exponent - fraction >= -_MAX_DIGITS) & (whole - 1 + exponent < _MAX_DIGITS))
    # Arrow rescales the parsed text to the column's scale without checking the product for
    # overflow (716046739561341199236585413584 cast to decimal(38, 10) wraps to a value of 38
    # digits, which its precision check then passes): only a value below 10 ** (p - s) is cast,
    # whose scaled digits (at most p <= 38) cannot wrap. Its int part's digits but leading zeros,
    # plus the exponent, bound its int digits (never fewer: 0.00125E+4 is declined, 12.5 is not).
    significant = pc.fill_null(pc.utf8_length(pc.utf8_ltrim(parts.field("int"), "0")), 0).to_numpy()
    plain &= significant + exponent <= at.precision - at.scale
    walk.ok &= nil | plain | is_int
    try:
        out = pc.if_else(pa.array(plain & text_ok), digits, None).cast(at)
        if is_int.any():
            signed = pa.array(ints, pa.int64(), mask=~(is_int & ~beyond)).cast(at)
            unsigned = pa.array(ints.view(np.uint64), pa.uint64(), mask=~(is_int & beyond)).cast(at)
            out = pc.coalesce(out, signed, unsigned)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    return out
