"""TiCDC Open Protocol: binary-framed batches of JSON key/value pairs.

Framing (all integers big-endian int64)::

    key   = version(=1) { len key_json }*
    value =             { len value_json }*      # len 0 for resolved events

Pair i of the key stream goes with pair i of the value stream. A key is
``{"ts", "scm", "tbl", "t": 1 row | 2 DDL | 3 resolved, "ptn", "rid", "ohk", "ccl"}``;
a row value is ``{"u": cols, "p": cols, "d": cols}`` with columns
``{"t": type code, "f": flags, "h": handle, "v": value}``.

Values: integers and floats are JSON numbers; BLOB/TEXT codes (249-252) are base64;
VARCHAR/CHAR with the binary flag are Go-quoted byte strings (``\\x89PNG\\r\\n``);
temporal and DECIMAL values are strings; ENUM is the 1-based index and SET the bit mask
(the protocol does not carry the members: both stay numeric text, typed ``EnumIndex`` /
``SetMask`` so that the table's DDL maps them to labels).

Columns written by the 2020 encoder carry no ``"f"`` flags, so unsigned and binary are
unknown: such values are typed where their JSON kind fits the type code and otherwise
kept as JSON gave them. With flags (every current TiCDC), a mismatch is a DecodeError.
"""

from __future__ import annotations

import base64
import re
import struct
from functools import lru_cache
from typing import Any, Callable, ClassVar, Iterable, Mapping

import orjson

from cdc_codecs import _fields as f
from cdc_codecs._base import CLAIM_CHECK_OPTION, TIMEZONE_OPTION, Decoder, Encoder, Option, dumps, parse_bool
from cdc_codecs._fields import FieldError
from cdc_codecs.canal_json import unwrap_claim_check
from cdc_codecs.errors import ClaimCheckError, HandleKeyOnlyError
from cdc_codecs.events import DdlChange, Event, Op, ProducerRecord, RawMessage, RowChange, Watermark
from cdc_codecs.types import (
    ColumnType,
    ColumnValueError,
    EnumIndex,
    SetMask,
    TypeKind,
    b64decode_strict,
    check_int,
    column_type,
    format_datetime,
    format_time,
    parse_date,
    parse_datetime,
    parse_time,
    parse_timestamp,
    passthrough,
    to_decimal,
    to_float,
    to_text,
)

BATCH_VERSION = 1
_LEN = struct.Struct(">q")

ROW, DDL, RESOLVED = 1, 2, 3

BINARY_FLAG = 0x01
HANDLE_KEY_FLAG = 0x02
GENERATED_FLAG = 0x04
PRIMARY_KEY_FLAG = 0x08
UNIQUE_KEY_FLAG = 0x10
MULTIPLE_KEY_FLAG = 0x20
NULLABLE_FLAG = 0x40
UNSIGNED_FLAG = 0x80

# Column type code -> MySQL base type (text variant, binary variant).
TYPE_CODES: dict[int, tuple[str, str]] = {
    1: ("tinyint", "tinyint"),
    2: ("smallint", "smallint"),
    3: ("int", "int"),
    4: ("float", "float"),
    5: ("double", "double"),
    6: ("null", "null"),
    7: ("timestamp", "timestamp"),
    8: ("bigint", "bigint"),
    9: ("mediumint", "mediumint"),
    10: ("date", "date"),
    11: ("time", "time"),
    12: ("datetime", "datetime"),
    13: ("year", "year"),
    14: ("date", "date"),
    15: ("varchar", "varbinary"),
    16: ("bit", "bit"),
    225: ("vector", "vector"),
    245: ("json", "json"),
    246: ("decimal", "decimal"),
    247: ("enum", "enum"),
    248: ("set", "set"),
    249: ("tinytext", "tinyblob"),
    250: ("mediumtext", "mediumblob"),
    251: ("longtext", "longblob"),
    252: ("text", "blob"),
    253: ("varchar", "varbinary"),
    254: ("char", "binary"),
}
_BLOB_CODES = frozenset({249, 250, 251, 252})
_CODE_OF = {
    "tinyint": 1, "smallint": 2, "int": 3, "float": 4, "double": 5, "timestamp": 7, "bigint": 8,
    "mediumint": 9, "date": 10, "time": 11, "datetime": 12, "year": 13, "varchar": 15, "varbinary": 15,
    "bit": 16, "vector": 225, "json": 245, "decimal": 246, "enum": 247, "set": 248, "tinytext": 249,
    "tinyblob": 249, "mediumtext": 250, "mediumblob": 250, "longtext": 251, "longblob": 251,
    "text": 252, "blob": 252, "char": 254, "binary": 254,
}

