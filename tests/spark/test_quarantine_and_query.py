"""Bad input goes to quarantine and the policy decides; queries resolve W from a TSO or a time."""

from __future__ import annotations

import base64
import datetime as dt
import json
from pathlib import Path

import orjson
import pytest

from cdc_codecs import ProducerRecord, get_encoder
from spark.demo.workload import Workload, WorkloadSpec
from spark.commit.apply import BadMessagesError, apply_interval
from spark.config import PipelineConfig
from spark.query.read import NoSuchWatermark, published_watermarks, read_pipeline, resolve_watermark, to_tso
from spark.archive.storage import open_storage

from .archives import ArchiveWriter
from .archives import HOUR, T0, make_config


def archive_with_garbage(tmp: Path, policy: str) -> PipelineConfig:
    history = list(Workload(WorkloadSpec(tables=1, events=40, seed=2, watermark_every=10)).events())
    records = get_encoder("canal-json").encode_all(history, 2)
    garbage = ProducerRecord(1, b"k", b'{"type": "UPDATE", "database": "shop", "isDdl": false, "data": [{"id": "x"}], '
                                     b'"_tidb": {"commitTs": 1}}')
    base = make_config(tmp, "canal-json")
    config = PipelineConfig.from_mapping({
        "name": base.name, "kafka": {"bootstrap_servers": "unused:9092"},
        "topics": [{"name": "cdc", "protocol": "canal-json"}], "storage": {"url": base.storage.url},
        "on_bad_message": policy,
    }, "test")
    writer = ArchiveWriter(config, open_storage(config.storage), {"cdc": 2})
    writer.interval(T0, T0 + HOUR, [("cdc", r) for r in records[:20]] + [("cdc", garbage)] + [("cdc", r) for r in records[20:]])
    return config


def test_bad_message_is_quarantined_and_fails_the_run(tmp_path: Path) -> None:
    config = archive_with_garbage(tmp_path, "fail")
    with pytest.raises(BadMessagesError, match=r"1 message\(s\) could not be decoded \(first: canal-json cdc/1@\d+\[0\]: old: missing"):
        apply_interval(config, T0, T0 + HOUR)
    storage = open_storage(config.storage)
    (path,) = storage.list("shop/quarantine")
    doc = orjson.loads(storage.read(path))
    assert (doc["topic"], doc["partition"], doc["protocol"], doc["field"]) == ("cdc", 1, "canal-json", "old")
    assert base64.b64decode(doc["value_base64"]).startswith(b'{"type": "UPDATE"')
    assert base64.b64decode(doc["key_base64"]) == b"k"
    assert published_watermarks(config) == []  # nothing published by a failed run


def test_continue_policy_applies_the_rest_and_reports_it(tmp_path: Path) -> None:
    config = archive_with_garbage(tmp_path, "continue")
    result = apply_interval(config, T0, T0 + HOUR)
    assert result.report["quarantined"] == 1 and result.watermark > 0
    report = json.loads(open_storage(config.storage).read(
        "shop/reports/20240101T000000.000000Z_20240101T010000.000000Z/apply.json"))
    assert report["quarantined"] == 1 and report["tables"]["shop.t0"]["events_applied"] > 0


def test_query_at_latest_tso_time_and_an_older_w(tmp_path: Path) -> None:
    from .archives import run_history

    config, checks = run_history(tmp_path, "simple", seed=9, intervals=3, partitions=2)
    for i, _, _ in checks:
        apply_interval(config, T0 + i * HOUR, T0 + (i + 1) * HOUR)
    marks = published_watermarks(config)
    assert len(marks) >= 2
    assert resolve_watermark(config, "latest") == marks[-1]
    assert resolve_watermark(config, marks[0]) == marks[0]
    assert resolve_watermark(config, marks[1] - 1) == marks[0]  # a TSO between two published W
    assert resolve_watermark(config, str(marks[1])) == marks[1]
    wall = dt.datetime.fromtimestamp((marks[0] >> 18) / 1000, dt.timezone.utc)
    assert resolve_watermark(config, wall) == marks[0]
    assert resolve_watermark(config, wall.isoformat()) == marks[0]
    assert to_tso(wall) >= marks[0]
    with pytest.raises(NoSuchWatermark, match="no watermark is published at or before 5"):
        resolve_watermark(config, 5)
    old_w, old_tables = read_pipeline(config, marks[0])
    assert old_w == marks[0] and old_tables  # an older W still reads after newer runs
