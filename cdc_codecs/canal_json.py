"""Canal JSON: TiCDC's Canal-JSON, Alibaba Canal's flat message, CloudCanal's Canal JSON.

One message is one JSON document (or several, newline-terminated, when TiCDC's
``terminator`` is set). Shape::

    {"database", "table", "pkNames", "isDdl", "type", "es", "ts", "sql",
     "sqlType": {col: java.sql.Types}, "mysqlType": {col: "decimal(10,4)"},
     "data": [row...], "old": [row...], "_tidb": {"commitTs" | "watermarkTs", ...},
     "tableChanges": {...}}        # CloudCanal only, on DDL

Differences handled here:
- TiCDC puts one row in ``data``; Canal and CloudCanal may put several, and ``old[i]``
  belongs to ``data[i]``.
- ``old`` holds every column (TiCDC default) or only the changed ones (Canal,
  TiCDC ``content-compatible`` / ``only-output-updated-columns``); the before image is
  ``data[i]`` overlaid with ``old[i]`` either way.
- Deletes before TiCDC v5.4 repeat ``data`` in ``old``; the row is ``data``.
- Values are strings. Binary and blob values are one ISO-8859-1 character per byte.
  ENUM is sent as its 1-based index and SET as a bit mask; both become labels when
  ``mysqlType`` lists the members (Canal, content-compatible TiCDC), and otherwise stay
  ``EnumIndex`` / ``SetMask`` text for the table's DDL to map (types.EnumIndex).
- ``_tidb.commitTs`` orders TiCDC events when the changefeed has ``enable-tidb-extension=true``
  (option ``enable_tidb_extension = true``): a row or DDL without it is then a DecodeError
  naming the two settings that fix it. The option's default, ``auto``, takes the mode the
  topic's messages show: a pipeline settles it once per topic from its first archived message
  (``spark.decode.topic_clock``); a decoder left in ``auto`` reads ``_tidb.commitTs`` where a
  message has it. TiCDC's default changefeed (``false``) sends no
  ``_tidb`` and no WATERMARK: with ``enable_tidb_extension=false`` every event's ``commit_ts``
  is None and the derived clock orders the topic from ``es`` (TiCDC writes the commitTs'
  physical milliseconds there), as for official Canal and CloudCanal (``CanalFlatDecoder``).
  One clock per topic, never per message: in derived order ``_tidb.commitTs`` is ignored and a
  ``TIDB_WATERMARK`` is the wall-clock heartbeat its TSO's milliseconds are.
"""

from __future__ import annotations

import base64
import datetime as dt
from typing import Any, ClassVar, Iterable, Mapping, NoReturn

import orjson

from cdc_codecs import _fields as f
from cdc_codecs._base import CLAIM_CHECK_OPTION, TIMEZONE_OPTION, Decoder, Encoder, Option, dumps, parse_bool
from cdc_codecs._fields import FieldError
from cdc_codecs.errors import ClaimCheckError, HandleKeyOnlyError
from cdc_codecs.events import (
    Clock,
    Column,
    DdlChange,
    Event,
    Op,
    RawMessage,
    RowChange,
    SourcePosition,
    TableSchema,
    Watermark,
    new_row_change,
)
from cdc_codecs.rowconv import RowConverter, row_converter
from cdc_codecs.types import (
    ColumnType,
    ColumnValueError,
    TypeKind,
    int_range,
    parse_mysql_type,
    to_text,
)

WATERMARK_TYPE = "TIDB_WATERMARK"
_DML_OPS = {"INSERT": Op.INSERT, "UPDATE": Op.UPDATE, "DELETE": Op.DELETE}


TIDB_EXTENSION_OPTION = "enable_tidb_extension"
AUTO = "auto"