DDL_TYPES = {
    1: "CREATE SCHEMA", 2: "DROP SCHEMA", 3: "CREATE TABLE", 4: "DROP TABLE", 5: "ADD COLUMN",
    6: "DROP COLUMN", 7: "ADD INDEX", 8: "DROP INDEX", 9: "ADD FOREIGN KEY", 10: "DROP FOREIGN KEY",
    11: "TRUNCATE TABLE", 12: "MODIFY COLUMN", 13: "REBASE AUTO ID", 14: "RENAME TABLE",
    15: "SET DEFAULT VALUE", 16: "SHARD ROW ID", 17: "MODIFY TABLE COMMENT", 18: "RENAME INDEX",
    19: "ADD TABLE PARTITION", 20: "DROP TABLE PARTITION", 21: "CREATE VIEW",
    22: "MODIFY TABLE CHARSET AND COLLATE", 23: "TRUNCATE TABLE PARTITION", 24: "DROP VIEW",
    25: "RECOVER TABLE", 26: "MODIFY SCHEMA CHARSET AND COLLATE", 27: "LOCK TABLE", 28: "UNLOCK TABLE",
    29: "REPAIR TABLE", 30: "SET TIFLASH REPLICA", 31: "UPDATE TIFLASH REPLICA STATUS",
    32: "ADD PRIMARY KEY", 33: "DROP PRIMARY KEY", 34: "CREATE SEQUENCE", 35: "ALTER SEQUENCE",
    36: "DROP SEQUENCE",
}
_DDL_CODE = {name: code for code, name in DDL_TYPES.items()}


def split_frames(data: bytes, what: str, *, versioned: bool) -> list[bytes]:
    """Split one framed stream into its JSON parts.

    Raises:
        FieldError: bad version, a length that runs past the end, or a negative length.
    """
    view = memoryview(data)
    pos = 0
    if versioned:
        if len(data) < 8:
            raise FieldError(what, f"truncated: {len(data)} bytes, expected an 8-byte version")
        (version,) = _LEN.unpack_from(data, 0)
        if version != BATCH_VERSION:
            raise FieldError(what, f"unexpected batch version {version}, expected {BATCH_VERSION}")
        pos = 8
    parts: list[bytes] = []
    end = len(data)
    while pos < end:
        if end - pos < 8:
            raise FieldError(what, f"truncated length at byte {pos}: {end - pos} bytes left, expected 8")
        (length,) = _LEN.unpack_from(data, pos)
        pos += 8
        if length < 0 or length > end - pos:
            raise FieldError(what, f"length {length} at byte {pos - 8} runs past the end ({end - pos} bytes left)")
        parts.append(bytes(view[pos : pos + length]))
        pos += length
    return parts


def join_frames(parts: Iterable[bytes], *, versioned: bool) -> bytes:
    out = bytearray(_LEN.pack(BATCH_VERSION) if versioned else b"")
    for p in parts:
        out += _LEN.pack(len(p))
        out += p
    return bytes(out)


_GO_ESCAPE = re.compile(rb"\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[abfnrtv\\\"'])")
_SIMPLE_ESCAPES = {b"a": b"\a", b"b": b"\b", b"f": b"\f", b"n": b"\n", b"r": b"\r", b"t": b"\t", b"v": b"\v", b"\\": b"\\", b'"': b'"', b"'": b"'"}


def go_unquote(text: str) -> bytes:
    """Bytes from a Go ``strconv.Quote`` body (how TiCDC escapes binary VARCHAR/CHAR)."""
    raw = text.encode("utf-8")
    if b"\\" not in raw:
        return raw

    def repl(m: re.Match[bytes]) -> bytes:
        esc = m.group(1)
        c = esc[:1]
        if c == b"x":
            return bytes([int(esc[1:], 16)])
        if c in (b"u", b"U"):
            return chr(int(esc[1:], 16)).encode("utf-8", "surrogatepass")
        return _SIMPLE_ESCAPES[c]

    result = _GO_ESCAPE.sub(repl, raw)
    # A backslash that no escape consumed means the text was not Go-quoted.
    if b"\\" in _GO_ESCAPE.sub(b"", raw):
        raise ColumnValueError(f"invalid escape in binary value {text[:40]!r}")
    return result


