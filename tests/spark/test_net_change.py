"""Canonical key bytes: equal keys give equal bytes, whichever path builds them."""

from __future__ import annotations

from decimal import Decimal

from hypothesis import given
from hypothesis import strategies as st

from spark.net_change import _joined, key_bytes


@given(st.integers())
def test_the_single_int_key_fast_path_gives_the_general_bytes(value: int) -> None:
    assert key_bytes((value,)) == _joined((value,)).encode("utf-8", "surrogatepass")


def test_numerically_equal_keys_share_bytes_and_others_do_not() -> None:
    assert key_bytes((1,)) == key_bytes((1.0,)) == key_bytes((Decimal("1.00"),)) == key_bytes((True,))
    assert len({key_bytes((1,)), key_bytes(("1",)), key_bytes((1, 2)), key_bytes((12,)), key_bytes((None,))}) == 5
