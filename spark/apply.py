"""Steps 3 and 4 of a run: decode, cut at the pipeline watermark, commit, tag, publish.

``apply_interval(config, start, end)`` leaves every table of the pipeline exactly at the
watermark W of the interval's end, whatever happened before (SPEC §5):

1. Intervals are applied in order; an earlier interval without a checkpoint is applied
   first (a table that is behind is replayed forward).
2. Each partition is read from its *pending offset* (the first offset holding a change
   not applied yet, kept in the previous interval's checkpoint) to the manifest's end,
   and decoded on the executors (one task per partition).
3. W = min over every partition of the greatest watermark seen; the changes with
   W_prev < commitTs <= W are applied, later ones wait in the archive, earlier ones are
   redeliveries and are skipped.
4. A table ahead of W (a backfill of an earlier range) is restored to its ``wm_<W_prev>``
   tag first; then one transaction per table commits its plan and its progress.
5. Every table is tagged ``wm_<W>``; the checkpoint is written; W is published last.

Undecodable messages are quarantined with their location and reason; the pipeline's
``on_bad_message`` policy then fails the run or lets it continue.
"""

from __future__ import annotations

import base64
import datetime as dt
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import orjson
import pyarrow.parquet as pq

from cdc_codecs import DdlChange, DecodeError, Event, RawMessage, RowChange, SourcePosition, TableSchema, TidelakeError, Watermark, get_decoder, protocol_spec
from spark import catalog as cat
from spark import layout
from spark.apply_plan import build_apply_plans
from spark.commit import DROPPED, RunContext, TableCommitter, restore, table_watermark, tag_table
from spark.config import PipelineConfig
from spark.land import LocalRunner, Runner
from spark.manifest import Manifest, list_manifests, read_manifest
from spark.storage import AlreadyExists, Storage, open_storage
from spark.watermark import PartitionWatermarks, compute_watermark, derived_commit_ts, derived_mark

PKey = tuple[str, int]


class ApplyError(TidelakeError):
    """The run could not bring the tables to the interval's watermark."""


class BadMessagesError(ApplyError):
    """Messages could not be decoded and the pipeline's policy is to fail."""


def _pkey(text: str) -> PKey:
    topic, _, partition = text.rpartition("/")
    return topic, int(partition)


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
    # Schemas each topic's stream announced so far (Simple BOOTSTRAP/DDL, Debezium tableChanges):
    # a partition resumed at its pending offset may hold rows announced before it.
    schemas: dict[str, list[TableSchema]] = field(default_factory=dict)

    def to_json(self) -> bytes:
        return orjson.dumps({
            "interval": {"start": self.interval_start.isoformat(), "end": self.interval_end.isoformat()},
            "watermark": self.watermark,
            "marks": {_ptext(k): v for k, v in sorted(self.marks.items())},
            "pending": {_ptext(k): v for k, v in sorted(self.pending.items())},
            "schemas": {t: [s.to_dict() for s in ss] for t, ss in sorted(self.schemas.items())},
        }, option=orjson.OPT_INDENT_2)

    @staticmethod
    def from_json(data: bytes) -> Checkpoint:
        doc = orjson.loads(data)
        return Checkpoint(
            dt.datetime.fromisoformat(doc["interval"]["start"]), dt.datetime.fromisoformat(doc["interval"]["end"]),
            doc["watermark"], {_pkey(k): v for k, v in doc["marks"].items()}, {_pkey(k): v for k, v in doc["pending"].items()},
            {t: [TableSchema.from_dict(s) for s in ss] for t, ss in doc.get("schemas", {}).items()},
        )


def checkpoint_path(pipeline: str, start: dt.datetime, end: dt.datetime) -> str:
    return f"{layout.pipeline_root(pipeline)}/checkpoints/{layout.instant(start)}_{layout.instant(end)}.json"


def published_path(pipeline: str, watermark: int) -> str:
    return f"{layout.pipeline_root(pipeline)}/published/{watermark:020d}.json"


# ---------------------------------------------------------------- decoding (executors)


@dataclass(frozen=True)
class DecodeTask:
    config: PipelineConfig
    topic: str
    partition: int
    start: int  # first offset to decode
    end: int  # exclusive
    segments: tuple[str, ...]
    schemas: tuple[TableSchema, ...] = ()


@dataclass
class Decoded:
    topic: str
    partition: int
    events: list[Event] = field(default_factory=list)
    errors: list[DecodeError] = field(default_factory=list)
    messages: int = 0
    schemas: list[TableSchema] = field(default_factory=list)