class CanalJsonDecoder(Decoder):
    """TiCDC's Canal-JSON; ``CanalFlatDecoder`` reads official Canal's and CloudCanal's."""

    protocol: ClassVar[str] = "canal-json"
    options_spec: ClassVar[dict[str, Option]] = {
        "timezone": TIMEZONE_OPTION,
        "claim_check_reader": CLAIM_CHECK_OPTION,
        TIDB_EXTENSION_OPTION: Option(
            lambda v: AUTO if v == AUTO else parse_bool(v), AUTO,
            "the changefeed's enable-tidb-extension: true orders by _tidb.commitTs and its TIDB_WATERMARK events; "
            "false (TiCDC's default: no _tidb) orders by the derived clock from es; auto: as the topic's first "
            "message shows (a pipeline decides it once per topic and keeps it)",
        ),
    }

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        mode = self.options.get(TIDB_EXTENSION_OPTION, AUTO)
        # True and auto read _tidb.commitTs where it is sent; only true requires it. A pipeline
        # never decodes in auto: it settles the topic's mode first (spark.decode.topic_clock).
        self._commit_ts: bool = mode is not False
        self._require_commit_ts: bool = mode is True
        self._tz: dt.tzinfo = self.options["timezone"]
        # mysqlType of a table rarely changes: cache the row converter per mysqlType mapping.
        self._converters: dict[tuple[tuple[str, str], ...], tuple[dict[str, ColumnType], RowConverter]] = {}
        self._current: dict[tuple[str, str], tuple[dict[str, Any], tuple[str, ...],
                                                   tuple[dict[str, ColumnType], RowConverter]]] = {}
        self._keys: dict[tuple[str, ...], tuple[str, ...]] = {}

    @property
    def carries_commit_ts(self) -> bool:
        return self._commit_ts

    def _decode(self, msg: RawMessage) -> Iterable[Event]:
        value = msg.value
        if not value:
            raise FieldError("value", "empty, expected a Canal JSON document")
        try:
            doc = orjson.loads(value)
        except orjson.JSONDecodeError:
            if b"\n" not in value.strip():
                raise
            # TiCDC with a terminator: several documents, one per line.
            events: list[Event] = []
            for line in value.split(b"\n"):
                if line.strip():
                    events += self._decode_document(orjson.loads(line), msg, len(events))
            return events
        return self._decode_document(doc, msg, 0)

    def _decode_document(self, doc: Any, msg: RawMessage, first_index: int) -> list[Event]:
        # Hot path: plain dict gets with exact type checks; the f.* helpers only on the odd case.
        if type(doc) is not dict:
            doc = f.as_object(doc, "value")
        get = doc.get
        tidb = get("_tidb")
        commit_ts = None
        if tidb is not None:
            if type(tidb) is not dict:
                f.optional(doc, "_tidb", dict)
            if len(tidb) > 1 or "commitTs" not in tidb:
                location = f.optional(tidb, "claimCheckLocation", str, "_tidb.")
                if location:
                    return self._decode_claim_check(location, msg, first_index)
                if f.optional(tidb, "onlyHandleKey", bool, "_tidb.", False):
                    raise HandleKeyOnlyError(
                        self.protocol, msg.position.with_index(first_index), "_tidb.onlyHandleKey",
                        "the row was too large and TiCDC sent only its handle key; it cannot be applied from the "
                        "archive. Set the changefeed's large-message-handle-option to claim-check",
                    )
            if self._commit_ts:
                commit_ts = tidb.get("commitTs")
                if type(commit_ts) is not int or not 0 <= commit_ts < f.TSO_END:
                    commit_ts = self._ts(tidb, "commitTs")
        kind = get("type")
        if type(kind) is not str:
            kind = f.require(doc, "type", str)
        is_ddl = get("isDdl")
        if type(is_ddl) is not bool:
            if is_ddl is not None:
                f.optional(doc, "isDdl", bool)
            # CloudCanal's own JSON spells it "ddl"; accept either.
            is_ddl = bool(f.optional(doc, "ddl", bool, default=False))
        if kind == WATERMARK_TYPE and not is_ddl:
            ts = self._ts(tidb, "watermarkTs")
            if ts is None:
                raise FieldError("_tidb.watermarkTs", "missing when 'type' is 'TIDB_WATERMARK'")
            if not self._commit_ts:  # every change after it commits at or after its millisecond
                return [Watermark(ts >> 18, msg.position.with_index(first_index), Clock.EPOCH_MS)]
            return [Watermark(ts, msg.position.with_index(first_index))]
        if commit_ts is None and self._require_commit_ts:
            raise FieldError(
                "_tidb.commitTs",
                "missing: the changefeed sends Canal-JSON without the TiDB extension (enable-tidb-extension=false, "
                "TiCDC's default), so nothing gives this change's commitTs. Set enable-tidb-extension=true in the "
                f"changefeed's sink URI (exact commit order), or the topic's option {TIDB_EXTENSION_OPTION} = false "
                "(derived order from 'es', README 'Derived watermarks')",
            )
        database = get("database")
        if type(database) is not str:
            database = f.require(doc, "database", str, nullable=True) or ""
        table = get("table")
        if type(table) is not str:
            table = f.optional(doc, "table", str, default="")
        event_time = get("es")
        if event_time is not None and type(event_time) is not int:
            event_time = f.optional(doc, "es", int)
        if is_ddl:
            sql = f.require(doc, "sql", str, when="'isDdl' is true")
            return [
                DdlChange(
                    database, table, sql, commit_ts, msg.position.with_index(first_index), ddl_type=kind,
                    schema_after=_table_changes_schema(get("tableChanges"), database, table),
                    event_time_ms=event_time,
                )
            ]
        op = _DML_OPS.get(kind)
        if op is None:
            raise FieldError("type", f"expected INSERT, UPDATE, DELETE or {WATERMARK_TYPE}, found {kind!r}")
        return self._rows(doc, op, database, table, commit_ts, event_time, msg, first_index)

    def _rows(
        self, doc: Mapping[str, Any], op: Op, database: str, table: str, commit_ts: int | None,
        event_time: int | None, msg: RawMessage, first_index: int,
    ) -> list[Event]:
        data = doc.get("data")
        if type(data) is not list or not data:
            data = f.require(doc, "data", list, when=f"'type' is '{op.name}'")
            raise FieldError("data", f"empty when 'type' is '{op.name}'")
        old = doc.get("old")
        if old is not None and type(old) is not list:
            f.optional(doc, "old", list)
        if op is Op.UPDATE:
            if old is None:
                raise FieldError("old", "missing when 'type' is 'UPDATE'")
            if len(old) != len(data):
                raise FieldError("old", f"has {len(old)} rows but data has {len(data)}")
        mysql_type = doc.get("mysqlType")
        if type(mysql_type) is not dict:
            mysql_type = f.require(doc, "mysqlType", dict, when="'isDdl' is false")
        schema = self._schema(database, table, mysql_type)
        return self.row_events(
            op, database, table, data, old, self._key_columns(doc.get("pkNames")), schema, commit_ts,
            event_time, msg.position, first_index, ("data", "old"),
        )

    def row_events(
        self, op: Op, database: str, table: str, data: list[Any], old: list[Any] | None, keys: tuple[str, ...],
        schema: tuple[dict[str, ColumnType], RowConverter], commit_ts: int | None, event_time: int | None,
        position: SourcePosition, first_index: int, parts: tuple[str, str],
    ) -> list[Event]:
        """The RowChanges of ``data`` (after images) and ``old`` (what changed before), typed.

        ``schema`` is ``_schema``'s (column types, row converter) for the message's types.
        Shared with CloudCanal JSON, whose rows and ``dbValType`` are Canal's; ``parts``
        names the two arrays in errors. The hot path of every Canal-family decoder.
        """
        types, convs = schema
        convert = convs.convert
        new_row = new_row_change
        events: list[Event] = []
        for i, raw_row in enumerate(data):
            index = first_index + i
            try:
                row = convert(raw_row)
            except (KeyError, TypeError, AttributeError, ColumnValueError):
                self._row_error(raw_row, convs, parts[0], i, index)
            if op is Op.UPDATE:
                try:
                    old_row = convert(old[i])  # type: ignore[index]
                except (KeyError, TypeError, AttributeError, ColumnValueError):
                    self._row_error(old[i], convs, parts[1], i, index)  # type: ignore[index]
                before, after = {**row, **old_row}, row
            elif op is Op.DELETE:
                before, after = row, None
            else:
                before, after = None, row
            events.append(new_row((
                op, database, table, before, after, keys, types, commit_ts,
                position if index == position[3] else position.with_index(index),
                event_time, None, False, None,
            )))
        return events

    def _key_columns(self, pk_names: Any) -> tuple[str, ...]:
        if not pk_names:
            return ()
        if type(pk_names) is list:
            try:
                return self._keys[tuple(pk_names)]
            except (KeyError, TypeError):
                pass
        if type(pk_names) is not list or not all(type(k) is str for k in pk_names):
            raise FieldError("pkNames", "expected an array of strings")
        keys = tuple(pk_names)
        if len(self._keys) < 1024:
            self._keys[keys] = keys
        return keys

    def _schema(self, database: str, table: str, mysql_type: Mapping[str, Any]) -> tuple[dict[str, ColumnType], RowConverter]:
        # Every message repeats its table's mysqlType: comparing it with the table's last one
        # is cheaper than hashing its fresh strings for the cache below. In its order too: the
        # types' order is the mysqlType's (as the cache's), never one an earlier message left.
        current = self._current.get((database, table))
        if current is not None and current[0] == mysql_type and current[1] == tuple(mysql_type):
            return current[2]
        cache_key = tuple(mysql_type.items())
        try:
            cached = self._converters.get(cache_key)
        except TypeError:  # unhashable value: a mistyped mysqlType entry
            cached = None
        if cached is None:
            types: dict[str, ColumnType] = {}
            for name, text in mysql_type.items():
                if type(text) is not str:
                    raise FieldError(f"mysqlType.{name}", f"expected a string, found {text!r}")
                types[name] = f.convert(name, canal_type, text, path="mysqlType.")
            cacheable = len(self._converters) < 1024
            cached = types, row_converter(types, self._tz, compiled=cacheable)
            if cacheable:
                self._converters[cache_key] = cached
        if len(self._current) < 1024:
            self._current[(database, table)] = dict(mysql_type), tuple(mysql_type), cached
        return cached

    @staticmethod
    def _row_error(raw_row: Any, convs: RowConverter, part: str, i: int, index: int) -> NoReturn:
        """The precise error for a row ``convs.convert`` failed on: the row or column at fault."""
        if type(raw_row) is not dict:
            raise FieldError(f"{part}[{i}]", "expected an object (one row)", index)
        path = f"{part}[{i}]."
        for name, v in raw_row.items():
            conv = convs.converters.get(name)
            if conv is None:
                raise FieldError(f"mysqlType.{name}", f"missing for column {path}{name}", index)
            f.convert(name, conv, v, path=path, index=index)
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _ts(tidb: Mapping[str, Any] | None, name: str) -> int | None:
        if tidb is None:
            return None
        return f.tso(f.optional(tidb, name, int, "_tidb."), f"_tidb.{name}")

    def _decode_claim_check(self, location: str, msg: RawMessage, index: int) -> list[Event]:
        reader = self.options["claim_check_reader"]
        pos = msg.position.with_index(index)
        if reader is None:
            raise ClaimCheckError(
                self.protocol, pos, "_tidb.claimCheckLocation",
                f"message is stored at {location!r} but no claim-check storage is configured",
            )
        try:
            stored = reader(location)
        except Exception as exc:  # the reader is user I/O: any failure is a claim-check failure
            raise ClaimCheckError(self.protocol, pos, "_tidb.claimCheckLocation", f"cannot read {location!r}: {exc}") from exc
        value = unwrap_claim_check(stored, lambda r: ClaimCheckError(self.protocol, pos, "claim-check", r))[1]
        inner = RawMessage(msg.key, value, msg.position, msg.headers, msg.timestamp_ms)
        doc = orjson.loads(value)
        if isinstance(doc, dict) and isinstance(doc.get("_tidb"), dict) and doc["_tidb"].get("claimCheckLocation"):
            raise ClaimCheckError(self.protocol, pos, "claim-check", "the stored message is itself a claim-check reference")
        return self._decode_document(doc, inner, index)


