"""docs/engines.md's recipes, run as written against a pipeline's catalog, and ``tidelake engines``: what other engines read is what tidelake reads."""

from __future__ import annotations

import datetime as dt
import re
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from cdc_codecs import Op, get_encoder
from spark.archive.storage import open_storage
from spark.cli import engines
from spark.cli.main import main
from spark.commit.apply import apply_interval
from spark.config import PipelineConfig
from spark.tables import catalog as cat
from spark.query.read import published_watermarks, read_table

from .archives import HOUR, T0, ArchiveWriter
from .test_schema_evolution import History, schema

DOCS = Path(__file__).resolve().parents[2] / "docs" / "engines.md"
UTC = dt.UTC
# The placeholders the recipes are written with, and what a test pipeline puts in their place.
SQLITE_PLACEHOLDER = "/path/to/archive/catalog.db"
PG_PLACEHOLDER = "host=db port=5432 dbname=iceberg user=iceberg password=<password>"
ODD = ("my.db", "Orders")  # names whose encoded parts (my%2edb, %4frders) an engine must quote


def recipe(name: str, text: str | None = None) -> str:
    """The code block that follows ``<!-- recipe: <name> ... -->`` in docs/engines.md."""
    text = DOCS.read_text() if text is None else text
    found = re.search(rf"<!-- recipe: {re.escape(name)}(?![\w-])[^>]*-->\s*```\w*\n(.*?)```", text, re.S)
    assert found, f"docs/engines.md has no recipe {name!r}"
    return found.group(1)


def _config(tmp: Path, catalog_uri: str | None = None) -> PipelineConfig:
    doc = {"name": "shop", "kafka": {"bootstrap_servers": "unused:9092"},
           "topics": [{"name": "cdc", "protocol": "canal-json"}], "storage": {"url": str(tmp / "archive")}}
    if catalog_uri:
        doc["catalog"] = {"type": "sql", "properties": {"uri": catalog_uri, "warehouse": (tmp / "warehouse").as_uri()}}
    return PipelineConfig.from_mapping(doc, "test")


def _orders(tmp_path: Path, catalog_uri: str | None = None) -> PipelineConfig:
    """shop.orders with a TIMESTAMP column (timestamptz in Iceberg) at two watermarks, and `my.db`.`Orders`."""
    h = History()
    orders = schema("shop", "orders", [("id", "int"), ("name", "varchar(20)"), ("placed", "timestamp")])
    h.ddl("shop", "orders", "CREATE TABLE shop.orders (id int primary key, name varchar(20), placed timestamp)", orders,
          kind="CREATE")
    odd = schema(*ODD, [("id", "int"), ("note", "varchar(8)")])
    h.ddl(*ODD, "CREATE TABLE `my.db`.`Orders` (id int primary key, note varchar(8))", odd, kind="CREATE")
    h.row(Op.INSERT, odd, None, {"id": 7, "note": "odd"})
    for i in range(1, 4):
        h.row(Op.INSERT, orders, None, {"id": i, "name": f"n{i}", "placed": dt.datetime(2024, 1, i, 23, 30, tzinfo=UTC)})
    w1 = h.mark()
    first = list(h.events)
    h.events.clear()
    h.row(Op.UPDATE, orders, {"id": 1, "name": "n1", "placed": dt.datetime(2024, 1, 1, 23, 30, tzinfo=UTC)},
          {"id": 1, "name": "renamed", "placed": dt.datetime(2024, 2, 1, 23, 30, tzinfo=UTC)})
    h.row(Op.DELETE, orders, {"id": 2, "name": "n2", "placed": dt.datetime(2024, 1, 2, 23, 30, tzinfo=UTC)}, None)
    w2 = h.mark()
    config = _config(tmp_path, catalog_uri)
    writer = ArchiveWriter(config, open_storage(config.storage), {"cdc": 2})
    encoder = get_encoder("canal-json")
    for i, batch in enumerate([first, list(h.events)]):
        writer.interval(T0 + i * HOUR, T0 + (i + 1) * HOUR, [("cdc", r) for r in encoder.encode_all(batch, 2)])
        apply_interval(config, T0 + i * HOUR, T0 + (i + 1) * HOUR)
    assert published_watermarks(config) == [w1, w2]
    return config


def _sorted(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: r["id"])


def _reads_as_tidelake_does(config: PipelineConfig, read_at) -> None:
    """``read_at`` (the recipe's function) gives tidelake's rows at every tag and at main, in UTC."""
    name = cat.open_catalog(config).name
    marks = published_watermarks(config)
    for w in [*marks, None]:
        rows: pa.Table = read_at(name, "shop.shop", "orders", w)
        expected = read_table(config, "shop", "orders", marks[-1] if w is None else w, metadata=True)
        assert rows.column_names == expected.column_names
        assert _sorted(rows.to_pylist()) == _sorted(expected.to_pylist()), w
        # The session time zone of the recipe: timestamps come back in UTC, as tidelake shows them.
        assert rows.schema.field("placed").type == pa.timestamp("us", tz="UTC")
    assert {r["id"] for r in rows.to_pylist()} == {1, 3}  # main: the update and the delete applied
    # Encoded names: the recipe takes the catalog's parts as they are.
    odd = read_at(name, "shop.my%2edb", "%4frders", marks[-1])
    assert odd.to_pylist() == read_table(config, *ODD, marks[-1], metadata=True).to_pylist()


