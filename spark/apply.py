"""Steps 3 and 4 of a run: decode, cut at the pipeline watermark, commit, tag, publish.

``apply_interval(config, start, end)`` leaves the pipeline published at the watermark W of
the interval's end, whatever happened before and in whatever order runs come (contract §5),
holding the pipeline's lease throughout:

1. The walk (``_bring_forward``): intervals before this one that are not published yet are
   applied first, in order; an interval whose tables are all at or past its W and whose W is
   published is skipped -- or, for the target, *confirmed* without writing, so ``main``
   never moves back; a table behind (its own ``tidelake.watermark``) makes the walk replay
   every interval since, each committing only to the tables still below its W.
2. One interval (``_apply_one``): each partition is read from its *pending offset* (the
   first offset holding a change not applied yet, kept in the previous interval's
   checkpoint) to the manifest's end, on the executors, one task per partition, in two
   phases: the first returns only the partition's watermarks, its DDL and undecodable
   messages; the driver computes W; the second returns the partition's net change for
   (W_prev, W] (one result per touched key, by the one fold rule in ``net_change``).
3. W = min over every partition of the greatest watermark seen; the changes with
   W_prev < commitTs <= W are applied, later ones wait in the archive, earlier ones are
   redeliveries and are skipped. Protocols without commitTs get a derived order
   (``DerivedClock``) that makes "applied" a prefix of each partition by offset.
4. One transaction per table commits its plan and its progress; every table is tagged
   ``wm_<W>`` with its watermark; the checkpoint is written; W is published last.

Undecodable messages are quarantined once (``spark.quarantine``); the pipeline's
``on_bad_message`` policy then fails the run or lets it continue.
"""

from __future__ import annotations

import bisect
import datetime as dt
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import orjson
import pyarrow.parquet as pq

from cdc_codecs import DdlChange, DecodeError, Event, Op, RawMessage, RowChange, SourcePosition, TableSchema, TidelakeError, Watermark, get_decoder, protocol_spec
from spark import catalog as cat
from spark import credentials, layout
from spark.apply_plan import build_apply_plans
from spark.net_change import NetChange, Order, change_order
from spark.commit import CREATED_AT, DROPPED, CommitConflictError, RunContext, TableCommitter, table_watermark, tag_table
from spark.config import PipelineConfig
from spark.land import LocalRunner, Runner
from spark.lease import Lease
from spark.maintain.archive_retention import require_replayable
from spark.manifest import Manifest, list_manifests, read_manifest
from spark.publish import CONFIRMED, NOT_CONSISTENT, PUBLISHED, PublishedTable, published_path, published_watermarks, publish_watermark
from spark.quarantine import quarantine_messages
from spark.storage import AlreadyExists, Storage, open_storage
from spark.watermark import PartitionWatermarks, compute_watermark, derived_commit_ts, derived_mark, tag_name

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
    # DDL applied from topics without commitTs, by (event time, database, table, SQL): such a
    # DDL sent to every partition gets a different derived commitTs on each, so its later
    # copies are recognised by this, in whatever run they come.
    ddl_applied: tuple[tuple[Any, ...], ...] = ()

    def to_json(self) -> bytes:
        return orjson.dumps({
            "interval": {"start": self.interval_start.isoformat(), "end": self.interval_end.isoformat()},
            "watermark": self.watermark,
            "marks": {_ptext(k): v for k, v in sorted(self.marks.items())},
            "pending": {_ptext(k): v for k, v in sorted(self.pending.items())},
            "schemas": {t: [s.to_dict() for s in ss] for t, ss in sorted(self.schemas.items())},
            "ddl_applied": [list(i) for i in self.ddl_applied],
        }, option=orjson.OPT_INDENT_2)

    @staticmethod
    def from_json(data: bytes) -> Checkpoint:
        doc = orjson.loads(data)
        return Checkpoint(
            dt.datetime.fromisoformat(doc["interval"]["start"]), dt.datetime.fromisoformat(doc["interval"]["end"]),
            doc["watermark"], {_pkey(k): v for k, v in doc["marks"].items()}, {_pkey(k): v for k, v in doc["pending"].items()},
            {t: [TableSchema.from_dict(s) for s in ss] for t, ss in doc.get("schemas", {}).items()},
            tuple(tuple(i) for i in doc.get("ddl_applied", ())),
        )


