"""Every message in shared/conformance decodes, with its values asserted.

The files were written by the upstream encoders (or copied from their docs and tests,
see MANIFEST.md). ``test_every_file_is_covered`` keeps this list complete: a new file in
conformance/ fails it until a test here decodes it.
"""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from pathlib import Path

import pytest

from cdc_codecs import (
    Clock,
    DdlChange,
    DecodeError,
    Op,
    RawMessage,
    RowChange,
    SchemaSnapshot,
    SourcePosition,
    TypeKind,
    Watermark,
    get_decoder,
    get_encoder,
)
from cdc_codecs.open_protocol import split_frames

from .helpers import decode_file, decode_values

UTC = dt.timezone.utc
# Every glob a test below decodes; test_every_file_is_covered checks they cover conformance/.
PATTERNS = ['canal-flat/paimon/*.json', 'canal-flat/paimon/table__alltype__*.json', 'canal-flat/paimon/table__event__*.json', 'cloudcanal/*', 'debezium-mysql/tiflow-testdata/*', 'dts-avro/**/*', 'ticdc-canal-json/docs/*.json', 'ticdc-canal-json/unit/*__msg*.json', 'ticdc-canal-json/unit/*batch-with-newline-terminator.txt', 'ticdc-debezium/**/*-key*.json', 'ticdc-debezium/**/*-value*.json', 'ticdc-open-protocol/binary/**/*', 'ticdc-simple/json/*.json', 'ticdc-simple/schema/*.json']


def files(conformance: Path, pattern: str) -> list[Path]:
    assert pattern in PATTERNS, f"add {pattern!r} to PATTERNS"
    found = sorted(p for p in conformance.glob(pattern) if p.is_file())
    assert found, f"no conformance files match {pattern}"
    return found


# ---------------------------------------------------------------- TiCDC Canal-JSON


def test_ticdc_canal_json_docs(conformance: Path) -> None:
    ddl, insert, watermark = (
        decode_file("canal-json", conformance / "ticdc-canal-json/docs" / n)
        for n in ("docs-cn__L47__ddl.json", "docs-cn__L91__dml-insert.json", "docs-cn__L145__watermark.json")
    )
    files(conformance, "ticdc-canal-json/docs/*.json")
    assert ddl == [
        DdlChange("test", "", "drop database if exists test", 429918007904436226, SourcePosition("t", 0, 0), "QUERY", event_time_ms=1639633094670)
    ]
    (row,) = insert
    assert isinstance(row, RowChange) and row.op is Op.INSERT
    assert row.commit_ts == 429918007904436226
    assert row.key_columns == ("id",)
    assert row.after == {
        "c_bigint": 9223372036854775807, "c_int": 2147483647, "c_mediumint": 8388607,
        "c_smallint": 32767, "c_tinyint": 127, "id": 2,
    }
    assert row.column_types["c_bigint"].kind is TypeKind.LONG
    assert watermark == [Watermark(429918007904436226, SourcePosition("t", 0, 0), Clock.TSO)]


def test_ticdc_canal_json_in_derived_order_ignores_commit_ts_and_reads_a_watermark_as_its_millisecond(conformance: Path) -> None:
    """enable_tidb_extension=false: one clock for the topic, the derived one, even where _tidb is present."""
    docs = conformance / "ticdc-canal-json/docs"
    (row,) = decode_file("canal-json", docs / "docs-cn__L91__dml-insert.json", enable_tidb_extension="false")
    assert row.commit_ts is None and row.event_time_ms == 1639633141221
    # Every change after the watermark commits at or after its TSO's millisecond: a heartbeat of it.
    assert decode_file("canal-json", docs / "docs-cn__L145__watermark.json", enable_tidb_extension="false") == [
        Watermark(429918007904436226 >> 18, SourcePosition("t", 0, 0), Clock.EPOCH_MS)]


def test_ticdc_canal_json_without_tidb_under_the_extensions_option_names_the_settings(conformance: Path) -> None:
    (msg,) = [p for p in files(conformance, "ticdc-canal-json/unit/*__msg*.json") if p.name.endswith("__msg1.json")]
    (auto,) = decode_file("canal-json", msg)  # the default, auto: the message says which
    assert auto.commit_ts is None and auto.event_time_ms is not None
    with pytest.raises(DecodeError) as info:
        decode_file("canal-json", msg, enable_tidb_extension="true")
    assert info.value.field == "_tidb.commitTs"
    assert "enable-tidb-extension=true" in str(info.value) and "enable_tidb_extension = false" in str(info.value)


