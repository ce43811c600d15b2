"""What decoding a raw segment tells the driver, without its rows: the side output.

One JSON document per decoded segment, next to its change-log Parquet and written after it,
create-only: its presence means the segment is decoded. It holds what a run needs to compute
W (the segment's greatest mark, its DDL), the undecodable messages to quarantine, counts, and
the decoder state after the segment, from which the next segment is decoded.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import astuple, dataclass, field
from typing import Any, NotRequired, TypedDict

import orjson

from cdc_codecs import DdlChange, DecodeError, RawMessage, SourcePosition, TableSchema, TidelakeError, stored_type
from cdc_codecs.errors import ClaimCheckError, HandleKeyOnlyError, PendingSchemaError
from cdc_codecs.events import BinlogPosition
from spark.archive import records
from spark.archive.records import Count, CorruptArchiveFile, Int64, Partition
from spark.decode.clock import BinlogMark
from spark.archive.storage import Storage

# 2: the segment's table schemas by schema_id. 3: DDL, errors and schemas as plain JSON fields
# (2 held pickles, which reading would have run): docs/archive.md, "Side output".
FORMAT = 3


class SideOutputError(CorruptArchiveFile):
    """A side output cannot be read (unknown format, damaged)."""


# Its shape (docs/archive.md, "Side output"), checked before any field is used (spark.archive.records).
_Position = tuple[str, Partition, Count, Count]


class _Column(TypedDict):
    name: str
    type: str
    nullable: bool


class _TableSchema(TypedDict):
    database: str
    table: str
    version: Int64 | None
    key_columns: list[str]
    columns: list[_Column]


class _Binlog(TypedDict):
    file: str
    pos: Count
    row: Int64
    server: Count


class _Ddl(TypedDict):
    database: str
    table: str
    sql: str
    commit_ts: Count | None
    position: _Position
    ddl_type: str | None
    schema_before: _TableSchema | None
    schema_after: _TableSchema | None
    event_time_ms: Int64 | None
    binlog: _Binlog | None


class _Raw(TypedDict):
    key: str | None
    value: str | None
    position: _Position
    headers: list[tuple[str, str | None]]
    timestamp_ms: Int64 | None


class _Error(TypedDict):
    kind: str
    protocol: str
    position: _Position | None
    field: str | None
    reason: str
    raw: _Raw | None


class _State(TypedDict):
    schemas: list[_TableSchema]
    clock: Count
    binlog: tuple[Count, str, Count, Int64, Count] | None


class _Schema(TypedDict):
    key_columns: list[str]
    columns: list[tuple[str, str]] | None


class _SideOutput(TypedDict):
    format: int
    decoder: str
    topic: str
    partition: Partition
    start: Count
    end: Count
    messages: Count
    events: Count
    rows: Count
    mark: Count | None
    ddl: list[_Ddl]
    errors: list[_Error]
    state: _State
    schemas: dict[str, _Schema]
    runs: NotRequired[tuple[Count, Count, Count, Count, Int64] | None]


@dataclass(frozen=True)
class DecoderState:
    """What decoding a partition carries from one segment to the next.

    ``schemas``: the tables the stream announced so far (Simple BOOTSTRAP/DDL, Debezium
    ``tableChanges``); ``clock``: the derived clock of protocols without commitTs (0 with one);
    ``binlog``: the greatest binlog coordinates the partition showed, for protocols whose
    redeliveries are recognised by them (``DerivedClock``).
    """

    schemas: tuple[TableSchema, ...] = ()
    clock: int = 0
    binlog: BinlogMark | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"schemas": [s.to_dict() for s in self.schemas], "clock": self.clock,
                "binlog": list(self.binlog) if self.binlog is not None else None}

    @staticmethod
    def from_dict(doc: dict[str, Any]) -> DecoderState:
        binlog = doc.get("binlog")
        return DecoderState(tuple(TableSchema.from_dict(s) for s in doc["schemas"]), doc["clock"],
                            tuple(binlog) if binlog is not None else None)  # type: ignore[arg-type]


def _position(p: SourcePosition) -> list[Any]:
    return [p.topic, p.partition, p.offset, p.index]


def _binlog(b: BinlogPosition | None) -> dict[str, Any] | None:
    return None if b is None else {"file": b.file, "pos": b.pos, "row": b.row, "server": b.server}


def _schema(t: TableSchema | None) -> dict[str, Any] | None:
    return None if t is None else t.to_dict()


def _bytes(b: bytes | None) -> str | None:
    return None if b is None else base64.b64encode(b).decode("ascii")


def _unbytes(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text, validate=True)


def ddl_to_dict(d: DdlChange) -> dict[str, Any]:
    """A DDL as the side output keeps it: the statement and its facts, no Python objects."""
    return {"database": d.database, "table": d.table, "sql": d.sql, "commit_ts": d.commit_ts,
            "position": _position(d.position), "ddl_type": d.ddl_type, "schema_before": _schema(d.schema_before),
            "schema_after": _schema(d.schema_after), "event_time_ms": d.event_time_ms, "binlog": _binlog(d.binlog)}


def ddl_from_dict(doc: Mapping[str, Any]) -> DdlChange:
    binlog = doc["binlog"]
    return DdlChange(
        doc["database"], doc["table"], doc["sql"], doc["commit_ts"], SourcePosition(*doc["position"]), doc["ddl_type"],
        TableSchema.from_dict(doc["schema_before"]) if doc["schema_before"] is not None else None,
        TableSchema.from_dict(doc["schema_after"]) if doc["schema_after"] is not None else None,
        doc["event_time_ms"], BinlogPosition(**binlog) if binlog is not None else None)


# The kinds of undecodable message, by the name a side output records (an unknown name is refused).
_ERROR_KINDS: dict[str, type[DecodeError]] = {
    k.__name__: k for k in (DecodeError, HandleKeyOnlyError, ClaimCheckError, PendingSchemaError)}


def error_to_dict(e: DecodeError) -> dict[str, Any]:
    """An undecodable message: what was wrong (protocol, field, reason), where, and its raw bytes."""
    raw = e.raw
    return {"kind": type(e).__name__ if type(e).__name__ in _ERROR_KINDS else "DecodeError",
            "protocol": e.protocol, "position": _position(e.position) if e.position is not None else None,
            "field": e.field, "reason": e.reason,
            "raw": None if raw is None else {
                "key": _bytes(raw.key), "value": _bytes(raw.value), "position": _position(raw.position),
                "headers": [[k, _bytes(v)] for k, v in raw.headers], "timestamp_ms": raw.timestamp_ms}}


def error_from_dict(doc: Mapping[str, Any]) -> DecodeError:
    kind = _ERROR_KINDS[doc["kind"]]
    raw = doc["raw"]
    message = None if raw is None else RawMessage(
        _unbytes(raw["key"]), _unbytes(raw["value"]), SourcePosition(*raw["position"]),
        tuple((k, _unbytes(v)) for k, v in raw["headers"]), raw["timestamp_ms"])
    position = SourcePosition(*doc["position"]) if doc["position"] is not None else None
    return kind(doc["protocol"], position, doc["field"], doc["reason"], raw=message)


def _checked_schema(doc: Any) -> bytes:
    """``_schema_blob``, its column types read as the change log's rows will (``changelog.decode_schema``)."""
    blob = _schema_blob(doc)
    for _, text in doc["columns"] or ():
        stored_type(text)  # ColumnValueError (a TidelakeError) for a type no decoder writes
    return blob


