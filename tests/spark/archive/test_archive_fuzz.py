"""Every archive reader meets crafted bytes with a typed error naming the file (issue 34, item 4; SPEC §6, §9).

Per reader, a record tidelake wrote is mutated thousands of times, structurally (a field
deleted, added, or replaced by a value of another type or out of its range: null, a bool, a
negative or 2**64 int, a float, text that is no number or time, a list, a map, a pickle, deep
nesting; for Parquet files, a column dropped, retyped or filled with crafted changes: an image
that is not a map, DECIMAL text that is not a number, a TIME or date out of range, an unknown
or retired extension) and at random (bytes flipped, cut, inserted, doubled). Each mutation is
read back by the reader a run uses, and what it returns is used as a run uses it: either that
works, or the reader raised its own ``TidelakeError`` subclass naming the file -- never a
``KeyError``, ``TypeError``, ``InvalidOperation``, ``OverflowError`` ..., and never by running
anything (a planted pickle would raise SystemExit). ``FUZZ_CASES`` per reader (``FAST``); the
``many`` tests, in ``make test`` too, five times as many (``MANY``).
"""

from __future__ import annotations

import base64
import copy
import datetime as dt
import json
import os
import pickle
import random
from collections import Counter
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import msgspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cdc_codecs import Column, DdlChange, DecodeError, Op, RawMessage, SourcePosition, TableSchema, TidelakeError
from cdc_codecs.types import parse_mysql_type
from spark.archive.manifest import Gap, Manifest, ManifestError, PartitionRange, Segment
from spark.archive.records import CorruptArchiveFile, CorruptCheckpoint
from spark.archive.storage import LocalStorage
from spark.archive.checkpoint import Checkpoint
from spark.commit.isolation import CorruptIsolatedTables, Isolated, isolated_path, read_isolated, release_hint, write_isolated
from spark.archive.lease import CorruptLease, _path as lease_path, _record as read_lease
from spark.commit.published import (
    CorruptPublishedRecord, PublishedTable, isolated_at, published_path, published_tables, read_published, read_report,
)
from spark.decode.changelog import CHANGE_LOG_SCHEMA, decode_schema, encode_effect, encode_schema, read_change_log
from spark.archive.manifest import SegmentRef
from spark.decode.side_output import DecoderState, SegmentRuns, SideOutput, SideOutputError
from spark.fold.slices import NET_SCHEMA, read_net_change

pytestmark = pytest.mark.slow  # whole intervals, Spark or services: make test-fast leaves it out (docs/testing.md)

FAST = int(os.environ.get("TIDELAKE_FUZZ_CASES", "2000"))
# The slow variants' cases: five times the fast count (ten took 3 minutes of a worker of make test's 30).
MANY = FAST * 5
UTC = dt.timezone.utc
T = dt.datetime(2024, 1, 1, tzinfo=UTC)
COUNTS: Counter[str] = Counter()  # cases per reader, for the note (printed with -s)


class _Planted:
    def __reduce__(self):  # noqa: ANN204
        return (exec, ("raise SystemExit('a planted pickle ran')",))


PICKLE = pickle.dumps(_Planted())
# Values a field may be replaced by: every JSON type, the ends of int64/uint64, text that is no
# number, time or base64, nesting, a base64 pickle.
ODD_VALUES: list[Any] = [
    None, True, False, 0, -1, 1, 2**31, 2**63 - 1, 2**63, 2**64, -(2**63) - 1, 10**400, 1.5, -0.0, 1e308,
    "", "x", "NaN", "Infinity", "-1", "1e999", "2024-13-45T99:99:99", "2024-01-01T00:00:00", "0001-01-01T00:00:00+00:00",
    "\x00", "é🦆", "a/b", "t/99999999999", "decimal(x)", "enum(", "%%%", base64.b64encode(PICKLE).decode(),
    [], [1], ["a", 1, None], [[[[]]]], {}, {"a": 1}, {"": None}, {"format": 3},
]


def _odd(rng: random.Random) -> Any:
    return copy.deepcopy(rng.choice(ODD_VALUES))  # never one object in two places


