"""One table never stops the others (``on_table_error``): a table whose DDL or values a run
cannot apply is held at its last good W while the others publish; the next run that can apply
it (a fixed tidelake, or ``tidelake repair``) replays it to the pipeline's W from the archive."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import pytest

from cdc_codecs import Op, get_encoder
from spark.commit import plan as apply_plan
from spark.commit.apply import apply_interval
from spark.cli.main import main
from spark.commit.report import print_report
from spark.tables.ddl_changes import DdlParseError, TruncateTable
from spark.commit.isolation import read_isolated
from spark.archive.lease import LeaseLostError
from spark.archive.storage import StorageError
from pyiceberg.exceptions import CommitFailedException
from sqlalchemy import exc as sql_exc
from spark.tables.schema_map import UnsupportedValue
from spark.tables.properties import table_watermark
from spark.jobs.apply import apply_summary
from spark.commit.published import read_published
from spark.query.read import IsolatedTable, read_table
from spark.query.sql import run_query
from spark.archive.storage import open_storage
from spark.core.watermark import tag_name

from .archives import HOUR, T0, ArchiveWriter, make_config
from .test_schema_evolution import History, schema

pytestmark = pytest.mark.slow  # whole intervals, Spark or services: make test-fast leaves it out (docs/testing.md)

A = schema("shop", "a", [("id", "int"), ("v", "int")])
B = schema("shop", "b", [("id", "int"), ("v", "int")])
BAD = "ALTER TABLE shop.a DISCARD TABLESPACE"


def _history() -> tuple[History, list[list], list[int]]:
    """a and b, then a statement tidelake cannot apply on a, with rows of both around it."""
    h = History()
    h.ddl("shop", "a", "CREATE TABLE shop.a (id int primary key, v int)", A, kind="CREATE")
    h.ddl("shop", "b", "CREATE TABLE shop.b (id int primary key, v int)", B, kind="CREATE")
    h.row(Op.INSERT, A, None, {"id": 1, "v": 1})
    h.row(Op.INSERT, B, None, {"id": 1, "v": 1})
    marks = [h.mark()]
    batches = [h.events]
    h.events = []
    h.row(Op.INSERT, A, None, {"id": 2, "v": 2})
    h.row(Op.INSERT, B, None, {"id": 2, "v": 2})
    h.ddl("shop", "a", BAD, kind="ALTER")
    h.row(Op.INSERT, A, None, {"id": 3, "v": 3})
    h.row(Op.UPDATE, B, {"id": 1, "v": 1}, {"id": 1, "v": 10})
    marks.append(h.mark())
    batches.append(h.events)
    h.events = []
    h.row(Op.INSERT, A, None, {"id": 4, "v": 4})
    h.row(Op.INSERT, B, None, {"id": 3, "v": 3})
    marks.append(h.mark())
    batches.append(h.events)
    return h, batches, marks


def _pipeline(tmp: Path, policy: str, batches: list[list]):
    config = dataclasses.replace(make_config(tmp, "canal-json"), on_table_error=policy)
    writer = ArchiveWriter(config, open_storage(config.storage), {"cdc": 2})
    encoder = get_encoder("canal-json")
    for i, batch in enumerate(batches):
        writer.interval(T0 + i * HOUR, T0 + (i + 1) * HOUR, [("cdc", r) for r in encoder.encode_all(batch, 2)])
    return config


def _apply(config, i: int, **kw):
    return apply_interval(config, T0 + i * HOUR, T0 + (i + 1) * HOUR, **kw)


def _rows(config, table: str, w: int) -> list[tuple]:
    return sorted((r["id"], r["v"]) for r in read_table(config, "shop", table, w).to_pylist())


def _fixed(monkeypatch) -> None:
    """A tidelake version that handles the statement (here: as the truncate it is to the rows)."""
    parse = apply_plan.parse_ddl

    def handles(sql: str, database: str):
        if sql == BAD:
            return [(("shop", "a"), TruncateTable())]
        return parse(sql, database)

    monkeypatch.setattr(apply_plan, "parse_ddl", handles)


def test_fail_policy_fails_the_run_as_before(tmp_path: Path) -> None:
    _, batches, marks = _history()
    config = _pipeline(tmp_path, "fail", batches)
    assert _apply(config, 0).watermark == marks[0]
    with pytest.raises(DdlParseError, match="DISCARD"):
        _apply(config, 1)
    assert read_published(open_storage(config.storage), config.name, marks[1]) is None


def test_one_table_isolated_the_others_publish(tmp_path: Path, capsys) -> None:
    _, batches, (w1, w2, w3) = _history()
    config = _pipeline(tmp_path, "isolate", batches)
    storage = open_storage(config.storage)
    _apply(config, 0)
    second = _apply(config, 1)
    assert second.watermark == w2 and second.outcome == "published"
    assert _rows(config, "b", w2) == [(1, 10), (2, 2)]
    # a stays at its last good W: readable there, refused at W2 naming W1 and the statement.
    assert _rows(config, "a", w1) == [(1, 1)]
    with pytest.raises(IsolatedTable, match=rf"shop.a is isolated at watermark {w2}: it is held at W {w1} .*DISCARD TABLESPACE"):
        read_table(config, "shop", "a", w2)
    record = read_published(storage, config.name, w2)
    assert [t["table"] for t in record["tables"]] == ["b"]
    [entry] = record["isolated"]
    assert entry["held_at"] == w1 and entry["error"] == "DdlParseError" and entry["ddl"] == BAD
    assert entry["position"].startswith("cdc/0@")
    report = second.report
    assert report["isolated"]["shop.a"]["held_at"] == w1 and report["tables"]["shop.a"]["isolated"] is True
    summary = "\n".join(apply_summary(second))
    assert f"ISOLATED shop.a: held at W {w1}" in summary and "DdlParseError" in summary
    printed = io.StringIO()
    print_report({"land": {"messages": 0}, "apply": second.report}, printed)  # tidelake run
    assert f"  ISOLATED shop.a: held at W {w1}" in printed.getvalue() and BAD in printed.getvalue()
    # The next run: b goes on, a stays held (and is tried again from W1 on the way).
    third = _apply(config, 2)
    assert third.watermark == w3 and _rows(config, "b", w3) == [(1, 10), (2, 2), (3, 3)]
    assert read_published(storage, config.name, w3)["isolated"][0]["held_at"] == w1
    with pytest.raises(IsolatedTable, match=f"held at W {w1}"):
        run_query(config, "SELECT * FROM shop.a")
    assert run_query(config, "SELECT count(*) AS n FROM shop.b")[1].to_pylist() == [{"n": 3}]
    # Its main and tags stop at W1.
    table = _iceberg(config, "a")
    assert {n for n in table.refs() if n.startswith("wm_")} == {tag_name(w1)}
    assert table_watermark(table) == w1 and table.current_snapshot().snapshot_id == table.snapshot_by_name(tag_name(w1)).snapshot_id
    # The CLI says so.
    toml = _toml(tmp_path, config)
    assert main(["tables", "--config", str(toml)]) == 0
    out = capsys.readouterr().out
    assert "shop.b: 3 rows" in out and f"shop.a: ISOLATED, held at W {w1}" in out
    assert main(["watermarks", "--config", str(toml)]) == 0
    out = capsys.readouterr().out
    assert f"isolated: shop.a (held at W {w1})" in out
    assert main(["query", "--config", str(toml), "--at", str(w3), "SELECT * FROM shop.a"]) == 1
    assert f"held at W {w1}" in capsys.readouterr().err


def test_a_fixed_version_replays_the_table_to_w(tmp_path: Path, monkeypatch) -> None:
    _, batches, (w1, w2, w3) = _history()
    config = _pipeline(tmp_path, "isolate", batches)
    storage = open_storage(config.storage)
    for i in range(3):
        _apply(config, i)
    assert set(read_isolated(storage, config.name)) == {("shop", "a")}
    _fixed(monkeypatch)
    again = _apply(config, 2)  # the next run (here a rerun of the latest interval) with a version that handles it
    assert len(again.replayed) == 1  # from a's held W1: the interval of W2, then this one
    assert again.report["caught_up"] == ["shop.a"] and again.report["isolated"] == {}
    assert read_isolated(storage, config.name) == {}
    # Caught up at every W it missed, exactly as upstream: the truncate removed ids 1 and 2.
    assert _rows(config, "a", w1) == [(1, 1)]
    assert _rows(config, "a", w2) == [(3, 3)]
    assert _rows(config, "a", w3) == [(3, 3), (4, 4)]
    assert _rows(config, "b", w3) == [(1, 10), (2, 2), (3, 3)]
    for w in (w2, w3):
        record = read_published(storage, config.name, w)
        assert "isolated" not in record and [t["table"] for t in record["tables"]] == ["a", "b"]
        assert record["caught_up"][0]["table"] == "a"


def test_repair_replays_an_isolated_table(tmp_path: Path, monkeypatch) -> None:
    from spark.repair.run import repair

    _, batches, (w1, w2, w3) = _history()
    config = _pipeline(tmp_path, "isolate", batches)
    for i in range(3):
        _apply(config, i)
    _fixed(monkeypatch)
    report = repair(config)
    assert report.caught_up == ["shop.a"] and report.stays_held == []
    assert read_isolated(open_storage(config.storage), config.name) == {}
    assert _rows(config, "a", w3) == [(3, 3), (4, 4)]
    assert _rows(config, "a", w2) == [(3, 3)]


def test_repair_says_which_tables_stay_held_and_why(tmp_path: Path) -> None:
    from spark.cli.main import print_repair
    from spark.repair.run import repair

    _, batches, (w1, _, _) = _history()
    config = _pipeline(tmp_path, "isolate", batches)
    for i in range(3):
        _apply(config, i)
    report = repair(config)  # this version still cannot apply a's statement
    assert report.caught_up == [] and [e.name for e in report.stays_held] == ["shop.a"]
    printed = io.StringIO()
    print_repair(report, printed)
    assert f"stays held shop.a (held at W {w1}): DdlParseError on {BAD!r}" in printed.getvalue()


@pytest.mark.parametrize("crash_at", ["decoded", "staged:shop.b", "isolated", "tagged", "checkpointed", "published"])
def test_crash_during_an_isolating_run_then_retry(tmp_path: Path, crash_at: str) -> None:
    _, batches, (w1, w2, _) = _history()
    config = _pipeline(tmp_path, "isolate", batches)
    storage = open_storage(config.storage)
    _apply(config, 0)

    def fault(step: str) -> None:
        if step == crash_at:
            raise RuntimeError(f"crash at {step}")

    with pytest.raises(RuntimeError, match="crash"):
        _apply(config, 1, fault=fault)
    result = _apply(config, 1)
    assert result.watermark == w2
    record = read_published(storage, config.name, w2)
    assert [t["table"] for t in record["tables"]] == ["b"] and record["isolated"][0]["held_at"] == w1
    assert set(read_isolated(storage, config.name)) == {("shop", "a")}
    assert _rows(config, "b", w2) == [(1, 10), (2, 2)] and _rows(config, "a", w1) == [(1, 1)]


def _iceberg(config, table: str):
    from spark.tables import catalog as cat

    return cat.load_table(cat.open_catalog(config), config, "shop", table)


def _toml(tmp: Path, config) -> Path:
    path = tmp / "pipeline.toml"
    path.write_text(f'name = "{config.name}"\n[kafka]\nbootstrap_servers = "unused:9092"\n[[topics]]\nname = "cdc"\n'
                    f'protocol = "canal-json"\n[storage]\nurl = "{config.storage.url}"\n')
    return path


def test_retention_keeps_the_held_w_and_what_its_replay_reads(tmp_path: Path, monkeypatch) -> None:
    """Retiring every W it may and pruning the archive to the retained checkpoints leave the
    isolated table's held W readable and its replay possible: it catches up exactly afterwards."""
    import datetime as dt

    from spark.config import MaintenanceConfig
    from spark.maintain.run import maintain
    from spark.commit.published import retained_watermarks

    _, batches, (w1, w2, w3) = _history()
    config = _pipeline(tmp_path, "isolate", batches)
    nothing = dt.timedelta(0)
    config = dataclasses.replace(config, maintenance=MaintenanceConfig(
        keep_all=nothing, keep_hourly=nothing, keep_daily=nothing, grace_period=nothing, archive_horizon=nothing))
    storage = open_storage(config.storage)
    for i in range(3):
        _apply(config, i)
    maintain(config, now=T0 + dt.timedelta(days=400))
    assert retained_watermarks(storage, config.name) == [w1, w3]  # W1: shop.a is held there; W3: the latest
    assert _rows(config, "a", w1) == [(1, 1)] and _rows(config, "b", w1) == [(1, 1)]
    _fixed(monkeypatch)
    _apply(config, 2)
    assert read_isolated(storage, config.name) == {}
    assert _rows(config, "a", w3) == [(3, 3), (4, 4)]
    assert _rows(config, "b", w3) == [(1, 10), (2, 2), (3, 3)]


