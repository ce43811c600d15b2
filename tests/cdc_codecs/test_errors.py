"""Bad input: each case raises a typed DecodeError that names protocol, position and field."""

from __future__ import annotations

import base64
import datetime as dt
import json
import re
import struct

import orjson
import pytest

from cdc_codecs import (
    PROTOCOLS,
    ClaimCheckError,
    Column,
    ConfigError,
    DecodeError,
    HandleKeyOnlyError,
    Op,
    RawMessage,
    RowChange,
    SchemaSnapshot,
    SourcePosition,
    TableSchema,
    get_decoder,
    get_encoder,
    parse_mysql_type,
)
from cdc_codecs.open_protocol import join_frames

POS = SourcePosition("orders", 2, 77)


def decode(protocol: str, value: bytes | None, key: bytes | None = None, **options):
    return get_decoder(protocol, **options).decode(RawMessage(key, value, POS))


def canal(**overrides) -> bytes:
    doc = {
        "id": 0, "database": "d", "table": "t", "pkNames": ["id"], "isDdl": False, "type": "UPDATE",
        "es": 1, "ts": 1, "sql": "", "sqlType": {"id": 4, "v": 12}, "mysqlType": {"id": "int", "v": "varchar"},
        "data": [{"id": "1", "v": "new"}], "old": [{"id": "1", "v": "old"}], "_tidb": {"commitTs": 42},
    }
    doc.update(overrides)
    return orjson.dumps({k: v for k, v in doc.items() if v is not ...})


def expect(protocol: str, value: bytes | None, message: str, key: bytes | None = None, **options) -> DecodeError:
    with pytest.raises(DecodeError) as info:
        decode(protocol, value, key, **options)
    text = str(info.value)
    assert text.startswith(f"{protocol} orders/2@77["), text
    assert message in text, text
    return info.value


class TestCanalJson:
    def test_missing_old_on_update(self) -> None:
        expect("canal-json", canal(old=...), "old: missing when 'type' is 'UPDATE'")

    def test_mistyped_field(self) -> None:
        expect("canal-json", canal(data={"id": "1"}), "data: expected an array, found an object")

    def test_value_outside_its_type(self) -> None:
        e = expect("canal-json", canal(mysqlType={"id": "tinyint unsigned", "v": "varchar"}, data=[{"id": "256", "v": "x"}], old=[{}]),
                   "data[0].id: 256 is outside tinyint unsigned range [0, 255]")
        assert e.field == "data[0].id"

    def test_not_an_integer(self) -> None:
        expect("canal-json", canal(data=[{"id": "1.5", "v": "x"}]), "data[0].id: expected an integer for int, found '1.5'")

    def test_column_without_a_type(self) -> None:
        expect("canal-json", canal(data=[{"id": "1", "w": "x"}]), "mysqlType.w: missing for column data[0].w")

    def test_unknown_mysql_type(self) -> None:
        expect("canal-json", canal(mysqlType={"id": "int", "v": "hyperloglog"}), "unknown MySQL type 'hyperloglog'")

    def test_binary_that_is_not_latin1(self) -> None:
        expect("canal-json", canal(mysqlType={"id": "int", "v": "blob"}, data=[{"id": "1", "v": "é€"}], old=[{}]),
               "above U+00FF")

    def test_invalid_json(self) -> None:
        expect("canal-json", b'{"id": 0, "type": "INSE', "invalid JSON")

    def test_negative_tso(self) -> None:
        expect("canal-json", canal(_tidb={"commitTs": -3}), "_tidb.commitTs: TSO -3 is negative (physical milliseconds << 18 | logical)")

    def test_index_inside_a_batch_is_reported(self) -> None:
        good = canal().decode()
        bad = canal(data=[{"id": "x", "v": "y"}]).decode()
        with pytest.raises(DecodeError) as info:
            decode("canal-json", f"{good}\n{good}\n{bad}\n".encode())
        assert "orders/2@77[2]" in str(info.value)

    def test_handle_key_only(self) -> None:
        with pytest.raises(HandleKeyOnlyError, match="claim-check"):
            decode("canal-json", canal(_tidb={"commitTs": 5, "onlyHandleKey": True}))


