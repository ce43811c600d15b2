"""Decoder throughput per protocol, as a ratio to the bare parse of the same bytes.

For each protocol: a generated workload of N events is encoded the way the upstream
does, then timed twice over the same messages: the bare parse (orjson.loads of the
JSON documents; fastavro's schemaless read for Avro; the frame split for the Open
protocol) and the full decode into typed events. ratio = bare time / decode time, so
1.0 means decoding costs no more than parsing. Target: >= 0.5.
"""

from __future__ import annotations

import argparse
import gc
import io
import time
from typing import Callable, Iterable

import fastavro
import orjson

from cdc_codecs import PROTOCOLS, RawMessage, SourcePosition, get_decoder, get_encoder
from cdc_codecs.dts_avro import SCHEMAS as DTS_SCHEMAS
from cdc_codecs.open_protocol import split_frames
from cdc_codecs.simple import AVRO_SCHEMA
from spark.demo.workload import Workload, WorkloadSpec

VARIANTS: list[tuple[str, dict[str, str]]] = [(p, {}) for p in sorted(PROTOCOLS)] + [("simple", {"encoding": "avro"})]


def corpus(protocol: str, options: dict[str, str], events: int, partitions: int = 4,
           key_space: int = 100_000) -> list[tuple[bytes | None, bytes | None]]:
    encoder = get_encoder(protocol, **options)
    workload = Workload(WorkloadSpec(tables=10, events=events, seed=1, watermark_every=1000, key_space=key_space))
    out: list[tuple[bytes | None, bytes | None]] = []
    chunk = []
    for e in workload.events():
        chunk.append(e)
        if len(chunk) == 10_000:
            out += [(r.key, r.value) for r in encoder.encode_all(chunk, partitions)]
            chunk = []
    out += [(r.key, r.value) for r in encoder.encode_all(chunk, partitions)]
    return out


def bare_parser(protocol: str, options: dict[str, str]) -> Callable[[bytes | None, bytes | None], object]:
    if protocol == "open-protocol":
        return lambda k, v: (split_frames(k or b"", "key", versioned=True), split_frames(v or b"", "value", versioned=False))
    if protocol == "dts-avro":
        schema = DTS_SCHEMAS[2]
        return lambda k, v: fastavro.schemaless_reader(io.BytesIO(v), schema)
    if protocol == "simple" and options.get("encoding") == "avro":
        return lambda k, v: fastavro.schemaless_reader(io.BytesIO(v), AVRO_SCHEMA)
    if protocol.startswith("debezium") or protocol == "cloudcanal-debezium":
        return lambda k, v: (orjson.loads(k) if k else None, orjson.loads(v) if v else None)
    return lambda k, v: orjson.loads(v)


def timed(fn: Callable[[], int]) -> tuple[float, int]:
    gc.collect()
    start = time.perf_counter()
    n = fn()
    return time.perf_counter() - start, n


def measure(protocol: str, options: dict[str, str], messages: list[tuple[bytes | None, bytes | None]]) -> dict[str, float]:
    parse = bare_parser(protocol, options)

    def bare() -> int:
        for k, v in messages:
            parse(k, v)
        return len(messages)

    def decode() -> int:
        decoder = get_decoder(protocol, **options)
        n = 0
        for offset, (k, v) in enumerate(messages):
            n += len(decoder.decode(RawMessage(k, v, SourcePosition("bench", 0, offset))))
        return n

    bare_s, _ = timed(bare)
    decode_s, events = timed(decode)
    return {"events": events, "messages": len(messages), "bare_s": bare_s, "decode_s": decode_s,
            "events_per_s": events / decode_s, "ratio": bare_s / decode_s}


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench codecs")
    parser.add_argument("--events", type=int, default=1_000_000, help="generated events per protocol")
    parser.add_argument("--protocols", default="", help="comma-separated subset")
    args = parser.parse_args(list(argv or []))
    wanted = set(filter(None, args.protocols.split(",")))
    print(f"decode throughput, {args.events:,} generated events per protocol (ratio = bare parse time / decode time; target >= 0.5)")
    print(f"{'protocol':28} {'messages':>10} {'events':>10} {'bare s':>8} {'decode s':>9} {'events/s':>10} {'ratio':>6}")
    worst = None
    for protocol, options in VARIANTS:
        if wanted and protocol not in wanted:
            continue
        label = protocol + (f" ({options['encoding']})" if options else "")
        messages = corpus(protocol, options, args.events)
        r = measure(protocol, options, messages)
        del messages
        worst = r["ratio"] if worst is None else min(worst, r["ratio"])
        print(f"{label:28} {r['messages']:>10,} {r['events']:>10,} {r['bare_s']:>8.2f} {r['decode_s']:>9.2f} {r['events_per_s']:>10,.0f} {r['ratio']:>6.2f}", flush=True)
    if worst is not None:
        print(f"lowest ratio: {worst:.2f}")
    return 0
