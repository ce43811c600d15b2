"""Debezium envelopes: TiCDC's Debezium protocol, the Debezium MySQL connector, CloudCanal.

Value: ``{"schema": ..., "payload": {"op", "before", "after", "source", "ts_ms"}}`` for
rows (``op`` c/r/i insert, u update, d delete, m TiCDC watermark) and
``{"payload": {"ddl", "databaseName", "tableChanges", "source"}}`` for DDL. With
``schemas.enable=false`` / ``debezium-disable-schema`` the schema is absent (the
payload may then also be unwrapped). A null value is a tombstone and yields nothing.

Order: TiCDC writes ``source.commit_ts``; the MySQL connector and CloudCanal have none,
so their rows are ordered by offset and binlog position (``source.file``/``pos``/``row``).

Values are typed from, in order of precedence: the table's columns from the latest
``tableChanges`` seen (exact MySQL types), TiCDC's ``tidb_type`` schema parameter, the
Connect schema's logical type (Date, MicroTimestamp, ZonedTimestamp, Decimal, Bits,
Json, Enum, EnumSet...), and, without any schema, the JSON value itself.
"""

from __future__ import annotations

import base64
import datetime as dt
import struct
from decimal import Context, Decimal, InvalidOperation
from typing import Any, Callable, ClassVar, Iterable, Mapping, NamedTuple

import msgspec
import orjson

from cdc_codecs import _fields as f
from cdc_codecs._base import SCHEMAS_OPTION, TIMEZONE_OPTION, Decoder, Encoder, Option, dumps, loads, parse_bool
from cdc_codecs._fields import FieldError
from cdc_codecs.events import (
    BinlogPosition,
    Column,
    DdlChange,
    Event,
    Op,
    RawMessage,
    RowChange,
    TableSchema,
    Watermark,
)
from cdc_codecs.types import (
    UTC,
    ColumnType,
    ColumnValueError,
    TypeKind,
    b64decode_strict,
    check_int,
    column_type,
    final_type,
    parse_mysql_type,
    passthrough,
    stored_binary,
    to_decimal,
)

_OPS = {"c": Op.INSERT, "r": Op.INSERT, "i": Op.INSERT, "u": Op.UPDATE, "d": Op.DELETE}
EPOCH = dt.date(1970, 1, 1)
EPOCH_DT = dt.datetime(1970, 1, 1)

# Connect schema (type, logical name) -> our kind, when no MySQL type is known.
_LOGICAL: dict[str, ColumnType] = {
    "io.debezium.time.Date": column_type("date"),
    "io.debezium.time.Timestamp": column_type("datetime"),
    "io.debezium.time.MicroTimestamp": column_type("datetime"),
    "io.debezium.time.NanoTimestamp": column_type("datetime"),
    "io.debezium.time.ZonedTimestamp": column_type("timestamp"),
    "io.debezium.time.Time": column_type("time"),
    "io.debezium.time.MicroTime": column_type("time"),
    "io.debezium.time.NanoTime": column_type("time"),
    "io.debezium.time.Year": column_type("year"),
    "io.debezium.data.Json": column_type("json"),
    "io.debezium.data.Enum": column_type("enum"),
    "io.debezium.data.EnumSet": column_type("set"),
    "io.debezium.data.Bits": column_type("bit", length=64),
    "org.apache.kafka.connect.data.Decimal": ColumnType(TypeKind.DECIMAL, "decimal"),
    "io.debezium.data.geometry.Geometry": column_type("geometry"),
    "io.debezium.data.geometry.Point": column_type("point"),
}
_PRIMITIVE: dict[str, ColumnType] = {
    "boolean": ColumnType(TypeKind.BOOLEAN, "boolean"),
    "int8": column_type("tinyint"),
    "int16": column_type("smallint"),
    "int32": column_type("int"),
    "int64": column_type("bigint"),
    "float": column_type("float"),
    "float32": column_type("float"),
    "double": column_type("double"),
    "float64": column_type("double"),
    "string": column_type("text"),
    "bytes": column_type("blob"),
}


