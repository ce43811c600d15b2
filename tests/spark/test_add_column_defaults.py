"""ADD COLUMN fills the rows a table already has, as MySQL does (issue 23, point 1).

MySQL 8 (and TiDB) give every existing row an added column's DEFAULT, or for a NOT NULL column
without one the type's implicit default; the lake must read the same at the W of the statement
and every later W, and a key-less table's later DELETE / UPDATE, whose before image carries the
default, must find the row. Each case is checked against the reference model too.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from pathlib import Path

import pytest

from cdc_codecs import DdlChange, Op, RowChange, get_encoder
from tests.model.oracle import BinlogOracle, Oracle
from spark.tables import catalog as cat
from spark.commit.apply import apply_interval
from spark.tables.updates import UnsupportedSchemaChange
from spark.config import LayoutConfig
from spark.query.read import read_table
from spark.archive.storage import open_storage
from spark.core.watermark import tag_name

from .archives import HOUR, T0, ArchiveWriter, make_config, normalise, oracle_from_records, oracle_rows
from tests.spark.tables.test_catalog import duckdb_with_iceberg, jdbc_metadata_location
from .test_schema_evolution import P, History, schema

pytestmark = pytest.mark.slow  # whole intervals, Spark or services: make test-fast leaves it out (docs/testing.md)

PROTOCOLS = ["canal-json", "simple", "debezium"]  # SQL only; and two that carry the schema after each DDL
PARTITIONS = [("gen", 0)]


def run(tmp: Path, protocol: str, batches: list[list], options: dict | None = None, layout: LayoutConfig = LayoutConfig(),
        runner=None):  # noqa: ANN001
    """Each batch archived as one interval and applied, in process (``LocalPlane``) or by ``runner``."""
    config = dataclasses.replace(make_config(tmp, protocol, options), layout=layout)
    writer = ArchiveWriter(config, open_storage(config.storage), {"cdc": 2})
    encoder = get_encoder(protocol, **(options or {}))
    results = []
    for i, batch in enumerate(batches):
        writer.interval(T0 + i * HOUR, T0 + (i + 1) * HOUR, [("cdc", r) for r in encoder.encode_all(batch, 2)])
        results.append(apply_interval(config, T0 + i * HOUR, T0 + (i + 1) * HOUR, runner=runner))
    return config, results


def model_at(events: list, w: int, timezone: dt.tzinfo = dt.timezone.utc) -> Oracle:
    """The reference model fed ``events`` and cut at ``w``."""
    oracle = Oracle(timezone=timezone) if timezone != dt.timezone.utc else Oracle()
    oracle.add(e for e in events if not hasattr(e, "ts") or e.ts <= w)
    oracle.cut(PARTITIONS)
    return oracle


def rows_at(config, table: str, w: int) -> list[dict]:  # noqa: ANN001
    return normalise(read_table(config, "shop", table, w).to_pylist())


@pytest.mark.parametrize("protocol, layout", [(p, LayoutConfig()) for p in PROTOCOLS]
                         + [("canal-json", LayoutConfig(buckets=2, write_mode="copy-on-write"))],
                         ids=PROTOCOLS + ["canal-json-bucketed"])
def test_existing_rows_read_the_default_at_the_ddl_and_every_later_w(tmp_path: Path, protocol: str, layout: LayoutConfig) -> None:
    h = History()
    v1 = schema("shop", "t", [("id", "int"), ("v", "int")])
    v2 = schema("shop", "t", [("id", "int"), ("v", "int"), ("c", "int")])
    h.ddl("shop", "t", "CREATE TABLE shop.t (id int primary key, v int)", v1, kind="CREATE")
    h.row(Op.INSERT, v1, None, {"id": 1, "v": 1})
    h.row(Op.INSERT, v1, None, {"id": 2, "v": 2})
    h.row(Op.UPDATE, v1, {"id": 2, "v": 2}, {"id": 2, "v": 20})  # a position delete file, on merge-on-read
    w1 = h.mark()
    first = list(h.events)
    h.events.clear()
    h.row(Op.INSERT, v1, None, {"id": 3, "v": 3})  # same run, before the statement: gets the default too
    h.ddl("shop", "t", "ALTER TABLE shop.t ADD COLUMN c INT NOT NULL DEFAULT 7", v2, v1, kind="ALTER")
    h.row(Op.INSERT, v2, None, {"id": 4, "v": 4, "c": 8})  # after it: its own value
    w2 = h.mark()
    second = list(h.events)
    h.events.clear()
    h.row(Op.UPDATE, v2, {"id": 1, "v": 1, "c": 7}, {"id": 1, "v": 10, "c": 7})
    w3 = h.mark()
    config, _ = run(tmp_path, protocol, [first, second, list(h.events)], layout=layout)
    everything = first + second + list(h.events)
    at2 = [{"id": 1, "v": 1, "c": 7}, {"id": 2, "v": 20, "c": 7}, {"id": 3, "v": 3, "c": 7}, {"id": 4, "v": 4, "c": 8}]
    assert rows_at(config, "t", w2) == normalise(at2) == oracle_rows(model_at(everything, w2), ("shop", "t"))
    at3 = [{"id": 1, "v": 10, "c": 7}] + at2[1:]
    assert rows_at(config, "t", w3) == normalise(at3) == oracle_rows(model_at(everything, w3), ("shop", "t"))
    assert rows_at(config, "t", w1) == normalise([{"id": 1, "v": 1}, {"id": 2, "v": 20}])  # the older tag keeps its columns
    # Another engine reads the tags the same: the filled rows are plain data files.
    con = duckdb_with_iceberg()
    catalog = cat.open_catalog(config)
    location = jdbc_metadata_location(config, catalog.name, ".".join(cat.identifier(config, "shop", "t")))
    table = catalog.load_table(cat.identifier(config, "shop", "t"))
    for w in (w2, w3):
        snapshot = table.snapshot_by_name(tag_name(w)).snapshot_id
        got = con.execute(f"SELECT id, v, c FROM iceberg_scan(?, snapshot_from_id={snapshot})", [location]).fetch_arrow_table()
        assert normalise(got.to_pylist()) == rows_at(config, "t", w)


@pytest.mark.parametrize("protocol", ["canal-json", "simple"])
@pytest.mark.parametrize("layout", [LayoutConfig(), LayoutConfig(write_mode="copy-on-write")], ids=["mor", "cow"])
def test_a_keyless_delete_and_update_carrying_the_default_find_the_stored_row(tmp_path: Path, protocol: str,
                                                                              layout: LayoutConfig, runner=None) -> None:  # noqa: ANN001
    h = History()
    v1 = schema("shop", "k", [("id", "int"), ("v", "varchar(8)")], keys=())
    v2 = schema("shop", "k", [("id", "int"), ("v", "varchar(8)"), ("c", "int")], keys=())
    h.ddl("shop", "k", "CREATE TABLE shop.k (id int, v varchar(8))", v1, kind="CREATE")
    h.row(Op.INSERT, v1, None, {"id": 1, "v": "a"})
    h.row(Op.INSERT, v1, None, {"id": 2, "v": "b"})
    h.row(Op.INSERT, v1, None, {"id": 3, "v": "c"})
    w1 = h.mark()
    first = list(h.events)
    h.events.clear()
    h.ddl("shop", "k", "ALTER TABLE shop.k ADD COLUMN c INT DEFAULT 7", v2, v1, kind="ALTER")
    h.row(Op.DELETE, v2, {"id": 1, "v": "a", "c": 7}, None)
    w2 = h.mark()
    second = list(h.events)
    h.events.clear()
    h.row(Op.UPDATE, v2, {"id": 2, "v": "b", "c": 7}, {"id": 2, "v": "b", "c": 9})
    h.row(Op.DELETE, v2, {"id": 3, "v": "c", "c": 7}, None)
    w3 = h.mark()
    config, _ = run(tmp_path, protocol, [first, second, list(h.events)], layout=layout, runner=runner)
    everything = first + second + list(h.events)
    assert rows_at(config, "k", w1) == normalise([{"id": 1, "v": "a"}, {"id": 2, "v": "b"}, {"id": 3, "v": "c"}])
    at2 = normalise([{"id": 2, "v": "b", "c": 7}, {"id": 3, "v": "c", "c": 7}])
    assert rows_at(config, "k", w2) == at2 == oracle_rows(model_at(everything, w2), ("shop", "k"))
    at3 = normalise([{"id": 2, "v": "b", "c": 9}])
    assert rows_at(config, "k", w3) == at3 == oracle_rows(model_at(everything, w3), ("shop", "k"))


@pytest.mark.parametrize("protocol", ["canal-json", "debezium"])
def test_not_null_without_default_fills_the_implicit_default(tmp_path: Path, protocol: str) -> None:
    h = History()
    cols = [("id", "int"), ("v", "int")]
    v1 = schema("shop", "t", cols)
    added = [("n", "bigint"), ("s", "varchar(10)"), ("e", "enum('SMALL','LARGE')"), ("d", "decimal(6,2)"), ("z", "datetime"),
             ("m", "int"), ("x", "varchar(4)")]
    v2 = schema("shop", "t", cols + added)
    v2 = type(v2)(v2.database, v2.table, tuple(type(c)(c.name, c.type, c.name in ("m", "x")) for c in v2.columns), v2.key_columns)
    h.ddl("shop", "t", "CREATE TABLE shop.t (id int primary key, v int)", v1, kind="CREATE")
    h.row(Op.INSERT, v1, None, {"id": 1, "v": 1})
    h.mark()
    first = list(h.events)
    h.events.clear()
    h.ddl("shop", "t", "ALTER TABLE shop.t ADD COLUMN n BIGINT NOT NULL, ADD COLUMN s VARCHAR(10) NOT NULL, "
                       "ADD COLUMN e ENUM('SMALL','LARGE') NOT NULL, ADD COLUMN d DECIMAL(6,2) NOT NULL, "
                       "ADD COLUMN z DATETIME NOT NULL, ADD COLUMN m INT, ADD COLUMN x VARCHAR(4) DEFAULT NULL", v2, v1, kind="ALTER")
    w2 = h.mark()
    config, _ = run(tmp_path, protocol, [first, list(h.events)])
    got = read_table(config, "shop", "t", w2).to_pylist()
    # The zero DATETIME reads as NULL, as every zero date does (README, type mapping). Upper-case
    # members: the Debezium encoder writes typeExpression upper-cased, members too.
    assert got == [{"id": 1, "v": 1, "n": 0, "s": "", "e": "SMALL", "d": got[0]["d"], "z": None, "m": None, "x": None}]
    assert str(got[0]["d"]) == "0.00"
    assert normalise(got) == oracle_rows(model_at(first + list(h.events), w2), ("shop", "t"))


@pytest.mark.parametrize("protocol", ["canal-json", "debezium"])
def test_a_char_default_reads_without_its_trailing_spaces(tmp_path: Path, protocol: str) -> None:
    """MySQL 8 manual, "The CHAR and VARCHAR Types": a CHAR value's trailing spaces are removed when
    it is read (a VARCHAR keeps them), so the rows ADD COLUMN fills read the DEFAULT without them."""
    h = History()
    v1 = schema("shop", "t", [("id", "int")])
    v2 = schema("shop", "t", [("id", "int"), ("c", "char(6)"), ("s", "varchar(6)"), ("e", "char(3)")])
    h.ddl("shop", "t", "CREATE TABLE shop.t (id int primary key)", v1, kind="CREATE")
    h.row(Op.INSERT, v1, None, {"id": 1})
    h.mark()
    first = list(h.events)
    h.events.clear()
    h.ddl("shop", "t", "ALTER TABLE shop.t ADD COLUMN c CHAR(6) NOT NULL DEFAULT ' ab  ', "
                       "ADD COLUMN s VARCHAR(6) DEFAULT ' ab  ', ADD COLUMN e CHAR(3) DEFAULT '   '", v2, v1, kind="ALTER")
    w2 = h.mark()
    config, _ = run(tmp_path, protocol, [first, list(h.events)])
    got = read_table(config, "shop", "t", w2).to_pylist()
    assert got == [{"id": 1, "c": " ab", "s": " ab  ", "e": ""}]
    assert normalise(got) == oracle_rows(model_at(first + list(h.events), w2), ("shop", "t"))


@pytest.mark.parametrize("protocol", ["canal-json", "simple"])
def test_default_current_timestamp_is_the_statements_time_in_the_upstream_zone(tmp_path: Path, protocol: str) -> None:
    h = History()
    v1 = schema("shop", "t", [("id", "int")])
    v2 = schema("shop", "t", [("id", "int"), ("at", "datetime(3)"), ("ts", "timestamp")])
    h.ddl("shop", "t", "CREATE TABLE shop.t (id int primary key)", v1, kind="CREATE")
    h.row(Op.INSERT, v1, None, {"id": 1})
    h.ts = (1_700_000_000_122 << 18) + 5  # the next is a TiDB commitTs: physical milliseconds << 18 | logical
    h.ddl("shop", "t", "ALTER TABLE shop.t ADD COLUMN at DATETIME(3) DEFAULT CURRENT_TIMESTAMP(3), "
                       "ADD COLUMN ts TIMESTAMP NOT NULL DEFAULT NOW()", v2, v1, kind="ALTER")
    ddl_ts = h.ts
    h.row(Op.INSERT, v2, None, {"id": 2, "at": dt.datetime(2024, 1, 1), "ts": dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)})
    w = h.mark()
    zone = dt.timezone(dt.timedelta(hours=8))
    config, _ = run(tmp_path, protocol, [list(h.events)], options={"timezone": "+08:00"})
    assert ddl_ts >> 18 == 1_700_000_000_123
    rows = sorted(read_table(config, "shop", "t", w).to_pylist(), key=lambda r: r["id"])
    # 2023-11-14 22:13:20.123 UTC: a DATETIME holds the upstream's local time, a TIMESTAMP the instant (to the second).
    assert rows[0]["at"] == dt.datetime(2023, 11, 15, 6, 13, 20, 123000)
    assert rows[0]["ts"] == dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=dt.timezone.utc)
    assert rows[1]["at"] == dt.datetime(2024, 1, 1)
    assert normalise(rows) == oracle_rows(model_at(list(h.events), w, zone), ("shop", "t"))


@pytest.mark.parametrize("default", ["(UUID())", "(RAND())", "(v * 2)"])
def test_a_default_the_stream_cannot_reproduce_fails_the_table_naming_the_statement(tmp_path: Path, default: str) -> None:
    h = History()
    v1 = schema("shop", "t", [("id", "int"), ("v", "int")])
    h.ddl("shop", "t", "CREATE TABLE shop.t (id int primary key, v int)", v1, kind="CREATE")
    h.row(Op.INSERT, v1, None, {"id": 1, "v": 1})
    sql = f"ALTER TABLE shop.t ADD COLUMN u VARCHAR(36) DEFAULT {default}"
    h.ddl("shop", "t", sql, kind="ALTER")
    h.mark()
    with pytest.raises(UnsupportedSchemaChange, match=rf"^shop\.t: {re.escape(repr(sql))} at commitTs \d+ adds column 'u' to a table holding rows"):
        run(tmp_path, "canal-json", [h.events])


@pytest.mark.parametrize("emptied", [False, True], ids=["never-filled", "rows-deleted"])
def test_an_unreproducible_default_on_an_empty_table_is_applied(tmp_path: Path, emptied: bool) -> None:
    h = History()
    v1 = schema("shop", "t", [("id", "int")])
    h.ddl("shop", "t", "CREATE TABLE shop.t (id int primary key)", v1, kind="CREATE")
    batches = []
    if emptied:  # a data file whose one row a position delete file deletes (merge-on-read)
        h.row(Op.INSERT, v1, None, {"id": 9})
        h.mark()
        batches.append(list(h.events))
        h.events.clear()
        h.row(Op.DELETE, v1, {"id": 9}, None)
        h.mark()
        batches.append(list(h.events))
        h.events.clear()
    h.ddl("shop", "t", "ALTER TABLE shop.t ADD COLUMN u VARCHAR(36) DEFAULT (UUID())", kind="ALTER")
    v2 = schema("shop", "t", [("id", "int"), ("u", "varchar(36)")])
    h.row(Op.INSERT, v2, None, {"id": 1, "u": "x"})
    w = h.mark()
    config, _ = run(tmp_path, "canal-json", batches + [h.events])
    assert read_table(config, "shop", "t", w).to_pylist() == [{"id": 1, "u": "x"}]


def test_set_and_drop_default_change_no_rows(tmp_path: Path) -> None:
    h = History()
    v1 = schema("shop", "t", [("id", "int"), ("v", "int")])
    h.ddl("shop", "t", "CREATE TABLE shop.t (id int primary key, v int)", v1, kind="CREATE")
    h.row(Op.INSERT, v1, None, {"id": 1, "v": None})
    h.ddl("shop", "t", "ALTER TABLE shop.t ALTER COLUMN v SET DEFAULT 5", kind="ALTER")
    h.ddl("shop", "t", "ALTER TABLE shop.t ALTER v DROP DEFAULT", kind="ALTER")
    w = h.mark()
    config, _ = run(tmp_path, "canal-json", [h.events])
    assert read_table(config, "shop", "t", w).to_pylist() == [{"id": 1, "v": None}]


def test_columns_one_statement_adds_are_filled_in_one_rewrite_by_field_id(tmp_path: Path) -> None:
    h = History()
    v1 = schema("shop", "t", [("id", "int")])
    h.ddl("shop", "t", "CREATE TABLE shop.t (id int primary key)", v1, kind="CREATE")
    h.row(Op.INSERT, v1, None, {"id": 1})
    h.mark()
    first = list(h.events)
    h.events.clear()
    h.ddl("shop", "t", "ALTER TABLE shop.t ADD COLUMN a INT DEFAULT 1, ADD COLUMN b VARCHAR(4) NOT NULL, "
                       "ADD COLUMN c INT DEFAULT 3, RENAME COLUMN a TO a2, DROP COLUMN c", kind="ALTER")
    w = h.mark()
    config, _ = run(tmp_path, "canal-json", [first, list(h.events)])
    assert read_table(config, "shop", "t", w).to_pylist() == [{"id": 1, "a2": 1, "b": ""}]
    table = cat.open_catalog(config).load_table(cat.identifier(config, "shop", "t"))
    fills = [s for s in table.snapshots() if s.summary and s.summary.operation.value == "overwrite"]
    assert len(fills) == 1  # one rewrite for the statement, not one per column


@pytest.mark.parametrize("protocol", ["canal", "debezium-mysql"])
def test_without_commit_ts_current_timestamp_is_the_binlog_event_time(tmp_path: Path, protocol: str) -> None:
    """Official Canal and Debezium MySQL carry no commitTs: the statement's time is its binlog event
    time, the start of the statement, which is what MySQL's NOW() returned to it."""
    v1 = schema("shop", "t", [("id", "int")])
    v2 = schema("shop", "t", [("id", "int"), ("at", "datetime")])
    ms = 1_700_000_000_000
    events = [DdlChange("shop", "t", "CREATE TABLE shop.t (id int primary key)", None, P, "CREATE", None, v1, ms),
              RowChange(Op.INSERT, "shop", "t", None, {"id": 1}, ("id",), v1.column_types, None, P, ms + 1),
              DdlChange("shop", "t", "ALTER TABLE shop.t ADD COLUMN at DATETIME DEFAULT CURRENT_TIMESTAMP", None, P,
                        "ALTER", v1, v2, ms + 2_500)]
    # Later rows on every partition move the derived watermark past the statement.
    events += [RowChange(Op.INSERT, "shop", "t", None, {"id": i, "at": None}, ("id",), v2.column_types, None, P, ms + 9_000)
               for i in range(10, 30)]
    config, results = run(tmp_path, protocol, [events])
    w = results[0].watermark
    assert w >= (ms + 2_500) << 18
    rows = {r["id"]: r for r in read_table(config, "shop", "t", w).to_pylist()}
    assert rows[1]["at"] == dt.datetime(2023, 11, 14, 22, 13, 22)  # ms + 2.5 s, in UTC, at second precision
    oracle = oracle_from_records(protocol, "cdc", get_encoder(protocol).encode_all(events, 2), 2, BinlogOracle())
    assert oracle.cut([("cdc", 0), ("cdc", 1)]) == w
    assert oracle_rows(oracle, ("shop", "t")) == normalise(list(rows.values()))


@pytest.mark.slow
def test_the_fill_runs_on_spark_executors(tmp_path: Path) -> None:
    """The key-less case with every run's fold, rewrite and fill on Spark (local[2])."""
    from spark.runtime.runners import SparkRunner
    from spark.runtime.session import build_context

    context = build_context("tidelake-defaults", "local[2]", **{"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false"})
    try:
        test_a_keyless_delete_and_update_carrying_the_default_find_the_stored_row(tmp_path, "canal-json", LayoutConfig(),
                                                                                  runner=SparkRunner(context))
    finally:
        context.stop()


def test_the_fill_runs_through_spark_s_core_api(tmp_path: Path) -> None:
    """The key-less case through the stand-in for Spark's core API (tests/spark/fold/test_spark_fold.py):
    the fill's function is shipped as a task's (``on_executor``), pickled and run per partition."""
    from spark.runtime.runners import SparkRunner

    from .fold.test_spark_fold import FakeContext

    test_a_keyless_delete_and_update_carrying_the_default_find_the_stored_row(tmp_path, "canal-json", LayoutConfig(),
                                                                              runner=SparkRunner(FakeContext(3)))
