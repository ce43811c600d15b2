"""Whole-row converters for the text protocols, compiled once per schema.

Canal JSON, CloudCanal and Simple JSON send every value as text, so converting a row
is the bulk of decoding. Calling one ``text_converter`` per value spends more time in
Python calls and checks than in the C conversions themselves (``int``, ``Decimal``,
``datetime.fromisoformat``): ~460 ns per value against ~70. A ``RowConverter`` instead
generates one function per table schema that converts a row with the columns inlined.

The compiled path is only a shortcut: it handles the common well-formed strings with
the same C calls the per-column converter makes, and hands the row to the per-column
converters (``converters``) on anything else: another column set (Canal's ``old``
with only changed columns), a non-string value, a conversion error, a value out of
range. So its results are by construction the per-column results, which
tests/cdc_codecs/test_rowconv.py also checks on generated rows.

Column names are data: they reach the generated code only as values bound in its
namespace, never as source text.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any, Callable, Mapping, NamedTuple

from cdc_codecs.types import INTEGER_KINDS, UTC, ColumnType, Converter, TypeKind, binary_length, int_range, text_converter


class RowConverter(NamedTuple):
    """``convert(row)`` -> typed row; raises KeyError (unknown column) or ColumnValueError.

    ``converters`` are the per-column converters, for callers that name the bad column.
    """

    convert: Callable[[dict[str, Any]], dict[str, Any]]
    converters: dict[str, Converter]


# A zero date ('0000-00-00', '2024-00-10') never takes an inlined date path: with '-' at
# [4] and [7] the text is YYYY-MM-DD, where fromisoformat rejects year, month or day 0;
# anything else goes to the column's converter, which maps zero dates to None.
_DASHED = "type({x}) is str and {len} and {x}[4] == '-' and {x}[7] == '-'"


def _inline(ct: ColumnType, x: str, c: str, tz: dt.tzinfo) -> tuple[str, str | None] | None:
    """(expression for value ``x``, check on its result ``{y}`` or None), or None: call ``c``."""
    k = ct.kind
    if k is TypeKind.STRING or k is TypeKind.JSON:
        return f"{x} if {x} is None or type({x}) is str else {c}({x})", None
    if k in INTEGER_KINDS and k is not TypeKind.BIT:
        lo, hi = int_range(ct)
        return f"None if {x} is None else int({x}) if type({x}) is str else {c}({x})", f"({{y}} is None or {lo} <= {{y}} <= {hi})"
    if k is TypeKind.DECIMAL:
        return f"None if {x} is None else Decimal({x}) if type({x}) is str else {c}({x})", "({y} is None or {y}.is_finite())"
    if k is TypeKind.FLOAT or k is TypeKind.DOUBLE:
        return f"None if {x} is None else float({x}) if type({x}) is str else {c}({x})", None
    if k is TypeKind.TIMESTAMP:
        cond = _DASHED.format(x=x, len=f"len({x}) >= 19")
        return f"fromisoformat({x}) if {cond} else {c}({x})", None
    if k is TypeKind.TIMESTAMPTZ and tz is UTC:
        # Appending the offset lets fromisoformat build the aware value in one C call.
        cond = _DASHED.format(x=x, len=f"19 <= len({x}) <= 26")
        return f"fromisoformat({x} + '+00:00') if {cond} else {c}({x})", None
    if k is TypeKind.DATE:
        cond = _DASHED.format(x=x, len=f"len({x}) == 10")
        return f"date_fromisoformat({x}) if {cond} else {c}({x})", None
    if (n := binary_length(ct)) is not None:
        # A BINARY(n): padded as MySQL holds it (``stored_binary``), the binlog having dropped trailing zeros.
        return f"{x}.encode('latin-1').ljust({n}, b'\\0') if type({x}) is str else {c}({x})", None
    if k is TypeKind.BINARY or k is TypeKind.GEOMETRY:
        # Canal's bytes: one ISO-8859-1 character per byte (UnicodeEncodeError is a ValueError).
        return f"{x}.encode('latin-1') if type({x}) is str else {c}({x})", None
    return None


def row_converter(
    types: Mapping[str, ColumnType], tz: dt.tzinfo = UTC, overrides: Mapping[str, Converter] | None = None,
    *, compiled: bool = True,
) -> RowConverter:
    """A RowConverter for rows of ``types``, text values as ``text_converter`` reads them.

    ``overrides`` replaces the converter of some columns (a protocol's own encoding of a
    kind, e.g. Simple's base64 bytes); those columns are never inlined. Compiling costs
    ~0.8 ms, the time of ~300 rows: a caller that cannot cache the result (its cache is
    full) asks for ``compiled=False``, the per-column converters alone.
    """
    overrides = overrides or {}
    converters = {n: overrides.get(n) or text_converter(t, tz) for n, t in types.items()}

    def per_column(row: dict[str, Any]) -> dict[str, Any]:
        # Any row: the per-column converters convert it or raise the precise error.
        return {name: converters[name](value) for name, value in row.items()}

    if not types or not compiled:
        return RowConverter(per_column, converters)
    namespace: dict[str, Any] = {
        "Decimal": Decimal, "fromisoformat": dt.datetime.fromisoformat,
        "date_fromisoformat": dt.date.fromisoformat, "per_column": per_column,
    }
    reads, values, checks, items = [], [], [], []
    for i, (name, ct) in enumerate(types.items()):
        x, y, c, n = f"x{i}", f"y{i}", f"c{i}", f"n{i}"
        namespace[c], namespace[n] = converters[name], name
        reads.append(f"{x} = row[{n}]")
        inline = None if name in overrides else _inline(ct, x, c, tz)
        expression, check = inline or (f"{c}({x})", None)
        values.append(f"{y} = {expression}")
        if check:
            checks.append(check.format(y=y))
        items.append(f"{n}: {y}")
    body = "\n".join([
        "def convert(row):",
        f"    if len(row) == {len(types)}:",
        "        try:",
        *(f"            {r}" for r in reads),
        "        except KeyError:",
        "            pass",
        "        else:",
        "            try:",
        *(f"                {v}" for v in values),
        "            except (ValueError, ArithmeticError):",
        "                pass",
        "            else:",
        f"                if {' and '.join(checks) or 'True'}:",
        f"                    return {{{', '.join(items)}}}",
        "    return per_column(row)",
    ])
    exec(compile(body, f"<row converter for {len(types)} columns>", "exec"), namespace)
    return RowConverter(namespace["convert"], converters)
