"""``tidelake engines``: what another engine needs to read a pipeline's tables (docs/engines.md).

Spark's configuration lines (``spark-defaults.conf``), a DuckDB snippet (Python) and Trino's
catalog properties, with the pipeline's own catalog name, catalog database and warehouse
filled in. Secrets are never printed: a password or S3 key the pipeline holds shows as
``<password>``, ``<access key id>``, ``<secret key>`` for the user to fill in.
"""

from __future__ import annotations

import argparse
from typing import Any

from cdc_codecs import ConfigError

ENGINES = ("spark", "duckdb", "trino")
# What docs/engines.md was checked with (Spark 3.5.9; tests/spark/spark_recipe.py).
ICEBERG_VERSION = "1.10.2"
SPARK_RUNTIME_JAR = f"iceberg-spark-runtime-3.5_2.12-{ICEBERG_VERSION}.jar"
AWS_BUNDLE_JAR = f"iceberg-aws-bundle-{ICEBERG_VERSION}.jar"
# SQLAlchemy dialect -> (JDBC scheme, driver class, driver jar)
JDBC = {
    "sqlite": ("sqlite", "org.sqlite.JDBC", "sqlite-jdbc-<version>.jar"),
    "postgresql": ("postgresql", "org.postgresql.Driver", "postgresql-<version>.jar"),
    "mysql": ("mysql", "com.mysql.cj.jdbc.Driver", "mysql-connector-j-<version>.jar"),
}


class Catalog:
    """The pipeline's catalog as another engine sees it."""

    def __init__(self, config: Any) -> None:
        from spark.tables import catalog as cat

        self.config = config
        self.name = cat.catalog_name(config.name)
        self.namespace = config.namespace
        props = cat.catalog_properties(config)
        self.type = props.get("type", "sql")
        self.warehouse = props.get("warehouse")
        self.s3 = {k: v for k, v in props.items() if k.startswith("s3.")}
        self.uri = props.get("uri", "")
        self.user = self.password = self.host = self.port = self.database = self.path = None
        if self.type == "sql":
            from sqlalchemy.engine import make_url

            url = make_url(self.uri)
            self.dialect = url.get_backend_name()
            if self.dialect not in JDBC:
                raise ConfigError(f"pipeline {config.name}: catalog.properties.uri: no JDBC mapping for {self.dialect!r} "
                                  f"(known: {', '.join(JDBC)})")
            if self.dialect == "sqlite":
                self.path = url.database
                self.jdbc = f"jdbc:sqlite:{url.database}"
            else:
                self.user, self.password = url.username, url.password
                self.host, self.port, self.database = url.host, url.port, url.database
                port = f":{url.port}" if url.port else ""
                self.jdbc = f"jdbc:{JDBC[self.dialect][0]}://{url.host}{port}/{url.database}"
        else:
            self.dialect = None

    @property
    def on_s3(self) -> bool:
        return bool(self.warehouse and self.warehouse.startswith(("s3://", "s3a://")))


def _aligned(pairs: list[tuple[str, str]], sep: str = " ") -> list[str]:
    width = max(len(k) for k, _ in pairs)
    return [f"{k:<{width}}{sep}{v}" if sep == " " else f"{k}{sep}{v}" for k, v in pairs]


