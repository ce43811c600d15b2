"""The change column's encoding gives back every value a decoder yields: equal, and of the same type."""

from __future__ import annotations

import datetime as dt
import math
import zoneinfo
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cdc_codecs import Op
from cdc_codecs.types import EnumIndex, SetMask
from spark.decode.effect import CorruptChangeValue, UnsupportedChangeValue, decode_effect, encode_effect, image_encoder

from ..mysql_values import COLUMN_TYPES, values

VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.text(), st.binary(),
    st.decimals(), st.datetimes(allow_imaginary=False).map(lambda v: v.replace(fold=0)),
    st.datetimes(timezones=st.just(dt.UTC)).map(lambda v: v.replace(fold=0)), st.dates(), st.times().map(lambda v: v.replace(fold=0)), st.timedeltas(),
    st.lists(st.integers(), max_size=3), st.builds(EnumIndex, st.text(max_size=3)), st.builds(SetMask, st.text(max_size=3)),
)


def _same(a: object, b: object) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)  # type: ignore[arg-type]
    if isinstance(a, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)  # type: ignore[arg-type]
    if isinstance(a, Decimal):  # exponent and sign too: Decimal("1.20") stays 1.20, NaN stays NaN
        return a.as_tuple() == b.as_tuple()  # type: ignore[union-attr]
    if isinstance(a, (dt.datetime, dt.time)):
        return a == b and a.tzinfo == b.tzinfo and a.fold == b.fold  # type: ignore[union-attr]
    return a == b


@given(st.dictionaries(st.text(max_size=8), VALUES, max_size=8), st.sampled_from(list(Op)))
def test_every_value_comes_back_equal_and_of_its_type(image: dict, op: Op) -> None:
    got_op, got = decode_effect(encode_effect(op, image))
    assert got_op is op and list(got) == list(image)
    assert all(_same(image[k], got[k]) for k in image), (image, got)


@pytest.mark.parametrize("value", [
    2**64, -(2**63) - 1, 2**64 - 1, -(2**63), 10**40, Decimal("-0"), Decimal("1.2E+5"), Decimal("NaN"),
    Decimal("-Infinity"), -0.0, float("nan"), dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC),
    dt.timedelta(hours=-838, minutes=-59, seconds=-59), dt.timedelta(hours=838, minutes=59, seconds=59, microseconds=999999),
    [1, [2**64, "a"], Decimal("1.50")], EnumIndex("2"), SetMask("5"),
])
def test_edge_values_come_back_exactly(value: object) -> None:
    _, got = decode_effect(encode_effect(Op.UPDATE, {"c": value}))
    assert _same(value, got["c"]) and (not isinstance(value, list) or got["c"] == value)


def test_a_datetime_in_another_zone_comes_back_at_the_same_instant_and_offset() -> None:
    value = dt.datetime(2024, 1, 1, 12, 30, tzinfo=zoneinfo.ZoneInfo("Asia/Shanghai"))
    _, got = decode_effect(encode_effect(Op.UPDATE, {"c": value}))
    assert got["c"] == value and got["c"].utcoffset() == dt.timedelta(hours=8)


@pytest.mark.parametrize("value", [(1, "a"), {"nested": [1, 2]}, dt.time(1, 2, tzinfo=dt.UTC), object()])
def test_a_value_no_decoder_yields_is_refused_not_pickled(value: object) -> None:
    with pytest.raises(UnsupportedChangeValue, match="has no documented encoding"):
        encode_effect(Op.INSERT, {"c": value})


def test_a_pickle_in_a_change_is_refused_and_never_run() -> None:
    import pickle

    import msgspec

    class Boom:
        def __reduce__(self):  # noqa: ANN204
            return (exec, ("raise SystemExit('the pickle ran')",))

    planted = msgspec.msgpack.encode(["insert", {"c": msgspec.msgpack.Ext(6, pickle.dumps(Boom()))}])
    with pytest.raises(CorruptChangeValue, match="never unpickled"):
        decode_effect(planted)
    with pytest.raises(CorruptChangeValue, match="unknown MessagePack extension 99"):
        decode_effect(msgspec.msgpack.encode(["insert", {"c": msgspec.msgpack.Ext(99, b"")}]))
    with pytest.raises(CorruptChangeValue, match="not a change-log change"):
        decode_effect(b"\xc1")


@pytest.mark.parametrize("op", list(Op))
def test_the_operation_is_stored_as_its_value_the_bytes_change_log_format_3_holds(op: Op) -> None:
    # Change logs already written hold the op as its MessagePack string: an encoder change that
    # altered these bytes would need a new CHANGE_LOG_FORMAT.
    import msgspec

    assert encode_effect(op, {"id": 1}) == msgspec.msgpack.encode([op.value, {"id": 1}])


_COLUMNS = sorted(COLUMN_TYPES)


@st.composite
def _typed_images(draw: st.DrawFn) -> tuple[dict, dict]:
    """(column types, an image of them): each column's own values or NULL, now and then a value of
    any other type, and now and then the columns dropped or reordered (a key image, Canal's ``old``)."""
    names = draw(st.lists(st.sampled_from(_COLUMNS), min_size=1, max_size=10, unique=True))
    types = {n: COLUMN_TYPES[n] for n in names}
    image = {n: draw(st.one_of(st.none(), values(n), VALUES) if draw(st.integers(0, 9)) == 0 else st.one_of(st.none(), values(n)))
             for n in names}
    shape = draw(st.integers(0, 9))
    if shape == 0:
        image = dict(reversed(list(image.items())))
    elif shape == 1:
        image = dict(list(image.items())[: draw(st.integers(0, len(image)))])
    return types, image


@given(_typed_images(), st.sampled_from(list(Op)))
def test_the_compiled_image_encoder_writes_the_bytes_encode_effect_writes(typed: tuple[dict, dict], op: Op) -> None:
    """The writer encodes images with ``image_encoder`` (compiled per schema): the change log's
    bytes must be those of ``encode_effect``, whatever the values, the columns or their order."""
    types, image = typed
    assert image_encoder(types)(op, image) == encode_effect(op, image)


def test_the_compiled_image_encoder_falls_back_for_ints_beyond_64_bits_and_refuses_what_encode_effect_refuses() -> None:
    types = {"a": COLUMN_TYPES["c_bigint_u"], "b": COLUMN_TYPES["c_decimal_10_0"]}
    image = {"a": 2**64, "b": Decimal("1.50")}
    assert image_encoder(types)(Op.INSERT, image) == encode_effect(Op.INSERT, image)
    assert decode_effect(image_encoder(types)(Op.INSERT, image))[1] == image
    with pytest.raises(UnsupportedChangeValue):
        image_encoder(types)(Op.INSERT, {"a": object(), "b": None})
    assert image_encoder({}) is encode_effect
