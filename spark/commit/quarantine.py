"""Undecodable messages: kept once, with where they came from and why, never dropped (contract §6).

    <pipeline>/quarantine/<topic>/<partition>/<offset>-<index>.json

A message is quarantined (and counted) once: its record is created create-only, and the
runs that read the same offsets again -- retries, reruns, a later interval resuming from
a pending offset before it -- find it there. A run under ``on_bad_message = "continue"``
marks the records it met as accepted (``accepted_by``), so a later run under ``fail`` is
blocked only by messages nobody has dealt with yet.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Sequence

import orjson

from cdc_codecs import DecodeError, SourcePosition
from spark.archive import layout
from spark.archive.storage import AlreadyExists, Storage


def quarantine_path(pipeline: str, position: SourcePosition) -> str:
    return (f"{layout.pipeline_root(pipeline)}/quarantine/{layout.encode_name(position.topic)}/{position.partition}/"
            f"{position.offset:0{layout.OFFSET_DIGITS}d}-{position.index}.json")


@dataclass
class QuarantineResult:
    new: list[str] = field(default_factory=list)  # quarantined by this run
    accepted: list[str] = field(default_factory=list)  # accepted by this run or an earlier one
    unaccepted: list[DecodeError] = field(default_factory=list)  # still blocking a run under "fail"


def _record(err: DecodeError) -> dict:
    pos = err.position or SourcePosition("unknown", -1, -1)
    raw = err.raw
    return {
        "topic": pos.topic, "partition": pos.partition, "offset": pos.offset, "index": pos.index,
        "protocol": err.protocol, "error": type(err).__name__, "field": err.field, "reason": err.reason,
        "message": str(err),
        "key_base64": base64.b64encode(raw.key).decode() if raw and raw.key is not None else None,
        "value_base64": base64.b64encode(raw.value).decode() if raw and raw.value is not None else None,
        "timestamp_ms": raw.timestamp_ms if raw else None,
        "accepted_by": None,
    }


def quarantine_messages(storage: Storage, pipeline: str, errors: Sequence[DecodeError], interval: str, *,
                        accept: bool) -> QuarantineResult:
    """Record every error once; with ``accept``, mark them accepted by ``interval``'s run."""
    out = QuarantineResult()
    for err in errors:
        path = quarantine_path(pipeline, err.position or SourcePosition("unknown", -1, -1))
        doc = _record(err)
        try:
            storage.create(path, orjson.dumps(doc, option=orjson.OPT_INDENT_2))
            out.new.append(path)
        except AlreadyExists:
            doc = orjson.loads(storage.read(path))
        if doc.get("accepted_by"):
            out.accepted.append(path)
        elif accept:
            doc["accepted_by"] = interval
            storage.write(path, orjson.dumps(doc, option=orjson.OPT_INDENT_2))
            out.accepted.append(path)
        else:
            out.unaccepted.append(err)
    return out