def decode_task(task: DecodeTask) -> Decoded:
    """Decode one partition's messages in [start, end), in offset order (runs on an executor)."""
    storage = open_storage(task.config.storage)
    topic_config = next(t for t in task.config.topics if t.name == task.topic)
    options: dict[str, Any] = dict(topic_config.options)
    if task.schemas and "schemas" in protocol_spec(topic_config.protocol).decoder.options_spec:
        options["schemas"] = task.schemas
    decoder = get_decoder(topic_config.protocol, **options)
    out = Decoded(task.topic, task.partition)
    for path in task.segments:
        table = pq.read_table(storage.arrow_fs.open_input_file(storage.arrow_path(path)), columns=["offset", "timestamp_ms", "key", "value", "headers"])
        rows = table.to_pydict()
        for offset, ts, key, value, headers in zip(rows["offset"], rows["timestamp_ms"], rows["key"], rows["value"], rows["headers"]):
            if not task.start <= offset < task.end:
                continue
            out.messages += 1
            msg = RawMessage(key, value, SourcePosition(task.topic, task.partition, offset),
                             tuple((h["key"], h["value"]) for h in headers or ()), ts)
            try:
                out.events += decoder.decode(msg)
            except DecodeError as exc:
                out.errors.append(exc)
    out.errors += decoder.finish()
    out.schemas = decoder.known_schemas()
    return out


# ---------------------------------------------------------------- the run


@dataclass
class ApplyResult:
    watermark: int
    previous: int
    tables: list[str]
    report: dict[str, Any]
    replayed: list[str] = field(default_factory=list)


def apply_interval(
    config: PipelineConfig,
    interval_start: dt.datetime,
    interval_end: dt.datetime,
    runner: Runner | None = None,
    storage: Storage | None = None,
    catalog: Any = None,
    fault: Callable[[str], None] | None = None,
) -> ApplyResult:
    """Bring every table to the watermark of ``interval_end`` (steps 3 and 4).

    ``fault`` is called with a step name at each step boundary; tests inject crashes there.
    """
    storage = storage or open_storage(config.storage)
    catalog = catalog or cat.open_catalog(config)
    runner = runner or LocalRunner()
    chain = [(s, e, p) for s, e, p in list_manifests(storage, config.name) if e <= interval_end]
    if not chain or (chain[-1][0], chain[-1][1]) != (interval_start, interval_end):
        raise ApplyError(
            f"no manifest for {layout.instant(interval_start)}..{layout.instant(interval_end)}: land the interval first "
            "(the DAG's land task, or spark/jobs/land.py)"
        )
    previous: Checkpoint | None = None
    result: ApplyResult | None = None
    replayed: list[str] = []
    for i, (s, e, path) in enumerate(chain):
        cp_path = checkpoint_path(config.name, s, e)
        is_target = i == len(chain) - 1
        if storage.exists(cp_path) and not is_target:
            previous = Checkpoint.from_json(storage.read(cp_path))
            continue
        if not is_target:
            replayed.append(layout.instant(e))
        result = _apply_one(config, storage, catalog, runner, read_manifest(storage, path), previous, fault)
        previous = Checkpoint.from_json(storage.read(cp_path))
    assert result is not None
    result.replayed = replayed
    return result


def _read_plan(config: PipelineConfig, storage: Storage, manifest: Manifest, previous: Checkpoint | None) -> list[DecodeTask]:
    """One decode task per partition: from its pending offset to this manifest's end."""
    all_manifests = [read_manifest(storage, p) for s, e, p in list_manifests(storage, config.name) if e <= manifest.interval_end]
    tasks = []
    for part in manifest.partitions:
        key = (part.topic, part.partition)
        start = previous.pending.get(key, part.start) if previous else part.start
        start = min(start, part.start)
        segments = tuple(
            s.path for m in all_manifests for p in m.partitions if (p.topic, p.partition) == key
            for s in p.segments if s.end > start and s.start < part.end
        )
        schemas = tuple(previous.schemas.get(part.topic, ())) if previous else ()
        tasks.append(DecodeTask(config, part.topic, part.partition, start, part.end, segments, schemas))
    return tasks


