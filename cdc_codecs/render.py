"""Events as JSON documents, for people and for the command line."""

from __future__ import annotations

import base64
import datetime as dt
from decimal import Decimal
from typing import Any, Mapping

import orjson

from cdc_codecs.events import DdlChange, Event, RowChange, SchemaSnapshot, TableSchema, Watermark
from cdc_codecs.types import format_time


def _value(v: Any) -> Any:
    if isinstance(v, Decimal):
        return str(v)
    if isinstance(v, (bytes, bytearray)):
        return {"base64": base64.b64encode(v).decode("ascii")}
    if isinstance(v, dt.timedelta):
        return format_time(v)
    return v


def _row(row: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return None if row is None else {k: _value(v) for k, v in row.items()}


def _schema(s: TableSchema | None) -> dict[str, Any] | None:
    if s is None:
        return None
    return {
        "database": s.database,
        "table": s.table,
        "version": s.version,
        "key_columns": list(s.key_columns),
        "columns": [{"name": c.name, "type": str(c.type), "nullable": c.nullable} for c in s.columns],
    }


def event_to_dict(event: Event) -> dict[str, Any]:
    doc: dict[str, Any]
    if isinstance(event, RowChange):
        doc = {
            "event": "row",
            "op": event.op.value,
            "database": event.database,
            "table": event.table,
            "commit_ts": event.commit_ts,
            "key_columns": list(event.key_columns),
            "before": _row(event.before),
            "after": _row(event.after),
            "types": {k: str(t) for k, t in (event.column_types or {}).items()},
        }
        if event.partial_before:
            doc["partial_before"] = True
        if event.physical_table_id is not None:
            doc["physical_table_id"] = event.physical_table_id
    elif isinstance(event, DdlChange):
        doc = {
            "event": "ddl",
            "database": event.database,
            "table": event.table,
            "commit_ts": event.commit_ts,
            "ddl_type": event.ddl_type,
            "sql": event.sql,
            "schema_before": _schema(event.schema_before),
            "schema_after": _schema(event.schema_after),
        }
    elif isinstance(event, Watermark):
        doc = {"event": "watermark", "ts": event.ts, "clock": event.clock.value}
    elif isinstance(event, SchemaSnapshot):
        doc = {"event": "schema", "schema": _schema(event.schema)}
    else:  # pragma: no cover - the Event union is closed
        raise TypeError(f"not an event: {event!r}")
    binlog = getattr(event, "binlog", None)
    if binlog is not None:
        doc["binlog"] = {"file": binlog.file, "pos": binlog.pos, "row": binlog.row}
    time_ms = getattr(event, "event_time_ms", None)
    if time_ms is not None:
        doc["event_time_ms"] = time_ms
    doc["position"] = str(event.position)
    return doc


def event_to_json(event: Event) -> bytes:
    return orjson.dumps(event_to_dict(event))
