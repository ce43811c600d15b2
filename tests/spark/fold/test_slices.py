"""Fold slices: a run folded in key-hash slices adds up to the run folded whole."""

from __future__ import annotations

import itertools

import random
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_codecs import Op, RowChange, SourcePosition, parse_mysql_type
from spark.decode import changelog
from spark.fold.select import FoldWindow
from spark.fold.slices import EVERYTHING, Slice, slice_row_groups, add_counts, fold_slice, merge_summaries, read_slice
from spark.core.keys import key_hash, table_seed
from spark.archive.storage import LocalStorage

pytestmark = pytest.mark.slow  # whole intervals, Spark or services: make test-fast leaves it out (docs/testing.md)

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
        writer = changelog.ChangeLogWriter(storage, path)
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
    # Every key lands in exactly one slice: no slice shares a (table, segment, key) with another
    # (a key-less image may have two net rows in its slice: copies deleted, then written).
    keys = [{(r["database"], r["table"], r["segment"], r["key"]) for r in p.net.to_pylist()} for p in parts]
    assert sum(map(len, keys)) == len(set().union(*keys))


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
            assert len(slice_row_groups(metadata, lo, hi)) < metadata.num_row_groups / 4


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


# ---------------------------------------------------------------- key-less copies against their transactions


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_key_less_copies_add_up_to_the_transactions_however_they_are_re_sent_and_cut(data: st.DataObject) -> None:
    """Transactions of key-less changes, each with its share on either partition; every share
    sent once in commitTs order, some sent again later (a gap before a re-send, as a watermark or
    another transaction makes one); each partition's change log cut into two segments anywhere.
    The fold's net change per image is the transactions' changes, each once, applied in commitTs
    order (a transaction's deletes, then its writes) to a table holding any number of copies:
    delete up to the deepest deficit D, then write the sum plus D."""
    import tempfile

    from spark.decode.side_output import DecoderState, SideOutput
    from spark.fold.select import link_runs

    images = [{"id": i, "name": "x"} for i in range(3)]
    change = st.tuples(st.sampled_from([Op.INSERT, Op.DELETE, Op.UPDATE]), st.integers(0, 2), st.integers(0, 2),
                       st.integers(0, 1))
    transactions = data.draw(st.lists(st.lists(change, min_size=1, max_size=5), min_size=1, max_size=5), label="transactions")
    steps: dict[int, list[int]] = {}
    shares: list[list[tuple[int, list]]] = [[], []]  # per partition: (commitTs, changes) in sending order
    for n, changes in enumerate(transactions):
        for image in range(3):
            deleted = sum(1 for op, before, _, _ in changes if op is not Op.INSERT and before == image)
            written = sum(1 for op, _, after, _ in changes if op is not Op.DELETE and after == image)
            steps.setdefault(image, []).extend([-deleted, written])
        for partition in (0, 1):
            mine = [c for c in changes if c[3] == partition]
            if mine:
                shares[partition].append((10 * (n + 1), mine))
    for partition in (0, 1):
        sent = shares[partition]
        for again in data.draw(st.lists(st.integers(0, max(0, len(sent) - 1)), max_size=3), label="re-sent") if sent else []:
            sent.append(sent[again])
    with tempfile.TemporaryDirectory() as tmp:
        storage = LocalStorage(tmp)
        paths, sides = [], {}
        for partition, sent in enumerate(shares):
            rows, offset = [], 0
            for i, (commit_ts, changes) in enumerate(sent):
                if i and (sent[i - 1][0] == commit_ts or data.draw(st.booleans(), label="gap")):
                    offset += 1  # a message without rows: a watermark
                for op, before, after, _ in changes:
                    rows.append(RowChange(op, "shop", "bag", images[before] if op is not Op.INSERT else None,
                                          images[after] if op is not Op.DELETE else None, (), TYPES, commit_ts,
                                          SourcePosition("cdc", partition, offset)))
                    offset += 1
            cut = data.draw(st.integers(0, len(rows)), label="segment boundary")
            outputs = []
            for k, part in enumerate((rows[:cut], rows[cut:])):
                path = f"changelog/{partition}-{k}.parquet"
                writer = changelog.ChangeLogWriter(storage, path)
                for r in part:
                    writer.add(r)
                writer.close()
                paths.append(path)
                outputs.append(SideOutput("cdc", partition, 0, 0, "", 0, 0, len(part), None, (), (), DecoderState(), {},
                                          writer.runs))
            sides[("cdc", partition)] = outputs
        window = FoldWindow(0, 1000, {("cdc", 0): (0, 1000), ("cdc", 1): (0, 1000)}, run_links=link_runs(sides))
        net = fold_slice(read_slice(storage, paths, window)).net.to_pylist()
    got = {(changelog.decode_effect(r["change"])[1]["id"], r["deletes"]): r["count"] for r in net}
    truth = {}
    for image, deltas in steps.items():
        deficit = max(0, -min(itertools.accumulate(deltas)))
        truth[(image, True)], truth[(image, False)] = deficit, sum(deltas) + deficit
    assert got == {k: n for k, n in truth.items() if n}


@pytest.mark.parametrize("reader", ["fold", "change feed"])
def test_a_change_log_whose_text_is_not_utf8_is_refused_naming_the_file(tmp_path: Path, reader: str) -> None:
    """Arrow reads Parquet text without checking it is UTF-8: the fold (``read_slice``) and the change
    feed (``touched_slice``) check, and a damaged change log is a ``CorruptArchiveFile`` naming it --
    never rows compared as text that is not (a table's name that matches nothing, dropped silently)."""
    import pyarrow as pa

    from spark.archive.records import CorruptArchiveFile
    from spark.query.changes_log import TouchedTask, touched_slice

    from tests.spark.archives import make_config

    from spark.archive.storage import open_storage

    config = make_config(tmp_path, "canal-json")
    storage = open_storage(config.storage)
    path = "shop/changelog/x.parquet"
    writer = changelog.ChangeLogWriter(storage, path)
    for offset in range(3):
        writer.add(RowChange(Op.INSERT, "shop", "t", None, {"id": offset, "name": "a"}, ("id",), TYPES, 50,
                             SourcePosition("cdc", 0, offset)))
    writer.close()
    table = pq.read_table(storage.arrow_path(path))
    names = pa.Array.from_buffers(pa.string(), 3, [None, pa.py_buffer(bytes([0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0])),
                                                   pa.py_buffer(b"t\xfft")])
    damaged = table.set_column(table.schema.get_field_index("table"), "table", pa.chunked_array([names]))
    pq.write_table(damaged, storage.arrow_path(path))
    window = FoldWindow(0, 100, {("cdc", 0): (0, 3)})
    with pytest.raises(CorruptArchiveFile, match=r"x\.parquet: damaged change log"):
        if reader == "fold":
            list(read_slice(storage, [path], window))
        else:
            touched_slice(TouchedTask(config, (path,), (window,), None))