def test_a_value_or_a_schema_change_that_does_not_fit_isolates_its_table(tmp_path: Path, runner=None) -> None:  # noqa: ANN001
    """Errors at commit (a type change Iceberg cannot make) and in the executors' rewrite (a decimal
    wider than its column) isolate their own table; the tables committed beside them go on."""
    from decimal import Decimal

    d = schema("shop", "d", [("id", "int"), ("price", "decimal(5,2)")])
    h = History()
    for s, sql in ((A, "CREATE TABLE shop.a (id int primary key, v int)"), (B, "CREATE TABLE shop.b (id int primary key, v int)"),
                   (d, "CREATE TABLE shop.d (id int primary key, price decimal(5,2))")):
        h.ddl("shop", s.table, sql, s, kind="CREATE")
    h.row(Op.INSERT, A, None, {"id": 1, "v": 1})
    h.row(Op.INSERT, d, None, {"id": 1, "price": Decimal("1.00")})
    w1 = h.mark()
    first, h.events = h.events, []
    h.row(Op.INSERT, A, None, {"id": 2, "v": 2})
    h.ddl("shop", "a", "ALTER TABLE shop.a MODIFY COLUMN v varchar(10)", schema("shop", "a", [("id", "int"), ("v", "varchar(10)")]),
          kind="ALTER")
    h.row(Op.INSERT, B, None, {"id": 1, "v": 1})
    h.row(Op.INSERT, d, None, {"id": 2, "price": Decimal("1000.00")})
    w2 = h.mark()
    config = _pipeline(tmp_path, "isolate", [first, h.events])
    _apply(config, 0, runner=runner)
    result = _apply(config, 1, runner=runner)
    assert result.watermark == w2
    isolated = result.report["isolated"]
    assert set(isolated) == {"shop.a", "shop.d"}
    assert isolated["shop.a"]["error"] == "UnsupportedSchemaChange" and isolated["shop.a"]["ddl"].startswith("ALTER TABLE shop.a")
    assert isolated["shop.d"]["error"] == "UnsupportedValue" and "does not fit decimal(5, 2)" in isolated["shop.d"]["message"]
    assert _rows(config, "b", w2) == [(1, 1)]
    assert read_table(config, "shop", "d", w1).to_pylist() == [{"id": 1, "price": Decimal("1.00")}]
    with pytest.raises(IsolatedTable, match=f"shop.d is isolated at watermark {w2}: it is held at W {w1}"):
        read_table(config, "shop", "d", w2)


