"""The rewrite's images read column-wise (``image_columns``) give the table the one-by-one path gives.

``upsert._rows`` reads a net change's images column-wise where it can and leaves the rest to
``upsert._one_by_one`` (``decode_effect`` and ``schema_map.arrow_table``, image by image): both
must give the same rows, or both fail with the same typed error, for every column type at its
extremes, values of any other type, other shapes (key-only, reordered), and corrupt bytes.
"""

from __future__ import annotations

import datetime as dt
import math
import struct
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.table.metadata import new_table_metadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER

from cdc_codecs import Op
from cdc_codecs.types import EnumIndex, SetMask
from spark.decode.effect import CorruptChangeValue, encode_effect, image_encoder
from spark.write.image_columns import read_images
from spark.tables.schema_map import UnsupportedValue, iceberg_schema, metadata_columns, metadata_property
from spark.write import upsert
from spark.write.target import TableTarget
from spark.write.upsert import UpsertTarget

from ..mysql_values import COLUMN_TYPES, values
from ..decode.test_effect import VALUES

_COLUMNS = sorted(COLUMN_TYPES)


def _target(columns: dict[str, Any], renames: dict[str, str | None] | None = None) -> UpsertTarget:
    schema = iceberg_schema(list(columns.items()))
    metadata = new_table_metadata(schema, UNPARTITIONED_PARTITION_SPEC, UNSORTED_SORT_ORDER, "file:///nowhere",
                                  metadata_property(schema))
    upstream = {name: ct.mysql_type if not ct.elements else _DDL.get(name, ct.mysql_type) for name, ct in columns.items()}
    return UpsertTarget(TableTarget.from_metadata("db.t", metadata, {}), (), (next(iter(columns)),),
                        upstream_types=upstream, renames=renames or {})


_DDL = {"c_enum": "enum('a','b c','É','🦆')", "c_set": "set('a','b','é','🦆')", "c_decimal_65_30": "decimal(65,30)"}


def _net(blobs: list[bytes], deletes: list[bool]) -> pa.Table:
    n = len(blobs)
    return pa.table({
        "topic": pa.array(["t"] * n), "partition": pa.array([0] * n, pa.int32()), "offset": pa.array(range(n), pa.int64()),
        "deletes": pa.array(deletes), "change": pa.array(blobs, pa.binary()), "ts": pa.array(range(100, 100 + n), pa.int64()),
    })


def _canonical(table: pa.Table) -> list[tuple]:
    """Rows comparable exactly: a float by its bits (-0.0 is not 0.0, NaN is NaN)."""
    def one(v: Any) -> Any:
        return ("float", struct.pack("<d", v)) if isinstance(v, float) else v
    return [tuple(one(v) for v in row.values()) for row in table.to_pylist()]


def _outcome(call: Any) -> Any:
    try:
        return call()
    except (CorruptChangeValue, UnsupportedValue) as exc:
        return type(exc)


def _assert_same(net: pa.Table, target: UpsertTarget) -> pa.Table | type:
    md = target.table.metadata()
    names = metadata_columns(md.schema(), md.properties)
    one_by_one = _outcome(lambda: upsert._one_by_one(net, np.arange(net.num_rows), target, names))
    rows = _outcome(lambda: upsert._rows(net, target)[0])
    if isinstance(one_by_one, type) or isinstance(rows, type):
        assert rows == one_by_one
    else:
        assert rows.schema == one_by_one.schema
        assert _canonical(rows) == _canonical(one_by_one)
    return rows


@st.composite
def _net_changes(draw: st.DrawFn) -> tuple[pa.Table, UpsertTarget]:
    """A table of a few columns of any type and a net change of its images: mostly its full rows
    (by the writer's compiled encoder), and now and then key-only or reordered images, values of
    any other type, and bytes flipped, cut or added."""
    names = draw(st.lists(st.sampled_from(_COLUMNS), min_size=1, max_size=8, unique=True))
    columns = {n: COLUMN_TYPES[n] for n in names}
    encode = image_encoder(columns)
    blobs, deletes = [], []
    for _ in range(draw(st.integers(1, 25))):
        odd = draw(st.integers(0, 19)) == 0
        image = {n: draw(st.one_of(st.none(), values(n), VALUES) if odd else st.one_of(st.none(), values(n))) for n in names}
        shape = draw(st.integers(0, 9))
        if shape == 0:
            image = {names[0]: image[names[0]]}  # a deleted key's image
        elif shape == 1:
            image = dict(reversed(list(image.items())))
        op = draw(st.sampled_from(list(Op)))
        blob = encode(op, image)
        if draw(st.integers(0, 14)) == 0:
            at = draw(st.integers(0, len(blob)))
            cut = draw(st.sampled_from(["flip", "cut", "add"]))
            if cut == "flip" and at < len(blob):
                blob = blob[:at] + bytes([blob[at] ^ draw(st.integers(1, 255))]) + blob[at + 1:]
            elif cut == "cut":
                blob = blob[:at]
            else:
                blob = blob[:at] + bytes([draw(st.integers(0, 255))]) + blob[at:]
        blobs.append(blob)
        deletes.append(shape == 0 or draw(st.booleans()))
    return _net(blobs, deletes), _target(columns)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(_net_changes())
