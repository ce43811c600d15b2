"""Column-wise decode of TiCDC Canal-JSON row messages into change-log rows.

The per-change path (decoder -> ``RowChange`` -> key effects -> ``image_encoder`` -> a tuple
per row) spends ~11 us a message in Python objects that live for one row: 5x the cost of
parsing the message. Here each message is parsed once, by msgspec into a typed struct of the
common shape (``_RowMessage``, its types checked in C as it parses) -- one row (TiCDC), ``_tidb``
holding only ``commitTs``, the table's last ``mysqlType`` and ``pkNames``, every column of a kind
below --, or, from the batch after its table's schema was first met, into a struct of that schema
(``SchemaReader``: no dict, no name strings) -- and the rows of a read batch become the change
log's columns at once, with Arrow compute and numpy: each column's values are checked and
MessagePack-encoded as one array, an image is the row-wise join of its columns' encodings, the
key bytes likewise.

Exactness: the bytes are those of the per-change path by construction -- each kind's fast
case accepts only text whose typed value (``cdc_codecs.rowconv``'s compiled converter) and
whose stored form (``spark.decode.effect``) it can spell without Python's conversion, e.g. a
decimal whose ``str(Decimal(text))`` is the text itself. Every other message -- a watermark,
DDL, several rows, a claim-check, an unusual value, a type without a fast case (float,
time, enum, bit, ...), a key-less table, anything invalid -- takes the per-change path, in
its place in offset order, and so does a whole batch on any surprise (an exception here is
never an error of the message). tests/spark/decode/test_batch.py holds the two paths to the
same change-log bytes, side outputs and errors, over every protocol, every MySQL type at its
extremes and the fuzzer's mutations.
"""

from __future__ import annotations

import functools
import itertools
import time
import zlib
from collections.abc import Mapping
from operator import itemgetter
from typing import Annotated, Any, Literal, Union

import msgspec
import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from cdc_codecs.canal_json import CanalJsonDecoder
from cdc_codecs.types import UTC, ColumnType, TypeKind, binary_length, int_range
from spark.core.keys import table_seed
from spark.decode import text_shapes

_OPS = {"INSERT": 0, "UPDATE": 1, "DELETE": 2}
INSERT, UPDATE, DELETE = 0, 1, 2
_OP_TEXT = (b"\xa6insert", b"\xa6update", b"\xa6delete")  # fixstr of ``Op``'s value, as msgspec writes it
_NIL = b"\xc0"
_SIGNED_INTS = frozenset({TypeKind.INT, TypeKind.LONG})
_FAST_KINDS = frozenset({TypeKind.STRING, TypeKind.JSON, TypeKind.INT, TypeKind.LONG, TypeKind.UNSIGNED_LONG,
                         TypeKind.DECIMAL, TypeKind.TIMESTAMP, TypeKind.TIMESTAMPTZ, TypeKind.DATE, TypeKind.BINARY})
_KEY_KINDS = frozenset({TypeKind.STRING, TypeKind.INT, TypeKind.LONG, TypeKind.UNSIGNED_LONG})

# Text whose Python value the fast case spells exactly (anything else: the per-change path) has a
# shape of ``text_shapes``: an integer as ``-?[0-9]{1,20}`` (int() also takes '+', spaces, '_',
# other digits: not here); a decimal t with str(Decimal(t)) == t: no sign but '-', no leading zero,
# no exponent, and a plain (not scientific) str, which needs the adjusted exponent >= -6: below 1,
# at most five zeros after the point.
_U64_MAX_TEXT = "18446744073709551615"
_DAYS = np.array([0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], np.int64)  # a month's longest (0: none)


# An integer orjson reads as one (beyond 64 bits it reads a float, which the per-change path refuses);
# msgspec bounds only within int64, so 2**63 and up go to the per-change path too.
_JsonInt = Annotated[int, msgspec.Meta(ge=-(1 << 63), le=(1 << 63) - 1)]