def _apply_one(
    config: PipelineConfig, storage: Storage, catalog: Any, runner: Runner, manifest: Manifest,
    previous: Checkpoint | None, fault: Callable[[str], None] | None,
) -> ApplyResult:
    started = time.perf_counter()
    step = fault or (lambda name: None)
    interval = f"{layout.instant(manifest.interval_start)}_{layout.instant(manifest.interval_end)}"
    tasks = _read_plan(config, storage, manifest, previous)
    decoded: list[Decoded] = runner.map(decode_task, tasks)  # type: ignore[arg-type]
    step("decoded")

    # Quarantine first: nothing undecodable is lost, whatever the policy says next.
    errors = [err for d in decoded for err in d.errors]
    quarantined = _quarantine(storage, config, errors)
    w_prev = previous.watermark if previous else 0
    marks = PartitionWatermarks(dict(previous.marks) if previous else {})
    protocols = {t.name: t.protocol for t in config.topics}
    for d in decoded:
        if not protocol_spec(protocols[d.topic]).has_commit_ts:
            d.events = _derive_clock(d)
    marks.observe(e for d in decoded for e in d.events if isinstance(e, Watermark))
    partitions = [(p.topic, p.partition) for p in manifest.partitions]
    w = compute_watermark(marks, partitions, w_prev)

    changes: list[RowChange | DdlChange] = []
    seen_ddl: set[tuple[Any, ...]] = set()
    pending: dict[PKey, int] = {}
    skipped = 0
    for d in decoded:
        key = (d.topic, d.partition)
        for e in d.events:
            if not isinstance(e, (RowChange, DdlChange)):
                continue
            if e.commit_ts > w:
                pending[key] = min(pending.get(key, e.position.offset), e.position.offset)
            elif e.commit_ts <= w_prev:
                skipped += 1  # applied by an earlier run: a redelivery, or re-read from the pending offset
            elif isinstance(e, DdlChange):
                if protocols[d.topic] == "canal-json" and d.partition != 0:
                    continue  # TiCDC Canal-JSON sends DDL to partition 0 only
                ident = (e.commit_ts, e.database, e.table, e.sql)
                if ident not in seen_ddl:  # broadcast to every partition: apply once
                    seen_ddl.add(ident)
                    changes.append(e)
            else:
                changes.append(e)
    for part in manifest.partitions:
        pending.setdefault((part.topic, part.partition), part.end)

    if errors and config.on_bad_message == "fail":
        raise BadMessagesError(
            f"{len(errors)} message(s) could not be decoded (first: {errors[0]}); they are quarantined under "
            f"{storage.url}/{layout.pipeline_root(config.name)}/quarantine. Fix the producer or set on_bad_message: "
            "continue, then rerun the interval"
        )

    run = RunContext(w, w_prev, interval)
    committer = TableCommitter(catalog, config, fault)
    # A table ahead of W comes from a later run: restore it to this interval's start, then replay.
    restored = []
    for table in cat.pipeline_tables(catalog, config):
        if table_watermark(table) > w:
            # Without a wm_<W_prev> tag the table did not exist yet at W_prev: empty it (keeping
            # its later tags readable); the replay's CREATE TABLE makes it again.
            restore(table, w_prev, empty=table.snapshot_by_name(f"wm_{w_prev}") is None)
            restored.append(".".join(cat.upstream_name(table)))
    step("restored")
    plans = build_apply_plans(changes)
    applied: dict[str, int] = {}
    for i, plan in enumerate(plans):
        committer.commit_plan(plan, run)
        applied[f"{plan.database}.{plan.table}"] = sum(getattr(s, "events", 0) for s in plan.steps)
        step(f"committed:{i}")
    tables = cat.pipeline_tables(catalog, config)
    if w:  # W = 0: some partition has not reported a watermark yet; nothing is consistent
        for table in tables:
            tag_table(table, w)
    step("tagged")
    schemas: dict[str, dict[tuple[str, str, int | None], TableSchema]] = {}
    for topic, known in (previous.schemas.items() if previous else ()):
        for sc in known:
            schemas.setdefault(topic, {})[(sc.database, sc.table, sc.version)] = sc
    for d in decoded:
        for sc in d.schemas:
            schemas.setdefault(d.topic, {})[(sc.database, sc.table, sc.version)] = sc
    checkpoint = Checkpoint(manifest.interval_start, manifest.interval_end, w, dict(marks.marks), pending,
                            {t: list(v.values()) for t, v in schemas.items()})
    cp_path = checkpoint_path(config.name, manifest.interval_start, manifest.interval_end)
    try:
        storage.create(cp_path, checkpoint.to_json())
    except AlreadyExists:
        existing = Checkpoint.from_json(storage.read(cp_path))
        if existing.watermark != w or existing.pending != pending:
            raise ApplyError(f"{cp_path}: a checkpoint with watermark {existing.watermark} exists, this run computed {w}") from None
    step("checkpointed")
    names = {".".join(cat.upstream_name(t)): t for t in tables}
    report = {
        "step": "apply",
        "pipeline": config.name,
        "interval": {"start": manifest.interval_start.isoformat(), "end": manifest.interval_end.isoformat()},
        "watermark": w,
        "previous_watermark": w_prev,
        "watermark_time": dt.datetime.fromtimestamp((w >> 18) / 1000, dt.timezone.utc).isoformat() if w else None,
        "lag_seconds": round(manifest.interval_end.timestamp() - (w >> 18) / 1000, 3) if w else None,
        "messages_decoded": sum(d.messages for d in decoded),
        "events_decoded": sum(len(d.events) for d in decoded),
        "already_applied_skipped": skipped,
        "quarantined": len(quarantined),
        "restored_tables": restored,
        "tables": {
            name: {
                "events_applied": applied.get(name, 0),
                "snapshot": t.current_snapshot().snapshot_id if t.current_snapshot() else None,
                "dropped": DROPPED in t.properties,
            }
            for name, t in sorted(names.items())
        },
        "seconds": round(time.perf_counter() - started, 3),
    }
    storage.write(layout.report_path(config.name, manifest.interval_start, manifest.interval_end, "apply"),
                  orjson.dumps(report, option=orjson.OPT_INDENT_2))
    if w:
        publish_watermark(storage, config, w, interval, {n: t.snapshot_by_name(f"wm_{w}").snapshot_id for n, t in names.items()})
    step("published")
    return ApplyResult(w, w_prev, sorted(names), report)


