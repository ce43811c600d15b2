"""A change's key: canonical key bytes, the key hash, a change's effects per key, commit order.

Decoding turns each change into its key effects (``change_effects``) with canonical key bytes
(``key_bytes``) in the change log; the fold (``spark.fold.net_change``) groups by them, and cuts
its work into key-hash slices (``key_hash``): every stage derives a key the same way, here.
"""

from __future__ import annotations

import datetime as dt
import zlib
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from cdc_codecs import Op, RowChange

Key = tuple[Any, ...]
# (commitTs, topic, partition, offset, index): a total order of the changes of one pipeline.
Order = tuple[int, str, int, int, int]


def row_key(key_columns: tuple[str, ...], row: Mapping[str, Any]) -> Key:
    """The key's values; without key columns, the whole row as sorted (column, value) pairs."""
    if len(key_columns) == 1:  # the usual key, twice per change on decode: no generator
        return (row.get(key_columns[0]),)
    if key_columns:
        return tuple(row.get(k) for k in key_columns)
    return tuple(sorted(row.items()))


def _canonical(value: Any) -> str:
    """A value as tagged text: equal Python values (1, 1.0, Decimal("1.00")) get equal texts."""
    if isinstance(value, str):
        return "s" + value
    if isinstance(value, bool) or isinstance(value, int):
        return "n" + str(int(value))
    if value is None:
        return "0"
    if isinstance(value, (float, Decimal)):
        number = Decimal(value)  # exact, also for floats
        if not number.is_finite():
            return "n" + str(number)
        integral = number.to_integral_value()
        return "n" + (str(int(integral)) if number == integral else _fraction_text(number))
    if isinstance(value, bytes):
        return "y" + value.hex()
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return "t" + value.isoformat()
    if isinstance(value, (list, tuple)):
        return "l" + _joined(value)
    return type(value).__name__ + ":" + repr(value)


def _fraction_text(number: Decimal) -> str:
    """A non-integral Decimal without trailing zeros, every digit kept.

    Not ``normalize()``: it rounds to the context's precision (28 digits), which made two
    DECIMAL(65,30) keys that differ only past their 28th digit one key."""
    sign, digits, exponent = number.as_tuple()
    end = len(digits)
    while digits[end - 1] == 0:  # a non-integral value has a non-zero digit after the point
        end -= 1
        exponent += 1  # type: ignore[operator]
    return str(Decimal((sign, digits[:end], exponent)))


def _joined(values: Iterable[Any]) -> str:
    # Length-prefixed, so no value's text can be mistaken for a separator.
    return "".join(f"{len(t)}:{t}" for t in map(_canonical, values))


def key_bytes(key: Key) -> bytes:
    """Canonical bytes of a key: equal keys give equal bytes, so a shuffle or a group-by on these
    bytes folds exactly the keys Python equality would."""
    if len(key) == 1 and type(key[0]) is int:  # the usual key, once per change-log row: same bytes, no generator
        text = f"n{key[0]}"
        return f"{len(text)}:{text}".encode()
    return _joined(key).encode("utf-8", "surrogatepass")


def key_hash(key: bytes, seed: int) -> int:
    """A stable 32-bit hash of one table's key: CRC-32 of its ``key_bytes`` from the table's
    ``table_seed``.

    The fold cuts the hash space into slices: every effect on one key of one table lands in one
    slice, whichever partition or run it came from, so a slice folds alone. Stored per
    change-log row, which is sorted by it (``spark.decode.changelog``), so a slice reads only
    its row groups. CRC-32, not Python's ``hash``: equal in every process, and ~0.1 us a key."""
    return zlib.crc32(key, seed)


def table_seed(database: str, table: str) -> int:
    """``key_hash``'s seed for one table (the CRC-32 of its length-prefixed names)."""
    return zlib.crc32(f"{len(database)}:{database}{len(table)}:{table}".encode("utf-8", "surrogatepass"))


def change_effects(change: RowChange, key_columns: tuple[str, ...] | None = None) -> tuple[tuple[Key, bool], ...]:
    """What one change does per key: ``(key, deletes)``. An update that changes the key deletes
    the old key and writes the new one; every other change touches one key. An update of a
    key-less table's row always deletes one copy of its before-image and writes one of its after-image."""
    # Once per change-log row on decode: the change unpacked once, a tuple rather than a generator.
    op, _, _, before, after, keys = change[:6]
    if key_columns is not None:
        keys = key_columns
    if op is Op.INSERT or before is None:
        return () if op is Op.DELETE or after is None else ((row_key(keys, after), False),)
    old = row_key(keys, before)
    if op is Op.DELETE or after is None:
        return ((old, True),)
    new = row_key(keys, after)
    if keys and new == old:
        return ((new, False),)
    return ((old, True), (new, False))


def change_order(change: RowChange) -> Order:
    p = change.position
    return (change.commit_ts or 0, p.topic, p.partition, p.offset, p.index)


# ------------------------------------------------------------------ the fold on Arrow rows
#
# The same rule for change-log rows (``docs/data-plane.md``): per GROUP_COLUMNS the row greatest
# in FOLD_ORDER_COLUMNS wins. Rows sorted by GROUP_COLUMNS and then by the commit order descending put
# each key's greatest change first and ``greatest`` keeps it (``_group_starts``): on a Spark executor for one
# key-hash slice of a run (``spark.fold.slices``), in process for all of it.