class CanalFlatDecoder(CanalJsonDecoder):
    """Official Canal's flat message and CloudCanal's Canal JSON: no commitTs, the derived clock orders them."""

    protocol: ClassVar[str] = "canal"
    options_spec: ClassVar[dict[str, Option]] = {
        name: option for name, option in CanalJsonDecoder.options_spec.items() if name != TIDB_EXTENSION_OPTION
    }


def canal_type(text: str) -> ColumnType:
    """A ``mysqlType`` entry. TiCDC (without content-compatible) drops every type parameter,
    so a bare ``decimal`` has an unknown precision and scale, not MySQL's default (10, 0):
    left unknown, the table's DDL (or decimal(38, 10), as for the Open protocol) types it.
    Official Canal always writes the column's full type."""
    ct = parse_mysql_type(text)
    if ct.kind is TypeKind.DECIMAL and "(" not in text:
        return ColumnType(TypeKind.DECIMAL, "decimal", ct.unsigned)
    return ct


def unwrap_claim_check(stored: bytes, error: Any) -> tuple[bytes | None, bytes]:
    """TiCDC stores ``{"key": base64, "value": base64}``, or the raw value with claim-check-raw-value."""
    try:
        doc = orjson.loads(stored)
    except orjson.JSONDecodeError:
        raise error("stored object is not JSON") from None
    if isinstance(doc, dict) and set(doc) == {"key", "value"}:
        try:
            key = base64.b64decode(doc["key"]) if doc["key"] else None
            return key, base64.b64decode(doc["value"] or "", validate=True)
        except (ValueError, TypeError):
            raise error("stored claim-check message has invalid base64") from None
    return None, stored