def _paths(node: Any, at: tuple = ()) -> Iterator[tuple]:
    yield at
    if len(at) > 12:
        return
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*at, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, (*at, i))


def _parent(doc: Any, path: tuple) -> Any:
    for step in path[:-1]:
        doc = doc[step]
    return doc


def mutate_json(doc: Any, rng: random.Random) -> Any:
    """``doc`` (a copy) with one or a few structured changes at random places."""
    doc = json.loads(json.dumps(doc))
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        paths = list(_paths(doc))
        path = rng.choice(paths)
        kind = rng.random()
        if not path:
            doc = _odd(rng) if kind < 0.5 else [doc]
            continue
        parent, key = _parent(doc, path), path[-1]
        if kind < 0.55:
            parent[key] = _odd(rng)
        elif kind < 0.7 and isinstance(parent, dict):
            del parent[key]
        elif kind < 0.75 and isinstance(parent, list):
            del parent[key]
        elif kind < 0.85:
            parent[key] = [parent[key]] if rng.random() < 0.5 else {"v": parent[key]}
        elif kind < 0.9 and isinstance(parent, dict):
            parent[rng.choice(["extra", "", "format", "x" * 40])] = _odd(rng)
        else:  # a deep nest, the last change
            value: Any = parent[key]
            for _ in range(rng.choice((50, 2000))):
                value = [value]
            parent[key] = value
            break
    return doc


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    """``data`` with random damage: bytes flipped, cut, inserted, doubled, or zeroed."""
    b = bytearray(data)
    for _ in range(rng.choice((1, 1, 2, 4, 16))):
        kind = rng.random()
        i = rng.randrange(len(b)) if b else 0
        if kind < 0.4 and b:
            b[i] = rng.randrange(256)
        elif kind < 0.55:
            b = b[:i]
        elif kind < 0.7:
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 9)))
        elif kind < 0.8 and b:
            j = rng.randrange(i, len(b) + 1)
            b[i:i] = b[i:j]
        elif b:
            b[i:i + rng.randrange(1, 9)] = bytes(rng.randrange(1, 9))
    return bytes(b)


def _dumps(doc: Any) -> bytes:
    try:
        return json.dumps(doc, ensure_ascii=False).encode("utf-8", "surrogatepass")
    except RecursionError:
        return b"[" * 100_000


def fuzz_json(name: str, seed_bytes: bytes, read: Callable[[bytes], Any], use: Callable[[Any], Any], error: type[TidelakeError],
              where: str, cases: int) -> Counter[str]:
    """``cases`` mutations of ``seed_bytes`` (two thirds structured, a third random): each reads
    and is used, or fails with ``error`` naming ``where``. Returns how each ended."""
    rng = random.Random(f"{name}-{cases}")
    seed = json.loads(seed_bytes)
    use(read(seed_bytes))  # the record as written reads
    outcomes: Counter[str] = Counter()
    for i in range(cases):
        data = _dumps(mutate_json(seed, rng)) if i % 3 else mutate_bytes(seed_bytes, rng)
        _one(name, data, read, use, error, where, outcomes)
    COUNTS[name] += cases
    return outcomes


def _one(name: str, data: bytes, read: Callable[[bytes], Any], use: Callable[[Any], Any], error: type[TidelakeError],
         where: str, outcomes: Counter[str]) -> None:
    try:
        use(read(data))
        outcomes["read"] += 1
    except error as exc:
        assert where in str(exc), f"{name}: {type(exc).__name__} does not name {where}: {exc}"
        outcomes["refused"] += 1
    except Exception as exc:  # anything else is the bug this test is for
        raise AssertionError(f"{name}: {type(exc).__name__}: {exc!s:.300} for {data[:300]!r}") from exc


# ---------------------------------------------------------------- JSON records


def _manifest() -> Manifest:
    seg = Segment("orders/raw/cdc/0/00000000000000000000-00000000000000000010.parquet", 0, 10, 10, 1234)
    return Manifest("orders", T, T + dt.timedelta(hours=1),
                    (PartitionRange("cdc", 0, 0, 10, None, (seg,), 10, "abc"),
                     PartitionRange("cdc", 1, 5, 5, Gap(3, 5), (), 0, "")), previous="orders/manifests/x.json", created_at=T)