def checkpoint_path(pipeline: str, start: dt.datetime, end: dt.datetime) -> str:
    return f"{layout.pipeline_root(pipeline)}/checkpoints/{layout.instant(start)}_{layout.instant(end)}.json"


# ---------------------------------------------------------------- decoding (executors)


@dataclass(frozen=True)
class DecodeTask:
    config: PipelineConfig  # credentials.task_config's: no secrets travel inside a task
    topic: str
    partition: int
    start: int  # first offset to decode
    end: int  # exclusive
    segments: tuple[str, ...]
    schemas: tuple[TableSchema, ...] = ()
    w_prev: int = 0  # the watermark the run starts from (orders protocols without commitTs)


@dataclass
class Scanned:
    """Phase 1 of a partition: what is needed to compute W (and nothing proportional to its rows)."""

    topic: str
    partition: int
    marks: dict[PKey, int] = field(default_factory=dict)
    ddl: list[DdlChange] = field(default_factory=list)
    errors: list[DecodeError] = field(default_factory=list)
    messages: int = 0
    events: int = 0
    schemas: list[TableSchema] = field(default_factory=list)


@dataclass
class Folded:
    """Phase 2 of a partition: the net change of its rows with W_prev < commitTs <= W.

    ``rows[(database, table, segment)]`` is the net change of those rows; ``segment`` counts the
    run's DDLs before the row, so rows are never folded across a schema change.
    """

    topic: str
    partition: int
    rows: dict[tuple[str, str, int], NetChange] = field(default_factory=dict)
    pending: int | None = None
    skipped: int = 0
    applied: dict[str, int] = field(default_factory=dict)


def _events(task: DecodeTask, errors: list[DecodeError] | None = None) -> Any:
    """One partition's events in offset order, streamed segment by segment (runs on an executor)."""
    storage = open_storage(credentials.resolve(task.config).storage)
    topic_config = next(t for t in task.config.topics if t.name == task.topic)
    options: dict[str, Any] = dict(topic_config.options)
    if task.schemas and "schemas" in protocol_spec(topic_config.protocol).decoder.options_spec:
        options["schemas"] = task.schemas
    decoder = get_decoder(topic_config.protocol, **options)
    derive = None if protocol_spec(topic_config.protocol).has_commit_ts else DerivedClock(task.w_prev)
    for path in task.segments:
        # Row-group sized batches: a segment may hold hundreds of thousands of messages.
        segment = pq.ParquetFile(storage.arrow_fs.open_input_file(storage.arrow_path(path)))
        for batch in segment.iter_batches(batch_size=10_000, columns=["offset", "timestamp_ms", "key", "value", "headers"]):
            yield from _decode_batch(task, decoder, derive, batch.to_pydict(), errors)
    if errors is not None:
        errors.extend(decoder.finish())
    yield decoder


def _decode_batch(task: DecodeTask, decoder: Any, derive: DerivedClock | None, rows: dict[str, list[Any]], errors: list[DecodeError] | None) -> Any:
    """Events of one batch of segment rows, message by message (None for an undecodable one)."""
    for offset, ts, key, value, headers in zip(rows["offset"], rows["timestamp_ms"], rows["key"], rows["value"], rows["headers"]):
        if not task.start <= offset < task.end:
            continue
        msg = RawMessage(key, value, SourcePosition(task.topic, task.partition, offset),
                         tuple((h["key"], h["value"]) for h in headers or ()), ts)
        try:
            events = decoder.decode(msg)
        except DecodeError as exc:
            if errors is not None:
                errors.append(exc)
            yield None
            continue
        yield derive(events) if derive is not None else events


