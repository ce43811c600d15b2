"""``tidelake repair``: after a decoder fix, every published W reads what the archive now derives.

Each test scripts the model-based machine of ``test_operations``: intervals are landed
(the reference model decodes them with the real decoders), then runs happen under a
"decoder bug" -- the decoders spark/commit/apply.py uses garble some values -- so published tags
hold wrong rows. The bug is then fixed (the patch removed) and ``repair`` must bring every
published W back to the model, moving only the tags whose rows changed.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any, Callable

import orjson
import pytest

from cdc_codecs import RowChange, Watermark
from spark.decode import changelog as decode_module
from spark.tables import catalog as cat
from spark.archive import layout
from spark.commit.apply import ApplyError, apply_interval
from spark.cli.main import main
from spark.tables.properties import table_watermark
from spark.archive.lease import Lease, LeaseHeldError, current_lease
from spark.commit.published import announcement, published_watermarks, read_published, repair_records
from spark.query.changes import read_changes
from spark.query.read import read_pipeline
from spark.repair.run import REPAIR_BRANCH, RepairError, repair, scratch_config
from spark.core.watermark import tag_name

from tests.spark.archives import HOUR, T0, normalise
from tests.spark.history import Upstream
from tests.spark.test_operations import machine_for

pytestmark = pytest.mark.slow  # whole intervals, Spark or services: make test-fast leaves it out (docs/testing.md)

GARBLED = "garbled by a decoder bug"


class Crash(Exception):
    pass


def buggy_decoders(monkeypatch: pytest.MonkeyPatch, change: Callable[[Any], Any]) -> None:
    """The decoders the pipeline runs with apply ``change`` to every event they return."""
    real = decode_module.get_decoder

    class Buggy:
        def __init__(self, decoder: Any) -> None:
            self.decoder = decoder

        def decode(self, msg: Any) -> list:
            return [change(e) for e in self.decoder.decode(msg)]

        def __getattr__(self, name: str) -> Any:
            return getattr(self.decoder, name)

    monkeypatch.setattr(decode_module, "get_decoder", lambda *a, **k: Buggy(real(*a, **k)))
    # A decoder fix ships with a new decoder version, so the fixed decoder derives its own change log.
    monkeypatch.setattr(decode_module, "DECODER_VERSION", f"{decode_module.DECODER_VERSION}-before-the-fix")


def garble_names(e: Any) -> Any:
    """The bug: a string column of rows with an even key decodes wrong."""
    if isinstance(e, RowChange) and e.after and e.after.get("id", 1) % 2 == 0 and e.after.get("name") is not None:
        return e._replace(after={**e.after, "name": GARBLED})
    return e


def pipeline(protocol: str = "canal-json", seed: int = 21, intervals: int = 3, partitions: int = 2,
             later: int = 0):  # noqa: ANN201
    """A machine with ``intervals`` landed intervals of a history that changes rows in every one,
    and ``later`` more intervals' worth of it not landed yet (``m.per`` records each)."""
    up = Upstream(seed=seed)
    for _ in range(intervals + later + 1):
        up.changes(8)
        up.resolved()
    m = machine_for(protocol)()
    m.begin(up.history, partitions)
    m.per = len(m.feed.records) // (intervals + later) + 1
    for _ in range(intervals):
        m.land_interval(m.per)
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
    assert m.storage.list(layout.pipeline_root(scratch.name)) == []
    assert (scratch.namespace,) not in cat.open_catalog(m.config).list_namespaces()


# ---------------------------------------------------------------- (a) a decoder fix


@pytest.mark.parametrize("protocol", ["canal-json", pytest.param("debezium-mysql", marks=pytest.mark.slow)])
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


# ---------------------------------------------------------------- (b) dry run


def test_a_dry_run_lists_the_differences_and_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    m = pipeline()
    run_all(m, monkeypatch, garble_names)
    wrong = wrong_watermarks(m)
    archive, tables, tags_before = archive_state(m), catalog_state(m), tags(m)
    dry = repair(m.config, dry_run=True)
    assert sorted({d.watermark for d in dry.differences}) == wrong
    assert all(d.snapshot_after is None for d in dry.differences) and dry.record is None
    assert archive_state(m) == archive and catalog_state(m) == tables and tags(m) == tags_before
    assert repair_records(m.storage, m.config.name) == []
    scratch_is_gone(m)
    real = repair(m.config)  # what the dry run listed is what a repair moves
    assert [(d.watermark, d.name, d.rows_before, d.rows_after) for d in real.differences] == \
        [(d.watermark, d.name, d.rows_before, d.rows_after) for d in dry.differences]


# ---------------------------------------------------------------- (c) a history tags cannot express


def shift_watermarks(e: Any) -> Any:
    return e._replace(ts=e.ts - 1) if isinstance(e, Watermark) else e


