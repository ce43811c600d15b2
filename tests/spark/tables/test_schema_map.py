"""Decoded values -> Iceberg values -> Arrow: exact for every value a type holds, a typed error otherwise."""

from __future__ import annotations

import datetime as dt
import decimal
import math
import re
from decimal import Decimal

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyiceberg.types import DecimalType, FloatType, StringType, TimestampType

from cdc_codecs import (
    PROTOCOLS,
    Column,
    DdlChange,
    Op,
    RawMessage,
    RowChange,
    SourcePosition,
    TableSchema,
    TidelakeError,
    get_decoder,
    get_encoder,
    parse_mysql_type,
)
from cdc_codecs.types import EnumIndex, SetMask, TypeKind, from_text, int_range, to_text
from spark.tables.schema_map import (
    UnsupportedValue,
    arrow_table,
    fit_upstream_value,
    iceberg_schema,
    iceberg_type,
    to_iceberg_value,
)

UTC = dt.timezone.utc


def _round_trip(mysql_type: str, value):
    """``value`` through the Iceberg value of ``mysql_type`` into Arrow and back to Python."""
    schema = iceberg_schema([("c", parse_mysql_type(mysql_type))])
    return arrow_table(schema, [{"c": value}]).column("c").to_pylist()[0]


# ---------------------------------------------------------------- decimal(38, s) at its extremes


@pytest.mark.parametrize(
    "scale, text",
    [
        (0, "9" * 38),
        (0, "-" + "9" * 38),
        (10, "9" * 28 + "." + "9" * 10),
        (10, "-" + "9" * 28 + "." + "9" * 10),
        (10, "0.0000000001"),
        (38, "0." + "9" * 38),
        (38, "-0." + "9" * 38),
        (38, "0." + "0" * 37 + "1"),
    ],
)
def test_decimal_38_extremes_round_trip_exactly(scale: int, text: str) -> None:
    value = Decimal(text)
    assert _round_trip(f"decimal(38,{scale})", value) == value


@pytest.mark.parametrize(
    "scale, value",
    [
        (0, Decimal("1" + "0" * 38)),  # 39 digits
        (10, Decimal("1" + "0" * 28)),  # 29 integer digits where 28 fit
        (38, Decimal("1")),  # decimal(38, 38) holds only |x| < 1
        (10, Decimal("0.00000000001")),  # an 11th decimal would be rounded away
        (0, Decimal("Infinity")),
        (0, Decimal("NaN")),
    ],
)
def test_decimal_out_of_range_is_a_typed_error_naming_the_column(scale: int, value: Decimal) -> None:
    with pytest.raises(UnsupportedValue, match=rf"column 'c' \(decimal\(38, {scale}\)\): .* does not fit decimal\(38, {scale}\)"):
        _round_trip(f"decimal(38,{scale})", value)
    assert issubclass(UnsupportedValue, TidelakeError)


@pytest.mark.parametrize("mysql_type", ["datetime(6)", "timestamp(6)", "date"])
@pytest.mark.parametrize("value", [math.nan, Decimal("NaN"), Decimal("sNaN")])
def test_a_nan_for_a_date_or_time_column_is_a_typed_error_naming_the_column(mysql_type: str, value: object) -> None:
    # Arrow raises a bare ValueError for these (not ArrowInvalid): it must not escape untyped.
    with pytest.raises(UnsupportedValue, match=r"column 'c' \((timestamp|timestamptz|date)\): .*NaN"):
        _round_trip(mysql_type, value)


def test_unsigned_bigint_and_bit64_extremes_fit_decimal_20() -> None:
    for mysql_type in ("bigint unsigned", "bit(64)"):
        for value in (0, 1, (1 << 63) - 1, 1 << 63, (1 << 64) - 1):
            assert _round_trip(mysql_type, value) == Decimal(value)
    with pytest.raises(UnsupportedValue):
        _round_trip("bigint unsigned", 10**20)


def test_decimal_beyond_38_digits_is_text_without_exponent() -> None:
    # decimal(65, 0) maps to string; a Decimal built by scaling prints as '1E+40' with str().
    assert _round_trip("decimal(65,0)", Decimal(1).scaleb(40)) == "1" + "0" * 40
    assert _round_trip("decimal(65,30)", Decimal("-1.5E-29")) == "-0.000000000000000000000000000015"


def _through_upstream(mysql_type: str, value):
    """``value`` written as a table whose column has upstream type ``mysql_type`` writes it."""
    schema = iceberg_schema([("c", parse_mysql_type(mysql_type))])
    return arrow_table(schema, [{"c": value}], {"c": mysql_type}).column("c").to_pylist()[0]


