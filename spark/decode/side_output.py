"""What decoding a raw segment tells the driver, without its rows: the side output.

One JSON document per decoded segment, next to its change-log Parquet and written after it,
create-only: its presence means the segment is decoded. It holds what a run needs to compute
W (the segment's greatest mark, its DDL), the undecodable messages to quarantine, counts, and
the decoder state after the segment, from which the next segment is decoded.
"""

from __future__ import annotations

import base64
import pickle
from collections.abc import Mapping
from dataclasses import astuple, dataclass, field
from typing import Any

import orjson

from cdc_codecs import DdlChange, DecodeError, TableSchema, TidelakeError
from spark.storage import Storage

FORMAT = 2  # 2: the segment's table schemas by schema_id


class SideOutputError(TidelakeError):
    """A side output cannot be read (unknown format, damaged)."""


@dataclass(frozen=True)
class SegmentRef:
    """A raw segment of the archive: its path and the offsets ``[start, end)`` it holds."""

    path: str
    start: int
    end: int


@dataclass(frozen=True)
class DecoderState:
    """What decoding a partition carries from one segment to the next.

    ``schemas``: the tables the stream announced so far (Simple BOOTSTRAP/DDL, Debezium
    ``tableChanges``); ``clock``: the derived clock of protocols without commitTs (0 with one).
    """

    schemas: tuple[TableSchema, ...] = ()
    clock: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"schemas": [s.to_dict() for s in self.schemas], "clock": self.clock}

    @staticmethod
    def from_dict(doc: dict[str, Any]) -> DecoderState:
        return DecoderState(tuple(TableSchema.from_dict(s) for s in doc["schemas"]), doc["clock"])


def _pickled(items: tuple[Any, ...]) -> list[str]:
    return [base64.b64encode(pickle.dumps(i, protocol=5)).decode("ascii") for i in items]


def _unpickled(items: list[str]) -> tuple[Any, ...]:
    return tuple(pickle.loads(base64.b64decode(i)) for i in items)


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
    undecodable messages; ``state`` the decoder state after it; ``schemas`` the pickled table
    schemas (key columns, column types) its change-log rows name by ``schema_id``; ``runs``
    where its rows' runs start and end (None without rows).
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
            "rows": self.rows, "mark": self.mark, "ddl": _pickled(self.ddl), "errors": _pickled(self.errors),
            "state": self.state.to_dict(),
            "schemas": {str(k): base64.b64encode(v).decode("ascii") for k, v in self.schemas.items()},
            "runs": None if self.runs is None else list(astuple(self.runs)),
        }, option=orjson.OPT_INDENT_2)

    @staticmethod
    def from_json(data: bytes, where: str = "side output") -> SideOutput:
        """Raises:
            SideOutputError: not a side output of a format this version reads.
        """
        try:
            doc = orjson.loads(data)
            if doc.get("format") != FORMAT:
                raise SideOutputError(f"{where}: expected format {FORMAT}, found {doc.get('format')!r}")
            return SideOutput(
                doc["topic"], doc["partition"], doc["start"], doc["end"], doc["decoder"], doc["messages"],
                doc["events"], doc["rows"], doc["mark"], _unpickled(doc["ddl"]), _unpickled(doc["errors"]),
                DecoderState.from_dict(doc["state"]), {int(k): base64.b64decode(v) for k, v in doc["schemas"].items()},
                SegmentRuns(*doc["runs"]) if doc.get("runs") is not None else None,
            )
        except SideOutputError:
            raise
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError, pickle.UnpicklingError) as exc:
            raise SideOutputError(f"{where}: damaged side output: {type(exc).__name__}: {exc}") from exc


def read_side_output(storage: Storage, path: str) -> SideOutput:
    return SideOutput.from_json(storage.read(path), f"{storage.url}/{path}")