def _table_changes_schema(changes: Any, database: str, table: str) -> TableSchema | None:
    """CloudCanal attaches the table's columns after a DDL as ``tableChanges``."""
    if changes is None:
        return None
    changes = f.as_object(changes, "tableChanges")
    tbl = f.require(changes, "table", dict, "tableChanges.")
    columns = []
    for i, col in enumerate(f.require(tbl, "columns", list, "tableChanges.table.")):
        path = f"tableChanges.table.columns[{i}]."
        col = f.as_object(col, path.rstrip("."))
        name = f.require(col, "name", str, path)
        text = f.optional(col, "typeExpression", str, path) or f.require(col, "typeName", str, path)
        columns.append(Column(name, f.convert(name, parse_mysql_type, text, path=path), bool(col.get("optional", True))))
    keys = f.string_list(tbl, "primaryKeyColumnNames", "tableChanges.table.")
    return TableSchema(database, table, tuple(columns), keys)


# ---------------------------------------------------------------- encoding

def java_sql_type(ct: ColumnType, value: Any = None) -> int:
    """The ``sqlType`` TiCDC writes: java.sql.Types, widened for large unsigned values."""
    k = ct.kind
    if k in (TypeKind.INT, TypeKind.LONG, TypeKind.UNSIGNED_LONG):
        base = {"tinyint": -6, "smallint": 5, "mediumint": 4, "int": 4, "bigint": -5}[ct.mysql_type]
        if ct.unsigned and isinstance(value, int):
            signed_max = int_range(ct)[1] >> 1
            if value > signed_max:
                return {"tinyint": 5, "smallint": 4, "mediumint": 4, "int": -5, "bigint": 3}[ct.mysql_type]
        return base
    if k is TypeKind.STRING:
        return 1 if ct.mysql_type == "char" else 12 if ct.mysql_type == "varchar" else 2005
    return _JAVA_TYPES.get(k, 12)


