"""Which change-log rows a run applies, and in which DDL segment of their table.

Runs on the executors over change-log batches (``spark.decode.changelog``'s columns), so it is a
pure function of an Arrow batch and a small ``FoldWindow``. It adds three columns:

- ``ts``: the row's commitTs for this run. Protocols without commitTs store their partition's
  derived clock; the run lifts it to ``max(clock, W_prev + 1)`` (docs/data-plane.md, derived clock).
- ``state``: ``APPLY`` for W_prev < ts <= W, ``PENDING`` above W (waits for a later run),
  ``SKIPPED`` at or below W_prev (a redelivery of something applied).
- ``segment``: how many DDLs of the row's table in this run precede the row in commit order
  (commitTs, topic, partition, offset, index), so rows are never folded across a schema change;
- ``rank``: the row's rank within its commitTs (``net_change.transaction_rank``): a write of a
  key above a delete of it in one TiDB transaction; alike for rows on a derived clock.

It also settles the ``run`` of key-less tables' rows (``net_change.multiset_net`` counts a
change once per run): a run cut by a segment's start takes the run it continues
(``link_runs``), and rows on a derived clock take the run ``EVERY_CHANGE`` (nothing tells a
re-sent range there, so every delivered change counts, each in its own order).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark.decode.side_output import SideOutput
from spark.core.keys import Order
from spark.fold.net_change import EVERY_CHANGE, transaction_rank

APPLY, PENDING, SKIPPED = 0, 1, 2

PKey = tuple[str, int]
TableRef = tuple[str, str]


@dataclass(frozen=True)
class FoldWindow:
    """What one run applies: the commitTs window and, per partition, the offsets [pending, end)."""

    w_prev: int
    w: int
    offsets: Mapping[PKey, tuple[int, int]]
    derived_topics: frozenset[str] = frozenset()
    # Commit order of the run's DDLs per table they change (a RENAME counts for both names).
    ddl_orders: Mapping[TableRef, tuple[Order, ...]] = field(default_factory=dict)
    # (topic, partition, run) -> the run it continues across a segment boundary (``link_runs``).
    run_links: Mapping[tuple[str, int, int], int] = field(default_factory=dict)


def link_runs(sides: Mapping[PKey, Sequence[SideOutput]]) -> dict[tuple[str, int, int], int]:
    """Runs that go on from one segment into the next: the next segment's first row follows the
    last row of the one before without a gap, at the same commitTs. ``sides``: each partition's
    consecutive side outputs in offset order."""
    links: dict[tuple[str, int, int], int] = {}
    for (topic, partition), outputs in sides.items():
        before = None
        for side in outputs:
            runs = side.runs
            if runs is None:  # no rows: whatever ran before it ended at its messages
                before = None
                continue
            if (before is not None and before.last_commit_ts == runs.first_commit_ts
                    and 0 <= runs.first_offset - before.last_offset <= 1):
                earlier = links.get((topic, partition, before.last_run), before.last_run)
                links[(topic, partition, runs.first_offset)] = earlier
            before = runs
    return links


SELECTED_FIELDS = [pa.field("ts", pa.int64()), pa.field("state", pa.int8()), pa.field("segment", pa.int32()),
                   pa.field("rank", pa.int8())]


def select(rows: pa.Table | pa.RecordBatch, window: FoldWindow) -> pa.Table:
    """``rows`` inside the run's offset windows, with ``ts``, ``state``, ``segment`` and ``rank`` added."""
    table = rows if isinstance(rows, pa.Table) else pa.Table.from_batches([rows])
    if table.num_rows == 0:
        return _with_selected(table, *(pa.array([], f.type) for f in SELECTED_FIELDS))
    partitions = table.column("partition").to_numpy()
    offsets = table.column("offset").to_numpy()
    keep = np.zeros(table.num_rows, dtype=bool)
    of_topic: dict[str, np.ndarray] = {}
    for (topic, partition), (lo, hi) in window.offsets.items():
        if topic not in of_topic:
            of_topic[topic] = _equal(table.column("topic"), topic)
        keep |= of_topic[topic] & (partitions == partition) & (offsets >= lo) & (offsets < hi)
    if not keep.all():
        table = table.filter(pa.array(keep))
    ts = table.column("commit_ts").to_numpy().copy()
    derived = np.zeros(len(ts), dtype=bool)
    for topic in window.derived_topics:
        derived |= _equal(table.column("topic"), topic)
    if derived.any():
        ts[derived] = np.maximum(ts[derived], window.w_prev + 1)
    state = np.full(len(ts), APPLY, dtype=np.int8)
    state[ts > window.w] = PENDING
    state[ts <= window.w_prev] = SKIPPED
    segment = _segments(table, ts, window)
    rank = transaction_rank(table.column("deletes").to_numpy(zero_copy_only=False), ~derived)
    table = _settle_runs(table, derived, window)
    return _with_selected(table, pa.array(ts), pa.array(state), pa.array(segment), pa.array(rank))