class DebeziumDecoder(Decoder):
    protocol: ClassVar[str] = "debezium"
    options_spec: ClassVar[dict[str, Option]] = {
        "timezone": TIMEZONE_OPTION, "schemas": SCHEMAS_OPTION,
        "binary_handling_mode": Option(lambda v: _choice(v, tuple(BINARY_TEXT)), "bytes",
                                       "the connector's binary.handling.mode: how a binary column's text is written "
                                       "(bytes and base64: base64; base64-url-safe; hex)"),
    }

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._binary = BINARY_TEXT[self.options["binary_handling_mode"]]
        # Exact MySQL column types per table, learnt from tableChanges of DDL events.
        self._tables: dict[tuple[str, str], TableSchema] = {(s.database, s.table): s for s in self.options["schemas"]}
        # Compiled row converters by (schema bytes, database, table); a DDL's tableChanges
        # changes the known types, so it empties the cache.
        self._codecs: dict[tuple[bytes | None, str, str], _RowCodec] = {}

    def known_schemas(self) -> list[TableSchema]:
        return list(self._tables.values())

    def _decode(self, msg: RawMessage) -> Iterable[Event]:
        if msg.value is None:
            return []  # tombstone after a delete: compaction marker, no change
        payload, schema = _envelope(msg.value)
        pos = msg.position
        source = f.optional(payload, "source", dict, "payload.", {})
        commit_ts = f.tso(f.optional(source, "commit_ts", int, "payload.source."), "payload.source.commit_ts")
        binlog = None
        file = f.optional(source, "file", str, "payload.source.")
        # A snapshot read (op "r") is no binlog event: every one carries the snapshot's start.
        if file and payload.get("op") != "r":
            binlog = BinlogPosition(file, f.optional(source, "pos", int, "payload.source.", 0),
                                    f.optional(source, "row", int, "payload.source.", 0),
                                    f.optional(source, "server_id", int, "payload.source.", 0))
        event_time = f.optional(source, "ts_ms", int, "payload.source.") or f.optional(payload, "ts_ms", int, "payload.")
        if "ddl" in payload and "op" not in payload:
            return [self._ddl(payload, source, commit_ts, pos, event_time, binlog)]
        op_code = f.require(payload, "op", str, "payload.")
        if op_code == "m":
            if commit_ts is None:
                raise FieldError("payload.source.commit_ts", "missing when 'op' is 'm'")
            return [Watermark(commit_ts, pos)]
        op = _OPS.get(op_code)
        if op is None:
            raise FieldError("payload.op", f"expected one of c, r, u, d, m, found {op_code!r}")
        database = f.require(source, "db", str, "payload.source.")
        table = f.require(source, "table", str, "payload.source.")
        known = self._tables.get((database, table))
        codec = self._codec(schema, database, table, known)
        if codec.decimals and _inexact_decimals(payload, codec.decimals):
            payload = _exact_decimals(payload, msg.value, codec.decimals)
        if codec.envelope is not None and not payload.keys() <= codec.envelope:
            undescribed = next(n for n in payload if n not in codec.envelope)
            raise FieldError(f"payload.{undescribed}", "not described by the message's schema (its fields are "
                             f"{', '.join(sorted(codec.envelope))})")
        before = self._row(payload, "before", codec)
        after = self._row(payload, "after", codec)
        if op is Op.DELETE:
            if before is None:
                raise FieldError("payload.before", "missing when 'op' is 'd'")
            after = None
        else:
            if after is None:
                raise FieldError("payload.after", f"missing when 'op' is '{op_code}'")
            if op is Op.INSERT:
                before = None
        image = after or before or {}
        keys = self._keys(msg.key, known, image)
        if list(image) == codec.order:
            types = codec.types
        else:  # inferred types look at the JSON values (a struct is a geometry, an object JSON)
            types = codec.types_of((after and payload["after"]) or (before and payload["before"]) or {})
        return [
            RowChange(op, database, table, before, after, keys, types, commit_ts, pos, event_time, binlog)
        ]

    def _codec(self, schema: bytes | None, database: str, table: str, known: TableSchema | None) -> _RowCodec:
        key = (schema, database, table)
        codec = self._codecs.get(key)
        if codec is None:
            parsed = orjson.loads(schema) if schema is not None else None
            codec = _RowCodec.compile(*_row_schema(parsed), known, self._binary)
            if len(self._codecs) >= 1024:
                self._codecs.clear()
            self._codecs[key] = codec
        return codec

    @staticmethod
    def _row(payload: Mapping[str, Any], part: str, codec: _RowCodec) -> dict[str, Any] | None:
        row = payload.get(part)
        if row is None:
            return None
        if type(row) is not dict:
            f.optional(payload, part, dict, "payload.")  # raises the typed error
        converters = codec.converters
        try:
            out = {name: converters[name](value) for name, value in row.items()}
        except (KeyError, ColumnValueError):
            pass
        else:
            if codec.envelope is None or len(out) == len(converters):
                return out
        # Without a schema a column no DDL typed is typed from its JSON value. With one,
        # every column must be one the schema describes; a bad value is named.
        described = codec.envelope is not None
        out = {}
        for name, value in row.items():
            conv = converters.get(name)
            try:
                if conv is not None:
                    out[name] = conv(value)
                elif described:
                    raise ColumnValueError(f"column not described by the schema's '{part}' fields")
                else:
                    out[name] = schemaless_value(value)
            except ColumnValueError as exc:
                raise FieldError(f"payload.{part}.{name}", str(exc)) from None
        for name in codec.required:
            if name not in row:
                raise FieldError(f"payload.{part}.{name}", "missing, and the schema says it is not optional")
        return out

    def _keys(self, key: bytes | None, known: TableSchema | None, image: Mapping[str, Any]) -> tuple[str, ...]:
        """Key columns: the Kafka key's fields, else the primary key of the table's last tableChanges."""
        top = _members(key, "key") if key else None
        if top is not None:
            payload = top.get("payload")
            if payload is None:
                return tuple(top)  # schemas disabled: the key document is the key
            fields = orjson.loads(memoryview(payload))
            if type(fields) is dict:
                return tuple(fields)
        if known and all(k in image for k in known.key_columns):
            return known.key_columns
        return ()

    def _ddl(
        self, payload: Mapping[str, Any], source: Mapping[str, Any], commit_ts: int | None,
        pos: Any, event_time: int | None, binlog: BinlogPosition | None,
    ) -> DdlChange:
        sql = f.require(payload, "ddl", str, "payload.")
        database = f.optional(payload, "databaseName", str, "payload.") or f.optional(source, "db", str, "payload.source.", "")
        table = f.optional(source, "table", str, "payload.source.", "") or ""
        changes = f.optional(payload, "tableChanges", (list, dict), "payload.", [])
        if isinstance(changes, dict):  # CloudCanal writes one object, not a list
            changes = [changes]
        schema_after = None
        ddl_type = None
        for i, change in enumerate(changes):
            path = f"payload.tableChanges[{i}]."
            change = f.as_object(change, path.rstrip("."))
            ddl_type = f.optional(change, "type", str, path)
            tbl = f.optional(change, "table", dict, path)
            if tbl is not None:
                schema_after = _table_schema(tbl, database, table, path + "table.")
                self._tables[(database, table)] = schema_after
                self._codecs.clear()
            elif ddl_type == "DROP":
                self._tables.pop((database, table), None)
                self._codecs.clear()
        return DdlChange(database, table, sql, commit_ts, pos, ddl_type, None, schema_after, event_time, binlog)


_SPLIT = msgspec.json.Decoder(dict[str, msgspec.Raw])


