"""key_mask and key_matches: which rows carry a touched key, for one, several and whole-row keys with NULLs."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import numpy as np

from spark.core.key_match import KeyColumnsMissing, ascending_unique, key_mask, key_matches, unmatched


def test_one_key_column_with_a_wider_touched_type():
    rows = pa.table({"id": pa.array([1, 2, 3, None], pa.int32()), "v": ["a", "b", "c", "d"]})
    touched = pa.table({"id": pa.array([3, 1, 99], pa.int64())})
    assert key_mask(rows, touched, ["id"]).to_pylist() == [True, False, True, False]


def test_a_null_key_matches_a_null_touched_key_only():
    rows = pa.table({"id": pa.array([1, None], pa.int64())})
    assert key_mask(rows, pa.table({"id": pa.array([None], pa.int64())}), ["id"]).to_pylist() == [False, True]


def test_composite_keys_match_all_parts_and_nulls_as_values():
    rows = pa.table({
        "a": pa.array([1, 1, 2, None, None], pa.int64()),
        "b": pa.array(["x", "y", "x", "x", None]),
        "c": pa.array([Decimal("1.5"), None, Decimal("2.0"), None, None], pa.decimal128(5, 2)),
    })
    touched = pa.table({
        "a": pa.array([1, None, None, 2], pa.int64()),
        "b": pa.array(["y", "x", None, "x"]),
        "c": pa.array([None, None, None, Decimal("2.5")], pa.decimal128(5, 2)),
    })
    assert key_mask(rows, touched, ["a", "b", "c"]).to_pylist() == [False, True, False, True, True]


def test_temporal_and_all_null_columns():
    rows = pa.table({"d": pa.array([dt.date(2024, 1, 1), dt.date(2024, 1, 2)]), "n": pa.nulls(2, pa.string())})
    touched = pa.table({"d": pa.array([dt.date(2024, 1, 2)]), "n": pa.nulls(1, pa.string())})
    assert key_mask(rows, touched, ["d", "n"]).to_pylist() == [False, True]


def test_empty_inputs_and_missing_columns():
    rows = pa.table({"a": pa.array([1], pa.int64()), "b": pa.array([1], pa.int64())})
    assert key_mask(rows, rows.slice(0, 0), ["a", "b"]).to_pylist() == [False]
    assert key_mask(rows.slice(0, 0), rows, ["a", "b"]).to_pylist() == []
    with pytest.raises(KeyColumnsMissing, match="touched keys: no key column 'b'"):
        key_mask(rows, rows.select(["a"]), ["a", "b"])


values = st.one_of(st.none(), st.integers(-3, 3))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(values, values), max_size=30), st.lists(st.tuples(values, values), max_size=30))
def test_matches_python_tuple_membership(row_keys, touched_keys):
    rows = pa.table({"a": pa.array([r[0] for r in row_keys], pa.int64()), "b": pa.array([r[1] for r in row_keys], pa.int64())})
    touched = pa.table({"a": pa.array([t[0] for t in touched_keys], pa.int64()),
                        "b": pa.array([t[1] for t in touched_keys], pa.int64())})
    assert key_mask(rows, touched, ["a", "b"]).to_pylist() == [r in set(touched_keys) for r in row_keys]


@pytest.mark.parametrize("type_", [pa.float32(), pa.float64()])
def test_minus_zero_and_zero_are_one_key_as_in_mysql_and_the_fold(type_):
    rows = pa.table({"id": pa.array([0.0, -0.0, 1.0], type_), "v": pa.array([0.0, 1.0, -0.0], type_)})
    assert key_mask(rows, pa.table({"id": pa.array([-0.0], type_)}), ["id"]).to_pylist() == [True, True, False]
    assert key_mask(rows, pa.table({"id": pa.array([0.0], type_)}), ["id"]).to_pylist() == [True, True, False]
    whole = pa.table({"id": pa.array([-0.0], type_), "v": pa.array([0.0], type_)})
    assert key_mask(rows, whole, ["id", "v"]).to_pylist() == [True, False, False]


def _pairs_by_python(row_keys, touched_keys):
    """(row, touched row) for every equal pair, NULL equal to NULL: sorted by touched row, then row."""
    pairs = sorted((t, r) for r, rk in enumerate(row_keys) for t, tk in enumerate(touched_keys) if rk == tk)
    return [r for _, r in pairs], [t for t, _ in pairs]


@settings(max_examples=200, deadline=None)
@given(st.lists(values, max_size=30), st.lists(values, max_size=30, unique=True), st.lists(values, max_size=30),
       st.sampled_from([pa.int64(), pa.string()]))
def test_key_matches_pairs_every_equal_key(row_keys, unique_touched, repeated_touched, type_):
    """One column with each touched key once (the lookup without a join), with repeated touched keys
    (the join), and two columns: the same pairs as comparing every row with every touched key."""
    def column(keys):
        return pa.array([None if k is None else (k if type_ == pa.int64() else f"k{k}") for k in keys], type_)
    rows = pa.table({"id": column(row_keys)})
    for touched_keys in (unique_touched, repeated_touched):
        row, hit = key_matches(rows, pa.table({"id": column(touched_keys)}), ["id"])
        assert (row.tolist(), hit.tolist()) == _pairs_by_python(row_keys, touched_keys)
    two = pa.table({"a": column(row_keys), "b": column(row_keys[::-1])})
    touched = [(k, k) for k in repeated_touched]
    row, hit = key_matches(two, pa.table({"a": column([t[0] for t in touched]), "b": column([t[1] for t in touched])}),
                           ["a", "b"])
    assert (row.tolist(), hit.tolist()) == _pairs_by_python(list(zip(row_keys, row_keys[::-1])), touched)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 40), st.lists(st.integers(0, 39), max_size=60))
def test_unmatched_is_the_rest_of_the_range(n, matched):
    matched = np.array([m for m in matched if m < n], np.int64)
    assert unmatched(n, matched).tolist() == np.setdiff1d(np.arange(n), matched).tolist()


int_types = st.sampled_from([(pa.int8(), -128, 127), (pa.int32(), -(2**31), 2**31 - 1), (pa.int64(), -(2**63), 2**63 - 1),
                             (pa.uint64(), 0, 2**64 - 1), (pa.uint16(), 0, 2**16 - 1)])


@settings(max_examples=300, deadline=None)
@given(int_types.flatmap(lambda t: st.tuples(
    st.just(t[0]), st.lists(st.integers(t[1], t[2]) | st.sampled_from([t[1], t[2], 0]), max_size=40),
    st.lists(st.none() | st.integers(t[1], t[2]) | st.sampled_from([t[1], t[2], 0]), max_size=20), st.booleans())))
def test_one_integer_key_column_sorted_or_not_matches_python_membership(case):
    """Sorted files take a binary search (``_ascending_integers``), others a hash lookup: both are membership."""
    type_, row_keys, touched_keys, ascending = case
    if ascending:
        row_keys = sorted(row_keys)  # runs of equal keys included
    rows = pa.table({"id": pa.array(row_keys, type_)})
    touched = pa.table({"id": pa.array(touched_keys, type_)})
    assert key_mask(rows, touched, ["id"]).to_pylist() == [k in set(touched_keys) for k in row_keys]


def test_a_sorted_integer_column_with_a_null_takes_the_hash_lookup_and_matches_nulls():
    rows = pa.table({"id": pa.array([None, 1, 2], pa.int64())})
    assert key_mask(rows, pa.table({"id": pa.array([None, 2], pa.int64())}), ["id"]).to_pylist() == [True, False, True]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.integers(0, 60), max_size=25).map(sorted), max_size=4), st.lists(st.integers(0, 60), max_size=10))
def test_ascending_unique_is_the_sorted_set_of_any_positions(runs, loose):
    """Delete files' positions: ascending runs (one file, or old and new ones) and any order at all."""
    positions = np.array([p for run in runs for p in run] + loose, dtype=np.int64)
    got = ascending_unique(positions)
    assert got.dtype == np.int64 and got.tolist() == sorted(set(positions.tolist()))
