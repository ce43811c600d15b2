"""Minimal regressions for operations that broke published history (each failed on 37110b0).

Each test scripts the model-based machine of ``test_operations`` step by step and checks
the same invariants: every published W reads the reference model, every table's main
equals the model at its own watermark and never goes back, no lease is left held.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cdc_codecs import Op, RowChange, SourcePosition, get_encoder
from cdc_codecs.events import BinlogPosition, DdlChange
from spark.demo.workload import create_sql, table_schema
from spark.tables import catalog as cat
from spark.commit.apply import apply_interval
from spark.tables.properties import WATERMARK, table_watermark
from spark.archive.lease import Lease, LeaseLostError
from spark.query.read import read_pipeline, read_table
from spark.archive.storage import open_storage

from .archives import HOUR, T0, ArchiveWriter, make_config
from .history import Upstream
from .test_operations import machine_for

pytestmark = pytest.mark.slow  # whole intervals, Spark or services: make test-fast leaves it out (docs/testing.md)


def machine(protocol: str, history: list, partitions: int = 1):  # noqa: ANN201
    m = machine_for(protocol)()
    m.begin(history, partitions)
    return m


def landed(protocol: str, seed: int, chunks: int, intervals: int, partitions: int = 2):  # noqa: ANN201
    """A pipeline whose upstream wrote ``chunks`` of changes, each closed by a resolved ts, landed in ``intervals``."""
    up = Upstream(seed=seed)
    for _ in range(chunks):
        up.changes(6)
        up.resolved()
    m = machine(protocol, up.history, partitions)
    per = len(m.feed.records) // intervals
    for _ in range(intervals):
        m.land_interval(per)
    return m


def heads(m) -> dict[str, int]:  # noqa: ANN001
    return {str(t.metadata.table_uuid): table_watermark(t) for t in cat.pipeline_tables(cat.open_catalog(m.config), m.config)}


@pytest.mark.parametrize("protocol", ["canal-json", "open-protocol", "simple", "debezium"])
def test_a_replay_cut_by_an_interval_boundary_keeps_the_newest_change(protocol: str) -> None:
    up = Upstream(seed=1, tables=("t0",), key_space=2)
    up.changes(6)
    up.resolved()
    m = machine(protocol, up.history)
    m.feed.deliver(len(m.feed.records))
    # The changefeed restarts from an older checkpoint: the interval ends inside the replay,
    # after an older image of a key and before its newer one.
    m.feed.replay(len(m.feed.records) - 1)
    m.land_interval(0)
    m.feed.resend(0, len(m.feed.records) - 1)  # the next resolved ts again, so W_1 exists too
    m.land_interval(0)
    for j in range(2):
        m._run(j)
        m.check()


def test_an_old_interval_rerun_after_later_ones_is_confirmed_and_the_schedule_continues() -> None:
    m = landed("canal-json", seed=3, chunks=5, intervals=4)
    for j in (0, 1, 2):
        m._run(j)
    before = heads(m)
    assert [m._run(j).outcome for j in (0, 1)] == ["confirmed", "confirmed"]  # cleared and rerun
    assert heads(m) == before  # main never rewinds
    m._run(3)  # the next scheduled interval
    m.check()


def test_a_table_behind_its_pipeline_is_replayed_forward_from_the_archive() -> None:
    m = landed("simple", seed=4, chunks=4, intervals=3)
    m._run(0)
    m._run(1)
    # What an earlier tidelake's backfill left behind: one table rewound to an older tag.
    catalog = cat.open_catalog(m.config)
    table = cat.pipeline_tables(catalog, m.config)[0]
    w0 = m.intervals[0][0]
    table.manage_snapshots().set_current_snapshot(ref_name=f"wm_{w0}").commit()
    with table.transaction() as tx:
        tx.set_properties({WATERMARK: str(w0)})
    m.heads.clear()
    result = m._run(2)
    assert result.replayed, "the interval the table missed was replayed"
    m.check()


def test_a_backfill_across_rename_drop_create_and_truncate_then_the_schedule() -> None:
    up = Upstream(seed=5)
    steps = [up.rename, up.truncate, up.drop, up.create, up.add_column]
    for ddl in steps:
        up.changes(5)
        ddl()
        up.changes(3)
        up.resolved()
    up.resolved()
    m = machine("debezium", up.history, partitions=2)
    per = len(m.feed.records) // 5
    for _ in range(5):
        m.land_interval(per)
    for j in range(4):
        m._run(j)
    for j in range(4):  # backfill the whole range again
        m._run(j)
        m.check()
    m._run(4)
    m.check()
    # Every W reads every table by the name it had then.
    names = {w: set(tables) for w, tables in m.intervals}
    for w, tables in m.intervals:
        if w:
            assert {n for n, rows in m.model_at[w].items() if rows} <= set(read_pipeline(m.config, w)[1]) <= names[w]


def test_a_schema_change_without_rows_is_visible_at_its_tag() -> None:
    up = Upstream(seed=6, tables=("t",))
    up.changes(4)
    up.resolved()
    up.add_column()  # no rows after it in its interval
    up.resolved()
    m = machine("canal-json", up.history)
    n_first = next(i for i, r in enumerate(m.feed.records) if b"ADD COLUMN" in (r.value or b""))
    m.land_interval(n_first)
    m.land_interval(len(m.feed.records))
    m._run(1)
    w = m.intervals[1][0]
    assert "note" in read_table(m.config, "shop", "t", w).column_names


def test_an_undecodable_message_is_quarantined_once_and_accepted_for_later_runs() -> None:
    up = Upstream(seed=7, tables=("t0",))
    up.changes(3)
    up.resolved()
    up.changes(3)  # beyond W_0: the next run resumes before the bad message
    up.resolved()
    m = machine("canal-json", up.history)
    first_mark = m.feed.records.index(next(r for r in m.feed.records if r.value and b"TIDB_WATERMARK" in r.value))
    m.feed.deliver(first_mark + 2)
    m.feed.bad_message()
    m.land_interval(0)
    m.land_interval(len(m.feed.records))
    first = m._run(0, policy="continue")
    assert first.report["quarantined"] == 1
    second = m._run(1, policy="fail")  # re-reads the bad message, already accepted
    assert second is not None and second.report["quarantined"] == 0 and second.report["bad_messages_accepted"] == 1
    m.check()


def test_derived_order_is_by_offset_when_binlog_times_go_back() -> None:
    """MySQL binlog event times are statement start times: they can go back within a partition."""
    schema = table_schema("shop", "t")
    base = 1_700_000_000_000
    pos = iter(range(1, 100))

    def row(op: Op, key: int, name: str, at_ms: int, before: dict | None = None) -> RowChange:
        after = None if op is Op.DELETE else {"id": key, "name": name}
        return RowChange(op, "shop", "t", before, after, ("id",), schema.column_types, None,
                         SourcePosition("g", 0, next(pos)), at_ms)

    create = DdlChange("shop", "t", create_sql(schema), None, SourcePosition("g", 0, 0), "CREATE", None, schema, base)
    first = [create, row(Op.INSERT, 1, "a", base + 100), row(Op.INSERT, 2, "x", base + 110)]
    # Next interval: key 1 is updated by a statement that *started* before key 2's insert.
    second = [row(Op.UPDATE, 1, "b", base + 95, {"id": 1, "name": "a"}), row(Op.INSERT, 3, "y", base + 300)]
    records = get_encoder("debezium-mysql").encode_all(first + second, 1)
    config = make_config(Path(__import__("tempfile").mkdtemp()), "debezium-mysql")
    writer = ArchiveWriter(config, open_storage(config.storage), {"cdc": 1})
    writer.interval(T0, T0 + HOUR, [("cdc", r) for r in records[:3]])
    writer.interval(T0 + HOUR, T0 + 2 * HOUR, [("cdc", r) for r in records[3:]])
    w0 = apply_interval(config, T0, T0 + HOUR).watermark
    w1 = apply_interval(config, T0 + HOUR, T0 + 2 * HOUR).watermark
    at = lambda w: {r["id"]: r["name"] for r in read_table(config, "shop", "t", w).to_pylist()}  # noqa: E731
    assert at(w0) == {1: "a"}  # key 2 at base+110 waits: its millisecond is not complete
    assert at(w1) == {1: "b", 2: "x"}  # the update is after the insert in the binlog, whatever its time


@pytest.mark.parametrize("protocol", ["debezium-mysql", "dts-avro"])
def test_binlog_events_a_connector_sends_again_are_not_applied_again(tmp_path: Path, protocol: str) -> None:
    """Connectors deliver at least once: after a restart from an older offset they re-send
    binlog events they already sent. Without a commitTs the re-sent copy comes later in the
    partition and would win over every newer change to its key (for good, if none follows);
    its binlog coordinates say it was sent before, so it is not applied again."""
    schema = table_schema("shop", "t")
    base = 1_700_000_000_000  # whole seconds apart: DTS carries seconds
    offsets = iter(range(1, 100))

    def row(op: Op, key: int, name: str, at_ms: int, binlog: int, before: dict | None = None) -> RowChange:
        after = {"id": key, "name": name}
        return RowChange(op, "shop", "t", before, after, ("id",), schema.column_types, None,
                         SourcePosition("g", 0, next(offsets)), at_ms, BinlogPosition("000007", binlog, 0, server=3))

    create = DdlChange("shop", "t", create_sql(schema), None, SourcePosition("g", 0, 0), "CREATE", None, schema, base,
                       BinlogPosition("000007", 4, 0, server=3))
    insert = row(Op.INSERT, 1, "a", base + 1000, 200)
    update = row(Op.UPDATE, 1, "b", base + 2000, 300, {"id": 1, "name": "a"})
    other = row(Op.INSERT, 2, "x", base + 3000, 400)
    # The connector restarts from the offset before `update`: it sends `update` and `other`
    # again (a range re-sent), then the insert of key 1 once more (a single at-least-once
    # duplicate), then goes on with a new change.
    later = row(Op.INSERT, 3, "y", base + 5000, 600)
    sent = [create, insert, update, other, update, other, insert, later]
    records = get_encoder(protocol).encode_all(sent, 1)
    config = make_config(tmp_path, protocol)
    writer = ArchiveWriter(config, open_storage(config.storage), {"cdc": 1})
    writer.interval(T0, T0 + HOUR, [("cdc", r) for r in records[:4]])
    writer.interval(T0 + HOUR, T0 + 2 * HOUR, [("cdc", r) for r in records[4:]])
    ws = [apply_interval(config, T0 + i * HOUR, T0 + (i + 1) * HOUR).watermark for i in range(2)]
    at = lambda w: {r["id"]: r["name"] for r in read_table(config, "shop", "t", w).to_pylist()}  # noqa: E731
    assert at(ws[0]) == {1: "b"}  # key 2's second is not complete yet
    assert at(ws[1]) == {1: "b", 2: "x"}  # not key 1's re-sent insert ("a"); key 3 waits for its second


def test_a_run_whose_lease_was_taken_stops_before_committing(tmp_path: Path) -> None:
    up = Upstream(seed=8, tables=("t0",))
    up.changes(4)
    up.resolved()
    m = machine("canal-json", up.history)
    m.land_interval(len(m.feed.records))
    stale = Lease(m.storage, m.config.name, ttl_seconds=-1, owner="stale-worker", renew=False).acquire()
    Lease(m.storage, m.config.name, ttl_seconds=300, owner="new-worker", renew=False).acquire()  # takes it over
    with pytest.raises(LeaseLostError, match="new-worker"):
        apply_interval(m.config, T0, T0 + HOUR, lease=stale)
    assert cat.pipeline_tables(cat.open_catalog(m.config), m.config) == []  # nothing was written


def test_a_scheduled_run_reads_its_own_manifest_and_the_last_checkpoint_not_the_history(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from spark.archive.storage import Storage

    m = landed("canal-json", seed=5, chunks=12, intervals=10)
    reads: list[str] = []
    real = Storage.read

    def counted(self: Storage, path: str) -> bytes:
        reads.append(path)
        return real(self, path)

    for j in range(9):
        m._run(j)
    monkeypatch.setattr(Storage, "read", counted)
    m._run(9)
    monkeypatch.undo()
    m.check()
    manifests = [p for p in reads if "/manifests/" in p]
    checkpoints = [p for p in reads if "/checkpoints/" in p]
    # Its own manifest (the walk reads it to apply it) and at most the two newest checkpoints.
    assert len(set(manifests)) == 1 and len(set(checkpoints)) <= 2, (manifests, checkpoints)
    # Nothing of the change log older than what the previous checkpoint carried is read.
    sides = {p for p in reads if "/changelog/" in p}
    assert len(sides) <= 2 * 2 * 3, sides  # per partition: the state anchor, pending and this interval's segments


def test_an_interval_landed_after_a_later_one_was_applied_is_confirmed_not_an_assertion(tmp_path: Path) -> None:
    """Backfill 05:00, then 04:00: 05:00's offsets began where 03:00 ended, so 04:00 lands empty."""
    from spark.archive.manifest import Manifest, PartitionRange
    from spark.commit.published import announcement

    up = Upstream(seed=5, tables=("t0",))
    chunks = []
    for _ in range(5):
        up.changes(4)
        up.resolved()
        chunks.append(len(up.history))
    records = get_encoder("canal-json").encode_all(up.history, 1)
    config = make_config(tmp_path, "canal-json")
    storage = open_storage(config.storage)
    writer = ArchiveWriter(config, storage, {"cdc": 1})
    per = len(records) // 5
    for i in range(4):
        writer.interval(T0 + i * HOUR, T0 + (i + 1) * HOUR, [("cdc", r) for r in records[i * per:(i + 1) * per]])
    ws = [apply_interval(config, T0 + i * HOUR, T0 + (i + 1) * HOUR).watermark for i in range(4)]
    before_gap = writer.previous
    writer.interval(T0 + 5 * HOUR, T0 + 6 * HOUR, [("cdc", r) for r in records[4 * per:]])
    late = apply_interval(config, T0 + 5 * HOUR, T0 + 6 * HOUR)
    assert late.outcome == "published" and late.watermark > ws[3]
    ends = before_gap.ends()
    empty = Manifest(config.name, T0 + 4 * HOUR, T0 + 5 * HOUR,
                     tuple(PartitionRange(t, p, end, end) for (t, p), end in sorted(ends.items())), before_gap.path)
    storage.create(empty.path, empty.to_json())
    result = apply_interval(config, T0 + 4 * HOUR, T0 + 5 * HOUR)
    assert (result.outcome, result.watermark) == ("confirmed", ws[3])
    assert "holds no message" in result.report["note"]
    assert announcement(config, T0 + 4 * HOUR, T0 + 5 * HOUR, storage) is None
    again = apply_interval(config, T0 + 4 * HOUR, T0 + 5 * HOUR)  # a retry says the same
    assert (again.outcome, again.watermark) == ("confirmed", ws[3])