def _members(data: bytes, what: str) -> dict[str, Any] | None:
    """The members of a top-level JSON object, left as raw JSON text; None if the JSON is not an object.

    msgspec finds where each member ends without building it, so a Connect schema (most of
    a message, the same for every row of a table) costs a scan, not a parse. ``payload``
    stays a msgspec.Raw (read it through ``memoryview``); every other member becomes bytes,
    checked to be UTF-8 as the full parse would (msgspec's scan does not look inside text).
    """
    try:
        top = _SPLIT.decode(data)
    except msgspec.ValidationError:
        top = None  # valid JSON, not an object
    except (msgspec.DecodeError, UnicodeDecodeError):  # msgspec checks UTF-8 in names itself
        top = None
        loads(data, what)  # raises the typed error that names what is wrong
    else:
        try:
            for name, raw in top.items():
                if name != "payload":
                    top[name] = text = bytes(raw)
                    if not text.isascii():
                        text.decode()
            return top
        except UnicodeDecodeError:
            pass  # orjson names it below
    doc = loads(data, what)  # orjson is the reference for what valid JSON is
    return {name: orjson.dumps(value) for name, value in doc.items()} if type(doc) is dict else None


# JSON numbers with a fraction or an exponent as Decimal, from their text: exact at any precision.
_EXACT = msgspec.json.Decoder(float_hook=Decimal)
_DECIMALS = Context(prec=100, traps=[InvalidOperation])  # DECIMAL(65, s) exactly (the default context has 28 digits)


def _inexact_decimals(payload: Mapping[str, Any], decimals: tuple[str, ...]) -> bool:
    """Whether a decimal column of the row images was parsed as a float (a rounded binary number).

    JsonConverter's ``decimal.format=NUMERIC`` (and ``decimal.handling.mode=double``) write
    decimals as JSON numbers; orjson reads those, and integers beyond 64 bits, as floats.
    """
    for part in ("before", "after"):
        row = payload.get(part)
        if type(row) is dict:
            for name in decimals:
                if type(row.get(name)) is float:
                    return True
    return False


def _exact_decimals(payload: dict[str, Any], value: bytes, decimals: tuple[str, ...]) -> dict[str, Any]:
    """``payload`` with its decimal columns' numbers parsed again from the message's text, as Decimal.

    Only those columns: every other number keeps the fast parse (a double stays a float).
    """
    top = _members(value, "value")
    raw = top.get("payload") if top is not None else None
    exact = _EXACT.decode(memoryview(raw)) if raw is not None else {n: _EXACT.decode(r) for n, r in (top or {}).items()}
    out = dict(payload)
    for part in ("before", "after"):
        row, exact_row = payload.get(part), exact.get(part)
        if type(row) is dict and type(exact_row) is dict:
            out[part] = {**row, **{n: exact_row[n] for n in decimals if type(row.get(n)) is float}}
    return out


def _envelope(value: bytes) -> tuple[dict[str, Any], bytes | None]:
    """The payload of a Connect JSON envelope, parsed, and its schema's text (the converter cache key).

    Without an envelope (schemas disabled, payload unwrapped) the document is the payload.
    """
    top = _members(value, "value")
    if top is None:
        f.as_object(loads(value), "value")  # raises the error naming what the document is
        raise AssertionError("unreachable")  # pragma: no cover
    payload = top.get("payload")
    if payload is None:
        return {name: orjson.loads(memoryview(raw)) for name, raw in top.items()}, None
    parsed = orjson.loads(memoryview(payload))
    if type(parsed) is not dict:
        f.as_object(parsed, "payload")
    return parsed, top.get("schema")


class _RowCodec(NamedTuple):
    """What one row schema compiles to: a converter and a declared type per column."""

    converters: dict[str, Callable[[Any], Any]]
    types: dict[str, ColumnType]  # in schema order; reused when a row has exactly these columns
    order: list[str]
    envelope: frozenset[str] | None  # payload members the schema describes; None: no schema
    required: tuple[str, ...]  # row columns the schema says are not optional
    decimals: tuple[str, ...]  # columns typed decimal: a JSON number there is read again exactly

    @staticmethod
    def compile(
        envelope: frozenset[str] | None, field_schemas: Mapping[str, Mapping[str, Any]], known: TableSchema | None,
        binary: Callable[[Any], bytes] | None = None,
    ) -> _RowCodec:
        names = list(field_schemas)
        if known is not None and envelope is None:
            # With a schema, its fields are the row's columns (typed by the DDL where known).
            names += [c.name for c in known.columns if c.name not in field_schemas]
        converters = {}
        types = {}
        for name in names:
            fs = field_schemas.get(name)
            ct = _known_type(known, name)
            converters[name] = column_converter(fs, ct, binary)
            declared = ct or schema_type(fs)
            if declared is not None:
                types[name] = declared
        required = tuple(n for n, fs in field_schemas.items() if fs.get("optional") is False)
        decimals = tuple(n for n, t in types.items() if t.kind is TypeKind.DECIMAL)
        return _RowCodec(converters, types, list(types) if len(types) == len(names) else [], envelope, required, decimals)

    def types_of(self, raw_image: Mapping[str, Any]) -> dict[str, ColumnType]:
        """Declared types, inferred from the JSON value where neither schema nor DDL gives one."""
        types = self.types
        return {name: types.get(name) or _infer(value) for name, value in raw_image.items()}


# Connect types whose JSON envelope members tidelake reads, and what each must be.
_ENVELOPE_TYPES = {"before": "struct", "after": "struct", "source": "struct", "op": "string"}