def lose_a_table(e: Any) -> Any:
    return None if getattr(e, "table", None) == "t.1" else e


@pytest.mark.parametrize("change, says", [
    (shift_watermarks, "published W .*, the archive now derives"),
    pytest.param(lose_a_table, "tables shop.t.1, shop.t0 are published, the archive now derives shop.t0", marks=pytest.mark.slow),
])
def test_a_repair_whose_archive_derives_other_watermarks_or_tables_fails_and_changes_nothing(
        change: Callable[[Any], Any], says: str, monkeypatch: pytest.MonkeyPatch) -> None:
    m = pipeline()
    run_all(m, monkeypatch)
    archive, tables = archive_state(m), catalog_state(m)
    with monkeypatch.context() as patch:
        buggy_decoders(patch, change)
        with pytest.raises(RepairError, match=says) as failed:
            repair(m.config)
    assert "Nothing was changed. Rebuild the pipeline under a new name" in str(failed.value)
    assert archive_state(m) == archive and catalog_state(m) == tables
    scratch_is_gone(m)
    m.check()


# ---------------------------------------------------------------- (d) a crash in the middle


@pytest.mark.parametrize("at", [
    "table",  # between two tables' commits: some tags moved, others not
    *(pytest.param(at, marks=pytest.mark.slow) for at in ("re-derived", "recorded", "staged", "checkpointed", "published")),
])
def test_a_repair_that_crashes_leaves_every_watermark_readable_and_a_rerun_finishes(
        at: str, monkeypatch: pytest.MonkeyPatch) -> None:
    m = pipeline()
    run_all(m, monkeypatch, garble_names)
    wrong = wrong_watermarks(m)

    def fault(step: str) -> None:
        if step == at or step.startswith(f"{at}:"):
            raise Crash(step)

    with pytest.raises(Crash):
        repair(m.config, fault=fault)
    for w in published_watermarks(m.storage, m.config.name):
        read_pipeline(m.config, w)  # readable: old rows or repaired ones, never a broken view
    assert set(wrong_watermarks(m)) <= set(wrong)
    assert not current_lease(m.storage, m.config.name).live(__import__("time").time())
    report = repair(m.config)
    m.check()
    for w in wrong:  # Ws the crashed repair moved are marked repaired too
        assert read_published(m.storage, m.config.name, w)["repaired"]["record"] == report.record
    records = dict(repair_records(m.storage, m.config.name))
    assert records[report.record]["status"] == "done" and records[report.record]["repaired_watermarks"] == wrong
    assert {d["status"] for p, d in records.items() if p != report.record} <= {"superseded"}


# ---------------------------------------------------------------- (e) the lease


def test_a_repair_holds_the_pipelines_lease(monkeypatch: pytest.MonkeyPatch) -> None:
    m = pipeline()
    run_all(m, monkeypatch, garble_names)
    archive, tables = archive_state(m), catalog_state(m)
    other = Lease(m.storage, m.config.name, ttl_seconds=300, owner="scheduled-run", renew=False).acquire()
    with pytest.raises(LeaseHeldError, match="scheduled-run"):
        repair(m.config)
    other.release()
    assert archive_state(m) == archive and catalog_state(m) == tables
    # While a repair works, a run of the pipeline finds the lease held.
    seen = []

    def run_meanwhile(step: str) -> None:
        if step.startswith("table:") and not seen:
            with pytest.raises(LeaseHeldError):
                apply_interval(m.config, T0, T0 + HOUR)
            seen.append(step)

    repair(m.config, fault=run_meanwhile)
    assert seen
    m.check()


# ---------------------------------------------------------------- (f) --from


def test_from_limits_which_tags_move(monkeypatch: pytest.MonkeyPatch) -> None:
    m = pipeline()
    run_all(m, monkeypatch, garble_names)
    wrong = wrong_watermarks(m)
    assert len(wrong) >= 2
    before = tags(m)
    report = repair(m.config, from_watermark=wrong[1])
    assert sorted({d.watermark for d in report.differences}) == wrong[1:]
    after = tags(m)
    assert {k for k in after if after[k] != before[k]} == {(d.uuid, d.watermark) for d in report.differences}
    assert wrong_watermarks(m) == wrong[:1]  # earlier tags keep what they had
    repair(m.config)
    m.check()


# ---------------------------------------------------------------- announcing a repair downstream


def test_the_next_new_watermark_announces_the_repair_once(monkeypatch: pytest.MonkeyPatch) -> None:
    m = pipeline(intervals=2, later=2)
    run_all(m, monkeypatch, garble_names)
    wrong = wrong_watermarks(m)
    report = repair(m.config)
    assert report.repaired_from == wrong[0]
    span = lambda j: (T0 + j * HOUR, T0 + (j + 1) * HOUR)  # noqa: E731
    # A publish task retried for an interval published before the repair does not claim it.
    assert announcement(m.config, *span(1), storage=m.storage).repair is False
    m.land_interval(m.per)
    assert m._run(2).outcome == "published"
    first = announcement(m.config, *span(2), storage=m.storage)
    assert (first.watermark, first.repair, first.repaired_from) == (m.intervals[2][0], True, wrong[0])
    assert announcement(m.config, *span(2), storage=m.storage) == first  # the same task retried says the same
    m.land_interval(len(m.feed.records))
    assert m._run(3).outcome == "published"
    assert announcement(m.config, *span(3), storage=m.storage).repair is False  # announced once
    m.check()


