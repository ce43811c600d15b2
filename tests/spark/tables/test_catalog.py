"""Iceberg identifiers: nested namespaces, encoded names, RENAME across databases, migration, other engines."""

from __future__ import annotations

import sqlite3
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cdc_codecs import ConfigError, Op
from spark.tables import catalog as cat
from spark.query.read import published_watermarks, read_pipeline, read_table
from spark.core.watermark import tag_name

from tests.spark.test_schema_evolution import History, run, schema

pytestmark = pytest.mark.slow  # whole intervals, Spark or services: make test-fast leaves it out (docs/testing.md)

# A database and a table whose names hold a dot, a space, unicode and uppercase letters.
ODD_DB = "Ops.db ü"
ODD_TABLE = "Orders.2024 表"


def test_identifier_parts_are_lowercase_dot_free_and_reversible() -> None:
    assert cat.identifier_part("orders_2024") == "orders_2024"  # snake_case stays a plain identifier
    assert cat.identifier_part("my.db") == "my%2edb"
    assert cat.identifier_part("Orders") == "%4frders"
    assert cat.identifier_part("a b") == "a%20b"
    assert cat.identifier_part("é") == "%c3%a9"
    assert cat.identifier_part("") == "%00empty"
    assert cat.identifier_part("Orders") != cat.identifier_part("orders")  # both exist in case-sensitive MySQL


@given(st.text(min_size=1, max_size=20))
def test_every_name_encodes_to_one_part_that_decodes_back(name: str) -> None:
    part = cat.identifier_part(name)
    assert "." not in part and part == part.lower()
    assert cat.identifier_name(part) == name


@given(st.text(max_size=8), st.text(max_size=8))
def test_distinct_names_get_distinct_parts(a: str, b: str) -> None:
    if a != b:
        assert cat.identifier_part(a) != cat.identifier_part(b)


def _pipeline(tmp_path: Path):
    """shop.items, an odd-named table in an odd-named database, and a RENAME TABLE into a new database."""
    h = History()
    items = schema("shop", "items", [("id", "int"), ("name", "varchar(20)"), ("price", "decimal(8,2)")])
    odd = schema(ODD_DB, ODD_TABLE, [("id", "int"), ("Qty é", "int")])
    moved = schema("archive", "old_items", [("id", "int"), ("v", "varchar(5)")])
    h.ddl("shop", "items", "CREATE TABLE shop.items (id int primary key, name varchar(20), price decimal(8,2))", items, kind="CREATE")
    h.ddl(ODD_DB, ODD_TABLE, "CREATE TABLE `Ops.db ü`.`Orders.2024 表` (id int primary key, `Qty é` int)", odd, kind="CREATE")
    h.ddl("shop", "old_items", "CREATE TABLE shop.old_items (id int primary key, v varchar(5))",
          schema("shop", "old_items", [("id", "int"), ("v", "varchar(5)")]), kind="CREATE")
    for i in range(1, 4):
        h.row(Op.INSERT, items, None, {"id": i, "name": f"n{i}", "price": Decimal(f"{i}.25")})
        h.row(Op.INSERT, odd, None, {"id": i, "Qty é": i * 10})
    h.row(Op.INSERT, schema("shop", "old_items", [("id", "int"), ("v", "varchar(5)")]), None, {"id": 1, "v": "x"})
    w1 = h.mark()
    first = list(h.events)
    h.events.clear()
    h.row(Op.UPDATE, items, {"id": 1, "name": "n1", "price": Decimal("1.25")}, {"id": 1, "name": "renamed", "price": Decimal("9.99")})
    h.row(Op.DELETE, odd, {"id": 2, "Qty é": 20}, None)
    h.ddl("shop", "old_items", "RENAME TABLE shop.old_items TO archive.old_items", kind="RENAME")
    h.row(Op.INSERT, moved, None, {"id": 2, "v": "y"})
    w2 = h.mark()
    config, results = run(tmp_path, "canal-json", [first, list(h.events)])
    assert [r.watermark for r in results] == [w1, w2]
    return config, w1, w2


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    return _pipeline(tmp_path_factory.mktemp("catalog"))


