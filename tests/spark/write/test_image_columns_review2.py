"""A third reviewer's cases for the column-wise image reader (``upsert._rows``) against the one-by-one
path, on images as the decoder really stores them: TiCDC's Canal-JSON texts of every MySQL type at its
edges, decoded with TiCDC's bare ``mysqlType`` (``decimal`` without precision, ``enum``/``set`` sent as
index/mask, ``bit``, ``time``), written by the change log's image encoder, and read into a table whose
columns are the DDL's types (decimal(10,2), decimal(65,30) as a string, enum members, bit(64) as
decimal(20, 0), ...). No divergence was found; kept as regressions for these shapes.
"""

from __future__ import annotations

import random

import orjson
import pytest

from cdc_codecs import Op, RawMessage, RowChange, SourcePosition
from cdc_codecs.canal_json import CanalJsonDecoder
from cdc_codecs.types import parse_mysql_type
from spark.decode.effect import image_encoder
from spark.write import upsert
from spark.write.image_columns import read_images

from .test_image_columns import _assert_same, _net, _target

# column -> (the table's DDL type, the mysqlType TiCDC sends without content-compatible, texts TiDB writes)
COLUMNS: dict[str, tuple[str, str, list[str]]] = {
    "c_tiny": ("tinyint", "tinyint", ["-128", "127", "0"]),
    "c_bool": ("tinyint(1)", "tinyint", ["0", "1"]),
    "c_int_u": ("int unsigned", "int unsigned", ["4294967295", "0"]),
    "c_big": ("bigint", "bigint", ["-9223372036854775808", "9223372036854775807"]),
    "c_d10_2": ("decimal(10,2)", "decimal", ["1.50", "-0.00", "0.00", "99999999.99", "-99999999.99", "0.01"]),
    "c_d38_10": ("decimal(38,10)", "decimal", ["0.0000000000", "0.0000000001", "1.0000000000", "0.0000001000",
                                               "-9999999999999999999999999999.9999999999"]),
    "c_d65": ("decimal(65,30)", "decimal", ["0.000000000000000000000000000000", "1.000000000000000000000000000000",
                                          "-12345678901234567890123456789012345.123456789012345678901234567890"]),
    "c_d10_0": ("decimal(10,0)", "decimal", ["0", "-9999999999", "9999999999"]),
    "c_float": ("float", "float", ["3.4028235e+38", "340282350000000000000000000000000000000", "-1.4e-45", "-0", "0.1"]),
    "c_double": ("double", "double", ["1.7976931348623157e+308", "5e-324", "-0", "0.1", "1e+16"]),
    "c_date": ("date", "date", ["0000-00-00", "1000-01-01", "9999-12-31", "0001-01-01", "2024-02-29", "2024-00-00"]),
    "c_dt": ("datetime", "datetime", ["0000-00-00 00:00:00", "1000-01-01 00:00:00", "9999-12-31 23:59:59",
                                      "0001-01-01 00:00:00"]),
    "c_dt6": ("datetime(6)", "datetime", ["9999-12-31 23:59:59.999999", "2024-02-29 12:00:00.000001",
                                          "1969-12-31 23:59:59.999999", "2024-01-01 00:00:00.5"]),
    "c_ts": ("timestamp(3)", "timestamp", ["1970-01-01 00:00:01.000", "2038-01-19 03:14:07.999", "0000-00-00 00:00:00"]),
    "c_time": ("time(6)", "time", ["838:59:59.000000", "-838:59:59.000000", "00:00:00.000001", "-00:00:00.000001"]),
    "c_year": ("year", "year", ["1901", "2155", "0", "0000"]),
    "c_char": ("char(4)", "char", ["", "ab", "é🦆"]),
    "c_vc": ("varchar(100)", "varchar", ["", "\x00", "\U0001f986" * 3, "\u2028"]),
    "c_text": ("text", "text", ["x" * 300]),
    "c_bin": ("binary(4)", "binary", ["\x00\x00\x00\x00", "\xff\xfe\x00\x01"]),
    "c_vb": ("varbinary(300)", "varbinary", ["", "".join(map(chr, range(100)))]),
    "c_blob": ("blob", "blob", ["".join(map(chr, range(256)))]),
    "c_enum": ("enum('a','b','c')", "enum", ["1", "3", "0"]),
    "c_set": ("set('x','y','z')", "set", ["0", "7", "5"]),
    "c_bit64": ("bit(64)", "bit", ["18446744073709551615", "0", "9223372036854775808"]),
    "c_bit1": ("bit(1)", "bit", ["0", "1"]),
    "c_json": ("json", "json", ['{"a": 1}', "null", '"x"']),
}


def _images(seed: int, n: int, columns: list[str]) -> tuple[list[bytes], list[bool]]:
    """``n`` decoded TiCDC messages' change-log images (some deleted keys' images)."""
    rng = random.Random(seed)
    decoder = CanalJsonDecoder(enable_tidb_extension=True)
    blobs, deletes = [], []
    for i in range(n):
        row = {c: str(i) if c == "id" else rng.choice(COLUMNS[c][2]) if rng.random() < 0.9 else None for c in columns}
        op = rng.choice(["INSERT", "UPDATE"])
        doc = {"database": "d", "table": "t", "pkNames": ["id"], "isDdl": False, "type": op, "es": 1,
               "mysqlType": {c: "bigint unsigned" if c == "id" else COLUMNS[c][1] for c in columns},
               "data": [row], "old": [row] if op == "UPDATE" else None, "_tidb": {"commitTs": 1000 + i}}
        (change,) = decoder.decode(RawMessage(None, orjson.dumps(doc), SourcePosition("x", 0, i)))
        assert isinstance(change, RowChange)
        encode = image_encoder(change.column_types)
        deleted = rng.random() < 0.15
        blobs.append(encode(Op.DELETE, {"id": change.after["id"]}) if deleted else encode(change.op, change.after))
        deletes.append(deleted)
    return blobs, deletes


def _table(columns: list[str]) -> upsert.UpsertTarget:
    return _target({c: parse_mysql_type("bigint unsigned" if c == "id" else COLUMNS[c][0]) for c in columns})


@pytest.mark.parametrize("column", sorted(COLUMNS))
def test_decoded_ticdc_values_of_each_type_read_column_wise_as_one_by_one(column: str) -> None:
    for seed in range(3):
        blobs, deletes = _images(seed, 40, ["id", column])
        _assert_same(_net(blobs, deletes), _table(["id", column]))


@pytest.mark.parametrize("seed", range(40))
def test_decoded_ticdc_rows_of_several_types_read_column_wise_as_one_by_one(seed: int) -> None:
    rng = random.Random(seed)
    columns = ["id", *rng.sample(sorted(COLUMNS), rng.randint(1, 5))]
    blobs, deletes = _images(seed, 30, columns)
    _assert_same(_net(blobs, deletes), _table(columns))


def test_the_types_the_column_wise_reader_takes_are_read_column_wise() -> None:
    """The fast kinds' decoded values (zero dates' NULLs too) are read column-wise, not all left one by one."""
    columns = ["id", "c_big", "c_d10_2", "c_d38_10", "c_double", "c_dt6", "c_ts", "c_vc", "c_blob", "c_bit64", "c_date"]
    blobs, deletes = _images(7, 60, columns)
    net = _net(blobs, deletes)
    schema = _table(columns).table.metadata().schema()
    first = next(i for i, d in enumerate(deletes) if not d)
    read = read_images(net.column("change").slice(first), [(f.name, f.field_type) for f in schema.fields], columns)
    assert read is not None and read.read.sum() > 20
    _assert_same(net, _table(columns))
