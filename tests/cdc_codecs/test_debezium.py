"""Debezium values nothing else covers: schemaless structs and JSON, envelopes their schema must describe."""

from __future__ import annotations

import base64
import struct
from decimal import Decimal

import orjson
import pytest

from cdc_codecs import DecodeError, RawMessage, SourcePosition, TypeKind, get_decoder

SOURCE = {"db": "d", "table": "t", "commit_ts": 1}
WKB_POINT = struct.pack("<BIdd", 1, 1, 1.5, -2.0)


def _decode(value: dict, decoder=None):
    decoder = decoder or get_decoder("debezium")
    (event,) = decoder.decode(RawMessage(None, orjson.dumps(value), SourcePosition("t", 0, 0)))
    return event


def _insert(after: dict, schema: dict | None = None) -> dict:
    payload = {"op": "c", "before": None, "after": after, "source": SOURCE, "ts_ms": 0}
    return {"payload": payload} if schema is None else {"payload": payload, "schema": schema}


def _schema(columns: list[dict], **envelope_types: str) -> dict:
    row = {"type": "struct", "optional": True, "fields": columns}
    return {
        "type": "struct",
        "fields": [
            {**row, "field": "before"},
            {**row, "field": "after"},
            {"type": envelope_types.get("source", "struct"), "optional": False, "field": "source", "fields": []},
            {"type": envelope_types.get("op", "string"), "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
        ],
    }


# ---------------------------------------------------------------- schemas disabled


def test_schemaless_json_object_and_array_are_json_text() -> None:
    event = _decode(_insert({"id": 1, "doc": {"a": [1, {"b": None}]}, "tags": ["x", 2]}))
    assert event.after == {"id": 1, "doc": '{"a":[1,{"b":null}]}', "tags": '["x",2]'}
    assert orjson.loads(event.after["doc"]) == {"a": [1, {"b": None}]}
    assert event.column_types["doc"].kind is TypeKind.JSON and event.column_types["tags"].kind is TypeKind.JSON


def test_schemaless_geometry_struct_is_its_wkb() -> None:
    b64 = base64.b64encode(WKB_POINT).decode()
    event = _decode(_insert({"g": {"wkb": b64, "srid": 4326}, "p": {"x": 1.5, "y": -2.0, "wkb": b64, "srid": None},
                             "q": {"x": 1.5, "y": -2}}))
    assert event.after == {"g": WKB_POINT, "p": WKB_POINT, "q": WKB_POINT}
    assert all(event.column_types[c].kind is TypeKind.GEOMETRY for c in "gpq")


def test_schemaless_structs_typed_by_the_ddl() -> None:
    """tableChanges said json and geometry: the struct and the object are fitted to them."""
    decoder = get_decoder("debezium")
    ddl = {"payload": {"ddl": "CREATE TABLE t (id INT, doc JSON, g POINT)", "databaseName": "d", "source": SOURCE,
                       "tableChanges": [{"type": "CREATE", "table": {"primaryKeyColumnNames": ["id"], "columns": [
                           {"name": "id", "typeName": "INT"}, {"name": "doc", "typeName": "JSON"}, {"name": "g", "typeName": "POINT"}]}}]}}
    decoder.decode(RawMessage(None, orjson.dumps(ddl), SourcePosition("t", 0, 0)))
    event = _decode(_insert({"id": 1, "doc": {"k": "v"}, "g": {"x": 1.5, "y": -2.0}}), decoder)
    assert event.after == {"id": 1, "doc": '{"k":"v"}', "g": WKB_POINT}


def test_geometry_with_schema() -> None:
    point = {"type": "struct", "name": "io.debezium.data.geometry.Point", "optional": True, "field": "p", "fields": [
        {"field": "x", "type": "double"}, {"field": "y", "type": "double"},
        {"field": "wkb", "type": "bytes", "optional": True}, {"field": "srid", "type": "int32", "optional": True}]}
    event = _decode(_insert({"p": {"x": 1.5, "y": -2.0, "wkb": None, "srid": None}}, _schema([point])))
    assert event.after == {"p": WKB_POINT}


# ---------------------------------------------------------------- decimal(38, s)


@pytest.mark.parametrize("scale", [0, 10, 38])
def test_connect_decimal_of_38_digits_is_exact(scale: int) -> None:
    unscaled = -(10**38 - 1)
    raw = base64.b64encode(unscaled.to_bytes(17, "big", signed=True)).decode()
    column = {"field": "d", "type": "bytes", "name": "org.apache.kafka.connect.data.Decimal",
              "parameters": {"scale": str(scale), "connect.decimal.precision": "38"}}
    event = _decode(_insert({"d": raw}, _schema([column])))
    assert event.after["d"] == Decimal((1, (9,) * 38, -scale))
    assert event.after["d"].as_tuple().digits == (9,) * 38


# ---------------------------------------------------------------- a schema that does not describe its envelope


INT_ID = {"field": "id", "type": "int32", "optional": False}


@pytest.mark.parametrize(
    "message, field, reason",
    [
        (_insert({"id": 1, "extra": "x"}, _schema([INT_ID])), "payload.after.extra", "not described by the schema's 'after'"),
        (_insert({"id": "1"}, _schema([INT_ID])), "payload.after.id", "the schema says int32, found '1'"),
        (_insert({"id": True}, _schema([INT_ID])), "payload.after.id", "the schema says int32, found True"),
        (_insert({"name": "x"}, _schema([INT_ID, {"field": "name", "type": "string"}])), "payload.after.id",
         "not optional"),
        ({**_insert({"id": 1}, _schema([INT_ID])), "schema": {"type": "struct", "fields": [{"field": "after", "type": "struct", "fields": [INT_ID]}]}},
         "payload.op", "not described by the message's schema"),
        (_insert({"id": 1}, _schema([INT_ID], op="int32")), "schema.fields[3].type", "expected 'string' for 'op'"),
        ({**_insert({"id": 1}), "schema": {"type": "string"}}, "schema.type", "expected 'struct'"),
        ({**_insert({"id": 1}), "schema": [1]}, "schema", "expected a Connect struct schema"),
        ({**_insert({"id": 1}), "schema": {"type": "struct"}}, "schema.fields", "expected the envelope's field schemas"),
        ({**_insert({"id": 1}), "schema": {"type": "struct", "fields": [{"field": "after", "type": "struct", "fields": [{"field": "id"}]}]}},
         "schema.fields[0].fields[0]", "expected a column schema with 'field' and 'type'"),
        ({**_insert({"id": 1}), "schema": {"type": "struct", "fields": [
            {"field": "before", "type": "struct", "fields": [INT_ID]},
            {"field": "after", "type": "struct", "fields": [{**INT_ID, "type": "int64"}]}]}},
         "schema.fields[1]", "'before' and 'after' describe different columns"),
    ],
)
def test_a_schema_that_does_not_describe_its_envelope_is_a_decode_error(message: dict, field: str, reason: str) -> None:
    with pytest.raises(DecodeError) as info:
        _decode(message)
    assert info.value.field == field
    assert reason in str(info.value)


def test_a_schema_that_describes_its_envelope_decodes() -> None:
    event = _decode(_insert({"id": 7, "name": None}, _schema([INT_ID, {"field": "name", "type": "string", "optional": True}])))
    assert event.after == {"id": 7, "name": None}


# ---------------------------------------------------------------- JsonConverter decimal.format and decimal.handling.mode


def _decimal_column(scale: int, precision: int = 38) -> dict:
    return {"field": "d", "type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal",
            "version": 1, "parameters": {"scale": str(scale), "connect.decimal.precision": str(precision)}}


def _raw_insert(after_json: str, schema: dict | None, decoder=None):
    """A message whose row is written as JSON text: numbers exactly as Kafka Connect's JsonConverter writes them."""
    payload = ('{"op":"c","before":null,"after":%s,"source":%s,"ts_ms":0}' % (after_json, orjson.dumps(SOURCE).decode()))
    value = payload if schema is None else '{"schema":%s,"payload":%s}' % (orjson.dumps(schema).decode(), payload)
    (event,) = (decoder or get_decoder("debezium")).decode(RawMessage(None, value.encode(), SourcePosition("t", 0, 0)))
    return event


@pytest.mark.parametrize("text, scale, expected", [
    ("1234567890123456789012345678.9012345678", 10, "1234567890123456789012345678.9012345678"),
    ("-99999999999999999999999999999999999999", 0, "-99999999999999999999999999999999999999"),
    ("0.10", 2, "0.10"),
    ("1E-7", 7, "0.0000001"),  # Jackson writes BigDecimal.toString()
    ("12", 2, "12.00"),
    ("0.1", 1, "0.1"),
])
def test_decimal_format_numeric_is_a_json_number_decoded_exactly(text: str, scale: int, expected: str) -> None:
    """decimal.format=NUMERIC: the schema says bytes (logical Decimal), the value is a JSON number."""
    event = _raw_insert('{"id":1,"d":%s,"x":0.1}' % text, _schema([INT_ID, _decimal_column(scale), {"field": "x", "type": "double"}]))
    assert event.after["d"] == Decimal(expected)
    assert event.after["d"].as_tuple() == Decimal(expected).as_tuple()  # every digit, the schema's scale
    assert event.after["x"] == 0.1 and type(event.after["x"]) is float  # other numbers are untouched


def test_decimal_format_numeric_with_more_digits_than_its_scale_is_a_decode_error() -> None:
    with pytest.raises(DecodeError) as info:
        _raw_insert('{"id":1,"d":1.234}', _schema([INT_ID, _decimal_column(2)]))
    assert info.value.field == "payload.after.d" and "more fraction digits than the schema's scale 2" in str(info.value)


def test_decimal_format_base64_still_decodes() -> None:
    raw = base64.b64encode((-1234567).to_bytes(4, "big", signed=True)).decode()
    event = _raw_insert('{"id":1,"d":"%s"}' % raw, _schema([INT_ID, _decimal_column(2)]))
    assert event.after["d"] == Decimal("-12345.67")


def _decoder_knowing_decimal_column() -> object:
    decoder = get_decoder("debezium")
    ddl = {"payload": {"ddl": "CREATE TABLE t (id INT, d DECIMAL(38,10))", "databaseName": "d", "source": SOURCE,
                       "tableChanges": [{"type": "CREATE", "table": {"primaryKeyColumnNames": ["id"], "columns": [
                           {"name": "id", "typeName": "INT"}, {"name": "d", "typeName": "DECIMAL", "length": 38, "scale": 10}]}}]}}
    decoder.decode(RawMessage(None, orjson.dumps(ddl), SourcePosition("t", 0, 0)))
    return decoder


def test_decimal_handling_mode_string() -> None:
    schema = _schema([INT_ID, {"field": "d", "type": "string", "optional": True}])
    assert _raw_insert('{"id":1,"d":"12345.6700000000"}', schema).after["d"] == "12345.6700000000"  # nothing says decimal
    event = _raw_insert('{"id":1,"d":"1234567890123456789012345678.9012345678"}', schema, _decoder_knowing_decimal_column())
    assert event.after["d"] == Decimal("1234567890123456789012345678.9012345678")


def test_decimal_handling_mode_double() -> None:
    """The upstream rounded the decimal to a double; its JSON text is read as written, not rounded again."""
    schema = _schema([INT_ID, {"field": "d", "type": "double", "optional": True}])
    assert _raw_insert('{"id":1,"d":12345.67}', schema).after["d"] == 12345.67  # nothing says decimal: a double
    event = _raw_insert('{"id":1,"d":12345678901234567.5}', schema, _decoder_knowing_decimal_column())
    assert event.after["d"] == Decimal("12345678901234567.5")
    schemaless = _raw_insert('{"id":1,"d":12345678901234567.5}', None, _decoder_knowing_decimal_column())
    assert schemaless.after["d"] == Decimal("12345678901234567.5")


@pytest.mark.parametrize("mode, text, want", [
    (None, "YWI=", b"ab"),  # the connector's default, bytes: a Connect bytes value, base64 in JSON
    ("base64", "YWI=", b"ab"),
    ("hex", "6162", b"ab"),  # valid base64 too: read so, it was b'\xeb^\xb6' (a review found it)
    ("base64-url-safe", "YWI-_w==", b"ab>\xff"),
])
def test_a_binary_column_s_text_is_read_by_the_connector_s_binary_handling_mode(mode: str | None, text: str, want: bytes) -> None:
    """Debezium MySQL's binary.handling.mode writes a binary column as a Connect string (base64, url-safe
    base64 or hex); the message does not say which, so the decoder is told (``binary_handling_mode``)."""
    pos = SourcePosition("t", 0, 0)
    ddl = {"payload": {"ddl": "CREATE TABLE t (id int primary key, v varbinary(4))", "databaseName": "db",
           "source": {"db": "db", "table": "t", "file": "b.1", "pos": 1},
           "tableChanges": [{"type": "CREATE", "id": "db.t", "table": {"primaryKeyColumnNames": ["id"], "columns": [
               {"name": "id", "typeName": "INT", "optional": False},
               {"name": "v", "typeName": "VARBINARY", "length": 4, "optional": True}]}}]}}
    fields = [{"field": "id", "type": "int32", "optional": False}, {"field": "v", "type": "string", "optional": True}]
    schema = {"type": "struct", "fields": [{"field": "before", "type": "struct", "optional": True, "fields": fields},
                                           {"field": "after", "type": "struct", "optional": True, "fields": fields},
                                           {"field": "source", "type": "struct", "fields": []}, {"field": "op", "type": "string"}]}
    row = {"schema": schema, "payload": {"op": "c", "before": None, "after": {"id": 1, "v": text},
                                         "source": {"db": "db", "table": "t", "file": "b.1", "pos": 2}}}
    d = get_decoder("debezium-mysql", **({"binary_handling_mode": mode} if mode else {}))
    d.decode(RawMessage(None, orjson.dumps(ddl), pos))
    assert d.decode(RawMessage(None, orjson.dumps(row), pos))[0].after["v"] == want


def test_an_unknown_binary_handling_mode_is_refused() -> None:
    with pytest.raises(Exception, match="binary_handling_mode: expected one of bytes, base64, base64-url-safe, hex"):
        get_decoder("debezium-mysql", binary_handling_mode="base32")