def test_decimal_beyond_38_digits_is_text_at_the_columns_scale_whatever_the_protocol_sent() -> None:
    """Found by the model-based test (TiCDC Debezium writes DECIMAL as a float64, read back as
    1E+34): the text depended on how the protocol wrote the number. It is MySQL's, at the scale."""
    at_scale = "1" + "0" * 34 + "." + "0" * 30
    assert _through_upstream("decimal(65,30)", Decimal("1E+34")) == at_scale
    assert _through_upstream("decimal(65,30)", Decimal(at_scale)) == at_scale
    assert _through_upstream("decimal(65,30)", Decimal("-1.5E-29")) == "-0.000000000000000000000000000015"
    assert _through_upstream("decimal(40,0)", Decimal("1E+39")) == "1" + "0" * 39


@pytest.mark.parametrize("value", [Decimal("1E+35"), Decimal("-1E+35"), Decimal("1E-31")])
def test_decimal_beyond_38_digits_outside_its_precision_or_scale_is_a_typed_error(value: Decimal) -> None:
    """As a decimal(p <= 38) is: 99...9.9...9 rounded to a float64 (TiCDC's Debezium protocol) is
    1E+35, which no DECIMAL(65, 30) holds."""
    with pytest.raises(UnsupportedValue, match=r"column 'c' .*does not fit decimal\(65, 30\)"):
        _through_upstream("decimal(65,30)", value)


# ---------------------------------------------------------------- ENUM / SET labels that are digits


@pytest.mark.parametrize(
    "upstream, value, expected",
    [
        ("enum('0','1')", "1", "1"),  # a label sent as a label (Debezium, DTS, Canal with members)
        ("enum('0','1')", "0", "0"),
        ("enum('small','10')", "10", "10"),
        ("set('1','2','4')", "1,4", "1,4"),
        ("set('1','2','4')", "4", "4"),
        ("enum('0','1')", EnumIndex("1"), "0"),  # an index (TiCDC Canal-JSON, Open protocol)
        ("enum('small','10')", EnumIndex("2"), "10"),
        ("enum('small','10')", EnumIndex("0"), ""),
        ("set('1','2','4')", SetMask("5"), "1,4"),
        ("set('1','2','4')", SetMask("0"), ""),
        (None, EnumIndex("2"), "2"),  # no DDL known: the index text stays
    ],
)
def test_only_marked_indexes_are_mapped_through_the_ddl(upstream, value, expected) -> None:
    fitted = fit_upstream_value(value, upstream)
    assert fitted == expected
    assert type(to_iceberg_value(StringType(), fitted)) is str


def test_index_outside_the_ddl_members_is_a_typed_error() -> None:
    with pytest.raises(UnsupportedValue, match="enum index 3 is outside enum"):
        fit_upstream_value(EnumIndex("3"), "enum('small','10')")
    with pytest.raises(UnsupportedValue, match="set mask 8 has bits outside set"):
        fit_upstream_value(SetMask("8"), "set('1','2','4')")


def _row(protocol: str, value: bytes, key: bytes | None = None, **options):
    (event,) = get_decoder(protocol, **options).decode(RawMessage(key, value, SourcePosition("t", 0, 0)))
    return event


def test_digit_labels_end_to_end_per_protocol() -> None:
    """Decode -> fit to the DDL type: labels stay labels, indexes become labels."""
    ddl = {"e": "enum('small','10')", "s": "set('1','2','4')"}
    # TiCDC Canal-JSON (bare mysqlType): indexes.
    canal = _row("canal-json", b'{"database":"d","table":"t","pkNames":null,"isDdl":false,"type":"INSERT",'
                 b'"mysqlType":{"e":"enum","s":"set"},"data":[{"e":"2","s":"5"}],"old":null,"_tidb":{"commitTs":1}}')
    # Debezium: labels.
    dbz = _row("debezium", b'{"payload":{"op":"c","before":null,"after":{"e":"10","s":"1,4"},'
               b'"source":{"db":"d","table":"t","commit_ts":1}}}')
    for event in (canal, dbz):
        fitted = {n: fit_upstream_value(v, ddl[n]) for n, v in event.after.items()}
        assert fitted == {"e": "10", "s": "1,4"}, event


# ---------------------------------------------------------------- other crossings


