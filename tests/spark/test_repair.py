"""``tidelake repair``: after a decoder fix, every published W reads what the archive now derives.

Each test scripts the model-based machine of ``test_operations``: intervals are landed
(the reference model decodes them with the real decoders), then runs happen under a
"decoder bug" -- the decoders spark/apply.py uses garble some values -- so published tags
hold wrong rows. The bug is then fixed (the patch removed) and ``repair`` must bring every
published W back to the model, moving only the tags whose rows changed.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable

import orjson
import pytest

from cdc_codecs import RowChange, Watermark
from spark import apply as apply_module
from spark import catalog as cat
from spark.apply import apply_interval
from spark.cli import main
from spark.commit import table_watermark
from spark.lease import Lease, LeaseHeldError, current_lease
from spark.publish import announcement, published_watermarks, read_published, repair_records
from spark.query import read_pipeline
from spark.repair import REPAIR_BRANCH, RepairError, repair, scratch_config
from spark.watermark import tag_name

from .archive import HOUR, T0, normalise
from .history import Upstream
from .test_operations import machine_for

GARBLED = "garbled by a decoder bug"


class Crash(Exception):
    pass


def buggy_decoders(monkeypatch: pytest.MonkeyPatch, change: Callable[[Any], Any]) -> None:
    """The decoders the pipeline runs with apply ``change`` to every event they return."""
    real = apply_module.get_decoder

    class Buggy:
        def __init__(self, decoder: Any) -> None:
            self.decoder = decoder

        def decode(self, msg: Any) -> list:
            return [change(e) for e in self.decoder.decode(msg)]

        def __getattr__(self, name: str) -> Any:
            return getattr(self.decoder, name)

    monkeypatch.setattr(apply_module, "get_decoder", lambda *a, **k: Buggy(real(*a, **k)))


def garble_names(e: Any) -> Any:
    """The bug: a string column of rows with an even key decodes wrong."""
    if isinstance(e, RowChange) and e.after and e.after.get("id", 1) % 2 == 0 and e.after.get("name") is not None:
        return e._replace(after={**e.after, "name": GARBLED})
    return e


def pipeline(protocol: str = "canal-json", seed: int = 21, intervals: int = 4, partitions: int = 2):  # noqa: ANN201
    """A machine with ``intervals`` landed intervals of a history that changes rows in every one."""
    up = Upstream(seed=seed)
    for _ in range(intervals + 1):
        up.changes(8)
        up.resolved()
    m = machine_for(protocol)()
    m.begin(up.history, partitions)
    per = len(m.feed.records) // intervals + 1
    for _ in range(intervals):
        m.land_interval(per)
    return m


def run_all(m, monkeypatch: pytest.MonkeyPatch, change: Callable[[Any], Any] | None = None) -> None:  # noqa: ANN001
    with monkeypatch.context() as patch:
        if change is not None:
            buggy_decoders(patch, change)
        for j in range(len(m.intervals)):
            m._run(j)


def tags(m) -> dict[tuple[str, int], int]:  # noqa: ANN001
    """(table uuid, W) -> snapshot id of every published tag."""
    out = {}
    for t in cat.pipeline_tables(cat.open_catalog(m.config), m.config):
        for w in published_watermarks(m.storage, m.config.name):
            s = t.snapshot_by_name(tag_name(w))
            if s is not None:
                out[(str(t.metadata.table_uuid), w)] = s.snapshot_id
    return out


def heads(m) -> dict[str, tuple[int, int]]:  # noqa: ANN001
    return {str(t.metadata.table_uuid): (t.current_snapshot().snapshot_id, table_watermark(t))
            for t in cat.pipeline_tables(cat.open_catalog(m.config), m.config)}


def wrong_watermarks(m) -> list[int]:  # noqa: ANN001
    """Published Ws that do not read the reference model."""
    out = []
    for w in published_watermarks(m.storage, m.config.name):
        _, tables = read_pipeline(m.config, w)
        got = {name: normalise(t.to_pylist()) for name, t in tables.items()}
        if got != {name: rows for name, rows in m.model_at[w].items() if rows or name in got}:
            out.append(w)
    return out


def archive_state(m) -> dict[str, bytes]:  # noqa: ANN001
    return {p: m.storage.read(p) for p in m.storage.list(m.config.name) if "/lease/" not in p}


def catalog_state(m) -> dict[str, str]:  # noqa: ANN001
    return {".".join(t.name()): t.metadata_location for t in cat.pipeline_tables(cat.open_catalog(m.config), m.config)}


def scratch_is_gone(m) -> None:  # noqa: ANN001
    scratch = scratch_config(m.config)
    catalog = cat.open_catalog(m.config)
    assert not m.storage.list(scratch.name.replace(".", "%2E"))
    assert not [i for i in catalog.list_tables(scratch.namespace)] if (scratch.namespace,) in catalog.list_namespaces() else True


# ---------------------------------------------------------------- (a) a decoder fix


@pytest.mark.parametrize("protocol", ["canal-json", "debezium-mysql"])
def test_a_decoder_fix_is_repaired_to_the_reference_model(protocol: str, monkeypatch: pytest.MonkeyPatch) -> None:
    m = pipeline(protocol)
    run_all(m, monkeypatch, garble_names)
    wrong = wrong_watermarks(m)
    assert wrong, "the bug changed published rows"
    tags_before, heads_before = tags(m), heads(m)
    published_before = published_watermarks(m.storage, m.config.name)
    # Fixed: a rerun confirms published Ws and leaves them wrong; repair is what re-derives.
    assert m._run(0).outcome == "confirmed" and wrong_watermarks(m) == wrong

    report = repair(m.config)

    assert sorted({d.watermark for d in report.differences}) == wrong
    m.check()  # every published W reads the model; main equals the model at each table's W, never back
    assert published_watermarks(m.storage, m.config.name) == published_before
    tags_after = tags(m)
    moved = {(d.uuid, d.watermark) for d in report.differences}
    assert {k for k in tags_after if tags_after[k] != tags_before[k]} == moved
    assert all(d.snapshot_after == tags_after[(d.uuid, d.watermark)] for d in report.differences)
    latest = published_before[-1]
    for uuid, (head, w) in heads(m).items():
        assert w == heads_before[uuid][1]  # the table's watermark is unchanged
        if (uuid, latest) in moved:
            assert head == tags_after[(uuid, latest)]  # main moved once, to the repaired latest W
            table = next(t for t in cat.pipeline_tables(cat.open_catalog(m.config), m.config) if str(t.metadata.table_uuid) == uuid)
            assert heads_before[uuid][0] in {s.snapshot_id for s in table.snapshots()}
            assert _ancestors(table, head) >= {heads_before[uuid][0]}  # forward from the old head, not back
            assert REPAIR_BRANCH not in table.refs()
        else:
            assert head == heads_before[uuid][0]
    for w in published_before:
        doc = read_published(m.storage, m.config.name, w)
        assert ("repaired" in doc) == (w in wrong)
        if w in wrong:
            assert doc["repaired"]["from"] == wrong[0] and doc["repaired"]["record"] == report.record
        for entry in doc["tables"]:
            assert entry["snapshot"] == tags_after[(entry["uuid"], w)]
    record = orjson.loads(m.storage.read(report.record))
    assert record["status"] == "done" and record["repaired_watermarks"] == wrong
    assert all(d["rows_before"] == d["rows_after"] for d in record["differences"])  # values changed, not rows
    scratch_is_gone(m)
    # A second repair finds nothing; the schedule goes on from the repaired checkpoints.
    assert repair(m.config).differences == []
    m.check()


def _ancestors(table, snapshot_id: int) -> set[int]:  # noqa: ANN001
    out, current = set(), table.snapshot_by_id(snapshot_id)
    while current is not None:
        out.add(current.snapshot_id)
        current = table.snapshot_by_id(current.parent_snapshot_id) if current.parent_snapshot_id else None
    return out


def test_a_repaired_tag_keeps_the_columns_it_had_at_its_watermark(monkeypatch: pytest.MonkeyPatch) -> None:
    up = Upstream(seed=22, tables=("t",))
    up.changes(8)
    up.resolved()
    up.add_column()  # after W_0: the table's current schema has `note`, wm_<W_0> does not
    up.changes(8)
    up.resolved()
    up.resolved()
    m = machine_for("simple")()
    m.begin(up.history, 1)
    first = next(i for i, r in enumerate(m.feed.records) if b"ADD COLUMN" in (r.value or b""))
    m.land_interval(first)
    m.land_interval(len(m.feed.records))
    run_all(m, monkeypatch, garble_names)
    w0, w1 = (w for w, _ in m.intervals)
    assert wrong_watermarks(m) == [w0, w1]
    report = repair(m.config)
    assert [d.watermark for d in report.differences] == [w0, w1]
    m.check()
    assert "note" not in read_pipeline(m.config, w0)[1][("shop", "t")].column_names
    assert "note" in read_pipeline(m.config, w1)[1][("shop", "t")].column_names
    table = cat.pipeline_tables(cat.open_catalog(m.config), m.config)[0]
    assert "note" in table.schema().column_names  # the current schema is the newest again
