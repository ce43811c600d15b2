"""The benchmark table's rows: a pure function of (key, version), as change events or as Arrow columns.

A row's values derive from its key and a version (the batch that last wrote it), so a batch
can be generated without remembering earlier rows, and millions of rows can be seeded as
Arrow columns computed in bulk that equal what the change events would have written.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cdc_codecs import Column, DdlChange, Op, RowChange, SourcePosition, TableSchema
from cdc_codecs.types import parse_mysql_type
from spark.demo.workload import create_sql, tso

DATABASE = "bench"
COLUMNS = (("id", "bigint"), ("v", "int"), ("s", "varchar(48)"), ("amount", "decimal(12,2)"), ("updated_at", "datetime(6)"))
EPOCH = dt.datetime(2024, 1, 1)
START_MS = 1_700_000_000_000
POSITION = SourcePosition("generated", 0, 0)


def schema(table: str) -> TableSchema:
    return TableSchema(DATABASE, table, tuple(Column(n, parse_mysql_type(t), n != "id") for n, t in COLUMNS), ("id",))


def row(key: int, version: int) -> dict:
    return {"id": key, "v": (key * 7919 + version) % 1000, "s": f"row-{key}-{version}",
            "amount": Decimal((key * 31 + version) % 10**6).scaleb(-2),
            "updated_at": EPOCH + dt.timedelta(microseconds=key * 1000 + version)}


def arrow_rows(first: int, end: int, version: int) -> pa.Table:
    """Rows ``first..end-1`` at ``version`` as Arrow columns, equal to ``row(key, version)``."""
    keys = np.arange(first, end, dtype=np.int64)
    ids = pa.array(keys)
    text = pc.cast(ids, pa.string())
    return pa.table({
        "id": ids,
        "v": pa.array(((keys * 7919 + version) % 1000).astype(np.int32)),
        "s": pc.binary_join_element_wise(pa.scalar("row-"), text, pa.scalar(f"-{version}"), ""),
        "amount": pc.multiply(pa.array((keys * 31 + version) % 10**6).cast(pa.decimal128(19, 0)),
                              pa.scalar(Decimal("0.01"), pa.decimal128(3, 2))).cast(pa.decimal128(12, 2)),
        "updated_at": pa.array(np.datetime64(EPOCH, "us") + (keys * 1000 + version).astype("timedelta64[us]")),
    })


class Clock:
    """Increasing TiDB commit timestamps, one millisecond apart."""

    def __init__(self) -> None:
        self.ms = START_MS

    def tick(self) -> int:
        self.ms += 1
        return tso(self.ms)


def create(table: str, clock: Clock) -> DdlChange:
    s = schema(table)
    return DdlChange(DATABASE, table, create_sql(s), clock.tick(), POSITION, "CREATE", None, s, clock.ms)


def change(op: Op, table: str, key: int, version: int, clock: Clock) -> RowChange:
    types = schema(table).column_types
    before = row(key, 0) if op is not Op.INSERT else None
    after = row(key, version) if op is not Op.DELETE else None
    return RowChange(op, DATABASE, table, before, after, ("id",), types, clock.tick(), POSITION, clock.ms)