def test_float_beyond_float32_is_an_error_not_inf() -> None:
    with pytest.raises(UnsupportedValue, match="beyond the range of float"):
        to_iceberg_value(FloatType(), 1e300)
    assert math.isinf(_round_trip("float", math.inf))
    assert math.isnan(_round_trip("double", math.nan))


def test_aware_value_for_a_datetime_column_is_an_error_not_shifted() -> None:
    with pytest.raises(UnsupportedValue, match="wall-clock"):
        to_iceberg_value(TimestampType(), dt.datetime(2024, 1, 1, 8, tzinfo=dt.timezone(dt.timedelta(hours=8))))


def test_non_text_value_for_a_string_column_is_an_error() -> None:
    with pytest.raises(UnsupportedValue, match="dict value"):
        to_iceberg_value(StringType(), {"a": 1})
    with pytest.raises(UnsupportedValue, match="bytes value"):
        to_iceberg_value(StringType(), b"\x00")


def test_decimal_quantize_does_not_touch_the_global_context() -> None:
    before = decimal.getcontext().prec
    to_iceberg_value(DecimalType(38, 10), Decimal("1" * 28))
    assert decimal.getcontext().prec == before


# ---------------------------------------------------------------- property: decode -> Iceberg -> Arrow


_WIDE = decimal.Context(prec=80)  # exact scaling of the generated 65-digit values


def _decimals(p: int, s: int) -> st.SearchStrategy[Decimal]:
    bound = 10**p - 1
    return st.integers(-bound, bound).map(lambda n: Decimal(n).scaleb(-s, _WIDE))


_TIMES = st.integers(-(838 * 3600 + 59 * 60 + 59) * 10**6 - 999_999, (838 * 3600 + 59 * 60 + 59) * 10**6 + 999_999).map(
    lambda us: dt.timedelta(microseconds=us)
)
_DATETIMES = st.datetimes(dt.datetime(1000, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999))

# (MySQL type, generated typed values: what a decoder yields for it)
_CASES: list[tuple[str, st.SearchStrategy]] = [
    ("tinyint", st.integers(*int_range(parse_mysql_type("tinyint")))),
    ("int", st.integers(*int_range(parse_mysql_type("int")))),
    ("int unsigned", st.integers(*int_range(parse_mysql_type("int unsigned")))),
    ("bigint", st.integers(*int_range(parse_mysql_type("bigint")))),
    ("bigint unsigned", st.integers(*int_range(parse_mysql_type("bigint unsigned")))),
    ("bit(64)", st.integers(0, (1 << 64) - 1)),
    ("bit(63)", st.integers(0, (1 << 63) - 1)),
    ("year", st.integers(1901, 2155)),
    ("float", st.floats(width=32, allow_nan=False)),
    ("double", st.floats(allow_nan=False)),
    ("decimal(38,0)", _decimals(38, 0)),
    ("decimal(38,10)", _decimals(38, 10)),
    ("decimal(38,38)", _decimals(38, 38)),
    ("decimal(20,4)", _decimals(20, 4)),
    ("decimal(65,30)", _decimals(65, 30)),
    ("varchar(10)", st.text()),
    ("json", st.text()),
    ("varbinary(10)", st.binary()),
    ("geometry", st.binary()),
    ("date", st.dates(dt.date(1, 1, 1), dt.date(9999, 12, 31))),
    ("time(6)", _TIMES),
    ("datetime(6)", _DATETIMES),
    ("timestamp(6)", st.datetimes(dt.datetime(1970, 1, 1, 0, 0, 1), dt.datetime(2106, 2, 7), timezones=st.just(UTC))),
    ("timestamp(6)", st.datetimes(dt.datetime(1, 1, 2), dt.datetime(1969, 12, 31), timezones=st.just(UTC))),
]


def _expected(mysql_type: str, value):
    """What Arrow holds for a decoded ``value`` of ``mysql_type``."""
    ct = parse_mysql_type(mysql_type)
    if ct.kind is TypeKind.TIME:
        return value // dt.timedelta(microseconds=1)
    if ct.kind is TypeKind.DECIMAL and (ct.precision or 0) > 38:
        return format(value, "f")
    if iceberg_type(ct) == DecimalType(20, 0):  # bigint unsigned, bit(64)
        return Decimal(value)
    return value


@pytest.mark.parametrize("mysql_type, values", _CASES, ids=[c[0] for c in _CASES])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_values_reach_arrow_without_loss(mysql_type: str, values, data) -> None:
    """A typed value, and the same value as Canal writes and decodes it, reach Arrow unchanged."""
    value = data.draw(values)
    ct = parse_mysql_type(mysql_type)
    assert _round_trip(mysql_type, value) == _expected(mysql_type, value)
    decoded = from_text(ct, to_text(ct, value))
    assert decoded == value
    assert _round_trip(mysql_type, decoded) == _expected(mysql_type, value)


