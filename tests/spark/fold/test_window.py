"""The interval window (``spark.fold.window``): the one place a run's offsets, W and DDL are decided."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

from cdc_codecs import DdlChange, SourcePosition, protocol_spec
from spark.archive.manifest import Manifest, PartitionRange
from spark.config import PipelineConfig, StorageConfig, TopicConfig
from spark.fold.window import IntervalWindow, derived_topics

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _window(topics: tuple[TopicConfig, ...], offsets: dict, w_prev: int = 0, ddl_applied: tuple = ()) -> IntervalWindow:
    config = PipelineConfig("p", "127.0.0.1:9", topics, StorageConfig("/tmp/unused"))
    manifest = Manifest("p", T0, T0 + dt.timedelta(hours=1),
                        tuple(PartitionRange(t, p, lo, hi) for (t, p), (lo, hi) in offsets.items()))
    return IntervalWindow(config, None, manifest, w_prev, offsets, {}, {}, derived_topics(config),  # type: ignore[arg-type]
                          ddl_applied)


def _ddl(topic: str, partition: int, offset: int, ts: int | None, sql: str = "ALTER TABLE t ADD c INT",
         event_time_ms: int | None = None) -> DdlChange:
    return DdlChange("db", "t", sql, ts, SourcePosition(topic, partition, offset, 0), event_time_ms=event_time_ms)


def _sides(*ddls: DdlChange) -> dict:
    out: dict = {}
    for e in ddls:
        out.setdefault((e.position.topic, e.position.partition), []).append(SimpleNamespace(ddl=[e]))
    return out


def test_the_fold_is_sized_by_the_rows_of_the_offsets_its_window_reads() -> None:
    window = _window((TopicConfig("t", "canal-json"),), {("t", 0): (59_000, 120_000), ("t", 1): (0, 100)})
    side = lambda start, end, rows: SimpleNamespace(start=start, end=end, rows=rows)  # noqa: E731
    sides = {("t", 0): [side(0, 60_000, 60_000), side(60_000, 120_000, 60_000)],
             ("t", 1): [side(0, 100, 400)]}  # partition 1: four rows a message
    # Partition 0 reads from its pending offset 59,000: 1,000 offsets of the first segment, all of the second.
    assert window.rows(sides) == 1_000 + 60_000 + 400
    later = _window((TopicConfig("t", "canal-json"),), {("t", 0): (120_000, 120_000), ("t", 1): (50, 100)})
    assert later.rows(sides) == 200


def test_the_protocol_registry_says_which_partition_sends_ddl() -> None:
    # The rule is the codec registry's, not a protocol name written into the run or the feed.
    assert protocol_spec("canal-json").ddl_partition == 0
    assert all(protocol_spec(p).ddl_partition is None for p in ("open-protocol", "simple", "debezium", "canal"))


def test_ddl_of_a_canal_json_topic_is_applied_from_partition_0_only() -> None:
    window = _window((TopicConfig("cj", "canal-json"),), {("cj", 0): (0, 10), ("cj", 1): (0, 10)})
    elsewhere = _ddl("cj", 1, 3, 100, "ALTER TABLE t ADD x INT")
    there = _ddl("cj", 0, 4, 110)
    assert window.select_ddl(_sides(elsewhere, there), 200).applied == [there]


def test_a_broadcast_ddl_is_applied_once_and_one_above_w_holds_its_partition() -> None:
    window = _window((TopicConfig("op", "open-protocol"),), {("op", 0): (0, 10), ("op", 1): (0, 10)}, w_prev=50)
    copies = [_ddl("op", 0, 2, 100), _ddl("op", 1, 7, 100)]
    later = _ddl("op", 1, 8, 300, "ALTER TABLE t ADD d INT")
    redelivered = _ddl("op", 0, 3, 40, "ALTER TABLE t ADD old INT")
    outside = _ddl("op", 0, 12, 120, "ALTER TABLE t ADD never INT")  # past the manifest's end: the next run's
    selection = window.select_ddl(_sides(*copies, later, redelivered, outside), 200)
    assert selection.applied == [copies[0]]
    assert selection.pending == {("op", 1): 8}
    assert selection.derived == []


def test_a_derived_clock_ddl_is_lifted_above_w_prev_and_recognised_in_a_later_run() -> None:
    topics = (TopicConfig("dbz", "debezium-mysql"),)
    assert derived_topics(PipelineConfig("p", "", topics, StorageConfig("/tmp/unused"))) == {"dbz"}
    first = _window(topics, {("dbz", 0): (0, 10), ("dbz", 1): (0, 10)}, w_prev=1_000)
    copy0 = _ddl("dbz", 0, 1, 10, event_time_ms=5)
    selection = first.select_ddl(_sides(copy0), 2_000)
    assert [e.commit_ts for e in selection.applied] == [1_001]  # lifted to W_prev + 1
    ident = (5, "db", "t", copy0.sql)
    assert selection.derived == [ident]
    # The same statement's copy on another partition, in a later run: already applied.
    second = _window(topics, {("dbz", 0): (10, 20), ("dbz", 1): (0, 20)}, w_prev=2_000, ddl_applied=(ident,))
    copy1 = _ddl("dbz", 1, 11, 10, event_time_ms=5)
    assert second.select_ddl(_sides(copy1), 3_000).applied == []
