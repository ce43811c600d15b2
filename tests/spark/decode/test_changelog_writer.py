"""The raw read's batches, and the change-log writer's file layout (docs/archive.md, "Change log"), whatever its Parquet encodings:
each write of up to ROW_GROUP rows in offset order, sorted by ``key_hash`` (stable), cut into
HASH_RANGES row groups; statistics on the listed columns only; every value as given."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from cdc_codecs import Op, RowChange, SourcePosition, parse_mysql_type
from spark.archive.land import segment_table
from spark.archive.storage import LocalStorage
from spark.decode import changelog
from spark.decode.changelog import CHANGE_LOG_SCHEMA, HASH_RANGES, encode_effect, read_change_log

TOPIC = "cdc"
TYPES = {"id": parse_mysql_type("bigint"), "name": parse_mysql_type("varchar(64)")}
I64 = np.iinfo(np.int64)


def _stamp(offset: Any) -> Any:
    """A commitTs every 3 offsets: runs of key-less rows go on across column-wise rows."""
    return 450_000_000_000_000_000 + (offset // 3) * 17


def _table(rng: np.random.Generator, offsets: np.ndarray, table: str) -> pa.Table:
    """Keyed column-wise rows (as spark/decode/batch.py hands them over), one per offset, with
    hashes that repeat (a stable sort keeps their offset order) and reach the int64 extremes."""
    n = len(offsets)
    hashes = rng.choice(np.array([I64.min, I64.max, -1, 0, 1, 7, 7, 7], np.int64), n) if rng.random() < 0.3 \
        else rng.integers(I64.min, I64.max, n, dtype=np.int64, endpoint=True)
    stamps = np.where(rng.random(n) < 0.1, I64.max, _stamp(offsets))
    return pa.Table.from_arrays([
        pa.array([TOPIC] * n, pa.string()), pa.array([2] * n, pa.int32()), pa.array(offsets, pa.int64()),
        pa.array(np.zeros(n, np.int32)), pa.array(stamps, pa.int64()), pa.array(["shop"] * n, pa.string()),
        pa.array([table] * n, pa.string()), pa.array([b"k%d" % o for o in offsets], pa.binary()),
        pa.array(np.zeros(n, bool)), pa.array(np.ones(n, bool)),
        pa.array([encode_effect(Op.INSERT, {"id": int(o), "name": "x" * int(rng.integers(0, 300))}) for o in offsets], pa.binary()),
        pa.array(rng.choice(np.array([I64.min, 5, I64.max], np.int64), n)), pa.array(hashes, pa.int64()),
        pa.array(np.full(n, -1), pa.int64()),
    ], schema=CHANGE_LOG_SCHEMA)


def _change(offset: int, commit_ts: int, keyless: bool) -> RowChange:
    keys, after = ((), {"id": offset % 5, "name": "bag"}) if keyless else (("id",), {"id": offset, "name": "n"})
    return RowChange(Op.INSERT, "shop", "bag" if keyless else "t", None, after, keys, TYPES, commit_ts,
                     SourcePosition(TOPIC, 2, offset))


@pytest.mark.parametrize("row_group", [50, 37, 20_000])
def test_each_write_is_its_offset_ordered_rows_sorted_by_hash_in_hash_range_row_groups(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, row_group: int) -> None:
    monkeypatch.setattr(changelog, "ROW_GROUP", row_group)
    rng = np.random.default_rng(row_group)
    storage = LocalStorage(str(tmp_path))
    writer = changelog.ChangeLogWriter(storage, "c.parquet")
    offset, given = (1 << 58), []
    for step in range(60):  # column-wise tables between per-change rows, as _decode_segment hands them over
        if step % 3:
            n = int(rng.integers(1, 90))
            given.append(_table(rng, np.arange(offset, offset + n), "wide" if step % 2 else "t"))
            writer.add_table(given[-1])
            offset += n
        else:
            for _ in range(int(rng.integers(0, 4))):
                writer.add(_change(offset, _stamp(offset), keyless=bool(rng.random() < 0.5)))
                offset += int(rng.integers(1, 3))
    writer.close()

    source = pq.ParquetFile(tmp_path / "c.parquet")
    assert source.schema_arrow == CHANGE_LOG_SCHEMA
    in_order = read_change_log(storage, ["c.parquet"])  # message order: offset, index, deletes descending
    assert in_order.equals(pq.read_table(tmp_path / "c.parquet").sort_by(
        [("offset", "ascending"), ("index", "ascending"), ("deletes", "descending")]))
    assert in_order.num_rows == writer.rows
    # A key-less row's run: the offset of the first of the offset-contiguous rows at its commitTs around it.
    run, last = None, None
    for row in in_order.select(["offset", "commit_ts", "table", "run"]).to_pylist():
        if last is None or row["commit_ts"] != last["commit_ts"] or row["offset"] - last["offset"] > 1:
            run = row["offset"]
        assert row["run"] == (run if row["table"] == "bag" else -1), row
        last = row
    # The column-wise rows come back exactly as given.
    given_rows = pa.concat_tables(given)
    assert in_order.filter(pc.is_in(in_order.column("offset"), given_rows.column("offset"))).equals(given_rows)
    # Each write: ROW_GROUP rows in message order, sorted by key_hash (ties in message order), in
    # HASH_RANGES row groups of ceil(rows / HASH_RANGES) rows.
    expected = []
    for start in range(0, in_order.num_rows, row_group):
        write = in_order.slice(start, row_group)
        write = write.take(np.argsort(write.column("key_hash").to_numpy(), kind="stable"))
        size = -(-write.num_rows // HASH_RANGES)
        expected += [write.slice(i, size) for i in range(0, write.num_rows, size)]
    assert source.num_row_groups == len(expected)
    for i, want in enumerate(expected):
        got = source.read_row_group(i)
        assert got.equals(want), i
        meta = source.metadata.row_group(i)
        for c, name in enumerate(CHANGE_LOG_SCHEMA.names):
            stats = meta.column(c).statistics
            if name not in changelog._STATISTICS:
                assert not meta.column(c).is_stats_set, name
                continue
            assert stats is not None and stats.has_min_max and stats.null_count == 0, name
            column = want.column(name)
            assert (stats.min, stats.max) == (pc.min(column).as_py(), pc.max(column).as_py()), (i, name)


def test_the_hash_order_is_the_stable_argsort_of_the_hashes() -> None:
    rng = np.random.default_rng(37)
    extremes = np.array([I64.min, I64.min + 1, -1, 0, 1, I64.max - 1, I64.max], np.int64)
    for trial in range(2000):
        n = int(rng.integers(0, 200))
        hashes = [rng.integers(-3, 3, n), rng.integers(I64.min, I64.max, n, endpoint=True), rng.choice(extremes, n),
                  rng.permutation(np.repeat(rng.integers(I64.min, I64.max, n // 4 + 1), 4)[:n])][trial % 4].astype(np.int64)
        assert changelog._hash_order(hashes).tolist() == np.argsort(hashes, kind="stable").tolist(), hashes


def test_a_raw_batch_item_is_its_column_value_read_one_by_one_or_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """``RawBatch.item`` (a column-wise batch's few per-change messages) reads what ``column`` does,
    one by one for the first few of a column, then from the whole column converted."""
    monkeypatch.setattr(changelog, "_ONE_BY_ONE", 3)
    headers = [None, [{"key": "trace", "value": b"\x00\x01"}, {"key": "none", "value": None}], [], None, None, None]
    table = segment_table(TOPIC, 3, list(range(10, 16)), [7, None, 9, 10, 11, 12], [0] * 6,
                          [b"k", None, b"k2", None, b"k4", b""], [b"v0", b"v1", None, b"v3", b"v4", b"v5"], headers)
    no_headers = segment_table(TOPIC, 3, list(range(2)), [1, 2], [0] * 2, [None, None], [b"a", b"b"], [None, None])
    for source in (table, no_headers):
        batch = source.select(list(changelog._RAW_COLUMNS)).to_batches()[0]
        one, whole = changelog.RawBatch(batch), changelog.RawBatch(batch)
        order = [4, 0, 1, 5, 2, 3][:len(batch)] if len(batch) > 2 else [1, 0]  # three one by one, then converted
        for name in changelog._RAW_COLUMNS:
            expected = whole.column(name)
            got = [one.item(name, i) for i in order]
            assert got == [expected[i] if expected is not None else None for i in order], name
