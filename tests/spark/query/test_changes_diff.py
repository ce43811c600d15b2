"""multiset_difference: the rows that differ between two images, against a plain Python multiset.

With ``key`` (a keyed table's images, each key at most once a side) the rows are compared by their
key's pair instead of sorted: the same answer, and the same as without ``key`` wherever a key
repeats (that input takes the multiset path)."""

from __future__ import annotations

import pytest

import math
import struct

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from spark.query.changes_diff import multiset_difference

pytestmark = pytest.mark.slow  # whole intervals, Spark or services: make test-fast leaves it out (docs/testing.md)

keys = st.one_of(st.none(), st.integers(0, 6))
floats = st.sampled_from([None, 0.0, -0.0, 1.5, math.nan])
texts = st.sampled_from([None, "", "a", "b"])
rows = st.lists(st.tuples(keys, floats, texts), max_size=12)


def _same_value(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return a == b


def _by_python(before, after):
    """Rows grouped by equality (NULL = NULL, NaN = NaN, -0.0 = 0.0); of a group with n copies more
    on one side, that side's first n are the difference."""
    def equal(r, q):
        return all(map(_same_value, r, q))

    def difference(one, other):
        out = []
        for i, r in enumerate(one):
            copies = [j for j, q in enumerate(one) if equal(r, q)]
            excess = len(copies) - sum(equal(r, q) for q in other)
            if copies.index(i) < excess:
                out.append(i)
        return out
    return difference(before, after), difference(after, before)


def _table(rs):
    return pa.table({"id": pa.array([r[0] for r in rs], pa.int64()), "f": pa.array([r[1] for r in rs], pa.float64()),
                     "s": pa.array([r[2] for r in rs], pa.string())})


@settings(max_examples=300, deadline=None)
@given(rows, rows)
def test_the_difference_of_two_images_is_the_multiset_difference(before, after):
    expected = _by_python(before, after)
    for key in ((), ("id",)):
        removed, added = multiset_difference(_table(before), _table(after), ["id", "f", "s"], key)
        assert (removed.tolist(), added.tolist()) == expected, key


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), floats, texts), max_size=15, unique_by=lambda r: r[0]),
       st.lists(st.tuples(st.integers(0, 30), floats, texts), max_size=15, unique_by=lambda r: r[0]))
def test_keyed_images_compare_by_pairs(before, after):
    """Each key once a side (the keyed path always): the rows whose key's pair differs, and the unpaired."""
    removed, added = multiset_difference(_table(before), _table(after), ["id", "f", "s"], ("id",))
    assert (removed.tolist(), added.tolist()) == _by_python(before, after)


_NAN_OTHER_BITS = struct.unpack("<d", struct.pack("<Q", 0x7FF8000000000001))[0]
float_keys = st.sampled_from([None, 0.0, -0.0, 1.5, math.nan, -math.nan, _NAN_OTHER_BITS])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), float_keys, texts), max_size=10),
       st.lists(st.tuples(st.integers(0, 2), float_keys, texts), max_size=10))
def test_float_keys_compare_as_the_multiset_does(before, after):
    """A FLOAT/DOUBLE key part (one column or one of several): NULL = NULL, -0.0 = 0.0, and NaN = NaN
    whatever its bits (Arrow's hash join tells NaNs of other bits apart: the keyed path must not)."""
    expected = _by_python(before, after)
    for key in (("f",), ("id", "f")):
        removed, added = multiset_difference(_table(before), _table(after), ["id", "f", "s"], key)
        assert (removed.tolist(), added.tolist()) == expected, key
