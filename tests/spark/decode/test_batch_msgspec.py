"""The column-wise path's msgspec parse (spark/decode/batch.py ``_RowMessage``) against orjson, the
per-change path's parser: whatever msgspec accepts there, orjson must read the same (or the fast
path must decline it). Both ways through ``decode_both``, and directly against ``orjson.loads``."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import msgspec
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark.decode import batch as batch_module
from spark.decode import changelog
from spark.demo.workload import tso
from tests.spark.decode.test_batch import _base_doc, decode_both

pytestmark = pytest.mark.slow  # whole intervals, Spark or services: make test-fast leaves it out (docs/testing.md)

# Texts msgspec skips without checking them (where it does not decode a value: a Raw, an unknown
# name) and orjson rejects: invalid UTF-8, numbers beyond a double.
UNCHECKED = [b'"\xff"', b'["id\xff"]', b'{"id":"\xc0\xaf"}', b"1e400", b"-1e400", b"9" * 400, b'{"id":1e999}',
             b'"\xed\xa0\x80"', b"[" * 1000 + b"]" * 1000]


def _duplicated_names(ts: int, key: int, op: str) -> list[bytes]:
    """The common message with one of its names twice, the first value one orjson rejects (so the
    per-change path raises) and the last the usual one; and with the last one rejected."""
    doc = orjson.dumps(_base_doc(ts, key, op))
    texts = []
    for name, usual in ((b"sqlType", b"null"), (b"pkNames", b'["id"]'), (b"mysqlType", None)):
        at = doc.index(b'"%s":' % name)
        for bad in UNCHECKED:
            for spelled in (b'"%s"' % name, b'"%s\\u%04x"' % (name[:-1], name[-1])):  # and its last letter escaped
                texts.append(doc[:at] + spelled + b":" + bad + b"," + doc[at:])  # the bad one first
                if usual is not None:
                    texts.append(doc[:at] + b'"%s":%s,' % (name, usual) + doc[at:].replace(
                        b'"%s":%s' % (name, usual), b'"%s":%s' % (name, bad), 1))  # the bad one last
    return texts


def test_a_name_twice_its_first_value_unreadable_writes_the_same_change_log_both_ways(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """msgspec keeps a name's last value and skips the others unchecked (a Raw field's too):
    ``"sqlType":"\\xff","sqlType":null`` is one sqlType, null, to msgspec and invalid UTF-8 to orjson."""
    ts = tso(1_700_000_000_000)
    messages = []
    for i, op in enumerate(("INSERT", "UPDATE", "DELETE")):
        for j, text in enumerate(_duplicated_names(ts, 100 * i + 1, op)):
            ts += 2
            # The same table's common message before and after: the Raw texts' cache meets each.
            messages += [(None, orjson.dumps(_base_doc(ts - 1, 5000 + 100 * i + j, op))), (None, text)]
    assert decode_both(tmp_path, [messages], monkeypatch=monkeypatch) >= len(messages) // 2


# ---------------------------------------------------------------- msgspec against orjson, directly

_FIELDS = ("type", "database", "table", "isDdl", "data", "old", "es", "mysqlType", "pkNames")
_NAMES = {*_FIELDS, "_tidb", "id", "ts", "sql", "sqlType"}


def _as_read(value: bytes) -> dict[str, Any] | None:
    """What the column-wise path reads of a message, or None where it declines it."""
    try:
        doc = batch_module._ROW_MESSAGE.decode(value)
    except (msgspec.DecodeError, ValueError, TypeError, RecursionError):
        return None
    out = {name: getattr(doc, name) for name in _FIELDS}
    for name in ("mysqlType", "pkNames", "sqlType"):
        raw = getattr(doc, name)
        if isinstance(raw, msgspec.Raw):
            try:
                out[name] = orjson.loads(memoryview(raw))
            except orjson.JSONDecodeError:
                return None
    out["_tidb"] = {"commitTs": doc._tidb.commitTs}
    for name in ("data", "old"):  # one row: a 1-tuple where orjson reads a list
        if type(out[name]) is tuple:
            out[name] = list(out[name])
    return out


def _disagreement(value: bytes) -> str | None:
    read = _as_read(value)
    if read is None:
        return None
    try:
        doc = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        return f"msgspec accepts, orjson rejects: {exc}"
    if type(doc) is not dict or not set(doc) <= _NAMES:
        return f"msgspec accepts, orjson reads {type(doc).__name__} {list(doc)[:20] if type(doc) is dict else ''}"
    for name, value_read in read.items():
        theirs = doc.get(name, "<missing>")
        if repr(theirs) != repr(value_read):  # repr: types, key order and -0.0 too
            return f"{name}: msgspec {value_read!r}, orjson {theirs!r}"
    return None


_BASE = orjson.dumps(_base_doc(tso(1_700_000_000_000), 7, "UPDATE"))
_PIECES = [b"\\", b'"', b"\\u0000", b"\\ud800", b"\\udc00", b"\\ud83d\\ude00", b"\\u0061", b"\x00", b"\x1f", b"\x7f",
           b"\x80", b"\xc0\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xf0\x9f", b"\xef\xbb\xbf", b" ", b"\t", b"\n",
           b"\r", b"\x0b", b"\x0c", b"\xc2\xa0", b",", b":", b"{", b"}", b"[", b"]", b"0", b"-", b"+", b"e", b"E", b".",
           b"9" * 20, b"null", b"true", b"false", b"NaN", b"Infinity", b"1e400", b"/", b"\\/", b"'", b"\\x41", b"\\a",
           b'"type":"DELETE",', b'"_tidb":{"commitTs":7},', b'"data":[{"id":"2"}],', b'"sqlType":"\xff",',
           b'"pkNames":[1e400],', b'"mysqlType":{"id":"\xff"},', b'"sql\\u0054ype":1e400,', b'"es":9223372036854775808,']


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, len(_BASE)), st.sampled_from(_PIECES), st.integers(0, 2)), min_size=1, max_size=3))
def test_what_msgspec_accepts_orjson_reads_the_same(edits: list[tuple[int, bytes, int]]) -> None:
    text = bytearray(_BASE)
    for at, piece, how in edits:
        if how == 0:
            text[at:at] = piece
        elif how == 1:
            text[at:at + len(piece)] = piece
        else:
            del text[at:at + len(piece)]
    assert _disagreement(bytes(text)) is None, bytes(text)


def test_what_msgspec_accepts_orjson_reads_the_same_over_random_edits() -> None:
    rng = random.Random(11)
    for _ in range(100_000):
        text = bytearray(_BASE)
        for _ in range(rng.choice((1, 1, 2, 3))):
            at, piece = rng.randrange(len(text) + 1), rng.choice(_PIECES)
            how = rng.random()
            if how < 0.5:
                text[at:at] = piece
            elif how < 0.8:
                text[at:at + len(piece)] = piece
            else:
                del text[at:at + rng.randint(1, 3)]
        assert _disagreement(bytes(text)) is None, bytes(text)


def test_texts_read_otherwise_by_msgspec_write_the_same_change_log_both_ways(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Escaped names, a name twice across the typed fields, numbers at int64's ends, isDdl spellings,
    whitespace, a second document: each beside the common message, both ways."""
    ts = tso(1_700_000_000_000)
    messages = []
    for i, op in enumerate(("INSERT", "UPDATE", "DELETE")):
        ts += 1
        doc = orjson.dumps(_base_doc(ts, 100 * i + 1, op))

        def sub(old: bytes, new: bytes, doc: bytes = doc) -> bytes:
            assert old in doc, old
            return doc.replace(old, new, 1)
        tidb = b'"_tidb":{"commitTs":%d}' % ts
        texts = [
            sub(b'"type"', b'"t\\u0079pe"'), sub(b'"type"', b'"type\\u0000"'), sub(b'"type"', b'"Type"'),
            sub(b'"id":0,', b'"id":0,"type\\u0000":"DELETE",'), sub(b'"id":0,', b'"id":0,"t\\u0079pe":"DELETE",'),
            sub(b'"id":0,', b'"id":0,%s,' % tidb.replace(b"%d" % ts, b"5")), sub(tidb, tidb + b',"_tidb":{"commitTs":5}'),
            sub(b'"name":"alice"', b'"na\\"me":"alice"'), sub(b'"name":"alice"', b'"n\\u0061me":"alice","name":"bob"'),
            sub(b'"name":"alice"', b'"name":"alice","n\\u0061me":"bob"'), sub(b'"name":"alice"', b'"name":"\\u0000"'),
            sub(b'"name":"alice"', b'"name":null'), sub(b'"name":"alice"', b'"name":""'),
            sub(b'"es":%d' % (ts >> 18), b'"es":-0'), sub(b'"es":%d' % (ts >> 18), b'"es":-9223372036854775808'),
            sub(b'"es":%d' % (ts >> 18), b'"es":-9223372036854775809'), sub(b'"es":%d' % (ts >> 18), b'"es":1E2'),
            sub(b'"es":%d' % (ts >> 18), b'"es":null'), sub(b'"es":%d' % (ts >> 18), b'"es":true'),
            sub(b'"id":0', b'"id":-0'), sub(b'"id":0', b'"id":9223372036854775807'), sub(b'"id":0', b'"id":-9223372036854775809'),
            sub(b'"ts":', b'"ts":1e400,"ts":'), sub(b'"ts":', b'"ts":"x","ts":'), sub(b'"id":0', b'"id":1e400,"id":0'),
            sub(tidb, b'"_tidb":{"commitTs":-0}'), sub(tidb, b'"_tidb":{"commitTs":9223372036854775807}'),
            sub(tidb, b'"_tidb":{"commitTs":9223372036854775808}'), sub(tidb, b'"_tidb":{"commitTs":0%d}' % ts),
            sub(b'"isDdl":false', b'"isDdl":False'), sub(b'"isDdl":false', b'"isDdl":0'), sub(b'"isDdl":false', b'"isDdl":null'),
            sub(b'"isDdl":false', b'"isDdl":"false"'), sub(b'"isDdl":false', b'"isDd\\u006c":false'),
            sub(b'"id":0', b'"id":\x0c0'), sub(b'"id":0', b'"id":\x0b0'), sub(b'"id":0', b'"id":\xc2\xa00'),
            sub(b'"id":0', b'"id"\r\n\t:\t0'), doc + b"\n", doc + b"\n" + doc, doc + b"\r\n" + doc + b"\n",
            sub(b'"sqlType":null', b'"sqlType":null,"sqlType":{"id":-5}'), sub(b'"data":[{', b'"data":[{},{'),
            sub(b'"mysqlType":{', b'"mysqlType":{"id":"int",'), sub(b'"pkNames":["id"]', b'"pkNames":["id","id"]'),
        ]
        for text in texts:
            ts += 1
            messages += [(None, text), (None, orjson.dumps(_base_doc(ts, 1000 + len(messages), op)))]
    for _, text in messages:
        assert _disagreement(text) is None, text
    assert decode_both(tmp_path, [messages], monkeypatch=monkeypatch) > len(messages) // 2


