"""Fold slices: a run folded in key-hash slices adds up to the run folded whole."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from cdc_codecs import Op, RowChange, SourcePosition, parse_mysql_type
from spark.decode import changelog
from spark.fold.select import FoldWindow
from spark.fold.slices import EVERYTHING, Slice, _row_groups, add_counts, fold_slice, merge_summaries, read_slice
from spark.net_change import key_hash, table_seed
from spark.storage import LocalStorage

TYPES = {"id": parse_mysql_type("bigint"), "name": parse_mysql_type("varchar(64)")}
TABLES = [("shop", "t"), ("shop", "u"), ("shop.x", "t")]  # a dotted database must not meet shop.x's table t


def random_changes(rng: random.Random, n: int, partition: int) -> list[RowChange]:
    """Inserts, updates (some changing the key: two key effects in two slices) and deletes, in offset order."""
    changes = []
    for offset in range(n):
        database, table = rng.choice(TABLES)
        key, name = rng.randrange(40), f"v{offset}"
        op = rng.choice([Op.INSERT, Op.UPDATE, Op.UPDATE, Op.DELETE])
        before = {"id": rng.choice([key, rng.randrange(40)]), "name": "old"} if op is not Op.INSERT else None
        after = {"id": key, "name": name} if op is not Op.DELETE else None
        changes.append(RowChange(op, database, table, before, after, ("id",), TYPES, rng.randrange(1, 60),
                                 SourcePosition("cdc", partition, offset), None))
    return changes


def write_change_log(storage: LocalStorage, partitions: list[list[RowChange]]) -> list[str]:
    """One change-log file per partition's changes, written by the decoder's writer."""
    paths = []
    for partition, changes in enumerate(partitions):
        path = f"changelog/{partition}.parquet"
        writer = changelog._ChangeLogWriter(storage, path)
        for change in changes:
            writer.add(change)
        writer.close()
        paths.append(path)
    return paths


def assert_slices_add_up(storage: LocalStorage, paths: list[str], window: FoldWindow, count: int) -> None:
    whole = fold_slice(read_slice(storage, paths, window, EVERYTHING))
    parts = [fold_slice(read_slice(storage, paths, window, Slice(i, count))) for i in range(count)]
    assert whole.net.num_rows > 20
    assert net_rows(p.net for p in parts) == net_rows([whole.net])
    assert add_counts(p.counts for p in parts) == add_counts([whole.counts])
    assert merge_summaries(s for p in parts for s in p.summaries) == merge_summaries(whole.summaries)
    # Every key lands in exactly one slice: no slice shares a (table, segment, key) with another.
    keys = [(r["database"], r["table"], r["segment"], r["key"]) for p in parts for r in p.net.to_pylist()]
    assert len(keys) == len(set(keys))


@pytest.fixture
def change_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[LocalStorage, list[str]]:
    """Two partitions' change-log files, written in many small writes."""
    monkeypatch.setattr(changelog, "ROW_GROUP", 64)
    storage = LocalStorage(tmp_path)
    rng = random.Random(5)
    return storage, write_change_log(storage, [random_changes(rng, 600, partition) for partition in range(2)])


WINDOW = FoldWindow(10, 45, {("cdc", 0): (50, 600), ("cdc", 1): (0, 580)},
                    ddl_orders={("shop", "u"): ((30, "cdc", 1, 200, 0),)})


def net_rows(tables) -> list[tuple]:  # noqa: ANN001
    return sorted(tuple(r.values()) for t in tables for r in t.to_pylist())


@pytest.mark.parametrize("count", [2, 3, 16, 40])
def test_slices_add_up_to_the_whole_fold(change_log, count: int) -> None:  # noqa: ANN001
    storage, paths = change_log
    assert_slices_add_up(storage, paths, WINDOW, count)


def test_the_writer_stores_each_rows_key_hash_and_sorts_each_write_into_hash_ranges(change_log) -> None:  # noqa: ANN001
    storage, paths = change_log
    for path in paths:
        table = pq.read_table(storage.arrow_path(path))
        assert all(r["key_hash"] == key_hash(r["key"], table_seed(r["database"], r["table"])) for r in table.to_pylist())
        metadata = pq.ParquetFile(storage.arrow_path(path)).metadata
        assert metadata.num_row_groups > changelog.HASH_RANGES  # several writes of 64 rows, 16 row groups each
        # A slice of 1/16 of the hash space reads about one row group per write, not all of them.
        for index in range(16):
            lo, hi = Slice(index, 16).bounds
            assert len(_row_groups(metadata, lo, hi)) < metadata.num_row_groups / 4


def test_a_key_hash_depends_on_the_table_not_only_the_key() -> None:
    assert key_hash(b"2:n1", table_seed("shop", "t")) != key_hash(b"2:n1", table_seed("shop", "u"))
    assert key_hash(b"2:n1", table_seed("shop.x", "t")) != key_hash(b"2:n1", table_seed("shop", "x.t"))
    assert 0 <= key_hash(b"", table_seed("db", "t")) < 1 << 32


# ---------------------------------------------------------------- slices over awkward keys


def _awkward_changes(rng: random.Random, n: int, partition: int) -> list:
    """Composite keys with NULLs, tables without a key (the whole row is the key), unicode and
    dotted names; updates that change the key (two effects, likely in two slices)."""
    types = {"a": parse_mysql_type("varchar(8)"), "b": parse_mysql_type("bigint"), "v": parse_mysql_type("varchar(8)")}
    tables = [("shop", "t", ("a", "b")), ("ünï.cödé", "t.x", ("a", "b")), ("shop", "nokey", ())]
    changes = []
    for offset in range(n):
        database, table, keys = rng.choice(tables)

        def row() -> dict:
            return {"a": rng.choice(["x", "é", None]), "b": rng.choice([1, 2, None]), "v": rng.choice(["p", "q"])}

        op = rng.choice([Op.INSERT, Op.UPDATE, Op.UPDATE, Op.DELETE])
        before = row() if op is not Op.INSERT else None
        after = row() if op is not Op.DELETE else None
        changes.append(RowChange(op, database, table, before, after, keys, types, rng.randrange(1, 60),
                                 SourcePosition("cdc", partition, offset), None))
    return changes


@pytest.mark.parametrize("statistics", [True, False])
@pytest.mark.parametrize("count", [5, 17])
def test_awkward_keys_fold_the_same_in_slices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count: int,
                                             statistics: bool) -> None:
    monkeypatch.setattr(changelog, "ROW_GROUP", 50)
    if not statistics:  # row groups without key_hash statistics: every slice reads them all
        monkeypatch.setattr(changelog, "_STATISTICS", [s for s in changelog._STATISTICS if s != "key_hash"])
    storage = LocalStorage(tmp_path)
    rng = random.Random(11)
    paths = write_change_log(storage, [_awkward_changes(rng, 400, partition) for partition in range(2)])
    if not statistics:
        md = pq.ParquetFile(storage.arrow_path(paths[0])).metadata
        column = md.schema.names.index("key_hash")
        assert not md.row_group(0).column(column).is_stats_set
    window = FoldWindow(10, 45, {("cdc", 0): (30, 400), ("cdc", 1): (0, 390)},
                        ddl_orders={("ünï.cödé", "t.x"): ((30, "cdc", 0, 200, 0),)})
    assert_slices_add_up(storage, paths, window, count)
