"""``arrow_table``'s whole-column paths give what the per-value path gives: the same value, or
``UnsupportedValue`` naming the column where a value does not fit (decimals Arrow would wrap
beyond 128 bits, integers and floats beyond their column's type)."""

from __future__ import annotations

import random
from decimal import Decimal
from typing import Any

import pytest
from pyiceberg.types import DecimalType

from cdc_codecs import parse_mysql_type
from spark.tables.schema_map import UnsupportedValue, arrow_table, iceberg_schema, to_iceberg_value

# ---------------------------------------------------------------- arrow_table fast paths


def _one_column(mysql_type: str, value: Any) -> list[dict]:
    schema = iceberg_schema([("c", parse_mysql_type(mysql_type))])
    return arrow_table(schema, [{"c": value}]).select(["c"]).to_pylist()


# Decimals that do not fit their column: the per-value path (``to_iceberg_value``) refuses each,
# but Arrow's own conversion (the fast path) returns a wrong number instead of raising once the
# value has more than 38 digits (int128 overflow while rescaling).
NOT_FITTING = [
    ("decimal(38,7)", "-8877175392922718003342865433460.03617068"),  # -> 1331295614705435900558372789493.0101730
    ("decimal(38,29)", "-68898835.9508820841740905307723121192912"),  # -> -842362.566694391...
    ("decimal(5,0)", "2.746855979717901512824602794461692101369"),  # -> 0
    ("decimal(10,2)", "1.00000000000000000000000000000000000000001"),  # -> 0.00
    ("decimal(20,3)", "0.529878881248010235124447136762747853630786"),  # -> 0.000
]


@pytest.mark.parametrize(("mysql_type", "text"), NOT_FITTING)
def test_a_decimal_arrow_wraps_is_refused_as_one_by_one(mysql_type: str, text: str) -> None:
    ct = parse_mysql_type(mysql_type)
    with pytest.raises(UnsupportedValue):  # the per-value rule: does not fit
        to_iceberg_value(DecimalType(ct.precision, ct.scale), Decimal(text))
    with pytest.raises(UnsupportedValue, match="does not fit"):
        got = _one_column(mysql_type, Decimal(text))
        pytest.fail(f"{text} in {mysql_type} became {got[0]['c']}")


def test_the_decimal_fast_path_agrees_with_the_per_value_path() -> None:
    """Random decimals of up to 45 digits: whenever Arrow takes a column whole, it holds what the
    per-value path would (and the per-value path accepts it)."""
    rng = random.Random(7)
    wrong = []
    for _ in range(3000):
        digits = rng.randint(1, 45)
        d = Decimal((rng.randint(0, 1), tuple(int(c) for c in str(rng.randrange(10 ** digits))), rng.randint(-45, 5)))
        p = rng.choice([5, 10, 20, 38])
        s = rng.randint(0, min(p, 30))
        try:
            slow = to_iceberg_value(DecimalType(p, s), d)
        except UnsupportedValue:
            slow = "refused"
        try:
            fast = _one_column(f"decimal({p},{s})", d)[0]["c"]
        except UnsupportedValue:
            fast = "refused"
        if fast != slow:
            wrong.append((str(d), p, s, str(fast), str(slow)))
    assert not wrong, f"{len(wrong)} decimals differ, e.g. {wrong[:3]}"


@pytest.mark.parametrize("value", [Decimal("-0"), Decimal("-0.000"), Decimal("1E+2"), Decimal("9.99E+2"), Decimal("0E-40"),
                                   Decimal("NaN"), Decimal("Infinity"), Decimal("-Infinity")])
def test_decimal_edge_values_match_the_per_value_path(value: Decimal) -> None:
    try:
        slow = to_iceberg_value(DecimalType(5, 2), value)
    except UnsupportedValue:
        with pytest.raises(UnsupportedValue):
            _one_column("decimal(5,2)", value)
        return
    assert _one_column("decimal(5,2)", value) == [{"c": slow}]


@pytest.mark.parametrize(("mysql_type", "value"), [("int", 2 ** 31), ("bigint", 2 ** 63), ("double", 2 ** 53 + 1)])
def test_a_value_beyond_its_column_type_is_unsupported_value_on_the_fast_path(mysql_type: str, value: int) -> None:
    """Arrow's own errors on a whole column become the per-value path's UnsupportedValue naming it."""
    with pytest.raises(UnsupportedValue, match=r"column 'c'"):
        _one_column(mysql_type, value)
