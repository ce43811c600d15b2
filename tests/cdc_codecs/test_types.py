from __future__ import annotations

import base64
import datetime as dt
from decimal import Decimal

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from cdc_codecs.types import (
    ColumnType,
    b64decode_strict,
    passthrough,
    ColumnValueError,
    TypeKind,
    format_time,
    from_text,
    parse_mysql_type,
    parse_time,
    stored_type,
    text_converter,
    to_text,
)

UTC = dt.timezone.utc


@pytest.mark.parametrize(
    "text, kind, iceberg",
    [
        ("tinyint", TypeKind.INT, "int"),
        ("TINYINT(2) unsigned zerofill", TypeKind.INT, "int"),
        ("int unsigned", TypeKind.LONG, "long"),
        ("bigint", TypeKind.LONG, "long"),
        ("BIGINT(16) unsigned zerofill", TypeKind.UNSIGNED_LONG, "decimal(20, 0)"),
        ("SERIAL", TypeKind.UNSIGNED_LONG, "decimal(20, 0)"),
        ("decimal(10, 4)", TypeKind.DECIMAL, "decimal(10, 4)"),
        ("FIXED(40,3) unsigned", TypeKind.DECIMAL, "string"),
        ("DOUBLE PRECISION(10,7) unsigned zerofill", TypeKind.DOUBLE, "double"),
        ("REAL", TypeKind.DOUBLE, "double"),
        ("float", TypeKind.FLOAT, "float"),
        ("FLOAT(24)", TypeKind.FLOAT, "float"),
        ("float(25)", TypeKind.DOUBLE, "double"),  # FLOAT(p) is a DOUBLE from p = 25, as MySQL makes it
        ("float(53) unsigned", TypeKind.DOUBLE, "double"),
        ("float(7,4)", TypeKind.FLOAT, "float"),
        ("varchar(16)", TypeKind.STRING, "string"),
        ("varbinary(16)", TypeKind.BINARY, "binary"),
        ("longblob", TypeKind.BINARY, "binary"),
        ("datetime(6)", TypeKind.TIMESTAMP, "timestamp"),
        ("timestamp", TypeKind.TIMESTAMPTZ, "timestamptz"),
        ("time(3)", TypeKind.TIME, "long"),
        ("year", TypeKind.YEAR, "int"),
        ("json", TypeKind.JSON, "string"),
        ("enum('a','b''c')", TypeKind.ENUM, "string"),
        ("set('x')", TypeKind.SET, "string"),
        ("bit(64)", TypeKind.BIT, "decimal(20, 0)"),
        ("bit(8)", TypeKind.BIT, "long"),
        ("POINT", TypeKind.GEOMETRY, "binary"),
        ("BOOLEAN", TypeKind.INT, "int"),
    ],
)
def test_type_mapping(text: str, kind: TypeKind, iceberg: str) -> None:
    ct = parse_mysql_type(text)
    assert ct.kind is kind
    assert ct.iceberg_type() == iceberg


def test_enum_members_keep_quotes() -> None:
    assert parse_mysql_type("enum('a','b''c','d,e')").elements == ("a", "b'c", "d,e")


def test_unknown_type() -> None:
    with pytest.raises(ColumnValueError, match="unknown MySQL type"):
        parse_mysql_type("money")


@pytest.mark.parametrize(
    "type_text, text, value",
    [
        ("bigint unsigned", "18446744073709551615", 2**64 - 1),
        ("bigint", "-9223372036854775808", -(2**63)),
        ("decimal(30,10)", "-12345678901234567890.0123456789", Decimal("-12345678901234567890.0123456789")),
        ("date", "0000-00-00", None),
        ("datetime", "0000-00-00 00:00:00", None),
        ("datetime(6)", "2023-11-30 12:34:56.123456", dt.datetime(2023, 11, 30, 12, 34, 56, 123456)),
        ("timestamp(3)", "2023-11-30 12:34:56.5", dt.datetime(2023, 11, 30, 12, 34, 56, 500000, tzinfo=UTC)),
        ("time", "-838:59:59", -dt.timedelta(hours=838, minutes=59, seconds=59)),
        ("varbinary(4)", "\u0005\u0007\n\u000f$2+cx<&\u00ff\u00fe-7F", bytes([5, 7, 10, 15, 36, 50, 43, 99, 120, 60, 38, 255, 254, 45, 55, 70])),
        ("set('a','b','c')", "5", "a,c"),
        ("enum('a','b','c')", "0", ""),
    ],
)
def test_from_text(type_text: str, text: str, value) -> None:
    assert from_text(parse_mysql_type(type_text), text) == value


