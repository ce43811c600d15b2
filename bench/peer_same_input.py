"""The peer's end-to-end pipeline (``../shared/peer/merge_bench.py`` section b) over tidelake's own messages.

Run with the PEER's Python and jars (``bench/same_input.py`` starts it), never with tidelake's:
it imports nothing of tidelake. It does what section b does, as written there:

  parse   the raw Kafka values of every segment of the archive (all partitions) -> ``from_json``
          with the Canal-JSON schema -> ``posexplode(data)`` -> the key string from ``pkNames``;
  dedup   ``row_number()`` over a window per (db, table, key) by commitTs, offset, position in the
          message, descending: the last event of each key is kept;
  merge   one ``MERGE INTO`` per table: matched and DELETE -> delete, matched -> update every column,
          not matched and not DELETE -> insert (the ON clause is the key; an UPDATE's ``old`` image
          is never read, so the old key of an update that changes the key stays behind).

Tables are Iceberg format v2, merge-on-read for delete/update/merge, in a Hadoop catalog on local
disk, created empty before the run with the columns ``--columns`` gives (``bench/same_input.py``
derives them from the messages' ``mysqlType``; every column a table ever has, ``ADD COLUMN``s
included, from the start). Each column is cast from its Canal-JSON text as a hand-written pipeline
would: ``CAST(text AS <type>)``, and binary columns ``encode(text, 'ISO-8859-1')`` (Canal-JSON carries
bytes as ISO-8859-1 text). DDL messages are dropped (``isDdl``), watermarks carry no ``data``.

Writes, under ``--out``: each final table as Parquet (``<db>.<table>/``) and ``results.json``
(row count per table, row events, keys, seconds of parse, dedup and MERGE).

usage: $PEER_HOME/venv/bin/python bench/peer_same_input.py --segments LIST --columns JSON --home DIR --out DIR
"""
import argparse
import json
import os
import shutil
import time

CANAL_SCHEMA = ("database STRING, table STRING, pkNames ARRAY<STRING>, isDdl BOOLEAN, type STRING, es BIGINT, "
                "ts BIGINT, data ARRAY<MAP<STRING,STRING>>, old ARRAY<MAP<STRING,STRING>>, "
                "_tidb STRUCT<commitTs: BIGINT>")
TBLPROPS = ("'format-version'='2', 'write.delete.mode'='merge-on-read', "
            "'write.update.mode'='merge-on-read', 'write.merge.mode'='merge-on-read'")


def quote(name):
    return "`" + name.replace("`", "``") + "`"


def cast_expr(name, spark_type):
    text = f"rowdata[{json.dumps(name)}]"
    if spark_type == "BINARY":
        return f"encode({text}, 'ISO-8859-1') AS {quote(name)}"
    if spark_type == "STRING":
        return f"{text} AS {quote(name)}"
    return f"CAST({text} AS {spark_type}) AS {quote(name)}"


