"""Online schema change tools end to end: gh-ost's and pt-online-schema-change's DDL, as they issue it.

gh-ost (github/gh-ost, go/logic/applier.go) migrates ``t`` through a ghost table:

- ``drop table if exists _t_ghc`` and ``create table _t_ghc (...)``: its changelog table, which
  gets heartbeat and state rows;
- ``create table _t_gho like t``, then ``alter table _t_gho <the change>``;
- rows copied into ``_t_gho`` (``insert ... select``: row events on ``_t_gho``) while t's own
  binlog rows are applied to ``_t_gho`` too (no triggers: gh-ost reads the binlog);
- the atomic cut-over: a sentry ``create table _t_del``, locks, ``drop table if exists _t_del``
  and ``rename table t to _t_del, _t_gho to t`` (one statement, applied left to right);
- cleanup: ``drop table if exists _t_ghc`` and (``--ok-to-drop-table``) ``drop table if exists _t_del``.

pt-online-schema-change (Percona Toolkit) creates ``_t_new`` from t's definition and alters it,
adds triggers on t (their writes to ``_t_new`` commit with t's rows), copies rows, swaps with
``RENAME TABLE t TO _t_old, _t_new TO t`` and drops ``_t_old``.

Every published W must read the reference model: the old table under its old name at the Ws
before the cut-over, the migrated one after. Today's failures these pin: "RENAME to shop._t_del:
the Iceberg table already exists" (the lake keeps a dropped table, and a second migration's
cut-over renames onto it) and the ghost table's plan run before t's when its rows come first.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from cdc_codecs import Column, DdlChange, Op, RawMessage, RowChange, SourcePosition, TableSchema, Watermark, get_decoder, get_encoder
from cdc_codecs import PROTOCOLS as CODECS
from tests.model.oracle import BinlogOracle, Oracle
from cdc_codecs.types import parse_mysql_type
from spark.tables import catalog as cat
from spark.commit.apply import apply_interval
from spark.cli.main import main
from spark.tables.properties import DROPPED
from spark.commit.published import published_watermarks
from spark.query.read import read_pipeline
from spark.archive.storage import open_storage

from .archives import HOUR, T0, ArchiveWriter, make_config, normalise, oracle_rows

pytestmark = pytest.mark.slow  # whole intervals, Spark or services: make test-fast leaves it out (docs/testing.md)

P = SourcePosition("gen", 0, 0)
DB = "shop"


def _schema(table: str, cols: list[tuple[str, str]], keys: tuple[str, ...] = ("id",)) -> TableSchema:
    return TableSchema(DB, table, tuple(Column(n, parse_mysql_type(t), n not in keys) for n, t in cols), keys)


def _q(table: str) -> str:
    return f"`{DB}`.`{table}`"


class Upstream:
    """A MySQL database as the tools drive it: statements and row events with increasing commitTs,
    and ``mark()`` ending a batch (an interval) with a resolved timestamp."""

    def __init__(self) -> None:
        self.ts = 1000 << 18
        self.batches: list[list] = [[]]
        self.marks: list[int] = []
        self.rows: dict[str, dict[int, dict]] = {}
        self.schemas: dict[str, TableSchema] = {}

    def _tick(self) -> int:
        self.ts += 1 << 18
        return self.ts

    def ddl(self, table: str, sql: str, after: TableSchema | None = None, kind: str = "QUERY") -> None:
        ts = self._tick()
        self.batches[-1].append(DdlChange(DB, table, sql, ts, P, kind, None, after, ts >> 18))

    def write(self, table: str, after: dict | None, before: dict | None = None, commit_ts: int | None = None) -> None:
        """One row event (``commit_ts``: in the transaction of an earlier one, as a trigger's write is)."""
        s = self.schemas[table]
        op = Op.INSERT if before is None else Op.DELETE if after is None else Op.UPDATE
        ts = commit_ts or self._tick()
        self.batches[-1].append(RowChange(op, DB, table, before, after, s.key_columns, s.column_types, ts, P, ts >> 18))
        rows = self.rows.setdefault(table, {})
        if before is not None:
            rows.pop(before["id"], None)
        if after is not None:
            rows[after["id"]] = after

    def create(self, table: str, cols: list[tuple[str, str]], sql: str) -> None:
        self.schemas[table] = _schema(table, cols)
        self.rows[table] = {}
        self.ddl(table, sql, self.schemas[table], "CREATE")

    def mark(self) -> None:
        w = self._tick()
        self.batches[-1].append(Watermark(w, P))
        self.marks.append(w)
        self.batches.append([])


def gh_ost(up: Upstream, column: str, *, ghost_rows_first: bool, marks: bool, two_step: bool = False) -> None:
    """One gh-ost migration of t adding ``column`` (go/logic/applier.go's statements, in its order);
    ``two_step``: ``--cut-over=two-step``, two ALTER TABLE ... RENAME with no t in between."""
    t = up.schemas["t"]
    up.ddl("_t_ghc", f"drop /* gh-ost */ table if exists {_q('_t_ghc')}", kind="DROP")
    up.create("_t_ghc", [("id", "bigint unsigned"), ("hint", "varchar(64)"), ("value", "varchar(4096)")],
              f"create /* gh-ost */ table {_q('_t_ghc')} (id bigint unsigned auto_increment, last_update timestamp not null "
              "DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP, hint varchar(64) charset ascii not null, value "
              "varchar(4096) charset ascii not null, primary key(id), unique key hint_uidx(hint)) auto_increment=256 comment='gh-ost'")
    up.ddl("_t_gho", f"create /* gh-ost */ table {_q('_t_gho')} like {_q('t')}",
           dataclasses.replace(t, table="_t_gho"), "CREATE")
    ghost = dataclasses.replace(t, table="_t_gho", columns=(*t.columns, Column(column, parse_mysql_type("int"), True)))
    up.schemas["_t_gho"], up.rows["_t_gho"] = ghost, {}
    up.ddl("_t_gho", f"alter /* gh-ost */ table {_q('_t_gho')} add column `{column}` int", ghost, "ALTER")
    up.write("_t_ghc", {"id": 256, "hint": "state", "value": "GhostTableMigrated"})
    if marks:
        up.mark()
    n = max(up.rows["t"], default=0)

    def copy() -> None:  # insert ignore into _t_gho select ... from t
        for row in list(up.rows["t"].values()):
            if row["id"] not in up.rows["_t_gho"]:
                up.write("_t_gho", {**row, column: None})

    def binlog_on_t() -> None:  # the application writes t; gh-ost applies the same to _t_gho from the binlog
        up.write("t", {"id": n + 1, "v": "new"})
        first = min(up.rows["t"])
        up.write("t", {**up.rows["t"][first], "v": "upd"}, up.rows["t"][first])
        up.write("_t_gho", {"id": n + 1, "v": "new", column: None})
        if first in up.rows["_t_gho"]:
            up.write("_t_gho", {**up.rows["_t_gho"][first], "v": "upd"}, up.rows["_t_gho"][first])

    if ghost_rows_first:
        copy()
        binlog_on_t()
    else:
        binlog_on_t()
        copy()
    up.write("_t_ghc", {"id": 257, "hint": "heartbeat", "value": "1"})
    if marks:
        up.mark()
    if two_step:
        up.ddl("t", f"alter /* gh-ost */ table {_q('t')} rename {_q('_t_del')}", dataclasses.replace(t, table="_t_del"), "RENAME")
        up.ddl("_t_gho", f"alter /* gh-ost */ table {_q('_t_gho')} rename {_q('t')}", dataclasses.replace(ghost, table="t"), "RENAME")
    else:
        # The cut-over: the sentry table, locks, then the sentry is dropped and the atomic rename runs.
        up.ddl("_t_del", f"drop /* gh-ost */ table if exists {_q('_t_del')}", kind="DROP")
        up.create("_t_del", [("id", "int")], f"create /* gh-ost */ table {_q('_t_del')} (id int auto_increment primary key) "
                  "engine=InnoDB comment='ghost-cut-over-sentry'")
        up.ddl("_t_del", f"drop /* gh-ost */ table if exists {_q('_t_del')}", kind="DROP")
        # The schema after it describes the new t, as protocols that carry one send it.
        up.ddl("t", f"rename /* gh-ost */ table {_q('t')} to {_q('_t_del')}, {_q('_t_gho')} to {_q('t')}",
               dataclasses.replace(ghost, table="t"), "RENAME")
    up.schemas["_t_del"], up.rows["_t_del"] = dataclasses.replace(t, table="_t_del"), up.rows.pop("t")
    up.schemas["t"], up.rows["t"] = dataclasses.replace(ghost, table="t"), up.rows.pop("_t_gho")
    del up.schemas["_t_gho"]
    up.write("t", {"id": n + 2, "v": "after", column: 7})
    if marks:
        up.mark()
    up.ddl("_t_ghc", f"drop /* gh-ost */ table if exists {_q('_t_ghc')}", kind="DROP")
    up.ddl("_t_del", f"drop /* gh-ost */ table if exists {_q('_t_del')}", kind="DROP")
    up.write("t", {"id": n + 3, "v": "later", column: 8})


def pt_osc(up: Upstream, column: str, *, new_rows_first: bool, marks: bool) -> None:
    """One pt-online-schema-change run on t adding ``column``: _t_new, triggers, copy, swap, drop."""
    t = up.schemas["t"]
    cols = [(c.name, str(c.type)) for c in t.columns]
    up.create("_t_new", cols, f"CREATE TABLE {_q('_t_new')} ({', '.join(f'`{n}` {ty}' for n, ty in cols)}, PRIMARY KEY (`id`))")
    new = dataclasses.replace(t, table="_t_new", columns=(*t.columns, Column(column, parse_mysql_type("int"), True)))
    up.schemas["_t_new"] = new
    up.ddl("_t_new", f"ALTER TABLE {_q('_t_new')} ADD COLUMN `{column}` int", new, "ALTER")
    if marks:
        up.mark()
    n = max(up.rows["t"], default=0)

    def copy() -> None:  # INSERT LOW_PRIORITY IGNORE INTO _t_new SELECT ... FROM t, in chunks
        for row in list(up.rows["t"].values()):
            if row["id"] not in up.rows["_t_new"]:
                up.write("_t_new", {**row, column: None})

    def writes_on_t() -> None:  # the triggers write _t_new in the application's transaction
        up.write("t", {"id": n + 1, "v": "new"})
        up.write("_t_new", {"id": n + 1, "v": "new", column: None}, commit_ts=up.ts)  # REPLACE INTO _t_new
        first = min(up.rows["t"])
        up.write("t", {**up.rows["t"][first], "v": "upd"}, up.rows["t"][first])
        if first in up.rows["_t_new"]:
            up.write("_t_new", {**up.rows["_t_new"][first], "v": "upd"}, up.rows["_t_new"][first], commit_ts=up.ts)
        else:
            up.write("_t_new", {**up.rows["t"][first], column: None}, commit_ts=up.ts)

    if new_rows_first:
        copy()
        writes_on_t()
    else:
        writes_on_t()
        copy()
    if marks:
        up.mark()
    up.ddl("t", f"RENAME TABLE {_q('t')} TO {_q('_t_old')}, {_q('_t_new')} TO {_q('t')}", dataclasses.replace(new, table="t"), "RENAME")
    up.schemas["_t_old"], up.rows["_t_old"] = dataclasses.replace(t, table="_t_old"), up.rows.pop("t")
    up.schemas["t"], up.rows["t"] = dataclasses.replace(new, table="t"), up.rows.pop("_t_new")
    del up.schemas["_t_new"]
    up.write("t", {"id": n + 2, "v": "after", column: 5})
    if marks:
        up.mark()
    up.ddl("_t_old", f"DROP TABLE IF EXISTS {_q('_t_old')}", kind="DROP")


def upstream_with_t() -> Upstream:
    up = Upstream()
    up.create("t", [("id", "int"), ("v", "varchar(10)")], f"CREATE TABLE {_q('t')} (id int primary key, v varchar(10))")
    for i in (1, 2, 3):
        up.write("t", {"id": i, "v": f"v{i}"})
    up.mark()
    return up


def model_at_each_w(protocol: str, batches: list[list]) -> tuple[list[list], dict[int, dict]]:
    """Each batch's records (2 partitions), and the reference model's tables at the W after each batch."""
    encoder, decoders, offsets = get_encoder(protocol), [get_decoder(protocol) for _ in range(2)], [0, 0]
    oracle = Oracle() if CODECS[protocol].has_commit_ts else BinlogOracle()
    records, model_at = [], {}
    for batch in batches:
        records.append(encoder.encode_all(batch, 2))
        for r in records[-1]:
            oracle.add(decoders[r.partition].decode(RawMessage(r.key, r.value, SourcePosition("cdc", r.partition, offsets[r.partition]))))
            offsets[r.partition] += 1
        w = oracle.cut([("cdc", 0), ("cdc", 1)])
        model_at[w] = {name: oracle_rows(oracle, name) for name in oracle.tables}
    return records, model_at


def every_w_reads_the_model(config, model_at: dict[int, dict]) -> list[int]:  # noqa: ANN001
    published = published_watermarks(open_storage(config.storage), config.name)
    assert published == sorted(w for w in model_at if w)
    for w in published:
        _, tables = read_pipeline(config, w)
        got = {name: normalise(t.to_pylist()) for name, t in tables.items()}
        want = {name: rows for name, rows in model_at[w].items() if rows or name in got}
        assert got == want, f"published W {w}"
    return published


def archive(tmp: Path, protocol: str, records: list[list]):  # noqa: ANN201
    """A pipeline whose archive holds an interval per batch of ``records``."""
    config = make_config(tmp, protocol)
    writer = ArchiveWriter(config, open_storage(config.storage), {"cdc": 2})
    for i, batch in enumerate(records):
        writer.interval(T0 + i * HOUR, T0 + (i + 1) * HOUR, [("cdc", r) for r in batch])
    return config


def run_and_check(tmp: Path, protocol: str, batches: list[list]) -> tuple:
    """Apply each batch as an interval, in order; every published W must read the model at W."""
    records, model_at = model_at_each_w(protocol, batches)
    config = archive(tmp, protocol, records)
    for i, w in enumerate(model_at):
        assert apply_interval(config, T0 + i * HOUR, T0 + (i + 1) * HOUR).watermark == w
    return config, every_w_reads_the_model(config, model_at)


# TiCDC's Canal-JSON carries no schema with DDL (LIKE copies the lake's table), Simple does; MySQL
# binlog through Debezium (no commitTs: the derived order), where gh-ost and pt-osc run.
PROTOCOLS = ["canal-json", "simple", "debezium-mysql"]
# Every protocol in one interval and an interval per phase; the last two protocols split with the slow tests.
TOOL_RUNS = [pytest.param(p, split, id=f"{p}-{'interval per phase' if split else 'one interval'}",
                          marks=[pytest.mark.slow] if split and p != PROTOCOLS[0] else [])
             for p in PROTOCOLS for split in (False, True)]


@pytest.mark.parametrize("protocol, split", TOOL_RUNS)
def test_gh_ost_twice_every_w_reads_the_model(tmp_path: Path, protocol: str, split: bool) -> None:
    """Two gh-ost migrations of t: the second cut-over renames t onto the _t_del the first dropped."""
    up = upstream_with_t()
    gh_ost(up, "a", ghost_rows_first=True, marks=split)
    up.mark()
    gh_ost(up, "b", ghost_rows_first=False, marks=split)
    up.mark()
    batches = up.batches[:-1] if split else [up.batches[0], [e for b in up.batches[1:] for e in b]]
    config, published = run_and_check(tmp_path, protocol, batches)
    _, last = read_pipeline(config, published[-1])
    assert sorted(last[(DB, "t")].column_names) == ["a", "b", "id", "v"]
    # Old Ws still read the old table under its name then: t before the first cut-over has no column a.
    _, first = read_pipeline(config, published[0])
    assert sorted(first[(DB, "t")].column_names) == ["id", "v"]


@pytest.mark.parametrize("split", [False, True], ids=["one interval", "interval per phase"])
def test_gh_ost_two_step_cut_over_twice(tmp_path: Path, split: bool) -> None:
    """``--cut-over=two-step``: ``alter table t rename _t_del`` (onto the _t_del the first migration
    dropped, the second time), then ``alter table _t_gho rename t``."""
    up = upstream_with_t()
    gh_ost(up, "a", ghost_rows_first=True, marks=split, two_step=True)
    up.mark()
    gh_ost(up, "b", ghost_rows_first=True, marks=split, two_step=True)
    up.mark()
    batches = up.batches[:-1] if split else [up.batches[0], [e for b in up.batches[1:] for e in b]]
    config, published = run_and_check(tmp_path, "canal-json", batches)
    assert sorted(read_pipeline(config, published[-1])[1][(DB, "t")].column_names) == ["a", "b", "id", "v"]


@pytest.mark.parametrize("protocol", ["canal-json", "simple"])
def test_gh_ost_ghost_rows_before_t_rows_in_one_run(tmp_path: Path, protocol: str) -> None:
    """The run's first rows are the ghost's: its plan must still wait for t's (t -> _t_del first)."""
    up = upstream_with_t()
    gh_ost(up, "a", ghost_rows_first=True, marks=False)
    up.mark()
    run_and_check(tmp_path, protocol, [up.batches[0], up.batches[1]])


@pytest.mark.parametrize("protocol, split", TOOL_RUNS)
def test_pt_online_schema_change_twice_every_w_reads_the_model(tmp_path: Path, protocol: str, split: bool) -> None:
    up = upstream_with_t()
    pt_osc(up, "a", new_rows_first=True, marks=split)
    up.mark()
    pt_osc(up, "b", new_rows_first=False, marks=split)
    up.mark()
    batches = up.batches[:-1] if split else [up.batches[0], [e for b in up.batches[1:] for e in b]]
    config, published = run_and_check(tmp_path, protocol, batches)
    _, last = read_pipeline(config, published[-1])
    assert sorted(last[(DB, "t")].column_names) == ["a", "b", "id", "v"]


def test_a_dropped_tables_history_does_not_block_its_name(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    """RENAME onto the name of a table dropped in an earlier run: the old table keeps its tags, under
    a name no upstream table can have, and old Ws read it by its name then."""
    up = upstream_with_t()
    up.create("u", [("id", "int"), ("v", "varchar(10)")], f"CREATE TABLE {_q('u')} (id int primary key, v varchar(10))")
    up.write("u", {"id": 9, "v": "u9"})
    up.mark()
    up.ddl("u", f"DROP TABLE {_q('u')}", kind="DROP")
    up.mark()
    up.ddl("t", f"RENAME TABLE {_q('t')} TO {_q('u')}", kind="RENAME")
    up.schemas["u"], up.rows["u"] = dataclasses.replace(up.schemas.pop("t"), table="u"), up.rows.pop("t")
    up.write("u", {"id": 4, "v": "v4"})
    up.mark()
    config, published = run_and_check(tmp_path, "canal-json", up.batches[:-1])
    assert sorted(r["id"] for r in read_pipeline(config, published[1])[1][(DB, "u")].to_pylist()) == [9]
    assert sorted(r["id"] for r in read_pipeline(config, published[3])[1][(DB, "u")].to_pylist()) == [1, 2, 3, 4]
    catalog = cat.open_catalog(config)
    tables = cat.pipeline_tables(catalog, config)
    released = [t for t in tables if t.name() != cat.identifier(config, *cat.upstream_name(t))]
    assert len(released) == 1 and DROPPED in released[0].properties and cat.upstream_name(released[0]) == (DB, "u")
    # Through the CLI: u at the W before its drop is the dropped table, u now is t renamed.
    path = tmp_path / "pipeline.json"
    path.write_text(json.dumps({"name": "shop", "kafka": {"bootstrap_servers": "unused:9092"},
                                "topics": [{"name": "cdc", "protocol": "canal-json"}], "storage": {"url": str(tmp_path / "archive")}}))
    capsys.readouterr()
    assert main(["tables", "--config", str(path), "--at", str(published[1])]) == 0
    assert "shop.u: 1 rows" in capsys.readouterr().out
    assert main(["-q", "query", "--config", str(path), "--json", "SELECT count(*) AS n FROM shop.u"]) == 0
    assert json.loads(capsys.readouterr().out) == {"n": 4}


class Crash(Exception):
    pass


# The faults the second interval of ``test_a_run_that_dies_anywhere_in_a_cut_over_is_finished``
# reports while committing, in order (every table's "staged", "renamed" and "committed" points).
# The cut-overs' renames (and the plans right after) run every time; the rest with the slow tests.
CUT_OVER_FAULTS = 18
RENAMES = {4, 5, 6, 7, 10, 12, 14}


@pytest.mark.parametrize("at", [a if a in RENAMES else pytest.param(a, marks=pytest.mark.slow) for a in range(CUT_OVER_FAULTS)])
def test_a_run_that_dies_anywhere_in_a_cut_over_is_finished_by_its_retry_or_the_next_run(tmp_path: Path, at: int) -> None:
    """Two gh-ost migrations in one interval (each cut-over renames t onto a _t_del dropped just before):
    the run dies at its ``at``-th commit-phase fault, then the interval is retried (even ``at``) or
    the next interval is run first (odd ``at``). Each fault point is a different state of the
    catalog: data committed with a pending rename, renamed but not named, the dropped table moved
    aside but the rename not done, later plans' tables under earlier plans' names."""
    up = upstream_with_t()
    gh_ost(up, "a", ghost_rows_first=True, marks=False)
    gh_ost(up, "b", ghost_rows_first=False, marks=False)
    up.mark()
    up.write("t", {"id": 100, "v": "last"})
    up.mark()
    records, model_at = model_at_each_w("canal-json", up.batches[:-1])
    config = archive(tmp_path, "canal-json", records)
    apply_interval(config, T0, T0 + HOUR)
    seen: list[str] = []

    def fault(step: str) -> None:
        if step.split(":")[0] in ("staged", "renamed", "committed"):
            seen.append(step)
            if len(seen) == at + 1:
                raise Crash(step)

    with pytest.raises(Crash):
        apply_interval(config, T0 + HOUR, T0 + 2 * HOUR, fault=fault)
    for i in ([1, 2] if at % 2 == 0 else [2, 1]):
        apply_interval(config, T0 + i * HOUR, T0 + (i + 1) * HOUR)
    every_w_reads_the_model(config, model_at)
    names = [cat.table_label(t) for t in cat.pipeline_tables(cat.open_catalog(config), config)]
    assert sorted(n for n in names if "(dropped" not in n) == ["shop._t_del", "shop._t_ghc", "shop.t"]
    assert len(names) == 5, names  # the two sentry tables moved aside by the cut-overs, nothing else


@pytest.mark.parametrize("protocol", [pytest.param(p, marks=[] if p == "simple" else [pytest.mark.slow]) for p in PROTOCOLS])
def test_a_ghost_of_a_partitioned_table_keeps_its_partitions_for_a_later_truncate_partition(
        tmp_path: Path, protocol: str) -> None:
    """Found by the consistency soak (simple): gh-ost's ``create table _t_gho like t`` copies t's
    partitioning (MySQL 8 manual, 15.1.20.3 CREATE TABLE ... LIKE), so after the cut-over
    ``TRUNCATE PARTITION`` of t deletes the ghost's rows of that partition. On protocols that
    carry the schema with the DDL (Simple, Debezium) the copy was made from that schema alone, and
    the truncate isolated t: its partitioning unknown."""
    up = Upstream()
    up.create("t", [("id", "int"), ("v", "varchar(10)")], f"CREATE TABLE {_q('t')} (id int primary key, v varchar(10)) "
              "PARTITION BY RANGE (`id`) (PARTITION p0 VALUES LESS THAN (6), PARTITION p1 VALUES LESS THAN MAXVALUE)")
    for i in (1, 2, 7):
        up.write("t", {"id": i, "v": f"v{i}"})
    up.mark()
    gh_ost(up, "a", ghost_rows_first=True, marks=False)
    up.ddl("t", f"ALTER TABLE {_q('t')} TRUNCATE PARTITION p0", up.schemas["t"], "ALTER")
    for i in range(20, 24):  # move a derived clock's W past the truncate on both partitions
        up.write("t", {"id": i, "v": "later", "a": None})
    up.mark()
    config, published = run_and_check(tmp_path, protocol, [up.batches[0], up.batches[1]])
    ids = sorted(r["id"] for r in read_pipeline(config, published[-1])[1][(DB, "t")].to_pylist())
    assert 7 in ids and min(ids) >= 6, ids  # p0's rows (1, 2) went with the truncate; the model says so too
