"""What every ``tidelake`` command shares: its pipeline file and times as the user typed them,
and results written as an aligned table, JSON lines or CSV. Imports no command."""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import sys
from typing import Any

import orjson


def pipeline_config(args: argparse.Namespace) -> Any:
    from spark.config import load_pipeline_config

    return load_pipeline_config(args.config)


def instant(text: str, what: str) -> dt.datetime:
    from spark.config import parse_instant

    return parse_instant(text, what)


def write_result(table: Any, fmt: str, out: Any) -> None:
    """A query result as an aligned table, JSON lines or CSV (with a header)."""
    if fmt == "json":
        for row in table.to_pylist():
            out.write(orjson.dumps(row, default=json_value).decode() + "\n")
    elif fmt == "csv":
        import pyarrow.csv as pcsv

        out.flush()
        pcsv.write_csv(table, out.buffer)
        out.buffer.flush()
    else:
        print_table(table, out)


def json_value(value: Any) -> Any:
    """A value JSON has no type for, wherever it is (nested in lists and structs too): binary as
    base64 text (RFC 4648, padded), anything else as its text (a decimal keeps every digit)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(value).decode("ascii")
    return str(value)


def print_table(table: Any, out: Any = None) -> None:
    out = out or sys.stdout
    rows = table.to_pylist()
    cols = table.column_names
    cells = [[str(r[c]) for c in cols] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(cols)]
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths)), file=out)
    print("  ".join("-" * w for w in widths), file=out)
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)), file=out)
    print(f"({len(rows)} row{'s' if len(rows) != 1 else ''})", file=out)