def _a_held_by_bad(extra: list[tuple] | tuple = (), b_rows: list[dict] | tuple = ()) -> tuple[History, list[list], list[int]]:
    """Two intervals: tables a and b created (and ``extra``'s, each ``(CREATE sql, table, schema)``),
    a row in a (and ``b_rows`` in b), W1; BAD on a and a row in a, W2. Returns the history (its events
    emptied, for the next interval's), the two intervals' events and [W1, W2]."""
    h = History()
    h.ddl("shop", "a", "CREATE TABLE shop.a (id int primary key, v int)", A, kind="CREATE")
    h.ddl("shop", "b", "CREATE TABLE shop.b (id int primary key, v int)", B, kind="CREATE")
    for sql, table, after in extra:
        h.ddl("shop", table, sql, after, kind="CREATE")
    h.row(Op.INSERT, A, None, {"id": 1, "v": 1})
    for row in b_rows:
        h.row(Op.INSERT, B, None, row)
    marks = [h.mark()]
    batches, h.events = [h.events], []
    h.ddl("shop", "a", BAD, kind="ALTER")
    h.row(Op.INSERT, A, None, {"id": 2, "v": 2})
    marks.append(h.mark())
    batches, h.events = [*batches, h.events], []
    return h, batches, marks


def test_a_rename_involving_an_isolated_table_isolates_both(tmp_path: Path, monkeypatch) -> None:
    """RENAME a TO c after a's bad statement: c is isolated too (its state would come from a's);
    once a version handles the statement, both are replayed and c holds a's rows."""
    h, (first, second), (w1, w2) = _a_held_by_bad()
    h.ddl("shop", "a", "RENAME TABLE shop.a TO shop.c", kind="RENAME")
    c = schema("shop", "c", [("id", "int"), ("v", "int")])
    h.row(Op.INSERT, c, None, {"id": 3, "v": 3})
    h.row(Op.INSERT, B, None, {"id": 1, "v": 1})
    w3 = h.mark()
    config = _pipeline(tmp_path, "isolate", [first, second, h.events])
    for i in range(3):
        _apply(config, i)
    storage = open_storage(config.storage)
    held = read_isolated(storage, config.name)
    assert set(held) == {("shop", "a"), ("shop", "c")}
    assert held[("shop", "a")].held_at == w1
    assert held[("shop", "c")].held_at == w2 and held[("shop", "c")].involved == "shop.a"
    assert held[("shop", "a")].renamed == "shop.c"  # its name is free from there
    assert _rows(config, "b", w3) == [(1, 1)]
    # c took its name in the run of W3: it is not said to be readable at W2, where it did not exist.
    assert held[("shop", "c")].new_name and not held[("shop", "a")].new_name
    with pytest.raises(IsolatedTable, match=f"shop.c is isolated at watermark {w3}: it is held, not published under this name "
                                            f"at any W yet \\(it took the name after W {w2}.*no earlier W under this name"):
        read_table(config, "shop", "c", w3)
    _fixed(monkeypatch)
    _apply(config, 2)
    assert read_isolated(storage, config.name) == {}
    assert _rows(config, "a", w2) == [(2, 2)]
    assert _rows(config, "c", w3) == [(2, 2), (3, 3)]
    assert [t["table"] for t in read_published(storage, config.name, w3)["tables"]] == ["b", "c"]