def _use_manifest(m: Manifest) -> None:
    assert all(isinstance(p.start, int) and isinstance(p.topic, str) for p in m.partitions)
    m.ends(), m.starts(), m.messages, m.path, Manifest.from_json(m.to_json(), "again")
    sorted(m.ends().items())


def _checkpoint() -> Checkpoint:
    return Checkpoint(T, T + dt.timedelta(hours=1), 445644800009961472, {("cdc", 0): 10, ("c/d", 1): 20},
                      {("cdc", 0): 3}, ((1700000000001, "shop", "t0", "CREATE TABLE t0 (id int)"), (None, "a", "b", "c")),
                      {("cdc", 0): (SegmentRef("orders/raw/cdc/0/a.parquet", 0, 10),)})


def _use_checkpoint(c: Checkpoint) -> None:
    assert isinstance(c.watermark, int) and all(isinstance(p, int) for _, p in c.marks)
    set(c.ddl_applied), sorted(c.marks.items()), Checkpoint.from_json(c.to_json(), "again"), c.interval_end - c.interval_start
    for refs in (c.segments or {}).values():
        assert all(isinstance(r.path, str) and r.start <= r.end for r in refs)


def _isolated_entry() -> Isolated:
    return Isolated("shop", "t0", 263454720, "20240101T000000.000000Z_20240101T010000.000000Z", "UnsupportedValue",
                    "column 'v' ...", "ALTER TABLE shop.t0 ...", 445644800009961472, "cdc/0@12", None)


def _published() -> bytes:
    doc = {"watermark": 445644800009961472, "interval": "20240101T000000.000000Z_20240101T010000.000000Z",
           "tables": [PublishedTable("shop", "a", "0f8a", 123).to_dict(), PublishedTable("shop", "b", "1e9b", -5).to_dict()],
           "isolated": [_isolated_entry().to_dict()], "published_at": T.isoformat(),
           "caught_up": [{"database": "shop", "table": "c", "at": T.isoformat()}]}
    return json.dumps(doc).encode()


def _use_published(doc: dict) -> None:
    for t in published_tables(doc):
        assert isinstance(t.snapshot, int) and isinstance(t.uuid, str)
    for e in isolated_at(doc).values():
        Isolated.from_dict(e).reason(), release_hint(e), f"{e['held_at']:020d}"
    doc["watermark"] >> 18


def _report() -> bytes:
    return json.dumps({"watermark": 445644800009961472, "outcome": "published", "previous_watermark": 0,
                       "finished_at": T.isoformat(), "isolated": {"shop.t0": {"held_at": 1}}, "tables": {}}).encode()


def _use_report(doc: dict) -> None:
    w = doc["watermark"]
    assert isinstance(w, int) and w >= 0
    (doc.get("previous_watermark") or 0) + 1, doc.get("finished_at", "") >= "", doc.get("outcome") == "published"


def _lease() -> bytes:
    return json.dumps({"owner": "host:1:abcd", "acquired_at": 1700000000.5, "expires_at": 1700000600.5, "released": False}).encode()


def _side_output() -> SideOutput:
    position = SourcePosition("cdc", 0, 7, 1)
    schema = TableSchema("shop", "t", (Column("id", parse_mysql_type("int"), False), Column("d", parse_mysql_type("decimal(12,2)"), True)),
                         ("id",), 3)
    ddl = DdlChange("shop", "t", "ALTER TABLE t ADD d decimal(12,2)", 445644800009961472, position, "ALTER", schema, schema, 1700000000001)
    raw = RawMessage(b"k", b"{not json", SourcePosition("cdc", 0, 8), (("h", b"v"), ("n", None)), 1700000000002)
    error = DecodeError("canal-json", SourcePosition("cdc", 0, 8), "data", "not JSON", raw=raw)
    blob = encode_schema(("id",), {"id": parse_mysql_type("int"), "d": parse_mysql_type("decimal(12,2)")})
    return SideOutput("cdc", 0, 0, 10, "canal-json-2-f5", 10, 9, 9, 445644800009961472, (ddl,), (error,),
                      DecoderState((schema,), 7, (1, "mysql-bin.000001", 4, 0, 2)), {123: blob}, SegmentRuns(0, 1, 9, 2, 4))