def test_a_confirming_rerun_keeps_the_applying_run_s_report_and_announces_nothing(tmp_path: Path) -> None:
    import orjson

    from spark.archive import layout
    from spark.commit.published import announcement

    up = Upstream(seed=6, tables=("t0",))
    up.changes(8)
    up.resolved()
    records = get_encoder("canal-json").encode_all(up.history, 1)
    config = make_config(tmp_path, "canal-json")
    storage = open_storage(config.storage)
    ArchiveWriter(config, storage, {"cdc": 1}).interval(T0, T0 + HOUR, [("cdc", r) for r in records])
    first = apply_interval(config, T0, T0 + HOUR)
    assert first.outcome == "published"
    path = layout.report_path(config.name, T0, T0 + HOUR, "apply")
    applied = storage.read(path)
    assert orjson.loads(applied)["messages_decoded"] == len(records)
    announced = announcement(config, T0, T0 + HOUR, storage)
    assert announced is not None and announced.watermark == first.watermark
    rerun = apply_interval(config, T0, T0 + HOUR)
    assert rerun.outcome == "confirmed"
    assert storage.read(path) == applied  # the counts and timings of the run that applied it stay
    confirmation = orjson.loads(storage.read(layout.report_path(config.name, T0, T0 + HOUR, "apply.confirmed")))
    assert (confirmation["outcome"], confirmation["watermark"]) == ("confirmed", first.watermark)
    assert announcement(config, T0, T0 + HOUR, storage) is None  # a rerun announces nothing


def test_an_interval_that_is_done_is_confirmed_without_spark_and_one_with_work_is_not() -> None:
    from spark.commit.apply import confirm_if_done

    m = landed("canal-json", seed=3, chunks=5, intervals=3)
    span = [(T0 + j * HOUR, T0 + (j + 1) * HOUR) for j in range(3)]
    assert confirm_if_done(m.config, T0 + 5 * HOUR, T0 + 6 * HOUR) is None  # not landed
    assert confirm_if_done(m.config, *span[0]) is None  # landed, not applied: work for Spark
    first = m._run(0)
    assert first.outcome == "published" and first.watermark > 0
    assert confirm_if_done(m.config, *span[1]) is None
    confirmed = confirm_if_done(m.config, *span[0])
    assert confirmed is not None and (confirmed.outcome, confirmed.watermark) == ("confirmed", first.watermark)
    again = m._run(0)  # what the full run decides, minus its clock
    assert confirmed.report == again.report | {"confirmed_at": confirmed.report["confirmed_at"]}