def _settle_runs(table: pa.Table, derived: np.ndarray, window: FoldWindow) -> pa.Table:
    run = table.column("run").to_numpy()
    keyless = run >= 0
    if not keyless.any():
        return table
    run = run.copy()
    run[keyless & derived] = EVERY_CHANGE
    linked = np.flatnonzero(keyless & ~derived) if window.run_links else ()
    if len(linked):
        at = pa.array(linked)
        links = window.run_links
        triples = zip(table.column("topic").take(at).to_pylist(), table.column("partition").take(at).to_pylist(),
                      run[linked].tolist())
        run[linked] = [links.get((t, p, r), r) for t, p, r in triples]
    return table.set_column(table.schema.get_field_index("run"), "run", pa.array(run))


def _equal(column: pa.ChunkedArray, text: str) -> np.ndarray:
    """The rows of a text column equal to ``text``: Arrow compares the UTF-8 bytes, with no Python
    string made a row (a million rows' names as objects cost a fold slice more than its sort)."""
    try:
        needle = pa.scalar(text, pa.string())
    except UnicodeEncodeError:  # a lone surrogate: no valid UTF-8 text (all Arrow holds) equals it
        return np.zeros(len(column), dtype=bool)
    return pc.fill_null(pc.equal(column, needle), False).to_numpy(zero_copy_only=False)


def _with_selected(table: pa.Table, *columns: pa.Array) -> pa.Table:
    for f, column in zip(SELECTED_FIELDS, columns, strict=True):
        table = table.append_column(f, column)
    return table


def _segments(table: pa.Table, ts: np.ndarray, window: FoldWindow) -> np.ndarray:
    segment = np.zeros(table.num_rows, dtype=np.int32)
    if not window.ddl_orders or table.num_rows == 0:
        return segment
    partitions = table.column("partition").to_numpy()
    offsets = table.column("offset").to_numpy()
    indexes = table.column("index").to_numpy()
    for (database, name), orders in window.ddl_orders.items():
        rows = np.flatnonzero(_equal(table.column("database"), database) & _equal(table.column("table"), name))
        if not len(rows):
            continue
        topics = table.column("topic").take(pa.array(rows)).to_numpy(zero_copy_only=False)
        for order in orders:
            segment[rows] += _after(order, ts[rows], topics, partitions[rows], offsets[rows], indexes[rows])
    return segment


def _after(order: Order, ts: np.ndarray, topics: np.ndarray, partitions: np.ndarray, offsets: np.ndarray,
           indexes: np.ndarray) -> np.ndarray:
    """Rows that come after ``order`` in commit order (lexicographic over the five fields)."""
    after = np.zeros(len(ts), dtype=bool)
    tied = np.ones(len(ts), dtype=bool)
    for values, bound in zip((ts, topics, partitions, offsets, indexes), order):
        after |= tied & (values > bound)
        tied &= values == bound
    return after