class _TidbExtension(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    commitTs: Annotated[int, msgspec.Meta(ge=0, le=(1 << 63) - 1)]  # a TSO


class _RowMessage(msgspec.Struct, forbid_unknown_fields=True):
    """The common message: every field TiCDC sends, each of the type the fast path reads, checked
    in C as it is parsed. msgspec reads exactly as orjson (the per-change path's parser) every text
    it decodes into a str or int here -- UTF-8, escapes, duplicate names (the last wins), numbers
    but an integer beyond 64 bits, which orjson reads as a float (``_JsonInt`` refuses it) -- but
    skips an unknown field or a ``Raw`` without checking its UTF-8 or its numbers. So no field is
    unknown and none is a Raw: a typed field's every value is checked, each time its name comes,
    while a Raw keeps its name's last value only, leaving an earlier one unread by anybody
    (``"sqlType":1e400,"sqlType":null``, which orjson refuses; msgspec has no check for duplicate
    names). Typed, mysqlType and sqlType cost ~0.1-0.2 us a message more than Raws checked by orjson
    when new (measured). tests/spark/decode/test_batch.py and test_batch_msgspec.py hold both paths
    to the same output."""
    type: Literal["INSERT", "UPDATE", "DELETE"]
    database: str
    table: str
    isDdl: Literal[False]
    data: tuple[dict[str, str | None]]  # one row (TiCDC's)
    old: tuple[dict[str, str | None]] | None  # an UPDATE's old row
    mysqlType: dict[str, str]
    pkNames: list[str]
    _tidb: _TidbExtension
    es: _JsonInt | None
    id: _JsonInt = 0
    ts: _JsonInt = 0
    sql: str = ""
    sqlType: dict[str, _JsonInt] | None = None


_ROW_MESSAGE = msgspec.json.Decoder(_RowMessage)


# A name's letter escaped (``\u0041``..``\u007a``, hex of either case): the only way a name can read
# "mysqlType" without those very bytes in the text. Found for a whole read batch at once (RE2).
_ESCAPED_ASCII = r"\\u00[4-7]"
# The name "mysqlType" as RE2 finds it fast (a leading '"' would make it read every byte; with it, it
# counts over a read batch at ~0.3 us a message, ~0.45 for ``bytes.count`` of each, measured):
# each '"mysqlType"' holds one, so a message in which this occurs once names "mysqlType" at most
# once (unescaped), and a message the schema struct reads names it at least once.
_MYSQL_TYPE_NAME = 'mysqlType"'


# A union's member no common message is (MySQL names hold no NUL; a message naming that table reads
# as this empty struct, declined): msgspec requires a union's tag, never a lone tagged struct's,
# which would read a message without "table" as its table's.
_NO_TABLE = msgspec.defstruct("NoTable", [], tag_field="table", tag="\0", forbid_unknown_fields=True,
                              namespace={"own": (None, None, None)})


class SchemaReader:
    """The common message of one table schema (its mysqlType and pkNames), read by msgspec structs
    of its own, one per table (``message``): ``_RowMessage`` less the Python objects a generic one
    builds -- no dict, no name string for the row, mysqlType or sqlType, the row's values in column
    order in C (``astuple``) and nothing to compare after but mysqlType's bytes. ``CanalBatch``
    reads with the union of its tables' structs, tagged by the table's name: msgspec picks the
    message's struct by its "table" in C.

    Sound as ``_RowMessage`` is: every field but mysqlType is typed, each value checked in C each
    time its name comes, no field unknown; a message of another schema fails the struct (an unknown
    or a missing column, another key) and goes to ``_RowMessage``. mysqlType is read as its bytes
    (a ``Raw``: its order is the table's column order, which a struct cannot see) and must be the
    schema's, exactly as orjson writes it -- so valid and, to orjson too, this very mapping in this
    order -- and the message's only one: msgspec keeps a name's last value and skips an
    earlier one unchecked (``"mysqlType":1e400,"mysqlType":{...}``, which orjson refuses). So the
    name appears once as such, and no letter of the message is escaped (a batch at once): a second
    spelling of the name needs one. ``CanalBatch.split`` checks both."""

    def __init__(self, mysql_type: Mapping[str, str], keys: tuple[str, ...], plan: Plan) -> None:
        self.plan = plan
        fields = [f"c{i}" for i in range(len(mysql_type))]
        rename = dict(zip(fields, mysql_type))

        def struct(name: str, kind: Any) -> Any:
            return msgspec.defstruct(name, [(f, kind) for f in fields], rename=rename, forbid_unknown_fields=True,
                                     gc=False)

        row = struct("Row", str | None)
        # ``_RowMessage``'s fields (the common shape is spelled there only), the schema's own types in
        # place of the generic ones, and "table" the union's tag.
        own = {"data": tuple[row], "old": tuple[row] | None, "mysqlType": msgspec.Raw,
               "pkNames": tuple[tuple(Literal[k] for k in keys)],  # type: ignore[misc]
               "sqlType": struct("SqlType", _JsonInt) | None}
        self._fields = [(f.name, own.get(f.name, f.type)) if f.required else (f.name, own.get(f.name, f.type), f.default)
                        for f in msgspec.structs.fields(_RowMessage) if f.name != "table"]
        self._mysql_type = msgspec.Raw(orjson.dumps(dict(mysql_type)))
        self._messages: dict[str, Any] = {}  # table -> its struct (``message``)

    def message(self, table: str) -> Any:
        """The struct of this schema's messages of ``table`` (any database), tagged by its name; on
        the class (``own``), what reading one needs: the schema's mysqlType, its plan and the table's
        index per database. Its structs are not tracked by the cyclic GC (none can hold a cycle):
        ~0.07 us a message less (measured)."""
        message = self._messages.get(table)
        if message is None:
            message = self._messages[table] = msgspec.defstruct(
                "SchemaMessage", self._fields, forbid_unknown_fields=True, tag_field="table", tag=table, gc=False,
                namespace={"table": table, "own": (self._mysql_type, self.plan, {})})
        return message


def _msgpack_str(text: bytes) -> bytes:
    n = len(text)
    head = bytes([0xA0 | n]) if n < 32 else b"\xd9" + bytes([n]) if n < 256 else b"\xda" + n.to_bytes(2, "big") \
        if n < 65536 else b"\xdb" + n.to_bytes(4, "big")
    return head + text


def _bin_head(n: int) -> bytes:
    return b"\xc4" + bytes([n]) if n < 256 else b"\xc5" + n.to_bytes(2, "big") if n < 65536 else b"\xc6" + n.to_bytes(4, "big")


def _ext_head(code: int, n: int) -> bytes:
    fixed = {1: b"\xd4", 2: b"\xd5", 4: b"\xd6", 8: b"\xd7", 16: b"\xd8"}.get(n)
    if fixed is not None:
        return fixed + bytes([code])
    return (b"\xc7" + bytes([n]) if n < 256 else b"\xc8" + n.to_bytes(2, "big") if n < 65536
            else b"\xc9" + n.to_bytes(4, "big")) + bytes([code])


def _map_header(n: int) -> bytes:
    return bytes([0x80 | n]) if n < 16 else b"\xde" + n.to_bytes(2, "big")


# MessagePack's prefix of a value of n bytes, for the usual n, looked up for a whole column at once.
_HEADS: dict[str, tuple[pa.Array, Any]] = {
    "str": (pa.array([_msgpack_str(b"\0" * n)[:-n or None] for n in range(256)], pa.binary()),
            lambda n: _msgpack_str(b"\0" * n)[:-n or None]),
    "bin": (pa.array([_bin_head(n) for n in range(256)], pa.binary()), _bin_head),
    "decimal": (pa.array([_ext_head(1, n) for n in range(256)], pa.binary()), lambda n: _ext_head(1, n)),
}


_HEAD_NIL = 256  # in a ``_named_heads`` table, after the 256 prefixes: NULL's bytes


@functools.lru_cache(maxsize=1024)
def _named_heads(kind: str, name: bytes) -> tuple[pa.Array, Any]:
    """``_HEADS[kind]`` after a column's name (its values' bytes as an image has them, in one join),
    then the name and nil (a NULL's: no pass to set it afterwards)."""
    table, slow = _HEADS[kind]
    return (pa.array([name + h for h in table.to_pylist()] + [name + _NIL], pa.binary()),
            (lambda n: name + slow(n)) if name else slow)


def _headed(kind: str, body: pa.Array, name: bytes, null: np.ndarray) -> pa.Array:
    """``body``'s values (binary or string) each after ``name`` and its MessagePack prefix, a NULL's
    bytes ``name`` and nil: no nulls."""
    table, slow = _named_heads(kind, name)
    lengths = np.diff(text_shapes.value_bytes(body)[1])
    if lengths[null].any():  # a NULL's slot holds bytes (Arrow allows it): emptied
        body = pc.if_else(pa.array(null), pa.scalar("" if pa.types.is_string(body.type) else b"", body.type), body)
    if body.null_count:  # the bytes as they are, the NULLs' empty: their heads are their whole bytes
        body = pa.Array.from_buffers(body.type, len(body), [None, *body.buffers()[1:]], offset=body.offset)
    small = lengths < _HEAD_NIL
    head = table.take(pa.array(np.where(null, _HEAD_NIL, np.where(small, lengths, 0))))
    big = np.flatnonzero(~small & ~null)
    if len(big):  # long values are few: their prefixes one by one
        long = np.zeros(len(lengths), bool)
        long[big] = True
        head = pc.replace_with_mask(head, pa.array(long), pa.array([slow(int(lengths[i])) for i in big], pa.binary()))
    return pc.binary_join_element_wise(head, body.cast(pa.binary()), b"")


def _fixed(matrix: np.ndarray) -> pa.Array:
    """Each row of ``matrix`` as one binary value of its width."""
    n, width = matrix.shape
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(matrix))])