def test_tables_live_in_one_namespace_per_database(pipeline) -> None:
    config, _, _ = pipeline
    catalog = cat.open_catalog(config)
    assert sorted(catalog.list_namespaces(("shop",))) == [("shop", "%4fps%2edb%20%c3%bc"), ("shop", "archive"), ("shop", "shop")]
    assert catalog.list_tables(("shop",)) == []  # nothing left at the pipeline level
    assert catalog.list_tables(("shop", "shop")) == [("shop", "shop", "items")]
    assert catalog.list_tables(("shop", "archive")) == [("shop", "archive", "old_items")]
    # The dotted string an engine would write resolves to the same table, the dot inside the name included.
    odd = catalog.load_table(f"shop.{cat.identifier_part(ODD_DB)}.{cat.identifier_part(ODD_TABLE)}")
    assert cat.upstream_name(odd) == (ODD_DB, ODD_TABLE)
    assert tuple(odd.name()) == cat.identifier(config, ODD_DB, ODD_TABLE)
    assert sorted(cat.upstream_name(t) for t in cat.pipeline_tables(catalog, config)) == [
        (ODD_DB, ODD_TABLE), ("archive", "old_items"), ("shop", "items")]


def test_rename_table_across_databases_moves_it_between_namespaces(pipeline) -> None:
    config, w1, w2 = pipeline
    catalog = cat.open_catalog(config)
    assert cat.load_table(catalog, config, "shop", "old_items") is None
    moved = cat.load_table(catalog, config, "archive", "old_items")
    assert moved is not None and tuple(moved.name()) == ("shop", "archive", "old_items")
    # The published view keeps each W's name: the same Iceberg table was shop.old_items at W1.
    assert read_table(config, "shop", "old_items", w1).to_pylist() == [{"id": 1, "v": "x"}]
    assert sorted(r["id"] for r in read_table(config, "archive", "old_items", w2).to_pylist()) == [1, 2]


def _to_legacy(config) -> dict[tuple[str, ...], tuple[str, ...]]:
    """Rename every table back to the pre-nesting identifier (<ns>, "<enc db>.<enc table>"), as old catalogs hold them."""
    from spark.archive import layout

    catalog = cat.open_catalog(config)
    legacy = {}
    for t in cat.pipeline_tables(catalog, config):
        db, table = cat.upstream_name(t)
        old = (config.namespace, f"{layout.encode_name(db)}.{layout.encode_name(table)}")
        catalog.rename_table(t.name(), old)
        legacy[old] = cat.identifier(config, db, table)
    return legacy


def test_open_catalog_migrates_legacy_identifiers_once(tmp_path: Path) -> None:
    config, w1, w2 = _pipeline(tmp_path)
    before = {w: read_pipeline(config, w)[1] for w in (w1, w2)}
    uuids = {str(t.metadata.table_uuid) for t in cat.pipeline_tables(cat.open_catalog(config), config)}
    legacy = _to_legacy(config)
    # Another owner's table in the pipeline namespace is not tidelake's to move.
    raw = cat.load_catalog(cat.catalog_name(config.name), **cat.catalog_properties(config))
    raw.create_table(("shop", "someone.elses"), schema=pa.schema([("x", pa.int64())]))
    assert set(raw.list_tables(("shop",))) == {*legacy, ("shop", "someone.elses")}

    assert sorted(cat.migrate_identifiers(raw, config)) == sorted(legacy.items())
    assert cat.migrate_identifiers(raw, config) == []  # idempotent: the second open moves nothing
    assert raw.list_tables(("shop",)) == [("shop", "someone.elses")]
    catalog = cat.open_catalog(config)
    assert {str(t.metadata.table_uuid) for t in cat.pipeline_tables(catalog, config)} == uuids
    assert {w: read_pipeline(config, w)[1] for w in (w1, w2)} == before


def test_open_catalog_runs_the_migration(tmp_path: Path) -> None:
    config, _, w2 = _pipeline(tmp_path)
    before = read_pipeline(config, w2)[1]
    legacy = _to_legacy(config)
    cat.close_catalogs()  # a new tidelake process opening a catalog an earlier version wrote
    catalog = cat.open_catalog(config)
    assert sorted(tuple(t.name()) for t in cat.pipeline_tables(catalog, config)) == sorted(legacy.values())
    assert read_pipeline(config, w2)[1] == before


def test_the_catalog_name_is_an_identifier_engines_take_unquoted() -> None:
    assert cat.catalog_name("shop") == "tidelake_shop"
    assert cat.catalog_name("Shop-eu.1") == "tidelake_Shop_eu_1"
    assert cat.legacy_catalog_name("shop") == "tidelake-shop"


