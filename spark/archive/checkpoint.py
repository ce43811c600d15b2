"""Checkpoints: what an applied interval leaves for the next one (``checkpoints/<interval>.json``).

Derived and deterministic: W, each partition's watermark, each partition's *pending offset* (the
first offset holding a change not applied yet) and the raw segments the next run reads. The run
of the next interval (``spark.commit.apply``) and the change feed's window over it
(``spark.fold.window``) read it the same way.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import orjson

from spark.archive import layout, records
from spark.archive.manifest import SegmentRef, chain_index, list_manifests, read_manifest
from spark.archive.storage import Storage

PKey = tuple[str, int]


def _ptext(key: PKey) -> str:
    return f"{key[0]}/{key[1]}"


@dataclass(frozen=True)
class Checkpoint:
    """Derived, deterministic state after an interval: W, partition watermarks, pending offsets."""

    interval_start: dt.datetime
    interval_end: dt.datetime
    watermark: int
    marks: dict[PKey, int]
    pending: dict[PKey, int]
    # DDL applied from topics without commitTs, by (event time, database, table, SQL): such a
    # DDL sent to every partition gets a different derived commitTs on each, so its later
    # copies are recognised by this, in whatever run they come.
    ddl_applied: tuple[tuple[Any, ...], ...] = ()
    # Per partition, the raw segments the next run may read: those holding offsets from the
    # pending one on, after the last segment wholly before it (whose side output holds the
    # decoder state to resume from). The next run reads these and its own manifest, never the
    # whole history (None: a checkpoint written before this was kept).
    segments: dict[PKey, tuple[SegmentRef, ...]] | None = None

    def to_json(self) -> bytes:
        return orjson.dumps({
            "interval": {"start": self.interval_start.isoformat(), "end": self.interval_end.isoformat()},
            "watermark": self.watermark,
            "marks": {_ptext(k): v for k, v in sorted(self.marks.items())},
            "pending": {_ptext(k): v for k, v in sorted(self.pending.items())},
            "ddl_applied": [list(i) for i in self.ddl_applied],
            **({"segments": {_ptext(k): [[r.path, r.start, r.end] for r in v] for k, v in sorted(self.segments.items())}}
               if self.segments is not None else {}),
        }, option=orjson.OPT_INDENT_2)

    @staticmethod
    def from_json(data: bytes, where: str = "checkpoint") -> Checkpoint:
        """Raises: records.CorruptCheckpoint, naming ``where`` (checked against the documented shape first)."""
        doc = records.checkpoint(data, where)
        segments = doc["segments"]
        return Checkpoint(
            doc["interval_start"], doc["interval_end"], doc["watermark"], doc["marks"], doc["pending"], doc["ddl_applied"],
            {k: tuple(SegmentRef(*r) for r in v) for k, v in segments.items()} if segments is not None else None,
        )


def checkpoint_path(pipeline: str, start: dt.datetime, end: dt.datetime) -> str:
    return f"{layout.pipeline_root(pipeline)}/checkpoints/{layout.instant(start)}_{layout.instant(end)}.json"


def read_checkpoint(storage: Storage, pipeline: str, start: dt.datetime, end: dt.datetime) -> Checkpoint | None:
    """The interval's checkpoint, None if no run applied it."""
    path = checkpoint_path(pipeline, start, end)
    return Checkpoint.from_json(storage.read(path), f"{storage.url}/{path}") if storage.exists(path) else None


def applied_from(storage: Storage, pipeline: str, chain: list[tuple[dt.datetime, dt.datetime, str]], target: int) -> bool:
    """Whether a run applied the chain's interval ``target`` or any after it (its checkpoint is there):
    if not, the interval has work ahead and nothing can confirm it done."""
    return any(storage.exists(checkpoint_path(pipeline, s, e)) for s, e, _ in chain[target:])


def unapplied_messages(storage: Storage, pipeline: str, start: dt.datetime, end: dt.datetime) -> int | None:
    """The messages the interval landed, when no run applied it or a later one: what an apply run of
    it decodes (the walk may replay earlier intervals too), or, retried after an attempt that
    decoded them and failed later, about the change-log rows it folds. None when it is not landed
    or a run went past it (a rerun, which may only confirm it). Read from the archive's small
    records alone, before a job loads anything else (``spark.runtime.runners.DriverFirstRunner.expect``)."""
    chain = list_manifests(storage, pipeline)
    target = chain_index(chain, start, end)
    if target is None or applied_from(storage, pipeline, chain, target):
        return None
    return read_manifest(storage, chain[target][2]).messages