def test_the_duckdb_recipe_reads_every_tag_from_a_sqlite_catalog(tmp_path: Path) -> None:
    config = _orders(tmp_path)
    db = cat.catalog_properties(config)["uri"].removeprefix("sqlite:///")
    lookup = recipe("duckdb-sqlite")
    assert SQLITE_PLACEHOLDER in lookup
    scope: dict = {}
    # As written: the connection (extensions from the wheels' folder, no download), the catalog, the read.
    for code in (recipe("duckdb-connect"), lookup.replace(SQLITE_PLACEHOLDER, db), recipe("duckdb")):
        exec(code, scope)  # noqa: S102 - the documented recipe, as a user runs it
    assert scope["con"].execute("SELECT current_setting('autoinstall_known_extensions')").fetchone() == (False,)
    _reads_as_tidelake_does(config, scope["read_at"])


def test_the_duckdb_recipe_reads_every_tag_from_a_postgresql_catalog(tmp_path: Path) -> None:
    psycopg2 = pytest.importorskip("psycopg2")
    name = f"tidelake_recipe_{uuid.uuid4().hex[:8]}"
    admin = psycopg2.connect(host="127.0.0.1", port=5432, user="root", dbname="test")
    admin.autocommit = True
    admin.cursor().execute(f"CREATE DATABASE {name}")
    scope: dict = {}
    try:
        config = _orders(tmp_path, f"postgresql+psycopg2://root@127.0.0.1:5432/{name}")
        lookup = recipe("duckdb-postgresql")
        assert PG_PLACEHOLDER in lookup
        for code in (recipe("duckdb-connect"), lookup.replace(PG_PLACEHOLDER, f"host=127.0.0.1 port=5432 dbname={name} user=root"),
                     recipe("duckdb")):
            exec(code, scope)  # noqa: S102
        _reads_as_tidelake_does(config, scope["read_at"])
    finally:
        if "catalog" in scope:
            scope["catalog"].close()
        cat.close_catalogs()
        admin.cursor().execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.close()


def test_the_docs_show_the_code_tidelake_engines_prints() -> None:
    """docs/engines.md's DuckDB blocks are the CLI's, its Spark properties the CLI's for the example pipeline."""
    assert recipe("duckdb-connect") == engines.DUCKDB_CONNECT
    assert recipe("duckdb-sqlite") == engines.DUCKDB_SQLITE.format(path=SQLITE_PLACEHOLDER)
    assert recipe("duckdb-postgresql") == engines.DUCKDB_POSTGRESQL.format(dsn=PG_PLACEHOLDER)
    assert recipe("duckdb") == engines.DUCKDB_READ
    example = PipelineConfig.from_mapping({
        "name": "shop", "kafka": {"bootstrap_servers": "unused:9092"}, "topics": [{"name": "cdc", "protocol": "canal-json"}],
        "storage": {"url": "s3://archive/tidelake", "endpoint_url": "https://s3.example.com", "region": "us-east-1"},
        "catalog": {"properties": {"uri": "postgresql+psycopg2://iceberg:pw@db:5432/iceberg", "warehouse": "s3://lake/warehouse"}},
    }, "test")
    printed = dict(line.split(None, 1) for line in engines.spark_lines(engines.Catalog(example)) if not line.startswith("#"))
    documented = dict(line.split(None, 1) for line in recipe("spark-conf").splitlines())
    # The page leaves S3 keys to the AWS default chain; everything else is what the CLI prints.
    assert {k: v for k, v in printed.items() if "access-key" not in k} == documented
    assert "`my%2edb`.`%4frders`" in recipe("spark-sql") and '"my%2edb"' not in recipe("spark-sql")


