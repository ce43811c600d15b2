"""docs/engines.md's recipes, run as written against a pipeline's catalog: what other engines read is what tidelake reads."""

from __future__ import annotations

import datetime as dt
import re
import sqlite3
from pathlib import Path

import pyarrow as pa

from cdc_codecs import Op
from spark.tables import catalog as cat
from spark.query.read import published_watermarks, read_table

from .test_catalog import duckdb_with_iceberg
from .test_schema_evolution import History, run, schema

DOCS = Path(__file__).resolve().parents[2] / "docs" / "engines.md"
UTC = dt.UTC


def recipe(name: str) -> str:
    """The code block that follows ``<!-- recipe: <name> ... -->`` in docs/engines.md."""
    text = DOCS.read_text()
    found = re.search(rf"<!-- recipe: {name}\b[^>]*-->\s*```\w*\n(.*?)```", text, re.S)
    assert found, f"docs/engines.md has no recipe {name!r}"
    return found.group(1)


def _orders(tmp_path: Path):
    """shop.orders with a TIMESTAMP column (timestamptz in Iceberg), at two watermarks."""
    h = History()
    orders = schema("shop", "orders", [("id", "int"), ("name", "varchar(20)"), ("placed", "timestamp")])
    h.ddl("shop", "orders", "CREATE TABLE shop.orders (id int primary key, name varchar(20), placed timestamp)", orders,
          kind="CREATE")
    for i in range(1, 4):
        h.row(Op.INSERT, orders, None, {"id": i, "name": f"n{i}", "placed": dt.datetime(2024, 1, i, 23, 30, tzinfo=UTC)})
    w1 = h.mark()
    first = list(h.events)
    h.events.clear()
    h.row(Op.UPDATE, orders, {"id": 1, "name": "n1", "placed": dt.datetime(2024, 1, 1, 23, 30, tzinfo=UTC)},
          {"id": 1, "name": "renamed", "placed": dt.datetime(2024, 2, 1, 23, 30, tzinfo=UTC)})
    h.row(Op.DELETE, orders, {"id": 2, "name": "n2", "placed": dt.datetime(2024, 1, 2, 23, 30, tzinfo=UTC)}, None)
    w2 = h.mark()
    config, results = run(tmp_path, "canal-json", [first, list(h.events)])
    assert [r.watermark for r in results] == [w1, w2]
    return config


def test_the_duckdb_recipe_reads_every_tag_as_tidelake_does(tmp_path: Path) -> None:
    config = _orders(tmp_path)
    assert cat.open_catalog(config).name == "tidelake_shop"  # the name the recipe writes
    code = recipe("duckdb")
    db = cat.catalog_properties(config)["uri"].removeprefix("sqlite:///")
    marks = published_watermarks(config)
    assert len(marks) == 2
    for w in marks:
        con = duckdb_with_iceberg()
        con.execute("SET TimeZone = 'Asia/Shanghai'")  # a user's session zone; the recipe sets UTC
        scope = {"con": con, "catalog": sqlite3.connect(db), "namespace": "shop.shop", "table": "orders", "W": w}
        exec(code, scope)  # noqa: S102 - the documented recipe, as a user runs it
        rows: pa.Table = scope["rows"]
        expected = read_table(config, "shop", "orders", w, metadata=True)
        assert rows.column_names == expected.column_names
        assert sorted(rows.to_pylist(), key=lambda r: r["id"]) == sorted(expected.to_pylist(), key=lambda r: r["id"]), w
        # The session time zone of the recipe: timestamps come back in UTC, as tidelake shows them.
        assert rows.schema.field("placed").type == pa.timestamp("us", tz="UTC")
    assert {r["id"] for r in scope["rows"].to_pylist()} == {1, 3}  # the last W: the update and the delete applied
