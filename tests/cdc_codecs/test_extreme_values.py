"""Every MySQL type at its extremes survives every protocol, exactly where the protocol can carry it.

A row of every column type ``tests/spark/mysql_values.py`` draws (the types of the model-based
histories' typed tables), keyed by each key type MySQL allows or without a key, is encoded and
decoded by every protocol: the decoded images must equal the upstream's, except where the
protocol's documentation says it cannot carry the value, and only there:

- TiCDC Canal-JSON without ``content-compatible`` and the Open protocol send an ENUM as its
  index and a SET as its bit mask (seeds: TiCDC Canal-JSON, "mysqlType"; Open protocol,
  "Column type code"): the decoder keeps the index for the table's DDL to name (README, Type
  mapping), so the decoded value must name the upstream's member by the column's members;
- TiCDC's Debezium protocol writes DECIMAL as float64 (seed: TiCDC Debezium Protocol, "For the
  Decimal data type ... TiCDC uses the float64 type"): the decoded value is the upstream's
  rounded to a double (the Debezium MySQL connector's default, ``decimal.handling.mode=precise``,
  carries it exactly);
- Aliyun DTS carries DATETIME, TIMESTAMP and TIME to the millisecond (its ``millis`` fields;
  README, Type mapping): the decoded value is the upstream's cut to milliseconds (a negative
  TIME towards the earlier one: its broken-down fields sum to the value, the hour signed).
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc_codecs import PROTOCOLS, DdlChange, Op, RowChange, SourcePosition, TableSchema
from cdc_codecs.events import Column
from cdc_codecs.types import EnumIndex, SetMask, TypeKind, parse_mysql_type
from spark.demo.workload import create_sql
from tests.spark.mysql_values import COLUMN_TYPES, KEY_COLUMNS, VALUE_COLUMNS, key_values, rows

from .test_roundtrip import reencode

VARIANTS = {"canal-json-without-tidb-extension": ("canal-json", {"enable_tidb_extension": "false"})}


def carried(protocol: str, column: str, value: Any) -> Any:
    """What ``protocol`` can carry of ``value`` (see the module docstring)."""
    ct = COLUMN_TYPES[column]
    if value is None:
        return None
    if protocol == "debezium" and ct.kind is TypeKind.DECIMAL:
        return Decimal(repr(float(value)))  # the float64's text, read exactly
    if protocol == "dts-avro":
        if isinstance(value, dt.datetime):
            return value.replace(microsecond=value.microsecond // 1000 * 1000)
        if isinstance(value, dt.timedelta):  # fields that sum to the value: hours signed, the rest not
            return dt.timedelta(milliseconds=value // dt.timedelta(milliseconds=1))
    return value


def decoded_as(column: str, value: Any) -> Any:
    """A decoded value as the upstream's: an ENUM index or SET mask named by the column's members."""
    ct = COLUMN_TYPES[column]
    if isinstance(value, EnumIndex):
        return ct.elements[int(value) - 1]  # type: ignore[index]
    if isinstance(value, SetMask):
        return ",".join(e for i, e in enumerate(ct.elements or ()) if int(value) >> i & 1)
    return value


def same(a: Any, b: Any) -> bool:
    """Equal and of one type; floats by their bits (-0.0 is not 0.0); decimals by value."""
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, float) and isinstance(b, float) and repr(float(a)) == repr(float(b))
    return a == b and (type(a) is type(b) or isinstance(a, Decimal) and isinstance(b, Decimal))


@pytest.mark.parametrize("name", sorted(PROTOCOLS) + sorted(VARIANTS))
@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(key=st.sampled_from([None] + [k for k, _ in KEY_COLUMNS]), data=st.data(),
       before=rows(VALUE_COLUMNS), after=rows(VALUE_COLUMNS))
def test_every_type_at_its_extremes_decodes_as_the_upstream_wrote_it(
        name: str, key: str | None, data: st.DataObject, before: dict, after: dict) -> None:
    protocol, options = VARIANTS.get(name, (name, {}))
    columns = (((key, dict(KEY_COLUMNS)[key]),) if key else ()) + VALUE_COLUMNS
    keys = (key,) if key else ()
    schema = TableSchema("db", "tbl", tuple(Column(n, parse_mysql_type(t), n not in keys) for n, t in columns), keys)
    at = data.draw(key_values(key), label="keys")[:2] if key else [None, None]
    b = {**({key: at[0]} if key else {}), **before}
    a = {**({key: at[1]} if key else {}), **after}
    types = schema.column_types
    events = [DdlChange("db", "tbl", create_sql(schema), 10 << 18, SourcePosition("g", 0, 0), "CREATE", None, schema,
                        1_700_000_000_000)]
    for i, (op, old, new) in enumerate([(Op.INSERT, None, b), (Op.UPDATE, b, a), (Op.DELETE, a, None)]):
        events.append(RowChange(op, "db", "tbl", old, new, keys, types, (11 + i) << 18, SourcePosition("g", 0, 1 + i),
                                1_700_000_000_001 + i))
    out = [e for e in reencode(protocol, events, **options) if isinstance(e, RowChange)]
    assert [e.op for e in out] == [Op.INSERT, Op.UPDATE, Op.DELETE]
    assert [e.key_columns for e in out] == [keys] * 3
    for sent, got in zip(events[1:], out):
        for image, decoded in ((sent.before, got.before), (sent.after, got.after)):
            if image is None:
                assert decoded is None
                continue
            for column, value in image.items():
                want, have = carried(name, column, value), decoded_as(column, (decoded or {}).get(column))
                assert same(want, have), (sent.op, column, value, have)