def _use_side_output(s: SideOutput) -> None:
    assert isinstance(s.partition, int) and s.start <= s.end
    SideOutput.from_json(s.to_json(), "again")
    for blob in s.schemas.values():
        decode_schema(blob)
    for d in s.ddl:
        d.sql.upper(), d.position.offset + 1, str(d.schema_after and d.schema_after.columns)
    for e in s.errors:
        str(e), e.raw and e.raw.value


class _Memory(LocalStorage):
    """The archive in a dict: the readers read it as they read any storage (thousands of writes a test)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.files: dict[str, bytes] = {}

    def read(self, path: str) -> bytes:
        return self.files[path]

    def write(self, path: str, data: bytes) -> None:
        self.files[path] = data

    def exists(self, path: str) -> bool:
        return path in self.files


def _storage(tmp_path: Path) -> LocalStorage:
    return _Memory(tmp_path)


def _via(storage: LocalStorage, path: str, reader: Callable[[], Any]) -> Callable[[bytes], Any]:
    def read(data: bytes) -> Any:
        storage.write(path, data)
        return reader()

    return read


def _json_readers(tmp_path: Path) -> dict[str, tuple]:
    """name -> (written bytes, read, use, error, where)."""
    storage = _storage(tmp_path)
    url = storage.url
    manifest, cp, so = _manifest(), _checkpoint(), _side_output()
    pub = published_path("orders", 445644800009961472)
    report = "orders/reports/x/apply.json"
    lease = lease_path("orders", 7)
    iso = isolated_path("orders")
    write_isolated(storage, "orders", {("shop", "t0"): _isolated_entry(), ("shop", "t1"): Isolated(
        "shop", "t1", 0, "i", "DdlParseError", "m", involved="shop.t0")})
    return {
        "manifest": (manifest.to_json(), lambda d: Manifest.from_json(d, "orders/manifests/m.json"), _use_manifest,
                     ManifestError, "orders/manifests/m.json"),
        "checkpoint": (cp.to_json(), lambda d: Checkpoint.from_json(d, "orders/checkpoints/c.json"), _use_checkpoint,
                       CorruptCheckpoint, "orders/checkpoints/c.json"),
        "side output": (so.to_json(), lambda d: SideOutput.from_json(d, "orders/changelog/s.json"), _use_side_output,
                        SideOutputError, "orders/changelog/s.json"),
        "published record": (_published(), _via(storage, pub, lambda: read_published(storage, "orders", 445644800009961472)),
                             _use_published, CorruptPublishedRecord, f"{url}/{pub}"),
        "report": (_report(), _via(storage, report, lambda: read_report(storage, report)), _use_report,
                   CorruptPublishedRecord, f"{url}/{report}"),
        "lease file": (_lease(), _via(storage, lease, lambda: read_lease(storage, lease)),
                       lambda r: (r.live(1e9), r.describe(), r.epoch + 1), CorruptLease, f"{url}/{lease}"),
        "isolated tables": (storage.read(iso), _via(storage, iso, lambda: read_isolated(storage, "orders")),
                            lambda d: [(e.reason(), release_hint(e.to_dict()), e.held_at + 1) for e in d.values()],
                            CorruptIsolatedTables, f"{url}/{iso}"),
    }


@pytest.fixture(autouse=True)
def _lease_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A malformed lease record is read again after a pause (a store mid-overwrite, ``lease._record``):
    here every mutation is malformed for good, and the pauses would be the test's whole time."""
    monkeypatch.setattr("spark.archive.lease.REREAD_PAUSE", 0.0)


JSON_READERS = ["manifest", "checkpoint", "side output", "published record", "report", "lease file", "isolated tables"]


