"""The change feed's ``_commit_ts``: the commitTs of what produced each change row.

An after image's own commitTs (its last change) when the window wrote it, else its key's last
change in the change log (a key-less table's image), else the table's last DDL in the window --
but a column filled for the existing rows (ADD COLUMN ... DEFAULT) after that produced the image,
and a rename onto the name after it produced an insert. An update's before image has its after
image's. A row deleted whose key's last change wrote it (no update's before image) was taken by a
DDL (TRUNCATE, a DROP, a rename away, a partition's TRUNCATE, DROP or EXCHANGE): the first after
that write whose rows include it (``spark.query.changes_removals``).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark.core.key_match import key_matches, unmatched
from spark.query.changes_ddl import TableDdl
from spark.query.changes_keys import TouchedKeys
from spark.query.changes_removals import Removals
from spark.tables.partitioning import UnknownPartitionRows


def logged_ts(rows: pa.Table, taken: np.ndarray, typed: TouchedKeys | None, match: list[str],
              default: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row ``taken`` of ``rows``: the commitTs of its key's last change in the change log (or
    ``default`` where the change log has none), and whether the change log has one."""
    out, found = np.full(len(taken), default, np.int64), np.zeros(len(taken), bool)
    if typed is None or not len(taken) or typed.keys.num_rows == 0:
        return out, found
    row, hit = key_matches(rows.take(pa.array(taken, pa.int64())).select(match), typed.keys.select(match), match)
    if not len(row):
        return out, found
    latest = np.zeros(len(taken), np.int64)
    np.maximum.at(latest, row, typed.ts[hit])
    found[row] = True
    return np.where(found, latest, out), found


def deleted_ts(rows: pa.Table, taken: np.ndarray, typed: TouchedKeys | None, match: list[str], default: int,
               removals: Removals, w1: int) -> np.ndarray:
    """The commitTs of what deleted each row ``taken`` of ``rows`` (rows of W1 not at W2, no update's
    before image): its key's last change when that deleted it, else the first of ``removals`` after
    that change (after W1 when the change log has none) whose rows include the row (a partition's
    removal: the rows the partition held then, ``spark.query.changes_removals``); else ``default``.
    Where which rows a removal took cannot be told (``removals.inexact``, or a row's partition not
    computed here, which sets it), the first removal after the row's last write."""
    ts, found = logged_ts(rows, taken, typed, match, default)
    if not removals.at or not len(taken):
        return ts
    wrote = np.ones(len(taken), bool)  # without a change in the log, the row was last written at or before W1
    if typed is not None and found.any():
        row, hit = key_matches(rows.take(pa.array(taken, pa.int64())).select(match), typed.keys.select(match), match)
        last = np.full(len(taken), -1, np.int64)
        np.maximum.at(last, row, typed.ts[hit])
        deleted = np.zeros(len(taken), bool)
        newest = typed.ts[hit] == last[row]
        deleted[row[newest]] = typed.deleted[hit][newest]
        wrote = ~deleted
    since = np.where(found, ts, w1)
    if removals.inexact is None:
        try:
            return _removed_by(rows.take(pa.array(taken, pa.int64())), since, wrote, ts, removals)
        except UnknownPartitionRows as exc:
            removals.inexact = f"which rows a partition removal took cannot be told: {exc}"
        except _NotTold as exc:
            removals.inexact = str(exc)
    ordered = np.sort(np.asarray([r.ts for r in removals.at], np.int64))
    at = np.searchsorted(ordered, since, side="right")  # the first removal after the key's last write
    taken_by_ddl = wrote & (at < len(ordered))
    return np.where(taken_by_ddl, ordered[np.minimum(at, len(ordered) - 1)], ts)


class _NotTold(Exception):
    """Which removal took a row cannot be told (why in the message)."""


def _removed_by(rows: pa.Table, since: np.ndarray, wrote: np.ndarray, ts: np.ndarray, removals: Removals) -> np.ndarray:
    """Per row of ``rows`` last written at ``since`` (where ``wrote``): the commitTs of the first
    removal after that which took it (else its ``ts``).

    Raises:
        UnknownPartitionRows: a partition's rows cannot be computed for these rows.
        _NotTold: a row no removal after its last write took, or one that may have come back (an
            EXCHANGE PARTITION, a rename onto the name) after the removal that took it, and been
            taken again by a later one.
    """
    out, pending = ts.copy(), wrote.copy()
    written = np.flatnonzero(wrote)  # the rows a removal may have taken: a partition's rows computed for them only
    candidates = rows.take(pa.array(written, pa.int64()))
    took = []  # (commitTs, the rows it took)
    for removal in sorted(removals.at, key=lambda r: r.ts):
        held = np.ones(len(out), bool)
        if removal.holds is not None:
            held[written] = pc.fill_null(removal.holds(candidates), False).to_numpy(zero_copy_only=False)
        took.append((removal.ts, held))
        hit = pending & (since < removal.ts) & held
        out[hit] = removal.ts
        pending &= ~hit
    if pending.any() and (since[pending] < max(r.ts for r in removals.at)).any():  # a removal after it, not holding it
        raise _NotTold(f"{int(pending.sum())} removed row(s) that no removal after their last write held")
    for arrival in removals.arrived:
        gone = wrote & ~pending & (out < arrival)  # taken before rows came to the name: back, and taken again?
        again = [t for t, held in took if t > arrival and (held & gone).any()]
        if again:
            raise _NotTold(f"rows came to the table at commitTs {arrival} (an EXCHANGE PARTITION, a rename onto it), "
                           f"after the removal that took a row, and a later one (at {again[0]}) may have taken it again")
    return out


def fallback_ts(ddl: TableDdl, w2: int) -> int:
    """The commitTs of an image no change in the log explains: the table's last DDL that changed its
    rows wholesale, else its last DDL in the window, else W2."""
    return ddl.rows_ts or ddl.last_ts or w2


def image_ts(rows1: pa.Table, removed: np.ndarray, before_pair: np.ndarray, rows2: pa.Table, added: np.ndarray,
             after_pair: np.ndarray, own_ts: np.ndarray, typed: TouchedKeys | None, match: list[str], ddl: TableDdl,
             removals: Removals, w1: int, w2: int) -> tuple[np.ndarray, np.ndarray]:
    """``_commit_ts`` of the before images (rows ``removed`` of ``rows1``; ``before_pair`` of them an
    update's) and of the after images (rows ``added`` of ``rows2``, with their own commitTs
    ``own_ts``; ``after_pair`` of them an update's), by the rules above."""
    fallback = fallback_ts(ddl, w2)
    after_ts = own_ts.astype(np.int64, copy=True)
    older = np.flatnonzero(after_ts <= w1)
    after_ts[older] = logged_ts(rows2, added[older], typed, match, fallback)[0]
    after_ts = np.maximum(after_ts, max(ddl.filled, default=0))
    inserts = unmatched(len(added), after_pair)
    after_ts[inserts] = np.maximum(after_ts[inserts], max(ddl.arrived, default=0))
    before_ts = np.zeros(len(removed), np.int64)
    before_ts[before_pair] = after_ts[after_pair]  # an update's before image: the update's commitTs
    alone = unmatched(len(removed), before_pair)
    before_ts[alone] = deleted_ts(rows1, removed[alone], typed, match, fallback, removals, w1)
    return before_ts, after_ts