def _renamed_away_then_made_again(split: bool, create: str = "CREATE TABLE shop.a (id int primary key, v int)") -> tuple[list[list], tuple[int, ...]]:
    """a held by BAD at W1; RENAME a TO c; CREATE TABLE a, a new table (in the same run, or in the
    next one when ``split``); rows of every table around."""
    h, batches, marks = _a_held_by_bad()
    c = schema("shop", "c", [("id", "int"), ("v", "int")])
    h.ddl("shop", "a", "RENAME TABLE shop.a TO shop.c", kind="RENAME")
    h.row(Op.INSERT, c, None, {"id": 3, "v": 3})
    if split:
        marks.append(h.mark())
        batches.append(h.events)
        h.events = []
    h.ddl("shop", "a", create, A, kind="CREATE")
    h.row(Op.INSERT, A, None, {"id": 7, "v": 7})
    h.row(Op.INSERT, B, None, {"id": 1, "v": 1})
    marks.append(h.mark())
    batches.append(h.events)
    h.events = []
    h.row(Op.INSERT, A, None, {"id": 8, "v": 8})
    marks.append(h.mark())
    batches.append(h.events)
    return batches, tuple(marks)


@pytest.mark.parametrize("split, create", [
    (False, "CREATE TABLE shop.a (id int primary key, v int)"),
    (True, "CREATE TABLE shop.a (id int primary key, v int)"),
    (False, "CREATE TABLE IF NOT EXISTS shop.a (id int primary key, v int)"),  # upstream has no a: a new one
])
def test_a_new_table_under_the_name_a_held_table_left_publishes(tmp_path: Path, monkeypatch, split: bool, create: str) -> None:
    """A held table holds only itself: renamed away, its old name's new table is applied and
    published; the renamed one stays held (no replay by name can reach it) and says so."""
    batches, marks = _renamed_away_then_made_again(split, create)
    w1, wm, wl = marks[0], marks[-2], marks[-1]
    config = _pipeline(tmp_path, "isolate", batches)
    storage = open_storage(config.storage)
    for i in range(len(batches)):
        _apply(config, i)
    held = read_isolated(storage, config.name)
    assert set(held) == {("shop", "c")} and held[("shop", "c")].stays and held[("shop", "c")].new_name
    assert "shop.a was renamed to shop.c while held" in held[("shop", "c")].stays
    assert _rows(config, "a", wm) == [(7, 7)] and _rows(config, "a", wl) == [(7, 7), (8, 8)]
    assert _rows(config, "a", w1) == [(1, 1)]  # the held table's history before it was held
    assert [t["table"] for t in read_published(storage, config.name, wl)["tables"]] == ["a", "b"]
    with pytest.raises(IsolatedTable, match="shop.c is isolated .* not published under this name .* it stays held: shop.a was renamed"):
        read_table(config, "shop", "c", wl)
    # A version that handles the statement does not "catch c up" from a name that is another table's now.
    _fixed(monkeypatch)
    _apply(config, len(batches) - 1)
    assert set(read_isolated(storage, config.name)) == {("shop", "c")}
    assert _rows(config, "a", wl) == [(7, 7), (8, 8)]
    from spark.repair.run import repair

    report = repair(config)
    assert [e.name for e in report.stays_held] == ["shop.c"] and report.caught_up == []
    assert _rows(config, "a", wl) == [(7, 7), (8, 8)]
    from spark.cli.main import print_repair

    printed = io.StringIO()
    print_repair(report, printed)
    assert "stays held shop.c (held, not published under this name at any W yet" in printed.getvalue()


def test_a_new_table_under_the_name_of_a_held_table_dropped_publishes(tmp_path: Path) -> None:
    h = History()
    h.ddl("shop", "a", "CREATE TABLE shop.a (id int primary key, v int)", A, kind="CREATE")
    h.row(Op.INSERT, A, None, {"id": 1, "v": 1})
    w1 = h.mark()
    first, h.events = h.events, []
    h.ddl("shop", "a", BAD, kind="ALTER")
    w2 = h.mark()
    second, h.events = h.events, []
    h.ddl("shop", "a", "DROP TABLE shop.a", kind="DROP")
    h.mark()
    third, h.events = h.events, []
    h.ddl("shop", "a", "CREATE TABLE IF NOT EXISTS shop.a (id int primary key, v int)", A, kind="CREATE")
    h.row(Op.INSERT, A, None, {"id": 5, "v": 5})
    w4 = h.mark()
    config = _pipeline(tmp_path, "isolate", [first, second, third, h.events])
    storage = open_storage(config.storage)
    for i in range(3):
        _apply(config, i)
    assert read_isolated(storage, config.name)[("shop", "a")].renamed == "(dropped)"  # its name is free
    _apply(config, 3)
    assert read_isolated(storage, config.name) == {}
    assert _rows(config, "a", w4) == [(5, 5)] and _rows(config, "a", w1) == [(1, 1)]
    from spark.tables.properties import HELD_AT

    assert HELD_AT not in _iceberg(config, "a").properties  # the name's new table is not held
    assert [e["table"] for e in read_published(storage, config.name, w2)["isolated"]] == ["a"]