class TestClaimCheck:
    def full(self) -> bytes:
        return canal()

    def test_fetches_the_stored_message(self) -> None:
        stored = json.dumps({"key": None, "value": base64.b64encode(self.full()).decode()}).encode()
        ref = canal(data=[{"id": "1", "v": ""}], _tidb={"commitTs": 42, "claimCheckLocation": "s3://b/claim/42.json"})
        reads = []
        events = decode("canal-json", ref, claim_check_reader=lambda loc: reads.append(loc) or stored)
        assert reads == ["s3://b/claim/42.json"]
        assert events[0].after == {"id": 1, "v": "new"} and events[0].commit_ts == 42

    def test_raw_value_storage(self) -> None:
        ref = canal(_tidb={"commitTs": 42, "claimCheckLocation": "loc"})
        assert decode("canal-json", ref, claim_check_reader=lambda loc: self.full())[0].op is Op.UPDATE

    def test_without_a_reader(self) -> None:
        ref = canal(_tidb={"commitTs": 42, "claimCheckLocation": "loc"})
        with pytest.raises(ClaimCheckError, match="no claim-check storage is configured"):
            decode("canal-json", ref)

    def test_reader_failure_is_typed(self) -> None:
        def broken(loc: str) -> bytes:
            raise FileNotFoundError(loc)

        ref = canal(_tidb={"commitTs": 42, "claimCheckLocation": "missing.json"})
        with pytest.raises(ClaimCheckError, match="cannot read 'missing.json'"):
            decode("canal-json", ref, claim_check_reader=broken)

    def test_open_protocol(self) -> None:
        from cdc_codecs import RowChange
        from cdc_codecs.types import parse_mysql_type

        enc = get_encoder("open-protocol")
        row = RowChange(Op.INSERT, "d", "t", None, {"id": 7}, ("id",), {"id": parse_mysql_type("int")}, 9, POS)
        key, value = enc.encode_row(row)
        stored = json.dumps({"key": base64.b64encode(key).decode(), "value": base64.b64encode(value).decode()}).encode()
        ref_key = join_frames([orjson.dumps({"ts": 9, "scm": "d", "tbl": "t", "t": 1, "ccl": "x/9.json"})], versioned=True)
        (event,) = decode("open-protocol", join_frames([b"{}"], versioned=False), ref_key, claim_check_reader=lambda loc: stored)
        assert event.after == {"id": 7} and event.commit_ts == 9

    def test_simple(self) -> None:
        from cdc_codecs import DdlChange, RowChange, TableSchema
        from cdc_codecs.events import Column
        from cdc_codecs.types import parse_mysql_type

        schema = TableSchema("d", "t", (Column("id", parse_mysql_type("int"), False),), ("id",), 3)
        enc = get_encoder("simple")
        ddl = enc.encode_ddl(DdlChange("d", "t", "create table t (id int)", 8, POS, "CREATE", None, schema))[1]
        row = enc.encode_row(RowChange(Op.INSERT, "d", "t", None, {"id": 5}, ("id",), schema.column_types, 9, POS))[1]
        ref = orjson.dumps({**orjson.loads(row), "claimCheckLocation": "c/1", "data": None})
        decoder = get_decoder("simple", claim_check_reader=lambda loc: row)
        decoder.decode(RawMessage(None, ddl, POS))
        (event,) = decoder.decode(RawMessage(None, ref, POS))
        assert event.after == {"id": 5}