# ---------------------------------------------------------------- (g) the command


def test_the_repair_command(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    m = pipeline()
    run_all(m, monkeypatch, garble_names)
    wrong = wrong_watermarks(m)
    path = tmp_path / "pipeline.toml"
    path.write_text(f'name = "shop"\n[kafka]\nbootstrap_servers = "unused:9092"\n[[topics]]\nname = "cdc"\n'
                    f'protocol = "canal-json"\n[storage]\nurl = "{m.config.storage.url}"\n')
    assert main(["repair", "--config", str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"repair shop: re-derived from the archive; compared {len(published_watermarks(m.storage, 'shop'))}")
    assert all(f"W {w} (" in out for w in wrong) and "would move" in out and "dry run: nothing was changed" in out
    assert wrong_watermarks(m) == wrong

    assert main(["repair", "--config", str(path), "--from", str(wrong[-1])]) == 0
    out = capsys.readouterr().out
    assert f"(W >= {wrong[-1]})" in out and f"tag wm_{wrong[-1]} moved to snapshot" in out and "recorded in shop/repairs/" in out
    assert f"W {wrong[0]} (" not in out

    time_of_first = dt.datetime.fromtimestamp((wrong[0] >> 18) / 1000, dt.timezone.utc).isoformat().replace("+00:00", "Z")
    assert main(["repair", "--config", str(path), "--from", time_of_first]) == 0
    assert f"W {wrong[0]} (" in capsys.readouterr().out
    m.check()

    assert main(["repair", "--config", str(path)]) == 0
    assert "nothing differs" in capsys.readouterr().out
    assert main(["repair", "--config", str(path), "--from", "yesterday"]) == 2
    assert capsys.readouterr().err.startswith("error: --from: expected")
    other = Lease(m.storage, "shop", ttl_seconds=300, owner="scheduled-run", renew=False).acquire()
    assert main(["repair", "--config", str(path)]) == 1
    assert "scheduled-run" in capsys.readouterr().err
    other.release()


def test_a_lost_tag_that_a_rerun_reports_is_recreated_by_repair(monkeypatch: pytest.MonkeyPatch) -> None:
    m = pipeline()
    run_all(m, monkeypatch)
    w = m.intervals[1][0]
    table = cat.pipeline_tables(cat.open_catalog(m.config), m.config)[0]
    kept = {k: v for k, v in tags(m).items() if k != (str(table.metadata.table_uuid), w)}
    table.manage_snapshots().remove_tag(tag_name(w)).commit()
    with pytest.raises(ApplyError, match=f"run `tidelake repair --from {w}`"):
        m._run(1)
    report = repair(m.config, from_watermark=w)
    assert [(d.watermark, d.uuid, d.snapshot_before) for d in report.differences] == [(w, str(table.metadata.table_uuid), None)]
    m.check()
    assert {k: v for k, v in tags(m).items() if k in kept} == kept


@pytest.mark.parametrize("before_images", [True, False])
def test_the_change_feed_from_a_recreated_tag_to_a_later_untouched_one_is_unchanged(
        monkeypatch: pytest.MonkeyPatch, before_images: bool) -> None:
    """Repair puts W's tag on a snapshot newer than a later W2's (made on a branch, main left where it
    is): that snapshot is no ancestor of W2's, so the feed's W2 read may not skip what is older than it
    (a W2 read that skipped the manifests older than W's new snapshot found no row at W2)."""
    m = pipeline()
    run_all(m, monkeypatch)
    w, later = m.intervals[1][0], published_watermarks(m.storage, m.config.name)[-1]
    assert w < later
    table = cat.pipeline_tables(cat.open_catalog(m.config), m.config)[0]
    wanted = read_changes(m.config, w, later, before_images=before_images)
    table.manage_snapshots().remove_tag(tag_name(w)).commit()
    repair(m.config, from_watermark=w)
    table = cat.open_catalog(m.config).load_table(table.name())
    assert table.snapshot_by_name(tag_name(w)).sequence_number > table.snapshot_by_name(tag_name(later)).sequence_number
    got = read_changes(m.config, w, later, before_images=before_images)
    assert sorted(got) == sorted(wanted) and any(t.num_rows for t in wanted.values())
    for name in wanted:
        assert normalise(got[name].to_pylist()) == normalise(wanted[name].to_pylist()), name