def spark_lines(c: Catalog) -> list[str]:
    """``spark-defaults.conf`` lines (or ``--conf KEY=VALUE`` each) that register the pipeline's catalog."""
    p = f"spark.sql.catalog.{c.name}"
    jars = [SPARK_RUNTIME_JAR]
    pairs = [("spark.sql.extensions", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"),
             (p, "org.apache.iceberg.spark.SparkCatalog")]
    if c.type == "rest":
        pairs += [(f"{p}.type", "rest"), (f"{p}.uri", c.uri)]
    else:
        jars.append(JDBC[c.dialect][2])
        pairs += [(f"{p}.catalog-impl", "org.apache.iceberg.jdbc.JdbcCatalog"), (f"{p}.uri", c.jdbc)]
        if c.user:
            pairs.append((f"{p}.jdbc.user", c.user))
        if c.password:
            pairs.append((f"{p}.jdbc.password", "<password>"))
        pairs.append((f"{p}.jdbc.schema-version", "V1"))
    if c.warehouse:
        pairs.append((f"{p}.warehouse", c.warehouse))
    if c.on_s3:
        jars.append(AWS_BUNDLE_JAR)
        pairs.append((f"{p}.io-impl", "org.apache.iceberg.aws.s3.S3FileIO"))
        if "s3.endpoint" in c.s3:
            pairs += [(f"{p}.s3.endpoint", c.s3["s3.endpoint"]), (f"{p}.s3.path-style-access", "true")]
        if "s3.region" in c.s3:
            pairs.append((f"{p}.client.region", c.s3["s3.region"]))
        if "s3.access-key-id" in c.s3:
            pairs += [(f"{p}.s3.access-key-id", "<access key id>"), (f"{p}.s3.secret-access-key", "<secret key>")]
    pairs.append(("spark.sql.session.timeZone", "UTC"))
    head = [f"# Spark 3.5: spark-defaults.conf lines (or --conf KEY=VALUE each); spark.jars: {', '.join(jars)}"]
    if c.on_s3:
        head.append(f"# S3FileIO needs {AWS_BUNDLE_JAR} (the AWS SDK v2) beside the runtime jar")
    return [*head, *_aligned(pairs),
            f"# SELECT * FROM {c.name}.{_spark_part(c.namespace)}.<database>.<table> VERSION AS OF 'wm_<W>'"
            " -- quote encoded parts with backticks"]


def _spark_part(namespace: str) -> str:
    return ".".join(part if part.replace("_", "a").isalnum() and part.islower() else f"`{part}`"
                    for part in namespace.split("."))


def trino_lines(c: Catalog) -> list[str]:
    """``etc/catalog/<c.name>.properties`` for Trino's Iceberg connector (not tested here: no Trino)."""
    pairs = [("connector.name", "iceberg")]
    if c.type == "rest":
        pairs += [("iceberg.catalog.type", "rest"), ("iceberg.rest-catalog.uri", c.uri)]
        if c.warehouse:
            pairs.append(("iceberg.rest-catalog.warehouse", c.warehouse))
    else:
        pairs += [("iceberg.catalog.type", "jdbc"), ("iceberg.jdbc-catalog.catalog-name", c.name),
                  ("iceberg.jdbc-catalog.driver-class", JDBC[c.dialect][1]),
                  ("iceberg.jdbc-catalog.connection-url", c.jdbc)]
        if c.user:
            pairs.append(("iceberg.jdbc-catalog.connection-user", c.user))
        if c.password:
            pairs.append(("iceberg.jdbc-catalog.connection-password", "<password>"))
        if c.warehouse:
            pairs.append(("iceberg.jdbc-catalog.default-warehouse-dir", c.warehouse))
    if c.on_s3:
        pairs += [("fs.native-s3.enabled", "true")]
        if "s3.endpoint" in c.s3:
            pairs += [("s3.endpoint", c.s3["s3.endpoint"]), ("s3.path-style-access", "true")]
        if "s3.region" in c.s3:
            pairs.append(("s3.region", c.s3["s3.region"]))
        if "s3.access-key-id" in c.s3:
            pairs += [("s3.aws-access-key", "<access key id>"), ("s3.aws-secret-key", "<secret key>")]
    elif c.warehouse and c.warehouse.startswith("file:"):
        pairs.append(("fs.native-local.enabled", "true"))
    ns = c.namespace.replace('"', '""')
    return [f"# Trino: etc/catalog/{c.name}.properties (not tested here)", *_aligned(pairs, "="),
            f"# SET TIME ZONE 'UTC'; SELECT * FROM {c.name}.\"{ns}.<database>\".<table> FOR VERSION AS OF 'wm_<W>'"]


DUCKDB_CONNECT = '''\
import duckdb
import duckdb_ext  # pip install duckdb==1.4.4 "duckdb-ext-iceberg==1.4.4.*" "duckdb-ext-avro==1.4.4.*"

# The extensions those wheels install, in DuckDB's own layout: LOAD reads them, nothing is downloaded.
con = duckdb.connect(config={"extension_directory": list(duckdb_ext.__path__)[0] + "/extensions",
                             "autoinstall_known_extensions": False})
con.execute("LOAD avro")
con.execute("LOAD iceberg")
con.execute("SET TimeZone = 'UTC'")
'''

DUCKDB_SQLITE = '''\
import sqlite3

catalog = sqlite3.connect({path!r})


def metadata_location(catalog_name, namespace, table):
    (location,) = catalog.execute(
        "SELECT metadata_location FROM iceberg_tables WHERE catalog_name = ? AND table_namespace = ? AND table_name = ?",
        (catalog_name, namespace, table)).fetchone()
    return location
'''

DUCKDB_POSTGRESQL = '''\
import psycopg2

catalog = psycopg2.connect({dsn!r})


def metadata_location(catalog_name, namespace, table):
    with catalog.cursor() as cur:  # psycopg2: execute() returns None, the row comes from the cursor
        cur.execute(
            "SELECT metadata_location FROM iceberg_tables WHERE catalog_name = %s AND table_namespace = %s "
            "AND table_name = %s", (catalog_name, namespace, table))
        (location,) = cur.fetchone()
    return location
'''

DUCKDB_READ = '''\
def read_at(catalog_name, namespace, table, W=None):
    """The table at watermark W (tag wm_<W>; None: main) as an Arrow table."""
    location = metadata_location(catalog_name, namespace, table)
    if W is None:
        return con.execute("SELECT * FROM iceberg_scan(?)", [location]).fetch_arrow_table()
    (snapshot,) = con.execute(
        "SELECT json_extract_string(content, ?)::UBIGINT FROM read_text(?)",  # the tag's snapshot, from the metadata
        [f'$.refs.wm_{W}."snapshot-id"', location]).fetchone()
    return con.execute(f"SELECT * FROM iceberg_scan(?, snapshot_from_id = {snapshot})", [location]).fetch_arrow_table()
'''


def duckdb_snippet(c: Catalog) -> str:
    """Python that reads the pipeline's tables with DuckDB: ``read_at(catalog_name, namespace, table, W)``."""
    if c.type != "sql":
        return (f"# DuckDB: ATTACH '{c.warehouse or ''}' AS {c.name} (TYPE iceberg, ENDPOINT '{c.uri}'); "
                "DuckDB 1.4's Iceberg extension speaks the REST protocol (not tested here)\n")
    if c.dialect == "sqlite":
        lookup = DUCKDB_SQLITE.format(path=c.path)
    elif c.dialect == "postgresql":
        dsn = " ".join(f"{k}={v}" for k, v in (("host", c.host), ("port", c.port), ("dbname", c.database), ("user", c.user),
                                                 ("password", c.password and "<password>")) if v)
        lookup = DUCKDB_POSTGRESQL.format(dsn=dsn)
    else:
        return f"# DuckDB: look up metadata_location in {c.jdbc}'s iceberg_tables (docs/engines.md), then iceberg_scan it\n"
    s3 = ("# An s3:// warehouse: pip install \"duckdb-ext-httpfs==1.4.4.*\", con.execute(\"LOAD httpfs\") and a "
          "CREATE SECRET (TYPE s3, ...) for it\n") if c.on_s3 else ""
    usage = (f"# rows = read_at({c.name!r}, {c.namespace + '.<database>'!r}, '<table>', W)  "
             "# database and table encoded as in docs/engines.md\n")
    return f"# DuckDB (Python)\n{s3}{DUCKDB_CONNECT}\n{lookup}\n\n{DUCKDB_READ}\n\n{usage}"


def render(config: Any, engines: tuple[str, ...] = ENGINES) -> str:
    c = Catalog(config)
    out = [f"# pipeline {config.name}: catalog {c.name}, namespace {c.namespace}; a table db.t is "
           f"{c.name}.{c.namespace}.<db>.<t> (docs/engines.md)"]
    for engine in engines:
        if engine == "spark":
            out += ["", *spark_lines(c)]
        elif engine == "duckdb":
            out += ["", duckdb_snippet(c).rstrip("\n")]
        else:
            out += ["", *trino_lines(c)]
    return "\n".join(out) + "\n"


def cmd_engines(args: argparse.Namespace) -> int:
    from spark.config import load_pipeline_config

    config = load_pipeline_config(args.config)
    print(render(config, tuple(args.engine) if args.engine else ENGINES), end="")
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engine", action="append", choices=ENGINES,
                   help="only this engine's settings (repeatable; default: all three)")
    p.set_defaults(fn=cmd_engines)
