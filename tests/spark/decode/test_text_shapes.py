"""The numpy shape checks equal their regular expressions, over generated texts."""

from __future__ import annotations

import re

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from spark.decode import text_shapes

# The shapes as regular expressions, matched against the whole text (Python's ``$`` also matches
# before a final newline: fullmatch does not).
SHAPES = {
    text_shapes.integers: (r"-?[0-9]{1,20}", None),
    text_shapes.decimals: (r"-?(0|[1-9][0-9]*)(\.[0-9]+)?", r"-?0\.0{6}.*"),
    text_shapes.datetimes: (r"[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?", None),
    text_shapes.dates: (r"[0-9]{4}-[0-9]{2}-[0-9]{2}", None),
}


def expected(shape: object, text: str | None) -> bool:
    accept, refuse = SHAPES[shape]  # type: ignore[index]
    if text is None or not re.fullmatch(accept, text, re.ASCII):
        return False
    return not (refuse and re.fullmatch(refuse, text, re.ASCII | re.DOTALL))


def near(template: str) -> st.SearchStrategy[str]:
    """Texts like ``template``: its characters, each kept, changed to one of the shapes' alphabet or
    another character, dropped or doubled; cut or lengthened."""
    alphabet = st.sampled_from("0123456789-.: 0\n+eé٣\x00")
    char = st.one_of(st.just(None), alphabet, st.characters())
    return st.lists(st.tuples(st.sampled_from(["keep", "keep", "keep", "change", "drop", "double"]), char),
                    min_size=len(template), max_size=len(template)).flatmap(
        lambda edits: st.tuples(st.just(edits), st.text(alphabet=alphabet, max_size=8))).map(
        lambda pair: _edit(template, *pair))


def _edit(template: str, edits: list[tuple[str, str | None]], tail: str) -> str:
    out = []
    for c, (how, other) in zip(template, edits):
        out.append({"keep": c, "change": other or c, "drop": "", "double": c + c}[how])
    return "".join(out) + tail[: len(tail) // 3]


TEMPLATES = ["0", "-12", "18446744073709551615", "-9223372036854775808", "0.5", "-0.000001", "0.0000001",
             "123.4500", "2024-01-01 00:00:00", "2024-01-01 00:00:00.123456", "2024-02-29", "9999-12-31 23:59:59.9"]


@given(st.lists(st.one_of(st.none(), st.sampled_from(TEMPLATES).flatmap(near), st.text(max_size=30)), max_size=40),
       st.integers(0, 3))
def test_each_shape_equals_its_regular_expression(texts: list[str | None], cut: int) -> None:
    array = pa.array(texts, pa.string())
    array = array.slice(min(cut, len(texts)))  # an array that starts inside its buffers, as slices do
    texts = texts[min(cut, len(texts)):]
    for shape in SHAPES:
        assert shape(array).tolist() == [expected(shape, t) for t in texts], shape.__name__


def test_the_edges_of_each_shape() -> None:
    cases = {
        text_shapes.integers: ["0", "-0", "-", "", "+1", "1-", "--1", "1" * 20, "1" * 21, "-" + "1" * 20, " 1", "1\n",
                               "١"],
        text_shapes.decimals: ["0", "-0", "0.", ".5", "00", "01", "0.5", "1.2.3", "10", "-0.0000001", "0.000000",
                               "0.0000010", "0.00000", "1.000000", "-", "-.5", "1e5", "5.", "0..5"],
        text_shapes.datetimes: ["2024-01-01 00:00:00", "2024-01-01 00:00:00.", "2024-01-01 00:00:00.1234567",
                                "2024-01-01T00:00:00", "2024-01-01 00:00:00.1", "2024-01-01 00:00:0", "",
                                "2024-01-01 00:00:00\n"],
        text_shapes.dates: ["2024-01-01", "2024-1-01", "2024-01-01 ", "20240101", "2024/01/01", "", "2024-01-0a"],
    }
    for shape, texts in cases.items():
        with_null = [*texts, None]
        assert shape(pa.array(with_null, pa.string())).tolist() == [expected(shape, t) for t in with_null], shape.__name__
    assert text_shapes.decimals(pa.array(["0", "0.5", "00"])).tolist() == [True, True, False]  # the reference itself


def test_an_array_without_values_or_bytes() -> None:
    for shape in SHAPES:
        assert shape(pa.array([], pa.string())).tolist() == []
        assert shape(pa.array([None, None], pa.string())).tolist() == [False, False]
        assert shape(pa.array(["", ""], pa.string())).tolist() == [False, False]


@given(st.lists(st.one_of(st.none(), st.from_regex(r"-?[0-9]{1,20}", fullmatch=True),
                          st.sampled_from(["0", "-0", "00", "-00", "07", "-07", "10", "-10", "1", "-1"])), max_size=40),
       st.integers(0, 3))
def test_own_str_integers_are_the_texts_str_int_gives_back(texts: list[str | None], cut: int) -> None:
    array = pa.array(texts, pa.string()).slice(min(cut, len(texts)))
    texts = texts[min(cut, len(texts)):]
    assert [bool(own) for own, t in zip(text_shapes.own_str_integers(array), texts) if t is not None] == \
        [str(int(t)) == t for t in texts if t is not None]