def test_a_table_renamed_onto_the_name_a_held_table_left_publishes(tmp_path: Path) -> None:
    """RENAME TABLE a TO c with a held, then RENAME TABLE x TO a: the held table's Iceberg table
    moves aside (its history stays readable at the Ws before), x publishes as a."""
    h = History()
    x = schema("shop", "x", [("id", "int"), ("v", "int")])
    h.ddl("shop", "a", "CREATE TABLE shop.a (id int primary key, v int)", A, kind="CREATE")
    h.ddl("shop", "x", "CREATE TABLE shop.x (id int primary key, v int)", x, kind="CREATE")
    h.row(Op.INSERT, A, None, {"id": 1, "v": 1})
    h.row(Op.INSERT, x, None, {"id": 9, "v": 9})
    w1 = h.mark()
    first, h.events = h.events, []
    h.ddl("shop", "a", BAD, kind="ALTER")
    h.mark()
    second, h.events = h.events, []
    h.ddl("shop", "a", "RENAME TABLE shop.a TO shop.c", kind="RENAME")
    h.ddl("shop", "x", "RENAME TABLE shop.x TO shop.a", kind="RENAME")
    h.row(Op.INSERT, A, None, {"id": 10, "v": 10})
    w3 = h.mark()
    config = _pipeline(tmp_path, "isolate", [first, second, h.events])
    for i in range(3):
        _apply(config, i)
    storage = open_storage(config.storage)
    assert set(read_isolated(storage, config.name)) == {("shop", "c")}
    assert _rows(config, "a", w3) == [(9, 9), (10, 10)] and _rows(config, "a", w1) == [(1, 1)]
    assert [t["table"] for t in read_published(storage, config.name, w3)["tables"]] == ["a"]


def test_a_held_table_renamed_onto_the_name_a_held_table_leaves_is_held_under_it(tmp_path: Path) -> None:
    """gh-ost's cut-over of a held table: ``CREATE TABLE _a_gho LIKE a`` is held with a, then ``RENAME
    TABLE a TO _a_del, _a_gho TO a``. The name a is the ghost's from there, and the ghost is held: a is
    isolated at W3, never published with the held table's rows, which its catalog entry still holds
    (found by the model machine: cloudcanal-json, a DROP DATABASE re-sent after a restart holding bag)."""
    h, (first, second), (w1, w2) = _a_held_by_bad()
    ghost = schema("shop", "_a_gho", [("id", "int"), ("v", "int")])
    h.ddl("shop", "_a_gho", "CREATE TABLE shop._a_gho LIKE shop.a", ghost, kind="CREATE")
    h.row(Op.INSERT, ghost, None, {"id": 4, "v": 4})
    h.mark()
    third, h.events = h.events, []
    h.ddl("shop", "a", "RENAME TABLE shop.a TO shop._a_del, shop._a_gho TO shop.a", kind="RENAME")
    h.row(Op.INSERT, A, None, {"id": 5, "v": 5})
    h.row(Op.INSERT, B, None, {"id": 1, "v": 1})
    w4 = h.mark()
    config = _pipeline(tmp_path, "isolate", [first, second, third, h.events])
    for i in range(4):
        _apply(config, i)
    storage = open_storage(config.storage)
    record = read_published(storage, config.name, w4)
    assert [t["table"] for t in record["tables"]] == ["b"]
    assert {e["table"] for e in record["isolated"]} >= {"a", "_a_del"}
    assert read_isolated(storage, config.name)[("shop", "a")].involved == "shop._a_gho"
    with pytest.raises(IsolatedTable, match="shop.a is isolated"):
        read_table(config, "shop", "a", w4)
    assert _rows(config, "b", w4) == [(1, 1)]


def _held_then(tmp_path: Path, statement: str, table: str, extra: list[tuple]) -> tuple:
    """a held by BAD at W1; then, in the next interval, ``statement`` naming a and another table."""
    h, (first, second), (w1, w2) = _a_held_by_bad(extra, [{"id": 5, "v": 5}])
    h.ddl("shop", table, statement, kind="ALTER")
    h.row(Op.INSERT, B, None, {"id": 6, "v": 6})
    w3 = h.mark()
    config = _pipeline(tmp_path, "isolate", [first, second, h.events])
    for i in range(3):
        _apply(config, i)
    return config, (w1, w2, w3)


def test_a_copy_of_an_isolated_table_is_held_with_it(tmp_path: Path, monkeypatch) -> None:
    """CREATE TABLE c LIKE a, a held: c's columns would come from a state the run does not know."""
    config, (w1, w2, w3) = _held_then(tmp_path, "CREATE TABLE shop.c LIKE shop.a", "c", [])
    storage = open_storage(config.storage)
    held = read_isolated(storage, config.name)
    assert set(held) == {("shop", "a"), ("shop", "c")} and held[("shop", "c")].involved == "shop.a"
    assert [t["table"] for t in read_published(storage, config.name, w3)["tables"]] == ["b"]
    _fixed(monkeypatch)
    _apply(config, 2)
    assert read_isolated(storage, config.name) == {}
    assert read_table(config, "shop", "c", w3).to_pylist() == [] and _rows(config, "a", w3) == [(2, 2)]