def test_tidelake_engines_prints_a_pipelines_settings_exactly(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("AWS_REGION", raising=False)
    path = tmp_path / "shop-eu.toml"
    path.write_text('name = "shop-eu.1"\n[kafka]\nbootstrap_servers = "b:9092"\n[[topics]]\nname = "cdc"\n'
                    'protocol = "canal-json"\n[storage]\nurl = "s3://archive/t"\nendpoint_url = "http://127.0.0.1:9000"\n'
                    'secret_access_key = "s3cr3t"\naccess_key_id = "AKIDX"\n[catalog]\nnamespace = "eu"\n'
                    'properties = { uri = "postgresql+psycopg2://lake:pw@pg.example:5433/iceberg", warehouse = "s3://lake/wh" }\n')
    assert main(["engines", "--config", str(path), "--engine", "spark", "--engine", "trino"]) == 0
    out = capsys.readouterr().out
    assert "s3cr3t" not in out and "AKIDX" not in out and ":pw@" not in out
    assert out == """\
# pipeline shop-eu.1: catalog tidelake_shop_eu_1, namespace eu; a table db.t is tidelake_shop_eu_1.eu.<db>.<t> (docs/engines.md)

# Spark 3.5: spark-defaults.conf lines (or --conf KEY=VALUE each); spark.jars: iceberg-spark-runtime-3.5_2.12-1.10.2.jar, postgresql-<version>.jar, iceberg-aws-bundle-1.10.2.jar
# S3FileIO needs iceberg-aws-bundle-1.10.2.jar (the AWS SDK v2) beside the runtime jar
spark.sql.extensions                                      org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions
spark.sql.catalog.tidelake_shop_eu_1                      org.apache.iceberg.spark.SparkCatalog
spark.sql.catalog.tidelake_shop_eu_1.catalog-impl         org.apache.iceberg.jdbc.JdbcCatalog
spark.sql.catalog.tidelake_shop_eu_1.uri                  jdbc:postgresql://pg.example:5433/iceberg
spark.sql.catalog.tidelake_shop_eu_1.jdbc.user            lake
spark.sql.catalog.tidelake_shop_eu_1.jdbc.password        <password>
spark.sql.catalog.tidelake_shop_eu_1.jdbc.schema-version  V1
spark.sql.catalog.tidelake_shop_eu_1.warehouse            s3://lake/wh
spark.sql.catalog.tidelake_shop_eu_1.io-impl              org.apache.iceberg.aws.s3.S3FileIO
spark.sql.catalog.tidelake_shop_eu_1.s3.endpoint          http://127.0.0.1:9000
spark.sql.catalog.tidelake_shop_eu_1.s3.path-style-access true
spark.sql.catalog.tidelake_shop_eu_1.client.region        us-east-1
spark.sql.catalog.tidelake_shop_eu_1.s3.access-key-id     <access key id>
spark.sql.catalog.tidelake_shop_eu_1.s3.secret-access-key <secret key>
spark.sql.session.timeZone                                UTC
# SELECT * FROM tidelake_shop_eu_1.eu.<database>.<table> VERSION AS OF 'wm_<W>' -- quote encoded parts with backticks

# Trino: etc/catalog/tidelake_shop_eu_1.properties (not tested here)
connector.name=iceberg
iceberg.catalog.type=jdbc
iceberg.jdbc-catalog.catalog-name=tidelake_shop_eu_1
iceberg.jdbc-catalog.driver-class=org.postgresql.Driver
iceberg.jdbc-catalog.connection-url=jdbc:postgresql://pg.example:5433/iceberg
iceberg.jdbc-catalog.connection-user=lake
iceberg.jdbc-catalog.connection-password=<password>
iceberg.jdbc-catalog.default-warehouse-dir=s3://lake/wh
fs.native-s3.enabled=true
s3.endpoint=http://127.0.0.1:9000
s3.path-style-access=true
s3.region=us-east-1
s3.aws-access-key=<access key id>
s3.aws-secret-key=<secret key>
# SET TIME ZONE 'UTC'; SELECT * FROM tidelake_shop_eu_1."eu.<database>".<table> FOR VERSION AS OF 'wm_<W>'
"""


def test_tidelake_engines_duckdb_snippet_runs_and_reads_the_pipeline(tmp_path: Path, capsys) -> None:
    config = _orders(tmp_path)
    path = tmp_path / "shop.toml"
    path.write_text(f'name = "shop"\n[kafka]\nbootstrap_servers = "unused:9092"\n[[topics]]\nname = "cdc"\n'
                    f'protocol = "canal-json"\n[storage]\nurl = "{tmp_path / "archive"}"\n')
    assert main(["engines", "--config", str(path), "--engine", "duckdb"]) == 0
    out = capsys.readouterr().out
    db = cat.catalog_properties(config)["uri"].removeprefix("sqlite:///")
    assert out == (f"# pipeline shop: catalog tidelake_shop, namespace shop; a table db.t is tidelake_shop.shop.<db>.<t> "
                   f"(docs/engines.md)\n\n# DuckDB (Python)\n{engines.DUCKDB_CONNECT}\n{engines.DUCKDB_SQLITE.format(path=db)}\n\n"
                   f"{engines.DUCKDB_READ}\n\n# rows = read_at('tidelake_shop', 'shop.<database>', '<table>', W)  "
                   "# database and table encoded as in docs/engines.md\n")
    scope: dict = {}
    exec(out, scope)  # noqa: S102 - what the command printed, as a user pastes it
    _reads_as_tidelake_does(config, scope["read_at"])
