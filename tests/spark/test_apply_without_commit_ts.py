"""Protocols without commitTs: ordered by offset, cut at the derived watermark (contract §3).

What the derived watermark guarantees: W = min over partitions of (time of the last event
seen) - 1 tick, so every change whose binlog time is strictly before W's millisecond has
been applied, on every partition; a partition that receives nothing holds W back.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from pathlib import Path

import pytest

from cdc_codecs import PROTOCOLS, RowChange, get_encoder
from tests.model.oracle import row_key
from spark.demo.workload import Workload, WorkloadSpec
from spark.commit.apply import apply_interval
from spark.query.read import read_pipeline
from spark.archive.storage import open_storage

from .archives import ArchiveWriter
from .archives import HOUR, T0, make_config, normalise

MYSQL_SIDE = sorted(p for p, s in PROTOCOLS.items() if not s.has_commit_ts)


def truth_before(history, watermark: int) -> dict:
    """Tables after every change whose event time is before the watermark's millisecond (inclusive of W)."""
    tables: dict = {}
    for e in history:
        if isinstance(e, RowChange) and (e.event_time_ms << 18) <= watermark:
            t = tables.setdefault((e.database, e.table), {})
            if e.before is not None:
                t.pop(row_key(e.key_columns, dict(e.before)), None)
            if e.after is not None:
                t[row_key(e.key_columns, dict(e.after))] = e.after
    out = {}
    for name, rows in tables.items():
        fixed = []
        for r in rows.values():
            row = {k: (v // dt.timedelta(microseconds=1) if isinstance(v, dt.timedelta) else Decimal(v) if k == "big" and v is not None else v)
                   for k, v in r.items() if v is not None}
            fixed.append(row)
        out[name] = sorted(fixed, key=lambda r: repr(sorted(r.items())))
    return out


@pytest.mark.parametrize("protocol", MYSQL_SIDE)
def test_tables_match_history_before_the_derived_watermark(tmp_path: Path, protocol: str) -> None:
    spec = WorkloadSpec(tables=2, events=100, seed=4, key_space=20, watermark_every=0)
    history = list(Workload(spec).events())
    records = get_encoder(protocol).encode_all(history, 2)
    config = make_config(tmp_path, protocol)
    writer = ArchiveWriter(config, open_storage(config.storage), {"cdc": 2})
    half = len(records) // 2
    writer.interval(T0, T0 + HOUR, [("cdc", r) for r in records[:half]])
    writer.interval(T0 + HOUR, T0 + 2 * HOUR, [("cdc", r) for r in records[half:]])
    results = [apply_interval(config, T0 + i * HOUR, T0 + (i + 1) * HOUR) for i in range(2)]
    for r in results:
        w = r.watermark
        assert w > 0 and w & ((1 << 18) - 1) == (1 << 18) - 1  # a derived mark: the tick before a millisecond
        _, tables = read_pipeline(config, w)
        got = {k: normalise(v.to_pylist()) for k, v in tables.items()}
        want = {k: rows for k, rows in truth_before(history, w).items() if rows or k in got}
        if protocol == "dts-avro":  # DTS carries milliseconds for DATETIME and TIME
            got = {k: [{c: v for c, v in row.items() if c not in ("updated_at",)} for row in rows] for k, rows in got.items()}
            want = {k: [{c: v for c, v in row.items() if c not in ("updated_at",)} for row in rows] for k, rows in want.items()}
        assert got == want, (protocol, w)