def _null_as_nil(null: np.ndarray, encoded: pa.Array) -> pa.Array:
    return pc.if_else(pa.array(null), pa.scalar(None, pa.binary()), encoded) if null.any() else encoded


def _decimal(digits: np.ndarray) -> np.ndarray:
    """The numbers whose decimal digits are ``digits``' rows (most significant first), as int32."""
    value = digits[0].astype(np.int32)
    for row in digits[1:]:
        value *= 10
        value += row
    return value


# msgspec's smallest int form, by class (0: a fixint): its size, its tag, and the shift that puts its
# bytes first in the (big-endian) 64 bits. Non-negative: < 2**7, 2**8, 2**16, 2**32, 2**64;
# negative: >= -32, -2**7, -2**15, -2**31, -2**63.
_INT_SIZE = np.array([1, 2, 3, 5, 9], np.int32)
_UINT_TAG = np.array([0, 0xCC, 0xCD, 0xCE, 0xCF], np.uint8)
_SINT_TAG = np.array([0, 0xD0, 0xD1, 0xD2, 0xD3], np.uint8)
_INT_SHIFT = np.array([0, 56, 48, 32, 0], np.uint64)


def _msgpack_ints(magnitude: np.ndarray, negative: np.ndarray, null: np.ndarray) -> pa.Array:
    """msgspec's bytes of each integer (its magnitude, and whether it is negative; nil for NULL), each
    built first in the 16 bytes of an Arrow binary view (its length, then up to 12 bytes inline) that
    Arrow's cast then packs: no per-value shifting of variable-length rows in numpy (twice the time
    alone, measured)."""
    n = len(magnitude)
    if negative.any():
        value = np.where(negative, np.negative(magnitude), magnitude)  # two's complement as uint64
        signed = value.view(np.int64)
        cls = np.where(negative,
                       (signed < -32).astype(np.int64) + (signed < -128) + (signed < -32768) + (signed < -(1 << 31)),
                       (magnitude >= 128).astype(np.int64) + (magnitude >= 256) + (magnitude >= 65536)
                       + (magnitude >= 1 << 32))
        tag = np.where(negative, _SINT_TAG[cls], _UINT_TAG[cls])
    else:
        value = magnitude
        cls = (magnitude >= 128).astype(np.int64) + (magnitude >= 256) + (magnitude >= 65536) + (magnitude >= 1 << 32)
        tag = _UINT_TAG[cls]
    views = np.zeros((n, 4), np.int32)
    views[:, 0] = _INT_SIZE[cls]
    inline = views.view(np.uint8)
    inline[:, 4] = np.where(cls == 0, value.astype(np.uint8), tag)  # a fixint is its own (low) byte
    inline[:, 5:13] = np.left_shift(value, _INT_SHIFT[cls]).astype(">u8").view(np.uint8).reshape(n, 8)
    if null.any():
        views[null, 0] = 1
        inline[null, 4] = _NIL[0]
    return pa.Array.from_buffers(pa.binary_view(), n, [None, pa.py_buffer(views)]).cast(pa.binary())


def _crc_table() -> np.ndarray:
    """zlib's CRC-32 (reflected, polynomial 0xEDB88320) of each byte from a zero register."""
    crc = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        crc = np.where(crc & 1, (crc >> 1) ^ np.uint32(0xEDB88320), crc >> 1)
    return crc


_CRC_TABLE = _crc_table()
_CRC_WIDTH = 32  # longer keys: ``zlib.crc32`` one by one (a byte position is a pass over every key)


def _crc32s(values: pa.Array, seeds: np.ndarray) -> np.ndarray:
    """``zlib.crc32(value, seed)`` of each value (binary, no nulls), as int64: a byte position of every
    value at a time, in numpy -- a call per value cost twice as much (~0.1 us a row, measured)."""
    data, offsets = text_shapes.value_bytes(values)
    length = np.diff(offsets)
    if not len(values) or int(length.max()) > _CRC_WIDTH:
        crc32 = zlib.crc32
        return np.array([crc32(v, s) for v, s in zip(values.to_pylist(), seeds.tolist())], np.int64)
    crc = seeds.astype(np.uint32) ^ np.uint32(0xFFFFFFFF)
    start, last = offsets[:-1], max(len(data) - 1, 0)
    padded = data if len(data) else np.zeros(1, np.uint8)
    for p in range(int(length.max())):
        byte = padded[np.minimum(start + p, last)]  # a value's own byte while p < its length
        step = _CRC_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
        crc = np.where(length > p, step, crc)
    return (crc ^ np.uint32(0xFFFFFFFF)).astype(np.int64)


