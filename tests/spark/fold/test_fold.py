"""The fold on change-log rows: the window a run selects, DDL segments, the greatest change per key."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark.fold.select import APPLY, PENDING, SKIPPED, FoldWindow, select
from spark.core.keys import key_bytes, key_hash
from spark.fold import net_change
from spark.fold.net_change import greatest, sort_for_fold
from tests.model.fold import greatest_per_key


def rows(items: list[tuple]) -> pa.Table:
    """Change-log rows from (topic, partition, offset, index, commit_ts, table, key, deletes)."""
    names = ["topic", "partition", "offset", "index", "commit_ts", "table", "key", "deletes"]
    columns = dict(zip(names, map(list, zip(*items))))
    n = len(items)
    return pa.table({
        "topic": pa.array(columns["topic"], pa.string()), "partition": pa.array(columns["partition"], pa.int32()),
        "offset": pa.array(columns["offset"], pa.int64()), "index": pa.array(columns["index"], pa.int32()),
        "commit_ts": pa.array(columns["commit_ts"], pa.int64()), "database": pa.array(["db"] * n),
        "table": pa.array(columns["table"]), "key": pa.array([key_bytes((k,)) for k in columns["key"]], pa.binary()),
        "deletes": pa.array(columns["deletes"]), "first": pa.array([True] * n),
        "change": pa.array([f"{o}".encode() for o in columns["offset"]], pa.binary()),
        "run": pa.array([-1] * n, pa.int64()),
    })


def test_the_window_lifts_derived_clocks_and_classifies_every_row() -> None:
    table = rows([("tidb", 0, 5, 0, 100, "t", 1, False), ("tidb", 0, 6, 0, 300, "t", 2, False),
                  ("tidb", 0, 7, 0, 50, "t", 3, False), ("tidb", 0, 2, 0, 150, "t", 4, False),  # before pending: not read
                  ("mysql", 0, 0, 0, 10, "t", 5, False), ("mysql", 0, 1, 0, 250, "t", 6, False)])
    window = FoldWindow(w_prev=99, w=200, offsets={("tidb", 0): (5, 10), ("mysql", 0): (0, 10)},
                        derived_topics=frozenset({"mysql"}))
    out = select(table, window).to_pylist()
    assert [(r["topic"], r["offset"], r["ts"], r["state"]) for r in out] == [
        ("tidb", 5, 100, APPLY), ("tidb", 6, 300, PENDING), ("tidb", 7, 50, SKIPPED),
        ("mysql", 0, 100, APPLY),  # a derived clock below W_prev + 1 is lifted to it: never "already applied"
        ("mysql", 1, 250, PENDING)]


def test_rows_after_a_ddl_of_their_table_in_commit_order_are_in_its_next_segment() -> None:
    table = rows([("p", 0, 1, 0, 100, "t", 1, False), ("p", 0, 3, 0, 100, "t", 1, False),
                  ("p", 0, 3, 1, 100, "t", 1, False), ("p", 0, 9, 0, 300, "t", 1, False), ("p", 0, 4, 0, 100, "u", 1, False)])
    # Two DDLs of t: one sharing commitTs 100 with rows (derived clocks do that), after offset 3 index 0.
    window = FoldWindow(0, 1000, {("p", 0): (0, 100)}, ddl_orders={("db", "t"): ((100, "p", 0, 3, 0), (200, "p", 0, 5, 0))})
    assert [(r["table"], r["offset"], r["index"], r["segment"]) for r in select(table, window).to_pylist()] == [
        ("t", 1, 0, 0), ("t", 3, 0, 0), ("t", 3, 1, 1), ("t", 9, 0, 2), ("u", 4, 0, 0)]


# Names that differ by case, accents, a NUL inside or at the end (numpy's fixed-width comparison drops
# trailing NULs: the window compared as objects took "t" for "t\x00"), or are empty.
_NAMES = ["t", "T", "é", "t\u00e9", "ü ber", "`x`", "a\x00b", "t\x00", "", "\x00"]


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_the_window_matches_a_row_by_row_reading_of_its_rules(data: st.DataObject) -> None:
    """``select`` against the rules read one row at a time, over topics, partitions, tables of two
    databases (names differing by case, accents, NUL), DDL orders and derived clocks -- a name the
    window holds with a lone surrogate matches no row."""
    topics = ["tidb", "mysql", "m\u00fcsql", "tidb\x00"]
    row = st.tuples(st.sampled_from(topics), st.integers(0, 2), st.integers(0, 30), st.integers(0, 2), st.integers(0, 400),
                    st.sampled_from(["db", "DB", "d\u00e9"]), st.sampled_from(_NAMES), st.booleans(), st.integers(-1, 3))
    items = data.draw(st.lists(row, min_size=1, max_size=40))
    offsets = {(t, p): data.draw(st.tuples(st.integers(0, 10), st.integers(10, 31)))
               for t in topics for p in range(3) if data.draw(st.booleans())}
    order = st.tuples(st.integers(0, 400), st.sampled_from(topics), st.integers(0, 2), st.integers(0, 30), st.integers(0, 2))
    ddl_orders = {(d, n): tuple(sorted(data.draw(st.lists(order, min_size=1, max_size=3))))
                  for d, n in data.draw(st.lists(st.tuples(st.sampled_from(["db", "DB", "d\u00e9"]),
                                                           st.sampled_from([*_NAMES, "t\ud800"])), max_size=4))}
    derived = frozenset(data.draw(st.lists(st.sampled_from(topics), max_size=2)))
    w_prev = data.draw(st.integers(-1, 200))
    window = FoldWindow(w_prev, data.draw(st.integers(w_prev, 400)), offsets, derived, ddl_orders)
    n = len(items)
    table = pa.table({
        "topic": pa.array([i[0] for i in items]), "partition": pa.array([i[1] for i in items], pa.int32()),
        "offset": pa.array([i[2] for i in items], pa.int64()), "index": pa.array([i[3] for i in items], pa.int32()),
        "commit_ts": pa.array([i[4] for i in items], pa.int64()), "database": pa.array([i[5] for i in items]),
        "table": pa.array([i[6] for i in items]), "key": pa.array([b"k"] * n, pa.binary()),
        "deletes": pa.array([i[7] for i in items]), "first": pa.array([True] * n),
        "change": pa.array([b"c"] * n, pa.binary()), "run": pa.array([i[8] for i in items], pa.int64()),
    })
    expected = []
    for topic, partition, offset, index, commit_ts, database, name, deletes, run in items:
        lo, hi = offsets.get((topic, partition), (0, 0))
        if not lo <= offset < hi:
            continue
        ts = max(commit_ts, w_prev + 1) if topic in derived else commit_ts
        state = PENDING if ts > window.w else SKIPPED if ts <= w_prev else APPLY
        at = (ts, topic, partition, offset, index)
        segment = sum(1 for o in ddl_orders.get((database, name), ()) if at > o)
        rank = net_change.WRITE_RANK if topic not in derived and not deletes else net_change.DELETE_RANK
        settled = net_change.EVERY_CHANGE if run >= 0 and topic in derived else run
        expected.append((topic, partition, offset, database, name, ts, state, segment, rank, settled))
    got = [(r["topic"], r["partition"], r["offset"], r["database"], r["table"], r["ts"], r["state"], r["segment"], r["rank"], r["run"])
           for r in select(table, window).to_pylist()]
    assert got == expected


@pytest.mark.parametrize("batch", [1, 2, 3, 7, 1000])
def test_the_greatest_change_per_key_wins_whatever_the_batches(batch: int) -> None:
    rng = random.Random(batch)
    items = [("p", rng.randrange(2), offset, rng.randrange(2), rng.randrange(5), "t", rng.randrange(6), rng.random() < 0.3)
             for offset in range(200)]
    selected = select(rows(items), FoldWindow(-1, 10, {("p", 0): (0, 1000), ("p", 1): (0, 1000)}))
    ordered = sort_for_fold(selected)
    folded = pa.Table.from_batches(list(greatest_per_key(ordered.to_batches(max_chunksize=batch))), ordered.schema)
    # ``greatest``'s own group starts keep the same rows, whatever the batches.
    starts = list(net_change._group_starts(ordered.select(list(net_change.GROUP_COLUMNS)).to_batches(max_chunksize=batch)))
    assert ordered.filter(pa.array(np.concatenate(starts))).equals(folded)
    # The reference: per key, the change with the greatest (commitTs, topic, partition, offset, index),
    # a write of the key above a delete of it within one commitTs (one TiDB transaction).
    want: dict[bytes, tuple] = {}
    for r in selected.to_pylist():
        order = (r["ts"], not r["deletes"], r["topic"], r["partition"], r["offset"], r["index"])
        if r["key"] not in want or order > want[r["key"]]:
            want[r["key"]] = order
    got = {r["key"]: (r["ts"], not r["deletes"], r["topic"], r["partition"], r["offset"], r["index"]) for r in folded.to_pylist()}
    assert folded.num_rows == len(got) == len(want) and got == want


@pytest.mark.parametrize("chunk", [1, 3, 17, 1000])
@pytest.mark.parametrize("hashed", [True, False])
def test_greatest_keeps_the_rows_the_per_key_rule_keeps_whatever_the_chunks(chunk: int, hashed: bool) -> None:
    """``greatest`` (the fold's: a narrow sort, the key's hash first, images taken once) against
    the rule applied batch by batch, on rows in chunks that cut groups, with and without key_hash."""
    rng = random.Random(chunk)
    items = [("p", rng.randrange(2), offset, rng.randrange(2), rng.randrange(5), rng.choice("tu"), rng.randrange(9),
              rng.random() < 0.3) for offset in range(300)]
    selected = select(rows(items), FoldWindow(-1, 10, {("p", 0): (0, 1000), ("p", 1): (0, 1000)}))
    if hashed:
        # A few hashes shared by different keys (as CRC-32 collisions are): the key still decides.
        selected = selected.append_column("key_hash", pa.array([key_hash(k, 0) % 4 for k in selected.column("key").to_pylist()], pa.int64()))
    chunked = pa.Table.from_batches(selected.to_batches(max_chunksize=chunk), selected.schema)
    reference = pa.Table.from_batches(list(greatest_per_key(sort_for_fold(selected).to_batches(max_chunksize=5))), selected.schema)
    by = [("table", "ascending"), ("key", "ascending")]
    assert greatest(chunked).sort_by(by).equals(reference.sort_by(by))
    assert greatest(chunked.slice(0, 0)).num_rows == 0


def fold(table: pa.Table, window: FoldWindow) -> list[tuple]:
    folded = greatest_per_key(sort_for_fold(select(table, window)).to_batches())
    return sorted((r["topic"], r["key"], r["offset"], r["deletes"]) for b in folded for r in b.to_pylist())


def test_within_one_commit_ts_a_write_of_a_key_wins_over_a_delete_of_it_on_any_partition() -> None:
    # One TiDB transaction at commitTs 100: key 1 moved to key 2 (partition 1: delete 1, write 2) and
    # a new key 1 inserted (partition 0, earlier offset). A later commitTs still decides as usual.
    table = rows([("tidb", 0, 0, 0, 100, "t", 1, False), ("tidb", 1, 5, 0, 100, "t", 1, True),
                  ("tidb", 1, 5, 1, 100, "t", 2, False),
                  ("tidb", 0, 1, 0, 100, "t", 3, False), ("tidb", 1, 6, 0, 101, "t", 3, True)])
    window = FoldWindow(0, 200, {("tidb", 0): (0, 10), ("tidb", 1): (0, 10)})
    assert fold(table, window) == [("tidb", key_bytes((1,)), 0, False), ("tidb", key_bytes((2,)), 5, False),
                                   ("tidb", key_bytes((3,)), 6, True)]


def test_on_a_derived_clock_offsets_decide_within_one_ts() -> None:
    # No commitTs: the lifted clock gives both changes one ts; the binlog's order (offsets) decides.
    table = rows([("mysql", 0, 0, 0, 10, "t", 1, False), ("mysql", 0, 1, 0, 10, "t", 1, True)])
    window = FoldWindow(50, 200, {("mysql", 0): (0, 10)}, derived_topics=frozenset({"mysql"}))
    assert fold(table, window) == [("mysql", key_bytes((1,)), 1, True)]


def test_a_key_less_image_counts_each_change_once_per_copy_of_its_transaction() -> None:
    from spark.fold.slices import fold_slice

    items = [  # (topic, partition, offset, index, commit_ts, table, key, deletes) and the row's run
        (("tidb", 0, 0, 0, 100, "bag", 1, False), 0), (("tidb", 0, 1, 0, 100, "bag", 1, False), 0),
        (("tidb", 0, 2, 0, 100, "bag", 2, True), 0), (("tidb", 0, 3, 0, 100, "bag", 3, True), 0),
        (("tidb", 0, 4, 0, 100, "bag", 3, True), 0),
        # the changefeed re-sends commitTs 100 on partition 0: a second run, the same copies
        (("tidb", 0, 6, 0, 100, "bag", 1, False), 6), (("tidb", 0, 7, 0, 100, "bag", 1, False), 6),
        (("tidb", 0, 8, 0, 100, "bag", 2, True), 6),
        (("tidb", 1, 0, 0, 100, "bag", 1, False), 0),  # the same transaction's share on partition 1
        # image 2 back: a copy deleted (if there was one), then one written -- the table holds one
        # either way (a DELETE of a row that is not there changes nothing)
        (("tidb", 0, 9, 0, 200, "bag", 2, False), 9),
        # no commitTs: every delivered row counts, whatever its run
        (("mysql", 0, 0, 0, 10, "bag", 4, False), 0), (("mysql", 0, 1, 0, 10, "bag", 4, False), 1),
    ]
    table = rows([i for i, _ in items])
    table = table.set_column(table.schema.get_field_index("run"), "run", pa.array([r for _, r in items], pa.int64()))
    window = FoldWindow(0, 1000, {("tidb", 0): (0, 100), ("tidb", 1): (0, 100), ("mysql", 0): (0, 100)},
                        derived_topics=frozenset({"mysql"}))
    net = fold_slice([select(table.append_column("schema_id", pa.array([0] * table.num_rows, pa.int64())), window)]).net
    assert sorted((r["key"], r["deletes"], r["count"]) for r in net.to_pylist()) == [
        (key_bytes((1,)), False, 3), (key_bytes((2,)), False, 1), (key_bytes((2,)), True, 1), (key_bytes((3,)), True, 2),
        (key_bytes((4,)), False, 2)]


def test_a_key_less_delete_removes_a_copy_only_while_one_is_there() -> None:
    """A key-less image's changes apply in order: a delete beyond the copies there are removes
    nothing, and never a copy written after it (net: delete up to the deepest deficit, then write
    what is left)."""
    from spark.fold.slices import fold_slice

    items = [  # no commitTs: every delivered row is a step, in offset order
        ("mysql", 0, 0, 0, 10, "bag", 1, True), ("mysql", 0, 1, 0, 10, "bag", 1, True),
        ("mysql", 0, 2, 0, 10, "bag", 1, False),  # image 1: -1 -1 +1: up to 2 go, 1 comes
        ("mysql", 0, 3, 0, 10, "bag", 2, False), ("mysql", 0, 4, 0, 10, "bag", 2, True),  # image 2: +1 -1: nothing
        ("mysql", 0, 5, 0, 10, "bag", 3, False), ("mysql", 0, 6, 0, 10, "bag", 3, True),
        ("mysql", 0, 7, 0, 10, "bag", 3, True),  # image 3: +1 -1 -1: up to 1 goes
    ]
    table = rows(items).set_column(rows(items).schema.get_field_index("run"), "run", pa.array([0] * len(items), pa.int64()))
    window = FoldWindow(0, 1000, {("mysql", 0): (0, 100)}, derived_topics=frozenset({"mysql"}))
    net = fold_slice([select(table.append_column("schema_id", pa.array([0] * table.num_rows, pa.int64())), window)]).net
    assert sorted((r["key"], r["deletes"], r["count"]) for r in net.to_pylist()) == [
        (key_bytes((1,)), False, 1), (key_bytes((1,)), True, 2), (key_bytes((3,)), True, 1)]