def test_ticdc_canal_json_newline_batch(conformance: Path) -> None:
    (batch,) = files(conformance, "ticdc-canal-json/unit/*batch-with-newline-terminator.txt")
    events = decode_file("canal-json", batch, enable_tidb_extension="false")
    assert [e.op for e in events] == [Op.INSERT, Op.UPDATE, Op.DELETE]
    assert [e.position.index for e in events] == [0, 1, 2]
    ins, upd, dele = events
    assert ins.commit_ts is None and ins.event_time_ms == 1668067205238  # no _tidb extension: the derived clock orders
    assert ins.after == {"FirstName": "Bob", "HireDate": dt.date(2014, 6, 4), "LastName": "Smith", "OfficeLocation": "New York", "id": 101}
    assert upd.before["HireDate"] == dt.date(2014, 6, 4) and upd.after["HireDate"] == dt.date(2015, 10, 8)
    assert upd.before["OfficeLocation"] == "New York" and upd.after["OfficeLocation"] == "Los Angeles"
    assert dele.before["id"] == 101 and dele.after is None
    singles = [decode_file("canal-json", p, enable_tidb_extension="false")[0]
               for p in files(conformance, "ticdc-canal-json/unit/*__msg*.json")]
    # msg1..3 are the three lines of the batch, one message each.
    assert sorted((e.op.value, e.event_time_ms) for e in singles) == sorted((e.op.value, e.event_time_ms) for e in events)


# ---------------------------------------------------------------- official Canal (Paimon fixtures)


def test_canal_flat_all_types(conformance: Path) -> None:
    (path,) = files(conformance, "canal-flat/paimon/table__alltype__*.json")
    first, second = decode_file("canal", path)
    a = first.after
    assert first.position.index == 0 and second.position.index == 1
    assert a["pt"] == Decimal("1.1") and first.column_types["pt"].precision == 2
    assert a["_tinyint_unsigned"] == 2 and first.column_types["_tinyint_unsigned"].unsigned
    assert a["_bigint_unsigned"] == 20000000000 and first.column_types["_bigint_unsigned"].kind is TypeKind.UNSIGNED_LONG
    assert a["_serial"] == 40000000000
    assert a["_float"] == 1.5 and a["_double_precision"] == 1.000111
    assert a["_fixed"] == Decimal("123456789876543212345678987654321.110")
    assert first.column_types["_fixed"].iceberg_type() == "string"  # precision 40 > Iceberg's 38
    assert a["_numeric"] == Decimal("12345.110") and first.column_types["_numeric"].iceberg_type() == "decimal(8, 3)"
    assert a["_date"] == dt.date(2023, 3, 23)
    assert a["_datetime3"] == dt.datetime(2023, 3, 23, 14, 30, 5, 123000)
    assert a["_datetime6"] == dt.datetime(2023, 3, 23, 14, 30, 5, 123456)
    assert a["_timestamp"] == dt.datetime(2023, 3, 23, 15, 0, 10, 123456, tzinfo=UTC)
    assert a["_time"] == dt.timedelta(hours=10, minutes=13, seconds=23)
    assert a["_year"] == 2023
    # BINARY(10): the binlog (and so Canal) drops trailing zero bytes; MySQL holds the value padded to 10
    assert a["_bin"] == b"bytes\0\0\0\0\0" and a["_varbin"] == b"more bytes"
    assert a["_longblob"] == b"LONGBLOB  bytes test data"
    assert a["_json"] == '{"a": "b"}'
    assert a["_enum"] == "value1"  # Canal sends the index; the type lists the members
    assert a["_set"] == "a,b"  # bit mask 3
    point = a["_point"]
    assert point[:9] == b"\x00\x00\x00\x00\x01\x01\x00\x00\x00" and point[-8:] == b"\x00\x00\x00\x00\x00\x00\xf0?"
    assert all(v is None for k, v in second.after.items() if k not in ("_id", "pt", "_serial"))