@pytest.mark.parametrize("reader", JSON_READERS)
def test_every_json_record_reader_refuses_crafted_bytes_with_a_typed_error_naming_the_file(tmp_path: Path, reader: str) -> None:
    written, read, use, error, where = _json_readers(tmp_path)[reader]
    outcomes = fuzz_json(reader, written, read, use, error, where, FAST)
    assert outcomes["refused"] > FAST // 2, outcomes  # the mutations mostly break the record
    print(f"{reader}: {FAST} cases, {dict(outcomes)}")


@pytest.mark.slow
@pytest.mark.parametrize("reader", JSON_READERS)
def test_every_json_record_reader_many(tmp_path: Path, reader: str) -> None:
    written, read, use, error, where = _json_readers(tmp_path)[reader]
    print(f"{reader}: {MANY} cases, {dict(fuzz_json(reader, written, read, use, error, where, MANY))}")


# ---------------------------------------------------------------- Parquet files and their changes

_Ext = msgspec.msgpack.Ext
_pack = msgspec.msgpack.Encoder().encode
# Changes no decoder writes but MessagePack carries: each must be refused as a change, typed.
CRAFTED_CHANGES: list[bytes] = [
    b"", b"\xc1", b"\x92", _pack(("insert", [1, 2])), _pack(("insert", "image")), _pack(("insert", None)),
    _pack(("merge", {"a": 1})), _pack((1, {"a": 1})), _pack(("insert", {1: 2})), _pack(("insert", {"a": 1}, 3)),
    _pack(["insert"]), _pack({"op": "insert"}), _pack(7),
    _pack(("insert", {"d": _Ext(1, b"not a number")})), _pack(("insert", {"d": _Ext(1, b"1e")})),
    _pack(("insert", {"d": _Ext(1, b"\xff")})), _pack(("insert", {"t": _Ext(5, bytes([25, 0, 0, 0, 0, 0, 0]))})),
    _pack(("insert", {"t": _Ext(5, b"\x01")})), _pack(("insert", {"t": _Ext(9, (2**31 - 1).to_bytes(4, "little") * 3)})),
    _pack(("insert", {"d": _Ext(2, b"\x00" * 11)})), _pack(("insert", {"d": _Ext(4, b"\x00\x00\x0d\x20")})),
    _pack(("insert", {"d": _Ext(8, b"2024-13-01T00:00:00+99:00")})), _pack(("insert", {"n": _Ext(7, b"12x")})),
    _pack(("insert", {"n": _Ext(7, b"9" * 5000)})), _pack(("insert", {"p": _Ext(6, PICKLE)})),
    _pack(("insert", {"u": _Ext(99, b"")})), _pack(("insert", {"l": _Ext(12, b"\xc1")})),
    _pack(("insert", {"e": _Ext(10, b"\xff\xfe")})),
]


def _nested_list(depth: int) -> bytes:
    inner = msgspec.msgpack.Encoder().encode([])
    for _ in range(depth):
        inner = msgspec.msgpack.Encoder().encode([_Ext(12, inner)])[1:]  # fixarray of one ext
        inner = b"\x91" + inner
    return _pack(("insert", {"l": _Ext(12, inner)}))


def mutate_change(blob: bytes, rng: random.Random) -> bytes:
    kind = rng.random()
    if kind < 0.35:
        return rng.choice(CRAFTED_CHANGES)
    if kind < 0.4:
        return _nested_list(rng.choice((10, 3000)))
    if kind < 0.7:  # an image value replaced by any extension with random payload
        return _pack(("update", {"c": _Ext(rng.randrange(0, 20), bytes(rng.randrange(256) for _ in range(rng.randrange(12))))}))
    return mutate_bytes(blob, rng)


def _change_log() -> pa.Table:
    changes = [encode_effect(Op.INSERT, {"id": i, "d": Decimal(f"{i}.50"), "t": dt.timedelta(hours=i), "ts": dt.datetime(2024, 1, 1, i),
                                         "s": "é", "b": b"\x00", "l": [1, "a"]}) for i in range(4)]
    n = len(changes)
    columns: dict[str, Any] = {}
    for f in CHANGE_LOG_SCHEMA:
        if f.name == "change":
            columns[f.name] = pa.array(changes, f.type)
        elif pa.types.is_string(f.type) or pa.types.is_large_string(f.type):
            columns[f.name] = pa.array([f"{f.name}{i}" for i in range(n)], f.type)
        elif pa.types.is_boolean(f.type):
            columns[f.name] = pa.array([i % 2 == 0 for i in range(n)], f.type)
        elif pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type):
            columns[f.name] = pa.array([bytes([i]) for i in range(n)], f.type)
        else:
            columns[f.name] = pa.array(list(range(n)), f.type)
    return pa.table(columns, schema=CHANGE_LOG_SCHEMA)