def _row_schema(schema: Any) -> tuple[frozenset[str] | None, dict[str, Mapping[str, Any]]]:
    """(payload members described, the row struct's field schemas by column) of a row envelope's schema.

    No schema (schemas disabled): (None, {}). A schema that is present must describe the
    envelope: a struct whose fields name the payload members, ``before``/``after`` structs
    of named, typed columns. Anything else is a FieldError naming where it differs, since a
    row read without the schema it claims would be typed by guesswork.
    """
    if schema is None:
        return None, {}
    if type(schema) is not dict:
        raise FieldError("schema", f"expected a Connect struct schema (an object), found {schema!r:.60}")
    if schema.get("type") != "struct":
        raise FieldError("schema.type", f"expected 'struct' for a row envelope, found {schema.get('type')!r}")
    fields = schema.get("fields")
    if type(fields) is not list:
        raise FieldError("schema.fields", f"expected the envelope's field schemas (an array), found {fields!r:.60}")
    envelope: dict[str, Mapping[str, Any]] = {}
    for i, fs in enumerate(fields):
        if type(fs) is not dict or type(fs.get("field")) is not str:
            raise FieldError(f"schema.fields[{i}]", f"expected a field schema with a 'field' name, found {fs!r:.60}")
        name = fs["field"]
        expected = _ENVELOPE_TYPES.get(name)
        if expected is not None and fs.get("type") != expected:
            raise FieldError(f"schema.fields[{i}].type", f"expected {expected!r} for {name!r}, found {fs.get('type')!r}")
        envelope[name] = fs
    columns: dict[str, Mapping[str, Any]] = {}
    for i, fs in enumerate(fields):
        if fs["field"] not in ("after", "before"):
            continue
        row_fields = fs.get("fields")
        if type(row_fields) is not list:
            raise FieldError(f"schema.fields[{i}].fields", f"expected the columns of {fs['field']!r} (an array), found {row_fields!r:.60}")
        part: dict[str, Mapping[str, Any]] = {}
        for j, c in enumerate(row_fields):
            if type(c) is not dict or type(c.get("field")) is not str or type(c.get("type")) is not str:
                raise FieldError(f"schema.fields[{i}].fields[{j}]", f"expected a column schema with 'field' and 'type', found {c!r:.60}")
            part[c["field"]] = c
        if columns and part != columns:
            raise FieldError(f"schema.fields[{i}]", "'before' and 'after' describe different columns")
        columns = part
    return frozenset(envelope), columns


def _table_schema(tbl: Mapping[str, Any], database: str, table: str, path: str) -> TableSchema:
    columns = []
    for i, col in enumerate(f.require(tbl, "columns", list, path)):
        cpath = f"{path}columns[{i}]."
        col = f.as_object(col, cpath.rstrip("."))
        name = f.require(col, "name", str, cpath)
        columns.append(Column(name, _mysql_type_of_column(col, cpath), bool(col.get("optional", True))))
    keys = f.string_list(tbl, "primaryKeyColumnNames", path)
    return TableSchema(database, table, tuple(columns), keys)


def _mysql_type_of_column(col: Mapping[str, Any], path: str) -> ColumnType:
    text = f.optional(col, "typeExpression", str, path) or f.require(col, "typeName", str, path)
    enum_values = col.get("enumValues")
    try:
        ct = parse_mysql_type(text)
    except ColumnValueError as exc:
        raise FieldError(path + "typeName", str(exc)) from None
    length, scale = col.get("length"), col.get("scale")
    if ct.kind is TypeKind.DECIMAL and isinstance(length, int) and length > 0 and "(" not in text:
        ct = column_type("decimal", unsigned=ct.unsigned, precision=length, scale=scale if isinstance(scale, int) else 0)
    elif ct.kind is TypeKind.BIT and isinstance(length, int) and length > 0:
        ct = column_type("bit", length=length)
    elif ct.kind in (TypeKind.ENUM, TypeKind.SET) and isinstance(enum_values, list) and ct.elements is None:
        ct = column_type(ct.mysql_type, elements=tuple(str(e).strip("'") for e in enum_values))
    return ct


def _known_type(known: TableSchema | None, name: str) -> ColumnType | None:
    if known is None:
        return None
    col = known.column(name)
    return col.type if col else None


def schema_type(field_schema: Mapping[str, Any] | None) -> ColumnType | None:
    if not field_schema:
        return None
    params = field_schema.get("parameters") or {}
    tidb_type = field_schema.get("tidb_type") or params.get("tidb_type") if isinstance(params, dict) else None
    if isinstance(tidb_type, str):
        try:
            return parse_mysql_type(tidb_type)
        except ColumnValueError:
            pass
    name = field_schema.get("name")
    if isinstance(name, str) and name in _LOGICAL:
        ct = _LOGICAL[name]
        if isinstance(params, dict):
            if ct.kind is TypeKind.BIT and str(params.get("length", "")).isdigit():
                return column_type("bit", length=int(params["length"]))
            if ct.kind in (TypeKind.ENUM, TypeKind.SET) and isinstance(params.get("allowed"), str):
                return column_type(ct.mysql_type, elements=tuple(params["allowed"].split(",")))
            if ct.kind is TypeKind.DECIMAL and str(params.get("scale", "")).isdigit():
                p = params.get("connect.decimal.precision")
                return ColumnType(TypeKind.DECIMAL, "decimal", precision=int(p) if str(p).isdigit() else None, scale=int(params["scale"]))
        return ct
    return _PRIMITIVE.get(str(field_schema.get("type")))


def _infer(value: Any) -> ColumnType:
    """The type of a column nothing describes, from its JSON value (schemas disabled)."""
    if type(value) is dict:
        return _LOGICAL["io.debezium.data.geometry.Geometry"] if _is_geometry(value) else _LOGICAL["io.debezium.data.Json"]
    if type(value) is list:
        return _LOGICAL["io.debezium.data.Json"]
    if isinstance(value, bool):
        return _PRIMITIVE["boolean"]
    if isinstance(value, int):
        return _PRIMITIVE["int64"]
    if isinstance(value, float):
        return _PRIMITIVE["double"]
    return _PRIMITIVE["string"]