def test_canal_flat_events(conformance: Path) -> None:
    (update,) = decode_file("canal", conformance / "canal-flat/paimon/table__event__event-update__L19.json")
    # Canal's old holds only the changed column; the before image is data overlaid with it.
    assert update.before == {"pt": 1, "_id": 2, "v1": "two", "v2": None}
    assert update.after == {"pt": 1, "_id": 2, "v1": "second", "v2": None}
    (delete,) = decode_file("canal", conformance / "canal-flat/paimon/table__event__event-delete__L19.json")
    assert delete.op is Op.DELETE and delete.after is None and delete.before["_id"] == 1
    two = decode_file("canal", conformance / "canal-flat/paimon/table__event__event-insert__L20.json")
    assert [e.op for e in two] == [Op.INSERT, Op.INSERT]
    files(conformance, "canal-flat/paimon/table__event__*.json")


def test_canal_flat_ddl_and_every_file(conformance: Path) -> None:
    (ddl,) = decode_file("canal", conformance / "canal-flat/paimon/table__schemaevolution__canal-data-2__L19.json")
    assert isinstance(ddl, DdlChange)
    assert ddl.sql.endswith("ALTER TABLE schema_evolution_1 ADD COLUMN v2 INT")
    assert (ddl.database, ddl.table, ddl.ddl_type, ddl.commit_ts) == ("paimon_sync_table", "schema_evolution_1", "ALTER", None)
    for path in files(conformance, "canal-flat/paimon/*.json"):
        doc = json.loads(path.read_bytes())
        events = decode_file("canal", path)
        if doc["isDdl"]:
            assert [type(e) for e in events] == [DdlChange] and events[0].sql == doc["sql"]
        else:
            assert len(events) == len(doc["data"])
            assert all(e.op.name == doc["type"] and e.table == doc["table"] for e in events)
            assert all(e.key_columns == tuple(doc["pkNames"] or ()) for e in events)


# ---------------------------------------------------------------- Open Protocol


def _open_pair(conformance: Path, name: str) -> tuple[Path, Path]:
    base = conformance / "ticdc-open-protocol/binary"
    kind, _, i = name.rpartition("_")
    return base / "key" / f"{kind}_key_{i}", base / "value" / f"{kind}_value_{i}"


def test_open_protocol_framing_matches_the_derived_parse(conformance: Path) -> None:
    expected = json.loads((conformance / "ticdc-open-protocol/binary/expected-decoded.json").read_text())["batches"]
    files(conformance, "ticdc-open-protocol/binary/**/*")
    for name, batch in expected.items():
        key, value = _open_pair(conformance, name)
        keys = [json.loads(k) for k in split_frames(key.read_bytes(), "key", versioned=True)]
        values = [json.loads(v) if v else None for v in split_frames(value.read_bytes(), "value", versioned=False)]
        assert keys == batch["key"]["items"], name
        assert values == batch["value"]["items"], name


def test_open_protocol_events(conformance: Path) -> None:
    def decode(name: str) -> list:
        key, value = _open_pair(conformance, name)
        return decode_file("open-protocol", value, key)

    assert decode("ddl_2") == decode("row_2") == decode("rts_2") == []  # empty batches
    assert [(e.ts, e.position.index) for e in decode("rts_1")] == [(1, 0), (2, 1), (3, 2)]
    ddls = decode("ddl_1")
    assert [(e.sql, e.commit_ts, e.ddl_type) for e in ddls] == [
        ("create table a", 1, "CREATE SCHEMA"), ("create table b", 2, "DROP SCHEMA"), ("create table c", 3, "CREATE TABLE"),
    ]
    rows = decode("row_1")
    assert [(r.database, r.table, r.commit_ts, r.after["col1"]) for r in rows] == [
        ("a", "b", 1, "aa"), ("a", "b", 2, "bb"), ("a", "b", 3, "bb"), ("a", "c", 4, "cc"),
    ]
    # The 2020 encoder wrote no flags; values that do not fit the type code stay as sent.
    assert rows[3].physical_table_id == 6 and rows[0].physical_table_id is None
    assert all(r.op is Op.INSERT for r in rows)


# ---------------------------------------------------------------- TiCDC Debezium