def scan_task(task: DecodeTask) -> Scanned:
    """Phase 1: partition watermarks, DDL, errors and announced schemas."""
    out = Scanned(task.topic, task.partition)
    key = (task.topic, task.partition)
    for item in _events(task, out.errors):
        if item is None:
            out.messages += 1
            continue
        if not isinstance(item, list):
            out.schemas = item.known_schemas()
            break
        out.messages += 1
        out.events += len(item)
        for e in item:
            if isinstance(e, Watermark):
                if e.ts > out.marks.get(key, 0):
                    out.marks[key] = e.ts
            elif isinstance(e, DdlChange):
                out.ddl.append(e)
    return out


@dataclass(frozen=True)
class FoldTask:
    decode: DecodeTask
    w_prev: int
    w: int
    # Commit order of every DDL applied in this run, sorted: a row belongs after the DDLs that
    # precede it in the full order (commitTs, position), not only by commitTs -- under derived
    # watermarks a row and a DDL can share a commitTs.
    ddl_orders: tuple[Order, ...]


def fold_task(task: FoldTask) -> Folded:
    """Phase 2: decode again and fold the rows of (W_prev, W] into a net change per key."""
    d = task.decode
    out = Folded(d.topic, d.partition)
    for item in _events(d):
        if not isinstance(item, list):
            continue
        for e in item:
            if not isinstance(e, (RowChange, DdlChange)):
                continue
            ts = e.commit_ts
            if ts > task.w:
                if out.pending is None or e.position.offset < out.pending:
                    out.pending = e.position.offset
                continue
            if ts <= task.w_prev:
                out.skipped += 1  # applied by an earlier run: a redelivery, or re-read from the pending offset
                continue
            if isinstance(e, DdlChange):
                continue
            name = f"{e.database}.{e.table}"
            out.applied[name] = out.applied.get(name, 0) + 1
            segment = (e.database, e.table, bisect.bisect_left(task.ddl_orders, change_order(e)))
            net = out.rows.get(segment)
            if net is None:
                net = out.rows[segment] = NetChange(e.key_columns)
            net.add(e)
    return out


def _merge_folds(folds: list[Folded]) -> list[RowChange]:
    """Per key across partitions the greatest change wins; as one synthetic change per key."""
    merged: dict[tuple[str, str, int], NetChange] = {}
    for f in folds:
        for segment, net in f.rows.items():
            if segment in merged:
                merged[segment].merge(net)
            else:
                merged[segment] = net
    changes: list[RowChange] = []
    for (database, table, _), net in merged.items():
        for key, (order, change) in net.rows.items():
            ts, topic, partition, offset, index = order
            position = SourcePosition(topic, partition, offset, index)
            if change is None:
                changes.append(RowChange(Op.DELETE, database, table, net.deleted_image(key), None, net.key_columns, None, ts, position))
            else:
                changes.append(change._replace(before=None, commit_ts=ts, position=position))
    return changes


# ---------------------------------------------------------------- the run


@dataclass
class ApplyResult:
    watermark: int
    previous: int
    tables: list[str]
    report: dict[str, Any]
    replayed: list[str] = field(default_factory=list)

    @property
    def outcome(self) -> str:
        return self.report["outcome"]


@dataclass(frozen=True)
class _Interval:
    start: dt.datetime
    end: dt.datetime
    manifest_path: str

    @property
    def name(self) -> str:
        return f"{layout.instant(self.start)}_{layout.instant(self.end)}"


