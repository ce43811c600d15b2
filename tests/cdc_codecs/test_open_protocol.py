from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cdc_codecs.open_protocol import go_quote, go_unquote, join_frames, split_frames
from cdc_codecs._fields import FieldError
from cdc_codecs.types import ColumnValueError


@given(st.binary(max_size=64))
def test_go_quote_round_trips_any_bytes(data: bytes) -> None:
    assert go_unquote(go_quote(data)) == data


def test_go_quote_matches_the_docs_example() -> None:
    # docs: {"t":15,"v":"\\x89PNG\\r\\n\\x1a\\n"} (JSON-escaped once more in the docs)
    assert go_unquote("\\x89PNG\\r\\n\\x1a\\n") == b"\x89PNG\r\n\x1a\n"
    assert go_quote(b"\x89PNG\r\n\x1a\n") == "\\x89PNG\\r\\n\\x1a\\n"
    assert go_unquote("caf\u00e9 \\u00e9") == "café é".encode()


def test_go_unquote_rejects_stray_backslash() -> None:
    with pytest.raises(ColumnValueError):
        go_unquote("abc\\q")


@given(st.lists(st.binary(max_size=40), max_size=8))
def test_frames_round_trip(parts: list[bytes]) -> None:
    assert split_frames(join_frames(parts, versioned=True), "key", versioned=True) == parts
    assert split_frames(join_frames(parts, versioned=False), "value", versioned=False) == parts


@given(st.binary(max_size=40))
def test_split_frames_never_fails_untyped(data: bytes) -> None:
    try:
        split_frames(data, "key", versioned=True)
    except FieldError:
        pass
