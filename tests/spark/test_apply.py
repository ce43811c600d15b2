"""Apply: tables at every published watermark equal the reference model, for every TiDB protocol."""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path

import pytest

from cdc_codecs import PROTOCOLS, RawMessage, SourcePosition, get_decoder, get_encoder
from cdc_codecs.oracle import Oracle
from cdc_codecs.workload import Workload, WorkloadSpec
from spark.apply import apply_interval
from spark.config import PipelineConfig
from spark.query import published_watermarks, read_pipeline
from spark.storage import open_storage

from .archive import ArchiveWriter

UTC = dt.timezone.utc
T0 = dt.datetime(2024, 1, 1, tzinfo=UTC)
HOUR = dt.timedelta(hours=1)
TIDB = sorted(p for p, s in PROTOCOLS.items() if s.has_commit_ts)


def make_config(tmp: Path, protocol: str, options: dict | None = None) -> PipelineConfig:
    return PipelineConfig.from_mapping({
        "name": "shop", "kafka": {"bootstrap_servers": "unused:9092"},
        "topics": [{"name": "cdc", "protocol": protocol, "options": options or {}}],
        "storage": {"url": str(tmp / "archive")},
    }, "test")


def normalise(rows: list[dict]) -> list[dict]:
    """Rows as the oracle keeps them: NULLs left out, Iceberg's forms mapped back."""
    out = []
    for r in rows:
        out.append({k: v for k, v in r.items() if v is not None})
    return sorted(out, key=lambda r: repr(sorted(r.items())))


def oracle_rows(oracle: Oracle, name) -> list[dict]:
    import datetime as _dt
    from decimal import Decimal

    rows = []
    for r in oracle.rows(*name):
        row = {}
        for k, v in r.items():
            if isinstance(v, _dt.timedelta):
                v = v // _dt.timedelta(microseconds=1)
            elif isinstance(v, int) and k == "big":
                v = Decimal(v)
            row[k] = v
        rows.append(row)
    return sorted(rows, key=lambda r: repr(sorted(r.items())))


def run_history(tmp: Path, protocol: str, seed: int, intervals: int, partitions: int, dup_rate: float = 0.0):
    history = list(Workload(WorkloadSpec(tables=2, events=120, seed=seed, key_space=25, watermark_every=15)).events())
    records = get_encoder(protocol).encode_all(history, partitions)
    rng = random.Random(seed)
    delivered = []
    for r in records:
        delivered.append(r)
        if rng.random() < dup_rate:
            delivered.append(r)
    config = make_config(tmp, protocol)
    storage = open_storage(config.storage)
    writer = ArchiveWriter(config, storage, {"cdc": partitions})
    cuts = sorted(set(rng.sample(range(1, len(delivered)), k=intervals - 1)) | {len(delivered)})
    oracle = Oracle()
    decoders = [get_decoder(protocol) for _ in range(partitions)]
    start = 0
    offsets = {p: 0 for p in range(partitions)}
    checks = []
    for i, end in enumerate(cuts):
        chunk = delivered[start:end]
        writer.interval(T0 + i * HOUR, T0 + (i + 1) * HOUR, [("cdc", r) for r in chunk])
        for r in chunk:
            oracle.add(decoders[r.partition].decode(RawMessage(r.key, r.value, SourcePosition("cdc", r.partition, offsets[r.partition]))))
            offsets[r.partition] += 1
        w = oracle.cut([("cdc", p) for p in range(partitions)])
        checks.append((i, w, {name: oracle_rows(oracle, name) for name in oracle.tables}))
        start = end
    return config, checks


@pytest.mark.parametrize("protocol", TIDB)
def test_every_published_watermark_matches_the_oracle(tmp_path: Path, protocol: str) -> None:
    config, checks = run_history(tmp_path, protocol, seed=3, intervals=3, partitions=3, dup_rate=0.05)
    for i, w, expected in checks:
        result = apply_interval(config, T0 + i * HOUR, T0 + (i + 1) * HOUR)
        assert result.watermark == w
    assert published_watermarks(config) == sorted({w for _, w, _ in checks if w})
    for i, w, expected in checks:
        if not w:
            continue
        got_w, tables = read_pipeline(config, w)
        assert got_w == w
        got = {name: normalise(t.to_pylist()) for name, t in tables.items()}
        want = {name: rows for name, rows in expected.items() if name in got or rows}
        assert got == want, (protocol, w)