def apply_interval(
    config: PipelineConfig,
    interval_start: dt.datetime,
    interval_end: dt.datetime,
    runner: Runner | None = None,
    storage: Storage | None = None,
    catalog: Any = None,
    fault: Callable[[str], None] | None = None,
    lease: Lease | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> ApplyResult:
    """Make the interval's watermark W published, with every table consistent with it.

    Runs may come in any order (the schedule, retries, backfills of any range, an operator
    clearing an old interval): intervals before this one that are not published yet are
    applied first, in order; a table whose own watermark is behind is replayed forward from
    the archive; an interval whose W is already published is *confirmed* -- tables and tags
    are left as they are, so the head of ``main`` only ever moves forward. Holds the
    pipeline's lease throughout (``lease``: one already held by the caller).

    ``fault`` is called with a step name at each step boundary; tests inject crashes there.
    ``progress`` is called as ``progress(step, done, total)`` while an interval is applied, with
    step ``"decode"`` and ``"net change"`` (partitions), ``"commit"`` (one per table plan) and ``"tag"``
    (tables); a replayed earlier interval starts each step again from 0.
    """
    storage = storage or open_storage(config.storage)
    catalog = catalog or cat.open_catalog(config)
    runner = runner or LocalRunner()
    chain = [_Interval(s, e, p) for s, e, p in list_manifests(storage, config.name)]
    target = next((i for i, iv in enumerate(chain) if (iv.start, iv.end) == (interval_start, interval_end)), None)
    if target is None:
        raise ApplyError(
            f"no manifest for {layout.instant(interval_start)}..{layout.instant(interval_end)}: land the interval first "
            "(the DAG's land task, or spark/jobs/land.py)"
        )
    held = lease or Lease(storage, config.name, ttl_seconds=config.lease_ttl_seconds, wait_seconds=config.lease_wait_seconds)
    with held:
        return _bring_forward(config, storage, catalog, runner, chain, target, held, fault or (lambda step: None),
                              progress or (lambda step, done, total: None))


def _table_watermarks(catalog: Any, config: PipelineConfig) -> dict[str, int]:
    return {".".join(cat.upstream_name(t)): table_watermark(t) for t in cat.pipeline_tables(catalog, config)}


def _bring_forward(config: PipelineConfig, storage: Storage, catalog: Any, runner: Runner, chain: list[_Interval],
                   target: int, lease: Lease, step: Callable[[str], None],
                   progress: Callable[[str, int, int], None]) -> ApplyResult:
    published = set(published_watermarks(storage, config.name))
    checkpoints = [_read_checkpoint(storage, config.name, iv) for iv in chain]
    # Every run leaves main at the latest published W at least: a table behind it is replayed.
    last_published = max((i for i, cp in enumerate(checkpoints) if cp is not None and cp.watermark in published), default=-1)
    previous: Checkpoint | None = None
    result: ApplyResult | None = None
    replayed: list[str] = []
    # The lowest table watermark: an interval at or below it is done for every table. Only an
    # applied interval moves tables, so it is read again only then.
    lowest = min(_table_watermarks(catalog, config).values(), default=None)
    for i in range(max(target, last_published) + 1):
        iv, cp = chain[i], checkpoints[i]
        if cp is not None and (cp.watermark == 0 or cp.watermark in published):
            if lowest is None or lowest >= cp.watermark:
                if i == target:
                    result = _confirm(config, storage, catalog, iv, cp, previous)
                previous = cp
                continue
        if i != target:
            replayed.append(layout.instant(iv.end))
        r = _apply_one(config, storage, catalog, runner, read_manifest(storage, iv.manifest_path), previous, lease, step,
                       progress)
        published.add(r.watermark)
        lowest = min(_table_watermarks(catalog, config).values(), default=None)
        if i == target:
            result = r
        previous = _read_checkpoint(storage, config.name, iv)
    assert result is not None
    result.replayed = replayed
    return result


def _read_checkpoint(storage: Storage, pipeline: str, iv: _Interval) -> Checkpoint | None:
    path = checkpoint_path(pipeline, iv.start, iv.end)
    return Checkpoint.from_json(storage.read(path)) if storage.exists(path) else None


def _confirm(config: PipelineConfig, storage: Storage, catalog: Any, iv: _Interval, cp: Checkpoint,
             previous: Checkpoint | None) -> ApplyResult:
    """The interval's W is published and every table is at or past it: nothing to write."""
    w = cp.watermark
    missing = [".".join(cat.upstream_name(t)) for t in cat.pipeline_tables(catalog, config)
               if w and t.snapshot_by_name(tag_name(w)) is None and _existed_at(t, w)]
    if missing:
        raise ApplyError(f"watermark {w} is published but {', '.join(missing)} carry no tag {tag_name(w)}; "
                         f"run `tidelake repair --from {w}` to re-derive it from the archive")
    report = {
        "step": "apply", "pipeline": config.name, "outcome": CONFIRMED if w else NOT_CONSISTENT,
        "interval": {"start": iv.start.isoformat(), "end": iv.end.isoformat()},
        "watermark": w, "previous_watermark": previous.watermark if previous else 0,
        "watermark_time": _w_time(w),
        "note": "already published by an earlier run; tables and tags left as they are",
    }
    storage.write(layout.report_path(config.name, iv.start, iv.end, "apply"), orjson.dumps(report, option=orjson.OPT_INDENT_2))
    return ApplyResult(w, report["previous_watermark"], sorted(_table_watermarks(catalog, config)), report)


def _existed_at(table: Any, watermark: int) -> bool:
    """Whether the table existed at W (tables created later carry no earlier tags)."""
    created = table.properties.get(CREATED_AT)
    return created is None or int(created) <= watermark


def _w_time(w: int) -> str | None:
    return dt.datetime.fromtimestamp((w >> 18) / 1000, dt.timezone.utc).isoformat() if w else None


def _read_plan(config: PipelineConfig, storage: Storage, manifest: Manifest, previous: Checkpoint | None) -> list[DecodeTask]:
    """One decode task per partition: from its pending offset to this manifest's end."""
    all_manifests = [read_manifest(storage, p) for s, e, p in list_manifests(storage, config.name) if e <= manifest.interval_end]
    w_prev = previous.watermark if previous else 0
    carried = credentials.task_config(config)
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
        tasks.append(DecodeTask(carried, part.topic, part.partition, start, part.end, segments, schemas, w_prev))
    require_replayable(storage, config.name, {(t.topic, t.partition): t.start for t in tasks})
    return tasks


def _apply_one(
    config: PipelineConfig, storage: Storage, catalog: Any, runner: Runner, manifest: Manifest,
    previous: Checkpoint | None, lease: Lease, step: Callable[[str], None],
    progress: Callable[[str, int, int], None],
) -> ApplyResult:
    started = time.perf_counter()
    interval = f"{layout.instant(manifest.interval_start)}_{layout.instant(manifest.interval_end)}"
    tasks = _read_plan(config, storage, manifest, previous)
    # Phase 1 on the executors: only watermarks, DDL and errors come back to the driver.
    progress("decode", 0, len(tasks))
    scanned: list[Scanned] = runner.map(scan_task, tasks)  # type: ignore[arg-type]
    progress("decode", len(tasks), len(tasks))
    step("decoded")

    # Quarantine first: nothing undecodable is lost, whatever the policy says next.
    errors = [err for d in scanned for err in d.errors]
    quarantine = quarantine_messages(storage, config.name, errors, interval, accept=config.on_bad_message == "continue")
    w_prev = previous.watermark if previous else 0
    marks = PartitionWatermarks(dict(previous.marks) if previous else {})
    for d in scanned:
        for k, v in d.marks.items():
            if v > marks.marks.get(k, 0):
                marks.marks[k] = v
    partitions = [(p.topic, p.partition) for p in manifest.partitions]
    w = compute_watermark(marks, partitions, w_prev)

    protocols = {t.name: t.protocol for t in config.topics}
    ddls: list[DdlChange] = []
    seen_ddl: set[tuple[Any, ...]] = set(previous.ddl_applied) if previous else set()
    derived_ddl: list[tuple[Any, ...]] = list(previous.ddl_applied) if previous else []
    candidates = sorted(((e, d) for d in scanned for e in d.ddl), key=lambda x: change_order(x[0]))  # type: ignore[arg-type]
    for e, d in candidates:  # the first copy in commit order is the one applied
        derived = not protocol_spec(protocols[d.topic]).has_commit_ts
        if not w_prev < e.commit_ts <= w:
            continue
        if protocols[d.topic] == "canal-json" and d.partition != 0:
            continue  # TiCDC Canal-JSON sends DDL to partition 0 only
        ident = ((e.event_time_ms if derived else e.commit_ts), e.database, e.table, e.sql)
        if ident not in seen_ddl:  # broadcast to every partition: apply once
            seen_ddl.add(ident)
            ddls.append(e)
            if derived:
                derived_ddl.append(ident)
    if quarantine.unaccepted:
        first = quarantine.unaccepted[0]
        raise BadMessagesError(
            f"{len(quarantine.unaccepted)} message(s) could not be decoded (first: {first}); they are quarantined under "
            f"{storage.url}/{layout.pipeline_root(config.name)}/quarantine. Fix the producer or set on_bad_message: "
            "continue, then rerun the interval"
        )
    # Phase 2 on the executors: each partition's net change for (W_prev, W]. Keys live in one
    # partition, so only one row per touched key comes back, not every change.
    ddl_orders = tuple(sorted(change_order(e) for e in ddls))  # type: ignore[arg-type]
    progress("net change", 0, len(tasks))
    folds: list[Folded] = runner.map(fold_task, [FoldTask(t, w_prev, w, ddl_orders) for t in tasks])  # type: ignore[arg-type]
    progress("net change", len(tasks), len(tasks))
    changes: list[RowChange | DdlChange] = [*_merge_folds(folds), *ddls]
    pending = {(f.topic, f.partition): f.pending for f in folds if f.pending is not None}
    for part in manifest.partitions:
        pending.setdefault((part.topic, part.partition), part.end)
    skipped = sum(f.skipped for f in folds)
    events_applied: dict[str, int] = {}
    for f in folds:
        for name, n in f.applied.items():
            events_applied[name] = events_applied.get(name, 0) + n

    # A table past W while W is not published would need rewriting behind main's head: the
    # walk in _bring_forward never gets here for such a run, unless runs broke the one-at-a-time rule.
    ahead = {n: tw for n, tw in _table_watermarks(catalog, config).items() if tw > w}
    if ahead and not storage.exists(published_path(config.name, w)):
        raise CommitConflictError(
            f"tables {', '.join(f'{n} (at {tw})' for n, tw in sorted(ahead.items()))} are past watermark {w} of "
            f"{interval}, which is not published: a run outside the pipeline's lease (or an older tidelake) wrote them, "
            "and W cannot be published consistently any more. Rebuild the pipeline under a new name over the same "
            "archive (README, Repairing history)"
        )
    run = RunContext(w, w_prev, interval)
    committer = TableCommitter(catalog, config, step, lease.check)
    plans = build_apply_plans(changes)
    progress("commit", 0, len(plans))
    for i, plan in enumerate(plans):
        committer.commit_plan(plan, run)
        step(f"committed:{i}")
        progress("commit", i + 1, len(plans))
    tables = cat.pipeline_tables(catalog, config)
    if w:  # W = 0: some partition has not reported a watermark yet; nothing is consistent
        for i, table in enumerate(tables):
            lease.check()
            tag_table(table, w)
            progress("tag", i + 1, len(tables))
    step("tagged")
    schemas: dict[str, dict[tuple[str, str, int | None], TableSchema]] = {}
    for topic, known in (previous.schemas.items() if previous else ()):
        for sc in known:
            schemas.setdefault(topic, {})[(sc.database, sc.table, sc.version)] = sc
    for d in scanned:
        for sc in d.schemas:
            schemas.setdefault(d.topic, {})[(sc.database, sc.table, sc.version)] = sc
    checkpoint = Checkpoint(manifest.interval_start, manifest.interval_end, w, dict(marks.marks), pending,
                            {t: list(v.values()) for t, v in schemas.items()}, tuple(derived_ddl))
    cp_path = checkpoint_path(config.name, manifest.interval_start, manifest.interval_end)
    try:
        storage.create(cp_path, checkpoint.to_json())
    except AlreadyExists:
        existing = Checkpoint.from_json(storage.read(cp_path))
        if existing.watermark != w or existing.pending != pending:
            raise ApplyError(f"{cp_path}: a checkpoint with watermark {existing.watermark} exists, this run computed {w}") from None
    step("checkpointed")
    tables = cat.pipeline_tables(catalog, config)
    names = {".".join(cat.upstream_name(t)): t for t in tables}
    outcome = NOT_CONSISTENT
    if w:
        lease.check()
        view = [PublishedTable(*cat.upstream_name(t), str(t.metadata.table_uuid), t.snapshot_by_name(tag_name(w)).snapshot_id)
                for t in tables if DROPPED not in t.properties]
        new = publish_watermark(storage, config.name, w, interval, view)
        outcome = PUBLISHED if new else CONFIRMED
    report = {
        "step": "apply",
        "pipeline": config.name,
        "outcome": outcome,
        "interval": {"start": manifest.interval_start.isoformat(), "end": manifest.interval_end.isoformat()},
        "watermark": w,
        "previous_watermark": w_prev,
        "watermark_time": _w_time(w),
        "lag_seconds": round(manifest.interval_end.timestamp() - (w >> 18) / 1000, 3) if w else None,
        "messages_decoded": sum(d.messages for d in scanned),
        "events_decoded": sum(d.events for d in scanned),
        "already_applied_skipped": skipped,
        "quarantined": len(quarantine.new),
        "bad_messages_accepted": len(quarantine.accepted),
        "tables": {
            name: {
                "events_applied": events_applied.get(name, 0),
                "snapshot": t.current_snapshot().snapshot_id if t.current_snapshot() else None,
                "dropped": DROPPED in t.properties,
            }
            for name, t in sorted(names.items())
        },
        "seconds": round(time.perf_counter() - started, 3),
    }
    storage.write(layout.report_path(config.name, manifest.interval_start, manifest.interval_end, "apply"),
                  orjson.dumps(report, option=orjson.OPT_INDENT_2))
    step("published")
    return ApplyResult(w, w_prev, sorted(names), report)


class DerivedClock:
    """Commit order for protocols without commitTs (official Canal, CloudCanal, Debezium MySQL, DTS).

    Binlog event times are statement start times and can go backwards within a partition,
    so time cannot say what is applied; the partition's offset order can (every key lives in
    one partition, so per key it is the binlog's order). A change's commitTs becomes the
    running maximum of event times in its partition, starting just above the run's W_prev:
    it never decreases along the offsets, so the changes a run applies (commitTs <= W) are a
    prefix of each partition from its pending offset, and nothing at or after the pending
    offset counts as already applied, whatever its time says. Each event (and DTS heartbeat)
    also proves its partition complete up to just before its time: the derived watermark.
    """

    def __init__(self, w_prev: int) -> None:
        self.running = w_prev + 1

    def __call__(self, events: list[Event]) -> list[Event]:
        out: list[Event] = []
        for e in events:
            if isinstance(e, Watermark):
                out.append(Watermark(derived_mark(e.ts), e.position) if e.clock.value == "epoch_ms" else e)
                continue
            if not isinstance(e, (RowChange, DdlChange)):
                out.append(e)
                continue
            if e.event_time_ms is None:
                raise ApplyError(f"{e.position}: the message has no event time, so it cannot be ordered without a commitTs")
            self.running = max(self.running, derived_commit_ts(e.event_time_ms))
            out.append(e._replace(commit_ts=self.running))
            out.append(Watermark(derived_mark(e.event_time_ms), e.position))
        return out