class Column:
    """One column's values of a batch (texts, None for NULL): which are fast, their MessagePack
    bytes, and for a key column the key bytes' part."""

    def __init__(self, ct: ColumnType, texts: pa.Array, key: bool, encode: int, name: bytes = b"") -> None:
        """``texts``: the values (strings, null for NULL); ``encode``: how many of them (the first)
        need their bytes; the rest (old images' values of a column outside the key) are only checked.
        ``name``: the column's name (MessagePack) that the kinds whose bytes are a prefix's and the text's,
        or a matrix's rows, write before each value's bytes at no cost (``named``): the images' joins
        then have a piece less each, ~7 ns a row (measured)."""
        ok = np.ones(len(texts), bool)
        self.null = texts.is_null().to_numpy(zero_copy_only=False) if texts.null_count else np.zeros(len(texts), bool)
        kind = ct.kind
        head = texts.slice(0, encode)
        self.named = bool(name) and kind not in _SIGNED_INTS and kind is not TypeKind.UNSIGNED_LONG
        name = name if self.named else b""
        if kind is TypeKind.STRING or kind is TypeKind.JSON:
            encoded = _headed("str", head, name, self.null[:encode])
        elif kind in _SIGNED_INTS or kind is TypeKind.UNSIGNED_LONG:
            ok, encoded = self._int(ct, texts, ok, encode)
        elif kind is TypeKind.DECIMAL:
            ok &= text_shapes.decimals(texts) | self.null
            encoded = _headed("decimal", head, name, self.null[:encode])
        elif kind is TypeKind.TIMESTAMP or kind is TypeKind.TIMESTAMPTZ:
            ok, encoded = self._datetime(texts, ok, 2 if kind is TypeKind.TIMESTAMP else 3, encode, name)
        elif kind is TypeKind.DATE:
            ok, encoded = self._date(texts, ok, encode, name)
        elif kind is TypeKind.BINARY:
            ok = ok & ~self._not_latin1(texts)
            encoded = self._latin1(head, self.null[:encode], name)
        else:  # pragma: no cover - plans hold only _FAST_KINDS
            raise AssertionError(kind)
        self.ok = ok
        self.encoded = encoded.fill_null(name + _NIL) if encoded.null_count else encoded
        if key:
            self.key = self._key_part(kind, texts)

    def _int(self, ct: ColumnType, texts: pa.Array, ok: np.ndarray, encode: int) -> tuple[np.ndarray, pa.Array]:
        lo, hi = int_range(ct)
        good, negative = text_shapes.signed_integers(texts)
        count = np.diff(text_shapes.value_bytes(texts)[1]) - negative  # digits
        if count.max(initial=0, where=good) <= 18:  # int64's, sign and all: one cast
            digits = texts if good.all() else pc.if_else(pa.array(good), texts, "0")  # the cast takes only those
            magnitude = np.abs(digits.cast(pa.int64()).to_numpy()).astype(np.uint64)
        else:
            digits = texts if not negative.any() else \
                pc.if_else(pa.array(negative), pc.utf8_slice_codeunits(texts, 1), texts)
            long = np.flatnonzero(good & (count == 20))  # 20 digits may pass 2**64 - 1: compared as text
            if len(long):
                good[long] &= ~np.asarray(pc.greater(digits.take(pa.array(long)), _U64_MAX_TEXT)
                                          .to_numpy(zero_copy_only=False), bool)
            if not good.all():
                digits = pc.if_else(pa.array(good), digits, "0")
            magnitude = digits.cast(pa.uint64()).to_numpy()
        good &= np.where(negative, magnitude <= np.uint64(-lo), magnitude <= np.uint64(hi))
        ok = ok & (good | self.null)
        magnitude = np.where(good, magnitude, np.uint64(0))
        self.magnitude, self.negative = magnitude, negative & (magnitude > 0)
        return ok, _msgpack_ints(magnitude[:encode], self.negative[:encode], self.null[:encode])

    @staticmethod
    def _digits(chars: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """The digits at ``positions`` of ``text_shapes.leading_bytes``'s rows (0 past a value's end;
        garbage for a value not of the shape, which the caller drops)."""
        width = chars.shape[1]
        inside = positions[positions < width]
        d = np.zeros((len(chars), len(positions)), np.int32)
        d[:, :len(inside)] = np.maximum(chars[:, inside], ord("0")) - ord("0")  # 0 past the end: 0
        return d

    @staticmethod
    def _date_ok(year: np.ndarray, month: np.ndarray, day: np.ndarray) -> np.ndarray:
        good = (year >= 1) & (day >= 1) & (day <= _DAYS[np.where(month <= 12, month, 0)])
        feb29 = np.flatnonzero((month == 2) & (day == 29))  # few: the leap years' test on those only
        y = year[feb29]
        good[feb29] &= (y % 4 == 0) & ((y % 100 != 0) | (y % 400 == 0))
        return good

    def _datetime(self, texts: pa.Array, ok: np.ndarray, code: int, encode: int, name: bytes,
                  ) -> tuple[np.ndarray, pa.Array]:
        chars, length = text_shapes.leading_bytes(texts, 26)
        good, d = text_shapes.datetime_digits(chars, length)
        # Two digits make a byte (at most 99); the year and the microseconds need more.
        year, micro = _decimal(d[0:4]), _decimal(d[20:26])
        month, day, hour, minute, second = (d[k] * 10 + d[k + 1] for k in (5, 8, 11, 14, 17))
        good &= self._date_ok(year, month, day) & (hour <= 23) & (minute <= 59) & (second <= 59)
        n = encode
        year, month, day, hour, minute, second, micro = (
            x[:n] for x in (year, month, day, hour, minute, second, micro))
        named = np.empty((n, len(name) + 14), np.uint8)
        named[:, :len(name)] = np.frombuffer(name, np.uint8)
        matrix = named[:, len(name):]
        matrix[:, 0], matrix[:, 1], matrix[:, 2] = 0xC7, 11, code
        matrix[:, 3], matrix[:, 4] = year & 0xFF, year >> 8
        matrix[:, 5], matrix[:, 6], matrix[:, 7], matrix[:, 8], matrix[:, 9] = month, day, hour, minute, second
        matrix[:, 10:14] = micro.astype("<u4").view(np.uint8).reshape(n, 4)
        return ok & (good | self.null), _null_as_nil(self.null[:n], _fixed(named))

    def _date(self, texts: pa.Array, ok: np.ndarray, encode: int, name: bytes) -> tuple[np.ndarray, pa.Array]:
        chars, length = text_shapes.leading_bytes(texts, 10)
        good = text_shapes.date_shape(chars, length)
        d = self._digits(chars, _DATETIME_DIGITS[:8])
        year = d[:, 0] * 1000 + d[:, 1] * 100 + d[:, 2] * 10 + d[:, 3]
        month, day = d[:, 4] * 10 + d[:, 5], d[:, 6] * 10 + d[:, 7]
        good &= self._date_ok(year, month, day)
        n = encode
        year, month, day = year[:n], month[:n], day[:n]
        named = np.empty((n, len(name) + 6), np.uint8)
        named[:, :len(name)] = np.frombuffer(name, np.uint8)
        matrix = named[:, len(name):]
        matrix[:, 0], matrix[:, 1] = 0xD6, 4
        matrix[:, 2], matrix[:, 3], matrix[:, 4], matrix[:, 5] = year & 0xFF, year >> 8, month, day
        return ok & (good | self.null), _null_as_nil(self.null[:n], _fixed(named))

    def _not_latin1(self, texts: pa.Array) -> np.ndarray:
        """Values with a character above U+00FF (a lead byte from C4 on): not bytes, the per-change path errs."""
        data, offsets = text_shapes.value_bytes(texts)
        bad = np.zeros(len(texts), bool)
        wide = np.flatnonzero(data >= 0xC4)
        if len(wide):
            bad[np.searchsorted(offsets, wide, side="right") - 1] = True
        return bad

    def _latin1(self, texts: pa.Array, null: np.ndarray, name: bytes) -> pa.Array:
        """Canal's bytes: one ISO-8859-1 character per byte -- U+0080..U+00FF are the UTF-8 pairs
        C2 xx and C3 xx (values of other characters are dropped by the caller)."""
        n = len(texts)
        data, offsets = text_shapes.value_bytes(texts)
        if not (data >= 0xC2).any():  # ASCII: the text's bytes are the value's
            return _headed("bin", texts, name, null)
        lead = (data & 0xFE) == 0xC2
        out = data.copy()
        out[1:] += (data[:-1] == 0xC3) * np.uint8(0x40)  # after C3: the byte + 0x40
        before = np.zeros(len(data) + 1, np.int32)  # the lead bytes before each byte: a value's offset drops by those
        np.cumsum(lead, out=before[1:])
        new_offsets = (offsets - before[offsets]).astype(np.int32)
        body = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(new_offsets), pa.py_buffer(out[~lead])])
        return _headed("bin", body, name, null)

    def _key_part(self, kind: TypeKind, texts: pa.Array) -> pa.Array:
        """``f"{len(t)}:{t}"`` of ``spark.core.keys._canonical``'s text t: ``s`` + the string, ``n`` + the
        integer's digits, ``0`` for NULL."""
        if kind is TypeKind.STRING:
            tagged = pc.binary_join_element_wise("s", texts, "")
            size = pc.add(pc.utf8_length(texts), 1)
        elif (text_shapes.own_str_integers(texts) | ~self.ok | self.null).all():
            # The texts are the integers' str (but a NULL's and those of rows dropped): the part is
            # its size's and "n" then the text, one join.
            size = np.minimum(np.diff(text_shapes.value_bytes(texts)[1]), len(_KEY_INT_HEADS) - 1)
            part = pc.binary_join_element_wise(_KEY_INT_HEADS.take(pa.array(size)), texts, "")
            return (pc.if_else(pa.array(self.null), "1:0", part) if self.null.any() else part).cast(pa.binary())
        else:
            digits = pc.cast(pa.array(self.magnitude), pa.string())
            tagged = pc.binary_join_element_wise("n-", digits, "") if self.negative.all() else \
                pc.binary_join_element_wise("n", digits, "") if not self.negative.any() else \
                pc.if_else(pa.array(self.negative), pc.binary_join_element_wise("n-", digits, ""),
                           pc.binary_join_element_wise("n", digits, ""))
            size = pc.binary_length(tagged)
        part = pc.binary_join_element_wise(pc.cast(size, pa.string()), ":", tagged, "")
        if self.null.any():
            part = pc.if_else(pa.array(self.null), "1:0", part)
        return part.cast(pa.binary())


