"""CloudCanal JSON, CloudCanal's default Kafka format.

Shape (vendor manual; no public encoder output exists)::

    {"action": "INSERT" | "UPDATE" | "DELETE" | DDL action, "bid", "db", "schema", "table",
     "data": [row...], "before": [row...], "dbValType": {col: "varchar(22)"},
     "jdbcType": {col: 12}, "entryType": "ROWDATA" | "TRANSACTIONEND",
     "isDdl" (or "ddl"): bool, "pks": [...], "execTs", "sendTs", "sql", "tableChanges"}

Several rows per message; ``before[i]`` is the old image of ``data[i]`` for updates
(overlaid on ``data[i]``, as it may hold only changed columns). Values are strings,
typed by ``dbValType`` exactly like Canal's ``mysqlType``. There is no commit
timestamp: rows are ordered by offset, and ``execTs`` is the event time.
CloudCanal's Canal JSON and Debezium Envelope variants are decoded by the
``canal-json`` and ``debezium`` decoders.
"""

from __future__ import annotations

from typing import Any, ClassVar, Iterable, Mapping

from cdc_codecs import _fields as f
from cdc_codecs._base import TIMEZONE_OPTION, Decoder, Encoder, Option, dumps, loads
from cdc_codecs._fields import FieldError
from cdc_codecs.canal_json import CanalFlatDecoder, _table_changes_schema, java_sql_type
from cdc_codecs.events import DdlChange, Event, Op, RawMessage, RowChange
from cdc_codecs.types import ColumnType, to_text

_OPS = {"INSERT": Op.INSERT, "UPDATE": Op.UPDATE, "DELETE": Op.DELETE}


class CloudCanalJsonDecoder(Decoder):
    protocol: ClassVar[str] = "cloudcanal-json"
    options_spec: ClassVar[dict[str, Option]] = {"timezone": TIMEZONE_OPTION}

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        # Value typing is Canal's: reuse its cached converters.
        self._canal = CanalFlatDecoder(timezone=self.options["timezone"])

    def _decode(self, msg: RawMessage) -> Iterable[Event]:
        doc = f.as_object(loads(msg.value), "value")
        if f.optional(doc, "entryType", str, default="ROWDATA") != "ROWDATA":
            return []  # TRANSACTIONEND and other markers carry no change
        action = f.require(doc, "action", str)
        is_ddl = f.optional(doc, "isDdl", bool, default=None)
        if is_ddl is None:
            is_ddl = bool(f.optional(doc, "ddl", bool, default=False))
        database = f.optional(doc, "db", str) or f.optional(doc, "schema", str, default="")
        table = f.optional(doc, "table", str, default="")
        event_time = f.optional(doc, "execTs", int)
        if is_ddl:
            return [
                DdlChange(
                    database, table, f.require(doc, "sql", str, when="the message is a DDL"), None, msg.position,
                    ddl_type=action, schema_after=_table_changes_schema(doc.get("tableChanges"), database, table),
                    event_time_ms=event_time,
                )
            ]
        op = _OPS.get(action)
        if op is None:
            raise FieldError("action", f"expected INSERT, UPDATE or DELETE, found {action!r}")
        data = f.optional(doc, "data", list, default=[])
        before = f.optional(doc, "before", list, default=[])
        rows = data if data or op is not Op.DELETE else before
        if not rows:
            raise FieldError("data", f"empty when 'action' is '{action}'")
        if op is Op.UPDATE and len(before) != len(data):
            raise FieldError("before", f"has {len(before)} rows but data has {len(data)} when 'action' is 'UPDATE'")
        schema = self._canal._schema(database, table, f.require(doc, "dbValType", dict))
        return self._canal.row_events(
            op, database, table, rows, before, f.string_list(doc, "pks"), schema, None, event_time, msg.position, 0,
            ("data", "before"),
        )


class CloudCanalJsonEncoder(Encoder):
    """Writes CloudCanal JSON, grouping consecutive rows of one table and operation."""

    protocol: ClassVar[str] = "cloudcanal-json"
    options_spec: ClassVar[dict[str, Option]] = {
        "timezone": TIMEZONE_OPTION,
        "rows_per_message": Option(int, 4, "rows per message (CloudCanal batches a transaction's rows)"),
    }

    def _doc(self, rows: list[RowChange]) -> dict[str, Any]:
        first = rows[0]
        types: Mapping[str, ColumnType] = first.column_types or {}
        tz = self.options["timezone"]

        def text(row: Mapping[str, Any] | None) -> dict[str, Any]:
            return {n: to_text(types[n], v, tz) for n, v in (row or {}).items()}

        return {
            "action": first.op.name,
            "before": [text(r.before) for r in rows] if first.op is Op.UPDATE else [],
            "bid": 0,
            "data": [text(r.after if r.op is not Op.DELETE else r.before) for r in rows],
            "db": first.database,
            "schema": first.database,
            "table": first.table,
            "dbValType": {n: str(t) for n, t in types.items()},
            "jdbcType": {n: java_sql_type(t) for n, t in types.items()},
            "entryType": "ROWDATA",
            "isDdl": False,
            "pks": list(first.key_columns),
            "execTs": first.event_time_ms or 0,
            "sendTs": first.event_time_ms or 0,
            "sql": "",
        }

    def encode_row(self, event: RowChange) -> tuple[bytes | None, bytes | None]:
        return None, dumps(self._doc([event]))

    def encode_ddl(self, event: DdlChange) -> tuple[bytes | None, bytes | None]:
        doc: dict[str, Any] = {
            "action": event.ddl_type or "QUERY", "before": [], "bid": 0, "data": [], "db": event.database,
            "schema": event.database, "table": event.table, "dbValType": {}, "jdbcType": {},
            "entryType": "ROWDATA", "isDdl": True, "pks": [], "execTs": event.event_time_ms or 0,
            "sendTs": event.event_time_ms or 0, "sql": event.sql,
        }
        if event.schema_after is not None:
            s = event.schema_after
            doc["tableChanges"] = {
                "type": event.ddl_type or "ALTER",
                "table": {
                    "columns": [
                        {"jdbcType": java_sql_type(c.type), "name": c.name, "position": i,
                         "typeExpression": str(c.type), "typeName": c.type.mysql_type, "optional": c.nullable}
                        for i, c in enumerate(s.columns)
                    ],
                    "primaryKeyColumnNames": list(s.key_columns),
                },
            }
        return None, dumps(doc)

    def encode_rows(self, rows: list[RowChange]) -> tuple[bytes | None, bytes | None]:
        return None, dumps(self._doc(rows))