def column_converter(field_schema: Mapping[str, Any] | None, known: ColumnType | None,
                     binary: Callable[[Any], bytes] | None = None) -> Callable[[Any], Any]:
    """A converter from one column's Debezium JSON values to typed values.

    Its type comes from the MySQL type if known, else the Connect schema. Both steps are
    chosen here, once per column: undo the Connect representation (``_CONNECT``, by logical
    type), then fit the result to the column type. A value already in its final Python type
    returns at the first check; anything else goes through ``_fit``, which converts or
    raises the precise ColumnValueError.
    """
    logical = field_schema.get("name") if field_schema else None
    connect = field_schema.get("type") if field_schema else None
    params = (field_schema or {}).get("parameters") or {}
    target = known or schema_type(field_schema)
    # The JSON kinds the Connect type allows (exact types: a JSON true is no int8).
    allowed = _CONNECT_JSON.get(connect) if isinstance(connect, str) else None
    decode = _CONNECT.get(logical) if isinstance(logical, str) else None
    if decode is None and connect == "bytes":
        decode = _connect_bytes
    if logical == "org.apache.kafka.connect.data.Decimal" and allowed is not None:
        # JsonConverter's decimal.format=NUMERIC writes the decimal as a JSON number, though
        # its Connect type stays bytes (decimal.format=BASE64, the default, writes base64 text).
        allowed = (*allowed, int, Decimal)

    def check(value: Any) -> None:
        if type(value) not in allowed:  # type: ignore[operator]
            raise ColumnValueError(f"the schema says {connect}, found {value!r:.60}")

    fit = None
    early = allowed is not None
    if target is not None:
        fast = final_type(target)
        if early and decode is None and (fast is None or fast in allowed or fast not in _JSON_KINDS):  # type: ignore[operator]
            # Every value the fast path accepts is of a kind the Connect type allows, so the
            # check runs on the slow path alone: the usual value costs no extra test.
            early = False

            def general(value: Any) -> Any:
                check(value)
                return _fit(value, target, binary)
        else:

            def general(value: Any) -> Any:
                return _fit(value, target, binary)

        fit = passthrough(target, general)
    if not early and decode is None and fit is not None:
        return lambda value: None if value is None else fit(value)

    def convert(value: Any) -> Any:
        if value is None:
            return None
        if early:
            check(value)
        if decode is not None:
            try:
                value = decode(value, params)
            except (OverflowError, ValueError) as exc:  # dates and times out of Python's range, bad scales
                if isinstance(exc, ColumnValueError):
                    raise
                raise ColumnValueError(f"{logical or connect} value {value!r} is out of range: {exc}") from None
        return fit(value) if fit is not None else value

    return convert


def _connect_decimal_value(value: Any, params: Any) -> Decimal:
    return _connect_decimal(value, int(params.get("scale", 0)) if isinstance(params, dict) else 0)


def _connect_variable_decimal(value: Any, params: Any) -> Any:
    return _connect_decimal(value.get("value"), _int(value.get("scale"))) if isinstance(value, dict) else value


def _connect_wkb(value: Any, params: Any) -> Any:
    return geometry_wkb(value) if isinstance(value, dict) else value


_GEOMETRY_MEMBERS = frozenset({"x", "y", "wkb", "srid"})
_POINT_WKB = struct.Struct("<BIdd")  # little-endian byte order mark, type 1 (Point), x, y


def _is_geometry(value: dict[str, Any]) -> bool:
    """Debezium's Geometry ``{wkb, srid}`` and Point ``{x, y, wkb, srid}`` structs, as JSON."""
    return value.keys() <= _GEOMETRY_MEMBERS and ("wkb" in value or ("x" in value and "y" in value))


def geometry_wkb(value: Mapping[str, Any]) -> bytes:
    """The WKB of a Debezium Geometry / Point struct: its ``wkb``, or a Point built from ``x``/``y``.

    ``srid`` is not part of WKB and is dropped, as Debezium's own ``wkb`` drops it.
    """
    wkb = value.get("wkb")
    if wkb is not None:
        return _b64(wkb)
    x, y = value.get("x"), value.get("y")
    if type(x) in (int, float) and type(y) in (int, float):
        return _POINT_WKB.pack(1, 1, float(x), float(y))
    raise ColumnValueError(f"expected a geometry with 'wkb' or numeric 'x' and 'y', found {value!r:.80}")


def schemaless_value(value: Any) -> Any:
    """A column's JSON value when nothing describes it: a geometry struct is its WKB, any
    other object or array is JSON text (never a Python dict, which no column type holds)."""
    if type(value) is dict:
        return geometry_wkb(value) if _is_geometry(value) else orjson.dumps(value).decode()
    if type(value) is list:
        return orjson.dumps(value).decode()
    return value


_JSON_KINDS = (dict, list, str, int, float, bool)
# Connect schema type -> the JSON value types its JsonConverter writes.
_CONNECT_JSON: dict[str, tuple[type, ...]] = {
    "int8": (int,), "int16": (int,), "int32": (int,), "int64": (int,),
    "float": (int, float, Decimal), "float32": (int, float, Decimal), "double": (int, float, Decimal),
    "float64": (int, float, Decimal), "boolean": (bool,), "string": (str,), "bytes": (str,),
    "struct": (dict,), "array": (list,), "map": (dict, list),
}


def _connect_bytes(value: Any, params: Any) -> bytes:
    return _b64(value)