# The start of an integer's key part by the length of its text (a sign and 20 digits at most).
_KEY_INT_HEADS = pa.array([f"{k + 1}:n" for k in range(22)], pa.string())
# Where the digits of 'YYYY-MM-DD HH:MM:SS.ffffff' are.
_DATETIME_DIGITS = np.array([0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18, 20, 21, 22, 23, 24, 25], np.int64)


class Plan:
    """What the fast path needs of one table schema (column types and key columns)."""

    def __init__(self, types: Mapping[str, ColumnType], keys: tuple[str, ...]) -> None:
        self.types, self.keys = types, keys
        self.schema: int | None = None  # its ``schema_id``, once it has rows in the segment (side output)
        # The fast messages of the batch being split, not yet in ``chunks``, flat: each message's index
        # in the batch, op, commitTs and table index, then its row's values in column order (``stride``
        # items a message); and the updates' old rows' values, in order (``width`` items each). Flat
        # lists, extended in C, cost ~0.3 us a message less than a tuple a message transposed after.
        self.rows: list[Any] = []
        self.old: list[Any] = []
        self.chunks: list[tuple[Any, ...]] = []  # the batch's rows in columns, a chunk at a time (``seal``)
        self.names = tuple(types)
        self.width = len(self.names)
        self.stride = 4 + self.width
        # A row's values in column order, in one C call (KeyError: another column set).
        self.values = itemgetter(*self.names) if len(self.names) > 1 else lambda row: (row[self.names[0]],)
        self.name_bytes = [_msgspec_name(n) for n in self.names]
        self.map_header = _map_header(len(self.names))
        self.key_map_header = _map_header(len(keys))
        # Made for the union of a batch after the schema's first message (``CanalBatch._union``); False
        # where msgspec cannot make it.
        self.reader: SchemaReader | None | Literal[False] = None

    def seal(self) -> None:
        """The rows since the last chunk as columns (values as Arrow strings) while their values are
        still in the CPU's cache, and their objects freed for the next messages': a whole read batch
        later most have left the cache, and the conversion takes twice as long."""
        rows, old = self.rows, self.old
        if not rows:
            return
        self.rows, self.old = [], []
        step, width = self.stride, self.width
        self.chunks.append((np.array(rows[0::step], np.int64), np.array(rows[1::step], np.int8),
                            np.array(rows[2::step], np.int64), np.array(rows[3::step], np.int64),
                            [pa.array(rows[k::step], pa.string()) for k in range(4, step)],
                            [pa.array(old[k::width], pa.string()) for k in range(width)] if old else [_NO_TEXT] * width))

    def reset(self) -> None:
        self.rows, self.old, self.chunks = [], [], []


_NO_TEXT = pa.array([], pa.string())
# A read batch's messages a table of the union of schema structs that make it worth making again
# (``CanalBatch._union``): ~45 us a table against ~0.5-1 us a message.
UNION_MESSAGES_PER_TABLE = 100
# Rows a plan converts at once (``Plan.seal``): enough for Arrow's per-call cost to vanish, few
# enough for their strings to stay in the cache since they were parsed (measured over the bench
# archive: 512 as cheap, 256 and 2,048 dearer, 5,000 ~0.7 us a message more).
# Only the conversion, which reads the rows' Python objects scattered in the heap, gains from it:
# the columns' checks and encodings, images and keys (``CanalBatch._columns``) pass over contiguous
# buffers, ~10% dearer for a whole batch with the caches flushed than hot, while a call costs
# ~1.3 ms whatever its rows (some 950 numpy and Arrow calls for 8 columns). Done per chunk in the
# loop, they cost the decode stage ~1.6 us a message more (per 1,024 rows), ~0.5 (per 4,096).
CHUNK = 1024
# Messages whose bytes ``split`` makes Python objects of at once, when it reads them from their Arrow
# array: parsed while still in the cache (a whole read batch's, ~7 MB, made at once and parsed after,
# cost ~0.15 us a message more, measured).
VALUE_SLICE = 1024