def test_the_images_read_column_wise_are_the_rows_read_one_by_one(case: tuple[pa.Table, UpsertTarget]) -> None:
    _assert_same(*case)


def _images(columns: dict[str, Any], rows: list[dict], op: Op = Op.INSERT) -> list[bytes]:
    encode = image_encoder(columns)
    return [encode(op, row) for row in rows]


_EXTREMES: list[tuple[str, list[Any]]] = [
    ("c_tinyint", [-128, 127, 0]), ("c_int", [-(2**31), 2**31 - 1]), ("c_bigint", [-(2**63), 2**63 - 1, -1, 0, 127, 128, -33]),
    ("c_bigint_u", [0, 2**64 - 1, 2**63, 2**63 - 1]), ("c_bool", [0, 1]),
    ("c_decimal_38_10", [Decimal("9" * 28 + "." + "9" * 10), Decimal("-0.0000000001"), Decimal("0E-10"), Decimal("1.5000000000"),
                         Decimal("1E+3"), Decimal("1.23E-8"), Decimal("-0")]),
    ("c_decimal_10_0", [Decimal("9999999999"), Decimal("-9999999999"), Decimal("0")]),
    ("c_float", [3.4028234663852886e38, -1.401298464324817e-45, -0.0]),
    ("c_double", [1.7976931348623157e308, 5e-324, -0.0, 0.1]),
    ("c_date", [dt.date(1, 1, 1), dt.date(9999, 12, 31), dt.date(2024, 2, 29), dt.date(1969, 12, 31)]),
    ("c_datetime_6", [dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999), dt.datetime(1969, 12, 31, 23, 59, 59, 1)]),
    ("c_timestamp_6", [dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=dt.UTC), dt.datetime(2038, 1, 19, 3, 14, 7, 999999, tzinfo=dt.UTC)]),
    ("c_year", [1901, 2155]), ("c_varchar", ["", "é🦆\u2028", "x" * 70_000]), ("c_varbinary", [b"", b"\x00\xff", b"y" * 70_000]),
    ("c_json", ['{"a": 1}']), ("c_enum", ["b c"]), ("c_set", ["a,é"]), ("c_bit_64", [0, 2**64 - 1]),
]


@pytest.mark.parametrize(("column", "extremes"), _EXTREMES, ids=[c for c, _ in _EXTREMES])
def test_every_column_type_at_its_extremes_is_read_column_wise(column: str, extremes: list[Any]) -> None:
    columns = {"k_bigint_u": COLUMN_TYPES["k_bigint_u"], column: COLUMN_TYPES[column]}
    rows = [{"k_bigint_u": i, column: v} for i, v in enumerate([*extremes, None])]
    target = _target(columns)
    net = _net(_images(columns, rows), [False] * len(rows))
    schema = target.table.metadata().schema()
    read = read_images(net.column("change"), [(f.name, f.field_type) for f in schema.fields], list(columns))
    assert read is not None and read.read.all()
    _assert_same(net, target)


