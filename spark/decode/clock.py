"""Commit order of a partition's events: the protocol's commitTs, or the derived clock.

Each message's events pass through a clock, which gives every row change and DDL its commitTs
and says what the message proves about the partition's completeness (its *mark*).
"""

from __future__ import annotations

from cdc_codecs import Clock, DdlChange, DecodeError, Event, RowChange, Watermark
from cdc_codecs.events import BinlogPosition
from spark.core.watermark import derived_commit_ts, derived_mark


# (server id, binlog file base name, file number, position, row): ``BinlogPosition`` as compared.
BinlogMark = tuple[int, str, int, int, int]


class CommitTsClock:
    """Protocols that carry commitTs (TiCDC): events keep theirs; marks are the watermarks' ts."""

    value = 0
    binlog: BinlogMark | None = None

    def __init__(self, protocol: str) -> None:
        self.protocol = protocol

    def stamp(self, events: list[Event]) -> tuple[list[Event], int | None]:
        """The events as they are, and the greatest watermark among them (None without one).

        Raises:
            DecodeError: a change without a commitTs (a message of another producer or
                configuration), which nothing in a commitTs-ordered topic could order.
        """
        mark = None
        for e in events:
            if isinstance(e, Watermark):
                if mark is None or e.ts > mark:
                    mark = e.ts
            elif isinstance(e, (RowChange, DdlChange)) and e.commit_ts is None:
                raise DecodeError(self.protocol, e.position, None,
                                  "no commitTs: the topic's protocol orders changes by it and this message carries none")
        return events, mark


class DerivedClock:
    """Commit order for streams without commitTs (official Canal, CloudCanal, Debezium MySQL, DTS,
    TiCDC's Canal-JSON without its TiDB extension).

    Binlog event times are statement start times and can go backwards within a partition, so
    time cannot say what is applied; the partition's offset order can (every key lives in one
    partition, so per key it is the binlog's order). A change's commitTs is the running maximum
    of ``derived_commit_ts(event time)`` along its partition's offsets (``value``, carried from
    segment to segment), so it never decreases and the changes a run applies (commitTs <= W)
    are a prefix of each partition. Each event, and each DTS heartbeat, proves its partition
    complete up to just before its time: ``derived_mark``.
    """

    def __init__(self, protocol: str, value: int = 0, binlog: BinlogMark | None = None,
                 binlog_ordered: bool = False) -> None:
        self.protocol = protocol
        self.value = value
        # The greatest binlog coordinates the partition showed (``binlog_ordered`` protocols):
        # a change at or below them is a connector's redelivery after a restart, dropped here
        # so that no W ever shows the older images it re-sends (contract §3).
        self.binlog = binlog
        self.binlog_ordered = binlog_ordered
        self.redelivered = 0

    def stamp(self, events: list[Event]) -> tuple[list[Event], int | None]:
        """The events with their derived commitTs, and the greatest mark they prove.

        Raises:
            DecodeError: a change without an event time, which nothing could order; the
                message is rejected whole and the clock left as it was.
        """
        for e in events:
            if isinstance(e, (RowChange, DdlChange)) and e.event_time_ms is None:
                raise DecodeError(self.protocol, e.position, None,
                                  "no event time: without a commitTs the change cannot be ordered")
        out: list[Event] = []
        mark = None
        for e in events:
            if isinstance(e, Watermark):
                proved = derived_mark(e.ts) if e.clock is Clock.EPOCH_MS else e.ts
                out.append(e)
            elif isinstance(e, (RowChange, DdlChange)):
                if self.binlog_ordered and e.binlog is not None and self._redelivered(e.binlog):
                    self.redelivered += 1
                    continue
                self.value = max(self.value, derived_commit_ts(e.event_time_ms))  # type: ignore[arg-type]
                proved = derived_mark(e.event_time_ms)  # type: ignore[arg-type]
                out.append(e._replace(commit_ts=self.value))
            else:
                out.append(e)
                continue
            if mark is None or proved > mark:
                mark = proved
        return out, mark

    def _redelivered(self, binlog: BinlogPosition) -> bool:
        """Whether ``binlog`` is at or below the partition's greatest coordinates (then it was
        sent before); otherwise they become the greatest. Another server's coordinates (a
        failover) start the comparison afresh: they say nothing about this server's."""
        here = (binlog.server, *binlog.sort_key())
        if self.binlog is not None and self.binlog[0] == here[0] and here <= self.binlog:
            return True
        self.binlog = here
        return False