def _schema_blob(doc: Any) -> bytes:
    """A schema of the side output, back to the bytes its ``schema_id`` digests."""
    if not isinstance(doc, dict) or set(doc) != {"key_columns", "columns"}:
        raise ValueError(f"a schema is an object of key_columns and columns, found {type(doc).__name__}")
    return orjson.dumps(doc)


@dataclass(frozen=True)
class SegmentRuns:
    """Where the segment's change-log rows start and end: (offset, commitTs) of its first row, of
    its last row, and the ``run`` of its last row. A run of the next segment that begins at its
    first row continues that one if the offsets touch and the commitTs is the same."""

    first_offset: int
    first_commit_ts: int
    last_offset: int
    last_commit_ts: int
    last_run: int


@dataclass(frozen=True)
class SideOutput:
    """One decoded segment, by counts and driver-sized facts.

    ``messages`` raw messages (undecodable ones included), ``events`` decoded events, ``rows``
    change-log rows written; ``mark`` the greatest partition watermark the segment proves (None
    if none); ``ddl`` its schema changes (commitTs as in the change log); ``errors`` its
    undecodable messages; ``state`` the decoder state after it; ``schemas`` the encoded table
    schemas (key columns, column types: ``changelog.encode_schema``) its change-log rows name by
    ``schema_id``; ``runs`` where its rows' runs start and end (None without rows).
    """

    topic: str
    partition: int
    start: int
    end: int
    decoder: str
    messages: int
    events: int
    rows: int
    mark: int | None
    ddl: tuple[DdlChange, ...]
    errors: tuple[DecodeError, ...]
    state: DecoderState
    schemas: Mapping[int, bytes] = field(default_factory=dict)
    runs: SegmentRuns | None = None

    def to_json(self) -> bytes:
        return orjson.dumps({
            "format": FORMAT, "decoder": self.decoder, "topic": self.topic, "partition": self.partition,
            "start": self.start, "end": self.end, "messages": self.messages, "events": self.events,
            "rows": self.rows, "mark": self.mark, "ddl": [ddl_to_dict(d) for d in self.ddl],
            "errors": [error_to_dict(e) for e in self.errors], "state": self.state.to_dict(),
            # Each schema as the JSON it is, so that it reads back to the same bytes (its digest
            # is the rows' schema_id).
            "schemas": {str(k): orjson.Fragment(v) for k, v in self.schemas.items()},
            "runs": None if self.runs is None else list(astuple(self.runs)),
        }, option=orjson.OPT_INDENT_2)

    @staticmethod
    def from_json(data: bytes, where: str = "side output") -> SideOutput:
        """Raises:
            SideOutputError: not a side output of a format this version reads.
        """
        doc = records.read_record(data, _SideOutput, where, "side output", SideOutputError)
        if doc["format"] != FORMAT:
            raise SideOutputError(f"{where}: expected format {FORMAT}, found {doc['format']!r}")
        if doc["start"] > doc["end"]:
            raise SideOutputError(f"{where}: damaged side output: its offsets end before they start")
        try:
            return SideOutput(
                doc["topic"], doc["partition"], doc["start"], doc["end"], doc["decoder"], doc["messages"],
                doc["events"], doc["rows"], doc["mark"], tuple(ddl_from_dict(d) for d in doc["ddl"]),
                tuple(error_from_dict(e) for e in doc["errors"]), DecoderState.from_dict(doc["state"]),
                {int(k): _checked_schema(v) for k, v in doc["schemas"].items()},
                SegmentRuns(*doc["runs"]) if doc.get("runs") is not None else None,
            )
        except (KeyError, TypeError, ValueError, binascii.Error, TidelakeError) as exc:  # a kind, a type, base64
            raise SideOutputError(f"{where}: damaged side output: {type(exc).__name__}: {exc}") from None


def read_side_output(storage: Storage, path: str) -> SideOutput:
    return SideOutput.from_json(storage.read(path), f"{storage.url}/{path}")