def _derive_clock(d: Decoded) -> list[Event]:
    """Protocols without commitTs (official Canal, CloudCanal, Debezium MySQL, DTS).

    A change's commitTs becomes its event time as a TSO; in a partition events keep their
    offset order, and every key lives in one partition, so per key the order is the
    binlog's. Each event (and DTS heartbeat) also proves its partition complete up to just
    before its time, which gives the derived watermark.
    """
    out: list[Event] = []
    for e in d.events:
        if isinstance(e, Watermark):
            if e.clock.value == "epoch_ms":
                out.append(Watermark(derived_mark(e.ts), e.position))
            else:
                out.append(e)
            continue
        if not isinstance(e, (RowChange, DdlChange)):
            out.append(e)
            continue
        if e.event_time_ms is None:
            raise ApplyError(f"{e.position}: the message has no event time, so it cannot be ordered without a commitTs")
        out.append(e._replace(commit_ts=derived_commit_ts(e.event_time_ms)))
        out.append(Watermark(derived_mark(e.event_time_ms), e.position))
    return out


def published_watermark_of(config: PipelineConfig, interval_start: dt.datetime, interval_end: dt.datetime) -> int:
    """The W an applied interval published (0 if it has none yet)."""
    storage = open_storage(config.storage)
    path = checkpoint_path(config.name, interval_start, interval_end)
    if not storage.exists(path):
        raise ApplyError(f"interval {layout.instant(interval_start)}..{layout.instant(interval_end)} is not applied yet")
    w = Checkpoint.from_json(storage.read(path)).watermark
    if w and not storage.exists(published_path(config.name, w)):
        raise ApplyError(f"watermark {w} is checkpointed but not published; rerun the apply task")
    return w


def publish_watermark(storage: Storage, config: PipelineConfig, watermark: int, interval: str, snapshots: dict[str, int]) -> None:
    """W is consistent: every table carries ``wm_<W>``. Create-only; republishing is a no-op."""
    doc = {"watermark": watermark, "interval": interval, "tables": dict(sorted(snapshots.items()))}
    try:
        storage.create(published_path(config.name, watermark), orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    except AlreadyExists:
        pass


def _quarantine(storage: Storage, config: PipelineConfig, errors: Sequence[DecodeError]) -> list[str]:
    paths = []
    for err in errors:
        pos = err.position or SourcePosition("unknown", -1, -1)
        raw = err.raw
        path = (f"{layout.pipeline_root(config.name)}/quarantine/{layout.encode_name(pos.topic)}/{pos.partition}/"
                f"{pos.offset:0{layout.OFFSET_DIGITS}d}-{pos.index}.json")
        doc = {
            "topic": pos.topic, "partition": pos.partition, "offset": pos.offset, "index": pos.index,
            "protocol": err.protocol, "error": type(err).__name__, "field": err.field, "reason": err.reason,
            "message": str(err),
            "key_base64": base64.b64encode(raw.key).decode() if raw and raw.key is not None else None,
            "value_base64": base64.b64encode(raw.value).decode() if raw and raw.value is not None else None,
            "timestamp_ms": raw.timestamp_ms if raw else None,
        }
        storage.write(path, orjson.dumps(doc, option=orjson.OPT_INDENT_2))
        paths.append(path)
    return paths