@pytest.mark.parametrize(
    "type_text, text",
    [("tinyint", "128"), ("smallint unsigned", "-1"), ("bigint unsigned", "18446744073709551616"), ("int", "1e3"),
     ("decimal(5,2)", "NaN"), ("date", "2023-02-30"), ("time", "25h"), ("set('a')", "2"), ("enum('a')", "3")],
)
def test_from_text_rejects(type_text: str, text: str) -> None:
    with pytest.raises(ColumnValueError):
        from_text(parse_mysql_type(type_text), text)


@given(st.timedeltas(min_value=-dt.timedelta(hours=838), max_value=dt.timedelta(hours=838)))
def test_time_text_round_trip(value: dt.timedelta) -> None:
    assert parse_time(parse_mysql_type("time(6)"), format_time(value)) == value


@given(st.integers(-(2**63), 2**63 - 1))
def test_fast_int_converter_agrees_with_from_text(value: int) -> None:
    ct = parse_mysql_type("bigint")
    assert text_converter(ct)(str(value)) == from_text(ct, str(value)) == value


@given(st.datetimes(min_value=dt.datetime(1000, 1, 1), timezones=st.just(UTC)))
@example(dt.datetime(1000, 1, 1, tzinfo=UTC))  # year 999 in Sao Paulo: text must keep four digits
def test_timestamp_text_round_trip_in_any_zone(value: dt.datetime) -> None:
    import zoneinfo

    ct = parse_mysql_type("timestamp(6)")
    zone = zoneinfo.ZoneInfo("America/Sao_Paulo")
    assert from_text(ct, to_text(ct, value, zone), zone) == value or value.astimezone(zone).fold


def test_column_type_text_round_trips() -> None:
    for text in ("decimal(10,2) unsigned", "enum('a','it''s')", "varchar(12)", "bigint unsigned"):
        ct = parse_mysql_type(text)
        assert parse_mysql_type(str(ct)) == ct
    assert isinstance(parse_mysql_type("int"), ColumnType)


def test_stored_types_read_back_as_written_a_bare_decimal_unknown() -> None:
    """``stored_type`` inverts ``str``: a DECIMAL whose precision no protocol carried (TiCDC's
    Canal-JSON's bare ``decimal``) stays unknown -- decimal(38, 10) in Iceberg, as before it was
    stored --, where MySQL DDL reads ``decimal`` as DECIMAL(10, 0) (issue 34, item 7)."""
    unknown = ColumnType(TypeKind.DECIMAL, "decimal")
    for ct in (unknown, ColumnType(TypeKind.DECIMAL, "decimal", unsigned=True), parse_mysql_type("decimal"),
               parse_mysql_type("decimal(12,2)"), parse_mysql_type("enum('a','it''s')"), parse_mysql_type("bigint unsigned")):
        assert stored_type(str(ct)) == ct
    assert stored_type("decimal").iceberg_type() == unknown.iceberg_type() == "decimal(38, 10)"
    scaled = ColumnType(TypeKind.DECIMAL, "decimal", scale=12)  # Debezium's Decimal with a scale, no precision
    assert stored_type(str(scaled)).iceberg_type() == scaled.iceberg_type() == "decimal(38, 12)"
    assert parse_mysql_type("decimal").iceberg_type() == "decimal(10, 0)"