def _net_change() -> pa.Table:
    log = _change_log()
    extra = {f.name: pa.array([0] * log.num_rows, f.type) for f in NET_SCHEMA if f.name not in log.column_names}
    return pa.table({f.name: log.column(f.name) if f.name in log.column_names else extra[f.name] for f in NET_SCHEMA}, schema=NET_SCHEMA)


def _parquet(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue().to_pybytes()


def mutate_table(table: pa.Table, rng: random.Random) -> bytes:
    """A Parquet file of ``table`` with its columns or its changes crafted, or its bytes damaged."""
    kind = rng.random()
    if kind < 0.45:
        changes = [mutate_change(b, rng) if rng.random() < 0.5 else b for b in table.column("change").to_pylist()]
        return _parquet(table.set_column(table.schema.get_field_index("change"), "change", pa.array(changes, pa.binary())))
    if kind < 0.55:
        return _parquet(table.remove_column(rng.randrange(table.num_columns)))
    if kind < 0.65:
        i = rng.randrange(table.num_columns)
        return _parquet(table.set_column(i, table.schema.field(i).name, pa.array([str(v) for v in table.column(i).to_pylist()])))
    if kind < 0.7:
        return _parquet(table.rename_columns([n.upper() for n in table.column_names]))
    if kind < 0.75:
        return _parquet(pa.table({"a": [1]}))
    return mutate_bytes(_parquet(table), rng)


def fuzz_parquet(name: str, table: pa.Table, read: Callable[[bytes], Any], use: Callable[[Any], Any], where: str,
                 cases: int) -> Counter[str]:
    rng = random.Random(f"{name}-{cases}")
    use(read(_parquet(table)))
    outcomes: Counter[str] = Counter()
    for _ in range(cases):
        _one(name, mutate_table(table, rng), read, use, CorruptArchiveFile, where, outcomes)
    COUNTS[name] += cases
    return outcomes


def _use_rows(table: pa.Table) -> None:
    assert [(f.name, f.type) for f in table.schema] in ([(f.name, f.type) for f in CHANGE_LOG_SCHEMA],
                                                       [(f.name, f.type) for f in NET_SCHEMA])
    table.to_pylist()


def _parquet_readers(tmp_path: Path) -> dict[str, tuple]:
    storage = _storage(tmp_path)
    log, net = "orders/changelog/cdc/0/a.parquet", "orders/net/r/0.parquet"

    def read_net(data: bytes) -> pa.Table:
        storage.write(net, data)
        table = read_net_change(storage, net)
        from spark.decode.effect import CorruptChangeValue, decode_effect

        for blob in table.column("change").to_pylist():  # as the rewrite reads them (plane.SparkFold: named by file)
            try:
                decode_effect(blob)
            except CorruptChangeValue as exc:
                raise CorruptArchiveFile(f"{storage.url}/{net}: damaged net change: {exc}") from None
        return table

    return {
        "change log": (_change_log(), _via(storage, log, lambda: read_change_log(storage, [log])), f"{storage.url}/{log}"),
        "net change": (_net_change(), read_net, f"{storage.url}/{net}"),
    }


PARQUET_READERS = ["change log", "net change"]


@pytest.mark.parametrize("reader", PARQUET_READERS)
def test_every_parquet_reader_refuses_crafted_bytes_and_changes_with_a_typed_error_naming_the_file(tmp_path: Path, reader: str) -> None:
    table, read, where = _parquet_readers(tmp_path)[reader]
    outcomes = fuzz_parquet(reader, table, read, _use_rows, where, FAST)
    assert outcomes["refused"] > FAST // 2, outcomes
    print(f"{reader}: {FAST} cases, {dict(outcomes)}")


@pytest.mark.slow
@pytest.mark.parametrize("reader", PARQUET_READERS)
def test_every_parquet_reader_many(tmp_path: Path, reader: str) -> None:
    table, read, where = _parquet_readers(tmp_path)[reader]
    print(f"{reader}: {MANY} cases, {dict(fuzz_parquet(reader, table, read, _use_rows, where, MANY))}")


def test_the_crafted_changes_are_each_refused_typed() -> None:
    """Each of the hand-made wrong changes alone, read the way the rewrite reads one."""
    from spark.decode.effect import CorruptChangeValue, decode_effect

    for blob in [*CRAFTED_CHANGES, _nested_list(3000)]:
        with pytest.raises(CorruptChangeValue):
            decode_effect(blob)


# ---------------------------------------------------------------- raw segments, streamed


def _raw_segment() -> bytes:
    """A raw segment as landing writes it, in small row groups: damage lands in its pages too,
    which Arrow's reader meets only while it streams them (a bare ``OSError``)."""
    from spark.archive.land import segment_table

    n = 64
    table = segment_table("cdc", 0, list(range(n)), [1700000000000 + i for i in range(n)], [0] * n,
                          [None if i % 3 else b"k%d" % i for i in range(n)],
                          [b'{"id":%d,"data":[{"v":"%s"}]}' % (i, b"x" * (i % 40)) for i in range(n)],
                          [[("h", b"v")] if i % 5 == 0 else [] for i in range(n)])
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd", row_group_size=16)
    return sink.getvalue().to_pybytes()


def test_a_raw_segment_damaged_anywhere_fails_typed_naming_it_while_streamed(tmp_path: Path) -> None:
    from spark.archive.manifest import segment_batches
    from spark.decode.changelog import _RAW_COLUMNS

    storage = LocalStorage(tmp_path)
    path = "orders/segments/cdc/0/00000000000000000000-00000000000000000064.parquet"
    (tmp_path / path).parent.mkdir(parents=True)
    where = f"{storage.url}/{path}"
    data = _raw_segment()

    def read(blob: bytes) -> list[pa.RecordBatch]:
        (tmp_path / path).write_bytes(blob)
        return list(segment_batches(storage, path, list(_RAW_COLUMNS), 7))

    assert sum(b.num_rows for b in read(data)) == 64
    # A page's bytes damaged, the footer whole: Arrow's reader refuses it mid-stream with a bare OSError.
    footer = int.from_bytes(data[-8:-4], "little") + 8
    page = bytearray(data)
    page[len(data) // 3: len(data) // 3 + 200] = b"\xab" * 200
    assert len(data) // 3 + 200 < len(data) - footer
    with pytest.raises(CorruptArchiveFile, match="damaged raw segment") as info:
        read(bytes(page))
    assert where in str(info.value)
    rng = random.Random("raw segment")
    outcomes: Counter[str] = Counter()
    for _ in range(FAST // 4):
        _one("raw segment", mutate_bytes(data, rng), read, lambda batches: [b.to_pylist() for b in batches],
             CorruptArchiveFile, where, outcomes)
    assert outcomes["refused"] > FAST // 8, outcomes


@pytest.mark.parametrize(("error", "storage_s"), [
    (OSError("Couldn't deserialize thrift: TProtocolException: Invalid data"), False),
    (OSError("Corrupt snappy compressed data."), False),
    (OSError(5, "Input/output error"), True),  # the disk's
    (OSError("When reading information for key 'a' in bucket 'b': AWS Error NETWORK_CONNECTION"), True),
    (FileNotFoundError(2, "gone"), True),
])
def test_an_oserror_while_streamed_is_the_files_unless_the_storage_says_it_is_its_own(error: OSError, storage_s: bool) -> None:
    from spark.archive.records import damaged_file

    with pytest.raises(OSError if storage_s else CorruptArchiveFile) as info:
        with damaged_file("s3://b/p.parquet", "raw segment"):
            raise error
    if storage_s:
        assert info.value is error
    else:
        assert str(info.value) == f"s3://b/p.parquet: damaged raw segment: {error}"