class TestOpenProtocol:
    def key(self, *docs: dict) -> bytes:
        return join_frames([orjson.dumps(d) for d in docs], versioned=True)

    def value(self, *docs: dict | None) -> bytes:
        return join_frames([orjson.dumps(d) if d is not None else b"" for d in docs], versioned=False)

    def test_wrong_version(self) -> None:
        expect("open-protocol", self.value({}), "key: unexpected batch version 2, expected 1", key=struct.pack(">q", 2))

    def test_length_past_the_end(self) -> None:
        key = struct.pack(">qq", 1, 500) + b"{}"
        expect("open-protocol", b"", "key: length 500 at byte 8 runs past the end (2 bytes left)", key=key)

    def test_truncated_length(self) -> None:
        expect("open-protocol", b"", "key: truncated length at byte 8", key=struct.pack(">q", 1) + b"\x00\x00")

    def test_key_and_value_counts_differ(self) -> None:
        expect("open-protocol", self.value(None), "value: has 1 entries but the key has 2",
               key=self.key({"ts": 1, "t": 3}, {"ts": 2, "t": 3}))

    def test_unknown_type_code(self) -> None:
        expect("open-protocol", self.value({"u": {"c": {"t": 99, "f": 0, "v": 1}}}), "u.c: unknown column type code 99",
               key=self.key({"ts": 1, "scm": "s", "tbl": "t", "t": 1}))

    def test_out_of_range(self) -> None:
        expect("open-protocol", self.value({"u": {"c": {"t": 1, "f": 0x80, "v": 300}}}), "u.c: 300 is outside tinyint unsigned",
               key=self.key({"ts": 1, "scm": "s", "tbl": "t", "t": 1}))

    def test_bad_base64(self) -> None:
        expect("open-protocol", self.value({"u": {"c": {"t": 252, "f": 1, "v": "!!"}}}), "u.c: expected base64",
               key=self.key({"ts": 1, "scm": "s", "tbl": "t", "t": 1}))

    def test_error_names_the_event_index(self) -> None:
        e = expect("open-protocol", self.value(None, {"x": 1}), "value: expected one of 'u'",
                   key=self.key({"ts": 1, "t": 3}, {"ts": 1, "scm": "s", "tbl": "t", "t": 1}))
        assert e.position.index == 1

    def test_handle_key_only(self) -> None:
        with pytest.raises(HandleKeyOnlyError, match="orders/2@77"):
            decode("open-protocol", self.value({"u": {"id": {"t": 3, "f": 10, "v": 1}}}),
                   self.key({"ts": 1, "scm": "s", "tbl": "t", "t": 1, "ohk": True}))

    def test_delete_with_only_key_columns_is_partial(self) -> None:
        (row,) = decode("open-protocol", self.value({"d": {"id": {"t": 3, "f": 10, "v": 1}}}),
                        self.key({"ts": 1, "scm": "s", "tbl": "t", "t": 1}))
        assert row.op is Op.DELETE and row.partial_before and row.before == {"id": 1} and row.key_columns == ("id",)


class TestAvroAndOthers:
    def test_invalid_avro_simple(self) -> None:
        expect("simple", b"\x09\x00\x01", "value: invalid Avro", encoding="avro")

    def test_avro_trailing_bytes(self) -> None:
        value = get_encoder("simple", encoding="avro").encode_watermark(
            __import__("cdc_codecs").Watermark(5, POS)
        )[1]
        expect("simple", value + b"\x00\x00", "trailing bytes", encoding="avro")

    def test_invalid_avro_dts(self) -> None:
        expect("dts-avro", b"\x00\x02\x04garbage", "value:")

    def test_debezium_unknown_op(self) -> None:
        expect("debezium", orjson.dumps({"payload": {"op": "x", "source": {"db": "d", "table": "t"}}}),
               "payload.op: expected one of c, r, u, d, m, found 'x'")

    def test_debezium_rejects_bad_text_in_schemas_it_does_not_parse(self) -> None:
        # Schemas are split off unparsed (a row's schema text is the converter cache key; a
        # key's or a watermark's schema is never read): invalid UTF-8 there is still invalid JSON.
        bad_schema = b'{"schema": {"name": "\xe9x"}, '
        row = orjson.dumps({"op": "c", "after": {"id": 1}, "source": {"db": "d", "table": "t"}})
        expect("debezium", b'{"payload": ' + row + b"}", "invalid JSON", key=bad_schema + b'"payload": {"id": 1}}')
        mark = orjson.dumps({"op": "m", "source": {"commit_ts": 5}})
        expect("debezium", bad_schema + b'"payload": ' + mark + b"}", "invalid JSON")

    def test_debezium_value_that_is_not_an_object(self) -> None:
        expect("debezium", b"[1, 2]", "value: expected an object, found an array")

    def test_debezium_tombstone_is_no_change(self) -> None:
        assert decode("debezium", None, b'{"id": 1}') == []

    def test_simple_handle_key_only(self) -> None:
        doc = {"version": 1, "database": "d", "table": "t", "type": "INSERT", "commitTs": 1, "schemaVersion": 1,
               "handleKeyOnly": True, "data": {"id": "1"}}
        with pytest.raises(HandleKeyOnlyError):
            decode("simple", orjson.dumps(doc))


