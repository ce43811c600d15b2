"""The column-wise Canal-JSON path (spark/decode/batch.py) against the per-change path.

Each test writes raw segments, decodes them twice -- ``_decode_segment(..., column_wise=False)``,
every message through the decoder, and the default, TiCDC Canal-JSON rows column-wise -- and
asserts the same change-log file, byte for byte, and the same side output (errors, marks,
schemas, runs). Over every protocol, every MySQL type at its extremes (tests/spark/mysql_values.py),
texts at the edge of each kind's fast case, texts other JSON readers read otherwise than orjson,
and the fuzzer's mutations (tests/cdc_codecs/test_fuzz.py).
"""

from __future__ import annotations

import datetime as dt
import json
import random
import zlib
from decimal import Decimal
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import orjson
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc_codecs import PROTOCOLS, Column, Op, RowChange, SourcePosition, TableSchema, Watermark, get_encoder
from cdc_codecs.types import TypeKind
from spark.archive.storage import open_storage
from spark.decode import batch as batch_module
from spark.decode import changelog, text_shapes
from spark.decode.side_output import DecoderState
from spark.demo.workload import Workload, WorkloadSpec, tso
from tests.cdc_codecs import test_fuzz
from tests.spark.archives import make_config
from tests.spark.decode.test_changelog import TOPIC, encode, paths, write_segments
from tests.spark.mysql_values import COLUMN_TYPES, KEY_COLUMNS, OTHER_COLUMNS, VALUE_COLUMNS, rows, values

pytestmark = pytest.mark.slow  # whole intervals, Spark or services: make test-fast leaves it out (docs/testing.md)

ORIGIN = SourcePosition("generated", 0, 0)


