"""The change feed (``spark.query.changes.read_changes``): the net changes of every table between two published Ws.

Scripted histories, one per kind of window: row changes and key changes, ADD / DROP / RENAME
COLUMN, RENAME / DROP / CREATE / TRUNCATE TABLE, a gh-ost cut-over, key-less tables (copies
counted), both write modes, compaction moving the tags, isolated tables, retired Ws and archive
retention. Each expectation is written out by hand from the history; ``changes_invariant``
checks the same rules against the reference model in the state machine (``test_operations``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path
from typing import Any

import orjson
import pytest

from cdc_codecs import Op, get_encoder
from cdc_codecs.events import TableSchema
from spark.query import changes_read
from spark.archive import layout
from spark.commit.apply import apply_interval
from spark.query.changes import KEYS, NOTHING, WHOLE, ChangesError, ChangesUnavailable, read_changes
from spark.config import WRITE_MODES, LayoutConfig, MaintenanceConfig
from spark.maintain.run import maintain
from spark.commit.published import read_published, retired_watermarks
from spark.query.read import IsolatedTable, NoSuchWatermark, RetiredWatermark, read_table
from spark.archive.storage import open_storage

from tests.spark.archives import HOUR, T0, ArchiveWriter, make_config
from tests.spark.test_isolation import _fixed
from tests.spark.test_schema_evolution import History, schema

pytestmark = pytest.mark.slow  # whole intervals, Spark or services: make test-fast leaves it out (docs/testing.md)


class Lake:
    """A pipeline over one topic whose upstream history the test writes; ``publish`` lands and applies it."""

    def __init__(self, tmp: Path, protocol: str = "canal-json", write_mode: str = "merge-on-read",
                 policy: str = "fail", partitions: int = 2) -> None:
        config = make_config(tmp, protocol)
        self.config = dataclasses.replace(config, layout=LayoutConfig(write_mode=write_mode), on_table_error=policy)
        self.storage = open_storage(self.config.storage)
        self.partitions = partitions
        self.writer = ArchiveWriter(self.config, self.storage, {"cdc": partitions})
        self.encoder = get_encoder(protocol)
        self.h = History()
        self.ws: list[int] = []

    def publish(self) -> int:
        w = self.h.mark()
        i = len(self.ws)
        self.writer.interval(T0 + i * HOUR, T0 + (i + 1) * HOUR,
                             [("cdc", r) for r in self.encoder.encode_all(self.h.events, self.partitions)])
        self.h.events = []
        assert apply_interval(self.config, T0 + i * HOUR, T0 + (i + 1) * HOUR).watermark == w
        self.ws.append(w)
        return w

    def create(self, table: str, columns: list[tuple[str, str]], keys: tuple[str, ...] = ("id",),
               database: str = "shop") -> TableSchema:
        s = schema(database, table, columns, keys=keys)
        cols = ", ".join(f"`{n}` {t}" for n, t in columns)
        key = f", PRIMARY KEY ({', '.join(keys)})" if keys else ""
        self.h.ddl(database, table, f"CREATE TABLE `{database}`.`{table}` ({cols}{key})", s, kind="CREATE")
        return s

    def ddl(self, table: str, sql: str, after: TableSchema | None = None, before: TableSchema | None = None) -> None:
        self.h.ddl("shop", table, sql, after, before, kind="ALTER")

    def insert(self, s: TableSchema, /, **row: Any) -> int:
        self.h.row(Op.INSERT, s, None, row)
        return self.h.ts

    def update(self, s: TableSchema, before: dict, after: dict) -> int:
        self.h.row(Op.UPDATE, s, before, after)
        return self.h.ts

    def delete(self, s: TableSchema, row: dict) -> int:
        self.h.row(Op.DELETE, s, row, None)
        return self.h.ts


def rows(changes: Any, table: str) -> list[tuple]:
    """(change type, commitTs, the row's non-NULL columns) of one table's changes, in their order."""
    d = changes.details[("shop", table)]
    out = []
    for r in changes[("shop", table)].to_pylist():
        rest = {k: v for k, v in r.items() if k not in (d.change_type_column, d.commit_ts_column) and v is not None}
        out.append((r[d.change_type_column], r[d.commit_ts_column], rest))
    return out


ITEMS = [("id", "int"), ("qty", "int"), ("note", "varchar(8)")]


@pytest.mark.parametrize("write_mode", WRITE_MODES)
@pytest.mark.parametrize("protocol", ["canal-json", "simple", "debezium"])
def test_row_and_key_changes_net_out_per_key(tmp_path: Path, protocol: str, write_mode: str) -> None:
    lake = Lake(tmp_path, protocol, write_mode)
    items = lake.create("items", ITEMS)
    other = lake.create("other", ITEMS)
    for i in range(1, 5):
        lake.insert(items, id=i, qty=i, note="a")
    lake.insert(other, id=1, qty=1, note="a")
    w1 = lake.publish()
    t_update = lake.update(items, {"id": 1, "qty": 1, "note": "a"}, {"id": 1, "qty": 10, "note": "a"})
    t_delete = lake.delete(items, {"id": 2, "qty": 2, "note": "a"})
    t_insert = lake.insert(items, id=5, qty=5, note="b")
    lake.update(items, {"id": 3, "qty": 3, "note": "a"}, {"id": 3, "qty": 30, "note": "a"})
    lake.update(items, {"id": 3, "qty": 30, "note": "a"}, {"id": 3, "qty": 3, "note": "a"})  # and back: no change
    t_move = lake.update(items, {"id": 4, "qty": 4, "note": "a"}, {"id": 6, "qty": 4, "note": "a"})  # a key change
    lake.insert(items, id=7, qty=7, note="c")
    lake.delete(items, {"id": 7, "qty": 7, "note": "c"})  # came and went: no change
    w2 = lake.publish()
    t_again = lake.update(items, {"id": 1, "qty": 10, "note": "a"}, {"id": 1, "qty": 11, "note": "a"})
    w3 = lake.publish()

    changes = read_changes(lake.config, w1, w2)
    assert (changes.from_watermark, changes.to_watermark) == (w1, w2)
    assert rows(changes, "items") == [
        ("update_before", t_update, {"id": 1, "qty": 1, "note": "a"}),
        ("update_after", t_update, {"id": 1, "qty": 10, "note": "a"}),
        ("delete", t_delete, {"id": 2, "qty": 2, "note": "a"}),
        ("delete", t_move, {"id": 4, "qty": 4, "note": "a"}),
        ("insert", t_insert, {"id": 5, "qty": 5, "note": "b"}),
        ("insert", t_move, {"id": 6, "qty": 4, "note": "a"}),
    ]
    d = changes.details[("shop", "items")]
    assert (d.read, d.reason, d.keys_touched) == (KEYS, None, 7)  # 1, 2, 3, 4, 5, 6, 7: the change log's keys
    assert d.counts == {"insert": 2, "delete": 2, "update_before": 1, "update_after": 1}
    assert rows(changes, "other") == [] and changes.details[("shop", "other")].read == NOTHING
    assert changes[("shop", "items")].column_names == ["_change_type", "_commit_ts", "id", "qty", "note"]
    assert rows(read_changes(lake.config, w2, w3, ["shop.items"]), "items") == [
        ("update_before", t_again, {"id": 1, "qty": 10, "note": "a"}),
        ("update_after", t_again, {"id": 1, "qty": 11, "note": "a"}),
    ]
    across = rows(read_changes(lake.config, w1, w3), "items")  # the last change of key 1 in (W1, W3]
    assert across[:2] == [("update_before", t_again, {"id": 1, "qty": 1, "note": "a"}),
                          ("update_after", t_again, {"id": 1, "qty": 11, "note": "a"})]
    assert len(across) == 6
    assert all(rows(read_changes(lake.config, w, w), t) == [] for w in (w1, w3) for t in ("items", "other"))


@pytest.mark.parametrize("write_mode", WRITE_MODES)
def test_columns_added_dropped_and_renamed_in_the_window(tmp_path: Path, write_mode: str) -> None:
    lake = Lake(tmp_path, "simple", write_mode)
    v1 = lake.create("items", [("id", "int"), ("qty", "int"), ("old", "varchar(8)")])
    for i in (1, 2, 3):
        lake.insert(v1, id=i, qty=i, old="x")
    w1 = lake.publish()
    v2 = schema("shop", "items", [("id", "int"), ("qty", "int"), ("old", "varchar(8)"), ("note", "text")])
    lake.ddl("items", "ALTER TABLE shop.items ADD COLUMN note text", v2, v1)
    t1 = lake.update(v2, {"id": 1, "qty": 1, "old": "x", "note": None}, {"id": 1, "qty": 1, "old": "x", "note": "n"})
    v3 = schema("shop", "items", [("id", "int"), ("qty", "int"), ("note", "text")])
    lake.ddl("items", "ALTER TABLE shop.items DROP COLUMN old", v3, v2)
    v4 = schema("shop", "items", [("id", "int"), ("amount", "int"), ("note", "text")])
    lake.ddl("items", "ALTER TABLE shop.items RENAME COLUMN qty TO amount", v4, v3)
    t2 = lake.update(v4, {"id": 2, "amount": 2, "note": None}, {"id": 2, "amount": 20, "note": None})
    w2 = lake.publish()
    changes = read_changes(lake.config, w1, w2)
    d = changes.details[("shop", "items")]
    assert (d.read, d.dropped_columns) == (KEYS, ("old",))  # only the two touched keys' rows were read
    assert changes[("shop", "items")].column_names == ["_change_type", "_commit_ts", "id", "amount", "note", "old"]
    # W2's columns; the dropped column in the before images only; row 3 lost only the dropped column: no change.
    assert rows(changes, "items") == [
        ("update_before", t1, {"id": 1, "amount": 1, "old": "x"}),
        ("update_after", t1, {"id": 1, "amount": 1, "note": "n"}),
        ("update_before", t2, {"id": 2, "amount": 2, "old": "x"}),
        ("update_after", t2, {"id": 2, "amount": 20}),
    ]
    # A column added with a value for every row the table holds changes every row.
    v5 = schema("shop", "items", [("id", "int"), ("amount", "int"), ("note", "text"), ("flag", "int")])
    lake.ddl("items", "ALTER TABLE shop.items ADD COLUMN flag int NOT NULL DEFAULT 7", v5, v4)
    w3 = lake.publish()
    changes = read_changes(lake.config, w2, w3)
    d = changes.details[("shop", "items")]
    assert d.read == WHOLE and "a column added with a value for the existing rows" in d.reason
    got = rows(changes, "items")
    assert [(kind, image) for kind, _, image in got] == [
        ("update_before", {"id": 1, "amount": 1, "note": "n"}), ("update_after", {"id": 1, "amount": 1, "note": "n", "flag": 7}),
        ("update_before", {"id": 2, "amount": 20}), ("update_after", {"id": 2, "amount": 20, "flag": 7}),
        ("update_before", {"id": 3, "amount": 3}), ("update_after", {"id": 3, "amount": 3, "flag": 7}),
    ]
    assert {ts for _, ts, _ in got} == {w3 - (1 << 18)}  # the ALTER's commitTs: it changed them


@pytest.mark.parametrize("write_mode", WRITE_MODES)
def test_tables_renamed_truncated_dropped_and_created_in_the_window(tmp_path: Path, write_mode: str) -> None:
    lake = Lake(tmp_path, "canal-json", write_mode)
    a, b, c = (lake.create(t, [("id", "int"), ("v", "int")]) for t in ("a", "b", "c"))
    for s in (a, b, c):
        lake.insert(s, id=1, v=1)
        lake.insert(s, id=2, v=2)
    w1 = lake.publish()
    lake.ddl("a", "RENAME TABLE shop.a TO shop.a2")
    t_rename = lake.h.ts
    lake.ddl("b", "TRUNCATE TABLE shop.b")
    t_truncate = lake.h.ts
    t_b = lake.insert(b, id=2, v=2)  # the same row again after the truncate: not a change
    t_b3 = lake.insert(b, id=3, v=3)
    lake.ddl("c", "DROP TABLE shop.c")
    t_drop = lake.h.ts
    d = lake.create("d", [("id", "int"), ("v", "int")])
    t_d = lake.insert(d, id=1, v=1)
    w2 = lake.publish()
    changes = read_changes(lake.config, w1, w2)
    assert sorted(changes) == [("shop", t) for t in ("a", "a2", "b", "c", "d")]
    # Tables are matched by upstream name: a renamed table leaves its old name and comes under the new one.
    assert rows(changes, "a") == [("delete", t_rename, {"id": 1, "v": 1}), ("delete", t_rename, {"id": 2, "v": 2})]
    assert rows(changes, "a2") == [("insert", t_rename, {"id": 1, "v": 1}), ("insert", t_rename, {"id": 2, "v": 2})]
    assert rows(changes, "b") == [("delete", t_truncate, {"id": 1, "v": 1}), ("insert", t_b3, {"id": 3, "v": 3})]
    assert t_b < t_b3
    assert rows(changes, "c") == [("delete", t_drop, {"id": 1, "v": 1}), ("delete", t_drop, {"id": 2, "v": 2})]
    assert rows(changes, "d") == [("insert", t_d, {"id": 1, "v": 1})]
    reasons = {t: changes.details[("shop", t)].reason for t in ("a", "a2", "b", "c", "d")}
    assert all(changes.details[("shop", t)].read == WHOLE for t in reasons)
    assert "renamed" in reasons["a"] and "renamed" in reasons["a2"] and "TruncateTable" in reasons["b"]
    assert "DropTable" in reasons["c"] and "created in the window" in reasons["d"]


def test_a_gh_ost_cut_over_shows_only_the_rows_that_differ(tmp_path: Path) -> None:
    """gh-ost copies t into a ghost with a new column and renames it onto t's name: the name's
    rows at W1 and W2 differ only where the window changed them."""
    lake = Lake(tmp_path, "canal-json")
    t = lake.create("t", [("id", "int"), ("v", "int")])
    for i in (1, 2, 3):
        lake.insert(t, id=i, v=i)
    w1 = lake.publish()
    ghost = schema("shop", "_t_gho", [("id", "int"), ("v", "int"), ("note", "text")])
    lake.h.ddl("shop", "_t_gho", "create table shop._t_gho like shop.t", schema("shop", "_t_gho", [("id", "int"), ("v", "int")]),
               kind="CREATE")
    lake.ddl("_t_gho", "alter table shop._t_gho add column note text", ghost)
    for i in (1, 2, 3):
        lake.insert(ghost, id=i, v=i, note=None)
    lake.update(t, {"id": 2, "v": 2}, {"id": 2, "v": 20})
    t_moved = lake.update(ghost, {"id": 2, "v": 2, "note": None}, {"id": 2, "v": 20, "note": None})
    lake.h.ddl("shop", "t", "rename table shop.t to shop._t_del, shop._t_gho to shop.t", kind="RENAME")
    lake.h.ddl("shop", "_t_del", "drop table if exists shop._t_del", kind="DROP")
    w2 = lake.publish()
    changes = read_changes(lake.config, w1, w2)
    assert sorted(changes) == [("shop", "t")]  # the ghost and _t_del hold no name at W1 or W2
    assert changes.details[("shop", "t")].read == WHOLE
    assert rows(changes, "t") == [("update_before", t_moved, {"id": 2, "v": 2}), ("update_after", t_moved, {"id": 2, "v": 20})]
    assert changes[("shop", "t")].column_names == ["_change_type", "_commit_ts", "id", "v", "note"]


@pytest.mark.parametrize("write_mode", WRITE_MODES)
def test_key_less_tables_count_copies(tmp_path: Path, write_mode: str) -> None:
    lake = Lake(tmp_path, "canal-json", write_mode)
    bag = lake.create("bag", [("x", "int"), ("s", "varchar(8)")], keys=())
    a, b, c = {"x": 1, "s": "a"}, {"x": 2, "s": "b"}, {"x": 3, "s": "c"}
    for image in (a, a, a, b):
        lake.insert(bag, **image)
    w1 = lake.publish()
    t_a = lake.delete(bag, a)
    lake.delete(bag, a)
    t_b = lake.insert(bag, **b)
    lake.insert(bag, **c)
    lake.delete(bag, c)  # came and went
    lake.update(bag, b, a)  # one b becomes an a ...
    t_back = lake.update(bag, a, b)  # ... and back
    w2 = lake.publish()
    changes = read_changes(lake.config, w1, w2)
    got = rows(changes, "bag")
    assert sorted((kind, tuple(image.values())) for kind, _, image in got) == [
        ("delete", (1, "a")), ("delete", (1, "a")), ("insert", (2, "b"))]  # a: 3 -> 1, b: 1 -> 2, c: 0 -> 0
    assert changes.details[("shop", "bag")].read == KEYS
    assert {ts for kind, ts, _ in got if kind == "delete"} == {t_back} and t_a < t_back  # each image's last change
    assert {ts for kind, ts, _ in got if kind == "insert"} <= {t_b, t_back}


def _files_read(monkeypatch) -> list[str]:
    opened: list[str] = []
    real = changes_read._read_file

    def counting(io, data_file, *args):
        opened.append(data_file.file_path)
        return real(io, data_file, *args)

    monkeypatch.setattr(changes_read, "_read_file", counting)
    return opened


def test_only_the_files_that_can_hold_a_touched_key_are_read(tmp_path: Path, monkeypatch) -> None:
    """Ten runs leave ten files of disjoint key ranges; a window changing one key reads the one file
    holding it at W1 and the one written for it (the key-bounded planning), not the table."""
    lake = Lake(tmp_path, "canal-json", "copy-on-write")
    t = lake.create("t", [("id", "int"), ("v", "int")])
    for run in range(10):
        for i in range(run * 100, run * 100 + 100):
            lake.insert(t, id=i, v=i)
        lake.publish()
    w1 = lake.ws[-1]
    t_change = lake.update(t, {"id": 250, "v": 250}, {"id": 250, "v": -1})
    w2 = lake.publish()
    opened = _files_read(monkeypatch)
    changes = read_changes(lake.config, w1, w2)
    assert rows(changes, "t") == [("update_before", t_change, {"id": 250, "v": 250}),
                                  ("update_after", t_change, {"id": 250, "v": -1})]
    assert len(opened) <= 3, opened  # W1: the file of 200..299; W2: its rewrite (and the new row's file)
    from spark.tables import catalog as cat
    from spark.core.watermark import tag_name

    table = cat.load_table(cat.open_catalog(lake.config), lake.config, "shop", "t")
    assert len(table.scan(snapshot_id=table.snapshot_by_name(tag_name(w1)).snapshot_id).plan_files()) == 10


@pytest.mark.parametrize("write_mode", WRITE_MODES)
def test_compaction_moving_the_tags_changes_nothing(tmp_path: Path, write_mode: str) -> None:
    lake = Lake(tmp_path, "canal-json", write_mode)
    t = lake.create("t", [("id", "int"), ("v", "int")])
    for run in range(2):  # two files at least, whatever the write mode: something to compact
        for i in range(5):
            lake.insert(t, id=run * 10 + i, v=i)
        lake.publish()
    lake.update(t, {"id": 0, "v": 0}, {"id": 0, "v": 100})
    lake.delete(t, {"id": 13, "v": 3})
    lake.publish()
    lake.update(t, {"id": 11, "v": 1}, {"id": 11, "v": 101})
    lake.insert(t, id=20, v=0)
    lake.publish()
    before = {(a, b): read_changes(lake.config, a, b)[("shop", "t")] for a, b in zip(lake.ws, lake.ws[1:])}
    tags = _tag_snapshots(lake)
    keep = dt.timedelta(days=3650)
    config = dataclasses.replace(lake.config, maintenance=MaintenanceConfig(
        keep_all=keep, keep_hourly=keep, keep_daily=keep, grace_period=dt.timedelta(0), target_file_size=1 << 30))
    maintain(config, now=T0 + dt.timedelta(hours=10))
    assert _tag_snapshots(lake) != tags, "compaction moved no tag"
    for (a, b), table in before.items():
        again = read_changes(lake.config, a, b)
        assert again[("shop", "t")].equals(table) and again.details[("shop", "t")].read == KEYS


def _tag_snapshots(lake: Lake) -> dict[int, int]:
    from spark.tables import catalog as cat
    from spark.core.watermark import tag_name

    table = cat.load_table(cat.open_catalog(lake.config), lake.config, "shop", "t")
    return {w: table.snapshot_by_name(tag_name(w)).snapshot_id for w in lake.ws}


def test_hostile_names_and_columns_named_like_the_change_columns(tmp_path: Path) -> None:
    lake = Lake(tmp_path, "canal-json")
    s = lake.create('we.i"rd t', [("id", "int"), ("_change_type", "varchar(8)"), ("_COMMIT_TS", "int")])
    w1 = lake.publish()
    t_insert = lake.insert(s, id=1, _change_type="mine", _COMMIT_TS=5)
    w2 = lake.publish()
    changes = read_changes(lake.config, w1, w2, ['shop.we.i"rd t'])
    d = changes.details[("shop", 'we.i"rd t')]
    assert (d.change_type_column, d.commit_ts_column) == ("__change_type", "__commit_ts")
    assert changes[("shop", 'we.i"rd t')].to_pylist() == [
        {"__change_type": "insert", "__commit_ts": t_insert, "id": 1, "_change_type": "mine", "_COMMIT_TS": 5}]
    with pytest.raises(ChangesError, match="is not a table of the pipeline"):
        read_changes(lake.config, w1, w2, ["shop.nope"])


def test_watermarks_must_be_published_retained_and_in_order(tmp_path: Path) -> None:
    lake = Lake(tmp_path, "canal-json")
    t = lake.create("t", [("id", "int"), ("v", "int")])
    for i in range(4):
        lake.insert(t, id=i, v=i)
        lake.publish()
    w1, w2, _, w4 = lake.ws
    with pytest.raises(NoSuchWatermark, match="not published"):
        read_changes(lake.config, w1 + 1, w2)
    with pytest.raises(ChangesError, match="is after"):
        read_changes(lake.config, w2, w1)
    at = dt.datetime.fromtimestamp((w2 >> 18) / 1000 + 0.0005, dt.UTC).isoformat()  # a time resolves to the W before it
    assert read_changes(lake.config, at, "latest").from_watermark == w2
    # Retire W2 and W3 (keep the last W only, then W1 by the tier that keeps every W younger than ...).
    nothing = dt.timedelta(0)
    now = dt.datetime.fromtimestamp((w4 >> 18) / 1000, dt.UTC) + dt.timedelta(hours=1)
    keep_w1 = now - dt.datetime.fromtimestamp((w1 >> 18) / 1000, dt.UTC)
    config = dataclasses.replace(lake.config, maintenance=MaintenanceConfig(
        keep_all=nothing, keep_hourly=keep_w1 + dt.timedelta(seconds=1), keep_daily=nothing, grace_period=nothing))
    maintain(config, now=now)
    retired = retired_watermarks(lake.storage, lake.config.name)
    assert retired, "nothing retired"
    w = retired[0]
    with pytest.raises(RetiredWatermark, match="nearest retained"):
        read_changes(lake.config, w, w4)


def test_isolated_tables_are_left_out_and_named(tmp_path: Path, monkeypatch) -> None:
    from tests.spark.test_isolation import _history, _pipeline

    _, batches, (w1, _, w3) = _history()
    config = _pipeline(tmp_path, "isolate", batches)
    for i in range(3):
        apply_interval(config, T0 + i * HOUR, T0 + (i + 1) * HOUR)
    changes = read_changes(config, w1, w3)
    assert sorted(changes) == [("shop", "b")] and sorted(changes.isolated) == [("shop", "a")]
    assert changes.isolated[("shop", "a")]["held_at"] == w1
    assert sorted((r["_change_type"], r["id"], r["v"]) for r in changes[("shop", "b")].to_pylist()) == [
        ("insert", 2, 2), ("insert", 3, 3), ("update_after", 1, 10), ("update_before", 1, 1)]
    with pytest.raises(IsolatedTable, match="held at W"):
        read_changes(config, w1, w3, ["shop.a"])
    # The command's output names it (not only a warning -q hides): stdout as JSON lines and as a table.
    import io

    from spark.cli.changes import print_changes

    out = io.StringIO()
    print_changes(changes, "json", out)
    left = [orjson.loads(line) for line in out.getvalue().splitlines() if "left_out" in line]
    assert [(d["table"], d["left_out"]["held_at"]) for d in left] == [("a", w1)]
    out = io.StringIO()
    print_changes(changes, "table", out)
    assert f"shop.a: LEFT OUT, isolated at W {w3} (held at W {w1})" in out.getvalue()
    assert changes.manifest()["isolated"][0]["table"] == "a"
    _fixed(monkeypatch)  # a version that handles the statement (as a truncate) brings a to W3
    apply_interval(config, T0 + 2 * HOUR, T0 + 3 * HOUR)
    assert sorted(read_changes(config, w1, w3)) == [("shop", "a"), ("shop", "b")]
    got = sorted((r["_change_type"], r["id"]) for r in read_changes(config, w1, w3)[("shop", "a")].to_pylist())
    assert got == [("delete", 1), ("insert", 3), ("insert", 4)]  # a truncate, then 3 and 4 (2 came and went)
    assert sorted((r["id"], r["v"]) for r in read_table(config, "shop", "a", w3).to_pylist()) == [(3, 3), (4, 4)]


def test_a_caught_up_tables_changes_since_its_held_w_replace_the_windows_with_their_description(tmp_path: Path, monkeypatch) -> None:
    """The recipe of docs/operating.md for an Asset event's ``caught_up``: ``changes.take`` puts the table's
    changes since its held W in the window's set with what was done for them, and the manifest gives the
    table that W; a plain assignment left the window's description (its counts) beside the other rows."""
    from spark.query.changes import ChangesRequestError

    from tests.spark.test_isolation import _fixed, _history, _pipeline

    _, batches, (w1, w2, w3) = _history()
    config = _pipeline(tmp_path, "isolate", batches)
    for i in range(2):
        apply_interval(config, T0 + i * HOUR, T0 + (i + 1) * HOUR)
    _fixed(monkeypatch)
    apply_interval(config, T0 + 2 * HOUR, T0 + 3 * HOUR)  # catches a up: held at W1
    changes = read_changes(config, w2, w3)
    since_held = read_changes(config, w1, w3, [("shop", "a")])
    changes.take(since_held)
    assert changes[("shop", "a")] is since_held[("shop", "a")] and changes.details[("shop", "a")] is since_held.details[("shop", "a")]
    assert sorted((r["_change_type"], r["id"]) for r in changes[("shop", "a")].to_pylist()) == [
        ("delete", 1), ("insert", 3), ("insert", 4)]
    tables = {t["table"]: t for t in changes.manifest()["tables"]}
    assert (tables["a"]["from_watermark"], tables["a"]["rows"]["delete"], tables["a"]["rows"]["insert"]) == (w1, 1, 2)
    assert tables["b"]["from_watermark"] == w2 == changes.manifest()["from_watermark"]
    with pytest.raises(ChangesRequestError, match="must end at the same W"):
        changes.take(read_changes(config, w1, w2, [("shop", "b")]))
    with pytest.raises(ChangesRequestError, match="must end at the same W"):
        changes.take(read_changes(config, w1, w3, [("shop", "a")], before_images=False))


def test_a_window_whose_change_log_retention_deleted_fails_naming_it(tmp_path: Path) -> None:
    lake = Lake(tmp_path, "canal-json")
    t = lake.create("t", [("id", "int"), ("v", "int")])
    for i in range(3):
        lake.insert(t, id=i, v=i)
        lake.publish()
    w1, w2, w3 = lake.ws
    # Archive retention never prunes what a retained W replays from; a prune record past W1's
    # pending offsets (as a pipeline that retired W1 would leave) makes (W1, ...] unanswerable.
    ends = {f"cdc/{p}": 10**6 for p in range(lake.partitions)}
    lake.storage.write(layout.pruned_path(lake.config.name), orjson.dumps({"floors": ends}))
    with pytest.raises(ChangesUnavailable, match="archive retention deleted"):
        read_changes(lake.config, w1, w3)
    assert read_published(lake.storage, lake.config.name, w2) is not None


def test_each_announcement_names_the_w_before_it_and_the_first_reads_from_0(tmp_path: Path) -> None:
    """The Asset event of a new W carries the W published before it (``previous_watermark``):
    ``read_changes(previous, W)`` is what a downstream DAG has not seen; before the first W it is 0,
    from which every row is an insert."""
    from spark.commit.published import announcement

    lake = Lake(tmp_path, "canal-json")
    t = lake.create("t", [("id", "int"), ("v", "int")])
    t_first = lake.insert(t, id=1, v=1)
    lake.publish()
    t_second = lake.insert(t, id=2, v=2)
    lake.publish()
    lake.publish()  # nothing new upstream but time: W moves on
    lake.update(t, {"id": 1, "v": 1}, {"id": 1, "v": 10})
    lake.publish()
    said = [announcement(lake.config, T0 + i * HOUR, T0 + (i + 1) * HOUR, lake.storage) for i in range(4)]
    assert [(a.previous_watermark, a.watermark) for a in said] == list(zip([0, *lake.ws], lake.ws))
    assert rows(read_changes(lake.config, 0, lake.ws[0]), "t") == [("insert", t_first, {"id": 1, "v": 1})]
    mirror: dict[int, dict] = {}  # a downstream copy kept by the events alone
    for a in said:
        for kind, _, image in rows(read_changes(lake.config, a.previous_watermark, a.watermark), "t"):
            if kind in ("delete", "update_before"):
                del mirror[image["id"]]
            else:
                mirror[image["id"]] = image
    assert sorted(mirror.values(), key=lambda r: r["id"]) == [{"id": 1, "v": 10}, {"id": 2, "v": 2}]
    assert sorted((r["id"], r["v"]) for r in read_table(lake.config, "shop", "t", lake.ws[-1]).to_pylist()) == [(1, 10), (2, 2)]
    assert t_first < t_second


@pytest.mark.parametrize("protocol", ["canal-json", "open-protocol", "simple"])
def test_keys_of_every_kind_find_their_rows(tmp_path: Path, protocol: str) -> None:
    """Composite, string, ENUM (the Open protocol sends its index) and decimal keys: the touched
    keys, typed as the table types them, find their rows at both Ws."""
    from decimal import Decimal

    lake = Lake(tmp_path, protocol)
    tables = {
        "pair": (lake.create("pair", [("a", "int"), ("b", "varchar(8)"), ("v", "int")], keys=("a", "b")),
                 [{"a": 1, "b": "x:y", "v": 1}, {"a": 1, "b": "z", "v": 2}]),
        "named": (lake.create("named", [("k", "varchar(8)"), ("v", "int")], keys=("k",)),
                  [{"k": "é 1", "v": 1}, {"k": "0", "v": 2}]),
        "kind": (lake.create("kind", [("k", "enum('red','green')"), ("v", "int")], keys=("k",)),
                 [{"k": "red", "v": 1}, {"k": "green", "v": 2}]),
        "price": (lake.create("price", [("k", "decimal(8,2)"), ("v", "int")], keys=("k",)),
                  [{"k": Decimal("1.50"), "v": 1}, {"k": Decimal("2.00"), "v": 2}]),
    }
    for s, images in tables.values():
        for image in images:
            lake.insert(s, **image)
    w1 = lake.publish()
    for s, (first, second) in tables.values():
        lake.update(s, first, {**first, "v": 10})
        lake.delete(s, second)
    w2 = lake.publish()
    changes = read_changes(lake.config, w1, w2)
    for name, (_, (first, second)) in tables.items():
        got = [(kind, image) for kind, _, image in rows(changes, name)]
        assert sorted(got, key=repr) == sorted([("update_before", first), ("update_after", {**first, "v": 10}),
                                                ("delete", second)], key=repr), name
        assert changes.details[("shop", name)].read == KEYS, name


def test_the_window_folds_alike_in_key_hash_slices(tmp_path: Path, monkeypatch) -> None:
    """With a runner the window's change log is folded a task per key-hash slice (as a run's is):
    every key is in one slice, so the changes are the same as folding it whole in process."""
    from spark.query import changes_log
    from spark.runtime.runners import LocalRunner

    lake = Lake(tmp_path, "canal-json")
    t = lake.create("t", [("id", "int"), ("v", "int")])
    for i in range(40):
        lake.insert(t, id=i, v=i)
    w1 = lake.publish()
    for i in range(0, 40, 3):
        lake.update(t, {"id": i, "v": i}, {"id": i, "v": -i})
    for i in range(1, 40, 7):
        lake.delete(t, {"id": i, "v": i})
    lake.publish()
    for i in range(0, 36, 6):
        lake.update(t, {"id": i, "v": -i}, {"id": i, "v": i})  # back: no change since W1
    w3 = lake.publish()
    whole = read_changes(lake.config, w1, w3)
    tasks = []
    real = changes_log.touched_slice

    def recording(task):  # noqa: ANN001, ANN202
        tasks.append(task.part)
        return real(task)

    monkeypatch.setattr(changes_log, "touched_slice", recording)
    sliced = read_changes(dataclasses.replace(lake.config, fold_slice_rows=8), w1, w3, runner=LocalRunner())
    assert len(tasks) > 3 and {p.count for p in tasks} == {len(tasks)}
    assert sliced[("shop", "t")].equals(whole[("shop", "t")])
    assert len(rows(whole, "t")) == 2 * 6 + 6  # 3, 9, 21, 27, 33, 39 updated; 1, 8, 15, 22, 29, 36 deleted


@pytest.mark.slow
def test_the_window_folds_alike_on_spark_executors(tmp_path: Path) -> None:
    from spark.runtime.runners import SparkRunner
    from spark.runtime.session import build_context

    lake = Lake(tmp_path, "canal-json")
    t = lake.create("t", [("id", "int"), ("v", "int")])
    for i in range(30):
        lake.insert(t, id=i, v=i)
    w1 = lake.publish()
    for i in range(0, 30, 4):
        lake.update(t, {"id": i, "v": i}, {"id": i, "v": -i})
    lake.delete(t, {"id": 1, "v": 1})
    w2 = lake.publish()
    context = build_context("tidelake-changes", "local[2]", **{"spark.ui.enabled": "false",
                                                               "spark.ui.showConsoleProgress": "false"})
    try:
        on_spark = read_changes(dataclasses.replace(lake.config, fold_slice_rows=5), w1, w2, runner=SparkRunner(context))
    finally:
        context.stop()
    assert on_spark[("shop", "t")].equals(read_changes(lake.config, w1, w2)[("shop", "t")])
    assert on_spark.details[("shop", "t")].counts == {"insert": 0, "delete": 1, "update_before": 7, "update_after": 7}


@pytest.mark.parametrize("write_mode", WRITE_MODES)
def test_a_primary_key_changed_in_the_window(tmp_path: Path, write_mode: str) -> None:
    """ALTER TABLE ... PRIMARY KEY: the table is read whole, rows are paired by the key at W2."""
    lake = Lake(tmp_path, "canal-json", write_mode)
    v1 = lake.create("k", [("id", "int"), ("region", "varchar(4)"), ("v", "int")])
    lake.insert(v1, id=1, region="us", v=1)
    lake.insert(v1, id=2, region="us", v=2)
    w1 = lake.publish()
    v2 = schema("shop", "k", [("id", "int"), ("region", "varchar(4)"), ("v", "int")], keys=("id", "region"))
    lake.ddl("k", "ALTER TABLE shop.k DROP PRIMARY KEY, ADD PRIMARY KEY (id, region)")
    t_eu = lake.insert(v2, id=1, region="eu", v=3)  # a second row with id 1
    t_v = lake.update(v2, {"id": 2, "region": "us", "v": 2}, {"id": 2, "region": "us", "v": 20})
    w2 = lake.publish()
    changes = read_changes(lake.config, w1, w2)
    d = changes.details[("shop", "k")]
    assert d.read == WHOLE and "SetKeyColumns" in d.reason
    assert rows(changes, "k") == [("insert", t_eu, {"id": 1, "region": "eu", "v": 3}),
                                  ("update_before", t_v, {"id": 2, "region": "us", "v": 2}),
                                  ("update_after", t_v, {"id": 2, "region": "us", "v": 20})]


@pytest.mark.parametrize("write_mode", WRITE_MODES)
def test_after_images_only_read_no_data_file_of_w1(tmp_path: Path, monkeypatch, write_mode: str) -> None:
    """``before_images=False``: an upsert per touched key with its row at W2, a delete per deleted key
    (its key columns), and not one data file of W1 opened -- what a MERGE into a warehouse needs."""
    lake = Lake(tmp_path, "canal-json", write_mode)
    t = lake.create("t", [("id", "int"), ("v", "int"), ("note", "varchar(8)")])
    for run in range(3):
        for i in range(run * 10, run * 10 + 10):
            lake.insert(t, id=i, v=i, note="a")
        lake.publish()
    w1 = lake.ws[-1]
    t_up = lake.update(t, {"id": 5, "v": 5, "note": "a"}, {"id": 5, "v": 50, "note": "b"})
    t_del = lake.delete(t, {"id": 17, "v": 17, "note": "a"})
    t_new = lake.insert(t, id=40, v=40, note="n")
    lake.insert(t, id=41, v=41, note="x")
    t_gone = lake.delete(t, {"id": 41, "v": 41, "note": "x"})  # came and went: a delete of a key W1 never had
    w2 = lake.publish()
    from spark.tables import catalog as cat

    table = cat.load_table(cat.open_catalog(lake.config), lake.config, "shop", "t")
    at_w1 = {f.file.file_path for f in table.scan(snapshot_id=table.snapshot_by_name(f"wm_{w1}").snapshot_id).plan_files()}
    opened = _files_read(monkeypatch)
    changes = read_changes(lake.config, w1, w2, before_images=False)
    assert rows(changes, "t") == [("upsert", t_up, {"id": 5, "v": 50, "note": "b"}), ("delete", t_del, {"id": 17}),
                                  ("upsert", t_new, {"id": 40, "v": 40, "note": "n"}), ("delete", t_gone, {"id": 41})]
    assert changes.details[("shop", "t")].counts == {"upsert": 2, "delete": 2}
    assert changes.before_images is False and changes.manifest()["before_images"] is False
    assert opened and not set(opened) & at_w1, (opened, at_w1)
    # Applied by key to the table at W1, they give the table at W2.
    mirror = {r["id"]: r for r in read_table(lake.config, "shop", "t", w1).to_pylist()}
    for r in changes[("shop", "t")].to_pylist():
        if r["_change_type"] == "delete":
            mirror.pop(r["id"], None)
        else:
            mirror[r["id"]] = {k: v for k, v in r.items() if not k.startswith("_")}
    assert sorted(mirror.values(), key=lambda r: r["id"]) == sorted(read_table(lake.config, "shop", "t", w2).to_pylist(),
                                                                     key=lambda r: r["id"])


def test_after_images_of_a_table_changed_wholesale(tmp_path: Path) -> None:
    """A TRUNCATE in the window: every row at W2 an upsert, every key of W1 without a row at W2 a
    delete (W1's key column read alone), with the TRUNCATE's commitTs."""
    lake = Lake(tmp_path, "canal-json")
    t = lake.create("t", [("id", "int"), ("v", "int")])
    for i in (1, 2, 3):
        lake.insert(t, id=i, v=i)
    w1 = lake.publish()
    lake.h.ddl("shop", "t", "TRUNCATE TABLE shop.t")
    t_truncate = lake.h.ts
    t_again = lake.insert(t, id=2, v=20)
    w2 = lake.publish()
    changes = read_changes(lake.config, w1, w2, before_images=False)
    assert rows(changes, "t") == [("delete", t_truncate, {"id": 1}), ("upsert", t_again, {"id": 2, "v": 20}),
                                  ("delete", t_truncate, {"id": 3})]
    assert changes.details[("shop", "t")].read == WHOLE


def test_after_images_on_the_command_line_and_in_sql(tmp_path: Path, capsys) -> None:
    from spark.cli.main import main
    from spark.query.sql import run_query

    lake = Lake(tmp_path, "canal-json")
    t = lake.create("t", [("id", "int"), ("v", "int")])
    lake.insert(t, id=1, v=1)
    lake.insert(t, id=2, v=2)
    w1 = lake.publish()
    lake.update(t, {"id": 1, "v": 1}, {"id": 1, "v": 10})
    lake.delete(t, {"id": 2, "v": 2})
    w2 = lake.publish()
    path = tmp_path / "pipeline.toml"
    path.write_text(f'name = "{lake.config.name}"\n[kafka]\nbootstrap_servers = "unused:9092"\n[[topics]]\nname = "cdc"\n'
                    f'protocol = "canal-json"\n[storage]\nurl = "{lake.config.storage.url}"\n')
    assert main(["changes", "--config", str(path), "--from", str(w1), "--no-before-images", "--format", "json", "-q"]) == 0
    got = [orjson.loads(line)["row"] for line in capsys.readouterr().out.splitlines()]
    assert [(r["_change_type"], r["id"], r["v"]) for r in got] == [("upsert", 1, 10), ("delete", 2, None)]
    _, result = run_query(lake.config, "SELECT _change_type, id FROM changes.shop.t ORDER BY id", w2, changes_from=w1,
                          before_images=False)
    assert result.to_pylist() == [{"_change_type": "upsert", "id": 1}, {"_change_type": "delete", "id": 2}]
    assert main(["query", "--config", str(path), "--no-before-images", "SELECT 1"]) != 0


def test_a_window_reads_with_the_schema_of_its_ws_not_todays(tmp_path: Path) -> None:
    """Key columns and upstream types are those the table had at W2: a later key change, a later
    ALTER of a column's type and a later rename leave what an older window returns unchanged."""
    lake = Lake(tmp_path, "canal-json")
    v1 = lake.create("k", [("id", "int"), ("region", "varchar(4)"), ("v", "int")])
    lake.insert(v1, id=1, region="us", v=1)
    lake.insert(v1, id=2, region="us", v=2)
    w1 = lake.publish()
    lake.update(v1, {"id": 1, "region": "us", "v": 1}, {"id": 1, "region": "us", "v": 10})
    lake.delete(v1, {"id": 2, "region": "us", "v": 2})
    w2 = lake.publish()
    before = {images: read_changes(lake.config, w1, w2, before_images=images) for images in (True, False)}
    assert before[True].details[("shop", "k")].read == KEYS
    v2 = schema("shop", "k", [("id", "int"), ("region", "varchar(4)"), ("v", "bigint")], keys=("id", "region"))
    lake.ddl("k", "ALTER TABLE shop.k DROP PRIMARY KEY, ADD PRIMARY KEY (id, region)")
    lake.ddl("k", "ALTER TABLE shop.k MODIFY COLUMN v bigint", v2, v1)
    lake.insert(v2, id=1, region="eu", v=3)
    lake.publish()
    lake.ddl("k", "RENAME TABLE shop.k TO shop.k2")
    lake.publish()
    from spark.tables import catalog as cat
    from spark.tables.properties import key_columns

    table = cat.load_table(cat.open_catalog(lake.config), lake.config, "shop", "k2")
    assert key_columns(table.properties) == ("id", "region")  # today's key differs from W2's
    for images, changes in before.items():
        again = read_changes(lake.config, w1, w2, before_images=images)
        assert again[("shop", "k")].equals(changes[("shop", "k")]), images
        assert again.details[("shop", "k")] == changes.details[("shop", "k")]
