"""The change feed's ``_commit_ts``: the commitTs of what produced the row (contract §8).

A row a DDL removed (TRUNCATE, DROP TABLE, DROP DATABASE) carries that DDL's commitTs, and a row
whose new column ADD COLUMN ... DEFAULT filled carries the ALTER's -- whether or not its key was
also changed earlier in the window. A key-less table's feed is the same bytes whatever the write
mode and the file layout (compaction in between).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spark.config import MaintenanceConfig
from spark.maintain.run import maintain
from spark.query.changes import read_changes
from tests.spark.archives import T0
from tests.spark.query.test_changes import Lake, rows
from tests.spark.test_schema_evolution import schema

pytestmark = pytest.mark.slow  # whole intervals, Spark or services: make test-fast leaves it out (docs/testing.md)

T = [("id", "int"), ("v", "int")]


@pytest.mark.parametrize("statement", ["TRUNCATE TABLE shop.t", "DROP TABLE shop.t", "DROP DATABASE shop"])
def test_a_row_a_ddl_removed_carries_the_ddls_commit_ts(tmp_path: Path, statement: str) -> None:
    lake = Lake(tmp_path)
    t = lake.create("t", T)
    for i in (1, 2, 3):
        lake.insert(t, id=i, v=i)
    w1 = lake.publish()
    lake.update(t, {"id": 1, "v": 1}, {"id": 1, "v": 10})  # changed earlier in the window, then removed
    t_gone = lake.delete(t, {"id": 2, "v": 2})  # deleted by its own change before the DDL
    lake.h.ddl("shop", "t", statement, kind="DROP" if "DROP" in statement else "QUERY")
    t_ddl = lake.h.ts
    w2 = lake.publish()
    got = rows(read_changes(lake.config, w1, w2), "t")
    assert got == [("delete", t_ddl, {"id": 1, "v": 1}), ("delete", t_gone, {"id": 2, "v": 2}),
                   ("delete", t_ddl, {"id": 3, "v": 3})]


def test_a_key_written_again_after_a_truncate_carries_its_own_change(tmp_path: Path) -> None:
    lake = Lake(tmp_path)
    t = lake.create("t", T)
    lake.insert(t, id=1, v=1)
    lake.insert(t, id=2, v=2)
    w1 = lake.publish()
    lake.h.ddl("shop", "t", "TRUNCATE TABLE shop.t")
    t_truncate = lake.h.ts
    t_again = lake.insert(t, id=1, v=5)
    t_deleted = lake.insert(t, id=2, v=2)
    t_deleted = lake.delete(t, {"id": 2, "v": 2})  # back after the truncate, and deleted again
    w2 = lake.publish()
    assert rows(read_changes(lake.config, w1, w2), "t") == [
        ("update_before", t_again, {"id": 1, "v": 1}), ("update_after", t_again, {"id": 1, "v": 5}),
        ("delete", t_deleted, {"id": 2, "v": 2})]
    assert t_truncate < t_again < t_deleted


def test_a_row_filled_by_add_column_default_carries_the_alters_commit_ts(tmp_path: Path) -> None:
    lake = Lake(tmp_path)
    v1 = lake.create("t", T)
    for i in (1, 2):
        lake.insert(v1, id=i, v=i)
    w1 = lake.publish()
    lake.update(v1, {"id": 1, "v": 1}, {"id": 1, "v": 10})  # updated in the window, then filled
    v2 = schema("shop", "t", [*T, ("flag", "int")])
    lake.ddl("t", "ALTER TABLE shop.t ADD COLUMN flag int NOT NULL DEFAULT 7", v2, v1)
    t_alter = lake.h.ts
    t_after = lake.insert(v2, id=3, v=3, flag=1)  # written after the ALTER: its own
    w2 = lake.publish()
    assert rows(read_changes(lake.config, w1, w2), "t") == [
        ("update_before", t_alter, {"id": 1, "v": 1}), ("update_after", t_alter, {"id": 1, "v": 10, "flag": 7}),
        ("update_before", t_alter, {"id": 2, "v": 2}), ("update_after", t_alter, {"id": 2, "v": 2, "flag": 7}),
        ("insert", t_after, {"id": 3, "v": 3, "flag": 1})]


# ---------------------------------------------------------------- key-less: the same bytes whatever the layout

IMAGES = [{"x": 1, "s": "a"}, {"x": 2, "s": "b"}, {"x": 1, "s": "a "}, {"x": None, "s": "a"}]
step = st.tuples(st.sampled_from(["insert", "delete", "update"]), st.integers(0, len(IMAGES) - 1),
                 st.integers(0, len(IMAGES) - 1))


def _feed(tmp: Path, write_mode: str, history: list[list[tuple[str, int, int]]], compact: bool) -> list[pa.Table]:
    lake = Lake(tmp, "canal-json", write_mode)
    bag = lake.create("bag", [("x", "int"), ("s", "varchar(8)")], keys=())
    held: list[int] = []  # the copies upstream holds, by image
    for run in history:
        for op, i, j in run:
            if op == "insert" or not held:
                lake.insert(bag, **IMAGES[i])
                held.append(i)
            elif op == "delete":
                gone = held.pop(i % len(held))
                lake.delete(bag, IMAGES[gone])
            else:
                k = i % len(held)
                lake.update(bag, IMAGES[held[k]], IMAGES[j])
                held[k] = j
        lake.publish()
    if compact:
        keep = dt.timedelta(days=3650)
        config = dataclasses.replace(lake.config, maintenance=MaintenanceConfig(
            keep_all=keep, keep_hourly=keep, keep_daily=keep, grace_period=dt.timedelta(0), target_file_size=1 << 30))
        maintain(config, now=T0 + dt.timedelta(hours=len(history) + 10))
    ws = [0, *lake.ws]
    return [read_changes(lake.config, a, b)[("shop", "bag")] for a in ws for b in ws if a < b]


@pytest.mark.slow
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(st.lists(st.lists(step, min_size=1, max_size=6), min_size=2, max_size=3))
def test_a_key_less_feed_is_the_same_bytes_in_every_write_mode_and_after_compaction(tmp_path_factory, history) -> None:
    feeds = [_feed(tmp_path_factory.mktemp("k"), mode, history, compact)
             for mode in ("merge-on-read", "copy-on-write") for compact in (False, True)]
    for other in feeds[1:]:
        assert len(other) == len(feeds[0])
        for a, b in zip(feeds[0], other):
            assert a.equals(b), (a.to_pylist(), b.to_pylist())


def test_a_key_less_feed_is_the_same_bytes_in_both_write_modes(tmp_path: Path) -> None:
    """The slow property's first history, in the fast suite."""
    history = [[("insert", 0, 0), ("insert", 0, 0), ("insert", 1, 0), ("insert", 3, 0)],
               [("insert", 0, 0), ("delete", 0, 0), ("update", 1, 2), ("insert", 3, 0)],
               [("update", 0, 1), ("insert", 2, 0)]]
    a = _feed(tmp_path / "mor", "merge-on-read", history, False)
    b = _feed(tmp_path / "cow", "copy-on-write", history, True)
    assert [t.to_pylist() for t in a] == [t.to_pylist() for t in b]
    assert all(x.equals(y) for x, y in zip(a, b))


