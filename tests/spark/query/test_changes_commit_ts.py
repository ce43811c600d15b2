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
