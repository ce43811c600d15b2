"""The clocks that order a partition's events: the protocol's commitTs, or the derived clock."""

from __future__ import annotations

import pytest

from cdc_codecs import Clock, DdlChange, DecodeError, Op, RowChange, SourcePosition, Watermark
from cdc_codecs.events import BinlogPosition
from spark.decode.clock import CommitTsClock, DerivedClock
from spark.core.watermark import derived_commit_ts, derived_mark

POS = SourcePosition("cdc", 0, 9)


def insert(ms: int | None, commit_ts: int | None = None) -> RowChange:
    return RowChange(Op.INSERT, "d", "t", None, {"id": 1}, ("id",), None, commit_ts, POS, ms)


def test_commit_ts_protocols_keep_their_commit_ts_and_mark_with_the_greatest_watermark() -> None:
    events = [insert(5, commit_ts=77), Watermark(100, POS), Watermark(90, POS)]
    assert CommitTsClock("debezium").stamp(events) == (events, 100)
    assert CommitTsClock("debezium").stamp([insert(5, commit_ts=77)]) == ([insert(5, commit_ts=77)], None)


def test_a_change_without_commit_ts_in_a_commit_ts_topic_is_a_decode_error() -> None:
    """A Debezium MySQL connector's message in a TiCDC Debezium topic: rejected, not a crash in the fold."""
    with pytest.raises(DecodeError, match="debezium cdc/0@9.*no commitTs: the topic's protocol orders changes by it"):
        CommitTsClock("debezium").stamp([insert(5, commit_ts=None)])


def test_the_derived_clock_is_a_running_maximum_from_its_carried_value() -> None:
    clock = DerivedClock("canal", derived_commit_ts(1005))
    stamped, mark = clock.stamp([insert(1000), insert(1010), insert(1007)])
    assert [e.commit_ts for e in stamped] == [derived_commit_ts(ms) for ms in (1005, 1010, 1010)]
    assert mark == derived_mark(1010) and clock.value == derived_commit_ts(1010)


def test_ddl_shares_the_derived_clock_and_heartbeats_in_wall_clock_time_become_marks() -> None:
    clock = DerivedClock("dts-avro")
    ddl = DdlChange("d", "t", "ALTER TABLE t ADD c int", None, POS, event_time_ms=2000)
    stamped, mark = clock.stamp([ddl, Watermark(3000, POS, Clock.EPOCH_MS)])
    assert stamped == [ddl._replace(commit_ts=derived_commit_ts(2000)), Watermark(3000, POS, Clock.EPOCH_MS)]
    assert mark == derived_mark(3000)
    # A TSO watermark is a commit timestamp already.
    assert clock.stamp([Watermark(derived_commit_ts(4000), POS)])[1] == derived_commit_ts(4000)


def test_a_message_with_a_change_without_event_time_is_rejected_whole() -> None:
    clock = DerivedClock("canal", 7)
    with pytest.raises(DecodeError, match=r"canal cdc/0@9\[0\]: no event time"):
        clock.stamp([insert(5000), insert(None)])
    assert clock.value == 7  # the message's other change did not move the clock


def at(file: str, pos: int, row: int = 0, server: int = 1, ms: int = 1000) -> RowChange:
    return insert(ms)._replace(binlog=BinlogPosition(file, pos, row, server))


def test_binlog_ordered_protocols_drop_changes_at_or_below_the_greatest_coordinates_seen() -> None:
    clock = DerivedClock("debezium-mysql", binlog_ordered=True)
    first = [at("mysql-bin.000009", 500), at("mysql-bin.000009", 500, row=1), at("mysql-bin.000010", 4)]
    assert clock.stamp(first)[0] == [e._replace(commit_ts=derived_commit_ts(1000)) for e in first]
    # Re-sent after a restart (file 9 < file 10), the same coordinates again, then new ones.
    again = [at("mysql-bin.000009", 500, row=1), at("mysql-bin.000010", 4), at("mysql-bin.000010", 90)]
    stamped, _ = clock.stamp(again)
    assert [e.binlog for e in stamped] == [again[2].binlog] and clock.redelivered == 2
    # Files compare by number past MySQL's six zero-padded digits, and the state carries on.
    carried = DerivedClock("debezium-mysql", clock.value, clock.binlog, binlog_ordered=True)
    assert len(carried.stamp([at("mysql-bin.999999", 4)])[0]) == 1
    assert len(carried.stamp([at("mysql-bin.1000000", 4)])[0]) == 1


def test_another_server_s_coordinates_start_afresh_and_changes_without_coordinates_always_count() -> None:
    clock = DerivedClock("debezium-mysql", binlog_ordered=True)
    clock.stamp([at("mysql-bin.000050", 900, server=1)])
    # A failover: the new primary's binlog has smaller numbers; nothing of it is a redelivery.
    assert len(clock.stamp([at("mysql-bin.000003", 4, server=2), insert(1000)])[0]) == 2
    # Protocols whose coordinates do not grow along the partition never drop anything.
    plain = DerivedClock("cloudcanal-debezium")
    assert len(plain.stamp([at("mysql-bin.000009", 500), at("mysql-bin.000009", 500)])[0]) == 2