def test_an_exchange_with_an_isolated_table_holds_both_and_the_fixed_version_moves_the_rows(tmp_path: Path, monkeypatch) -> None:
    """EXCHANGE PARTITION p0 of pt WITH TABLE a, a held: pt is not published with its old p0 rows
    (nor a with pt's); once a version handles a's statement, both catch up with the rows swapped."""
    pt = schema("shop", "pt", [("id", "int"), ("v", "int")])
    create = "CREATE TABLE shop.pt (id int primary key, v int) PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS THAN (10), " \
             "PARTITION p1 VALUES LESS THAN MAXVALUE)"
    config, (w1, w2, w3) = _held_then(tmp_path, "ALTER TABLE shop.pt EXCHANGE PARTITION p0 WITH TABLE shop.a", "pt",
                                      [(create, "pt", pt)])
    storage = open_storage(config.storage)
    held = read_isolated(storage, config.name)
    assert set(held) == {("shop", "a"), ("shop", "pt")} and held[("shop", "pt")].involved == "shop.a"
    assert held[("shop", "pt")].held_at == w2 and "EXCHANGE PARTITION" in held[("shop", "pt")].ddl
    assert [t["table"] for t in read_published(storage, config.name, w3)["tables"]] == ["b"]
    _fixed(monkeypatch)
    _apply(config, 2)
    assert read_isolated(storage, config.name) == {}
    assert _rows(config, "a", w2) == [(2, 2)] and _rows(config, "a", w3) == []  # pt's p0 was empty
    assert _rows(config, "pt", w3) == [(2, 2)]


@pytest.mark.slow
@pytest.mark.parametrize("case", ["a decimal beyond its column", "a string in an int column (a DDL edited by hand)"])
def test_a_value_that_cannot_be_written_on_spark_executors_names_value_column_and_offset(tmp_path: Path, capsys,
                                                                                        case: str) -> None:  # noqa: ANN001
    """The same, the rows written by Spark's executors: the driver reads the message out of the
    executor's traceback, once."""
    from spark.runtime.runners import SparkRunner
    from spark.runtime.session import build_context

    context = build_context("tidelake-isolation-values", "local[2]", **{"spark.ui.enabled": "false",
                                                                        "spark.ui.showConsoleProgress": "false"})
    try:
        test_a_value_that_cannot_be_written_holds_its_table_naming_value_column_and_offset(tmp_path, capsys, case,
                                                                                          SparkRunner(context))
    finally:
        context.stop()


@pytest.mark.slow
def test_errors_in_spark_executors_isolate_their_table(tmp_path: Path) -> None:
    """On Spark the executors' UnsupportedValue reaches the driver inside a Py4J error: it is still one table's."""
    from spark.runtime.runners import SparkRunner
    from spark.runtime.session import build_context

    context = build_context("tidelake-isolation", "local[2]", **{"spark.ui.enabled": "false",
                                                                "spark.ui.showConsoleProgress": "false"})
    try:
        test_a_value_or_a_schema_change_that_does_not_fit_isolates_its_table(tmp_path, SparkRunner(context))
    finally:
        context.stop()


def test_which_table_an_unparseable_statement_is_about_and_which_errors_are_one_table_s() -> None:
    from cdc_codecs import DdlChange, SourcePosition
    from spark.commit.isolation import statement_table, table_error

    def ddl(sql: str, database: str = "", table: str = "") -> DdlChange:
        return DdlChange(database, table, sql, 1, SourcePosition("cdc", 0, 0))

    assert statement_table(ddl("ALTER TABLE x DISCARD TABLESPACE", "shop", "y")) == ("shop", "y")  # the protocol's word first
    assert statement_table(ddl("ALTER TABLE `my db`.`we``ird` DISCARD TABLESPACE")) == ("my db", "we`ird")
    assert statement_table(ddl("CREATE TABLE IF NOT EXISTS t (id int) PARTITION BY HASH(id)", "shop")) == ("shop", "t")
    assert statement_table(ddl("TRUNCATE t", "shop")) == ("shop", "t")
    assert statement_table(ddl("FLASHBACK DATABASE shop")) is None
    # An EXCHANGE that does not parse holds both tables it names.
    from spark.commit.isolation import statement_tables

    assert statement_tables(ddl("ALTER TABLE pt EXCHANGE PARTITION p0 WITH TABLE other.`n t` SOMEHOW", "shop")) == {
        ("shop", "pt"), ("other", "n t")}
    assert statement_tables(ddl("ALTER TABLE pt EXCHANGE PARTITION p0 WITH TABLE nt WITH VALIDATION x", "shop")) == {
        ("shop", "pt"), ("shop", "nt")}
    assert statement_tables(ddl("ALTER TABLE x DISCARD TABLESPACE", "shop")) == {("shop", "x")}
    assert table_error(UnsupportedValue("x")) and table_error(RuntimeError("x")) and not table_error(LeaseLostError("lost"))


class Py4JJavaError(Exception):
    """Stands for py4j's: how Spark hands an executor's error to the driver."""


Py4JJavaError.__module__ = "py4j.protocol"


def _from_executor(line: str, chained: bool = False) -> Py4JJavaError:
    """An executor's error as Spark hands it to the driver: the Python traceback inside a Java one."""
    cause = "Traceback (most recent call last):\n  File \"x.py\", line 1, in f\nKeyError: 'k'\n\nDuring handling of " \
            "the above exception, another exception occurred:\n\n" if chained else ""
    return Py4JJavaError(
        "An error occurred while calling z:org.apache.spark.api.python.PythonRDD.collectAndServe.\n: org.apache.spark."
        "api.python.PythonException: [PYTHON_EXCEPTION] An exception was thrown from the Python worker: " + cause +
        "Traceback (most recent call last):\n  File \"/x/worker.py\", line 3622, in main\n    process()\n"
        "         ^^^^^^^^^\n" + line + "\nsecond line\n SQLSTATE: 38000\n\tat org.apache.spark.api.python...")


