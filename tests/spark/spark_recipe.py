"""docs/engines.md's Spark recipe, run against a tidelake pipeline: Iceberg Java's JdbcCatalog reads every tag as tidelake does.

Not part of ``make test`` (docs/testing.md says why): it needs Spark 3.5 with the Iceberg Spark
runtime jar, which ``make install`` cannot install (no Maven Central here, and the project's own
Spark is 4.2). Run it by hand with the peer harness of the shared folder (``shared/peer/README.md``:
a venv with pyspark 3.5.9 and the Iceberg 1.10.2 runtime jar from PyPI, Jackson relocated with
Debian's jarjar) and Debian's sqlite-jdbc driver:

    PEER_HOME=/tmp/peer bash ../shared/peer/setup.sh
    apt-get install libxerial-sqlite-jdbc-java
    PYTHONPATH=. .venv/bin/python -m tests.spark.spark_recipe --peer-home /tmp/peer

It builds a pipeline (``test_engine_recipes._orders``: a TIMESTAMP column, an update and a
delete between two watermarks) in a SQLite catalog, takes the recipe's catalog settings from
docs/engines.md (the PostgreSQL/S3-only ones left out, ``uri`` and ``warehouse`` pointed at the
pipeline's; the session extensions kept), runs its ``VERSION AS OF 'wm_<W>'`` query for every W,
its ``main`` query, and its backtick-quoted query of a table with encoded names (`my.db`.`Orders`)
in Spark, and compares the rows with ``read_table``. Exits 0 and prints ``spark recipe: N reads equal`` when
they all match.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs" / "engines.md"
SQLITE_JDBC = Path("/usr/share/java/sqlite-jdbc.jar")
# Settings of the documented PostgreSQL/S3 deployment that a local SQLite catalog has no use for.
NOT_LOCAL = re.compile(r"\.(jdbc\.user|jdbc\.password|io-impl|client\.region|s3\.[\w.-]+)$")

READER = r"""
import json, sys
from pyspark.sql import SparkSession
conf, queries, jars = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
builder = SparkSession.builder.master("local[1]").config("spark.jars", jars).config("spark.ui.enabled", "false")
for key, value in conf.items():
    builder = builder.config(key, value)
spark = builder.getOrCreate()
out = {label: [json.loads(r) for r in spark.sql(sql).toJSON().collect()] for label, sql in queries.items()}
print("RESULT " + json.dumps(out))
spark.stop()
"""


def documented_conf() -> tuple[dict[str, str], list[str]]:
    """The Spark properties block and the queries of docs/engines.md's Spark section (``recipe: spark-conf``, ``spark-sql``)."""
    from tests.spark.test_engine_recipes import recipe

    conf = dict(line.split(None, 1) for line in recipe("spark-conf").splitlines() if line.strip())
    queries = [line.split(";")[0] for line in recipe("spark-sql").splitlines() if line.strip()]
    return {k: v.strip() for k, v in conf.items()}, queries


def normal(row: dict) -> dict:
    """Rows as JSON says them: timestamps as UTC instants, whatever their spelling."""
    out = {}
    for key, value in row.items():
        if isinstance(value, dt.datetime):
            value = value.astimezone(dt.UTC)
        elif isinstance(value, str) and re.fullmatch(r"\d{4}-\d\d-\d\dT[\d:.]+(Z|[+-]\d\d:\d\d)", value):
            value = dt.datetime.fromisoformat(value).astimezone(dt.UTC)
        out[key] = value
    return out


def main(argv: list[str] | None = None) -> int:
    from spark.tables import catalog as cat
    from spark.query.read import published_watermarks, read_table
    from tests.spark.test_engine_recipes import ODD, _orders

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peer-home", type=Path, required=True, help="PEER_HOME of shared/peer/setup.sh")
    args = parser.parse_args(argv)
    jars = [*(args.peer_home / "jars" / name for name in ("iceberg-spark-runtime-3.5_2.12-1.10.2.jar",
                                                          "iceberg-shaded-jackson-2.18.8.jar")), SQLITE_JDBC]
    missing = [str(j) for j in jars if not j.is_file()]
    if missing:
        sys.exit(f"missing: {', '.join(missing)} (see this script's docstring)")

    config = _orders(Path(tempfile.mkdtemp(prefix="tidelake-spark-recipe-")))
    props = cat.catalog_properties(config)
    name = cat.open_catalog(config).name
    conf, (tag_query, main_query, odd_query) = documented_conf()
    assert f"spark.sql.catalog.{name}" in conf, f"the recipe's catalog is not {name}"
    assert conf.get("spark.sql.extensions") == "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
    conf = {k: v for k, v in conf.items() if not NOT_LOCAL.search(k)}
    conf[f"spark.sql.catalog.{name}.uri"] = "jdbc:sqlite:" + props["uri"].removeprefix("sqlite:///")
    conf[f"spark.sql.catalog.{name}.warehouse"] = props["warehouse"]
    marks = published_watermarks(config)
    queries = {str(w): re.sub(r"'wm_\d+'", f"'wm_{w}'", tag_query) for w in marks}
    queries["main"] = main_query
    queries["odd"] = re.sub(r"'wm_\d+'", f"'wm_{marks[-1]}'", odd_query)  # backtick-quoted encoded names
    # An Iceberg procedure: CALL parses only with the session extensions of the recipe.
    queries["call"] = f"CALL {name}.system.ancestors_of('shop.shop.orders')"
    env = {**os.environ, "TZ": "Asia/Shanghai"}  # the JVM's zone differs: the recipe's session zone must decide
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([str(args.peer_home / "venv/bin/python"), "-c", READER, json.dumps(conf), json.dumps(queries),
                           ",".join(map(str, jars))], env=env, capture_output=True, text=True, timeout=900, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        sys.exit(f"spark failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    got = json.loads(lines[-1].removeprefix("RESULT "))
    head = cat.open_catalog(config).load_table(("shop", "shop", "orders")).current_snapshot().snapshot_id
    if head not in [r["snapshot_id"] for r in got.pop("call")]:
        sys.exit(f"CALL ancestors_of did not list the head snapshot {head}")
    print("call: ancestors_of lists the head snapshot (the session extensions hold)")
    for label in got:
        w = marks[-1] if label in ("main", "odd") else int(label)
        name_at = ODD if label == "odd" else ("shop", "orders")
        expected = sorted((normal(r) for r in read_table(config, *name_at, w, metadata=True).to_pylist()),
                          key=lambda r: r["id"])
        zoned = [v for r in got[label] for v in r.values() if isinstance(v, str) and re.fullmatch(r"\d{4}-.*T.*[+-]\d\d:\d\d", v)]
        if zoned:
            sys.exit(f"{label}: timestamps not in UTC ({zoned[:2]}): the session time zone of the recipe did not hold")
        rows = sorted((normal(r) for r in got[label]), key=lambda r: r["id"])
        if rows != expected:
            sys.exit(f"{label}: Spark read {rows}, tidelake {expected}")
        print(f"{label}: {len(rows)} rows equal, e.g. {got[label][0]}")
    print(f"spark recipe: {len(queries)} reads equal ({', '.join(queries)}); conf: {json.dumps(conf)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