def merge_sql(target, columns, keys):
    on = " AND ".join(f"t.{quote(k)} = s.{quote(k)}" for k in keys)
    names = [quote(n) for n, _ in columns]
    sets = ", ".join(f"t.{n} = s.{n}" for n in names)
    return (f"MERGE INTO {target} t USING src s ON {on}\n"
            f"WHEN MATCHED AND s.op = 'DELETE' THEN DELETE\n"
            f"WHEN MATCHED THEN UPDATE SET {sets}\n"
            f"WHEN NOT MATCHED AND s.op <> 'DELETE' THEN INSERT ({', '.join(names)}) "
            f"VALUES ({', '.join('s.' + n for n in names)})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--segments", required=True, help="a file listing the raw segment files, one a line")
    ap.add_argument("--columns", required=True,
                    help='a JSON file: {"db.table": {"columns": [[name, spark type], ...], "keys": [name, ...]}}')
    ap.add_argument("--home", required=True, help="scratch: the warehouse (wh/) is created afresh here")
    ap.add_argument("--out", required=True, help="where the final tables and results.json go")
    ap.add_argument("--jars", required=True, help="the spark.jars value (PEER_HOME/spark_jars.txt)")
    ap.add_argument("--driver-memory", default="2g")
    ap.add_argument("--shuffle-partitions", type=int, default=8)
    args = ap.parse_args()

    warehouse = os.path.join(os.path.abspath(args.home), "wh")
    shutil.rmtree(warehouse, ignore_errors=True)
    shutil.rmtree(args.out, ignore_errors=True)
    os.makedirs(args.out)
    with open(args.segments) as f:
        segments = [line for line in f.read().splitlines() if line]
    with open(args.columns) as f:
        tables = json.load(f)

    from pyspark.sql import SparkSession, Window
    from pyspark.sql import functions as F
    b = SparkSession.builder.master("local[2]").appName("iceberg-merge-peer-same-input")
    for k, v in {
        "spark.jars": args.jars,
        "spark.driver.memory": args.driver_memory,
        "spark.sql.shuffle.partitions": str(args.shuffle_partitions),
        "spark.ui.enabled": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        "spark.sql.catalog.cat": "org.apache.iceberg.spark.SparkCatalog",
        "spark.sql.catalog.cat.type": "hadoop",
        "spark.sql.catalog.cat.warehouse": "file://" + warehouse,
    }.items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    results = {"tables": {}}

    def ident(name):
        db, _, tbl = name.partition(".")
        return f"cat.{quote(db)}.{quote(tbl)}"

    for name, spec in tables.items():
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS cat.{quote(name.partition('.')[0])}")
        cols = ", ".join(f"{quote(n)} {t}" for n, t in spec["columns"])
        spark.sql(f"CREATE TABLE {ident(name)} ({cols}) USING iceberg TBLPROPERTIES ({TBLPROPS})")

    # parse: raw value -> from_json -> posexplode(data) -> pk string; cached (section b's)
    t0 = time.perf_counter()
    raw = spark.read.parquet(*segments).select("offset", "value")
    parsed = (raw.select(F.from_json(F.col("value").cast("string"), CANAL_SCHEMA).alias("m"), "offset")
              .where(~F.col("m.isDdl"))
              .select(F.col("m.database").alias("db"), F.col("m.table").alias("tbl"), F.col("m.type").alias("op"),
                      F.col("m._tidb.commitTs").alias("commit_ts"), "offset", F.col("m.pkNames").alias("pk_names"),
                      F.posexplode("m.data").alias("pos", "rowdata"))
              .select("db", "tbl", "op", "commit_ts", "offset", "pos", "rowdata",
                      F.expr("concat_ws('\u0001', transform(pk_names, p -> rowdata[p]))").alias("pk"))
              .cache())
    results["row_events"] = parsed.count()
    results["parse_s"] = round(time.perf_counter() - t0, 2)

    # dedup: keep the last event per (db, table, pk) by commitTs, offset, position in message; cached
    t0 = time.perf_counter()
    w = Window.partitionBy("db", "tbl", "pk").orderBy(F.desc("commit_ts"), F.desc("offset"), F.desc("pos"))
    dedup = parsed.withColumn("rn", F.row_number().over(w)).where("rn = 1").drop("rn").cache()
    results["keys"] = dedup.count()
    parsed.unpersist()
    results["dedup_s"] = round(time.perf_counter() - t0, 2)

    # merge: one MERGE INTO per table
    t0 = time.perf_counter()
    for r in dedup.select("db", "tbl").distinct().collect():
        name = f"{r.db}.{r.tbl}"
        spec = tables[name]
        src = (dedup.where((F.col("db") == r.db) & (F.col("tbl") == r.tbl))
               .selectExpr(*(cast_expr(n, t) for n, t in spec["columns"]), "op"))
        src.createOrReplaceTempView("src")
        spark.sql(merge_sql(ident(name), spec["columns"], spec["keys"])).collect()
    dedup.unpersist()
    results["merge_s"] = round(time.perf_counter() - t0, 2)

    # the final tables, as they are, for the comparison (not timed)
    for name in tables:
        df = spark.table(ident(name))
        results["tables"][name] = {"rows": df.count()}
        df.coalesce(1).write.parquet(os.path.join(args.out, name))
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=2)
    spark.stop()


if __name__ == "__main__":
    main()