def _catalog_rows(config) -> dict[str, tuple[int, int]]:
    """Per catalog name of the SQL catalog: (tables, namespace properties)."""
    db = Path(cat.catalog_properties(config)["uri"].removeprefix("sqlite:///"))
    with sqlite3.connect(db) as conn:
        tables = dict(conn.execute("SELECT catalog_name, count(*) FROM iceberg_tables GROUP BY 1").fetchall())
        props = dict(conn.execute("SELECT catalog_name, count(*) FROM iceberg_namespace_properties GROUP BY 1").fetchall())
    return {name: (tables.get(name, 0), props.get(name, 0)) for name in {*tables, *props}}


def _sql(config, statement: str, *args) -> None:
    db = Path(cat.catalog_properties(config)["uri"].removeprefix("sqlite:///"))
    with sqlite3.connect(db) as conn:
        conn.execute(statement, args)


def test_open_catalog_moves_a_catalog_written_under_the_earlier_name(tmp_path: Path) -> None:
    """An earlier version named the catalog tidelake-<pipeline>: its rows (keyed by that name) move, once; every W reads as before."""
    config, w1, w2 = _pipeline(tmp_path)
    before = {w: read_pipeline(config, w)[1] for w in (w1, w2)}
    uuids = {str(t.metadata.table_uuid) for t in cat.pipeline_tables(cat.open_catalog(config), config)}
    new, old = "tidelake_shop", "tidelake-shop"
    rows = _catalog_rows(config)[new]
    assert rows[0] == 3 and rows[1] > 0 and set(_catalog_rows(config)) == {new}
    for table in ("iceberg_tables", "iceberg_namespace_properties"):  # the catalog as an earlier version left it
        _sql(config, f"UPDATE {table} SET catalog_name = ? WHERE catalog_name = ?", old, new)
    cat.close_catalogs()  # a new process of this version opens it

    catalog = cat.open_catalog(config)
    assert _catalog_rows(config) == {new: rows}
    assert {str(t.metadata.table_uuid) for t in cat.pipeline_tables(catalog, config)} == uuids
    assert {w: read_pipeline(config, w)[1] for w in (w1, w2)} == before
    assert cat.migrate_catalog_name(catalog, config) == (0, 0)  # once

    # A process of the earlier version still running writes a namespace property again under the old name:
    # the next open drops it (the new name holds it), it does not fail on the duplicate.
    _sql(config, "INSERT INTO iceberg_namespace_properties SELECT ?, namespace, property_key, property_value "
                 "FROM iceberg_namespace_properties WHERE catalog_name = ? LIMIT 1", old, new)
    assert cat.migrate_catalog_name(catalog, config) == (0, 0) and _catalog_rows(config) == {new: rows}
    # A table under both names cannot be settled without the operator: the error names it.
    _sql(config, "INSERT INTO iceberg_tables (catalog_name, table_namespace, table_name, metadata_location) "
                 "SELECT ?, table_namespace, table_name, metadata_location FROM iceberg_tables WHERE catalog_name = ? "
                 "AND table_name = 'items'", old, new)
    with pytest.raises(ConfigError, match=r"under both its catalog name 'tidelake_shop' and the earlier 'tidelake-shop': "
                                          r"\['shop.shop.items'\]"):
        cat.migrate_catalog_name(catalog, config)


# -- another engine: DuckDB's Iceberg extension (duckdb-ext-iceberg from PyPI)


def duckdb_with_iceberg():
    """A DuckDB connection with the iceberg extension from the ``duckdb-ext-iceberg`` wheel (no download)."""
    duckdb = pytest.importorskip("duckdb")
    ext = pytest.importorskip("duckdb_ext")
    # The wheel ships <dir>/v<duckdb version>/<platform>/iceberg.duckdb_extension: DuckDB's own layout.
    con = duckdb.connect(config={"extension_directory": str(Path(next(iter(ext.__path__))) / "extensions"),
                                 "autoinstall_known_extensions": False})
    con.execute("LOAD avro")
    con.execute("LOAD iceberg")
    return con


def jdbc_metadata_location(config, catalog_name: str, engine_identifier: str) -> str:
    """Resolve ``a.b.c`` as Iceberg's JdbcCatalog does: namespace = every part but the last, joined by dots."""
    *namespace, name = engine_identifier.split(".")
    db = Path(cat.catalog_properties(config)["uri"].removeprefix("sqlite:///"))
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT metadata_location FROM iceberg_tables WHERE catalog_name = ? AND table_namespace = ? "
                            "AND table_name = ?", (catalog_name, ".".join(namespace), name)).fetchall()
    assert len(rows) == 1, (engine_identifier, rows)
    return rows[0][0]