def test_the_same_type_texts_in_another_table_and_after_the_table_changed(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A table's mysqlType/pkNames/sqlType texts met before in another table; a table whose types
    change and change back; across read batches (the fast path's cache outlives a batch)."""
    monkeypatch.setattr(changelog, "READ_BATCH", 3)
    ts = tso(1_700_000_000_000)
    docs = []
    for i in range(40):
        ts += 1
        doc = _base_doc(ts, i, ("INSERT", "UPDATE", "DELETE")[i % 3])
        doc["table"] = ("t", "u")[i % 2]
        if i % 5 == 2:
            doc["mysqlType"]["qty"] = "bigint"
        if i % 7 == 3:
            doc["pkNames"] = ["id", "name"]
        if i % 11 == 4:
            doc["sqlType"] = {"id": -5}
        if i % 13 == 6:
            doc["mysqlType"]["qty"] = 5  # the per-change path's error
        docs.append(doc)
    messages = [(None, orjson.dumps(d)) for d in docs]
    messages.insert(22, (None, messages[21][1].replace(b'"sqlType":null', b'"sqlType":"\xff","sqlType":null')))
    assert decode_both(tmp_path, [messages], monkeypatch=monkeypatch) > 25


# ---------------------------------------------------------------- found here, older than msgspec

def _reordered(doc: dict[str, Any]) -> dict[str, Any]:
    doc["mysqlType"] = dict(reversed(list(doc["mysqlType"].items())))
    return doc


def _two_rows(doc: dict[str, Any]) -> dict[str, Any]:
    doc["data"].append(dict(doc["data"][0], id="99"))
    return doc


@pytest.mark.parametrize("batch", [2, 100])
def test_a_mysql_type_in_another_column_order_after_another_type(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                batch: int) -> None:
    monkeypatch.setattr(changelog, "READ_BATCH", batch)
    ts = tso(1_700_000_000_000)
    changed = _two_rows(_base_doc(ts + 1, 1))  # the per-change path's
    changed["mysqlType"]["qty"] = "bigint"
    docs = [changed, _base_doc(ts + 2, 2), _two_rows(_reordered(_base_doc(ts + 3, 4))), _reordered(_base_doc(ts + 4, 6))]
    decode_both(tmp_path, [[(None, orjson.dumps(d)) for d in docs]], monkeypatch=monkeypatch)
