"""BINARY(n) values through the pipeline as MySQL holds them: padded with 0x00 to n bytes.

A binlog row event drops a BINARY(n) value's trailing zero bytes and Canal passes that on (the
conformance capture's BINARY(10) 'bytes' is 5 bytes); MySQL holds and returns the value padded
(8.0 manual, "The BINARY and VARBINARY Types"). A UUID kept in BINARY(16) ends with a zero byte
once in 256: before decoder version 4 such a key read 15 bytes in the lake, silently.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from cdc_codecs import ProducerRecord
from spark.query.read import read_table

from .archives import make_config
from .test_row_schema_fit import _applied

pytestmark = pytest.mark.slow  # whole intervals, Spark or services: make test-fast leaves it out (docs/testing.md)


def _canal(kind: str, es: int, data: dict | None, sql: str = "", old: dict | None = None) -> ProducerRecord:
    doc = {"id": 0, "database": "shop", "table": "u", "pkNames": None if data is None else ["id"], "isDdl": data is None,
           "type": kind, "es": es, "ts": es + 900, "sql": sql,
           "sqlType": None if data is None else {"id": 2004, "tag": 2004, "note": -3},
           "mysqlType": None if data is None else {"id": "binary(4)", "tag": "binary(3)", "note": "varbinary(8)"},
           "data": None if data is None else [data], "old": None if old is None else [old]}
    return ProducerRecord(0, None, orjson.dumps(doc))


def test_binary_n_keys_and_values_sent_without_trailing_zeros_read_padded_and_match_their_row(tmp_path: Path) -> None:
    create = "CREATE TABLE shop.u (id binary(4) primary key, tag binary(3), note varbinary(8))"
    first = [_canal("CREATE", 1000, None, create),
             # Canal's bytes are ISO-8859-1 text; the binlog dropped each value's trailing zero bytes
             _canal("INSERT", 1001, {"id": "\x01", "tag": "a", "note": "n\x00"}),
             _canal("INSERT", 1001, {"id": "\x02\x00\x05", "tag": "", "note": ""}),
             _canal("INSERT", 1500, {"id": "\x07\x07\x07\x07", "tag": "abc", "note": None})]  # its tick lets W pass 1001
    second = [_canal("UPDATE", 2000, {"id": "\x01", "tag": "b", "note": "m"}, old={"tag": "a", "note": "n\x00"}),
              _canal("DELETE", 2000, {"id": "\x02\x00\x05", "tag": "", "note": ""}),
              _canal("INSERT", 3000, {"id": "\x09", "tag": "z", "note": None})]
    config, results = _applied(make_config(tmp_path, "canal-json", {"enable_tidb_extension": "false"}), 1, [first, second])
    rows = sorted(read_table(config, "shop", "u", results[0].watermark).to_pylist(), key=lambda r: r["id"])
    assert rows == [{"id": b"\x01\0\0\0", "tag": b"a\0\0", "note": b"n\0"}, {"id": b"\x02\0\x05\0", "tag": b"\0\0\0", "note": b""}]
    rows = read_table(config, "shop", "u", results[1].watermark).to_pylist()
    # The UPDATE and the DELETE found their rows (their keys padded as the INSERTs' were).
    assert sorted(rows, key=lambda r: r["id"]) == [{"id": b"\x01\0\0\0", "tag": b"b\0\0", "note": b"m"},
                                                   {"id": b"\x07\x07\x07\x07", "tag": b"abc", "note": None}]
