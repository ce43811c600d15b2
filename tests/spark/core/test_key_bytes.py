"""Canonical key bytes: equal keys give equal bytes, whichever path builds them."""

from __future__ import annotations

from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from spark.core.keys import _joined, key_bytes


@given(st.integers())
def test_the_single_int_key_fast_path_gives_the_general_bytes(value: int) -> None:
    assert key_bytes((value,)) == _joined((value,)).encode("utf-8", "surrogatepass")


def test_numerically_equal_keys_share_bytes_and_others_do_not() -> None:
    assert key_bytes((1,)) == key_bytes((1.0,)) == key_bytes((Decimal("1.00"),)) == key_bytes((True,))
    assert len({key_bytes((1,)), key_bytes(("1",)), key_bytes((1, 2)), key_bytes((12,)), key_bytes((None,))}) == 5


WIDE = st.decimals(allow_nan=False, allow_infinity=False, places=30) | st.decimals(allow_nan=False, allow_infinity=False)


@given(WIDE, WIDE)
def test_decimal_keys_share_bytes_exactly_when_they_are_equal_whatever_their_digits(a: Decimal, b: Decimal) -> None:
    assert (key_bytes((a,)) == key_bytes((b,))) == (a == b)


@given(st.integers(min_value=0, max_value=10**35 - 1), st.integers(min_value=1, max_value=9), st.integers(1, 5))
def test_decimal_keys_differing_past_the_28th_digit_stay_apart_and_trailing_zeros_do_not_count(
        whole: int, last: int, zeros: int) -> None:
    # DECIMAL(65,30): 35 digits before the point, 30 after.
    base = f"{whole}.{'1' * 28}"
    a, b = Decimal(f"{base}{last}"), Decimal(f"{base}{last - 1}")
    assert key_bytes((a,)) != key_bytes((b,))
    assert key_bytes((a,)) == key_bytes((Decimal(f"{base}{last}{'0' * zeros}"),))


def test_the_two_keys_that_folded_as_one_are_two() -> None:
    # Found by a review: equal in their first 28 digits, so normalize() made them one key.
    a, b = Decimal("12345678901234567890123456.7890123451"), Decimal("12345678901234567890123456.7890123452")
    assert key_bytes((a,)) != key_bytes((b,))
    assert key_bytes((Decimal("-0.0"),)) == key_bytes((0,)) and key_bytes((Decimal("1E-40"),)) != key_bytes((0,))
