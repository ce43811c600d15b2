"""Fuzz every decoder: at least 100k mutated messages each, none may fail untyped.

Hypothesis draws a seed; each seed drives 1,000 structure-aware mutations of a corpus
made of the real conformance vectors and encoder output for a generated workload. A
failure prints the seed and the exact input, so it replays with ``FUZZ_SEED=<seed>``.
"""

from __future__ import annotations

import json
import os
import random
from functools import lru_cache
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc_codecs import PROTOCOLS, DecodeError, RawMessage, SourcePosition, get_decoder, get_encoder
from cdc_codecs.events import EVENT_TYPES
from spark.demo.workload import Workload, WorkloadSpec

from ..conftest import shared_dir

INPUTS_PER_SEED = 1_000
SEEDS = 100
CONFORMANCE_FOR = {
    "canal-json": ["ticdc-canal-json/**/*"],
    "canal": ["canal-flat/**/*.json"],
    "debezium": ["ticdc-debezium/**/*.json"],
    "debezium-mysql": ["debezium-mysql/**/*.json"],
    "simple": ["ticdc-simple/json/*.json"],
}
WEIRD_JSON: list[Any] = [None, True, -1, 0, 2**64, -(2**70), 1.5e308, "", "x", "2024-13-45", "\u00ff\u0100", [], {}, [None], {"a": 1}]


@lru_cache(maxsize=None)
def corpus(protocol: str) -> tuple[tuple[bytes | None, bytes | None], ...]:
    items: list[tuple[bytes | None, bytes | None]] = []
    conformance = shared_dir() / "conformance"
    for pattern in CONFORMANCE_FOR.get(protocol, []):
        items += [(None, p.read_bytes()) for p in sorted(conformance.glob(pattern)) if p.is_file()]
    events = list(Workload(WorkloadSpec(tables=2, events=60, seed=7)).events())
    encoder = get_encoder(protocol) if protocol != "simple" else get_encoder("simple", encoding="json")
    items += [(r.key, r.value) for r in encoder.encode_all(events, 2)]
    if protocol == "simple":
        items += [(r.key, r.value) for r in get_encoder("simple", encoding="avro").encode_all(events[:20], 1)]
    return tuple(items)


def mutate_json(doc: Any, rng: random.Random, depth: int = 0) -> Any:
    if isinstance(doc, dict) and doc:
        key = rng.choice(list(doc))
        choice = rng.random()
        out = dict(doc)
        if choice < 0.15:
            del out[key]
        elif choice < 0.55 or depth > 4:
            out[key] = rng.choice(WEIRD_JSON)
        else:
            out[key] = mutate_json(doc[key], rng, depth + 1)
        return out
    if isinstance(doc, list) and doc:
        i = rng.randrange(len(doc))
        out_list = list(doc)
        if rng.random() < 0.3:
            out_list.append(out_list[i])
        else:
            out_list[i] = mutate_json(doc[i], rng, depth + 1)
        return out_list
    return rng.choice(WEIRD_JSON)


def mutate_bytes(data: bytes, rng: random.Random, other: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.random()
        if not b or op < 0.1:
            b += rng.randbytes(rng.randint(1, 8))
        elif op < 0.35:
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
        elif op < 0.5:
            i = rng.randrange(len(b))
            b[i] = rng.choice([0, 0xFF, 0x7F, 0x80, ord('"'), ord("\\"), ord("\n"), ord("{")])
        elif op < 0.65:
            del b[rng.randrange(len(b)) :]
        elif op < 0.8:
            i = rng.randrange(len(b))
            del b[i : i + rng.randint(1, 16)]
        else:
            cut = rng.randrange(len(b) + 1)
            b = b[:cut] + other[rng.randrange(len(other) + 1) :]
    return bytes(b)


def mutate(item: tuple[bytes | None, bytes | None], rng: random.Random, pool) -> tuple[bytes | None, bytes | None]:
    key, value = item
    other_key, other_value = rng.choice(pool)
    if value is not None and rng.random() < 0.5:
        try:
            doc = orjson.loads(value)
        except orjson.JSONDecodeError:
            doc = None
        if doc is not None:
            return key, json.dumps(mutate_json(doc, rng)).encode()
    if key is not None and rng.random() < 0.4:
        key = mutate_bytes(key, rng, other_key or b"")
    else:
        value = mutate_bytes(value or b"", rng, other_value or b"")
    return key, value


def fuzz_batch(protocol: str, seed: int) -> int:
    rng = random.Random(seed)
    pool = corpus(protocol)
    options = {"encoding": "avro"} if protocol == "simple" and seed % 2 else {}
    decoder = get_decoder(protocol, **options)
    for offset in range(INPUTS_PER_SEED):
        key, value = mutate(rng.choice(pool), rng, pool)
        msg = RawMessage(key, value, SourcePosition("fuzz", 0, offset))
        try:
            events = decoder.decode(msg)
        except DecodeError as exc:
            assert exc.raw is msg
            assert "internal error" not in exc.reason, f"seed={seed} key={key!r} value={value!r}: {exc}"
            continue
        except Exception as exc:  # noqa: BLE001 - the point: report anything untyped
            raise AssertionError(f"untyped {type(exc).__name__} for seed={seed} key={key!r} value={value!r}") from exc
        assert all(isinstance(e, EVENT_TYPES) for e in events)
    assert all(isinstance(e, DecodeError) for e in decoder.finish())
    return INPUTS_PER_SEED


@pytest.mark.slow
@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
def test_fuzz_decoder(protocol: str) -> None:
    if "FUZZ_SEED" in os.environ:
        fuzz_batch(protocol, int(os.environ["FUZZ_SEED"]))
        return
    inputs = 0

    # Seeds replay under `make test` (the "replay" profile, tests/conftest.py); other runs explore.
    @settings(max_examples=SEEDS, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.integers(0, 2**32 - 1))
    def run(seed: int) -> None:
        nonlocal inputs
        inputs += fuzz_batch(protocol, seed)

    run()
    assert inputs >= 100_000


def test_fuzzer_smoke() -> None:
    """A fast slice of the fuzzer, so the edit-test loop catches an untyped failure early."""
    for protocol in sorted(PROTOCOLS):
        fuzz_batch(protocol, 1)


def test_corpus_covers_the_real_vectors() -> None:
    assert len(corpus("canal")) > 30 and Path(shared_dir()).exists()
