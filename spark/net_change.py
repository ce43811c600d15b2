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

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from cdc_codecs import Op, RowChange

Key = tuple[Any, ...]
# (commitTs, topic, partition, offset, index): a total order of the changes of one pipeline.
Order = tuple[int, str, int, int, int]


def row_key(key_columns: tuple[str, ...], row: Mapping[str, Any]) -> Key:
    """The key's values; without key columns, the whole row as sorted (column, value) pairs."""
    if key_columns:
        return tuple(row.get(k) for k in key_columns)
    return tuple(sorted(row.items()))


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
        keys = self.key_columns
        if change.op is not Op.INSERT and change.before is not None:
            old = row_key(keys, change.before)
            if change.op is Op.DELETE or change.after is None or row_key(keys, change.after) != old:
                self._put(old, order, None)
        if change.op is not Op.DELETE and change.after is not None:
            self._put(row_key(keys, change.after), order, change)

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