def _is_last(entry: tuple[Any, ...] | None, mysql_type: dict[str, str], pk_names: list[str]) -> bool:
    """Whether a message's mysqlType (in its column order, as the decoder compares it) and pkNames are its
    table's last ones (``CanalBatch._tables``'s entry): then the entry's plan is the message's."""
    return entry is not None and entry[0] == mysql_type and entry[4] == tuple(mysql_type) and entry[1] == pk_names


def _msgspec_name(name: str) -> bytes:
    return _msgpack_str(name.encode("utf-8"))


def plan_for(types: Mapping[str, ColumnType] | None, keys: tuple[str, ...]) -> Plan | None:
    """A plan when every column has a fast case and the key is one the fast path spells."""
    if not types or not keys or len(set(keys)) != len(keys):
        return None
    if any(ct.kind not in _FAST_KINDS or binary_length(ct) is not None for ct in types.values()):
        return None  # a BINARY(n) value is padded as MySQL holds it by the decoder (cdc_codecs.types.stored_binary)
    if any(k not in types or types[k].kind not in _KEY_KINDS for k in keys):
        return None
    return Plan(types, keys)


class CanalBatch:
    """The fast path of one segment's decode: ``split`` a read batch into change-log rows of its
    common messages (an Arrow table in offset order, each row naming its message) and the
    messages left for the per-change path."""

    def __init__(self, decoder: CanalJsonDecoder, topic: str, partition: int, schema_id: Any, note_schema: Any) -> None:
        self.decoder = decoder
        self.topic, self.partition = topic, partition
        self.schema_id, self.note_schema = schema_id, note_schema  # (key columns, column types) -> schema_id
        self._noted: list[Plan] = []  # the batch's plans with rows: their schemas go to the side output
        self._used: list[Plan] = []
        # (database, table) -> (its last mysqlType, pkNames, plan, its index in ``_names``, the
        # mysqlType's column order: a plan's columns are in its mysqlType's order, as the decoder's)
        self._tables: dict[tuple[str, str], tuple[dict[str, Any], Any, Plan | None, int, tuple[str, ...]]] = {}
        self._names: list[tuple[str, str]] = []  # the tables' names, and their ``key_hash`` seeds
        self._seeds: list[int] = []
        self._index: dict[tuple[str, str], int] = {}  # a table's index in ``_names``
        self._plans: dict[tuple[Any, ...], Plan | None] = {}
        # A table's name -> the plan of its last schema with one, and the mysqlType it was met with;
        # the union of their schemas' structs (``SchemaReader``), made again at a batch's start
        # when a table's schema has changed (None) and the batch is worth it (``_union``).
        self._schemas: dict[str, tuple[Plan, dict[str, str]]] = {}
        self._read: Any = None

    @staticmethod
    def applies(decoder: Any, commit_ts_clock: bool) -> bool:
        """TiCDC's Canal-JSON ordered by its commitTs (the TiDB extension), TIMESTAMP in UTC."""
        return (type(decoder) is CanalJsonDecoder and commit_ts_clock and decoder.carries_commit_ts
                and decoder.options["timezone"] is UTC)

    def _plan(self, database: str, table: str, mysql_type: Any, pk_names: Any) -> tuple[Plan | None, int]:
        decoder = self.decoder
        try:
            types, _ = decoder._schema(database, table, mysql_type)
            keys = decoder._key_columns(pk_names)
        except Exception:  # noqa: BLE001 - the per-change path raises the message's error
            return None, -1
        if tuple(mysql_type.items()) not in decoder._converters:  # only a compiled converter: the types' order
            return None, -1
        ident = (id(types), keys)
        if ident not in self._plans:
            if len(self._plans) >= 1024:
                self._plans.clear()
            self._plans[ident] = plan_for(types, keys)
        plan = self._plans[ident]
        index = self._table_index(database, table)
        if index < 0:
            return None, -1
        self._tables[(database, table)] = (dict(mysql_type), list(pk_names), plan, index, tuple(mysql_type))
        return plan, index

    def _remember(self, table: str, plan: Plan, mysql_type: Mapping[str, str]) -> None:
        """The table's next batches are read by the struct of its schema (``plan``'s, whose mysqlType
        this message's is), before ``_RowMessage``."""
        known = self._schemas.get(table)
        if (known is None or known[0] is not plan) and (len(self._schemas) < 1 << 12 or known is not None):
            self._schemas[table] = (plan, dict(mysql_type))
            self._read = None

    def _union(self, messages: int) -> Any:
        """The decoder of the union of the tables' schema structs, or None while a batch of ``messages``
        would not pay for it (``UNION_MESSAGES_PER_TABLE``)."""
        if self._read is None and self._schemas and messages >= UNION_MESSAGES_PER_TABLE * len(self._schemas):
            structs = []
            for table, (plan, mysql_type) in self._schemas.items():
                if plan.reader is None:
                    try:
                        plan.reader = SchemaReader(mysql_type, plan.keys, plan)
                    except ValueError:  # a column name msgspec takes for no field ('"', '\' or a control character)
                        plan.reader = False  # its messages: the generic struct's, as before
                if plan.reader and table != "\0":
                    structs.append(plan.reader.message(table))
            if structs:
                self._read = msgspec.json.Decoder(Union[(*structs, _NO_TABLE)]).decode  # type: ignore[misc]
        return self._read

    def _table_index(self, database: str, table: str) -> int:
        """The table's index in ``_names`` (-1 past 2**16 tables: names are cached for the segment;
        a stream of fresh names is not)."""
        index = self._index.get((database, table))
        if index is None:
            if len(self._names) >= 1 << 16:
                return -1
            index = self._index[(database, table)] = len(self._names)
            self._names.append((database, table))
            self._seeds.append(table_seed(database, table))
        return index

    def split(self, offsets: np.ndarray, values: list[Any] | None, times: dict[str, float] | None = None,
              arrow_values: pa.Array | None = None) -> tuple[pa.Table | None, np.ndarray, np.ndarray]:
        """(change-log rows of the fast messages in offset order or None, each row's message index
        in the batch, which messages are fast). ``arrow_values``: ``values`` as the Arrow array they
        were read as, if the caller has it (else converted here); ``values`` None: read from it here,
        ``VALUE_SLICE`` at a time."""
        clock = time.process_time if times is not None else None
        started = clock() if clock else 0.0
        decode, ops, tables = _ROW_MESSAGE.decode, _OPS, self._tables
        converters = self.decoder._converters
        pending: list[Any] = []  # messages of mysqlTypes the decoder has not met
        taken = 0  # messages taken so far
        for plan in self._used:  # a batch that failed half-way left its rows
            plan.reset()
        used: list[Plan] = []  # the plans with rows in this batch, each holding them (``Plan.rows``)
        self._used = used
        astuple = msgspec.structs.astuple
        chunk = CHUNK
        count = len(values) if values is not None else len(arrow_values)
        read = self._union(count)
        if read is not None:
            if arrow_values is None:
                arrow_values = pa.array(values, pa.binary())
            # The messages a schema struct may read: no letter escaped and "mysqlType" named once
            # (``SchemaReader``), found for the whole batch at once.
            schema_read = pc.and_(pc.invert(pc.match_substring_regex(arrow_values, _ESCAPED_ASCII)),
                                  pc.equal(pc.count_substring_regex(arrow_values, _MYSQL_TYPE_NAME), 1))
            schema_read = schema_read.fill_null(False).to_numpy(zero_copy_only=False).tolist()
        else:
            schema_read = [False] * count
        fast = np.zeros(count, bool)
        if values is None:  # read from ``arrow_values`` a slice at a time, each hot in the cache when parsed
            values = itertools.chain.from_iterable(arrow_values.slice(k, VALUE_SLICE).to_pylist()
                                                   for k in range(0, len(arrow_values), VALUE_SLICE))
        for i, value in enumerate(values):
            if schema_read[i]:  # the message's table's schema struct first
                try:
                    doc = read(value)
                except (msgspec.DecodeError, ValueError, TypeError, RecursionError):
                    pass
                else:
                    mysql_type, plan, indexes = doc.own
                    # Its mysqlType the schema's (its only one: ``schema_read``); not ``_NO_TABLE``.
                    if plan is not None and doc.mysqlType == mysql_type:
                        op = ops[doc.type]
                        if op == UPDATE:
                            old = doc.old
                            if old is None:
                                continue
                        database = doc.database
                        index = indexes.get(database)  # the table's index, by database
                        if index is None:
                            index = self._table_index(database, doc.table)
                            if index < 0:
                                continue
                            indexes[database] = index
                        rows = plan.rows
                        if not rows and not plan.chunks:
                            used.append(plan)
                        rows += (i, op, doc._tidb.commitTs, index)
                        rows += astuple(doc.data[0])
                        if op == UPDATE:
                            plan.old += astuple(old[0])
                        taken += 1
                        if len(rows) >= plan.stride * chunk:
                            plan.seal()
                        continue
            try:
                doc = decode(value)
            except (msgspec.DecodeError, ValueError, TypeError, RecursionError):
                continue  # not the common shape: the per-change path's
            op, old, mysql_type = ops[doc.type], doc.old, doc.mysqlType
            if op == UPDATE and old is None:
                continue
            database, table, pk_names = doc.database, doc.table, doc.pkNames
            entry = tables.get((database, table))
            if _is_last(entry, mysql_type, pk_names):
                plan, index = entry[2], entry[3]
            else:
                if tuple(mysql_type.items()) not in converters:
                    # a mysqlType the decoder has not met: learnt after the loop, or not at all
                    pending.append((i, op, doc._tidb.commitTs, database, table, doc.data[0], old, mysql_type, pk_names))
                    continue
                plan, index = self._plan(database, table, mysql_type, pk_names)
            if plan is None:  # a table without a fast plan (a FLOAT column, no key, ...)
                continue
            self._remember(table, plan, mysql_type)
            row, width = doc.data[0], plan.width
            if len(row) != width or (op == UPDATE and len(old[0]) != width):
                continue
            try:  # the row's values in column order (and the message's objects freed for the next)
                row = plan.values(row)
                old = plan.values(old[0]) if op == UPDATE else None
            except KeyError:  # as many columns, other names: the per-change path
                continue
            rows = plan.rows
            if not rows and not plan.chunks:
                used.append(plan)
            rows += (i, op, doc._tidb.commitTs, index)
            rows += row
            if old is not None:
                plan.old += old
            taken += 1
            if len(rows) >= plan.stride * chunk:
                plan.seal()
        # The decoder compiles (and caches) the converters of its first 1,024 mysqlTypes only; an
        # uncompiled one yields rows in the message's column order, not the types'. The fast path
        # learns the batch's new mysqlTypes only if the batch cannot fill that cache, counting every
        # message it leaves to the per-change path as one more: both paths then leave the decoder the
        # same mysqlTypes, all compiled, in whatever order they met them.
        if pending and (len(converters) + len({tuple(p[7].items()) for p in pending})
                        + count - taken - len(pending) < 1024):
            # A new mysqlType's plan is a new one (``_plan`` takes only a compiled converter's types,
            # new objects): its rows, placed now, follow no earlier row of theirs (``_columns`` checks).
            for i, op, ts, database, table, row, old, mysql_type, pk_names in pending:
                entry = tables.get((database, table))
                if _is_last(entry, mysql_type, pk_names):
                    plan, index = entry[2], entry[3]
                else:
                    plan, index = self._plan(database, table, mysql_type, pk_names)
                    if plan is not None:
                        self._remember(table, plan, mysql_type)
                if plan is None or len(row) != len(plan.names) or (op == UPDATE and len(old[0]) != len(plan.names)):
                    continue
                try:
                    row = plan.values(row)
                    old = plan.values(old[0]) if op == UPDATE else None
                except KeyError:
                    continue
                if not plan.rows and not plan.chunks:
                    used.append(plan)
                plan.rows += (i, op, ts, index, *row)
                if old is not None:
                    plan.old += old
        if clock:
            now = clock()
            times["parse + check"] = times.get("parse + check", 0.0) + now - started
            started = now
        try:
            return self._finish(used, fast, offsets, times, started)
        finally:
            for plan in used:  # after a surprise too: the next batch starts afresh
                plan.reset()

    def _finish(self, used: list[Plan], fast: np.ndarray, offsets: np.ndarray, times: dict[str, float] | None,
                started: float) -> tuple[pa.Table | None, np.ndarray, np.ndarray]:
        clock = time.process_time if times is not None else None
        parts = []
        self._noted = []
        for plan in used:
            part, message, good = self._columns(plan, offsets)
            plan.reset()
            fast[message[good]] = True
            if part is not None:
                parts.append(part)
        if clock:
            now = clock()
            times["columns, images, keys"] = times.get("columns, images, keys", 0.0) + now - started
        if not parts:
            return None, np.zeros(0, np.int64), fast
        table = pa.concat_tables(parts)
        if len(parts) > 1:  # each part is in offset order: the parts interleaved
            table = table.take(np.argsort(table.column("_order").to_numpy(), kind="stable"))
        message = table.column("_message").to_numpy()
        for plan in self._noted:
            self.note_schema(plan.keys, plan.types)
        return table.drop_columns(["_order", "_message"]), message, fast

    @staticmethod
    def _key(plan: Plan, columns: dict[str, Column], index: pa.Array | None, n: int) -> pa.Array:
        """The key bytes of the rows at ``index`` (None: the first ``n``, the rows' new values)."""
        parts = [columns[k].key.slice(0, n) if index is None else columns[k].key.take(index) for k in plan.keys]
        if len(parts) > 1:
            return pc.binary_join_element_wise(*parts, b"")
        # A slice's buffers hold the old images' keys too: the change log's are its own (copied, ~10 bytes a row).
        return pa.concat_arrays(parts) if index is None else parts[0]

    @staticmethod
    def _delete_image(plan: Plan, columns: dict[str, Column], index: pa.Array) -> pa.Array:
        """The delete's ``change`` (the key columns' values) of the rows at ``index``."""
        parts: list[Any] = [b"\x92" + _OP_TEXT[DELETE] + plan.key_map_header]
        for k in plan.keys:
            parts += [] if columns[k].named else [_msgspec_name(k)]
            parts.append(columns[k].encoded.take(index))
        return pc.binary_join_element_wise(*parts, b"")

    def _columns(self, plan: Plan, offsets: np.ndarray) -> tuple[pa.Table | None, np.ndarray, np.ndarray]:
        """The change-log rows of one schema's fast messages, each row's message index, and which of
        them were fast after all."""
        plan.seal()
        chunks = plan.chunks
        message, op, stamps, indices = (np.concatenate([c[k] for c in chunks]) for k in range(4))
        n = len(message)
        if (message[1:] <= message[:-1]).any():  # never seen: a surprise, the batch's per-change path
            raise AssertionError("a plan's rows out of offset order")
        updates = np.flatnonzero(op == UPDATE)
        good = np.ones(n, bool)
        columns: dict[str, Column] = {}
        for k, name in enumerate(plan.names):
            # The rows' values, then the old images'.
            texts = pa.concat_arrays([c[4][k] for c in chunks] + [c[5][k] for c in chunks])
            key = name in plan.keys
            column = columns[name] = Column(plan.types[name], texts, key, len(texts) if key else n, plan.name_bytes[k])
            good &= column.ok[:n]
            good[updates] &= column.ok[n:]
        keep = np.flatnonzero(good)
        if not len(keep):
            return None, message, good
        if plan.schema is None:  # noted in the side output once the whole batch succeeds (``split``)
            plan.schema = self.schema_id(plan.keys, plan.types)
        self._noted.append(plan)
        # The new image's ``change`` (insert/update) and the data's and the old row's keys.
        m = len(updates)
        count = len(keep)
        every = count == n
        new_index = None if every else pa.array(keep)
        op_keep = op if every else op[keep]
        is_update = op_keep == UPDATE
        is_delete = op_keep == DELETE
        pieces: list[Any] = [pa.array([b"\x92" + _OP_TEXT[o] + plan.map_header for o in (INSERT, UPDATE)], pa.binary())
                             .take(pa.array(is_update.astype(np.int8)))]
        for name, name_bytes in zip(plan.names, plan.name_bytes):
            column = columns[name]
            pieces += [] if column.named else [name_bytes]
            pieces.append(column.encoded.slice(0, n) if every else column.encoded.take(new_index))
        image = pc.binary_join_element_wise(*pieces, b"")
        new_key = self._key(plan, columns, new_index, n)
        # Only updates have an old image, and only a moved one (its key changed) needs its old image's
        # key and delete image: those are taken for the updates' old rows, then the moved ones'.
        old_at = np.zeros(n, np.int64)
        old_at[updates] = n + np.arange(m)
        changed = np.flatnonzero(is_update)  # the kept updates, among the kept rows
        old_rows = old_at[changed if every else keep[changed]]
        old_key = self._key(plan, columns, pa.array(old_rows), n)
        moves = np.flatnonzero(np.asarray(pc.not_equal(new_key.take(pa.array(changed)), old_key)
                                          .to_numpy(zero_copy_only=False), bool))
        moved = np.zeros(count, bool)
        moved[changed[moves]] = True
        # The effects in offset order: a moved row's old key deleted, then its new one written.
        j = np.repeat(np.arange(count), 1 + moved)
        second = np.zeros(len(j), bool)
        second[1:] = j[1:] == j[:-1]
        first_moved = moved[j] & ~second
        deleting = op_keep[j] == DELETE
        key, change = new_key, image
        if len(moves):
            key_at = np.where(first_moved, count + np.cumsum(first_moved) - 1, j)
            key = pa.concat_arrays([new_key, old_key.take(pa.array(moves))]).take(pa.array(key_at))
        if len(moves) or deleting.any():
            # A delete's change is its key's image (its row's image, joined with the others', unused), a
            # moved row's first its old key's: those images follow the rows' before one take (of one
            # array: a chunked array's take cost ~25% more, measured).
            dels = np.flatnonzero(is_delete)
            change_at = j.copy()
            change_at[deleting] = count + np.arange(len(dels))
            change_at[first_moved] = count + len(dels) + np.arange(len(moves))
            change = pa.concat_arrays([
                image, self._delete_image(plan, columns, pa.array(dels if every else keep[dels])),
                self._delete_image(plan, columns, pa.array(old_rows[moves]))]).take(pa.array(change_at))
        deletes = first_moved | deleting
        at = (message if every else message[keep])[j]
        tables = indices[j if every else keep[j]]
        key_hash = _crc32s(key, np.array(self._seeds, np.int64)[tables])
        total = len(j)
        commit_ts = stamps[j if every else keep[j]]
        table = pa.Table.from_arrays([
            pa.repeat(pa.scalar(self.topic, pa.string()), total),
            pa.repeat(pa.scalar(self.partition, pa.int32()), total),
            pa.array(offsets[at], pa.int64()),
            pa.repeat(pa.scalar(0, pa.int32()), total),
            pa.array(commit_ts, pa.int64()),
            pa.array([d for d, _ in self._names], pa.string()).take(pa.array(tables)),
            pa.array([t for _, t in self._names], pa.string()).take(pa.array(tables)),
            key,
            pa.array(deletes),
            pa.array(~second),
            change,
            pa.repeat(pa.scalar(plan.schema, pa.int64()), total),
            pa.array(key_hash, pa.int64()),
            pa.repeat(pa.scalar(-1, pa.int64()), total),
            pa.array(at * 2 + second),
            pa.array(at),
        ], names=["topic", "partition", "offset", "index", "commit_ts", "database", "table", "key", "deletes", "first",
                  "change", "schema_id", "key_hash", "run", "_order", "_message"])
        return table, message, good