def decode_both(tmp: Path, chunks: list[list[tuple[bytes | None, bytes | None]]], protocol: str = "canal-json",
                monkeypatch: pytest.MonkeyPatch | None = None, options: dict[str, Any] | None = None,
                chunk: int = 3) -> int:
    """Decode the segments both ways; assert equal files and side outputs; the messages that took
    the column-wise path. ``chunk``: the rows a plan converts at once (small: many chunks a batch).
    The column-wise path runs twice: in read batches of the usual size, and of two messages, so
    that most messages meet their table's ``SchemaReader`` (made from a batch for the next ones)."""
    config = make_config(tmp, protocol, options)
    storage = open_storage(config.storage)
    from cdc_codecs import ProducerRecord
    segments = write_segments(storage, config, [[ProducerRecord(0, k, v) for k, v in chunk] for chunk in chunks])
    fast = [0]
    counted = [True]  # only the usual read batches' count is returned
    split = batch_module.CanalBatch.split

    def counting(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        table, rows, is_fast = split(self, *args, **kwargs)
        fast[0] += int(is_fast.sum()) if counted[0] else 0
        return table, rows, is_fast

    patch = monkeypatch or pytest.MonkeyPatch()
    patch.setattr(batch_module.CanalBatch, "split", counting)
    patch.setattr(batch_module, "CHUNK", chunk)
    patch.setattr(batch_module, "VALUE_SLICE", chunk)  # and the messages it makes objects of at once
    patch.setattr(changelog, "FIRST_BATCH", 3)  # a segment's first batch cut after 3 messages, as after 1,000
    usual = changelog.READ_BATCH
    try:
        for segment in segments:
            task = changelog.ChangeLogTask(config, TOPIC, 0, (segment,), DecoderState())
            out = []
            for column_wise, read_batch in ((False, usual), (True, usual), (True, 2)):
                patch.setattr(changelog, "READ_BATCH", read_batch)
                patch.setattr(batch_module, "UNION_MESSAGES_PER_TABLE", 100 if read_batch != 2 else 0)
                counted[0] = read_batch != 2
                side = changelog._decode_segment(storage, task, segment, DecoderState(), None, column_wise)
                out.append((side.to_json(), storage.read(paths(config, segment)[0])))
            (side_a, file_a), *others = out
            for side_b, file_b in others:
                assert side_a == side_b
                assert file_a == file_b, _first_difference(storage, config, segment, [out[0], (side_b, file_b)])
    finally:
        if monkeypatch is None:
            patch.undo()
    return fast[0]


def _first_difference(storage: Any, config: Any, segment: Any, out: list[Any]) -> str:
    import io

    import pyarrow.parquet as pq
    a, b = (pq.read_table(io.BytesIO(f)) for _, f in out)
    for name in a.column_names:
        x, y = a.column(name).to_pylist(), b.column(name).to_pylist()
        if x != y:
            i = next((i for i in range(min(len(x), len(y))) if x[i] != y[i]), min(len(x), len(y)))
            return f"column {name} row {i}: {x[i:i + 1]} vs {y[i:i + 1]} ({len(x)} vs {len(y)} rows)"
    return "same columns, other bytes"


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
def test_every_protocol_writes_the_same_change_log_both_ways(tmp_path: Path, protocol: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    events = list(Workload(WorkloadSpec(tables=3, events=400, seed=3, watermark_every=37, key_space=60)).events())
    records = [(r.key, r.value) for r in encode(protocol, events, rows_per_message=3)]
    fast = decode_both(tmp_path, [records[:250], records[250:]], protocol, monkeypatch)
    assert (fast > 300) == (protocol == "canal-json")


def test_canal_json_without_its_tidb_extension_takes_the_per_change_path(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    events = list(Workload(WorkloadSpec(tables=2, events=100, seed=4)).events())
    records = [(r.key, r.value) for r in get_encoder("canal-json", enable_tidb_extension=False).encode_all(events, 1)]
    assert decode_both(tmp_path, [records], "canal-json", monkeypatch, {"enable_tidb_extension": False}) == 0


# ---------------------------------------------------------------- every MySQL type at its extremes

SINGLE = [(name, t) for name, t in (*VALUE_COLUMNS, *OTHER_COLUMNS) if name not in ("id",)]


def _history(key: tuple[str, str], column: tuple[str, str], keys: list[Any], images: list[Any]) -> list[Any]:
    """Inserts, updates (some moving the key) and deletes of a two-column table."""
    (kname, _), (vname, _) = key, column
    schema = TableSchema("db", "t", (Column(kname, COLUMN_TYPES[kname], False), Column(vname, COLUMN_TYPES[vname])), (kname,))
    types = schema.column_types
    out: list[Any] = []
    ts = 1000
    live: dict[int, Any] = {}
    for i, image in enumerate(images):
        ts += 1
        k = i % len(keys)
        row = {kname: keys[k], vname: image}
        if k in live:
            out.append(RowChange(Op.UPDATE, "db", "t", live[k], row, (kname,), types, tso(ts), ORIGIN, ts))
        else:
            out.append(RowChange(Op.INSERT, "db", "t", None, row, (kname,), types, tso(ts), ORIGIN, ts))
        live[k] = row
    for k, row in list(live.items())[: len(live) // 2]:
        ts += 1
        out.append(RowChange(Op.DELETE, "db", "t", row, None, (kname,), types, tso(ts), ORIGIN, ts))
    if len(keys) > 1 and live:  # an update that moves a row to another key
        k, row = next(iter(live.items()))
        ts += 1
        moved = {**row, kname: keys[(k + 1) % len(keys)]}
        out.append(RowChange(Op.UPDATE, "db", "t", row, moved, (kname,), types, tso(ts), ORIGIN, ts))
    out.append(Watermark(tso(ts + 1), ORIGIN))
    return out


@st.composite
def single_column_histories(draw: st.DrawFn) -> tuple[list[Any], bool]:
    column = draw(st.sampled_from(SINGLE), label="column")
    key = draw(st.sampled_from([("id", "bigint"), ("k_varchar", "varchar(768)"), ("k_bigint_u", "bigint unsigned"),
                                ("x", "int"), *KEY_COLUMNS]), label="key column")
    key_pool = draw(st.lists(values(key[0]), min_size=1, max_size=4, unique_by=repr), label="keys")
    images = draw(st.lists(st.none() | values(column[0]), min_size=1, max_size=6), label="images")
    compatible = draw(st.booleans(), label="content_compatible")
    return _history(key, column, key_pool, images), compatible


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(single_column_histories())
def test_every_mysql_type_at_its_extremes_writes_the_same_change_log_both_ways(tmp_path_factory, drawn) -> None:  # noqa: ANN001
    history, compatible = drawn
    encoder = get_encoder("canal-json", content_compatible=compatible)
    records = [(r.key, r.value) for r in encoder.encode_all(history, 1)]
    decode_both(tmp_path_factory.mktemp("types"), [records])


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(rows(VALUE_COLUMNS), min_size=1, max_size=8))
def test_a_table_of_every_type_writes_the_same_change_log_both_ways(tmp_path_factory, images) -> None:  # noqa: ANN001
    """A float, time, enum, bit, ... column sends the table's rows down the per-change path whole."""
    columns = (("id", "bigint"), *VALUE_COLUMNS)
    schema = TableSchema("db", "all", tuple(Column(n, COLUMN_TYPES[n]) for n, _ in columns), ("id",))
    history = [RowChange(Op.INSERT, "db", "all", None, {"id": i, **image}, ("id",), schema.column_types, tso(1000 + i),
                         ORIGIN, 1000 + i) for i, image in enumerate(images)]
    records = [(r.key, r.value) for r in get_encoder("canal-json").encode_all(history, 1)]
    assert decode_both(tmp_path_factory.mktemp("all"), [records]) == 0


# ---------------------------------------------------------------- texts at the edge of each fast case

EDGES: dict[str, list[Any]] = {
    "id": ["0", "-0", "007", "+5", " 5", "5_0", "٣", "9223372036854775807", "9223372036854775808",
           "-9223372036854775808", "-9223372036854775809", "", "-", "1e3", "1.0", None, 5, 5.0, True, [], {}],
    "qty": ["127", "128", "-32", "-33", "-128", "-129", "255", "256", "32767", "-32768", "65535", "65536",
            "2147483647", "2147483648", "-2147483648", "-2147483649", "00000000000000000001", "-00", None, "x"],
    "big": ["0", "18446744073709551615", "18446744073709551616", "99999999999999999999", "4294967295", "4294967296",
            "-1", "-0", "000000000000000000018", "100000000000000000000", None],
    "amount": ["0", "-0", "0.00", "-0.5", ".5", "5.", "1e5", "1E-7", "0.000001", "0.0000001", "0.000000",
               "0.0000000", "-0.0000001", "12345678901234567890.123456789", "00.1", "+1.5", " 1.5", "1_0.5",
               "NaN", "Infinity", "-Infinity", "1" * 70, "1." + "0" * 300, None, 1.5],
    "updated_at": ["2024-01-01 00:00:00", "2024-01-01 00:00:00.1", "2024-01-01 00:00:00.123456",
                   "2024-01-01 00:00:00.1234567", "2024-01-01T00:00:00", "2024-02-29 12:00:00", "2023-02-29 12:00:00",
                   "1900-02-29 00:00:00", "2000-02-29 00:00:00", "0000-00-00 00:00:00", "0001-01-01 00:00:00",
                   "9999-12-31 23:59:59.999999", "2024-13-01 00:00:00", "2024-04-31 00:00:00", "2024-01-01 24:00:00",
                   "2024-01-01 23:60:00", "2024-01-01 23:59:60", "2024-01-01", "2024-01-01 00:00:00Z",
                   "2024-01-01 00:00:00+08:00", "２０２４-01-01 00:00:00", None, 0],
    "created_at": ["1970-01-01 00:00:01", "2038-01-19 03:14:07.999999", "2024-01-01 00:00:00.5",
                   "2024-01-01 00:00:00.1234567", "0000-00-00 00:00:00", "2024-01-01 00:00:00+00:00", None],
    "payload": ["", "abc", "\u0000", "\u007f", "\u0080", "\u00bf", "\u00c0", "\u00ff", "\u0100", "é", "€", "🦆",
                "a" * 255, "b" * 256, "\u00ff" * 70000, "x" * 65536, None, 1],
    "name": ["", "a" * 31, "a" * 32, "é" * 16, "🦆" * 8, "a" * 255, "a" * 256, "a" * 65535, "a" * 65536,
             "\u0000", "\ud7ff", "\ue000", None, 1, 1.5, False, ["a"], {"a": 1}],
    "note": ["", "x", None, "multi\nline"],
}


def _base_doc(ts: int, key: int, op: str = "INSERT") -> dict[str, Any]:
    with_note = {"note": "text"}
    row = {"id": str(key), "name": "alice", "amount": "12.50", "qty": "3", "updated_at": "2024-01-01 00:00:00.000001",
           "created_at": "2023-06-01 12:00:00", "payload": "ab", "big": "18446744073709551615", "note": "n"}
    types = {"id": "bigint", "name": "varchar", "amount": "decimal", "qty": "int", "updated_at": "datetime",
             "created_at": "timestamp", "payload": "varbinary", "big": "bigint unsigned", **dict.fromkeys(with_note, "text")}
    doc = {"id": 0, "database": "shop", "table": "t", "pkNames": ["id"], "isDdl": False, "type": op, "es": ts >> 18,
           "ts": ts >> 18, "sql": "", "sqlType": None, "mysqlType": types, "data": [row], "old": None, "_tidb": {"commitTs": ts}}
    if op == "UPDATE":
        doc["old"] = [dict(row)]
    return doc


def test_texts_at_the_edge_of_each_fast_case_write_the_same_change_log_both_ways(tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    records = []
    ts = tso(1_700_000_000_000)
    for column, edges in EDGES.items():
        for i, text in enumerate(edges):
            for op in ("INSERT", "UPDATE", "DELETE"):
                ts += 1
                doc = _base_doc(ts, 1000 + i, op)
                doc["data"][0][column] = text
                if op == "UPDATE" and column == "id":  # the old image keeps the plain key: a moved row
                    doc["data"][0]["id"] = str(2000 + i) if text is None else text
                records.append((None, orjson.dumps(doc)))
                if op == "UPDATE":  # and the edge in the old image
                    old = _base_doc(ts, 1000 + i, op)
                    old["old"][0][column] = text
                    records.append((None, orjson.dumps(old)))
    assert decode_both(tmp_path, [records[: len(records) // 2], records[len(records) // 2:]], monkeypatch=monkeypatch) > 100


def test_datetimes_of_other_lengths_adding_up_to_one_length_write_the_same_change_log_both_ways(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Texts of 26, 21 and 31 bytes: as many bytes as three of the first one's length, yet each is read
    at its own offsets (a fixed-width view of them read the 21-byte one's fraction out of place)."""
    records = []
    ts = tso(1_700_000_000_000)
    for i, text in enumerate(("2024-01-01 00:00:00.123456", "2024-01-01 00:00:00.1", "2024-01-01 00:00:00.1234567890a")):
        ts += 1
        doc = _base_doc(ts, 1000 + i, "INSERT")
        doc["data"][0]["updated_at"] = text
        records.append((None, orjson.dumps(doc)))
    assert decode_both(tmp_path, [records], monkeypatch=monkeypatch) == 2
    col = batch_module.Column(batch_module.CanalJsonDecoder()._schema("d", "t", {"x": "datetime"})[0]["x"],
                              pa.array(["2024-01-01 00:00:00.123456", "2024-01-01 00:00:00.1",
                                        "2024-01-01 00:00:00.1234567890a"]), False, 3)
    assert col.encoded[1].as_py()[-4:] == (100000).to_bytes(4, "little")


def test_odd_shapes_write_the_same_change_log_both_ways(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Messages next to the common one: several rows, partial old images, extra and missing columns,
    reordered columns, other pkNames, a changed mysqlType, claim-check, watermark, DDL."""
    ts = tso(1_700_000_000_000)
    docs: list[Any] = []

    def add(change: Any) -> None:
        nonlocal ts
        ts += 1
        doc = _base_doc(ts, len(docs) + 1, random.Random(len(docs)).choice(["INSERT", "UPDATE", "DELETE"]))
        change(doc)
        docs.append(doc)

    add(lambda d: None)
    add(lambda d: d["data"].append(dict(d["data"][0], id="77")))
    add(lambda d: d.update(type="UPDATE", old=[{"name": "bob"}]))
    add(lambda d: d.update(type="UPDATE", old=None))
    add(lambda d: d.update(type="UPDATE", old=[{}, {}]))
    add(lambda d: d["data"][0].update(extra="1"))
    add(lambda d: d["data"][0].pop("name"))
    add(lambda d: d["data"][0].update({"extra": d["data"][0].pop("name")}))
    add(lambda d: d.update(data=[dict(reversed(list(d["data"][0].items())))]))
    add(lambda d: d.update(mysqlType=dict(reversed(list(d["mysqlType"].items())))))
    add(lambda d: d.update(pkNames=["id", "name"]))
    add(lambda d: d.update(pkNames=["name"]))
    add(lambda d: d.update(pkNames=None))
    add(lambda d: d.update(pkNames=[]))
    add(lambda d: d.update(pkNames=["nope"]))
    add(lambda d: d.update(pkNames="id"))
    add(lambda d: d["mysqlType"].update(qty="float"))
    add(lambda d: d["mysqlType"].update(qty="notatype"))
    add(lambda d: d["mysqlType"].update(qty=5))
    add(lambda d: d.update(mysqlType=None))
    add(lambda d: d["_tidb"].update(claimCheckLocation="s3://x"))
    add(lambda d: d.update(_tidb={"commitTs": -1}))
    add(lambda d: d.update(_tidb={"commitTs": (1 << 63) - 1}))  # 1 << 63 fails both paths' write (int64)
    add(lambda d: d.update(_tidb={"commitTs": "5"}))
    add(lambda d: d.update(_tidb=None))
    add(lambda d: d.pop("_tidb"))
    add(lambda d: d.update(isDdl=None))
    add(lambda d: d.pop("isDdl"))
    add(lambda d: d.update(isDdl=True, sql="ALTER TABLE t ADD COLUMN z int"))
    add(lambda d: d.update(type="TIDB_WATERMARK", _tidb={"watermarkTs": ts}))
    add(lambda d: d.update(type="insert"))
    add(lambda d: d.update(type=["INSERT"]))
    add(lambda d: d.update(database=None))
    add(lambda d: d.pop("table"))
    add(lambda d: d.update(table="t2"))
    add(lambda d: d.update(database="other", table="t"))
    add(lambda d: d.update(es="5"))
    add(lambda d: d.update(es=None))
    add(lambda d: d.update(es=True))
    add(lambda d: d.update(data=[]))
    add(lambda d: d.update(data=["x"]))
    add(lambda d: d.update(old="x"))
    for i in range(30):  # back to the common shape, a table of 20 columns (a map of 16 or more)
        add(lambda d: None)
        add(lambda d: (d["data"][0].update({f"c{j}": str(j) for j in range(12)}),
                       d["mysqlType"].update({f"c{j}": "int" for j in range(12)})))
    messages = [(None, orjson.dumps(d)) for d in docs] + [(None, b""), (None, None), (None, b"[]"), (None, b"{"),
                                                           (None, b'{"a": 1}\n{"b": 2}'), (None, b"\xff")]
    assert decode_both(tmp_path, [messages], monkeypatch=monkeypatch) > 30


def test_the_fuzzers_mutations_write_the_same_change_log_both_ways(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(37)
    pool = list(test_fuzz.corpus("canal-json"))
    messages = []
    for _ in range(3000):
        item = rng.choice(pool)
        messages.append(item if rng.random() < 0.3 else test_fuzz.mutate(item, rng, pool))
    # Mutations inside the row values, where the column-wise path reads.
    for _ in range(1000):
        key, value = rng.choice(pool)
        try:
            doc = orjson.loads(value)
        except orjson.JSONDecodeError:
            continue
        if isinstance(doc, dict) and isinstance(doc.get("data"), list) and doc["data"] and isinstance(doc["data"][0], dict):
            row = doc["data"][0]
            column = rng.choice(list(row))
            row[column] = rng.choice([*test_fuzz.WEIRD_JSON, str(rng.randint(-2**70, 2**70)), "1" * rng.randint(1, 30)])
            messages.append((key, json.dumps(doc).encode()))
    assert decode_both(tmp_path, [messages[i:i + 700] for i in range(0, len(messages), 700)], monkeypatch=monkeypatch) > 300


def test_decimal_texts_the_fast_case_takes_are_their_own_str() -> None:
    """The decimal shape accepts only a text ``str(Decimal(text))`` gives back (the stored form)."""
    rng = random.Random(1)
    texts = [f"{'-' if rng.random() < 0.3 else ''}{rng.choice(['0', str(rng.randint(1, 10**rng.randint(1, 30)))])}"
             f"{'.' + ''.join(rng.choice('0000123456789') for _ in range(rng.randint(1, 12))) if rng.random() < 0.8 else ''}"
             for _ in range(20000)]
    for text, good in zip(texts, text_shapes.decimals(pa.array(texts))):
        if good:
            assert str(Decimal(text)) == text, text


def test_key_hashes_are_zlibs_crc32_of_each_key_from_its_seed() -> None:
    """``key_hash`` a byte position at a time is zlib's CRC-32 of every key, of any length (empty, the
    longest taken at once, longer: one by one), sliced arrays too, and seeds over the 32 bits."""
    rng = random.Random(2)
    for size in (0, 1, 7, 300):
        for longest in (0, 1, 9, batch_module._CRC_WIDTH, batch_module._CRC_WIDTH + 1):
            keys = [bytes(rng.randrange(256) for _ in range(rng.randint(0, longest))) for _ in range(size + 2)]
            seeds = [rng.choice([0, 1, 2**31, 2**32 - 1, rng.randrange(2**32)]) for _ in keys]
            got = batch_module._crc32s(pa.array(keys, pa.binary()).slice(2), np.array(seeds[2:], np.int64))
            assert got.dtype == np.int64
            assert got.tolist() == [zlib.crc32(k, s) for k, s in zip(keys[2:], seeds[2:])]


def test_the_dates_the_fast_case_takes_are_the_calendars() -> None:
    """A year, month and day pass as Python's ``date`` takes them: leap years by 4, 100 and 400 included."""
    years = (0, 1, 4, 100, 200, 400, 1900, 2000, 2023, 2024, 9999)
    cases = [(y, m, d) for y in years for m in range(14) for d in range(33)]
    year, month, day = (np.array(c, np.int32) for c in zip(*cases))

    def valid(y: int, m: int, d: int) -> bool:
        try:
            dt.date(y, m, d)
        except ValueError:
            return False
        return True

    assert batch_module.Column._date_ok(year, month, day).tolist() == [valid(*c) for c in cases]
    assert batch_module.Column._date_ok(year, month.astype(np.uint8), day.astype(np.uint8)).tolist() == \
        [valid(*c) for c in cases]


def test_a_named_columns_bytes_are_its_name_then_its_values() -> None:
    """A column given its name writes it before each value (NULL's too, long values' too) when its kind
    can, and says so; otherwise its values' bytes are as without it."""
    texts = {"varchar": ["a", "", None, "é" * 300], "json": ["{}", None], "decimal": ["1.5", None, "-2"],
             "datetime": ["2024-01-01 00:00:00", None, "2024-01-01 00:00:00.5"], "date": ["2024-02-29", None],
             "varbinary": ["ab", "\u00ff" * 300, None, "é"], "int": ["5", None, "-40", "2147483647"],
             "bigint": ["1", None, "-300", "-9223372036854775808", "127", "128", "65536", "-32", "-33"],
             "bigint unsigned": ["18446744073709551615", "0", None, "4294967296"]}
    name = batch_module._msgspec_name("col")
    for mysql_type, column_texts in texts.items():
        ct = batch_module.CanalJsonDecoder()._schema("d", "t", {"x": mysql_type})[0]["x"]
        plain = batch_module.Column(ct, pa.array(column_texts, pa.string()), False, len(column_texts))
        named = batch_module.Column(ct, pa.array(column_texts, pa.string()), False, len(column_texts), name)
        assert named.named == ("int" not in mysql_type), mysql_type
        assert named.encoded.to_pylist() == [(name if named.named else b"") + v for v in plain.encoded.to_pylist()]
        assert named.ok.tolist() == plain.ok.tolist()
        if "int" in mysql_type:
            assert plain.encoded.to_pylist() == [msgspec.msgpack.encode(None if v is None else int(v))
                                                 for v in column_texts]


def test_a_nulls_bytes_are_nil_whatever_its_slot_holds() -> None:
    """Arrow lets a NULL's slot hold bytes: the prefixed values are the same as with it empty, and so are
    a column's (values past a prefix table's 256 lengths too)."""
    values = ["ab", None, "x" * 256, None, "é"]
    empty = pa.array(values, pa.string())
    data = b"ab" + b"junk" + b"x" * 256 + b"more" + "é".encode()
    offsets = np.array([0, 2, 6, 262, 266, 268], np.int32)
    validity = pa.array([v is not None for v in values]).buffers()[1]
    holding = pa.Array.from_buffers(pa.string(), 5, [validity, pa.py_buffer(offsets), pa.py_buffer(data)])
    assert holding.to_pylist() == values
    null = np.array([v is None for v in values])
    for kind in ("str", "bin", "decimal"):
        for name in (b"", b"\xa1n"):
            want = batch_module._headed(kind, empty, name, null).to_pylist()
            assert batch_module._headed(kind, holding, name, null).to_pylist() == want
            assert want[1] == name + b"\xc0" and want[2][len(name):] == batch_module._HEADS[kind][1](256) + b"x" * 256
    for mysql_type in ("varchar", "varbinary", "decimal"):
        ct = batch_module.CanalJsonDecoder()._schema("d", "t", {"x": mysql_type})[0]["x"]
        column = batch_module.Column(ct, holding, False, 5)
        assert column.encoded.equals(batch_module.Column(ct, empty, False, 5).encoded)


def test_the_change_logs_columns_own_their_buffers() -> None:
    """The rows' arrays hold only their own bytes (no slice of a longer array, e.g. keys with the old
    images' after them): their IPC bytes are those of compacted copies, with and without moved rows."""
    ts = tso(1_700_000_000_000)
    for moved in (False, True):
        docs = []
        for i, op in enumerate(["INSERT", "UPDATE", "DELETE", "UPDATE", "INSERT"] * 10):
            ts += 1
            doc = _base_doc(ts, 1000 + i, op)
            if op == "UPDATE" and moved and i % 10 == 1:
                doc["old"][0]["id"] = str(5000 + i)
            docs.append(orjson.dumps(doc))
        fast = batch_module.CanalBatch(batch_module.CanalJsonDecoder(enable_tidb_extension=True), TOPIC, 0,
                                       lambda keys, types: 7, lambda keys, types: None)
        table, _, is_fast = fast.split(np.arange(len(docs)), docs)
        assert is_fast.all() and table.num_rows == len(docs) + (5 if moved else 0)
        compact = pa.table([pa.concat_arrays(column.chunks) for column in table.columns], names=table.column_names)

        def ipc(t: pa.Table) -> bytes:
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, t.schema) as writer:
                writer.write_table(t)
            return sink.getvalue().to_pybytes()

        assert ipc(table) == ipc(compact)


def test_the_fast_kinds_are_the_converters_inlined_kinds() -> None:
    """Every kind with a fast case has a compiled (inlined) conversion in cdc_codecs.rowconv, so a
    row of them converts in column order, as the image encoder expects."""
    from cdc_codecs.rowconv import _inline
    from cdc_codecs.types import UTC, ColumnType
    for kind in batch_module._FAST_KINDS:
        ct = ColumnType(kind, {TypeKind.INT: "int", TypeKind.LONG: "bigint", TypeKind.UNSIGNED_LONG: "bigint"}.get(kind, "x"),
                        kind is TypeKind.UNSIGNED_LONG)
        assert _inline(ct, "x", "c", UTC) is not None, kind
    assert dt.timezone.utc is UTC


def test_more_mysql_types_than_the_decoder_compiles_write_the_same_change_log_both_ways(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The decoder compiles the converters of its first 1,024 mysqlTypes; past them a row keeps the
    message's column order. Rows here list their columns in another order than mysqlType, over
    1,400 mysqlTypes, read in batches of 100: the fast path must not change which are compiled."""
    monkeypatch.setattr(changelog, "READ_BATCH", 100)
    ts = tso(1_700_000_000_000)
    messages = []
    for i in range(700):
        for column, count in ((f"c{i}", 1), (f"d{i}", 2)):  # one row: the fast path's; two: the per-change path's
            ts += 1
            doc = {"database": "db", "table": f"t{i}", "pkNames": ["id"], "isDdl": False, "type": "INSERT", "es": 1,
                   "mysqlType": {"id": "bigint", column: "int"}, "data": [{column: "5", "id": str(i)}] * count,
                   "old": None, "_tidb": {"commitTs": ts}}
            messages.append((None, orjson.dumps(doc)))
    assert decode_both(tmp_path, [messages], monkeypatch=monkeypatch) > 400


def test_the_first_batch_of_a_segment_takes_the_column_wise_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """New mysqlTypes are learnt in the batch that brings them, when it cannot fill the decoder's cache."""
    monkeypatch.setattr(changelog, "READ_BATCH", 2000)
    events = list(Workload(WorkloadSpec(tables=10, events=3000, seed=8, watermark_every=1000, key_space=500)).events())
    records = [(r.key, r.value) for r in encode("canal-json", events)]
    assert decode_both(tmp_path, [records], monkeypatch=monkeypatch, chunk=batch_module.CHUNK) > len(records) - 30


def _reading_differences(ts: int, key: int, op: str) -> list[bytes]:
    """The common message with each text a JSON reader other than orjson reads otherwise (measured for
    issue 37: DuckDB's ``json_transform``, ``pyarrow.json``, Polars), where the column-wise path reads."""
    doc = orjson.dumps(_base_doc(ts, key, op))
    row, tidb = b'"data":[{"id":"%d"' % key, b'"_tidb":{"commitTs":%d}' % ts

    def sub(old: bytes, new: bytes) -> bytes:
        assert old in doc, old
        return doc.replace(old, new, 1)
    texts = [
        # Duplicate names: orjson (and so both paths) keeps the last; DuckDB and Polars' nested objects the first.
        sub(b'"table":"t"', b'"table":"x","table":"t"'), sub(b'"table":"t"', b'"table":"t","table":"x"'),
        sub(b'"type":"%s"' % op.encode(), b'"type":"DELETE","type":"%s"' % op.encode()),
        sub(b'"isDdl":false', b'"isDdl":true,"isDdl":false'), sub(b'"isDdl":false', b'"isDdl":false,"isDdl":true'),
        sub(row, b'"data":[{"id":"999","id":"%d"' % key), sub(row, row + b',"id":"999"'),
        sub(b'"qty":"int"', b'"qty":"float","qty":"int"'), sub(b'"qty":"int"', b'"qty":"int","qty":"float"'),
        sub(tidb, b'"_tidb":{"commitTs":1,"commitTs":%d}' % ts), sub(tidb, b'"_tidb":{"commitTs":%d,"commitTs":1}' % ts),
        sub(b'"pkNames":["id"]', b'"pkNames":["name"],"pkNames":["id"]'),
        sub(b'"data":[', b'"data":[{"id":"1"}],"data":['),
        # Numbers beyond a double (orjson rejects them; DuckDB and pyarrow.json read them), NaN, Infinity.
        sub(b'"sqlType":null', b'"sqlType":1e400'), sub(b'"sqlType":null', b'"sqlType":-1e400'),
        sub(b'"sqlType":null', b'"sqlType":' + b"9" * 400), sub(b'"sqlType":null', b'"sqlType":[1e400]'),
        sub(b'"sqlType":null', b'"sqlType":NaN'), sub(b'"sqlType":null', b'"sqlType":Infinity'),
        sub(b'"sqlType":null', b'"sqlType":-Infinity'), sub(b'"sqlType":null', b'"sqlType":1.7976931348623157e308'),
        sub(b'"sqlType":null', b'"sqlType":1e-400'), sub(b'"es":%d' % (ts >> 18), b'"es":1e3'),
        sub(b'"es":%d' % (ts >> 18), b'"es":-0'), sub(tidb, b'"_tidb":{"commitTs":1.5}'),
        sub(tidb, b'"_tidb":{"commitTs":18446744073709551616}'), sub(tidb, b'"_tidb":{"commitTs":"%d"}' % ts),
        sub(tidb, b'"_tidb":{"commitTs":%d.0}' % ts), sub(tidb, b'"_tidb":{"commitTs":%de0}' % ts),
        # Syntax only some readers take: trailing commas, a BOM, comments, nesting past 1,024, leading zeros.
        sub(tidb, tidb[:-1] + b",}"), sub(row, row + b","), sub(b'"pkNames":["id"]', b'"pkNames":["id",]'),
        b"\xef\xbb\xbf" + doc, sub(b'"sqlType":null', b'"sqlType":null/**/'),
        sub(b'"sqlType":null', b'"sqlType":' + b"[" * 1025 + b"]" * 1025),
        sub(b'"sqlType":null', b'"sqlType":' + b"[" * 1023 + b"]" * 1023), sub(b'"es":', b'"es":0'),
        # Where msgspec (the column-wise path's parser) reads otherwise: integers past int64 (orjson reads
        # a float past 2**64-1), and the texts it skips unchecked (Raw fields, unknown names).
        sub(b'"es":%d' % (ts >> 18), b'"es":18446744073709551616'), sub(b'"es":%d' % (ts >> 18), b'"es":%d' % (1 << 63)),
        sub(b'"id":0', b'"id":18446744073709551616'), sub(b'"ts":', b'"ts":1e400,"x":'),
        sub(b'"sqlType":null', b'"sqlType":{"id":"\xff"}'), sub(b'"sqlType":null', b'"sqlType":{"id":1e400}'),
        sub(b'"sqlType":null', b'"sqlType":{"id":18446744073709551616}'), sub(b'"sql":""', b'"sql":"\xff"'),
        sub(b'"note":"text"', b'"note":"text\xff"'), sub(b'"note":"text"', b'"note":"text","x":1e400'),
        sub(b'"note":"text"', b'"note":"text","x":' + b"[" * 1100 + b"]" * 1100),
        sub(b'"pkNames":["id"]', b'"pkNames":["id\xff"]'), sub(b'"pkNames":["id"]', b'"pkNames":["id"] '),
        sub(b'"note":"text"', b'"note" : "text"'), sub(b'"isDdl":', b'"extra":"\xff","isDdl":'),
        sub(b'"isDdl":', b'"extra":1,"isDdl":'),
        # Escapes and UTF-8 in the values the column-wise path reads.
        sub(b'"name":"alice"', b'"name":"\\ud83d\\ude00"'), sub(b'"name":"alice"', b'"name":"\\ud83d"'),
        sub(b'"name":"alice"', b'"name":"\\ude00"'), sub(b'"name":"alice"', b'"name":"\\ud83dx"'),
        sub(b'"name":"alice"', b'"name":"a\\u0000b"'), sub(b'"payload":"ab"', b'"payload":"a\\u0000b"'),
        sub(b'"name":"alice"', b'"name":"\\/\\"\\\\\\b\\f\\n\\r\\t\\u00e9\\u4e2d"'),
        sub(b'"name":"alice"', b'"name":"\xff"'), sub(b'"name":"alice"', b'"name":"\xc0\xaf"'),
        sub(b'"name":"alice"', b'"name":"\xed\xa0\x80"'), sub(b'"name":"alice"', b'"name":"a\x01b"'),
        sub(b'"payload":"ab"', b'"payload":"\xc3\xbf\\u00ff"'), sub(b'"name":"alice"', b'"n\\u0061me":"alice"'),
        # Values of another JSON type where text is expected (a reader into VARCHAR takes 5 as '5').
        sub(row, b'"data":[{"id":%d' % key), sub(b'"qty":"3"', b'"qty":3'), sub(b'"name":"alice"', b'"name":true'),
        sub(b'"name":"alice"', b'"name":{"x":1}'), sub(b'"name":"alice"', b'"name":["alice"]'),
        sub(b'"big":"18446744073709551615"', b'"big":18446744073709551615'),
        # Not one object: trailing garbage, two documents, other documents, whitespace around.
        doc + b" x", doc + b"\x00", doc + doc, doc + b"\n" + doc, b'"x"', b"5", b"null", b"[" + doc + b"]",
        b" \t\r\n" + doc + b"\n ",
    ]
    if op == "UPDATE":
        texts += [sub(b'"old":[{"id":"%d"' % key, b'"old":[{"id":"999","id":"%d"' % key),
                  sub(b'"old":[{"id":"%d"' % key, b'"old":[{"id":"%d","id":"999"' % key),
                  sub(b'"old":[{"id":"%d"' % key, b'"old":[{"id":%d' % key), sub(b'"old":[', b'"old":[{}],"old":[')]
    return texts


def test_texts_other_json_readers_read_otherwise_write_the_same_change_log_both_ways(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Duplicate names, numbers beyond a double, NaN, trailing commas, deep nesting, escapes, invalid
    UTF-8, values of another JSON type, trailing garbage: each beside the common message, both ways."""
    ts = tso(1_700_000_000_000)
    messages = []
    for i, op in enumerate(("INSERT", "UPDATE", "DELETE")):
        ts += 1
        for j, text in enumerate(_reading_differences(ts, 100 * i + 1, op)):
            ts += 1
            messages += [(None, text), (None, orjson.dumps(_base_doc(ts, 1000 + 100 * i + j, op)))]
    assert decode_both(tmp_path, [messages], monkeypatch=monkeypatch) > len(messages) // 2 + 50  # ~70 of the texts too


def test_a_mysql_type_in_another_order_than_its_tables_last(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same columns in another order (a column moved by ALTER TABLE ... AFTER): the message's types
    are in its own order whatever the table's last mysqlType was (before decoder version 3 the decoder
    kept the earlier order, so the order a message got depended on the messages before it, and the
    column-wise path, which meets them in another order, could not follow); here a message of table u
    in another order than the decoder's last of u, met by the per-change path in an earlier batch."""
    monkeypatch.setattr(changelog, "READ_BATCH", 4)
    ts = tso(1_700_000_000_000)

    def message(table: str, key: int, rows: int = 1, reordered: bool = False) -> tuple[None, bytes]:
        nonlocal ts
        ts += 1
        doc = _base_doc(ts, key)
        doc["table"], doc["data"] = table, doc["data"] * rows
        if reordered:
            doc["mysqlType"] = dict(reversed(doc["mysqlType"].items()))
        return None, orjson.dumps(doc)
    messages = [message("u", 1, rows=2), message("t", 2), message("t", 3), message("t", 4),  # the decoder meets u
                message("t", 5), message("u", 6, reordered=True), message("t", 7), message("t", 8)]
    assert decode_both(tmp_path, [messages], monkeypatch=monkeypatch) == 7


def _common(count: int, change: Any = None) -> list[tuple[None, bytes]]:
    """``count`` common messages, each changed by ``change(i, doc)`` if given."""
    ts = tso(1_700_000_000_000)
    messages = []
    for i in range(count):
        doc = _base_doc(ts + i, i, "INSERT")
        if change is not None:
            change(i, doc)
        messages.append((None, orjson.dumps(doc)))
    return messages


@pytest.mark.parametrize("odd", [b'{"table":"\\u0000"}', b'{"table":"\\u0000","table":"\\u0000"}', b' {"table" : "\\u0000"} '])
def test_a_message_of_the_table_the_schema_structs_reserve_is_declined_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, odd: bytes) -> None:
    """A reviewer's: "\\u0000" is the union's sentinel's tag (no MySQL table's name); a message naming
    it reads as the empty sentinel, which the batch declined by an AttributeError -- the whole batch
    then took the per-change path (the same bytes, ~10,000 messages at its cost)."""
    messages = _common(600)
    messages.insert(300, (None, odd))
    assert decode_both(tmp_path, [messages], monkeypatch=monkeypatch) == 600


@pytest.mark.parametrize("odd", ['a"b', "a\\b", "a\x01b"])
def test_a_column_name_msgspec_cannot_take_leaves_every_table_its_column_wise_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, odd: str) -> None:
    """A reviewer's: MySQL takes a column named with '"', '\\' or a control character; msgspec's
    struct does not (ValueError), and the union of schema structs was then never made: every batch
    of every segment after its first took the per-change path. Such a schema's messages keep the
    generic struct, the other tables their schema structs."""
    def odd_table(i: int, doc: dict[str, Any]) -> None:
        if i % 2:
            doc["table"] = "u"
            doc["mysqlType"][odd] = "varchar"
            doc["data"][0][odd] = "v"

    made = []
    union = batch_module.CanalBatch._union

    def counting(self: Any, messages: int) -> Any:  # noqa: ANN401
        read = union(self, messages)
        made.append(read is not None)
        return read

    monkeypatch.setattr(batch_module.CanalBatch, "_union", counting)
    assert decode_both(tmp_path, [_common(600, odd_table)], monkeypatch=monkeypatch) == 600
    assert any(made)


def _ticdc_messages(message: dict[str, Any], commit_ts: int) -> list[bytes]:
    """A Canal flat message of the conformance corpus as TiCDC frames it (Canal's fields and its
    ``_tidb`` extension), narrowed to the columns of kinds the column-wise path has a fast case for
    (with its key): real values of each of those kinds, where a FLOAT column elsewhere in the row
    would otherwise send the whole table to the per-change path. [] when the key leaves the kinds."""
    from cdc_codecs.canal_json import CanalJsonDecoder

    types, _ = CanalJsonDecoder()._schema(message["database"], message["table"], message["mysqlType"])
    kept = [name for name, ct in types.items() if ct.kind in batch_module._FAST_KINDS]
    keys = message.get("pkNames") or []
    if not keys or any(k not in kept for k in keys):
        return []

    def narrow(row: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if row is None else {n: row[n] for n in kept if n in row}

    out = []
    for i, row in enumerate(message["data"]):
        old = message.get("old")
        framed = {"id": 0, "database": message["database"], "table": message["table"], "pkNames": keys, "isDdl": False,
                  "type": message["type"], "es": message.get("es", 0), "ts": message.get("ts", 0), "sql": "",
                  "sqlType": {n: message["sqlType"][n] for n in kept} if message.get("sqlType") else None,
                  "mysqlType": {n: message["mysqlType"][n] for n in kept},
                  "data": [narrow(row)], "old": [narrow(old[i])] if old else None,
                  "_tidb": {"commitTs": commit_ts + i}}
        out.append(orjson.dumps(framed))
    return out


def test_the_conformance_corpus_values_write_the_same_change_log_both_ways(tmp_path: Path, conformance: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Real upstream values (every Canal flat DML of shared/conformance, the TiCDC docs' insert) in
    TiCDC's Canal-JSON framing, each table's messages repeated so its schema struct reads most of
    them: both paths write the same change log, and the column-wise path takes most of them."""
    docs = conformance / "ticdc-canal-json/docs/docs-cn__L91__dml-insert.json"
    sources = sorted(conformance.glob("canal-flat/*/*.json")) + [docs]
    records: list[tuple[bytes | None, bytes | None]] = []
    stamp = tso(1_700_000_000_000)
    for path in sources:
        message = orjson.loads(path.read_bytes())
        if message.get("isDdl") or not message.get("data") or not message.get("mysqlType"):
            continue
        for _ in range(4):
            framed = _ticdc_messages(message, stamp)
            stamp += len(framed) + 1
            records += [(None, m) for m in framed]
    assert len(records) > 40
    fast = decode_both(tmp_path, [records], "canal-json", monkeypatch)
    assert fast > len(records) // 2