_JAVA_TYPES = {
    TypeKind.BOOLEAN: -6,
    TypeKind.FLOAT: 7,
    TypeKind.DOUBLE: 8,
    TypeKind.DECIMAL: 3,
    TypeKind.BINARY: 2004,
    TypeKind.GEOMETRY: 2004,
    TypeKind.DATE: 91,
    TypeKind.TIME: 92,
    TypeKind.TIMESTAMP: 93,
    TypeKind.TIMESTAMPTZ: 93,
    TypeKind.YEAR: 12,
    TypeKind.ENUM: 4,
    TypeKind.SET: -7,
    TypeKind.BIT: -7,
    TypeKind.JSON: 12,
}


class CanalJsonEncoder(Encoder):
    """TiCDC's Canal-JSON encoder: one row per message, DDL only to partition 0."""

    protocol: ClassVar[str] = "canal-json"
    ddl_to_all_partitions: ClassVar[bool] = False
    options_spec: ClassVar[dict[str, Option]] = {
        "timezone": TIMEZONE_OPTION,
        "enable_tidb_extension": Option(parse_bool, True, "add _tidb.commitTs and send TIDB_WATERMARK"),
        "content_compatible": Option(parse_bool, False, "official Canal shape: typed mysqlType, old has changed columns only"),
        "only_output_updated_columns": Option(parse_bool, False, "old holds only the changed columns"),
    }
    # Official Canal writes full type text and only changed columns in old.
    _full_types: ClassVar[bool] = False

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._tz = self.options["timezone"]
        self._compatible = self._full_types or self.options["content_compatible"]

    def _execution_time(self, event: RowChange | DdlChange) -> int:
        """``es``: TiCDC writes its commitTs' physical milliseconds, with or without the TiDB extension."""
        return event.commit_ts >> 18 if event.commit_ts is not None else event.event_time_ms or 0

    def _base(self, event: RowChange | DdlChange, kind: str) -> dict[str, Any]:
        es = self._execution_time(event)
        doc: dict[str, Any] = {
            "id": 0,
            "database": event.database,
            "table": event.table,
            "pkNames": None,
            "isDdl": isinstance(event, DdlChange),
            "type": kind,
            "es": es,
            "ts": es,
            "sql": "",
            "sqlType": None,
            "mysqlType": None,
            "data": None,
            "old": None,
        }
        if self.options.get("enable_tidb_extension") and event.commit_ts is not None:
            doc["_tidb"] = {"commitTs": event.commit_ts}
        return doc

    def _type_text(self, ct: ColumnType) -> str:
        # TiCDC drops type parameters but keeps "unsigned" (content-compatible keeps all).
        return str(ct) if self._compatible else ct.mysql_type + (" unsigned" if ct.unsigned else "")

    def row_document(self, rows: list[RowChange]) -> dict[str, Any]:
        first = rows[0]
        doc = self._base(first, first.op.name)
        types = dict(first.column_types or {})
        doc["pkNames"] = list(first.key_columns) or None
        doc["mysqlType"] = {n: self._type_text(t) for n, t in types.items()}
        sample = first.image
        doc["sqlType"] = {n: java_sql_type(t, sample.get(n)) for n, t in types.items()}
        doc["data"] = [self._text_row(r.after if r.op is not Op.DELETE else r.before, types) for r in rows]
        if first.op is Op.UPDATE:
            olds = []
            for r in rows:
                before = self._text_row(r.before, types)
                if self._compatible or self.options.get("only_output_updated_columns"):
                    after = self._text_row(r.after, types)
                    before = {k: v for k, v in before.items() if after.get(k) != v}
                olds.append(before)
            doc["old"] = olds
        return doc

    def _text_row(self, row: Mapping[str, Any] | None, types: Mapping[str, ColumnType]) -> dict[str, Any]:
        return {n: to_text(types[n], v, self._tz) for n, v in (row or {}).items()}

    def encode_row(self, event: RowChange) -> tuple[bytes | None, bytes | None]:
        return None, dumps(self.row_document([event]))

    def encode_ddl(self, event: DdlChange) -> tuple[bytes | None, bytes | None]:
        doc = self._base(event, event.ddl_type or "QUERY")
        doc["sql"] = event.sql
        return None, dumps(doc)

    def encode_watermark(self, event: Watermark) -> tuple[bytes | None, bytes | None] | None:
        if not self.options.get("enable_tidb_extension"):
            return None  # official Canal has no watermark
        doc = {
            "id": 0, "database": "", "table": "", "pkNames": None, "isDdl": False,
            "type": WATERMARK_TYPE, "es": 0, "ts": 0, "sql": "", "sqlType": None,
            "mysqlType": None, "data": None, "old": None, "_tidb": {"watermarkTs": event.ts},
        }
        return None, dumps(doc)


class CanalFlatEncoder(CanalJsonEncoder):
    """Alibaba Canal's flat message: full mysqlType, changed columns in old, rows batched.

    Canal puts all rows of one binlog event in one message: ``encode_all`` groups
    consecutive rows of one table and operation, up to ``rows_per_message``.
    """

    protocol: ClassVar[str] = "canal"
    _full_types: ClassVar[bool] = True
    options_spec: ClassVar[dict[str, Option]] = {
        "timezone": TIMEZONE_OPTION,
        "rows_per_message": Option(int, 4, "rows Canal puts in one flat message (one binlog event)"),
    }

    def _execution_time(self, event: RowChange | DdlChange) -> int:
        return event.event_time_ms or 0  # the binlog event's time

    def encode_rows(self, rows: list[RowChange]) -> tuple[bytes | None, bytes | None]:
        return None, dumps(self.row_document(rows))
