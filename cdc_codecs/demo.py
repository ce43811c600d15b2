"""``make demo``: what cdc_codecs does, end to end on a generated TiCDC workload.

A TiDB-like history (3 tables, inserts, updates, key changes, deletes, an ALTER TABLE,
watermarks) is written to 3 Kafka partitions the way TiCDC writes it, in four
protocols. Each partition's messages are decoded back, the reference model applies
them up to the pipeline watermark, and the tables must come out identical whatever the
protocol. (The Airflow/Spark/Iceberg stages of the pipeline build on this; see README.)
"""

from __future__ import annotations

import argparse
import sys
import time

import orjson

from cdc_codecs import RawMessage, SourcePosition, get_decoder, get_encoder
from cdc_codecs.oracle import Oracle
from cdc_codecs.render import _value
from cdc_codecs.workload import Workload, WorkloadSpec

PROTOCOLS = [("canal-json", {}), ("open-protocol", {}), ("debezium", {}), ("simple", {"encoding": "avro"})]


def run(events: int, partitions: int, out=sys.stdout) -> dict[str, dict]:
    history = list(Workload(WorkloadSpec(tables=3, events=events, seed=42)).events())
    results: dict[str, dict] = {}
    for protocol, options in PROTOCOLS:
        label = protocol + "".join(f" {k}={v}" for k, v in options.items())
        started = time.perf_counter()
        records = get_encoder(protocol, **options).encode_all(history, partitions)
        decoders = [get_decoder(protocol, **options) for _ in range(partitions)]
        oracle = Oracle()
        for offset, r in enumerate(records):
            oracle.add(decoders[r.partition].decode(RawMessage(r.key, r.value, SourcePosition("shop", r.partition, offset))))
        w = oracle.cut([("shop", p) for p in range(partitions)])
        took = time.perf_counter() - started
        tables = {f"{db}.{t}": oracle.rows(db, t) for (db, t) in sorted(oracle.tables)}
        results[label] = tables
        sizes = ", ".join(f"{name} {len(rows)} rows" for name, rows in tables.items())
        print(f"{label:22} {len(records):6} messages -> watermark {w} ({w >> 18} ms): {sizes}  [{took:.2f}s]", file=out)
    first = next(iter(results.values()))
    agree = all(tables == first for tables in results.values())
    print(f"\nall {len(results)} protocols give identical tables: {agree}", file=out)
    name, rows = next(iter(first.items()))
    print(f"\n{name}, first 3 rows at the final watermark:", file=out)
    for row in rows[:3]:
        print("  " + orjson.dumps({k: _value(v) for k, v in row.items()}).decode(), file=out)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cdc_codecs.demo")
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--partitions", type=int, default=3)
    args = parser.parse_args(argv)
    results = run(args.events, args.partitions)
    first = next(iter(results.values()))
    return 0 if all(r == first for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
