"""``tidelake demo``: the whole pipeline on the embedded defaults, with a generated workload.

Starts a Kafka-protocol broker (noida-db) on a free local port, generates three TiDB-like
histories and publishes them the way TiCDC does in three protocols (Canal-JSON, Simple
Avro, Open Protocol) over three hours of broker time, then runs the pipeline hour by hour
(snapshot offsets, land, apply, publish) into local files and a SQLite Iceberg catalog,
and queries every table at the latest consistent watermark.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import sys
import tempfile
from pathlib import Path

import orjson
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from cdc_codecs import get_encoder
from spark.demo.workload import Workload, WorkloadSpec
from spark.jobs.interval import intervals, run_interval
from spark.query.sql import run_query as query
from spark.commit.report import print_report
from spark.config import load_pipeline_config
from spark.runtime.embedded import kafka_service

UTC = dt.timezone.utc
T0 = dt.datetime(2024, 1, 1, tzinfo=UTC)
FEEDS = [  # (topic, protocol, options, upstream database)
    ("sales-canal", "canal-json", {}, "sales"),
    ("inventory-simple", "simple", {"encoding": "avro"}, "inventory"),
    ("crm-open", "open-protocol", {}, "crm"),
]


def _pipeline_toml(bootstrap: str, archive: Path) -> str:
    lines = ['name = "demo"', 'start = "earliest"', "", "[kafka]", f'bootstrap_servers = "{bootstrap}"', "",
             "[storage]", f'url = "{archive}"', "", "[schedule]", 'cron = "0 * * * *"', 'start_date = "2024-01-01T00:00:00Z"']
    for topic, protocol, options, _ in FEEDS:
        lines += ["", "[[topics]]", f'name = "{topic}"', f'protocol = "{protocol}"']
        if options:
            pairs = ", ".join(f'{k} = "{v}"' for k, v in options.items())
            lines.append(f"options = {{ {pairs} }}")
    return "\n".join(lines) + "\n"


def run_demo(workdir: str, events: int) -> int:
    root = Path(workdir).resolve()
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as broker_dir, kafka_service(Path(broker_dir)) as kafka:
        print(f"embedded Kafka broker on {kafka.bootstrap}")
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
        for f in admin.create_topics([NewTopic(t, 3, 1, config={"retention.ms": "-1"}) for t, *_ in FEEDS]).values():
            f.result(30)
        producer = Producer({"bootstrap.servers": kafka.bootstrap, "linger.ms": 10})
        three_hours = 3 * 3600 * 1000
        for i, (topic, protocol, options, database) in enumerate(FEEDS):
            spec = WorkloadSpec(database=database, tables=2, events=events, seed=i, watermark_every=50,
                                start_ms=int(T0.timestamp() * 1000), spacing_ms=max(1, three_hours // (events + events // 50 + 10)))
            history = list(Workload(spec).events())
            records = get_encoder(protocol, **options).encode_all(history, 3)
            # Broker time follows upstream commit time, as with a live changefeed.
            for n, r in enumerate(records):
                at = int(T0.timestamp() * 1000) + n * three_hours // len(records)
                producer.produce(topic, key=r.key, value=r.value, partition=r.partition, timestamp=at)
            print(f"  {topic:18} {protocol:14} {len(records):6,} messages ({len(history):,} upstream events, database {database!r})")
        producer.flush(60)
        # Drop the clients now: alive when the broker stops, they would log reconnect errors.
        del producer, admin
        config_path = root / "pipeline.toml"
        config_path.write_text(_pipeline_toml(kafka.bootstrap, root / "archive"))
        config = load_pipeline_config(str(config_path))
        print(f"\npipeline file: {config_path}\n")
        for start, end in intervals(config.schedule.cron, T0, T0 + dt.timedelta(hours=3)):
            print_report(run_interval(config, start, end))
            print()
        sql = ("SELECT table_schema AS database, table_name AS \"table\" FROM information_schema.tables "
               "WHERE table_type = 'VIEW' AND table_schema <> 'main' ORDER BY 1, 2")
        w, tables = query(config, sql)
        counts = []
        for row in tables.to_pylist():
            _, n = query(config, f'SELECT count(*) AS n FROM "{row["database"]}"."{row["table"]}"', w)
            counts.append((row["database"], row["table"], n.to_pylist()[0]["n"]))
        print(f"query at the latest consistent watermark W={w}:")
        for db, table, n in counts:
            print(f"  {db}.{table}: {n} rows")
        _, sample = query(config, "SELECT id, name, amount, created_at FROM sales.t0 ORDER BY id LIMIT 3", w)
        print("\nSELECT id, name, amount, created_at FROM sales.t0 ORDER BY id LIMIT 3")
        for row in sample.to_pylist():
            print("  " + orjson.dumps(row, default=str).decode())
        command = "tidelake"
        if not shutil.which("tidelake") and sys.argv[0].endswith("tidelake"):
            command = os.path.relpath(Path(sys.argv[0]).resolve())  # e.g. .venv/bin/tidelake
        print(f"\nnext: {command} query --config {config_path} \"SELECT count(*) FROM sales.t1\"")
    return 0