def go_quote(data: bytes) -> str:
    """The inverse of ``go_unquote``: Go's ``strconv.Quote`` without the quotes."""
    out: list[str] = []
    text = data.decode("utf-8", "surrogateescape")
    for ch in text:
        cp = ord(ch)
        if 0xDC80 <= cp <= 0xDCFF:  # an invalid UTF-8 byte
            out.append(f"\\x{cp - 0xDC00:02x}")
        elif ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch in "\a\b\f\n\r\t\v":
            out.append({"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}[ch])
        elif cp < 0x20 or cp == 0x7F:
            out.append(f"\\x{cp:02x}")
        elif ch.isprintable():
            out.append(ch)
        elif cp < 0x10000:
            out.append(f"\\u{cp:04x}")
        else:
            out.append(f"\\U{cp:08x}")
    return "".join(out)


@lru_cache(maxsize=1024)
def type_of(code: int, flags: int) -> ColumnType:
    names = TYPE_CODES.get(code)
    if names is None:
        raise ColumnValueError(f"unknown column type code {code}")
    # The 2020 encoder wrote no flags (-1 here): BLOB/TEXT codes then decode as bytes.
    binary = bool(flags & BINARY_FLAG) if flags >= 0 else code in _BLOB_CODES
    name = names[1] if binary else names[0]
    if name == "null":
        return ColumnType(TypeKind.STRING, "null")
    unsigned = bool(flags & UNSIGNED_FLAG) if flags >= 0 else False
    if name == "decimal":
        # The protocol does not carry precision and scale; the table's DDL does.
        return ColumnType(TypeKind.DECIMAL, "decimal", unsigned)
    return column_type(name, unsigned=unsigned)


def decode_value(code: int, flags: int, value: Any, tz: Any) -> Any:
    """A typed value from an Open-protocol column. ``flags`` is -1 for the flag-less 2020 form."""
    if value is None:
        return None
    ct = type_of(code, flags)
    k = ct.kind
    if code in _BLOB_CODES:
        if not isinstance(value, str):
            raise ColumnValueError(f"expected base64 text for {ct}, found {value!r}")
        try:
            data = b64decode_strict(value)
        except ValueError:
            raise ColumnValueError(f"expected base64 for {ct}, found {value[:40]!r}") from None
        if k is TypeKind.BINARY:
            return data
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise ColumnValueError(f"{ct} value is not UTF-8 text") from None
    if k in (TypeKind.INT, TypeKind.LONG, TypeKind.UNSIGNED_LONG, TypeKind.YEAR, TypeKind.BIT):
        if type(value) is int:
            return check_int(ct, value)
        if type(value) is str and value.lstrip("-").isdigit():
            return check_int(ct, int(value))
        raise ColumnValueError(f"expected an integer for {ct}, found {value!r}")
    if k is TypeKind.BINARY:
        if not isinstance(value, str):
            raise ColumnValueError(f"expected an escaped byte string for {ct}, found {value!r}")
        return go_unquote(value)
    if k is TypeKind.STRING or k is TypeKind.JSON:
        if not isinstance(value, str):
            raise ColumnValueError(f"expected a string for {ct}, found {value!r}")
        return value
    if k is TypeKind.FLOAT or k is TypeKind.DOUBLE:
        return to_float(ct, value)
    if k is TypeKind.DECIMAL:
        return to_decimal(ct, value)
    if k is TypeKind.ENUM or k is TypeKind.SET:
        # The protocol sends the index / mask and never the members: marked for the DDL to map.
        if type(value) is int and value >= 0:
            return EnumIndex(value) if k is TypeKind.ENUM else SetMask(value)
        raise ColumnValueError(f"expected a non-negative integer for {ct}, found {value!r}")
    if k is TypeKind.TIMESTAMPTZ:
        return parse_timestamp(ct, value, tz)
    if k is TypeKind.TIMESTAMP:
        return parse_datetime(ct, value)
    if k is TypeKind.DATE:
        return parse_date(ct, value)
    if k is TypeKind.TIME:
        return parse_time(ct, value)
    raise ColumnValueError(f"unsupported column type {ct}")


def value_decoder(code: int, flags: int, tz: Any) -> Callable[[Any], Any]:
    """``decode_value`` for one (type code, flags), returning a well-formed JSON integer,
    string or number at once (``passthrough``). Raises ColumnValueError for an unknown code.
    """
    ct = type_of(code, flags)

    def general(value: Any) -> Any:
        return decode_value(code, flags, value, tz)

    # BLOB/TEXT codes carry base64 text: a string is never their final value.
    return general if code in _BLOB_CODES else passthrough(ct, general)


class OpenProtocolDecoder(Decoder):
    protocol: ClassVar[str] = "open-protocol"
    options_spec: ClassVar[dict[str, Option]] = {
        "timezone": TIMEZONE_OPTION,
        "claim_check_reader": CLAIM_CHECK_OPTION,
    }

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        # (type code, flags) -> (column type, value decoder): a stream repeats a handful.
        self._columns: dict[tuple[int, int], tuple[ColumnType, Callable[[Any], Any]]] = {}

    def _column(self, code: int, flags: int) -> tuple[ColumnType, Callable[[Any], Any]]:
        found = self._columns.get((code, flags))
        if found is None:
            found = self._columns[(code, flags)] = (type_of(code, flags), value_decoder(code, flags, self.options["timezone"]))
        return found

    def _decode(self, msg: RawMessage) -> Iterable[Event]:
        if msg.key is None:
            raise FieldError("key", "missing: the Open protocol carries event keys in the Kafka key")
        keys = split_frames(msg.key, "key", versioned=True)
        values = split_frames(msg.value or b"", "value", versioned=False)
        if len(values) != len(keys):
            raise FieldError("value", f"has {len(values)} entries but the key has {len(keys)}")
        events: list[Event] = []
        for i, (k, v) in enumerate(zip(keys, values)):
            try:
                key = orjson.loads(k)
            except orjson.JSONDecodeError as exc:
                raise FieldError(f"key[{i}]", f"invalid JSON: {exc}", i) from None
            try:
                events.append(self._event(key, v, msg, i))
            except FieldError as exc:
                exc.index = i
                raise
            except orjson.JSONDecodeError as exc:
                raise FieldError(f"value[{i}]", f"invalid JSON: {exc}", i) from None
        return events

    def _event(self, key: Any, value: bytes, msg: RawMessage, index: int) -> Event:
        key = f.as_object(key, "key")
        kind = f.require(key, "t", int, "key.")
        ts = f.tso(f.require(key, "ts", int, "key."), "key.ts")
        if ts < 0:
            raise FieldError("key.ts", f"negative TSO {ts}")
        pos = msg.position.with_index(index)
        if kind == RESOLVED:
            return Watermark(ts, pos)
        schema = f.optional(key, "scm", str, "key.", "")
        table = f.optional(key, "tbl", str, "key.", "")
        if kind == DDL:
            doc = f.as_object(orjson.loads(value) if value else None, "value")
            query = f.require(doc, "q", str, "value.")
            code = f.optional(doc, "t", int, "value.")
            return DdlChange(schema, table, query, ts, pos, ddl_type=DDL_TYPES.get(code, str(code)) if code is not None else None)
        if kind != ROW:
            raise FieldError("key.t", f"expected 1 (row), 2 (DDL) or 3 (resolved), found {kind}")
        location = f.optional(key, "ccl", str, "key.")
        if location:
            return self._claim_check(location, msg, index)
        if f.optional(key, "ohk", bool, "key.", False):
            raise HandleKeyOnlyError(
                self.protocol, pos, "key.ohk",
                "the row was too large and TiCDC sent only its handle key; it cannot be applied from the "
                "archive. Set the changefeed's large-message-handle-option to claim-check",
            )
        if not value:
            raise FieldError("value", "empty for a row event")
        doc = f.as_object(orjson.loads(value), "value")
        ptn = f.optional(key, "ptn", int, "key.")
        return self._row(doc, schema, table, ts, pos, ptn)

    def _row(self, doc: Mapping[str, Any], schema: str, table: str, ts: int, pos: Any, ptn: int | None) -> RowChange:
        types: dict[str, ColumnType] = {}
        keys: list[str] = []
        partial = False
        column = self._column

        def columns(part: str) -> dict[str, Any] | None:
            cols = doc.get(part)
            if cols is None:
                return None
            if type(cols) is not dict:
                f.optional(doc, part, dict)  # raises the typed error
            row: dict[str, Any] = {}
            for name, col in cols.items():
                code = flags = None
                if type(col) is dict:
                    code = col.get("t")
                    flags = col.get("f")
                    if flags is None:
                        flags = -1
                if type(code) is not int or type(flags) is not int:  # the odd case: name the problem
                    path = f"{part}.{name}"
                    col = f.as_object(col, path)
                    code = f.require(col, "t", int, path + ".")
                    flags = f.optional(col, "f", int, path + ".", -1)
                try:
                    ct, decode = column(code, flags)
                    types[name] = ct
                    row[name] = decode(col.get("v"))
                except ColumnValueError as exc:
                    if flags >= 0 or name not in types:
                        raise FieldError(f"{part}.{name}", str(exc)) from None
                    # Flag-less 2020 form: the reference decoder of that era kept values it
                    # could not convert as JSON gave them, and so do we (best effort).
                    row[name] = col.get("v")
                handle = (flags >= 0 and flags & HANDLE_KEY_FLAG) or col.get("h") is True
                if handle and name not in keys:
                    keys.append(name)
            return row

        after = columns("u")
        before = columns("p")
        deleted = columns("d")
        if deleted is not None:
            op, before, after = Op.DELETE, deleted, None
            # Without old values TiCDC sends only the handle key of a deleted row.
            partial = bool(keys) and set(deleted) <= set(keys)
        elif after is None:
            raise FieldError("value", "expected one of 'u' (insert/update) or 'd' (delete)")
        elif before is not None:
            op = Op.UPDATE
            before = {**after, **before}  # "p" may hold only the changed columns
        else:
            # An update without old value looks exactly like an insert: both upsert.
            op = Op.INSERT
        return RowChange(
            op, schema, table, before, after, tuple(keys), types, ts, pos,
            partial_before=partial, physical_table_id=ptn,
        )

    def _claim_check(self, location: str, msg: RawMessage, index: int) -> Event:
        pos = msg.position.with_index(index)
        reader = self.options["claim_check_reader"]
        if reader is None:
            raise ClaimCheckError(self.protocol, pos, "key.ccl", f"message is stored at {location!r} but no claim-check storage is configured")
        try:
            stored = reader(location)
        except Exception as exc:  # user I/O
            raise ClaimCheckError(self.protocol, pos, "key.ccl", f"cannot read {location!r}: {exc}") from exc
        key, value = unwrap_claim_check(stored, lambda r: ClaimCheckError(self.protocol, pos, "claim-check", r))
        if key is None:
            raise ClaimCheckError(self.protocol, pos, "claim-check", "stored object lacks the message key")
        inner = self._decode(RawMessage(key, value, msg.position, msg.headers, msg.timestamp_ms))
        events = list(inner)
        if len(events) != 1:
            raise ClaimCheckError(self.protocol, pos, "claim-check", f"stored batch holds {len(events)} events, expected 1")
        return events[0]


class OpenProtocolEncoder(Encoder):
    """TiCDC's Open-protocol encoder: batches up to ``max_batch_size`` rows per message."""

    protocol: ClassVar[str] = "open-protocol"
    options_spec: ClassVar[dict[str, Option]] = {
        "timezone": TIMEZONE_OPTION,
        "max_batch_size": Option(int, 16, "events per message (TiCDC's max-batch-size)"),
        "output_old_value": Option(parse_bool, True, "write 'p' (old values) for updates and full deleted rows"),
        "delete_only_handle_key_columns": Option(parse_bool, False, "deletes carry only the handle key columns"),
    }

    def _columns(self, event: RowChange, row: Mapping[str, Any], only_keys: bool = False) -> dict[str, Any]:
        tz = self.options["timezone"]
        cols: dict[str, Any] = {}
        for name, value in row.items():
            if only_keys and name not in event.key_columns:
                continue
            ct = (event.column_types or {})[name]
            flags = 0
            if ct.kind in (TypeKind.BINARY, TypeKind.GEOMETRY):
                flags |= BINARY_FLAG
            if ct.unsigned:
                flags |= UNSIGNED_FLAG
            if name in event.key_columns:
                flags |= HANDLE_KEY_FLAG | PRIMARY_KEY_FLAG
            else:
                flags |= NULLABLE_FLAG
            col: dict[str, Any] = {"t": _CODE_OF[ct.mysql_type], "f": flags}
            if name in event.key_columns:
                col["h"] = True
            col["v"] = _encode_value(ct, value, tz)
            cols[name] = col
        return cols

    def _row_pair(self, event: RowChange) -> tuple[bytes, bytes]:
        key: dict[str, Any] = {"ts": event.commit_ts or 0, "scm": event.database, "tbl": event.table, "t": ROW}
        if event.physical_table_id is not None:
            key["ptn"] = event.physical_table_id
        value: dict[str, Any] = {}
        if event.op is Op.DELETE:
            only_keys = self.options["delete_only_handle_key_columns"] or not self.options["output_old_value"]
            value["d"] = self._columns(event, event.before or {}, only_keys)
        else:
            value["u"] = self._columns(event, event.after or {})
            if event.op is Op.UPDATE and self.options["output_old_value"] and event.before is not None:
                value["p"] = self._columns(event, event.before)
        return dumps(key), dumps(value)

    def encode_row(self, event: RowChange) -> tuple[bytes | None, bytes | None]:
        k, v = self._row_pair(event)
        return join_frames([k], versioned=True), join_frames([v], versioned=False)

    def encode_ddl(self, event: DdlChange) -> tuple[bytes | None, bytes | None]:
        key = dumps({"ts": event.commit_ts or 0, "scm": event.database, "tbl": event.table, "t": DDL})
        value = dumps({"q": event.sql, "t": _DDL_CODE.get(event.ddl_type or "", 0)})
        return join_frames([key], versioned=True), join_frames([value], versioned=False)

    def encode_watermark(self, event: Watermark) -> tuple[bytes | None, bytes | None] | None:
        key = dumps({"ts": event.ts, "t": RESOLVED})
        return join_frames([key], versioned=True), join_frames([b""], versioned=False)

    def encode_all(self, events: Iterable[Event], partitions: int) -> list[ProducerRecord]:
        out: list[ProducerRecord] = []
        pending: dict[int, list[tuple[bytes, bytes]]] = {}
        limit = max(1, self.options["max_batch_size"])

        def flush(p: int) -> None:
            pairs = pending.pop(p, None)
            if pairs:
                out.append(
                    ProducerRecord(
                        p,
                        join_frames([k for k, _ in pairs], versioned=True),
                        join_frames([v for _, v in pairs], versioned=False),
                    )
                )

        for event in events:
            if isinstance(event, RowChange):
                p = self.row_partition(event, partitions)
                pending.setdefault(p, []).append(self._row_pair(event))
                if len(pending[p]) >= limit:
                    flush(p)
            else:
                # DDL and resolved events follow every row before them, on every partition.
                for p in list(pending):
                    flush(p)
                out.extend(self.encode(event, partitions))
        for p in list(pending):
            flush(p)
        return out


def _encode_value(ct: ColumnType, value: Any, tz: Any) -> Any:
    if value is None:
        return None
    k = ct.kind
    code = _CODE_OF[ct.mysql_type]
    if code in _BLOB_CODES:
        data = value if isinstance(value, (bytes, bytearray)) else str(value).encode("utf-8")
        return base64.b64encode(data).decode("ascii")
    if k is TypeKind.BINARY:
        return go_quote(bytes(value))
    if k in (TypeKind.ENUM, TypeKind.SET):
        return int(to_text(ct, value) or 0)
    if k is TypeKind.DECIMAL:
        return str(value)
    if k is TypeKind.TIMESTAMPTZ:
        return format_datetime(value.astimezone(tz).replace(tzinfo=None))
    if k is TypeKind.TIMESTAMP:
        return format_datetime(value)
    if k is TypeKind.DATE:
        return value.isoformat()
    if k is TypeKind.TIME:
        return format_time(value)
    return value