@pytest.mark.parametrize(("column", "value"), [
    ("c_bigint", True),  # a bool in a LONG column: to_iceberg_value makes it 1
    ("c_bigint", 2**64 - 1),  # beyond LONG: refused (one by one)
    ("c_int", 2**31),  # beyond INT: refused
    ("c_datetime_6", dt.datetime(2024, 1, 1, tzinfo=dt.UTC)),  # an aware value in a DATETIME column: refused
    ("c_timestamp_6", dt.datetime(2024, 1, 1)),  # a naive one in a TIMESTAMP column
    ("c_enum", EnumIndex("2")), ("c_set", SetMask("3")),  # fitted to the DDL's members
    ("c_decimal_38_10", Decimal("1E+40")), ("c_decimal_38_10", Decimal("1E-50")), ("c_decimal_38_10", Decimal("NaN")),
    ("c_decimal_38_10", Decimal("1." + "0" * 40)),  # 41 digits, 1 at the column's scale: Arrow's parse refuses it
    ("c_decimal_38_10", Decimal("0.1" + "0" * 38)),  # 40 digits, 0.1 at the column's scale
    ("c_decimal_65_30", Decimal("1")),  # DECIMAL(65, 30) is a string column, the digits at the column's scale
    ("c_float", 1e300),  # beyond FLOAT: refused
    ("c_double", 7),  # an int in a DOUBLE column
    ("c_varchar", b"bytes"), ("c_varbinary", "text"), ("c_date", dt.datetime(2024, 1, 1)),
    ("c_time_6", dt.timedelta(hours=-838)),  # TIME is a LONG of microseconds
])
def test_a_value_its_column_does_not_take_as_it_is_is_read_one_by_one_and_alone(column: str, value: Any) -> None:
    columns = {"k_bigint_u": COLUMN_TYPES["k_bigint_u"], column: COLUMN_TYPES[column]}
    rows = [{"k_bigint_u": 1, column: None}, {"k_bigint_u": 2, column: value}, {"k_bigint_u": 3, column: None}]
    target = _target(columns)
    net = _net(_images(columns, rows), [False, False, False])
    schema = target.table.metadata().schema()
    read = read_images(net.column("change"), [(f.name, f.field_type) for f in schema.fields], list(columns))
    assert read is not None and read.read.tolist() == [True, False, True]  # the other images stay column-wise
    _assert_same(net, target)


def test_a_decimal_arrow_refuses_for_its_column_leaves_every_image_to_the_one_by_one_path() -> None:
    columns = {"k_bigint_u": COLUMN_TYPES["k_bigint_u"], "c_decimal_10_0": COLUMN_TYPES["c_decimal_10_0"]}
    rows = [{"k_bigint_u": 1, "c_decimal_10_0": Decimal(1)}, {"k_bigint_u": 2, "c_decimal_10_0": Decimal("1.5")}]
    target = _target(columns)
    net = _net(_images(columns, rows), [False, False])
    schema = target.table.metadata().schema()
    assert read_images(net.column("change"), [(f.name, f.field_type) for f in schema.fields], list(columns)) is None
    assert _assert_same(net, target) is UnsupportedValue


def test_key_only_images_and_reordered_ones_are_read_as_shapes_of_their_own_in_the_change_order() -> None:
    columns = {"id": COLUMN_TYPES["id"], "name": COLUMN_TYPES["name"], "amount": COLUMN_TYPES["amount"]}
    encode = image_encoder(columns)
    blobs = [encode(Op.DELETE, {"id": 1}), encode(Op.INSERT, {"id": 2, "name": "b", "amount": Decimal("1.00")}),
             encode(Op.DELETE, {"id": 3}), encode(Op.UPDATE, {"amount": None, "name": "d", "id": 4}),
             encode(Op.UPDATE, {"id": 5, "name": "e", "amount": Decimal("-2.50")})]
    rows = _assert_same(_net(blobs, [True, False, True, False, False]), _target(columns))
    assert isinstance(rows, pa.Table)
    assert rows.column("id").to_pylist() == [1, 2, 3, 4, 5]
    assert rows.column("_tidelake_commit_ts").to_pylist() == [None, 101, None, 103, 104]
    assert rows.column("_tidelake_op").to_pylist() == [None, "insert", None, "update", "update"]
    assert rows.column("amount").to_pylist() == [None, Decimal("1.00"), None, None, Decimal("-2.50")]


def test_a_run_that_renames_a_column_reads_its_images_one_by_one() -> None:
    columns = {"id": COLUMN_TYPES["id"], "label": COLUMN_TYPES["name"]}
    blobs = [encode_effect(Op.INSERT, {"id": 1, "name": "a"})]
    rows = _assert_same(_net(blobs, [False]), _target(columns, renames={"name": "label"}))
    assert isinstance(rows, pa.Table) and rows.column("label").to_pylist() == ["a"]


