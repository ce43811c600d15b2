"""Net change: what a batch of ordered row changes does to a table, one result per key.

Per key the net effect of a run is its last event (SPEC §3). An update that changes the
key deletes the old key and writes the new one. A table without a primary key uses the
whole row as its key, so rows equal in every column are one row.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from cdc_codecs import Op, RowChange

Key = tuple[Any, ...]


def row_key(key_columns: tuple[str, ...], row: Mapping[str, Any]) -> Key:
    """The key's values; without key columns, the whole row as sorted (column, value) pairs."""
    if key_columns:
        return tuple(row.get(k) for k in key_columns)
    return tuple(sorted(row.items()))


@dataclass
class NetChange:
    """``rows[key]`` is the row's final image (and the change that wrote it), or None if deleted."""

    key_columns: tuple[str, ...]
    rows: dict[Key, tuple[Mapping[str, Any], RowChange] | None] = field(default_factory=dict)

    @property
    def touched(self) -> list[Key]:
        return list(self.rows)

    @property
    def upserts(self) -> list[tuple[Mapping[str, Any], RowChange]]:
        return [v for v in self.rows.values() if v is not None]


def net_change(changes: Iterable[RowChange], key_columns: tuple[str, ...]) -> NetChange:
    """Fold changes already in (commitTs, offset, index) order into one result per key."""
    net = NetChange(key_columns)
    rows = net.rows
    for c in changes:
        if c.op is not Op.INSERT and c.before is not None:
            old = row_key(key_columns, c.before)
            if c.op is Op.DELETE or c.after is None or row_key(key_columns, c.after) != old:
                rows[old] = None
        if c.op is not Op.DELETE and c.after is not None:
            rows[row_key(key_columns, c.after)] = (c.after, c)  # images are never mutated: no copy
    return net
