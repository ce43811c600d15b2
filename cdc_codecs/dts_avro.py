"""Aliyun DTS Avro (``com.alibaba.dts.formats.avro.Record``), as DTS and CloudCanal write it.

Two writer schemas exist: the official Java SDK's (``schemas/dts_record_v1.json``) and the
current one with a trailing ``bornTimestamp: long`` (``dts_record_v2.json``). Avro binary
has no framing, so reading a v2 record with v1 leaves bytes over and reading v1 with v2
runs off the end. ``schema_version=auto`` reads with v1 and accepts exactly one trailing
zig-zag long as v2's ``bornTimestamp``; ``1`` or ``2`` force a version.

Operations: INSERT/UPDATE/DELETE are rows (``fields`` names the columns with MySQL type
numbers, ``beforeImages``/``afterImages`` hold values in column order); DDL carries the
statement as ``afterImages`` (a string); HEARTBEAT becomes a wall-clock watermark;
BEGIN/COMMIT and the other control operations carry no change.

Values: Integer and Decimal arrive as strings; Character as bytes plus charset; Timestamp
as epoch seconds plus ``millis``; DateTime as broken-down fields. The MySQL type numbers
carry no sign, so INT maps to long and BIGINT to decimal(20, 0) (both hold signed and
unsigned values). There is no commit timestamp: order is offset, then sourcePosition.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import re
import zoneinfo
from decimal import Decimal
from functools import lru_cache
from importlib import resources
from typing import Any, ClassVar, Iterable, Mapping

import fastavro
import orjson

from cdc_codecs import _fields as f
from cdc_codecs._base import TIMEZONE_OPTION, Decoder, Encoder, Option
from cdc_codecs._fields import FieldError
from cdc_codecs.events import BinlogPosition, Clock, DdlChange, Event, Op, RawMessage, RowChange, Watermark
from cdc_codecs.open_protocol import TYPE_CODES
from cdc_codecs.types import (
    BYTES_KINDS,
    UTC,
    ColumnType,
    ColumnValueError,
    TypeKind,
    column_type,
    to_decimal,
)

_NS = "com.alibaba.dts.formats.avro."
_ROW_OPS = {"INSERT": Op.INSERT, "UPDATE": Op.UPDATE, "DELETE": Op.DELETE}
_SILENT_OPS = frozenset({"BEGIN", "COMMIT", "ROLLBACK", "ABORT", "CHECKPOINT", "COMMAND", "FILL", "FINISH", "CONTROL", "RDB", "NOOP", "INIT"})
_CHARSETS = {"utf8mb4": "utf-8", "utf8": "utf-8", "utf8mb3": "utf-8", "latin1": "latin-1", "ascii": "ascii", "gbk": "gbk", "gb2312": "gb2312", "gb18030": "gb18030", "big5": "big5", "ucs2": "utf-16-be", "utf16": "utf-16-be", "utf32": "utf-32-be"}
_POSITION_RE = re.compile(r"^(\d+)@(\d+)$")


def _load(name: str) -> Any:
    return fastavro.parse_schema(json.loads(resources.files("cdc_codecs.schemas").joinpath(name).read_text()))


SCHEMAS = {1: _load("dts_record_v1.json"), 2: _load("dts_record_v2.json")}


def _version(value: Any) -> str:
    text = str(value)
    if text not in ("auto", "1", "2"):
        raise ValueError(f"expected auto, 1 or 2, found {value!r}")
    return text


def _zigzag_long(data: bytes) -> int | None:
    """The value if ``data`` is exactly one Avro long, else None."""
    shift = result = 0
    for i, b in enumerate(data):
        result |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1) if i == len(data) - 1 else None
        if shift > 63:
            return None
    return None


@lru_cache(maxsize=4096)  # ColumnType is immutable; a stream repeats a handful of (code, charset)
def column_type_of(code: int, charset: str | None = None) -> ColumnType:
    names = TYPE_CODES.get(code)
    if code == 255:
        return column_type("geometry")
    if names is None:
        raise ColumnValueError(f"unknown MySQL type number {code}")
    binary = charset == "binary"
    name = names[1] if binary else names[0]
    if name in ("int", "mediumint", "smallint", "tinyint"):
        # No sign information: int unsigned needs a long, the smaller ones fit an int.
        return column_type(name, unsigned=name == "int")
    if name == "bigint":
        return ColumnType(TypeKind.UNSIGNED_LONG, "bigint", unsigned=False)
    if name == "decimal":
        return ColumnType(TypeKind.DECIMAL, "decimal")
    if name == "null":
        return ColumnType(TypeKind.STRING, "null")
    return column_type(name)


class DtsAvroDecoder(Decoder):
    protocol: ClassVar[str] = "dts-avro"
    options_spec: ClassVar[dict[str, Option]] = {
        "schema_version": Option(_version, "auto", "writer schema: 1 (Java SDK), 2 (with bornTimestamp) or auto"),
        "timezone": TIMEZONE_OPTION,
    }

    def _read(self, value: bytes) -> dict[str, Any]:
        version = self.options["schema_version"]
        schema = SCHEMAS[2 if version == "2" else 1]
        buf = io.BytesIO(value)
        try:
            record = fastavro.schemaless_reader(buf, schema, return_record_name=True)
        except Exception as exc:  # fastavro raises many types on corrupt input
            raise FieldError("value", f"invalid Avro for {_NS}Record (v{'2' if version == '2' else '1'}): {type(exc).__name__}: {exc}") from None
        rest = value[buf.tell():]
        if rest:
            born = _zigzag_long(rest) if version == "auto" else None
            if born is None:
                raise FieldError("value", f"{len(rest)} bytes left after the record; is schema_version right?")
            record["bornTimestamp"] = born
        return record

    def _decode(self, msg: RawMessage) -> Iterable[Event]:
        if not msg.value:
            raise FieldError("value", "empty, expected a DTS Avro record")
        record = self._read(msg.value)
        op = record["operation"]
        pos = msg.position
        event_time = record["sourceTimestamp"] * 1000
        if op == "HEARTBEAT":
            return [Watermark(event_time, pos, Clock.EPOCH_MS)]
        if op in _SILENT_OPS:
            return []
        name = record.get("objectName") or ""
        database, _, table = name.partition(".")
        binlog = _binlog(record.get("sourcePosition") or "", record["id"])
        if op == "DDL":
            sql = record.get("afterImages")
            if not isinstance(sql, str):
                raise FieldError("afterImages", "expected the DDL statement (a string) when operation is DDL")
            return [DdlChange(database, table, sql, None, pos, "DDL", event_time_ms=event_time, binlog=binlog)]
        row_op = _ROW_OPS.get(op)
        if row_op is None:
            raise FieldError("operation", f"unsupported operation {op!r}")
        fields = record.get("fields")
        if not isinstance(fields, list):
            raise FieldError("fields", "expected the column list for a row operation")
        names = [fd["name"] for fd in fields]
        codes = [fd["dataTypeNumber"] for fd in fields]
        tz = self.options["timezone"]
        types: dict[str, ColumnType] = {}
        before = self._image(record.get("beforeImages"), "beforeImages", names, codes, types, tz)
        after = self._image(record.get("afterImages"), "afterImages", names, codes, types, tz)
        if row_op is not Op.INSERT and before is None:
            raise FieldError("beforeImages", f"missing when operation is {op}")
        if row_op is not Op.DELETE and after is None:
            raise FieldError("afterImages", f"missing when operation is {op}")
        if row_op is Op.INSERT:
            before = None
        elif row_op is Op.DELETE:
            after = None
        for n, c in zip(names, codes):
            if n not in types:  # a column with no value in either image
                types[n] = f.convert(n, column_type_of, c)
        keys = _primary_key(record.get("tags") or {})
        return [RowChange(row_op, database, table, before, after, keys, types, None, pos, event_time, binlog)]

    def _image(
        self, image: Any, path: str, names: list[str], codes: list[int], types: dict[str, ColumnType], tz: dt.tzinfo,
    ) -> dict[str, Any] | None:
        if image is None:
            return None
        if not isinstance(image, list):
            raise FieldError(path, "expected an array of column values")
        if len(image) != len(names):
            raise FieldError(path, f"has {len(image)} values for {len(names)} fields")
        row: dict[str, Any] = {}
        for name, code, item in zip(names, codes, image):
            try:
                ct, value = _value(code, item, tz)
            except (ValueError, OverflowError, OSError, LookupError) as exc:
                # ColumnValueError, and what datetime (OSError from fromtimestamp) and codecs
                # raise for out-of-range fields.
                raise FieldError(f"{path}.{name}", str(exc)) from None
            types[name] = ct
            row[name] = value
        return row


def _binlog(source_position: str, record_id: int) -> BinlogPosition:
    m = _POSITION_RE.match(source_position)
    if m:
        return BinlogPosition(f"{int(m.group(2)):06d}", int(m.group(1)), record_id)
    return BinlogPosition(source_position, 0, record_id)


def _primary_key(tags: Mapping[str, str]) -> tuple[str, ...]:
    info = tags.get("pk_uk_info")
    return _primary_key_of(info) if info else ()


@lru_cache(maxsize=1024)  # the same text on every row of a table
def _primary_key_of(info: str) -> tuple[str, ...]:
    try:
        parsed = orjson.loads(info)
    except orjson.JSONDecodeError:
        return ()
    if isinstance(parsed, dict):
        pk = parsed.get("PRIMARY")
        if isinstance(pk, list) and all(isinstance(c, str) for c in pk):
            return tuple(pk)
    return ()


def _value(code: int, item: Any, tz: dt.tzinfo) -> tuple[ColumnType, Any]:
    if item is None:
        return column_type_of(code), None
    if isinstance(item, str):  # EmptyObject enum symbol: NULL or NONE
        return column_type_of(code), None
    kind, v = item
    kind = kind.removeprefix(_NS)
    if kind == "EmptyObject":
        return column_type_of(code), None
    if kind == "Character":
        charset = (v.get("charset") or "").lower()
        ct = column_type_of(code, "binary" if charset == "binary" else charset)
        if ct.kind in BYTES_KINDS:
            return ct, bytes(v["value"])
        try:
            return ct, bytes(v["value"]).decode(_CHARSETS.get(charset, charset or "utf-8"))
        except (LookupError, UnicodeDecodeError) as exc:
            raise ColumnValueError(f"cannot decode text in charset {charset!r}: {exc}") from None
    ct = column_type_of(code)
    if kind == "Integer":
        text = v["value"]
        try:
            number = int(text)
        except ValueError:
            raise ColumnValueError(f"expected an integer string, found {text!r}") from None
        if ct.kind is TypeKind.DECIMAL:
            return ct, Decimal(number)
        if ct.kind in (TypeKind.FLOAT, TypeKind.DOUBLE):
            return ct, float(number)
        return ct, _check_unsigned_or_signed(ct, number)
    if kind == "Decimal":
        return ct, to_decimal(ct, v["value"])
    if kind == "Float":
        return ct, float(v["value"])
    if kind == "Timestamp":
        moment = dt.datetime.fromtimestamp(v["timestamp"], UTC) + dt.timedelta(milliseconds=v["millis"])
        return ct, moment if ct.kind is TypeKind.TIMESTAMPTZ else moment.replace(tzinfo=None)
    if kind == "DateTime":
        return ct, _datetime(ct, v)
    if kind == "TimestampWithTimeZone":
        naive = _datetime(column_type("datetime"), v["value"])
        try:
            zone = dt.timezone(_offset(v["timezone"])) if v["timezone"][:1] in "+-" else zoneinfo.ZoneInfo(v["timezone"])
        except (ValueError, zoneinfo.ZoneInfoNotFoundError):
            raise ColumnValueError(f"unknown time zone {v['timezone']!r}") from None
        return ct, naive.replace(tzinfo=zone).astimezone(UTC) if naive else None
    if kind in ("BinaryObject", "BinaryGeometry"):
        return ct if ct.kind in BYTES_KINDS else column_type("blob"), bytes(v["value"])
    if kind in ("TextObject", "TextGeometry"):
        return ct if ct.kind not in BYTES_KINDS else column_type("text"), v["value"]
    raise ColumnValueError(f"unsupported DTS value type {kind}")


_INT_BITS = {"tinyint": 8, "smallint": 16, "mediumint": 24, "int": 32, "bigint": 64, "year": 16, "bit": 64}


def _check_unsigned_or_signed(ct: ColumnType, value: int) -> int:
    bits = _INT_BITS.get(ct.mysql_type, 64)
    if not -(1 << (bits - 1)) <= value < (1 << bits):
        raise ColumnValueError(f"{value} is outside {ct.mysql_type} (signed or unsigned)")
    return value


def _offset(text: str) -> dt.timedelta:
    sign = -1 if text[0] == "-" else 1
    hours, _, minutes = text[1:].partition(":")
    return sign * dt.timedelta(hours=int(hours), minutes=int(minutes or 0))


def _datetime(ct: ColumnType, v: Mapping[str, Any]) -> Any:
    year, month, day = v.get("year"), v.get("month"), v.get("day")
    hour, minute, second, millis = (v.get(k) or 0 for k in ("hour", "minute", "second", "millis"))
    try:
        if ct.kind is TypeKind.TIME:
            return dt.timedelta(hours=hour, minutes=minute, seconds=second, milliseconds=millis)
        if ct.kind is TypeKind.YEAR:
            return year
        if not year or not month or not day:
            return None  # MySQL zero date
        if ct.kind is TypeKind.DATE:
            return dt.date(year, month, day)
        return dt.datetime(year, month, day, hour, minute, second, millis * 1000)
    except (ValueError, TypeError) as exc:
        raise ColumnValueError(f"invalid date/time fields {dict(v)}: {exc}") from None


# ---------------------------------------------------------------- encoding

_CODE_OF = {
    "tinyint": 1, "smallint": 2, "int": 3, "float": 4, "double": 5, "timestamp": 7, "bigint": 8,
    "mediumint": 9, "date": 10, "time": 11, "datetime": 12, "year": 13, "bit": 16, "json": 245,
    "decimal": 246, "enum": 247, "set": 248, "tinyblob": 249, "mediumblob": 250, "longblob": 251,
    "blob": 252, "varchar": 253, "char": 254, "varbinary": 253, "binary": 254, "tinytext": 252,
    "text": 252, "mediumtext": 252, "longtext": 252, "geometry": 255,
}


class DtsAvroEncoder(Encoder):
    protocol: ClassVar[str] = "dts-avro"
    options_spec: ClassVar[dict[str, Option]] = {
        "schema_version": Option(lambda v: int(_version(v).replace("auto", "2")), 2, "writer schema version: 1 or 2"),
    }

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._next_id = 0

    def _record(self, op: str, database: str, table: str, event_time_ms: int | None, binlog: BinlogPosition | None) -> dict[str, Any]:
        self._next_id += 1
        record: dict[str, Any] = {
            "version": 0,
            "id": binlog.row if binlog else self._next_id,
            "sourceTimestamp": (event_time_ms or 0) // 1000,
            "sourcePosition": f"{binlog.pos}@{int(binlog.file) if binlog.file.isdigit() else 0}" if binlog else "0@0",
            "safeSourcePosition": "",
            "sourceTxid": "",
            "source": {"sourceType": "MySQL", "version": "8.0"},
            "operation": op,
            "objectName": f"{database}.{table}" if table else database,
            "processTimestamps": None,
            "tags": {},
            "fields": None,
            "beforeImages": None,
            "afterImages": None,
        }
        if self.options["schema_version"] == 2:
            record["bornTimestamp"] = event_time_ms or 0
        return record

    def _write(self, record: dict[str, Any]) -> bytes:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, SCHEMAS[self.options["schema_version"]], record)
        return buf.getvalue()

    def encode_row(self, event: RowChange) -> tuple[bytes | None, bytes | None]:
        types = dict(event.column_types or {})
        record = self._record(event.op.name, event.database, event.table, event.event_time_ms, event.binlog)
        record["fields"] = [{"name": n, "dataTypeNumber": _CODE_OF.get(t.mysql_type, 253)} for n, t in types.items()]
        if event.key_columns:
            record["tags"] = {"pk_uk_info": json.dumps({"PRIMARY": list(event.key_columns)})}

        def image(row: Mapping[str, Any] | None) -> list[Any] | None:
            return None if row is None else [_encode_value(types[n], row.get(n)) for n in types]

        record["beforeImages"] = image(event.before)
        record["afterImages"] = image(event.after)
        return None, self._write(record)

    def encode_ddl(self, event: DdlChange) -> tuple[bytes | None, bytes | None]:
        record = self._record("DDL", event.database, event.table, event.event_time_ms, event.binlog)
        record["afterImages"] = event.sql
        return None, self._write(record)

    def encode_watermark(self, event: Watermark) -> tuple[bytes | None, bytes | None] | None:
        record = self._record("HEARTBEAT", "", "", event.ts if event.clock is Clock.EPOCH_MS else event.ts >> 18, None)
        return None, self._write(record)


def _encode_value(ct: ColumnType, value: Any) -> Any:
    if value is None:
        return None
    k = ct.kind
    ns = _NS
    if k in (TypeKind.INT, TypeKind.LONG, TypeKind.UNSIGNED_LONG, TypeKind.YEAR, TypeKind.BIT):
        return (ns + "Integer", {"precision": 64, "value": str(value)})
    if k is TypeKind.DECIMAL:
        return (ns + "Decimal", {"value": str(value), "precision": ct.precision or 38, "scale": ct.scale or 0})
    if k in (TypeKind.FLOAT, TypeKind.DOUBLE):
        return (ns + "Float", {"value": float(value), "precision": 0, "scale": 0})
    if k in BYTES_KINDS:
        return (ns + "Character", {"charset": "binary", "value": bytes(value)})
    if k is TypeKind.TIMESTAMPTZ:
        epoch = value.astimezone(UTC).timestamp()
        return (ns + "Timestamp", {"timestamp": int(epoch // 1), "millis": value.microsecond // 1000})
    if k is TypeKind.TIMESTAMP:
        return (ns + "DateTime", {"year": value.year, "month": value.month, "day": value.day, "hour": value.hour,
                                  "minute": value.minute, "second": value.second, "millis": value.microsecond // 1000})
    if k is TypeKind.DATE:
        return (ns + "DateTime", {"year": value.year, "month": value.month, "day": value.day,
                                  "hour": None, "minute": None, "second": None, "millis": None})
    if k is TypeKind.TIME:
        total = value // dt.timedelta(milliseconds=1)
        h, rem = divmod(total, 3_600_000)
        m, rem = divmod(rem, 60_000)
        s, ms = divmod(rem, 1000)
        return (ns + "DateTime", {"year": None, "month": None, "day": None, "hour": h, "minute": m, "second": s, "millis": ms})
    return (ns + "Character", {"charset": "utf8mb4", "value": str(value).encode("utf-8")})