@pytest.mark.parametrize("blob", [
    b"\x92\xa6insert\x82\xa2id\x01\xa4name\xa1a\x00",  # a trailing byte
    b"\x92\xa6insert\x82\xa2id\x01\xa4name\xa2\xff\xfe",  # not UTF-8
    b"\x92\xa6insert\x82\xa2id\x01\xa4name\xa5a",  # cut short
    b"\x92\xa6upsert\x82\xa2id\x01\xa4name\xa1a",  # no such operation
    b"\x92\xa6insert\xde\x00\x02\xa2id\x01\xa4name\xa1a",  # a map16 of two entries: valid, not canonical
    b"\x92\xa6insert\x82\xa2id\x01\xa4name\xd9\x01a",  # a str8 of one byte: valid, not canonical
    b"\x92\xa6insert\x82\xa2id\xd3\x00\x00\x00\x00\x00\x00\x00\x01\xa4name\xa1a",  # an int64 of 1: valid, not canonical
])
def test_odd_or_corrupt_bytes_are_what_the_one_by_one_path_makes_of_them(blob: bytes) -> None:
    columns = {"id": COLUMN_TYPES["id"], "name": COLUMN_TYPES["name"]}
    good = image_encoder(columns)(Op.INSERT, {"id": 0, "name": "z"})
    _assert_same(_net([good, blob, good], [False, False, False]), _target(columns))


def test_datetime_fields_out_of_range_are_refused_as_the_one_by_one_path_refuses_them() -> None:
    columns = {"id": COLUMN_TYPES["id"], "c_datetime_6": COLUMN_TYPES["c_datetime_6"]}
    encode = image_encoder(columns)
    good = encode(Op.INSERT, {"id": 0, "c_datetime_6": dt.datetime(2024, 2, 29, 23, 59, 59, 999999)})
    layout = good.index(b"\xc7\x0b\x02") + 3
    for field, value in [((0, 1), b"\x00\x00"), ((0, 1), (10_000).to_bytes(2, "little")), ((2,), b"\x0d"), ((2,), b"\x00"),
                         ((3,), b"\x1e"), ((3,), b"\x00"), ((4,), b"\x18"), ((5,), b"\x3c"), ((6,), b"\x3c")]:
        bad = bytearray(good)
        bad[layout + field[0]: layout + field[-1] + 1] = value
        assert _assert_same(_net([good, bytes(bad)], [False, False]), _target(columns)) is CorruptChangeValue
    bad = bytearray(good)
    bad[layout + 7: layout + 11] = (1_000_000).to_bytes(4, "little")
    assert _assert_same(_net([good, bytes(bad)], [False, False]), _target(columns)) is CorruptChangeValue


def test_floats_keep_their_bits() -> None:
    columns = {"id": COLUMN_TYPES["id"], "c_double": COLUMN_TYPES["c_double"], "c_float": COLUMN_TYPES["c_float"]}
    rows = [{"id": 1, "c_double": -0.0, "c_float": -0.0}, {"id": 2, "c_double": math.inf, "c_float": -math.inf},
            {"id": 3, "c_double": 1 / 3, "c_float": 1 / 3}]
    _assert_same(_net(_images(columns, rows), [False] * 3), _target(columns))


@pytest.mark.parametrize("count", [15, 16, 40])
def test_wide_tables_and_long_column_names_are_read_column_wise(count: int) -> None:
    # 16 columns and more: a map16 header; names of 31, 32, 255, 256 and 70,000 bytes: fixstr, str8, str16, str32.
    lengths = [1, 31, 32, 255, 256, 70_000]
    names = [f"c{i}_" + "é" * ((lengths[i % len(lengths)] - len(f"c{i}_")) // 2) for i in range(count)]
    kinds = ["id", "name", "amount", "updated_at", "created_at", "payload", "big", "qty"]
    columns = {name: COLUMN_TYPES[kinds[i % len(kinds)]] for i, name in enumerate(names)}
    samples = {"id": 7, "name": "x" * 300, "amount": Decimal("-1.25"), "updated_at": dt.datetime(2024, 1, 2, 3, 4, 5, 6),
               "created_at": dt.datetime(2024, 1, 2, tzinfo=dt.UTC), "payload": b"\x00" * 40, "big": 2**64 - 1, "qty": -5}
    rows = [{name: samples[kinds[i % len(kinds)]] if r else None for i, name in enumerate(names)} for r in range(3)]
    target = _target(columns)
    net = _net(_images(columns, rows), [False] * 3)
    schema = target.table.metadata().schema()
    read = read_images(net.column("change"), [(f.name, f.field_type) for f in schema.fields], names)
    assert read is not None and read.read.all()
    _assert_same(net, target)
