"""Net change: what a set of row changes does to a table, one result per key. The one fold rule.

Per key of a table with a primary key, the net effect is the change that is *greatest* in the
fold's order -- (commitTs, rank in the transaction, topic, partition, offset, index in the
message) -- never simply the last one read: upstreams re-send old ranges after newer changes (a
TiCDC or Debezium restart from an older checkpoint), and an interval boundary can fall anywhere
inside such a replay (contract §3). An update that changes the key deletes the old key and
writes the new one.

Within one commitTs of a protocol that carries it (one TiDB transaction), a key's writes rank
above its deletes (``transaction_rank``): TiDB commits one final mutation per row and two live
rows never share a key, so the key is present at that commitTs iff some row image writes it --
an UPDATE moving a row from key 1 to key 2 and an INSERT of a new key 1 in one transaction may
reach different partitions (TiCDC's index-value dispatcher), in either order. Derived clocks
(protocols without commitTs) give many changes one ``ts``; there every change ranks alike and
offsets decide, as in the binlog.

A table without a primary key is a multiset: MySQL allows identical rows there, and a row event
changes one row. Its key is the whole row, and its net change per key is a *count* of copies
to add or remove (``multiset_net``): each change counts +1 (a written image) or -1 (a deleted
one), once per copy of its transaction -- a changefeed that re-sends a transaction repeats its
*run* (the transaction's offset-contiguous rows in a partition), so an identical change counts
as many times as it occurs in one run of its commitTs and partition, at most. Protocols without
commitTs cannot tell a re-sent range yet: every delivered change counts (docs/known-gaps.md).

Decoding turns each change into its key effects (``change_effects``) with canonical key bytes
(``key_bytes``) in the change log; the fold (``greatest``) keeps, per table, DDL segment
and key, the greatest effect (or a key-less image's count). Spark runs it per key-hash slice (``key_hash``) on the executors,
the in-process plane on one table holding every slice: the same function, so it does not matter
where a key's changes were folded.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


GROUP_COLUMNS = ("database", "table", "segment", "key")
# Commit order: how changes and DDLs are placed relative to each other (DDL segments, plans).
ORDER_COLUMNS = ("ts", "topic", "partition", "offset", "index")
# The fold's order: commit order, with a transaction's writes of a key above its deletes.
FOLD_ORDER_COLUMNS = ("ts", "rank", "topic", "partition", "offset", "index")
WRITE_RANK, DELETE_RANK = 1, 0
# Any order of the GROUP_COLUMNS puts a group's rows together; the key first decides most
# comparisons in one column (1M rows: 0.9 s, where database, table, segment first took 1.9 s).
SORT_KEYS = [(c, "ascending") for c in ("key", "table", "database", "segment")] + [(c, "descending") for c in FOLD_ORDER_COLUMNS]
assert {c for c, _ in SORT_KEYS[:len(GROUP_COLUMNS)]} == set(GROUP_COLUMNS)
# ``greatest``'s order: the key's hash first (a key's rows share it, so groups stay together), an
# integer that decides nearly every comparison without reading the key's bytes -- a 250k-row fold
# slice sorted in 58 ms against 113 ms.
HASHED_SORT_KEYS = [("key_hash", "ascending"), *SORT_KEYS]


def transaction_rank(deletes: np.ndarray, has_commit_ts: np.ndarray) -> np.ndarray:
    """The ``rank`` column: within one commitTs, a write of a key (``WRITE_RANK``) wins over a
    delete of it (``DELETE_RANK``), whatever their partitions and offsets -- for rows whose
    protocol carries commitTs; rows on a derived clock all rank ``DELETE_RANK``."""
    return np.where(has_commit_ts & ~deletes, WRITE_RANK, DELETE_RANK).astype(np.int8)


def sort_for_fold(rows: pa.Table) -> pa.Table:
    return rows.sort_by(SORT_KEYS)


def greatest(rows: pa.Table) -> pa.Table:
    """Per (table, segment, key), the row greatest in the fold's order.

    Only the sort's and the groups' columns are sorted: the rest of a row (its image, ~200 bytes)
    is taken once, for the rows kept. Rows without ``key_hash`` sort by ``SORT_KEYS``."""
    if rows.num_rows == 0:
        return rows
    keys = HASHED_SORT_KEYS if "key_hash" in rows.schema.names else SORT_KEYS
    order = pc.sort_indices(rows.select(list(dict.fromkeys(c for c, _ in keys))), sort_keys=keys)
    # The sorted groups' batches, however Arrow chunks them, are ``order`` cut in pieces, in order.
    starts = list(_group_starts(rows.select(list(GROUP_COLUMNS)).take(order).to_batches()))
    return rows.take(order.filter(pa.array(np.concatenate(starts) if starts else np.zeros(0, dtype=bool))))


# A net row's ``count``: how many copies of its image it writes or deletes. 1 for a keyed table's
# (the key's one row); a key-less table's net change per image.
COUNT = pa.field("count", pa.int64())
_COPY_COLUMNS = ["topic", "partition", "ts", "deletes", *GROUP_COLUMNS]


def with_count(net: pa.Table, count: pa.Array | np.ndarray | None = None) -> pa.Table:
    return net.append_column(COUNT, pa.array(np.ones(net.num_rows, np.int64) if count is None else count, pa.int64()))


def multiset_net(rows: pa.Table) -> pa.Table:
    """The net change of key-less tables' rows (``run`` settled): per (table, segment, image), a
    row deleting (``deletes``) up to ``count`` of the copies the table holds, then a row writing
    ``count`` copies; either left out when 0.

    A row event changes a row that is there: the image's changes apply in the fold's order, each
    delete removing a copy only while one is live -- a DELETE re-sent after its row was gone
    removes nothing, and never a copy a later INSERT adds. Their effect on a table holding c
    copies is max(c + S, F) (S their sum; F >= 0 what they leave where they deleted D copies more
    than there were at their deepest, S + D): delete up to D copies, then write F
    (``_copy_steps`` lists the steps).

    A change's copies in its transaction: the most times it occurs in one run of its commitTs in
    its partition (a re-sent transaction repeats a run); summed over partitions (each change of a
    transaction is sent to one), deletes before writes (one TiDB transaction commits one final
    mutation per row). On a derived clock (run ``EVERY_CHANGE``) every delivered change is a step
    of its own, in offset order. The row that stands for an image is its greatest write (or
    delete) in the fold's order."""
    schema = rows.schema.append(COUNT)
    if rows.num_rows == 0:
        return schema.empty_table()
    steps = _copy_steps(rows).sort_by([(c, "ascending") for c in (*GROUP_COLUMNS, *_STEP_ORDER)])
    delta = steps.column("delta").to_numpy()
    first = np.zeros(steps.num_rows, dtype=bool)
    first[0] = True
    for name in GROUP_COLUMNS:
        column = steps.column(name).combine_chunks()
        if steps.num_rows > 1:
            first[1:] |= pc.not_equal(column.slice(1), column.slice(0, steps.num_rows - 1)).to_numpy(zero_copy_only=False)
    starts = np.flatnonzero(first)
    prefix = np.cumsum(delta)
    before = np.concatenate(([0], prefix[starts[1:] - 1]))  # the running sum where each image starts
    within = prefix - np.repeat(before, np.diff(np.append(starts, steps.num_rows)))
    total = np.add.reduceat(delta, starts)
    deficit = np.maximum(0, -np.minimum.reduceat(within, starts))  # copies deleted beyond what was there
    images = steps.take(pa.array(starts)).select(list(GROUP_COLUMNS))
    deleted, written = deficit, total + deficit
    deletes = rows.column("deletes")
    parts = []
    for deleting, count in ((True, deleted), (False, written)):
        changed = images.append_column("copies", pa.array(count, pa.int64())).filter(pa.array(count > 0))
        if not changed.num_rows:
            continue
        chosen = greatest(rows.filter(deletes if deleting else pc.invert(deletes)))
        joined = chosen.join(changed, keys=list(GROUP_COLUMNS), join_type="inner")
        parts.append(with_count(joined.select(rows.schema.names), joined.column("copies").to_numpy()))
    return pa.concat_tables(parts).cast(schema) if parts else schema.empty_table()


