"""Field access for decoded JSON/Avro documents that fails with the field's path.

Helpers raise ``FieldError``; ``Decoder.decode`` turns it into a ``DecodeError`` that
names the protocol and the message position, so helpers stay free of context.
"""

from __future__ import annotations

from typing import Any, Mapping

from cdc_codecs.types import ColumnValueError

_MISSING = object()


class FieldError(Exception):
    """A field is missing or mistyped. ``index`` is the event index within the message."""

    def __init__(self, field: str | None, reason: str, index: int = 0) -> None:
        super().__init__(f"{field}: {reason}" if field else reason)
        self.field = field
        self.reason = reason
        self.index = index


_TYPE_NAMES = {
    dict: "an object",
    list: "an array",
    str: "a string",
    int: "an integer",
    bool: "a boolean",
    float: "a number",
}


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    for t, name in _TYPE_NAMES.items():
        if type(value) is t:
            return name
    return type(value).__name__


def require(doc: Mapping[str, Any], key: str, expected: type | tuple[type, ...], path: str = "", *, nullable: bool = False, when: str = "") -> Any:
    """``doc[key]``, which must exist and be of ``expected`` type (or None if ``nullable``)."""
    value = doc.get(key, _MISSING)
    if type(value) is expected:  # the hot path: exact JSON types, no bool-for-int confusion
        return value
    return _checked(doc, key, value, expected, path, nullable, when)


def optional(doc: Mapping[str, Any], key: str, expected: type | tuple[type, ...], path: str = "", default: Any = None) -> Any:
    """``doc[key]`` if present and not null, else ``default``; mistyped values still fail."""
    value = doc.get(key)
    if value is None:
        return default
    if type(value) is expected or _isinstance(value, expected):
        return value
    raise FieldError(f"{path}{key}", f"expected {_expected(expected)}, found {_kind(value)} {_short(value)}")


def _checked(doc: Any, key: str, value: Any, expected: type | tuple[type, ...], path: str, nullable: bool, when: str) -> Any:
    field = f"{path}{key}"
    suffix = f" when {when}" if when else ""
    if value is _MISSING:
        raise FieldError(field, f"missing{suffix}")
    if value is None:
        if nullable:
            return None
        raise FieldError(field, f"expected {_expected(expected)}, found null{suffix}")
    if not _isinstance(value, expected):
        raise FieldError(field, f"expected {_expected(expected)}, found {_kind(value)} {_short(value)}")
    return value


# A TiDB TSO is physical milliseconds << 18 | logical: it fits 63 bits for the next ~278,000 years.
TSO_END = 1 << 63


def tso(value: int | None, field: str) -> int | None:
    """A decoded TSO (commitTs, a watermark's ts): the change log and every consumer hold one in 64
    signed bits, so a negative one or one past 2^63 - 1 is bad input, named here, not an overflow later."""
    if value is not None and not 0 <= value < TSO_END:
        raise FieldError(field, f"TSO {value} is {'negative' if value < 0 else 'past 2^63 - 1'} "
                                "(physical milliseconds << 18 | logical)")
    return value


def as_object(value: Any, field: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise FieldError(field, f"expected an object, found {_kind(value)} {_short(value)}")
    return value


def _isinstance(value: Any, expected: type | tuple[type, ...]) -> bool:
    types = expected if isinstance(expected, tuple) else (expected,)
    if isinstance(value, bool):
        return bool in types
    if int in types and float not in types and isinstance(value, float):
        return False
    return isinstance(value, types)


def _expected(expected: type | tuple[type, ...]) -> str:
    types = expected if isinstance(expected, tuple) else (expected,)
    return " or ".join(_TYPE_NAMES.get(t, t.__name__) for t in types)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def convert(column: str, fn: Any, *args: Any, path: str = "", index: int = 0) -> Any:
    """Run a value conversion, re-raising a type/range problem as the column's FieldError."""
    try:
        return fn(*args)
    except ColumnValueError as exc:
        raise FieldError(f"{path}{column}", str(exc), index) from exc


def string_list(doc: Mapping[str, Any], key: str, path: str = "") -> tuple[str, ...]:
    """An optional array of strings (column names), as a tuple."""
    items = optional(doc, key, list, path, [])
    if not all(type(i) is str for i in items):
        raise FieldError(f"{path}{key}", f"expected an array of strings, found {_short(items)}")
    return tuple(items)