def _debezium_pairs(conformance: Path) -> list[tuple[Path | None, Path]]:
    pairs = []
    for value in files(conformance, "ticdc-debezium/**/*-value*.json"):
        test, _, rest = value.name.partition("__L")
        suffix = rest.split("-value", 1)[1]
        stem = rest.split("__", 1)[1].split("-value", 1)[0]
        keys = [k for k in value.parent.glob(f"{test}__L*__{stem}-key{suffix}")]
        pairs.append((keys[0] if keys else None, value))
    files(conformance, "ticdc-debezium/**/*-key*.json")
    return pairs


def test_ticdc_debezium_every_pair(conformance: Path) -> None:
    seen = set()
    for key, value in _debezium_pairs(conformance):
        events = decode_file("debezium", value, key)
        assert len(events) == 1, value.name
        e = events[0]
        name = value.name
        if "watermark" in name:
            assert e == Watermark(3, e.position)
            seen.add("watermark")
        elif "ddl" in name:
            assert isinstance(e, DdlChange) and e.commit_ts == 1 and e.database == "test"
            if "create" in name:
                assert e.sql.startswith("CREATE TABLE test.table1") and e.ddl_type == "CREATE"
                assert e.schema_after is not None and e.schema_after.key_columns == ("id",)
                assert e.schema_after.columns[0].type.kind is TypeKind.INT
            elif "drop" in name:
                assert e.sql == "DROP TABLE test.table2" and e.ddl_type == "DROP" and e.schema_after is None
            else:
                assert e.sql == "RENAME TABLE test.table1 to test.table2" and e.ddl_type == "ALTER"
            seen.add("ddl")
        else:
            assert isinstance(e, RowChange) and e.commit_ts == 1 and (e.database, e.table) == ("test", "table1")
            if key is not None:
                assert e.key_columns == ("tiny",)
            if "insert" in name:
                assert (e.op, e.before, e.after) == (Op.INSERT, None, {"tiny": 1})
            elif "delete" in name:
                assert (e.op, e.before, e.after) == (Op.DELETE, {"tiny": 2}, None)
            elif "nooldvalue" in name:
                assert (e.op, e.before, e.after) == (Op.UPDATE, None, {"tiny": 1})
            else:
                assert (e.op, e.before, e.after) == (Op.UPDATE, {"tiny": 2}, {"tiny": 1})
            seen.add("row")
    assert seen == {"watermark", "ddl", "row"}


def test_debezium_mysql_connector_datatypes(conformance: Path) -> None:
    base = conformance / "debezium-mysql/tiflow-testdata"
    files(conformance, "debezium-mysql/tiflow-testdata/*")
    (row,) = decode_file("debezium-mysql", base / "datatype.dbz.json", base / "datatype.dbz.key.json")
    a = row.after
    assert row.op is Op.INSERT and row.commit_ts is None and row.key_columns == ("pk",)
    assert (row.binlog.file, row.binlog.pos) == ("mysql-bin.000005", 10394)
    assert a["col_d_2023"] == dt.date(2023, 11, 30) and a["col_d_1000"] == dt.date(1000, 1, 1)
    assert a["col_d_9999"] == dt.date(9999, 12, 31) and a["col_d_0000"] is None
    assert a["col_dt_fsp_1"] == dt.datetime(2023, 11, 30, 12, 34, 56, 100000)
    assert a["col_dt_fsp_6"] == dt.datetime(2023, 11, 30, 12, 34, 56, 123456)
    assert a["col_t_fsp_6"] == dt.timedelta(hours=12, minutes=34, seconds=56, microseconds=123456)
    assert a["col_t_neg"] == -dt.timedelta(hours=12, minutes=34, seconds=56, microseconds=123456)
    assert a["col_ts_fsp_5"] == dt.datetime(2023, 11, 30, 12, 34, 56, 123460, tzinfo=UTC)
    assert a["col_bit_1"] is True and a["col_bit_5"] == 16 and a["col_bit_60"] == 16
    assert a["col_int_unsigned"] == 4294967295 and a["col_tinyint"] == -128
    assert a["col_bigint"] == -(2**63)
    assert a["col_enum"] == "a" and a["col_set"] == "a,b" and row.column_types["col_enum"].elements == ("a", "b", "c")
    assert a["col_json"] == '["foo"]'
    # Without the table's DDL, BIGINT UNSIGNED max arrives wrapped (-1) and varbinary as base64 text.
    assert a["col_bigint_unsigned"] == -1 and a["col_varbinary"] == "Zm9v"