# A key-less row's ``run`` on a derived clock: nothing tells a re-sent range there, so every
# delivered change counts, each a step of its own (``spark.fold.select`` settles it).
EVERY_CHANGE = np.iinfo(np.int64).max
# The order of an image's steps: commitTs; in a transaction its deletes, then its writes; on a
# derived clock, the changes' own order (a delete before a write at one position: an UPDATE).
_STEP_ORDER = ("ts", "phase", "topic", "partition", "offset", "index", "then")


def _copy_steps(rows: pa.Table) -> pa.Table:
    """The signed copy counts (``delta``) an image's changes add, with their ``_STEP_ORDER``."""
    every = pc.equal(rows.column("run"), EVERY_CHANGE)
    in_transactions = rows.filter(pc.invert(every))
    in_run = in_transactions.group_by([*_COPY_COLUMNS, "run"]).aggregate([([], "count_all")])
    copies = in_run.group_by(_COPY_COLUMNS).aggregate([("count_all", "max")])
    per_ts = copies.group_by([*GROUP_COLUMNS, "ts", "deletes"]).aggregate([("count_all_max", "sum")])
    n = per_ts.num_rows
    deleting = per_ts.column("deletes")
    transactions = {
        **{c: per_ts.column(c) for c in GROUP_COLUMNS}, "ts": per_ts.column("ts"),
        "phase": pc.if_else(deleting, 0, 1).cast(pa.int8()), "topic": pa.array([""] * n, pa.string()),
        "partition": pa.array(np.zeros(n, np.int64)), "offset": pa.array(np.zeros(n, np.int64)),
        "index": pa.array(np.zeros(n, np.int64)), "then": pa.array(np.zeros(n, np.int8)),
        "delta": pc.if_else(deleting, pc.negate(per_ts.column("count_all_max_sum")), per_ts.column("count_all_max_sum")),
    }
    changes = rows.filter(every)
    m = changes.num_rows
    each = {
        **{c: changes.column(c) for c in GROUP_COLUMNS}, "ts": changes.column("ts"),
        "phase": pa.array(np.zeros(m, np.int8)), "topic": changes.column("topic"),
        "partition": changes.column("partition").cast(pa.int64()), "offset": changes.column("offset").cast(pa.int64()),
        "index": changes.column("index").cast(pa.int64()),
        "then": pc.if_else(changes.column("deletes"), 0, 1).cast(pa.int8()),
        "delta": pc.if_else(changes.column("deletes"), -1, 1).cast(pa.int64()),
    }
    columns = list(transactions)
    return pa.concat_tables([pa.table({c: transactions[c] for c in columns}).cast(_steps_schema(rows)),
                             pa.table({c: each[c] for c in columns}).cast(_steps_schema(rows))])