# ---------------------------------------------------------------- decoded by a protocol, into Arrow


def _canal_row(mysql_type: str, text: str):
    doc = {"database": "d", "table": "t", "isDdl": False, "type": "INSERT", "mysqlType": {"c": mysql_type},
           "data": [{"c": text}], "_tidb": {"commitTs": 1}}
    return _row("canal-json", orjson.dumps(doc))


@pytest.mark.parametrize(
    "mysql_type, text",
    [
        ("decimal(38,0)", "9" * 38),
        ("decimal(38,10)", "-" + "9" * 28 + "." + "9" * 10),
        ("decimal(38,38)", "0." + "9" * 38),
        ("bigint unsigned", str((1 << 64) - 1)),
        ("bit(64)", str((1 << 64) - 1)),
        ("time", "-838:59:59"),
        ("time(6)", "838:59:59.999999"),
        ("datetime(6)", "1000-01-01 00:00:00.000001"),
        ("datetime", "9999-12-31 23:59:59"),
        ("timestamp(6)", "1969-12-31 23:59:59.999999"),
        ("timestamp", "2106-02-07 06:28:15"),
    ],
)
def test_canal_extremes_reach_arrow_exactly(mysql_type: str, text: str) -> None:
    event = _canal_row(mysql_type, text)
    ct = event.column_types["c"]
    schema = iceberg_schema([("c", ct)])
    value = event.after["c"]
    assert to_text(ct, value) == text  # decoded exactly: it writes back as the same text
    out = arrow_table(schema, [event.after]).column("c").to_pylist()[0]
    assert out == _expected(mysql_type, value)


def test_ticdc_bare_decimal_is_not_mysql_default_decimal_10_0() -> None:
    """TiCDC's mysqlType drops parameters: a bare 'decimal' must not make a decimal(10, 0) column."""
    event = _canal_row("decimal", "123.4567")
    ct = event.column_types["c"]
    assert iceberg_type(ct) == DecimalType(38, 10)
    assert arrow_table(iceberg_schema([("c", ct)]), [event.after]).column("c").to_pylist() == [Decimal("123.4567")]


# ---------------------------------------------------------------- property: every protocol -> Iceberg -> Arrow


EXTREME_COLUMNS = [
    ("id", "bigint"), ("dec", "decimal(38,10)"), ("u", "bigint unsigned"), ("bits", "bit(64)"), ("t", "time(6)"),
    ("dtm", "datetime(6)"), ("ts", "timestamp(6)"), ("f", "float"), ("e", "enum('small','10')"),
]
EXTREME_SCHEMA = TableSchema("db", "tbl", tuple(Column(n, parse_mysql_type(t), n != "id") for n, t in EXTREME_COLUMNS), ("id",))
_EDGE_INTS = st.sampled_from([0, 1, (1 << 63) - 1, 1 << 63, (1 << 64) - 1]) | st.integers(0, (1 << 64) - 1)
EXTREME_VALUES = {
    "dec": _decimals(38, 10) | st.sampled_from([Decimal("9" * 28 + "." + "9" * 10), Decimal("-" + "9" * 28 + "." + "9" * 10)]),
    "u": _EDGE_INTS,
    "bits": _EDGE_INTS,
    "t": _TIMES,
    "dtm": _DATETIMES,
    "ts": st.datetimes(dt.datetime(1900, 1, 1), dt.datetime(2200, 1, 1), timezones=st.just(UTC)),
    "f": st.floats(width=32, allow_nan=False, allow_infinity=False),  # MySQL FLOAT holds neither
    "e": st.sampled_from(["small", "10"]),
}
# What a protocol cannot carry exactly, by design: TiCDC's Debezium writes DECIMAL as a double,
# DTS carries milliseconds, TIMESTAMP is a 32-bit epoch in TiDB/MySQL (1970..2038) for DTS.
LIMITS = {
    "debezium": {"dec"}, "debezium-mysql": {"dec"}, "cloudcanal-debezium": {"dec"},
    "dts-avro": {"t", "dtm", "ts", "f"},
}


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_every_protocol_carries_extremes_into_arrow(protocol: str, data) -> None:
    columns = [(n, t) for n, t in EXTREME_COLUMNS if n not in LIMITS.get(protocol, ())]
    schema = TableSchema("db", "tbl", tuple(c for c in EXTREME_SCHEMA.columns if c.name in dict(columns)), ("id",))
    row = {"id": 1, **{n: data.draw(EXTREME_VALUES[n], label=n) for n, _ in columns if n != "id"}}
    events = [
        DdlChange("db", "tbl", "CREATE TABLE ...", 10, SourcePosition("g", 0, 0), "CREATE", None, schema),
        RowChange(Op.INSERT, "db", "tbl", None, row, ("id",), schema.column_types, 11, SourcePosition("g", 0, 1), 1_700_000_000_000),
    ]
    encoder = get_encoder(protocol, **dict(PROTOCOLS[protocol].encoder_defaults))
    decoder = get_decoder(protocol)
    decoded = []
    for offset, r in enumerate(encoder.encode_all(events, 1)):
        decoded += decoder.decode(RawMessage(r.key, r.value, SourcePosition("g", 0, offset)))
    (change,) = [e for e in decoded if isinstance(e, RowChange)]
    # The table's DDL types the Iceberg columns; the decoded values are fitted to it as commit does.
    ddl_types = {c.name: str(c.type) for c in schema.columns}
    fitted = {n: fit_upstream_value(v, ddl_types[n]) for n, v in change.after.items()}
    table_schema = iceberg_schema([(c.name, c.type) for c in schema.columns])
    assert arrow_table(table_schema, [fitted]).to_pylist() == arrow_table(table_schema, [row]).to_pylist()
    # arrow_table fits a column's ENUM indexes and SET masks itself when given the upstream types.
    assert arrow_table(table_schema, [change.after], ddl_types).to_pylist() == arrow_table(table_schema, [row]).to_pylist()


