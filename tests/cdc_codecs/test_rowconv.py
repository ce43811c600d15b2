"""The compiled row converters give exactly what the per-column text converters give."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any, Callable

from hypothesis import example, given, settings
from hypothesis import strategies as st

from cdc_codecs.rowconv import row_converter
from cdc_codecs.types import UTC, ColumnType, ColumnValueError, parse_mysql_type, text_converter

MYSQL_TYPES = [
    "tinyint", "tinyint unsigned", "smallint", "int", "int unsigned", "bigint", "bigint unsigned", "year", "bit(8)",
    "decimal(10,2)", "decimal(65,30)", "float", "double", "char(4)", "varchar(10)", "text", "json",
    "enum('a','b')", "set('a','b')", "date", "datetime", "datetime(6)", "timestamp", "timestamp(3)", "time",
    "binary(4)", "varbinary(8)", "blob", "geometry", "boolean",
]
ZONES = [UTC, dt.timezone(dt.timedelta(hours=8))]

# Text shaped like every kind, well-formed or nearly: the compiled path must hand the
# nearly-well-formed ones to the column's converter, which decides.
TEXTS = st.one_of(
    st.integers(-(2**65), 2**65).map(str),
    st.sampled_from([
        "", " 12 ", "1_000", "+5", "-0", "1.5", "1e3", "NaN", "-Infinity", "sNaN", "0.000", "abc", "1,2", "3",
        "0000-00-00", "0000-00-00 00:00:00", "2024-00-10 00:00:00", "2024-01-00 10:00:00", "20241001 12:00:00.000",
        "2024-W01-1 00:00:00", "2024-01-02", "2024-01-02T03:04:05", "2024-01-02 03:04:05.123456+05:00",
        "2024-01-02 03:04:05.1234567", "9999-12-31 23:59:59.999999", "0001-01-01 00:00:00", "838:59:59",
        "-12:00:00.5", "\u00ff\u0000\u00e9", "\u0100", "李雷", "{\"a\": 1}",
    ]),
    st.datetimes(min_value=dt.datetime(1, 1, 1), max_value=dt.datetime(9999, 12, 31)).map(lambda d: d.isoformat(sep=" ")),
    st.dates().map(str),
    st.decimals(allow_nan=True, allow_infinity=True).map(str),
    st.text(max_size=12),
)
VALUES = st.one_of(st.none(), TEXTS, st.integers(-(2**65), 2**65), st.floats(), st.booleans(), st.just([1]))
NAMES = st.one_of(st.sampled_from(["id", "x0", "y0", "row", "converters", "n0", "') or __import__('os') #", "a b"]), st.text(max_size=6))


def outcome(fn: Callable[[], dict[str, Any]]) -> Any:
    """A comparable result: values with their exact types, or the exception raised."""
    try:
        row = fn()
    except ColumnValueError as exc:
        return ("ColumnValueError", str(exc))
    except Exception as exc:  # noqa: BLE001 - any other exception must match too
        return (type(exc).__name__,)
    return sorted((name, type(v).__name__, repr(v)) for name, v in row.items())


@st.composite
def schemas_and_rows(draw: Any) -> tuple[dict[str, ColumnType], dict[str, Any], dt.tzinfo]:
    names = draw(st.lists(NAMES, min_size=1, max_size=6, unique=True))
    types = {n: parse_mysql_type(draw(st.sampled_from(MYSQL_TYPES))) for n in names}
    shape = draw(st.sampled_from(["exact", "exact", "exact", "subset", "extra"]))
    columns = list(names)
    if shape == "subset":
        columns = draw(st.lists(st.sampled_from(names), unique=True))
    elif shape == "extra":
        columns.append(draw(NAMES.filter(lambda n: n not in types)))
    columns = draw(st.permutations(columns))
    return types, {c: draw(VALUES) for c in columns}, draw(st.sampled_from(ZONES))


@settings(max_examples=300)
@given(schemas_and_rows())
@example(({"d": parse_mysql_type("datetime")}, {"d": "20241001 12:00:00.000"}, UTC))  # a zero date to MySQL's eyes
@example(({"t": parse_mysql_type("timestamp")}, {"t": "2024-01-02 03:04:05"}, ZONES[1]))
@example(({"n": parse_mysql_type("decimal(10,2)")}, {"n": "NaN"}, UTC))
@example(({"b": parse_mysql_type("bigint unsigned")}, {"b": str(2**64)}, UTC))
def test_compiled_row_converter_matches_the_column_converters(case: tuple[dict[str, ColumnType], dict[str, Any], dt.tzinfo]) -> None:
    types, row, tz = case
    per_column = {n: text_converter(t, tz) for n, t in types.items()}
    expected = outcome(lambda: {n: per_column[n](v) for n, v in row.items()})
    assert outcome(lambda: row_converter(types, tz).convert(row)) == expected
    assert outcome(lambda: row_converter(types, tz, compiled=False).convert(row)) == expected


def test_the_usual_row_is_typed_by_the_compiled_path() -> None:
    types = {n: parse_mysql_type(t) for n, t in [("id", "bigint"), ("amount", "decimal(12,2)"), ("at", "datetime(6)"),
                                                  ("ts", "timestamp"), ("raw", "varbinary(4)"), ("day", "date")]}
    convert = row_converter(types).convert
    row = convert({"id": "7", "amount": "1.50", "at": "2024-01-02 03:04:05.000006", "ts": "2024-01-02 03:04:05",
                   "raw": "\u00ff\u0000", "day": "2024-02-29"})
    assert row == {"id": 7, "amount": Decimal("1.50"), "at": dt.datetime(2024, 1, 2, 3, 4, 5, 6),
                   "ts": dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC), "raw": b"\xff\x00", "day": dt.date(2024, 2, 29)}
    assert convert({"id": "7"}) == {"id": 7}  # another column set: the per-column path
    assert convert({"day": "0000-00-00"}) == {"day": None}


def test_overridden_columns_use_their_own_converter() -> None:
    seen: list[Any] = []
    conv = row_converter({"id": parse_mysql_type("int"), "raw": parse_mysql_type("blob")}, UTC,
                         {"raw": lambda v: seen.append(v) or b"own"})
    assert conv.convert({"id": "1", "raw": "AAE="}) == {"id": 1, "raw": b"own"}
    assert seen == ["AAE="]
    assert conv.converters["raw"]("x") == b"own"


def test_a_table_without_columns() -> None:
    conv = row_converter({})
    assert conv.convert({}) == {}
    try:
        conv.convert({"a": "1"})
    except KeyError:
        pass
    else:
        raise AssertionError("an unknown column must raise KeyError")


def test_a_decoder_past_its_cache_of_table_schemas_still_decodes() -> None:
    from cdc_codecs import RawMessage, SourcePosition, get_decoder
    from cdc_codecs.canal_json import CanalJsonDecoder

    decoder = get_decoder("canal-json")
    assert isinstance(decoder, CanalJsonDecoder)
    decoder._converters.update({(("c", str(i)),): ({}, row_converter({})) for i in range(1024)})  # full
    value = b'{"database":"d","table":"t","isDdl":false,"type":"INSERT","mysqlType":{"id":"int"},"data":[{"id":"5"}],"_tidb":{"commitTs":1}}'
    [event] = decoder.decode(RawMessage(None, value, SourcePosition("t", 0, 0)))
    assert event.after == {"id": 5}
    assert decoder._current[("d", "t")][2][1].convert.__name__ == "per_column"  # not compiled: it could not be kept