# ---------------------------------------------------------------- several partition removals in one window

P = [("id", "int"), ("k", "int"), ("v", "int")]  # PRIMARY KEY (id, k): MySQL requires the partitioning columns in every unique key
K = [-7, -1, 0, 1, 2, 3, 4, 5, 6, 7, 9, 10, 12, 15, 19, 20, 25, 33, None]


def _partitioned(lake: Lake, name: str, by: str):
    t = schema("shop", name, P, keys=("id", "k"))
    lake.h.ddl("shop", name, f"CREATE TABLE `shop`.`{name}` (id int, k int, v int, PRIMARY KEY (id, k)) PARTITION BY {by}",
               t, kind="CREATE")
    for i, k in enumerate(K):
        if k is not None:  # a key column is NOT NULL
            lake.insert(t, id=i, k=k, v=0)
    return t


def _alter(lake: Lake, t, clause: str) -> int:
    lake.h.ddl("shop", t.table, f"ALTER TABLE `shop`.`{t.table}` {clause}", t, t, kind="ALTER")
    return lake.h.ts


@pytest.mark.parametrize("before_images", [True, False])
@pytest.mark.parametrize("write_mode", ["merge-on-read", "copy-on-write"])
def test_a_row_a_partition_ddl_removed_carries_the_commit_ts_of_the_one_that_held_it(
        tmp_path: Path, write_mode: str, before_images: bool) -> None:
    """Several partition removals of one table in one window: a removed row carries the commitTs of
    the first one after its last write whose partitions held it then (under the partitioning as the
    window's REORGANIZE / COALESCE / ADD / DROP PARTITION left it), as the reference model says --
    not the window's first removal."""
    from cdc_codecs import Watermark
    from tests.model.oracle import Oracle
    from tests.spark.test_schema_evolution import P as AT
    from tests.spark.test_schema_evolution import per_mark

    lake = Lake(tmp_path, "canal-json", write_mode)
    events: list = []

    def publish() -> int:
        events.extend(lake.h.events)
        w = lake.publish()
        events.append(Watermark(w, AT))  # the mark publish() wrote
        return w

    rg = _partitioned(lake, "rg", "RANGE (`k`) (PARTITION p0 VALUES LESS THAN (5), PARTITION p1 VALUES LESS THAN (10), "
                      "PARTITION p2 VALUES LESS THAN (20), PARTITION p3 VALUES LESS THAN MAXVALUE)")
    ls = _partitioned(lake, "ls", "LIST (`k`) (PARTITION pa VALUES IN (-7, -1, 0, 1, 2), PARTITION pb VALUES IN "
                      "(3, 4, 5, 6, 7), PARTITION pc VALUES IN (9, 10, 12, 15, 19, 20, 25, 33))")
    hs = _partitioned(lake, "hs", "HASH (`k`) PARTITIONS 4")
    rr = _partitioned(lake, "rr", "RANGE COLUMNS (`k`) (PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS "
                      "THAN (20), PARTITION p2 VALUES LESS THAN MAXVALUE)")
    w1 = publish()
    _alter(lake, rg, "TRUNCATE PARTITION p0")
    lake.update(rg, {"id": 13, "k": 15, "v": 0}, {"id": 13, "k": 15, "v": 1})  # written after the first, removed by the second
    _alter(lake, rg, "DROP PARTITION p2")  # its rows (10..19) go; p3 then holds 10 and up
    _alter(lake, rg, "TRUNCATE PARTITION p3")
    _alter(lake, ls, "TRUNCATE PARTITION pa")
    _alter(lake, ls, "DROP PARTITION pb")
    _alter(lake, hs, "TRUNCATE PARTITION p1")  # MOD 4 = 1
    _alter(lake, hs, "COALESCE PARTITION 1")  # now MOD 3
    _alter(lake, hs, "TRUNCATE PARTITION p2")  # MOD 3 = 2, of the rows left
    _alter(lake, rr, "TRUNCATE PARTITION p1")  # 10..19
    # p1's name now means 5..19: its TRUNCATE takes 5..9, which the earlier one did not hold
    _alter(lake, rr, "REORGANIZE PARTITION p0, p1 INTO (PARTITION p0 VALUES LESS THAN (5), PARTITION p1 VALUES LESS "
                     "THAN (20))")
    _alter(lake, rr, "TRUNCATE PARTITION p1")
    w2 = publish()

    oracle, keys_at = Oracle(server="tidb"), {}
    for batch in per_mark(events):
        oracle.add(batch)
        w = oracle.cut([(AT.topic, AT.partition)])
        keys_at[w] = {n: set(t) for n, t in oracle.tables.items()}
    changes = read_changes(lake.config, w1, w2, before_images=before_images)
    got, want = {}, {}
    for t in (rg, ls, hs, rr):
        name = ("shop", t.table)
        d = changes.details[name]
        assert "_commit_ts" not in (d.reason or ""), d.reason  # exact, not the first removal after the last write
        got[t.table] = {(r["id"], r["k"]): r[d.commit_ts_column] for r in changes[name].to_pylist()
                        if r[d.change_type_column] == "delete"}
        gone = keys_at[w1][name] - keys_at[w2][name]  # the model's rows of W1 that W2 lacks
        want[t.table] = {key: oracle.removed_at(name, key, w1, w2) for key in gone}
        # Removals at several commitTs: the window's first removal is not every row's.
        assert len(set(want[t.table].values())) >= 2, t.table
    assert got == want