# ---------------------------------------------------------------- whole columns without a call per value


@settings(max_examples=300, deadline=None)
@given(precision=st.integers(1, 38), data=st.data())
def test_ints_in_a_decimal_column_go_whole_as_they_would_one_by_one(precision: int, data: st.DataObject) -> None:
    """BIGINT UNSIGNED is decimal(20, 0): its ints go to Arrow as a column, which must scale them as
    ``to_iceberg_value`` does and refuse exactly what it refuses, with its error."""
    scale = data.draw(st.integers(0, precision))
    bound = 10 ** data.draw(st.integers(0, 40))
    values = data.draw(st.lists(st.one_of(st.none(), st.integers(-bound, bound)), min_size=1, max_size=8))
    schema = iceberg_schema([("c", parse_mysql_type(f"decimal({precision},{scale})"))])
    t = DecimalType(precision, scale)
    try:
        expected = [to_iceberg_value(t, v) for v in values]
    except UnsupportedValue as exc:
        with pytest.raises(UnsupportedValue, match=re.escape(f"column 'c' (decimal({precision}, {scale})): {exc}")):
            arrow_table(schema, [{"c": v} for v in values])
        return
    got = arrow_table(schema, [{"c": v} for v in values]).column("c").to_pylist()
    assert got == expected and [str(v) for v in got] == [str(v) for v in expected]


def test_a_column_goes_to_arrow_whole_only_when_every_value_would_pass_unchanged() -> None:
    schema = iceberg_schema([("d", parse_mysql_type("decimal(5,2)")), ("t", parse_mysql_type("datetime(6)"))])
    rows = [{"d": Decimal("999.99"), "t": dt.datetime(2024, 1, 1)}, {"d": None, "t": None}, {"d": Decimal("1E+2"), "t": None}]
    assert arrow_table(schema, rows).select(["d", "t"]).to_pylist() == [
        {"d": Decimal("999.99"), "t": dt.datetime(2024, 1, 1)}, {"d": None, "t": None}, {"d": Decimal("100.00"), "t": None}]
    # One value that does not fit fails the column with the error naming it, as one by one.
    with pytest.raises(UnsupportedValue, match=r"column 'd' \(decimal\(5, 2\)\): 1000 does not fit decimal\(5, 2\)"):
        arrow_table(schema, [*rows, {"d": Decimal("1000"), "t": None}])
    with pytest.raises(UnsupportedValue, match=r"column 'd' .*0\.001 does not fit"):
        arrow_table(schema, [*rows, {"d": Decimal("0.001"), "t": None}])
    # An aware datetime among naive ones is refused, never shifted to UTC.
    with pytest.raises(UnsupportedValue, match=r"column 't' .*has a time zone"):
        arrow_table(schema, [*rows, {"d": None, "t": dt.datetime(2024, 1, 1, 8, tzinfo=dt.timezone(dt.timedelta(hours=8)))}])
