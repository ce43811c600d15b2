"""Net change: what a set of row changes does to a table, one result per key. The one fold rule.

Per key the net effect is the change that is *greatest* in commit order -- (commitTs, topic,
partition, offset, index in the message) -- never simply the last one read: upstreams
re-send old ranges after newer changes (a TiCDC or Debezium restart from an older
checkpoint), and an interval boundary can fall anywhere inside such a replay (contract §3).
An update that changes the key deletes the old key and writes the new one. A table without
a primary key uses the whole row as its key, so rows equal in every column are one row.

Executors fold each partition with ``NetChange.add``; the driver merges the partitions'
results with ``NetChange.merge`` -- the same rule, so it does not matter where a key's
changes were folded.
"""

from __future__ import annotations

import datetime as dt
import pickle
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Iterable, Iterator, Mapping

from cdc_codecs import Op, RowChange

Key = tuple[Any, ...]
# (commitTs, topic, partition, offset, index): a total order of the changes of one pipeline.
Order = tuple[int, str, int, int, int]


def row_key(key_columns: tuple[str, ...], row: Mapping[str, Any]) -> Key:
    """The key's values; without key columns, the whole row as sorted (column, value) pairs."""
    if key_columns:
        return tuple(row.get(k) for k in key_columns)
    return tuple(sorted(row.items()))


def _canonical(value: Any) -> Any:
    """A value's canonical form: equal Python values (1, 1.0, Decimal("1.00")) get equal forms."""
    if value is None or isinstance(value, (str, bytes)):
        return value
    if isinstance(value, (bool, int, float, Decimal)):
        number = Decimal(value)  # exact, also for floats
        return ("n", str(number.normalize()) if number.is_finite() else str(number))
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return ("t", value.isoformat())
    if isinstance(value, (list, tuple)):
        return ("l", tuple(_canonical(v) for v in value))
    return (type(value).__name__, repr(value))


def key_bytes(key: Key) -> bytes:
    """Canonical bytes of a key: equal keys (as ``NetChange`` compares them) give equal bytes,
    so a shuffle or a group-by on these bytes folds exactly the keys ``NetChange`` folds."""
    return pickle.dumps(tuple(_canonical(v) for v in key), protocol=5)


def change_effects(change: RowChange, key_columns: tuple[str, ...] | None = None) -> Iterator[tuple[Key, bool]]:
    """What one change does per key: ``(key, deletes)``. An update that changes the key deletes
    the old key and writes the new one; every other change touches one key."""
    keys = change.key_columns if key_columns is None else key_columns
    if change.op is not Op.INSERT and change.before is not None:
        old = row_key(keys, change.before)
        if change.op is Op.DELETE or change.after is None or row_key(keys, change.after) != old:
            yield old, True
    if change.op is not Op.DELETE and change.after is not None:
        yield row_key(keys, change.after), False


def change_order(change: RowChange) -> Order:
    p = change.position
    return (change.commit_ts or 0, p.topic, p.partition, p.offset, p.index)


@dataclass
class NetChange:
    """``rows[key] = (order, change)``: the greatest change of the key; ``change`` None if it deletes it."""

    key_columns: tuple[str, ...]
    rows: dict[Key, tuple[Order, RowChange | None]] = field(default_factory=dict)

    def _put(self, key: Key, order: Order, change: RowChange | None) -> None:
        current = self.rows.get(key)
        if current is None or order > current[0]:
            self.rows[key] = (order, change)

    def add(self, change: RowChange, order: Order | None = None) -> None:
        """Fold one change in, whatever order changes arrive in."""
        order = order if order is not None else change_order(change)
        for key, deletes in change_effects(change, self.key_columns):
            self._put(key, order, None if deletes else change)

    def merge(self, other: NetChange) -> None:
        """Fold another part of the same table's changes in (e.g. another partition's)."""
        for key, (order, change) in other.rows.items():
            self._put(key, order, change)

    @property
    def touched(self) -> list[Key]:
        return list(self.rows)

    @property
    def upserts(self) -> list[tuple[Mapping[str, Any], RowChange]]:
        return [(change.after, change) for _, change in self.rows.values() if change is not None]  # type: ignore[misc]

    def deleted_image(self, key: Key) -> dict[str, Any]:
        """The key as a row image (for a key the net change deletes)."""
        return dict(zip(self.key_columns, key)) if self.key_columns else dict(key)


def net_change(changes: Iterable[RowChange], key_columns: tuple[str, ...]) -> NetChange:
    """Fold changes, in any order, into one result per key."""
    net = NetChange(key_columns)
    for c in changes:
        net.add(c)
    return net