@pytest.mark.parametrize("exc, ours, name, message", [
    # Raised in a table's work: the table's, whatever the class -- tidelake's, Python's, any library's.
    (UnsupportedValue("v"), True, "UnsupportedValue", "v"), (RuntimeError("r"), True, "RuntimeError", "r"),
    (ZeroDivisionError(), True, "ZeroDivisionError", "ZeroDivisionError()"), (KeyError("k"), True, "KeyError", "'k'"),
    (AssertionError("a"), True, "AssertionError", "a"), (RecursionError("deep"), True, "RecursionError", "deep"),
    (type("Custom", (Exception,), {})("c"), True, "Custom", "c"),
    # A service's: storage, the network, the catalog, the lease, a writer beside the run.
    (OSError(5, "down"), False, None, None), (ConnectionResetError(), False, None, None), (TimeoutError(), False, None, None),
    (LeaseLostError("lost"), False, None, None), (StorageError("s3"), False, None, None),
    (CommitFailedException("moved"), False, None, None), (sql_exc.OperationalError("SELECT", {}, Exception("gone")), False, None, None),
    # From Spark's executors: the Python exception's class decides; without one, Spark's own failure.
    (_from_executor("spark.tables.schema_map.UnsupportedValue: column 'd' (decimal(5, 2)): 1000 does not fit"), True,
     "UnsupportedValue", "column 'd' (decimal(5, 2)): 1000 does not fit"),
    (_from_executor("ZeroDivisionError: division by zero"), True, "ZeroDivisionError", "division by zero"),
    (_from_executor("ZeroDivisionError: division by zero", chained=True), True, "ZeroDivisionError", "division by zero"),
    (_from_executor("tests.nowhere.NeverSeen: n"), True, "NeverSeen", "n"),
    (_from_executor("Custom"), True, "Custom", ""),
    (_from_executor("OSError: [Errno 5] storage unreachable"), False, None, None),
    (_from_executor("FileNotFoundError: [Errno 2] gone"), False, None, None),
    (_from_executor("spark.archive.storage.StorageError: s3"), False, None, None),
    (Py4JJavaError("An error occurred while calling o1.collect: ExecutorLostFailure (executor 1 exited)"), False, None, None),
])
def test_an_error_is_a_tables_by_where_it_arises_unless_a_service_failed(exc: BaseException, ours: bool, name, message) -> None:
    """Issue 34, item 3: any exception of a table's work is the table's -- recorded by the class
    and message it was raised with, on an executor too --, a service's fails the run."""
    from spark.commit.isolation import RunIsolation, table_error

    assert table_error(exc) is ours
    if ours:
        isolation = RunIsolation("isolate", {}, 1, 2, "i")
        isolation.isolate({("shop", "a")}, exc)
        entry = isolation.new[("shop", "a")]
        assert (entry.error, entry.message) == (name, message)


def test_the_runs_own_interruptions_are_never_a_tables() -> None:
    from spark.commit.isolation import table_error, the_runs

    def crash(step: str) -> None:
        raise RuntimeError(step)

    with pytest.raises(RuntimeError) as raised:
        the_runs(crash)("staged:shop.a")
    assert not table_error(raised.value) and table_error(RuntimeError("staged:shop.a"))




@pytest.mark.parametrize("crash_at", ["decoded", "staged:shop.a", "isolated", "tagged", "published"])
def test_a_crash_while_catching_up_then_the_next_run(tmp_path: Path, monkeypatch, crash_at: str) -> None:
    _, batches, (w1, w2, w3) = _history()
    config = _pipeline(tmp_path, "isolate", batches)
    storage = open_storage(config.storage)
    for i in range(3):
        _apply(config, i)
    _fixed(monkeypatch)

    def fault(step: str) -> None:
        if step == crash_at:
            raise RuntimeError(f"crash at {step}")

    with pytest.raises(RuntimeError, match="crash"):
        _apply(config, 2, fault=fault)
    _apply(config, 2)
    assert read_isolated(storage, config.name) == {}
    assert _rows(config, "a", w1) == [(1, 1)]
    assert _rows(config, "a", w2) == [(3, 3)] and _rows(config, "a", w3) == [(3, 3), (4, 4)]
    assert [t["table"] for t in read_published(storage, config.name, w2)["tables"]] == ["a", "b"]


def test_a_mirror_built_from_announcements_stays_exact_through_a_catch_up(tmp_path: Path, monkeypatch) -> None:
    """A downstream mirror that applies, for each announced W, the change feed since the W before
    -- and for a table the event names as caught up, since the W it was held at -- equals every
    table at the last W, though a was left out of two Ws and caught up in a third."""
    from dags.tidelake_pipelines import asset_event_extra
    from spark.commit.published import announcement
    from spark.query.changes import read_changes

    h, batches, _ = _history()
    h.events = []
    h.row(Op.INSERT, A, None, {"id": 5, "v": 5})
    h.row(Op.UPDATE, B, {"id": 2, "v": 2}, {"id": 2, "v": 20})
    w4 = h.mark()
    config = _pipeline(tmp_path, "isolate", [*batches, h.events])
    mirror: dict = {}
    events = []

    def consume(i: int) -> None:
        event = asset_event_extra(config.name, announcement(config, T0 + i * HOUR, T0 + (i + 1) * HOUR))
        events.append(event)
        previous, new = int(event["previous_watermark_str"]), int(event["watermark_str"])
        changes = read_changes(config, previous, new)
        left_out = dict(changes.isolated)
        for c in event["caught_up"]:  # the Ws it missed: from its held W (docs/operating.md's recipe)
            name = (c["database"], c["table"])
            changes.take(read_changes(config, int(c["from_watermark_str"]), new, [name]))
        for name, rows in changes.items():
            if name in left_out:
                continue
            table = mirror.setdefault(name, {})
            for r in rows.to_pylist():
                key = r["id"]
                if r["_change_type"] in ("delete", "update_before"):
                    table.pop(key, None)
                else:
                    table[key] = (r["id"], r["v"])

    for i in range(3):
        _apply(config, i)
        consume(i)
    assert events[1]["caught_up"] == [] and read_isolated(open_storage(config.storage), config.name)
    assert sorted(mirror[("shop", "a")].values()) == [(1, 1)]  # held at W1 in the mirror too
    # Other engines read main: the table says it is held, and at which W.
    from spark.tables.properties import HELD_AT, HELD_REASON

    held = _iceberg(config, "a").properties
    assert held[HELD_AT] == events[0]["watermark_str"] and "DISCARD" in held[HELD_REASON]
    assert HELD_AT not in _iceberg(config, "b").properties
    _fixed(monkeypatch)
    result = _apply(config, 3)
    assert result.watermark == w4 and result.replayed
    consume(3)
    assert events[3]["caught_up"] == [{"database": "shop", "table": "a", "from_watermark": events[0]["watermark"],
                                       "from_watermark_str": events[0]["watermark_str"]}]
    for name in (("shop", "a"), ("shop", "b")):
        assert sorted(mirror[name].values()) == _rows(config, name[1], w4), name
    assert HELD_AT not in _iceberg(config, "a").properties and HELD_REASON not in _iceberg(config, "a").properties
    # Announced once: a later announcement of the same interval names nothing again.
    again = announcement(config, T0 + 3 * HOUR, T0 + 4 * HOUR)
    assert again is not None and [c["table"] for c in again.caught_up] == ["a"]  # the same W claims it again