def test_debezium_mysql_typed_by_the_tables_ddl(conformance: Path) -> None:
    """With tableChanges for the table (as the connector's schema history gives), values are exact."""
    base = conformance / "debezium-mysql/tiflow-testdata"
    schema_change = {
        "payload": {
            "source": {"db": "test", "table": "foo", "file": "mysql-bin.000005", "pos": 1},
            "databaseName": "test", "ddl": (base / "datatype.ddl.sql").read_text(),
            "tableChanges": [{"type": "CREATE", "id": '"test"."foo"', "table": {
                "primaryKeyColumnNames": ["pk"],
                "columns": [
                    {"name": "col_bigint_unsigned", "typeName": "BIGINT UNSIGNED", "position": 1},
                    {"name": "col_varbinary", "typeName": "VARBINARY", "length": 100, "position": 2},
                    {"name": "col_binary", "typeName": "BINARY", "length": 100, "position": 3},
                    {"name": "col_decimal", "typeName": "DECIMAL", "length": 10, "scale": 5, "position": 4},
                ],
            }}],
        }
    }
    ddl, row = decode_values(
        "debezium-mysql", json.dumps(schema_change).encode(), (base / "datatype.dbz.json").read_bytes(),
        keys=[None, (base / "datatype.dbz.key.json").read_bytes()],
    )
    assert isinstance(ddl, DdlChange) and "CREATE TABLE foo" in ddl.sql
    a = row.after
    assert a["col_bigint_unsigned"] == 2**64 - 1
    assert a["col_varbinary"] == b"foo"
    assert a["col_binary"] == b"foo" + b"\x00" * 97
    assert a["col_decimal"] == Decimal("12345.12345") and row.column_types["col_decimal"].scale == 5


# ---------------------------------------------------------------- TiCDC Simple


def test_simple_json_docs(conformance: Path) -> None:
    d = conformance / "ticdc-simple/json"
    files(conformance, "ticdc-simple/json/*.json")
    order = ["L248__dml-insert", "L287__dml-update", "L394__bootstrap", "L83__ddl-alter-add-column", "L333__dml-delete", "L372__watermark"]
    values = [next(d.glob(f"docs-cn__{n}*.json")).read_bytes() for n in order]
    decoder = get_decoder("simple")
    out = []
    for offset, v in enumerate(values):
        out.append(decoder.decode(RawMessage(None, v, SourcePosition("t", 0, offset))))
    assert decoder.finish() == []
    # The DMLs of simple.user arrive before any schema: held, then released by the DDL,
    # whose preTableSchema is their version.
    assert out[0] == out[1] == []
    (bootstrap,) = out[2]
    assert isinstance(bootstrap, SchemaSnapshot) and bootstrap.schema.table == "new_user"
    assert bootstrap.schema.version == 447984074911121426 and bootstrap.schema.key_columns == ("id",)
    ddl, insert, update = out[3]
    assert isinstance(ddl, DdlChange) and ddl.ddl_type == "ALTER" and ddl.commit_ts == 447987408682614795
    assert [c.name for c in ddl.schema_after.columns][-1] == "createTime"
    assert ddl.schema_after.column("createTime").type.kind is TypeKind.TIMESTAMPTZ
    assert len(ddl.schema_before.columns) == 4
    assert insert.after == {"age": 25, "id": 1, "name": "John Doe", "score": 90.5}
    assert (insert.commit_ts, insert.position.offset) == (447984084414103554, 0)
    assert update.before["score"] == 90.5 and update.after["score"] == 95.0 and update.position.offset == 1
    (delete,) = out[4]
    assert delete.op is Op.DELETE and delete.before["id"] == 1
    assert out[5] == [Watermark(447984124732375041, SourcePosition("t", 0, 5))]


def test_simple_dml_without_schema_is_reported_at_finish(conformance: Path) -> None:
    value = next((conformance / "ticdc-simple/json").glob("*dml-insert.json")).read_bytes()
    decoder = get_decoder("simple")
    assert decoder.decode(RawMessage(None, value, SourcePosition("orders", 3, 77))) == []
    (error,) = decoder.finish()
    assert isinstance(error, DecodeError) and error.raw.value == value
    assert str(error).startswith("simple orders/3@77[0]: schemaVersion: no BOOTSTRAP or DDL for simple.user schema version 447984074911121426")