def test_a_table_whose_partitioning_at_w1_is_not_recorded_keeps_the_first_removal_and_says_so(tmp_path: Path) -> None:
    """A table made before the runs recorded the partitioning per W: its partitioning at W1 is not
    known (today's may differ), so a removed row carries the first removal after its last write, and
    the table's details say so -- no silent guess."""
    import json

    from spark.tables import catalog as cat
    from spark.tables.properties import UPSTREAM_SCHEMA_PREFIX

    lake = Lake(tmp_path, "canal-json")
    rg = _partitioned(lake, "rg", "RANGE (`k`) (PARTITION p0 VALUES LESS THAN (5), PARTITION p1 VALUES LESS THAN MAXVALUE)")
    w1 = lake.publish()
    table = cat.load_table(cat.open_catalog(lake.config), lake.config, "shop", "rg")
    old = {n: json.dumps({k: v for k, v in json.loads(text).items() if k != "partitioning"})
           for n, text in table.properties.items() if n.startswith(UPSTREAM_SCHEMA_PREFIX)}
    assert old
    with table.transaction() as tx:  # as an earlier version recorded it: without the partitioning
        tx.set_properties(old)
    t1 = _alter(lake, rg, "TRUNCATE PARTITION p0")
    t2 = _alter(lake, rg, "TRUNCATE PARTITION p1")
    w2 = lake.publish()
    changes = read_changes(lake.config, w1, w2)
    assert {r["_commit_ts"] for r in changes[("shop", "rg")].to_pylist()} == {t1}  # the first removal after W1
    assert "not recorded" in changes.details[("shop", "rg")].reason
    assert t1 < t2
    # From W2 on the record has it: a later window is exact.
    _alter(lake, rg, "DROP PARTITION p0")  # p1 holds every row
    _alter(lake, rg, "REORGANIZE PARTITION p1 INTO (PARTITION p1 VALUES LESS THAN (10), PARTITION p2 VALUES LESS "
                     "THAN MAXVALUE)")
    lake.insert(rg, id=1, k=15, v=0)
    lake.insert(rg, id=2, k=7, v=0)
    w3 = lake.publish()
    t4 = _alter(lake, rg, "TRUNCATE PARTITION p1")
    t5 = _alter(lake, rg, "TRUNCATE PARTITION p2")
    w4 = lake.publish()
    changes = read_changes(lake.config, w3, w4)
    assert rows(changes, "rg") == [("delete", t5, {"id": 1, "k": 15, "v": 0}), ("delete", t4, {"id": 2, "k": 7, "v": 0})]
    assert "_commit_ts" not in changes.details[("shop", "rg")].reason


def test_rows_no_removal_after_their_write_held_take_the_first_removal_after_it() -> None:
    """Rows of W1 gone at W2 without a change in the log, which a partition removal after their last
    write did not hold: which DDL took them cannot be told, so each takes the first removal after its
    write (two such rows failed on numpy's truth value of an array, found by the model test)."""
    import numpy as np

    from spark.query.changes_removals import Removal, Removals
    from spark.query.changes_ts import deleted_ts

    rows = pa.table({"k": [1, 2, 3]})
    never = Removal(50, lambda t: pa.array([False] * len(t)))
    removals = Removals(at=[never, Removal(70, lambda t: pa.array([False] * len(t)))])
    got = deleted_ts(rows, np.array([0, 2]), None, ["k"], 100, removals, 10)
    assert got.tolist() == [50, 50]
    assert removals.inexact == "2 removed row(s) that no removal after their last write held"
    one = Removals(at=[never])
    assert deleted_ts(rows, np.array([1]), None, ["k"], 100, one, 10).tolist() == [50]