@pytest.mark.parametrize("case", ["a decimal beyond its column", "a string in an int column (a DDL edited by hand)"])
def test_a_value_that_cannot_be_written_holds_its_table_naming_value_column_and_offset(tmp_path: Path, capsys, case: str,
                                                                                      runner=None) -> None:  # noqa: ANN001
    """Bad input stays bad input (issue 34, item 5): a value that decodes but that its column cannot
    take holds its own table, the others publish; the record names the value, the column and the
    message's topic/partition@offset, once, and stays so at every run that retries it; ``tidelake
    tables`` says how to release it."""
    from decimal import Decimal

    if case.startswith("a decimal"):
        d = schema("shop", "d", [("id", "int"), ("v", "decimal(5,2)")])
        create, good, bad, text = "CREATE TABLE shop.d (id int primary key, v decimal(5,2))", Decimal("1.00"), Decimal("1000.00"), "1000.00"
        rows = d
    else:  # the DDL says int, a later row of upstream's carries text
        d = schema("shop", "d", [("id", "int"), ("v", "int")])
        create, good, bad, text = "CREATE TABLE shop.d (id int primary key, v int)", 1, "abc", "abc"
        rows = schema("shop", "d", [("id", "int"), ("v", "varchar(10)")])
    h = History()
    h.ddl("shop", "b", "CREATE TABLE shop.b (id int primary key, v int)", B, kind="CREATE")
    h.ddl("shop", "d", create, d, kind="CREATE")
    h.row(Op.INSERT, B, None, {"id": 1, "v": 1})
    h.row(Op.INSERT, d, None, {"id": 1, "v": good})
    w1 = h.mark()
    batches, h.events = [h.events], []
    h.row(Op.INSERT, rows, None, {"id": 2, "v": bad})
    h.row(Op.INSERT, B, None, {"id": 2, "v": 2})
    w2 = h.mark()
    batches, h.events = [*batches, h.events], []
    h.row(Op.INSERT, B, None, {"id": 3, "v": 3})
    w3 = h.mark()
    batches.append(h.events)
    config = _pipeline(tmp_path, "isolate", batches)
    encoder, offsets, where = get_encoder("canal-json"), {}, None
    for batch in batches:  # the offset of the message carrying the bad value, as _pipeline lands them
        for r in encoder.encode_all(batch, 2):
            if f'"{text}"'.encode() in r.value:
                where = f"cdc/{r.partition}@{offsets.get(r.partition, 0)}"
            offsets[r.partition] = offsets.get(r.partition, 0) + 1
    assert where is not None
    storage = open_storage(config.storage)
    for i in range(3):
        result = _apply(config, i, runner=runner)
        assert result.outcome == "published"
        if i == 0:
            continue
        [entry] = read_published(storage, config.name, result.watermark)["isolated"]
        assert (entry["table"], entry["error"], entry["held_at"]) == ("d", "UnsupportedValue", w1)
        message = entry["message"]
        assert message.startswith("column 'v' (") and text in message and message.endswith(f"in the change at {where}"), message
        assert message.count(where) == 1 and message.count("column 'v'") == 1, message
    assert _rows(config, "b", w3) == [(1, 1), (2, 2), (3, 3)]
    with pytest.raises(IsolatedTable, match=f"held at W {w1}"):
        read_table(config, "shop", "d", w2)
    assert main(["tables", "--config", str(_toml(tmp_path, config))]) == 0
    out = capsys.readouterr().out
    assert f"shop.d: ISOLATED, held at W {w1}" in out and where in out
    assert "to release it: a value the column cannot take" in out and "`tidelake repair`" in out


def test_an_older_tidelake_refuses_an_archive_a_newer_one_wrote(tmp_path: Path, monkeypatch) -> None:
    """After a newer version caught a table up, an older one would meet its statement again in a
    replay and hold it at an old W: runs and repairs check the archive's format first."""
    import orjson

    from spark.archive import format as archive_format
    from spark.repair.run import repair

    _, batches, (w1, w2, w3) = _history()
    config = _pipeline(tmp_path, "isolate", batches)
    storage = open_storage(config.storage)
    _apply(config, 0)
    path = archive_format.format_path(config.name)
    assert orjson.loads(storage.read(path))["format"] == archive_format.ARCHIVE_FORMAT
    monkeypatch.setattr(archive_format, "ARCHIVE_FORMAT", archive_format.ARCHIVE_FORMAT - 1)  # the older version
    with pytest.raises(archive_format.NewerArchive, match=r"archive is in format \d+ .* follows format \d+.*nothing was changed"):
        _apply(config, 1)
    with pytest.raises(archive_format.NewerArchive):
        repair(config)
    assert read_published(storage, config.name, w2) is None and not read_isolated(storage, config.name)
    monkeypatch.undo()
    assert _apply(config, 1).watermark == w2  # the version that wrote it goes on
    storage.write(path, b"not json")
    with pytest.raises(archive_format.NewerArchive, match="not a format record"):
        _apply(config, 2)