def test_simple_avro_schema_matches_both_copies(conformance: Path) -> None:
    files(conformance, "ticdc-simple/schema/*.json")
    a = json.loads((conformance / "ticdc-simple/schema/message.json").read_text())
    b = json.loads((conformance / "ticdc-simple/schema/message.ticdc-repo.json").read_text())
    ours = json.loads((Path(__file__).resolve().parents[2] / "cdc_codecs/schemas/simple_message.json").read_text())
    assert a == b == ours


def test_simple_avro_round_trip_of_the_docs_messages(conformance: Path) -> None:
    """No Avro-encoded Simple message exists upstream: re-encode the JSON docs in Avro."""
    d = conformance / "ticdc-simple/json"
    order = ["L394__bootstrap", "L83__ddl-alter-add-column", "L248__dml-insert", "L287__dml-update", "L333__dml-delete", "L372__watermark"]
    json_events = decode_values("simple", *[next(d.glob(f"docs-cn__{n}*.json")).read_bytes() for n in order])
    avro = get_encoder("simple", encoding="avro")
    values = [r.value for e in json_events for r in avro.encode(e, 1)]
    avro_events = decode_values("simple", *values, encoding="avro")

    def strip(e):
        return type(e).__name__, getattr(e, "after", None), getattr(e, "before", None), getattr(e, "commit_ts", getattr(e, "ts", None))

    assert [strip(e) for e in avro_events] == [strip(e) for e in json_events]


# ---------------------------------------------------------------- Aliyun DTS Avro


def test_dts_schemas_differ_only_in_born_timestamp(conformance: Path) -> None:
    files(conformance, "dts-avro/**/*")
    v1 = json.loads((conformance / "dts-avro/schema-extracted/Record.sdk-java.self-contained.json").read_text())
    v2 = json.loads((conformance / "dts-avro/schema-extracted/Record.go-demo.self-contained.json").read_text())
    assert [f["name"] for f in v2["fields"]] == [f["name"] for f in v1["fields"]] + ["bornTimestamp"]
    from fastavro.schema import load_schema

    from cdc_codecs.dts_avro import SCHEMAS

    avsc = load_schema(str(conformance / "dts-avro/schema/com.alibaba.dts.formats.avro.Record.avsc"))
    assert [f["name"] for f in avsc["fields"]] == [f["name"] for f in SCHEMAS[2]["fields"]]


