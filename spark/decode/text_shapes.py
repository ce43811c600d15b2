"""Which values of an Arrow string array have the shape a fast case reads, byte by byte in numpy.

The column-wise decode (``spark.decode.batch``) takes a value only when its text has a shape whose
typed value it can spell without Python's conversion. A regular expression per value (Arrow's
``match_substring_regex``, RE2) costs ~35 ns a value, a tenth of the decode stage; here each
shape is a few numpy operations over all the values' bytes at once. Each function returns a
boolean per value, False for NULL; each shape is written as the regular expression it equals
(tests/spark/decode/test_text_shapes.py holds them equal, over generated texts).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

_MINUS, _DOT, _ZERO = ord("-"), ord("."), ord("0")
_WIDTH = 26  # 'YYYY-MM-DD HH:MM:SS.ffffff'
# Per byte position of a datetime: a digit (True) or the literal below.
_DATETIME_DIGIT = np.array([c == "d" for c in "dddd-dd-dd dd:dd:dd.dddddd"])
_DATETIME_LITERAL = np.frombuffer(b"0000-00-00 00:00:00.000000", np.uint8)
_DATETIME_TOP = np.where(_DATETIME_DIGIT, 9, 0).astype(np.uint8)  # a byte less the literal's, at most


def value_bytes(texts: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The values' UTF-8 bytes (a view of the array's data), and where each value starts and ends in
    them (n + 1 offsets, from 0)."""
    n = len(texts)
    buffers = texts.buffers()
    offsets = np.frombuffer(buffers[1], np.int32, n + 1, texts.offset * 4).astype(np.int64)
    data = np.frombuffer(buffers[2], np.uint8)[offsets[0]:offsets[-1]] if buffers[2] is not None \
        else np.zeros(0, np.uint8)
    return data, offsets - offsets[0]