@pytest.mark.parametrize("mysql_type,final,other", [
    ("int", 7, "7"), ("tinyint unsigned", 255, 256), ("bigint unsigned", 2**64 - 1, -1), ("varchar(4)", "x", b"x"),
    ("double", 1.5, 1), ("decimal(4,1)", Decimal("1.5"), 1.5), ("varbinary(4)", b"x", "x"),
    ("date", dt.date(2024, 1, 2), dt.datetime(2024, 1, 2)), ("datetime", dt.datetime(2024, 1, 2), dt.datetime(2024, 1, 2, tzinfo=UTC)),
    ("timestamp", dt.datetime(2024, 1, 2, tzinfo=UTC), dt.datetime(2024, 1, 2)), ("time", dt.timedelta(1), 1),
])
def test_passthrough_returns_final_values_and_hands_the_rest_on(mysql_type: str, final, other) -> None:
    seen = []
    convert = passthrough(parse_mysql_type(mysql_type), lambda v: seen.append(v) or "general")
    assert convert(final) is final and seen == []
    assert convert(other) == "general" and seen == [other]
    assert passthrough(parse_mysql_type("enum('a')"), lambda v: "general")("a") == "general"  # no single final type


def _outcome(decode, text):  # type: ignore[no-untyped-def]
    try:
        return decode(text)
    except ValueError:
        return "rejected"


@given(st.one_of(
    st.text(alphabet="ABCabxyz0189+/=\n -_\u00e9\x00", max_size=12),
    st.binary(max_size=8).map(lambda b: base64.b64encode(b).decode()),
    st.binary(max_size=8).map(lambda b: base64.b64encode(b).decode() + "="),
))
@example("QQ==")
@example("QQ")
@example("QQ===")
@example("Q=Q=")
@example("QUJD\n")
def test_strict_base64_is_b64decode_with_validate(text: str) -> None:
    assert _outcome(b64decode_strict, text) == _outcome(lambda t: base64.b64decode(t, validate=True), text)


# ---------------------------------------------------------------- ENUM / SET: index or label


def _decode_one(protocol: str, value: bytes, key: bytes | None = None, **options):
    from cdc_codecs import RawMessage, SourcePosition, get_decoder

    (event,) = get_decoder(protocol, **options).decode(RawMessage(key, value, SourcePosition("t", 0, 0)))
    return event


def test_index_senders_mark_indexes_they_cannot_map() -> None:
    """TiCDC Canal-JSON with a bare mysqlType and the Open protocol send indexes without members."""
    from cdc_codecs.open_protocol import join_frames
    from cdc_codecs.types import EnumIndex, SetMask

    canal = _decode_one("canal-json", b'{"database":"d","table":"t","isDdl":false,"type":"INSERT",'
                        b'"mysqlType":{"e":"enum","s":"set"},"data":[{"e":"2","s":"5"}],"_tidb":{"commitTs":1}}')
    key = join_frames([b'{"ts":1,"scm":"d","tbl":"t","t":1}'], versioned=True)
    value = join_frames([b'{"u":{"e":{"t":247,"f":0,"v":2},"s":{"t":248,"f":0,"v":5}}}'], versioned=False)
    open_protocol = _decode_one("open-protocol", value, key)
    for event in (canal, open_protocol):
        assert event.after == {"e": "2", "s": "5"}
        assert type(event.after["e"]) is EnumIndex and type(event.after["s"]) is SetMask


def test_index_senders_with_members_give_labels_even_when_labels_are_digits() -> None:
    """Official Canal / content-compatible TiCDC list the members: the decoder maps, nothing is left marked."""
    event = _decode_one("canal", b'{"database":"d","table":"t","isDdl":false,"type":"INSERT",'
                        b'"mysqlType":{"e":"enum(\'small\',\'10\')","z":"enum(\'0\',\'1\')","s":"set(\'1\',\'2\',\'4\')"},'
                        b'"data":[{"e":"2","z":"1","s":"5"}]}')
    assert event.after == {"e": "10", "z": "0", "s": "1,4"}
    assert all(type(v) is str for v in event.after.values())


def test_label_senders_keep_digit_labels() -> None:
    event = _decode_one("debezium", b'{"payload":{"op":"c","after":{"e":"10","s":"1,4"},"source":{"db":"d","table":"t"}}}')
    assert event.after == {"e": "10", "s": "1,4"}
    assert all(type(v) is str for v in event.after.values())


@pytest.mark.parametrize("text", ["bigint unsigned", "decimal(12,2)", "varchar(64)", "enum('a','b''c')", "datetime(6)", "json"])
def test_column_types_survive_pickling(text: str) -> None:
    import pickle

    column = parse_mysql_type(text)
    copy = pickle.loads(pickle.dumps(column))
    assert copy == column and copy.kind is column.kind and str(copy) == str(column)