# Connect logical type -> how its JSON value becomes a Python value.
_CONNECT: dict[str, Callable[[Any, Any], Any]] = {
    "io.debezium.time.Date": lambda v, p: EPOCH + dt.timedelta(days=_int(v)),
    "io.debezium.time.Timestamp": lambda v, p: EPOCH_DT + dt.timedelta(milliseconds=_int(v)),
    "io.debezium.time.MicroTimestamp": lambda v, p: EPOCH_DT + dt.timedelta(microseconds=_int(v)),
    "io.debezium.time.NanoTimestamp": lambda v, p: EPOCH_DT + dt.timedelta(microseconds=_int(v) // 1000),
    "io.debezium.time.ZonedTimestamp": lambda v, p: _zoned(v),
    "io.debezium.time.Time": lambda v, p: dt.timedelta(milliseconds=_int(v)),
    "io.debezium.time.MicroTime": lambda v, p: dt.timedelta(microseconds=_int(v)),
    "io.debezium.time.NanoTime": lambda v, p: dt.timedelta(microseconds=_int(v) // 1000),
    "io.debezium.data.Bits": lambda v, p: int.from_bytes(_b64(v), "little"),  # Debezium writes BIT little-endian
    "org.apache.kafka.connect.data.Decimal": _connect_decimal_value,
    "io.debezium.data.VariableScaleDecimal": _connect_variable_decimal,
    "io.debezium.data.geometry.Geometry": _connect_wkb,
    "io.debezium.data.geometry.Point": _connect_wkb,
}


def _fit(value: Any, ct: ColumnType, binary: Callable[[Any], bytes] | None = None) -> Any:
    k = ct.kind
    if k in (TypeKind.INT, TypeKind.LONG, TypeKind.UNSIGNED_LONG, TypeKind.YEAR, TypeKind.BIT):
        if isinstance(value, bool):
            return int(value)
        if not isinstance(value, int):
            raise ColumnValueError(f"expected an integer for {ct}, found {value!r}")
        if k is TypeKind.UNSIGNED_LONG and value < 0:
            value += 1 << 64  # bigint.unsigned.handling.mode=long wraps values >= 2**63
        return check_int(ct, value)
    if k is TypeKind.BOOLEAN:
        if isinstance(value, bool):
            return value
        raise ColumnValueError(f"expected a boolean for {ct}, found {value!r}")
    if k is TypeKind.DECIMAL:
        return value if isinstance(value, Decimal) else to_decimal(ct, value)
    if k is TypeKind.FLOAT or k is TypeKind.DOUBLE:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise ColumnValueError(f"expected a number for {ct}, found {value!r}")
    if k in (TypeKind.BINARY, TypeKind.GEOMETRY):
        if isinstance(value, bytes):
            return stored_binary(ct, value)
        if k is TypeKind.GEOMETRY and type(value) is dict:
            return geometry_wkb(value)  # the struct, schemas disabled
        # a binary column's text: TiCDC's base64; the connector's by its binary.handling.mode (bytes and base64: base64)
        return stored_binary(ct, (binary or _b64)(value))
    if k is TypeKind.DATE:
        if isinstance(value, dt.date):
            return value
    elif k is TypeKind.TIMESTAMP:
        if isinstance(value, dt.datetime):
            return value.replace(tzinfo=None) if value.tzinfo else value
    elif k is TypeKind.TIMESTAMPTZ:
        if isinstance(value, dt.datetime):
            return value if value.tzinfo else value.replace(tzinfo=UTC)
        if isinstance(value, str):
            return _zoned(value)
    elif k is TypeKind.TIME:
        if isinstance(value, dt.timedelta):
            return value
        if isinstance(value, int):
            return dt.timedelta(microseconds=value)
    elif isinstance(value, str):
        return value
    elif k is TypeKind.JSON and type(value) in (dict, list):
        return orjson.dumps(value).decode()  # the document itself, schemas disabled
    raise ColumnValueError(f"expected a {ct} value, found {value!r}")


def _int(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ColumnValueError(f"expected an integer, found {value!r}")


def _text_bytes(decode: Callable[[str], bytes], what: str) -> Callable[[Any], bytes]:
    """A binary column's text to its bytes by ``decode``, a typed error naming ``what`` otherwise."""

    def convert(value: Any) -> bytes:
        if not isinstance(value, str):
            raise ColumnValueError(f"expected {what} text, found {value!r}")
        try:
            return decode(value)
        except ValueError:
            raise ColumnValueError(f"expected {what}, found {value[:40]!r}") from None

    return convert


_b64 = _text_bytes(b64decode_strict, "base64")


# Debezium MySQL's binary.handling.mode: how a binary column's value is written where its Connect type is a
# string (bytes: a Connect bytes value, which JsonConverter writes as base64).
BINARY_TEXT: dict[str, Callable[[Any], bytes]] = {
    "bytes": _b64, "base64": _b64,
    "base64-url-safe": _text_bytes(lambda t: base64.b64decode(t, altchars=b"-_", validate=True), "url-safe base64"),
    "hex": _text_bytes(bytes.fromhex, "hexadecimal"),
}


def _zoned(value: Any) -> dt.datetime:
    if not isinstance(value, str):
        raise ColumnValueError(f"expected an ISO-8601 timestamp, found {value!r}")
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        raise ColumnValueError(f"expected an ISO-8601 timestamp, found {value!r}") from None
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).astimezone(UTC)


def _connect_decimal(value: Any, scale: int) -> Decimal:
    if isinstance(value, (int, Decimal)) and not isinstance(value, bool):
        return _at_scale(Decimal(value), scale)  # decimal.format=NUMERIC
    if isinstance(value, float):
        raise ColumnValueError(f"decimal {value!r} was read as a float")  # unreachable: _exact_decimals
    unscaled = int.from_bytes(_b64(value), "big", signed=True)
    # Built from its digits, not by scaleb: arithmetic rounds to the context's 28 digits.
    digits = Decimal(unscaled).as_tuple()
    return Decimal((digits.sign, digits.digits, -scale))


def _at_scale(value: Decimal, scale: int) -> Decimal:
    """A NUMERIC decimal with its schema's scale (Jackson may write 1E-7 for 0.0000001), never rounded:
    Connect's Decimal carries exactly the schema's scale, so more fraction digits are an error."""
    if not value.is_finite():
        raise ColumnValueError(f"expected a finite decimal, found {value}")
    sign, digits, exponent = value.as_tuple()
    if exponent == -scale:  # type: ignore[operator]
        return value
    if exponent < -scale:  # type: ignore[operator]
        raise ColumnValueError(f"decimal {value} has more fraction digits than the schema's scale {scale}")
    return Decimal((sign, digits + (0,) * (exponent + scale), -scale))  # type: ignore[operator]


# ---------------------------------------------------------------- encoding

_SOURCE_SCHEMA = [
    {"type": "string", "optional": False, "field": "version"},
    {"type": "string", "optional": False, "field": "connector"},
    {"type": "string", "optional": False, "field": "name"},
    {"type": "int64", "optional": False, "field": "ts_ms"},
    {"type": "string", "optional": False, "field": "db"},
    {"type": "string", "optional": True, "field": "table"},
    {"type": "int64", "optional": False, "field": "server_id"},
    {"type": "string", "optional": False, "field": "file"},
    {"type": "int64", "optional": False, "field": "pos"},
    {"type": "int32", "optional": False, "field": "row"},
]


_TRANSACTION_SCHEMA = {
    "type": "struct", "optional": True, "name": "event.block", "version": 1, "field": "transaction",
    "fields": [
        {"type": "string", "optional": False, "field": "id"},
        {"type": "int64", "optional": False, "field": "total_order"},
        {"type": "int64", "optional": False, "field": "data_collection_order"},
    ],
}


def field_schema_of(name: str, ct: ColumnType, optional: bool = True, precise: bool = False) -> dict[str, Any]:
    """The Connect field schema Debezium writes for a MySQL column type; ``precise``: DECIMAL as
    Connect's Decimal (the MySQL connector's default ``decimal.handling.mode=precise``), else
    as a double (TiCDC)."""
    k = ct.kind
    fs: dict[str, Any] = {"field": name, "optional": optional}
    if k is TypeKind.DECIMAL and precise:
        fs.update(type="bytes", name="org.apache.kafka.connect.data.Decimal", version=1,
                  parameters={"scale": str(ct.scale or 0), "connect.decimal.precision": str(ct.precision or 10)})
        fs["tidb_type"] = str(ct).upper()
        return fs
    if k is TypeKind.INT:
        fs["type"] = "int16" if ct.mysql_type in ("tinyint", "smallint") and not (ct.unsigned and ct.mysql_type == "smallint") else "int32"
    elif k in (TypeKind.LONG, TypeKind.UNSIGNED_LONG):
        fs["type"] = "int64"
    elif k is TypeKind.YEAR:
        fs.update(type="int32", name="io.debezium.time.Year", version=1)
    elif k is TypeKind.BOOLEAN:
        fs["type"] = "boolean"
    elif k is TypeKind.FLOAT:
        fs["type"] = "float"
    elif k in (TypeKind.DOUBLE, TypeKind.DECIMAL):
        fs["type"] = "double"  # TiCDC writes DECIMAL as float64
    elif k is TypeKind.DATE:
        fs.update(type="int32", name="io.debezium.time.Date", version=1)
    elif k is TypeKind.TIMESTAMP:
        fs.update(type="int64", name="io.debezium.time.MicroTimestamp", version=1)
    elif k is TypeKind.TIMESTAMPTZ:
        fs.update(type="string", name="io.debezium.time.ZonedTimestamp", version=1)
    elif k is TypeKind.TIME:
        fs.update(type="int64", name="io.debezium.time.MicroTime", version=1)
    elif k is TypeKind.BIT:
        fs.update(type="bytes", name="io.debezium.data.Bits", version=1, parameters={"length": str(ct.length or 64)})
    elif k is TypeKind.JSON:
        fs.update(type="string", name="io.debezium.data.Json", version=1)
    elif k in (TypeKind.ENUM, TypeKind.SET):
        fs.update(type="string", name="io.debezium.data.Enum" if k is TypeKind.ENUM else "io.debezium.data.EnumSet", version=1)
        if ct.elements is not None:
            fs["parameters"] = {"allowed": ",".join(ct.elements)}
    else:
        fs["type"] = "string"  # strings, and bytes as base64 (TiCDC; binary.handling.mode=base64)
    fs["tidb_type"] = str(ct).upper()
    return fs


def encode_value(ct: ColumnType, value: Any, precise: bool = False) -> Any:
    if value is None:
        return None
    k = ct.kind
    if k is TypeKind.DECIMAL and precise:  # Connect's Decimal: the unscaled value, big-endian two's complement
        sign, digits, _ = Decimal(value).quantize(Decimal((0, (1,), -(ct.scale or 0))), context=_DECIMALS).as_tuple()
        unscaled = int("".join(map(str, digits)) or "0") * (-1 if sign else 1)
        return base64.b64encode(unscaled.to_bytes(unscaled.bit_length() // 8 + 1, "big", signed=True)).decode()
    if k is TypeKind.DATE:
        return (value - EPOCH).days
    if k is TypeKind.TIMESTAMP:
        return (value - EPOCH_DT) // dt.timedelta(microseconds=1)
    if k is TypeKind.TIMESTAMPTZ:
        text = value.astimezone(UTC).isoformat().replace("+00:00", "Z")
        return text
    if k is TypeKind.TIME:
        return value // dt.timedelta(microseconds=1)
    if k is TypeKind.BIT:
        return base64.b64encode(int(value).to_bytes(((ct.length or 64) + 7) // 8, "little")).decode()
    if k in (TypeKind.BINARY, TypeKind.GEOMETRY):
        return base64.b64encode(bytes(value)).decode()
    if k is TypeKind.DECIMAL:
        return float(value)
    if k is TypeKind.UNSIGNED_LONG and value >= 1 << 63:
        return value - (1 << 64)
    return value


class DebeziumEncoder(Encoder):
    """TiCDC's Debezium encoder (``flavor=ticdc``) or the MySQL connector's (``flavor=mysql``)."""

    protocol: ClassVar[str] = "debezium"
    options_spec: ClassVar[dict[str, Option]] = {
        "flavor": Option(lambda v: _choice(v, ("ticdc", "mysql")), "ticdc", "ticdc: source.commit_ts; mysql: binlog file/pos"),
        "disable_schema": Option(parse_bool, False, "omit the Connect schema (debezium-disable-schema)"),
        "cluster_id": Option(str, "tidb", "TiCDC cluster id / Debezium server name"),
    }

    def _source(self, event: RowChange | DdlChange) -> dict[str, Any]:
        ticdc = self.options["flavor"] == "ticdc"
        binlog = event.binlog or BinlogPosition("", 0, 0)
        source: dict[str, Any] = {
            "version": "2.4.0.Final",
            "connector": "TiCDC" if ticdc else "mysql",
            "name": self.options["cluster_id"],
            "ts_ms": event.event_time_ms or 0,
            "snapshot": "false",
            "db": event.database,
            "table": event.table,
            "server_id": binlog.server,
            "gtid": None,
            "file": binlog.file,
            "pos": binlog.pos,
            "row": binlog.row,
            "thread": 0,
            "query": None,
        }
        if ticdc:
            source["commit_ts"] = event.commit_ts or 0
            source["cluster_id"] = self.options["cluster_id"]
        return source

    def _wrap(self, payload: Any, schema: Any) -> bytes:
        if self.options["disable_schema"]:
            return dumps({"payload": payload})
        return dumps({"payload": payload, "schema": schema})

    def encode_row(self, event: RowChange) -> tuple[bytes | None, bytes | None]:
        types = dict(event.column_types or {})
        name = f"{self.options['cluster_id']}.{event.database}.{event.table}"
        image = event.image
        precise = self.options["flavor"] == "mysql"  # TiCDC writes DECIMAL as float64 (its protocol's docs)
        key_payload = {k: encode_value(types[k], image.get(k), precise) for k in event.key_columns}
        key_schema = {
            "type": "struct", "optional": False, "name": f"{name}.Key",
            "fields": [field_schema_of(k, types[k], False, precise) for k in event.key_columns],
        }
        row_schema = [field_schema_of(c, t, precise=precise) for c, t in types.items()]

        def image_of(row: Mapping[str, Any] | None) -> dict[str, Any] | None:
            return None if row is None else {c: encode_value(types[c], v, precise) for c, v in row.items()}

        op = {Op.INSERT: "c", Op.UPDATE: "u", Op.DELETE: "d"}[event.op]
        payload = {
            "before": image_of(event.before),
            "after": image_of(event.after),
            "op": op,
            "source": self._source(event),
            "ts_ms": event.event_time_ms or 0,
            "transaction": None,
        }
        value_schema = {
            "type": "struct", "optional": False, "name": f"{name}.Envelope", "version": 1,
            "fields": [
                {"type": "struct", "optional": True, "name": f"{name}.Value", "field": "before", "fields": row_schema},
                {"type": "struct", "optional": True, "name": f"{name}.Value", "field": "after", "fields": row_schema},
                {"type": "struct", "optional": False, "name": "io.debezium.connector.mysql.Source", "field": "source", "fields": _SOURCE_SCHEMA},
                {"type": "string", "optional": False, "field": "op"},
                {"type": "int64", "optional": True, "field": "ts_ms"},
                _TRANSACTION_SCHEMA,
            ],
        }
        key = self._wrap(key_payload, key_schema) if event.key_columns else None
        return key, self._wrap(payload, value_schema)

    def encode_ddl(self, event: DdlChange) -> tuple[bytes | None, bytes | None]:
        changes = []
        if event.schema_after is not None:
            s = event.schema_after
            changes.append({
                "type": "CREATE" if event.schema_before is None else "ALTER",
                "id": f'"{s.database}"."{s.table}"',
                "table": {
                    "defaultCharsetName": "",
                    "primaryKeyColumnNames": list(s.key_columns),
                    "columns": [
                        {"name": c.name, "jdbcType": 0, "typeName": c.type.mysql_type.upper(),
                         "typeExpression": str(c.type).upper(), "position": i + 1, "optional": c.nullable,
                         "length": c.type.precision if c.type.kind is TypeKind.DECIMAL else c.type.length,
                         "scale": c.type.scale,
                         "enumValues": list(c.type.elements) if c.type.elements is not None else None}
                        for i, c in enumerate(s.columns)
                    ],
                },
            })
        payload = {
            "source": self._source(event),
            "ts_ms": event.event_time_ms or 0,
            "databaseName": event.database,
            "schemaName": None,
            "ddl": event.sql,
            "tableChanges": changes,
        }
        key = self._wrap({"databaseName": event.database}, {"type": "struct", "name": "io.debezium.connector.mysql.SchemaChangeKey", "optional": False, "fields": [{"field": "databaseName", "optional": False, "type": "string"}]})
        return key, self._wrap(payload, {"type": "struct", "name": "io.debezium.connector.mysql.SchemaChangeValue", "optional": False})

    def encode_watermark(self, event: Watermark) -> tuple[bytes | None, bytes | None] | None:
        if self.options["flavor"] != "ticdc":
            return None  # the MySQL connector has no watermarks
        cluster = self.options["cluster_id"]
        source = {"version": "2.4.0.Final", "connector": "TiCDC", "name": cluster, "ts_ms": 0, "snapshot": "false",
                  "db": "", "table": "", "server_id": 0, "gtid": None, "file": "", "pos": 0, "row": 0,
                  "thread": 0, "query": None, "commit_ts": event.ts, "cluster_id": cluster}
        key = self._wrap({}, {"fields": [], "optional": False, "name": f"{cluster}.watermark.Key", "type": "struct"})
        return key, self._wrap({"source": source, "op": "m", "ts_ms": 0, "transaction": None}, {"type": "struct", "optional": False, "name": f"{cluster}.watermark.Envelope", "version": 1})


def _choice(value: Any, allowed: tuple[str, ...]) -> str:
    text = str(value)
    if text not in allowed:
        raise ValueError(f"expected one of {', '.join(allowed)}, found {text!r}")
    return text
