"""``tidelake query``: only the named tables are read, columns and simple filters pushed into the scan, errors."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest
from pyiceberg.expressions import (
    AlwaysTrue,
    And,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThanOrEqual,
    NotNull,
)
from pyiceberg.schema import Schema
from pyiceberg.types import DecimalType, IntegerType, LongType, NestedField, StringType

from spark.cli.main import main, query
from spark.query.read import TableScan, View, read_pipeline
from spark.query.names import QueryError
from spark.query.sql import QueryFailed, plan_scans, run_query

from tests.spark.tables.test_catalog import ODD_DB, ODD_TABLE, _pipeline

pytestmark = pytest.mark.slow  # whole intervals, Spark or services: make test-fast leaves it out (docs/testing.md)


def _schema(*cols: tuple[str, object]) -> Schema:
    return Schema(*[NestedField(i + 1, n, t, required=False) for i, (n, t) in enumerate(cols)])


SCHEMAS = {
    ("shop", "items"): _schema(("id", LongType()), ("name", StringType()), ("price", DecimalType(8, 2)), ("Qty", IntegerType())),
    ("shop", "orders"): _schema(("id", LongType()), ("item_id", LongType()), ("note", StringType())),
    ("crm", "Orders"): _schema(("id", LongType()),),
    ("crm", "orders"): _schema(("id", LongType()),),
}


def test_only_the_named_tables_with_the_columns_and_filters_used() -> None:
    plan = plan_scans("SELECT name FROM shop.items WHERE id > 1 AND price <= 3.25 AND qty IN (1, 2) AND name IS NOT NULL", SCHEMAS)
    assert plan == {("shop", "items"): TableScan(("id", "name", "price", "Qty"), And(
        And(And(GreaterThan("id", 1), LessThanOrEqual("price", Decimal("3.25"))), In("Qty", [1, 2])), NotNull("name")))}
    # Literals on the left, BETWEEN, negative numbers, strings.
    assert plan_scans("SELECT 1 FROM shop.items WHERE 3 < id AND price BETWEEN -1 AND 2.5 AND name = 'x'", SCHEMAS) == {
        ("shop", "items"): TableScan(("id", "name", "price"), And(And(GreaterThan("id", 3), And(
            GreaterThanOrEqual("price", Decimal("-1")), LessThanOrEqual("price", Decimal("2.5")))), EqualTo("name", "x")))}


def test_what_is_not_pushed_down() -> None:
    # OR, functions of a column, a string against a number, a scale the column cannot hold: read, then DuckDB filters.
    for where in ("id = 1 OR id = 2", "lower(name) = 'x'", "id = '1'", "price = 1.255", "name IS NULL", "id + 1 = 2"):
        scan = plan_scans(f"SELECT id FROM shop.items WHERE {where}", SCHEMAS)[("shop", "items")]
        assert scan.row_filter == AlwaysTrue(), where
    # A table read twice keeps every row (each side filters differently); columns are the union.
    plan = plan_scans("SELECT a.name FROM shop.items a JOIN shop.items b ON a.id = b.id WHERE a.id = 1 AND b.price > 2", SCHEMAS)
    assert plan == {("shop", "items"): TableScan(("id", "name", "price"), AlwaysTrue())}


def test_stars_counts_ctes_joins_and_subqueries() -> None:
    assert plan_scans("SELECT * FROM shop.items", SCHEMAS)[("shop", "items")].columns == ("id", "name", "price", "Qty")
    assert plan_scans("SELECT count(*) FROM shop.items", SCHEMAS)[("shop", "items")].columns == ()
    # A CTE named like a table is the CTE; the filter inside it still reaches the scan.
    plan = plan_scans("WITH items AS (SELECT id FROM shop.items WHERE name = 'n') SELECT * FROM items", SCHEMAS)
    assert plan == {("shop", "items"): TableScan(("id", "name"), EqualTo("name", "n"))}
    plan = plan_scans("SELECT o.note FROM shop.orders o LEFT JOIN shop.items USING (id) "
                      "WHERE o.item_id IN (SELECT id FROM shop.items WHERE price > 1)", SCHEMAS)
    assert plan[("shop", "orders")] == TableScan(("id", "item_id", "note"), AlwaysTrue())
    assert plan[("shop", "items")] == TableScan(("id", "price"), AlwaysTrue())  # read twice: no row filter
    # Statements sqlglot cannot see into are read whole; dynamic names read every table.
    assert plan_scans("DESCRIBE shop.items", SCHEMAS) == {("shop", "items"): TableScan()}
    assert plan_scans("SELECT * FROM query_table('shop.items')", SCHEMAS) is None


def test_names_follow_sql_case_and_quoting() -> None:
    assert set(plan_scans("SELECT ID FROM SHOP.ITEMS", SCHEMAS)) == {("shop", "items")}
    assert set(plan_scans('SELECT 1 FROM crm."Orders"', SCHEMAS)) == {("crm", "Orders")}
    assert set(plan_scans("SELECT 1 FROM crm.orders", SCHEMAS)) == {("crm", "orders")}  # the exact spelling wins
    with pytest.raises(QueryError, match=r'crm.ORDERS matches crm.Orders, crm.orders; quote'):
        plan_scans("SELECT 1 FROM crm.ORDERS", SCHEMAS)
    with pytest.raises(QueryError, match=r'unknown table "Shop"."items"; the tables at this watermark are: crm."Orders"'):
        plan_scans('SELECT 1 FROM "Shop"."items"', SCHEMAS)
    assert plan_scans("SELECT * FROM information_schema.tables", SCHEMAS) == {}


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("query")
    config, w1, w2 = _pipeline(tmp)
    path = tmp / "pipeline.toml"
    path.write_text(f'name = "shop"\n[kafka]\nbootstrap_servers = "unused:9092"\n[[topics]]\nname = "cdc"\n'
                    f'protocol = "canal-json"\n[storage]\nurl = "{tmp / "archive"}"\n')
    return config, w1, w2, path


@pytest.fixture
def scans(monkeypatch):
    """Every scan a query makes: (table, TableScan)."""
    seen: list = []
    real = View.scan

    def scan(self, name, wanted=None, *, metadata=False):
        seen.append((name, wanted))
        return real(self, name, wanted, metadata=metadata)

    monkeypatch.setattr(View, "scan", scan)
    return seen


def _duckdb_over_everything(config, sql: str, at):
    """The reference: every table read whole into DuckDB, as ``tidelake query`` did before."""
    _, tables = read_pipeline(config, at)
    con = duckdb.connect()
    for i, ((db, table), data) in enumerate(tables.items()):
        con.register(f"t{i}", data)
        con.execute(f'CREATE SCHEMA IF NOT EXISTS "{db}"')
        con.execute(f'CREATE VIEW "{db}"."{table}" AS SELECT * FROM t{i}')
    return con.sql(sql).fetch_arrow_table()


QUERIES = [
    "SELECT name, price FROM shop.items WHERE id >= 2 AND price < 3.25 ORDER BY id",
    f'SELECT * FROM "{ODD_DB}"."{ODD_TABLE}" WHERE "qty é" > 5 ORDER BY id',
    f'SELECT i.id, o."Qty é" FROM shop.items i LEFT JOIN "{ODD_DB}"."{ODD_TABLE}" o USING (id) WHERE o.id IN (1, 3) ORDER BY 1',
    "SELECT count(*) AS n, sum(price) AS total FROM shop.items WHERE name <> 'renamed'",
]


@pytest.mark.parametrize("sql", QUERIES)
def test_results_equal_duckdb_over_whole_tables(pipeline, sql: str, scans) -> None:
    config, w1, w2, _ = pipeline
    for at in (w1, w2):
        w, got = query(config, sql, at)
        assert w == at
        assert got.to_pylist() == _duckdb_over_everything(config, sql, at).to_pylist() and got.num_rows, (sql, at)


def test_reads_only_what_the_query_names(pipeline, scans) -> None:
    config, _, w2, _ = pipeline
    _, got = run_query(config, "SELECT name FROM shop.items WHERE id > 1 ORDER BY id", w2)
    assert got.to_pylist() == [{"name": "n2"}, {"name": "n3"}]
    assert scans == [(("shop", "items"), TableScan(("id", "name"), GreaterThan("id", 1)))]
    # Catalog queries see every table and read none.
    scans.clear()
    _, got = run_query(config, "SELECT table_schema, table_name FROM information_schema.tables WHERE table_schema <> 'main' ORDER BY 1, 2")
    assert got.to_pylist() == [{"table_schema": ODD_DB, "table_name": ODD_TABLE}, {"table_schema": "archive", "table_name": "old_items"},
                               {"table_schema": "shop", "table_name": "items"}]
    assert scans == []


def test_with_metadata_exposes_commit_ts_and_op(pipeline) -> None:
    config, _, w2, _ = pipeline
    _, got = run_query(config, "SELECT id, _tidelake_op, _tidelake_commit_ts FROM shop.items ORDER BY id", w2, metadata=True)
    rows = got.to_pylist()
    assert [r["id"] for r in rows] == [1, 2, 3] and [r["_tidelake_op"] for r in rows] == ["update", "insert", "insert"]
    assert rows[0]["_tidelake_commit_ts"] > rows[1]["_tidelake_commit_ts"]  # id 1 was updated in the second interval
    with pytest.raises(QueryError, match='Referenced column "_tidelake_op" not found'):
        run_query(config, "SELECT _tidelake_op FROM shop.items", w2)


def test_wrong_queries_fail_before_reading(pipeline, scans) -> None:
    config, _, w2, _ = pipeline
    for sql, message in (("SELECT nope FROM shop.items", 'Referenced column "nope" not found'),
                         ("SELECT * FROM shop.nope", "unknown table shop.nope; the tables at this watermark are"),
                         ("SELEC 1", 'syntax error at or near "SELEC"'),
                         ("SELECT 1; SELECT 2", "give one SQL statement; found 2"),
                         ("SELECT id + 'x' FROM shop.items", "Conversion Error|Binder Error")):
        with pytest.raises(QueryError, match=message):
            run_query(config, sql, w2)
    assert scans == []
    with pytest.raises(QueryFailed, match="Could not convert string"):
        run_query(config, "SELECT CAST(name AS INTEGER) FROM shop.items", w2)


def test_cli_formats(pipeline, capsys) -> None:
    _, _, w2, path = pipeline
    sql = "SELECT id, name FROM shop.items WHERE id <= 2 ORDER BY id"
    assert main(["query", "--config", str(path), "--at", str(w2), "--format", "json", sql]) == 0
    out = capsys.readouterr()
    assert [json.loads(line) for line in out.out.splitlines()] == [{"id": 1, "name": "renamed"}, {"id": 2, "name": "n2"}]
    assert out.err.startswith(f"-- shop at W={w2}")
    assert main(["query", "--config", str(path), "--format", "csv", sql]) == 0
    assert list(csv.reader(io.StringIO(capsys.readouterr().out))) == [["id", "name"], ["1", "renamed"], ["2", "n2"]]
    assert main(["query", "--config", str(path), sql]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["id", "name"] and lines[2].split() == ["1", "renamed"] and lines[-1] == "(2 rows)"
    assert main(["query", "--config", str(path), "--with-metadata", "--format", "json",
                 "SELECT _tidelake_op AS op FROM shop.items WHERE id = 3"]) == 0
    assert json.loads(capsys.readouterr().out) == {"op": "insert"}


@pytest.mark.parametrize(("sql", "code", "message"), [
    ("SELECT nope FROM shop.items", 2, 'error: Binder Error: Referenced column "nope" not found'),
    ("SELECT * FROM shop.nope", 2, "error: unknown table shop.nope"),
    ("SELEC 1", 2, 'error: Parser Error: syntax error at or near "SELEC"'),
    ("SELECT CAST(name AS INTEGER) FROM shop.items", 1, "error: Conversion Error: Could not convert string"),
])
def test_cli_errors_are_one_line(pipeline, capsys, sql: str, code: int, message: str) -> None:
    _, _, _, path = pipeline
    assert main(["query", "--config", str(path), sql]) == code
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1, err
    with pytest.raises(Exception, match=r"."):
        main(["query", "--config", str(path), "--debug", sql])  # --debug: the traceback, as raised


def test_a_closed_pipe_is_one_line_and_exit_1(pipeline) -> None:
    _, _, _, path = pipeline
    sql = "SELECT i FROM range(200000) t(i)"
    proc = subprocess.Popen([sys.executable, "-m", "spark.cli", "query", "--config", str(path), "--format", "csv", sql],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=Path(__file__).resolve().parents[3])
    assert proc.stdout is not None and proc.stdout.readline() == b'"i"\n'
    proc.stdout.close()  # the reader goes away, as `| head -1` does
    err = proc.stderr.read().decode()
    assert proc.wait(60) == 1
    assert "Traceback" not in err and err.splitlines()[-1] == "error: the output was closed before everything was written"


# Upstream databases DuckDB names otherwise: its catalogs, the system catalog's schemas, its
# default catalog and schema; one named like tidelake's own catalog and one like a stand-in schema.
RESERVED_DBS = ["system", "temp", "information_schema", "pg_catalog", "main", "memory", "tidelake", "_system",
                'we"ird.db', "shop"]


@pytest.fixture(scope="module")
def reserved(tmp_path_factory):
    """A table "t" in each of RESERVED_DBS: (id, b varbinary, db) with id 1 and 2."""
    from cdc_codecs import Op

    from tests.spark.test_schema_evolution import History, run, schema

    tmp = tmp_path_factory.mktemp("reserved")
    h = History()
    for db in RESERVED_DBS:
        t = schema(db, "t", [("id", "int"), ("b", "varbinary(8)"), ("db", "varchar(32)")])
        quoted = db.replace("`", "``")
        h.ddl(db, "t", f"CREATE TABLE `{quoted}`.`t` (id int primary key, b varbinary(8), db varchar(32))", t, kind="CREATE")
        for i in (1, 2):
            h.row(Op.INSERT, t, None, {"id": i, "b": bytes([0, 255, i]) + b'"\n', "db": db})
    w = h.mark()
    config, _ = run(tmp, "canal-json", [list(h.events)])
    path = tmp / "pipeline.toml"
    path.write_text(f'name = "shop"\n[kafka]\nbootstrap_servers = "unused:9092"\n[[topics]]\nname = "cdc"\n'
                    f'protocol = "canal-json"\n[storage]\nurl = "{tmp / "archive"}"\n')
    return config, w, path


def _sql_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@pytest.mark.parametrize("db", RESERVED_DBS)
def test_a_database_with_a_name_duckdb_reserves_is_queryable_quoted(reserved, db: str) -> None:
    config, w, _ = reserved
    q = _sql_ident(db)
    _, got = run_query(config, f"SELECT {q}.t.id, t.db, b FROM {q}.t WHERE id = 2", w)
    assert got.to_pylist() == [{"id": 2, "db": db, "b": b'\x00\xff\x02"\n'}]
    # Beside another database's table, in a join and a subquery, in any case when unquoted.
    _, got = run_query(config, f"SELECT s.db, x.db AS other FROM {q}.\"t\" s JOIN shop.T x USING (id) "
                               f"WHERE s.id IN (SELECT max(id) FROM {q}.t)", w)
    assert got.to_pylist() == [{"db": db, "other": "shop"}]


def test_every_database_is_listed_and_duckdbs_own_schemas_still_answer(reserved) -> None:
    config, w, _ = reserved
    _, got = run_query(config, "SELECT count(*) AS n FROM information_schema.tables WHERE table_name = 't'", w)
    assert got.to_pylist() == [{"n": len(RESERVED_DBS)}]
    _, got = run_query(config, "SELECT count(*) > 0 AS some FROM pg_catalog.pg_namespace", w)
    assert got.to_pylist() == [{"some": True}]
    total = " UNION ALL ".join(f"SELECT db FROM {_sql_ident(db)}.t WHERE id = 1" for db in RESERVED_DBS)
    _, got = run_query(config, f"SELECT db FROM ({total}) ORDER BY db", w)
    assert [r["db"] for r in got.to_pylist()] == sorted(RESERVED_DBS)


def test_json_output_writes_binary_as_base64_also_nested(reserved, capsys) -> None:
    import base64

    _, w, path = reserved
    sql = 'SELECT id, b, [b, NULL] AS l, {\'inner\': b, \'n\': 1} AS s FROM "system"."t" WHERE id = 1'
    assert main(["query", "--config", str(path), "--at", str(w), "--format", "json", sql]) == 0
    b64 = base64.b64encode(b'\x00\xff\x01"\n').decode()
    assert json.loads(capsys.readouterr().out) == {"id": 1, "b": b64, "l": [b64, None], "s": {"inner": b64, "n": 1}}