class TestConfiguration:
    def test_unknown_protocol(self) -> None:
        with pytest.raises(ConfigError, match="unknown protocol 'canal-xml'; known protocols: canal, canal-json"):
            get_decoder("canal-xml")

    def test_unknown_option(self) -> None:
        with pytest.raises(ConfigError, match="canal-json: unknown option\\(s\\) colour; known options: claim_check_reader, enable_tidb_extension, timezone"):
            get_decoder("canal-json", colour="blue")

    def test_bad_option_value(self) -> None:
        with pytest.raises(ConfigError, match="option timezone: unknown time zone 'Mars/Olympus'"):
            get_decoder("canal-json", timezone="Mars/Olympus")

    @pytest.mark.parametrize("protocol", sorted(p for p, spec in PROTOCOLS.items() if "timezone" in spec.decoder.options_spec))
    @pytest.mark.parametrize("bad", ["+25:00", "+08:60", "08:00", "Mars/Olympus", ""])
    def test_bad_timezone_names_option_and_value(self, protocol: str, bad: str) -> None:
        with pytest.raises(ConfigError, match=f"option timezone: .*{re.escape(repr(bad))}"):
            get_decoder(protocol, timezone=bad)

    @pytest.mark.parametrize("protocol", sorted(p for p, spec in PROTOCOLS.items() if "timezone" in spec.decoder.options_spec))
    def test_timezone_accepts_offsets_and_names(self, protocol: str) -> None:
        for text, offset in [("+08:00", 480), ("-05:30", -330), ("+0800", 480), ("UTC", 0), ("Z", 0), ("+00:00", 0),
                             ("Asia/Shanghai", 480)]:
            tz = get_decoder(protocol, timezone=text).options["timezone"]
            assert tz.utcoffset(dt.datetime(2024, 1, 1)) == dt.timedelta(minutes=offset), text

    @pytest.mark.parametrize("protocol", sorted(p for p, spec in PROTOCOLS.items()
                                                if "timezone" in spec.decoder.options_spec and "timezone" in spec.encoder.options_spec))
    @pytest.mark.parametrize("zone", ["+08:00", "-05:30"])
    def test_timestamps_written_at_an_offset_decode_to_the_same_instant(self, protocol: str, zone: str) -> None:
        ts = dt.datetime(2024, 1, 1, 0, 0, 1, tzinfo=dt.timezone.utc)
        types = {"id": parse_mysql_type("int"), "v": parse_mysql_type("timestamp")}
        row = RowChange(Op.INSERT, "d", "t", None, {"id": 1, "v": ts}, ("id",), types, 1, SourcePosition("t", 0, 0), 0)
        # Simple's rows name a schema announced before them.
        schema = SchemaSnapshot(TableSchema("d", "t", tuple(Column(n, t) for n, t in types.items()), ("id",)), SourcePosition("t", 0, 0))
        encoder = get_encoder(protocol, timezone=zone, **dict(PROTOCOLS[protocol].encoder_defaults))
        decoder = get_decoder(protocol, timezone=zone)
        events = []
        for offset, r in enumerate(encoder.encode_all([schema, row], 1)):
            events += decoder.decode(RawMessage(r.key, r.value, SourcePosition("t", 0, offset)))
        (decoded,) = [e for e in events if isinstance(e, RowChange)]
        assert decoded.after["v"] == ts

    def test_timezone_applies_to_timestamps(self) -> None:
        (row,) = decode("canal-json", canal(mysqlType={"id": "int", "v": "timestamp"}, data=[{"id": "1", "v": "2024-01-01 08:00:00"}], type="INSERT", old=...),
                        timezone="Asia/Shanghai")
        assert row.after["v"].isoformat() == "2024-01-01T00:00:00+00:00"