def _rows(table: pa.Table) -> list[dict]:
    return sorted(table.to_pylist(), key=lambda r: repr(sorted(r.items())))


@pytest.mark.parametrize("name", [("shop", "items"), (ODD_DB, ODD_TABLE), ("archive", "old_items")])
def test_duckdb_reads_tables_by_identifier_and_every_tag(pipeline, name: tuple[str, str]) -> None:
    config, _, w2 = pipeline
    con = duckdb_with_iceberg()
    catalog = cat.open_catalog(config)
    engine_name = ".".join(cat.identifier(config, *name))
    location = jdbc_metadata_location(config, catalog.name, engine_name)
    # By identifier through the catalog: the table's current state is main at the latest W.
    got = con.execute("SELECT * FROM iceberg_scan(?)", [location]).fetch_arrow_table()
    assert _rows(got) == _rows(read_table(config, *name, w2, metadata=True))
    # By metadata path at each tag: what read_table returns at that W.
    table = catalog.load_table(cat.identifier(config, *name))
    for w in published_watermarks(config):
        snapshot = table.snapshot_by_name(tag_name(w))
        upstream = name if (name != ("archive", "old_items") or w == w2) else ("shop", "old_items")
        expected = _rows(read_table(config, *upstream, w, metadata=True))
        got = con.execute(f"SELECT * FROM iceberg_scan(?, snapshot_from_id={snapshot.snapshot_id})", [location]).fetch_arrow_table()
        assert _rows(got) == expected and expected, (name, w)


def test_the_earlier_catalog_name_moves_in_a_postgresql_catalog_too(tmp_path: Path) -> None:
    """The production catalog: PostgreSQL. A table written under tidelake-<pipeline>, with a tag, reads the same after the move."""
    import uuid

    import psycopg2

    from spark.config import PipelineConfig

    db = f"tidelake_cat_{uuid.uuid4().hex[:8]}"
    admin = psycopg2.connect(host="127.0.0.1", port=5432, user="root", dbname="test")
    admin.autocommit = True
    admin.cursor().execute(f"CREATE DATABASE {db}")
    try:
        uri = f"postgresql+psycopg2://root@127.0.0.1:5432/{db}"
        config = PipelineConfig.from_mapping({
            "name": "shop-eu", "kafka": {"bootstrap_servers": "unused:9092"},
            "topics": [{"name": "cdc", "protocol": "canal-json"}], "storage": {"url": str(tmp_path / "archive")},
            "catalog": {"type": "sql", "properties": {"uri": uri, "warehouse": (tmp_path / "warehouse").as_uri()}},
        }, "test")
        earlier = cat.load_catalog("tidelake-shop-eu", **cat.catalog_properties(config))  # as an earlier version wrote it
        earlier.create_namespace(("shop-eu",))
        earlier.create_namespace(("shop-eu", "shop"))
        table = earlier.create_table(("shop-eu", "shop", "items"), schema=pa.schema([("id", pa.int64())]))
        table.append(pa.table({"id": [1, 2]}))
        table.manage_snapshots().create_tag(table.current_snapshot().snapshot_id, "wm_7").commit()
        table.append(pa.table({"id": [3]}))

        cat.close_catalogs()
        catalog = cat.open_catalog(config)
        assert catalog.name == "tidelake_shop_eu"
        moved = catalog.load_table(("shop-eu", "shop", "items"))
        assert sorted(moved.scan().to_arrow()["id"].to_pylist()) == [1, 2, 3]
        assert sorted(moved.scan(snapshot_id=moved.snapshot_by_name("wm_7").snapshot_id).to_arrow()["id"].to_pylist()) == [1, 2]
        with psycopg2.connect(host="127.0.0.1", port=5432, user="root", dbname=db) as conn, conn.cursor() as cur:
            cur.execute("SELECT DISTINCT catalog_name FROM iceberg_tables UNION SELECT DISTINCT catalog_name "
                        "FROM iceberg_namespace_properties")
            assert cur.fetchall() == [("tidelake_shop_eu",)]
        assert cat.migrate_catalog_name(catalog, config) == (0, 0)
    finally:
        cat.close_catalogs()
        admin.cursor().execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
        admin.close()