def _steps_schema(rows: pa.Table) -> pa.Schema:
    return pa.schema([*(rows.schema.field(c) for c in GROUP_COLUMNS), rows.schema.field("ts"), pa.field("phase", pa.int8()),
                      pa.field("topic", pa.string()), pa.field("partition", pa.int64()), pa.field("offset", pa.int64()),
                      pa.field("index", pa.int64()), pa.field("then", pa.int8()), pa.field("delta", pa.int64())])


def _group_starts(batches: Iterable[pa.RecordBatch]) -> Iterator[np.ndarray]:
    """Per batch of rows sorted by groups, which rows start a group (groups may span batches)."""
    last: tuple[Any, ...] | None = None
    for batch in batches:
        n = batch.num_rows
        first = np.zeros(n, dtype=bool)
        if n:
            first[0] = True
        for name in GROUP_COLUMNS:
            column = batch.column(name)
            if n > 1:
                first[1:] |= pc.not_equal(column.slice(1), column.slice(0, n - 1)).to_numpy(zero_copy_only=False)
        if n and last is not None and tuple(batch.column(c)[0].as_py() for c in GROUP_COLUMNS) == last:
            first[0] = False
        if n:
            last = tuple(batch.column(c)[n - 1].as_py() for c in GROUP_COLUMNS)
        yield first