@pytest.mark.parametrize("cls", [DecodeError, HandleKeyOnlyError, ClaimCheckError])
def test_decode_errors_survive_pickling_with_their_raw_message(cls: type[DecodeError]) -> None:
    import pickle

    raw = RawMessage(b"k", b"\x00bad", POS)
    error = cls("canal-json", POS.with_index(2), "old", "missing when 'type' is 'UPDATE'", raw=raw)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is cls
    assert (copy.protocol, copy.position, copy.field, copy.reason, copy.raw) == ("canal-json", POS.with_index(2), "old",
                                                                                 "missing when 'type' is 'UPDATE'", raw)
    assert str(copy) == str(error) == "canal-json orders/2@77[2]: old: missing when 'type' is 'UPDATE'"


def test_a_canal_json_commit_ts_past_63_bits_is_a_typed_error_naming_the_field() -> None:
    """The change log holds a TSO in 64 signed bits: a larger one is bad input, not an OverflowError later."""
    import json

    from cdc_codecs import DecodeError, RawMessage, SourcePosition, get_decoder

    doc = {"id": 0, "database": "d", "table": "t", "pkNames": ["id"], "isDdl": False, "type": "INSERT", "es": 1, "ts": 1,
           "sql": "", "sqlType": {"id": 4}, "mysqlType": {"id": "int"}, "data": [{"id": "1"}], "old": None,
           "_tidb": {"commitTs": 1 << 63}}
    decoder = get_decoder("canal-json")
    try:
        decoder.decode(RawMessage(None, json.dumps(doc).encode(), SourcePosition("t", 0, 5)))
    except DecodeError as exc:
        assert "_tidb.commitTs" in str(exc) and "t/0@5" in str(exc)
    else:
        raise AssertionError("a TSO past 2^63 - 1 decoded")
    doc["_tidb"]["commitTs"] = (1 << 63) - 1
    assert decoder.decode(RawMessage(None, json.dumps(doc).encode(), SourcePosition("t", 0, 6)))[0].commit_ts == (1 << 63) - 1


@pytest.mark.parametrize("protocol", ["canal-json", "open-protocol", "debezium", "simple"])
@pytest.mark.parametrize("what", ["row", "watermark"])
def test_a_tso_past_63_bits_is_a_typed_error_in_every_protocol_that_carries_one(protocol: str, what: str) -> None:
    """Every protocol with a commitTs: a TSO of 2^63 (as the encoder writes it) decodes to a DecodeError
    naming the field, and 2^63 - 1 decodes -- not an OverflowError in the change-log write."""
    from cdc_codecs import DecodeError, RawMessage, RowChange, SourcePosition, Watermark, get_decoder, get_encoder
    from spark.demo.workload import Workload, WorkloadSpec

    workload = Workload(WorkloadSpec())
    creates = list(workload.creates())  # a protocol that sends a table's schema apart (simple) needs it first
    change = next(e for e in workload.events() if isinstance(e, RowChange))
    for ts, decodes in (((1 << 63) - 1, True), (1 << 63, False)):
        event = change._replace(commit_ts=ts) if what == "row" else Watermark(ts, change.position)
        encoder, decoder = get_encoder(protocol), get_decoder(protocol)
        for r in encoder.encode_all(creates, 1):
            decoder.decode(RawMessage(r.key, r.value, SourcePosition("t", 0, 0)))
        records = encoder.encode(event, 1)
        seen = []
        for i, r in enumerate(records):
            try:
                seen += [e.ts if isinstance(e, Watermark) else e.commit_ts
                         for e in decoder.decode(RawMessage(r.key, r.value, SourcePosition("t", 0, i)))]
            except DecodeError as exc:
                assert not decodes and "TSO 9223372036854775808 is past 2^63 - 1" in str(exc), str(exc)
                seen.append("error")
        assert (ts in seen) if decodes else (seen[-1:] == ["error"]), (ts, seen)