@pytest.mark.parametrize("version", [1, 2])
def test_dts_records_written_with_either_schema_decode(conformance: Path, version: int) -> None:
    """No encoded DTS record exists publicly: write records with each upstream schema file."""
    import io

    import fastavro
    from fastavro.schema import load_schema

    schema = (
        load_schema(str(conformance / "dts-avro/schema/com.alibaba.dts.formats.avro.Record.avsc"))
        if version == 2
        else fastavro.parse_schema(json.loads((conformance / "dts-avro/schema-extracted/Record.sdk-java.self-contained.json").read_text()))
    )
    ns = "com.alibaba.dts.formats.avro."
    record = {
        "version": 0, "id": 42, "sourceTimestamp": 1700000000, "sourcePosition": "5723@3",
        "safeSourcePosition": "", "sourceTxid": "", "source": {"sourceType": "MySQL", "version": "8.0"},
        "operation": "UPDATE", "objectName": "shop.orders", "processTimestamps": None,
        "tags": {"pk_uk_info": '{"PRIMARY":["id"]}'},
        "fields": [{"name": "id", "dataTypeNumber": 8}, {"name": "price", "dataTypeNumber": 246},
                   {"name": "name", "dataTypeNumber": 253}, {"name": "blob", "dataTypeNumber": 252},
                   {"name": "at", "dataTypeNumber": 7}, {"name": "day", "dataTypeNumber": 10}],
        "beforeImages": [
            (ns + "Integer", {"precision": 64, "value": "18446744073709551615"}),
            (ns + "Decimal", {"value": "10.50", "precision": 10, "scale": 2}),
            (ns + "Character", {"charset": "utf8mb4", "value": "李雷".encode()}),
            (ns + "BinaryObject", {"type": "BLOB", "value": b"\x00\x01\xff"}),
            (ns + "Timestamp", {"timestamp": 1700000000, "millis": 250}),
            (ns + "DateTime", {"year": 2024, "month": 2, "day": 29, "hour": None, "minute": None, "second": None, "millis": None}),
        ],
        "afterImages": [
            (ns + "Integer", {"precision": 64, "value": "-9223372036854775808"}),
            None, "NULL", None, None, None,
        ],
    }
    if version == 2:
        record["bornTimestamp"] = 1700000000123
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, schema, record)
    (row,) = decode_values("dts-avro", buf.getvalue())
    assert row.op is Op.UPDATE and (row.database, row.table) == ("shop", "orders") and row.key_columns == ("id",)
    assert row.before == {
        "id": 2**64 - 1, "price": Decimal("10.50"), "name": "李雷", "blob": b"\x00\x01\xff",
        "at": dt.datetime(2023, 11, 14, 22, 13, 20, 250000, tzinfo=UTC), "day": dt.date(2024, 2, 29),
    }
    assert row.after["id"] == -(2**63) and row.after["name"] is None
    assert row.commit_ts is None and row.event_time_ms == 1700000000000
    assert (row.binlog.file, row.binlog.pos, row.binlog.row) == ("000003", 5723, 42)
    assert row.column_types["id"].iceberg_type() == "decimal(20, 0)"
    # Forcing the wrong version is caught, never silently mis-framed.
    wrong = "2" if version == 1 else "1"
    with pytest.raises(DecodeError, match="dts-avro t/0@0"):
        decode_values("dts-avro", buf.getvalue(), schema_version=wrong)


def test_cloudcanal_has_no_vectors_but_its_documented_shape_decodes(conformance: Path) -> None:
    files(conformance, "cloudcanal/*")
    doc = {
        "action": "UPDATE", "before": [{"col1": "22", "col2": "22", "col_pk": "22"}], "bid": 0,
        "data": [{"col1": "11", "col2": "11", "col_pk": "22"}], "db": "db_test",
        "dbValType": {"col1": "varchar(22)", "col2": "varchar(22)", "col_pk": "varchar(22)"},
        "ddl": False, "entryType": "ROWDATA", "execTs": 1669789152000,
        "jdbcType": {"col1": 12, "col2": 12, "col_pk": 12}, "pks": ["col_pk"], "schema": "db_test",
        "sendTs": 1669789153377, "sql": "", "table": "table_test",
    }
    (row,) = decode_values("cloudcanal-json", json.dumps(doc).encode())
    assert row.op is Op.UPDATE and row.before == {"col1": "22", "col2": "22", "col_pk": "22"}
    assert row.after["col1"] == "11" and row.event_time_ms == 1669789152000 and row.key_columns == ("col_pk",)
    ddl_doc = {**doc, "action": "ALTER", "ddl": True, "data": [], "before": [], "sql": "alter table table_test add col2 varchar(22) null",
               "tableChanges": {"type": "ALTER", "table": {"columns": [
                   {"jdbcType": 12, "name": "col1", "position": 0, "typeExpression": "varchar(22)", "typeName": "varchar"},
                   {"jdbcType": 12, "name": "col_pk", "position": 1, "typeExpression": "varchar(22)", "typeName": "varchar"}],
                   "primaryKeyColumnNames": ["col_pk"]}}}
    (ddl,) = decode_values("cloudcanal-json", json.dumps(ddl_doc).encode())
    assert ddl.sql.startswith("alter table") and ddl.schema_after.key_columns == ("col_pk",)
    assert [c.name for c in ddl.schema_after.columns] == ["col1", "col_pk"]


def test_every_file_is_covered(conformance: Path) -> None:
    """Every conformance file matches a glob that a test above decodes."""
    all_files = {str(p.relative_to(conformance)) for p in conformance.rglob("*") if p.is_file() and p.name != "MANIFEST.md"}
    covered = {str(p.relative_to(conformance)) for pattern in PATTERNS for p in conformance.glob(pattern)}
    missing = sorted(all_files - covered)
    assert not missing, f"conformance files no test decodes: {missing}"