def _at(data: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``data[index]``, 0 past its end (callers mask positions outside a value themselves)."""
    if not len(data):
        return np.zeros(index.shape, np.uint8)
    return np.where(index < len(data), data[np.minimum(index, len(data) - 1)], 0).astype(np.uint8)


def _digit(chars: np.ndarray) -> np.ndarray:
    return np.subtract(chars, _ZERO, dtype=np.uint8) <= 9  # bytes below '0' wrap past 9


def _non_digits(data: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The positions of the bytes that are not ASCII digits, and the value each is in."""
    position = np.flatnonzero(~_digit(data[offsets[0]:offsets[-1]])) + offsets[0]
    return position, np.searchsorted(offsets, position, side="right") - 1


def _running_count(data: np.ndarray, which: np.ndarray) -> np.ndarray:
    """How many bytes ``which`` holds before each position of ``data`` (len(data) + 1 counts)."""
    count = np.zeros(len(data) + 1, np.int32)
    np.cumsum(which, out=count[1:])
    return count


def _not_null(texts: pa.Array, good: np.ndarray) -> np.ndarray:
    if texts.null_count:
        good &= texts.is_valid().to_numpy(zero_copy_only=False)
    return good


def signed_integers(texts: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """``-?[0-9]{1,20}``, the whole text; and which values start with '-'."""
    data, offsets = value_bytes(texts)
    start, length = offsets[:-1], np.diff(offsets)
    negative = (length > 0) & (_at(data, start) == _MINUS)
    good = (length - negative >= 1) & (length - negative <= 20)
    position, row = _non_digits(data, offsets)
    sign = (data[position] == _MINUS) & (position == start[row])
    good[row[~sign]] = False
    return _not_null(texts, good), negative


def own_str_integers(texts: pa.Array) -> np.ndarray:
    """Which texts of ``signed_integers``' shape are ``str(int(text))``: no leading zero, no '-0' (the
    answer for other texts means nothing)."""
    data, offsets = value_bytes(texts)
    start, length = offsets[:-1], np.diff(offsets)
    c0, c1 = _at(data, start), _at(data, start + 1)
    return ~(((c0 == _ZERO) & (length > 1)) | ((c0 == _MINUS) & (c1 == _ZERO)))


def integers(texts: pa.Array) -> np.ndarray:
    """``-?[0-9]{1,20}``, the whole text."""
    return signed_integers(texts)[0]


def decimals(texts: pa.Array) -> np.ndarray:
    """``-?(0|[1-9][0-9]*)(\\.[0-9]+)?``, the whole text, and not ``-?0\\.0{6}.*`` (a decimal below
    10**-6, which Python's ``str(Decimal)`` writes in scientific notation)."""
    data, offsets = value_bytes(texts)
    start, end = offsets[:-1], offsets[1:]
    length = end - start
    negative = (length > 0) & (_at(data, start) == _MINUS)
    first = start + negative  # the first digit's position
    size = length - negative  # bytes from it on
    c0, c1 = _at(data, first), _at(data, first + 1)
    good = (size >= 1) & _digit(c0)
    good &= ~((c0 == _ZERO) & (size >= 2) & (c1 != _DOT))  # no leading zero
    small = (c0 == _ZERO) & (c1 == _DOT) & (size >= 8)
    if small.any():
        zeros = _at(data, first[:, None] + 2 + np.arange(6)) == _ZERO
        good &= ~(small & zeros.all(axis=1))
    # Then the bytes but digits are the sign and the points, and the points one at most: the point, if
    # any, is between digits (after the first digit, whose position is checked, and before the last byte,
    # a digit). Counted per value as the differences of running counts (every value has a point: a
    # search per point costs more, measured).
    others, points = _running_count(data, ~_digit(data)), _running_count(data, data == _DOT)
    point_count = points[end] - points[start]
    good &= _digit(_at(data, end - 1)) & (point_count <= 1) & (others[end] - others[start] == negative + point_count)
    return _not_null(texts, good)


def leading_bytes(texts: pa.Array, width: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``width`` bytes of each value as the rows of a matrix (0 past a value's end; its
    columns stop at the longest value), and the values' lengths. Values of one length are a view."""
    data, offsets = value_bytes(texts)
    length = np.diff(offsets)
    n = len(length)
    if n and 0 < length[0] <= width and (length == length[0]).all():
        return data[offsets[0]:offsets[-1]].reshape(n, int(length[0])), length
    w = min(width, int(length.max())) if n else 0
    chars = _at(data, offsets[:-1, None] + np.arange(w))
    chars[np.arange(w) >= length[:, None]] = 0
    return chars, length


def _fixed(chars: np.ndarray, length: np.ndarray, digit: np.ndarray, literal: np.ndarray, good: np.ndarray) -> np.ndarray:
    """``good`` (the lengths the shape takes) and, position by position, a digit where ``digit``
    says so and ``literal``'s byte elsewhere, up to each value's end."""
    w = chars.shape[1]
    wrong = np.where(digit[:w], ~_digit(chars), chars != literal[:w])
    if not (length == w).all():
        wrong &= np.arange(w) < length[:, None]
    return good & ~wrong.any(axis=1)


def datetime_shape(chars: np.ndarray, length: np.ndarray) -> np.ndarray:
    """``[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{1,6})?``, the whole text, of
    ``leading_bytes(texts, 26)`` (NULL's length 0 fails)."""
    return datetime_digits(chars, length)[0]


def datetime_digits(chars: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``datetime_shape``, and the values' digits by position: 26 rows, a position's digits contiguous
    (0 at a literal and past a value's end; garbage for a value not of the shape, which fails)."""
    n, w = chars.shape
    # A byte less the literal's (whose digits are '0'): a digit's value, 0 at a literal; else above the top.
    digits = np.subtract(chars, _DATETIME_LITERAL[:w], dtype=np.uint8)
    wrong = digits > _DATETIME_TOP[:w]
    if not (length == w).all():
        inside = np.arange(w) < length[:, None]
        wrong &= inside
        digits *= inside
    good = (length == 19) | ((length >= 21) & (length <= 26))
    if w:
        good[np.flatnonzero(wrong) // w] = False  # wrong bytes are few: a pass over them, not a reduce per row
    by_position = np.zeros((_WIDTH, n), np.uint8)
    by_position[:w] = digits.T
    return good, by_position


def date_shape(chars: np.ndarray, length: np.ndarray) -> np.ndarray:
    """``[0-9]{4}-[0-9]{2}-[0-9]{2}``, the whole text, of ``leading_bytes(texts, 10)``."""
    return _fixed(chars, length, _DATETIME_DIGIT, _DATETIME_LITERAL, length == 10)


def datetimes(texts: pa.Array) -> np.ndarray:
    return _not_null(texts, datetime_shape(*leading_bytes(texts, _WIDTH)))


def dates(texts: pa.Array) -> np.ndarray:
    return _not_null(texts, date_shape(*leading_bytes(texts, 10)))
