"""Steps 3 and 4 of a run: decode, cut at the pipeline watermark, commit, tag, publish.

``apply_interval(config, start, end)`` leaves the pipeline published at the watermark W of
the interval's end, whatever happened before and in whatever order runs come (contract §5),
holding the pipeline's lease throughout:

1. The walk (``_bring_forward``): intervals before this one that are not published yet are
   applied first, in order; an interval whose tables are all at or past its W and whose W is
   published is skipped -- or, for the target, *confirmed* without writing, so ``main``
   never moves back; a table behind (its own ``tidelake.watermark``) makes the walk replay
   every interval since, each committing only to the tables still below its W.
2. One interval (``_apply_one``), through the stages of docs/data-plane.md: each partition's
   raw segments from its *pending offset* (the first offset holding a change not applied yet,
   kept in the previous interval's checkpoint) to the manifest's end are decoded once into the
   change log on the executors (``spark.decode``); the driver reads only their side outputs
   (partition watermarks, DDL, undecodable messages) and computes W.
3. W = min over every partition of the greatest watermark seen; the changes with
   W_prev < commitTs <= W are folded on the executors into one net change per table, DDL
   segment and key (``spark.fold``, the one rule in ``net_change``); later ones wait in the
   archive, earlier ones are redeliveries and are skipped. Protocols without commitTs get a
   derived order (the change log's derived clock) that makes "applied" a prefix of each
   partition by offset.
4. Per table, executors rewrite the data files holding touched keys and write the net rows
   (``spark.runtime.plane``, ``spark.write.upsert``); the driver commits one transaction per table
   with its schema changes and progress; every table is tagged ``wm_<W>`` with its watermark;
   the checkpoint is written; W is published last.

Undecodable messages are quarantined once (``spark.commit.quarantine``); the pipeline's
``on_bad_message`` policy then fails the run or lets it continue. A table whose DDL or values
the run cannot apply fails it, or under ``on_table_error = "isolate"`` is held at its last
good W while the others go on (``spark.commit.isolation``); the walk tries it again from there.
"""

from __future__ import annotations

import datetime as dt
import time
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from cdc_codecs import DdlChange, TidelakeError, protocol_spec
from spark.tables import catalog as cat
from spark.runtime import credentials
from spark.archive import layout, records
from spark.commit.plan import SchemaStep, TablePlan, TableRef, UpstreamTables, build_apply_plans, ddl_changes
from spark.tables.properties import CREATED_AT, DROPPED, table_watermark, walk_watermark
from spark.commit.table import RunContext, TableCommitter, tag_table
from spark.config import PipelineConfig
from spark.tables.ddl import CreateTableLike, RenameTable
from spark.decode.changelog import SegmentRef, SideOutput, decoder_version, ensure_change_log
from spark.decode.topic_clock import settle_topic_clocks
from spark.fold.select import FoldWindow, link_runs
from spark.commit.isolation import (
    ISOLATE, Isolated, RunIsolation, read_isolated, statement_table, table_error, write_isolated,
)
from spark.write.rewrite import FileRewrite
from spark.archive.land import LocalRunner, Runner
from spark.commit.lease import Lease
from spark.maintain.archive_retention import require_replayable
from spark.archive.manifest import Manifest, list_manifests, read_manifest
from spark.fold.net_change import Order, change_order
from spark.runtime.plane import FillRequest, Fold, LocalPlane, RewriteRequest, SparkPlane
from spark.runtime.tasks import sized
from spark.commit.published import (
    CONFIRMATION_REPORT, CONFIRMED, NOT_CONSISTENT, PUBLISHED, PublishedTable, is_retired, publish_watermark,
    published_path, read_published, record_caught_up,
)
from spark.commit.quarantine import quarantine_messages
from spark.archive.storage import AlreadyExists, Storage, open_storage
from spark.commit.watermark import PartitionWatermarks, compute_watermark, tag_name

PKey = tuple[str, int]
# Plans advanced side by side between rewrite rounds: what a plan does between two rewrites is
# catalog I/O (loading, creating, committing tables), so threads overlap it.
COMMIT_THREADS = 4


class ApplyError(TidelakeError):
    """The run could not bring the tables to the interval's watermark."""


class BadMessagesError(ApplyError):
    """Messages could not be decoded and the pipeline's policy is to fail."""


class TablesAheadError(ApplyError):
    """Tables are past a watermark that is not published: a writer outside the lease moved them."""


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
        """Raises: records.CorruptCheckpoint, naming ``where``."""
        doc = records.checkpoint(data, where)
        segments = doc["segments"]
        return Checkpoint(
            doc["interval_start"], doc["interval_end"], doc["watermark"], doc["marks"], doc["pending"], doc["ddl_applied"],
            {k: tuple(SegmentRef(*r) for r in v) for k, v in segments.items()} if segments is not None else None,
        )


def checkpoint_path(pipeline: str, start: dt.datetime, end: dt.datetime) -> str:
    return f"{layout.pipeline_root(pipeline)}/checkpoints/{layout.instant(start)}_{layout.instant(end)}.json"


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
    step ``"decode"`` (partitions), ``"net change"`` (one fold), ``"commit"`` (one per table plan) and ``"tag"``
    (tables); a replayed earlier interval starts each step again from 0.
    """
    storage = storage or open_storage(config.storage)
    config = settle_topic_clocks(config, storage)  # a topic's clock, once for its life (Canal-JSON: auto)
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
        return _bring_forward(config, storage, cat.RunTables(catalog, config), runner, chain, target, held, fault or (lambda step: None),
                              progress or (lambda step, done, total: None))


def _lake_tables(tables: cat.RunTables) -> list[TableRef]:
    """The upstream names of the tables the lake holds, dropped ones left out."""
    return [cat.upstream_name(t) for t in tables.all() if DROPPED not in t.properties]


def _table_watermarks(tables: cat.RunTables) -> dict[str, int]:
    return {cat.table_label(t): walk_watermark(t) for t in tables.all()}


def _lowest(storage: Storage, tables: cat.RunTables, config: PipelineConfig, applied: int | None = None) -> int | None:
    """The lowest watermark the walk brings tables forward from: every table's own, but an isolated
    table's held W instead -- so each run tries it again from there, once: after the walk applied
    the interval ending at ``applied``, a table still held below it waits for the next run."""
    held = read_isolated(storage, config.name)
    names = {e.name for e in held.values()}
    marks = [w for name, w in _table_watermarks(tables).items() if name not in names]
    marks += [e.held_at for e in held.values() if applied is None or e.held_at >= applied]
    return min(marks, default=None)


def confirm_if_done(config: PipelineConfig, interval_start: dt.datetime, interval_end: dt.datetime,
                    storage: Storage | None = None, catalog: Any = None) -> ApplyResult | None:
    """The interval's confirmation if it is done -- its W published and every table at or past
    it -- decided from the archive and the catalog alone, before any Spark starts; None if a run
    has work to do (or the interval is not landed). The DAG and the apply job call it first, so
    a rerun of an old interval or a completed backfill costs seconds, not two spark-submits."""
    storage = storage or open_storage(config.storage)
    chain = [_Interval(s, e, p) for s, e, p in list_manifests(storage, config.name)]
    target = next((i for i, iv in enumerate(chain) if (iv.start, iv.end) == (interval_start, interval_end)), None)
    if target is None:
        return None
    if not any(storage.exists(checkpoint_path(config.name, iv.start, iv.end)) for iv in chain[target:]):
        return None  # nothing at or after the interval was applied (the schedule's next run): no table is read
    tables = cat.RunTables(catalog or cat.open_catalog(config), config)
    lowest = _lowest(storage, tables, config)
    base, checkpoints = _base(storage, config, chain, lowest)
    return _confirm_target(config, storage, tables, chain, target, checkpoints) if target <= base else None


def _done(storage: Storage, pipeline: str, cp: Checkpoint | None) -> bool:
    return cp is not None and (cp.watermark == 0 or _is_published(storage, pipeline, cp.watermark))


def _base(storage: Storage, config: PipelineConfig, chain: list[_Interval],
          lowest: int | None) -> tuple[int, dict[int, Checkpoint | None]]:
    """The newest interval done for every table (published, tables at or past its W; -1: none),
    and the checkpoints read to find it. Reads stay bounded by what is left to do, not by the
    history: runs apply intervals in order, so everything before the base is done too."""
    checkpoints: dict[int, Checkpoint | None] = {}
    for i in range(len(chain) - 1, -1, -1):
        cp = checkpoints[i] = _read_checkpoint(storage, config.name, chain[i])
        if _done(storage, config.name, cp) and (lowest is None or lowest >= cp.watermark):  # type: ignore[union-attr]
            return i, checkpoints
    return -1, checkpoints


def _confirm_target(config: PipelineConfig, storage: Storage, tables: cat.RunTables, chain: list[_Interval], target: int,
                    checkpoints: dict[int, Checkpoint | None]) -> ApplyResult:
    """An interval at or before the base: its W is published and every table is past it."""
    cp = checkpoints.get(target) or _read_checkpoint(storage, config.name, chain[target])
    previous = _read_checkpoint(storage, config.name, chain[target - 1]) if target else None
    if cp is None:
        return _confirm_landed_late(config, storage, tables, chain, target)
    return _confirm(config, storage, tables, chain[target], cp, previous)


def _bring_forward(config: PipelineConfig, storage: Storage, tables: cat.RunTables, runner: Runner, chain: list[_Interval],
                   target: int, lease: Lease, step: Callable[[str], None],
                   progress: Callable[[str, int, int], None]) -> ApplyResult:
    # The lowest table watermark: an interval at or below it is done for every table. Only an
    # applied interval moves tables, so it is read again only then.
    lowest = _lowest(storage, tables, config)

    def done(cp: Checkpoint | None) -> bool:
        return _done(storage, config.name, cp)

    base, checkpoints = _base(storage, config, chain, lowest)
    if target <= base:  # an interval whose W is published and every table past it: confirmed
        return _confirm_target(config, storage, tables, chain, target, checkpoints)
    # Every run leaves main at the latest published W at least: a table behind it is replayed.
    last_published = max((i for i, cp in checkpoints.items() if i > base and done(cp)), default=-1)
    previous = checkpoints.get(base) if base >= 0 else None
    result: ApplyResult | None = None
    replayed: list[str] = []
    for i in range(base + 1, max(target, last_published) + 1):
        iv, cp = chain[i], checkpoints[i]
        if done(cp) and (lowest is None or lowest >= cp.watermark):  # type: ignore[union-attr]
            if i == target:
                result = _confirm(config, storage, tables, iv, cp, previous)  # type: ignore[arg-type]
            previous = cp
            continue
        if i != target:
            replayed.append(layout.instant(iv.end))
        r = _apply_one(config, storage, tables, runner, read_manifest(storage, iv.manifest_path), previous, lease, step,
                       progress)
        lowest = _lowest(storage, tables, config, r.watermark)
        if i == target:
            result = r
        previous = _read_checkpoint(storage, config.name, iv)
    assert result is not None
    result.replayed = replayed
    return result


def _confirm_landed_late(config: PipelineConfig, storage: Storage, tables: cat.RunTables, chain: list[_Interval],
                         target: int) -> ApplyResult:
    """An interval landed after a later one was applied (a backfill of 05:00, then of 04:00):
    the later interval's offsets began where the one before this ended, so this one holds no
    message and has nothing to apply. It is confirmed at the W of the newest applied interval
    before it -- what the pipeline held at its end."""
    iv = chain[target]
    manifest = read_manifest(storage, iv.manifest_path)
    if any(p.end > p.start for p in manifest.partitions):
        raise ApplyError(f"interval {iv.name} was landed after a later interval was applied, yet holds messages "
                         f"({iv.manifest_path}); its offsets overlap the later interval's: re-land it")
    before = next((cp for cp in (_read_checkpoint(storage, config.name, chain[i]) for i in range(target - 1, -1, -1))
                   if cp is not None), None)
    cp = before or Checkpoint(iv.start, iv.end, 0, {}, {})
    return _confirm(config, storage, tables, iv, cp, before,
                    note="landed after a later interval that took its offsets: it holds no message; confirmed at the W "
                         "of the interval before it")


def _is_published(storage: Storage, pipeline: str, watermark: int) -> bool:
    return storage.exists(published_path(pipeline, watermark))


def _read_checkpoint(storage: Storage, pipeline: str, iv: _Interval) -> Checkpoint | None:
    path = checkpoint_path(pipeline, iv.start, iv.end)
    return Checkpoint.from_json(storage.read(path), f"{storage.url}/{path}") if storage.exists(path) else None


def _confirm(config: PipelineConfig, storage: Storage, tables: cat.RunTables, iv: _Interval, cp: Checkpoint,
             previous: Checkpoint | None, note: str | None = None) -> ApplyResult:
    """The interval's W is published and every table is at or past it: nothing to write."""
    w = cp.watermark
    # A W the retention policy retired has no tags by design: confirmed as published, not re-derived.
    retired = bool(w) and is_retired(storage, config.name, w)
    isolated = (read_published(storage, config.name, w) or {}).get("isolated", []) if w else []
    held = {(e["database"], e["table"]) for e in isolated}  # not tagged at W by design
    missing = [".".join(cat.upstream_name(t)) for t in tables.all()
               if w and not retired and t.snapshot_by_name(tag_name(w)) is None and _existed_at(t, w)
               and cat.upstream_name(t) not in held]
    if missing:
        raise ApplyError(f"watermark {w} is published but {', '.join(missing)} carry no tag {tag_name(w)}; "
                         f"run `tidelake repair --from {w}` to re-derive it from the archive")
    report = {
        "step": "apply", "pipeline": config.name, "outcome": CONFIRMED if w else NOT_CONSISTENT,
        "interval": {"start": iv.start.isoformat(), "end": iv.end.isoformat()},
        "watermark": w, "previous_watermark": previous.watermark if previous else 0,
        "watermark_time": _w_time(w),
        "note": (note or "already published by an earlier run; tables and tags left as they are")
                + ("; W is retired by the retention policy (its tags are gone)" if retired else ""),
        "isolated": _isolated_report([Isolated.from_dict(e) for e in isolated]),
        "confirmed_at": dt.datetime.now(dt.UTC).isoformat(),
    }
    _write_confirmation(storage, config.name, iv, report)
    return ApplyResult(w, report["previous_watermark"], sorted(_table_watermarks(tables)), report)


def _write_confirmation(storage: Storage, pipeline: str, iv: _Interval, report: dict[str, Any]) -> None:
    """The report of a run that only confirmed: beside the report of the run that applied the
    interval (``apply.json`` keeps its counts and timings), as ``apply.confirmed.json``."""
    applied = layout.report_path(pipeline, iv.start, iv.end, "apply")
    path = layout.report_path(pipeline, iv.start, iv.end, CONFIRMATION_REPORT) if storage.exists(applied) else applied
    storage.write(path, orjson.dumps(report, option=orjson.OPT_INDENT_2))


def _behind(tables: cat.RunTables, ref: tuple[str, str], w: int) -> bool:
    table = tables.load(*ref)
    return table is not None and table_watermark(table) < w


def _isolated_report(entries: list[Isolated]) -> dict[str, dict[str, Any]]:
    return {e.name: {"held_at": e.held_at, "held_at_time": _w_time(e.held_at), "reason": e.reason(), **e.to_dict()}
            for e in sorted(entries, key=lambda e: e.ref)}


def _existed_at(table: Any, watermark: int) -> bool:
    """Whether the table existed at W (tables created later carry no earlier tags)."""
    created = table.properties.get(CREATED_AT)
    return created is None or int(created) <= watermark


def _w_time(w: int) -> str | None:
    return dt.datetime.fromtimestamp((w >> 18) / 1000, dt.UTC).isoformat() if w else None


def _read_window(config: PipelineConfig, storage: Storage, manifest: Manifest, previous: Checkpoint | None,
                 ) -> tuple[dict[PKey, tuple[int, int]], dict[PKey, list[SegmentRef]], dict[PKey, list[SegmentRef]]]:
    """Per partition: the offsets the run reads (its pending offset to the manifest's end), the raw
    segments holding them, and the recent raw segments of the partition (the previous
    checkpoint's and this manifest's; every manifest's only after a checkpoint that names none)."""
    offsets: dict[PKey, tuple[int, int]] = {}
    needed: dict[PKey, list[SegmentRef]] = {}
    history: dict[PKey, list[SegmentRef]] = {}
    full = None if previous is not None and previous.segments is not None else _all_segments(storage, config.name, manifest)
    for part in manifest.partitions:
        key = (part.topic, part.partition)
        start = min(previous.pending.get(key, part.start) if previous else part.start, part.start)
        offsets[key] = (start, part.end)
        if full is not None:
            known = full.get(key, [])
        else:
            assert previous is not None and previous.segments is not None
            known = [*previous.segments.get(key, ()), *(SegmentRef(s.path, s.start, s.end) for s in part.segments)]
        history[key] = sorted({s for s in known if s.start < part.end}, key=lambda s: s.start)
        needed[key] = [s for s in history[key] if s.end > start]
    # A replay into a range archive retention deleted fails here, naming it.
    require_replayable(storage, config.name, {key: lo for key, (lo, _) in offsets.items()})
    return offsets, needed, history


def _all_segments(storage: Storage, pipeline: str, manifest: Manifest) -> dict[PKey, list[SegmentRef]]:
    """Every raw segment of every partition up to ``manifest``'s interval, from all manifests."""
    out: dict[PKey, list[SegmentRef]] = {}
    for _, end, path in list_manifests(storage, pipeline):
        if end <= manifest.interval_end:
            for p in read_manifest(storage, path).partitions:
                out.setdefault((p.topic, p.partition), []).extend(SegmentRef(s.path, s.start, s.end) for s in p.segments)
    return {k: sorted(set(v), key=lambda s: s.start) for k, v in out.items()}


def _carried_segments(history: dict[PKey, list[SegmentRef]], pending: dict[PKey, int]) -> dict[PKey, tuple[SegmentRef, ...]]:
    """What the next run reads of each partition's history (``Checkpoint.segments``)."""
    carried = {}
    for key, segments in history.items():
        first = next((i for i, s in enumerate(segments) if s.end > pending.get(key, s.end)), len(segments))
        carried[key] = tuple(segments[max(0, first - 1):])
    return carried


def _plane(runner: Runner) -> Any:
    context = getattr(runner, "context", None)
    return SparkPlane(context) if context is not None else LocalPlane()


def _apply_one(
    config: PipelineConfig, storage: Storage, tables: cat.RunTables, runner: Runner, manifest: Manifest,
    previous: Checkpoint | None, lease: Lease, step: Callable[[str], None],
    progress: Callable[[str, int, int], None],
) -> ApplyResult:
    started = time.perf_counter()
    stages = _StageClock(runner)
    interval = f"{layout.instant(manifest.interval_start)}_{layout.instant(manifest.interval_end)}"
    offsets, needed, history = _read_window(config, storage, manifest, previous)
    # Stage 1 on the executors: every raw segment is decoded once into the change log; the
    # driver gets the side outputs (watermarks, DDL, bad messages) and nothing per row.
    progress("decode", 0, len(needed))
    decoded = ensure_change_log(config, storage, runner, needed, history,
                                lambda key: _all_segments(storage, config.name, manifest).get(key, []))
    progress("decode", len(needed), len(needed))
    stages.done("decode", started)
    step("decoded")

    def inside(key: PKey, offset: int) -> bool:
        return offsets[key][0] <= offset < offsets[key][1]

    sides = [(key, side) for key, ss in decoded.items() for side in ss]
    # Quarantine first: nothing undecodable is lost, whatever the policy says next.
    errors = [err for key, side in sides for err in side.errors if err.position is None or inside(key, err.position.offset)]
    quarantine = quarantine_messages(storage, config.name, errors, interval, accept=config.on_bad_message == "continue")
    w_prev = previous.watermark if previous else 0
    marks = PartitionWatermarks(dict(previous.marks) if previous else {})
    for key, side in sides:
        if side.mark is not None and side.mark > marks.marks.get(key, 0):
            marks.marks[key] = side.mark
    partitions = [(p.topic, p.partition) for p in manifest.partitions]
    w = compute_watermark(marks, partitions, w_prev)

    protocols = {t.name: t.protocol for t in config.topics}
    derived_topics = frozenset(t.name for t in config.topics if not protocol_spec(t.protocol).carries_commit_ts(t.options))
    ddls: list[DdlChange] = []
    pending: dict[PKey, int] = {}
    seen_ddl: set[tuple[Any, ...]] = set(previous.ddl_applied) if previous else set()
    derived_ddl: list[tuple[Any, ...]] = list(previous.ddl_applied) if previous else []
    candidates = []
    for key, side in sides:
        for e in side.ddl:
            if not inside(key, e.position.offset):
                continue
            if key[0] in derived_topics:  # the derived clock, lifted above W_prev (docs/data-plane.md)
                e = e._replace(commit_ts=max(e.commit_ts or 0, w_prev + 1))
            candidates.append((e, key))
    candidates.sort(key=lambda x: change_order(x[0]))  # type: ignore[arg-type]
    for e, key in candidates:  # the first copy in commit order is the one applied
        derived = key[0] in derived_topics
        if e.commit_ts > w:
            pending[key] = min(pending.get(key, e.position.offset), e.position.offset)
            continue
        if e.commit_ts <= w_prev:
            continue
        if protocols[key[0]] == "canal-json" and key[1] != 0:
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
    # Tables held back: a DDL tidelake cannot parse isolates its table (or fails the run), and
    # nothing of an isolated table's is planned.
    isolation = RunIsolation(config.on_table_error, read_isolated(storage, config.name), w_prev, w, interval)
    linked, ddls = _ddl_links(ddls, isolation)
    # Stage 3 on the executors: the change-log rows of (W_prev, W], folded per key.
    # A table's rows are folded only between two DDLs that change it (ddls are in commit order).
    ddl_orders: dict[tuple[str, str], list[Order]] = {}
    upstream = UpstreamTables(lambda: _lake_tables(tables))
    for e in ddls:
        for ref in {ref for ref, _ in upstream.changes(e)}:
            ddl_orders.setdefault(ref, []).append(change_order(e))  # type: ignore[arg-type]
    window = FoldWindow(w_prev, w, offsets, derived_topics, {ref: tuple(sorted(o)) for ref, o in ddl_orders.items()},
                        link_runs(decoded))
    version = {t.name: decoder_version(t.protocol) for t in config.topics}
    paths = [layout.changelog_paths(config.name, version[key[0]], key[0], key[1], s.start, s.end)[0]
             for key, segments in needed.items() for s in segments]
    progress("net change", 0, 1)
    folding = time.perf_counter()
    schemas = {sid: blob for _, side in sides for sid, blob in side.schemas.items()}
    rows = sum(side.rows for _, side in sides)
    # The fold and the rewrite hold the window's rows: sized by the change-log rows it selects,
    # where decoding was sized by the messages it decoded (ensure_change_log).
    fold = _plane(sized(runner, _window_rows(sides, offsets))).fold(credentials.task_config(config), paths, window,
                                                                    schemas, rows)
    stages.done("fold", folding)
    progress("net change", 1, 1)
    try:
        return _commit_run(config, storage, tables, manifest, interval, fold, ddls, pending, previous, w, w_prev, marks, history,
                           derived_ddl, sides, quarantine, lease, step, progress, started, stages.seconds, isolation, linked)
    finally:
        fold.close()


Links = list[tuple[DdlChange, set[tuple[str, str]]]]


class _StageClock:
    """Seconds per stage of one interval, with Spark's start-up, in whichever stage the runner
    started it, counted apart as "start Spark": what any Spark job pays before its first task,
    not a stage of tidelake's (a benchmark beside a session started beforehand leaves it out)."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner
        self.seconds: dict[str, float] = {}
        self._spark = runner.start_seconds

    def done(self, stage: str, since: float) -> None:
        spark, self._spark = self.runner.start_seconds - self._spark, self.runner.start_seconds
        if spark:
            self.seconds["start Spark"] = self.seconds.get("start Spark", 0.0) + spark
        self.seconds[stage] = time.perf_counter() - since - spark


def _window_rows(sides: list[tuple[PKey, SideOutput]], offsets: dict[PKey, tuple[int, int]]) -> int:
    """The change-log rows of the offsets the window reads, each segment's counted by the share
    of its offsets inside the window: a message may carry many rows, and the segment holding the
    previous interval's pending changes is read whole but only its last changes are selected
    (on a one-minute schedule, ~1k of ~60k rows: bench lag)."""
    total = 0
    for key, side in sides:
        lo, hi = offsets[key]
        inside = min(side.end, hi) - max(side.start, lo)
        if inside > 0:
            total += -(-side.rows * inside // (side.end - side.start))
    return total


def _ddl_links(ddls: list[DdlChange], isolation: RunIsolation) -> tuple[Links, list[DdlChange]]:
    """The tables each of the run's DDL moves state between (a rename's old and new name, a copy
    and its source), and the DDL that parse. A DDL that does not parse isolates its table."""
    linked: Links = []
    parsed = []
    for e in ddls:
        try:
            changes = ddl_changes(e)
        except Exception as exc:  # DdlParseError, or any other failure of this statement's parse
            ref = statement_table(e)
            if ref is None or not table_error(exc):
                raise  # which table it is about is unknown: nothing to hold back
            isolation.isolate({ref}, exc, e)
            continue
        parsed.append(e)
        for ref, change in changes:
            if isinstance(change, RenameTable):
                linked.append((e, {ref, (change.database, change.table)}))
            elif isinstance(change, CreateTableLike):
                linked.append((e, {ref, change.source}))
    _involve(linked, isolation)
    return linked, parsed


def _involve(linked: Links, isolation: RunIsolation) -> None:
    """A DDL of the run that moves state from or into an isolated table isolates the other table too
    (to a fixpoint): neither can be applied from or into a state the run does not know."""
    changed = True
    while changed:
        changed = False
        for e, refs in linked:
            out = sorted(r for r in refs if isolation.out(r))
            if out and len(out) < len(refs):
                isolation.involve(refs, out[0], e)
                changed = True


def _cause(plan: TablePlan, exc: BaseException) -> DdlChange | None:
    """The plan's DDL a commit error names (UnsupportedSchemaChange quotes its statement)."""
    return next((s.ddl for s in plan.steps if isinstance(s, SchemaStep) and repr(s.ddl.sql) in str(exc)), None)


def _commit_plans(committer: TableCommitter, plans: list[TablePlan], run: RunContext, fold: Fold,
                  step: Callable[[str], None], progress: Callable[[str, int, int], None],
                  isolation: RunIsolation, links: Links, replay: bool = False) -> None:
    """Every table's plan, committed in rounds -- or one by one in plan order when a plan renames a
    table or copies one (``CREATE TABLE ... LIKE``): those read or make another plan's table.

    A round advances every unfinished plan to its next data step (schema changes staged, catalog
    I/O, side by side in threads), then the executors rewrite all of those tables in one job
    (``Fold.rewrite``), and the plans go on with their files to the next data step or their
    commit. Most runs take one round: a Spark job per run, not per table.

    A plan that fails with one table's error (``spark.commit.isolation.table_error``) isolates its table
    and those a DDL of the run links to it (or fails the run, as ``on_table_error`` says); its
    transaction is not committed, and the other plans go on.

    ``replay``: W is published already and ``plans`` are only those of tables behind it (brought
    from an isolated table's held W): the run that published W committed the others and stamped
    them, and those stamps say nothing about these plans."""

    def isolate(plan: TablePlan, exc: BaseException) -> None:
        isolation.isolate({plan.ref}, exc, _cause(plan, exc))
        _involve(links, isolation)

    progress("commit", 0, len(plans))
    # Plans that rename or copy tables: a later plan's failure may isolate a table committed before it
    # (``_involve``), which must then carry no tag of W, so their tables are tagged after all commits.
    linked = any(isinstance(c, (RenameTable, CreateTableLike)) for p in plans for s in p.steps
                 if isinstance(s, SchemaStep) for c in s.changes)
    if linked or len(plans) < 2:
        # A retry skips what its earlier attempt committed: a plan's table may have been renamed
        # since, and another table given its name (commit.TableCommitter.resume_from).
        resume = committer.resume_from(run) if linked and not replay else -1
        for i, plan in enumerate(plans):
            if plan.sequence >= resume:
                if not isolation.out(plan.ref):
                    try:
                        committer.commit_plan(plan, run, fold, tag=not linked)
                    except Exception as exc:
                        if not table_error(exc):
                            raise
                        isolate(plan, exc)
                step(f"committed:{i}")
            progress("commit", i + 1, len(plans))
        return
    # No plan renames or copies a table, so no later plan's failure can isolate a table committed
    # before it: each commit tags its table wm_<W> as well (commit.table._stage_tag).
    steps = {i: committer.commit_steps(plan, run, fold, tag=True) for i, plan in enumerate(plans) if not isolation.out(plan.ref)}
    sent: dict[int, list[FileRewrite] | None] = dict.fromkeys(steps)
    done = len(plans) - len(steps)
    failed: dict[int, BaseException] = {}

    def advance(i: int) -> RewriteRequest | FillRequest | None:
        """Plan ``i`` up to its next data step's request; None once it is committed (or failed)."""
        try:
            return steps[i].send(sent[i])
        except StopIteration:
            step(f"committed:{i}")
            return None
        except Exception as exc:
            if not table_error(exc):
                raise
            failed[i] = exc
            return None

    with ThreadPoolExecutor(max_workers=COMMIT_THREADS, thread_name_prefix="tidelake-commit") as pool:
        while sent:
            requests = {}
            # The first failure stops the run; plans already advancing finish their step.
            for i, request in zip(list(sent), pool.map(advance, list(sent))):
                if request is None:
                    done += 1
                    progress("commit", done, len(plans))
                else:
                    requests[i] = request
            for i in sorted(failed):
                isolate(plans[i], failed.pop(i))
            try:
                rewrites = fold.rewrite(list(requests.values())) if requests else []
            except Exception as exc:
                if not table_error(exc) or isolation.policy != ISOLATE:
                    raise
                rewrites = _rewrite_each(fold, requests, lambda i, e: isolate(plans[i], e))
                for i in [i for i, r in zip(requests, rewrites) if r is None]:
                    steps[i].close()  # its transaction is never committed
                    done += 1
                    progress("commit", done, len(plans))
            sent = {i: r for i, r in zip(requests, rewrites) if r is not None}


class _TimedRewrites:
    """``fold`` whose ``rewrite`` calls add their seconds to ``stages["rewrite"]``: the part of
    "commit and tag" the executors spend rewriting files (the rest is the driver's catalog work)."""

    def __init__(self, fold: Fold, stages: dict[str, float]) -> None:
        self._fold, self._stages = fold, stages
        stages.setdefault("rewrite", 0.0)

    def rewrite(self, requests: Any) -> list[list[FileRewrite]]:
        started = time.perf_counter()
        try:
            return self._fold.rewrite(requests)
        finally:
            self._stages["rewrite"] += time.perf_counter() - started

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fold, name)


def _rewrite_each(fold: Fold, requests: dict[int, RewriteRequest],
                  isolate: Callable[[int, BaseException], None]) -> list[list[FileRewrite] | None]:
    """A round's rewrites one request at a time, after the round failed on one table's values:
    each request that fails alone isolates its plan (None in its place)."""
    out: list[list[FileRewrite] | None] = []
    for i, request in requests.items():
        try:
            out.append(fold.rewrite([request])[0])
        except Exception as exc:
            if not table_error(exc):
                raise
            isolate(i, exc)
            out.append(None)
    return out


def _commit_run(config: PipelineConfig, storage: Storage, tables: cat.RunTables, manifest: Manifest, interval: str, fold: Fold,
                ddls: list[DdlChange], pending: dict[PKey, int], previous: Checkpoint | None, w: int, w_prev: int,
                marks: PartitionWatermarks, history: dict[PKey, list[SegmentRef]], derived_ddl: list[tuple[Any, ...]],
                sides: list[tuple[PKey, SideOutput]], quarantine: Any, lease: Lease, step: Callable[[str], None], progress: Callable[[str, int, int], None],
                started: float, stages: dict[str, float], isolation: RunIsolation, linked: Links) -> ApplyResult:
    """Stage 4 and on: commit every table's plan, tag, checkpoint, publish."""
    for key, offset in fold.outcome.pending.items():
        pending[key] = min(pending.get(key, offset), offset)
    for part in manifest.partitions:
        pending.setdefault((part.topic, part.partition), part.end)
    skipped = fold.outcome.skipped
    events_applied = fold.outcome.applied

    # A table past W while W is not published would need rewriting behind main's head: the
    # walk in _bring_forward never gets here for such a run, unless runs broke the one-at-a-time rule.
    ahead = {n: tw for n, tw in _table_watermarks(tables).items() if tw > w}
    if ahead and not storage.exists(published_path(config.name, w)):
        raise TablesAheadError(
            f"tables {', '.join(f'{n} (at {tw})' for n, tw in sorted(ahead.items()))} are past watermark {w} of "
            f"{interval}, which is not published: a run outside the pipeline's lease (or an older tidelake) wrote them, "
            "and W cannot be published consistently any more. Rebuild the pipeline under a new name over the same "
            "archive (README, Repairing history)"
        )
    run = RunContext(w, w_prev, interval)
    committer = TableCommitter(tables.catalog, config, step, lease.check, tables)
    plans = build_apply_plans(ddls, fold.outcome.summaries, lambda: _lake_tables(tables))
    replay = storage.exists(published_path(config.name, w))
    if replay:
        # A replay of a published W (the walk bringing a table from its held W): every table W lists
        # is at W already, as publishing comes last. Only tables retried from their held W, or behind
        # W, are applied -- never one renamed or dropped since, whose old name would make it again.
        plans = [p for p in plans if p.ref in isolation.retried or _behind(tables, p.ref, w)]
    committing = time.perf_counter()
    _commit_plans(committer, plans, run, _TimedRewrites(fold, stages), step, progress, isolation, linked, replay)
    isolated = isolation.at_w()
    before = read_isolated(storage, config.name)
    if {**before, **isolation.new} != before:
        lease.check()
        write_isolated(storage, config.name, {**before, **isolation.new})  # before the tables left untagged are tagged
    step("isolated")
    every = tables.all()
    if w:  # W = 0: some partition has not reported a watermark yet; nothing is consistent
        for i, table in enumerate(every):
            # An isolated table stops at its held W; one past W (made later, in a replayed interval) has its own tags.
            # Most tables the run committed carry the tag already (their commit made it).
            if cat.upstream_name(table) not in isolated and table_watermark(table) <= w and tag_name(w) not in table.refs():
                lease.check()
                tag_table(table, w)
            progress("tag", i + 1, len(every))
    stages["commit and tag"] = time.perf_counter() - committing
    step("tagged")
    checkpoint = Checkpoint(manifest.interval_start, manifest.interval_end, w, dict(marks.marks), pending,
                            ddl_applied=tuple(derived_ddl), segments=_carried_segments(history, pending))
    cp_path = checkpoint_path(config.name, manifest.interval_start, manifest.interval_end)
    try:
        storage.create(cp_path, checkpoint.to_json())
    except AlreadyExists:
        existing = Checkpoint.from_json(storage.read(cp_path))
        if existing.watermark != w or existing.pending != pending:
            raise ApplyError(f"{cp_path}: a checkpoint with watermark {existing.watermark} exists, this run computed {w}") from None
    step("checkpointed")
    every = tables.all()
    names = {cat.table_label(t): t for t in every}
    outcome = NOT_CONSISTENT
    caught_up: list[str] = []
    if w:
        lease.check()
        # A W published already (a replay) is only confirmed: a table made after it carries no tag of it.
        again = storage.exists(published_path(config.name, w))
        view = [PublishedTable(*cat.upstream_name(t), str(t.metadata.table_uuid), t.snapshot_by_name(tag_name(w)).snapshot_id)
                for t in every if DROPPED not in t.properties and cat.upstream_name(t) not in isolated
                and not (again and t.snapshot_by_name(tag_name(w)) is None)]
        new = publish_watermark(storage, config.name, w, interval, view, [e.to_dict() for _, e in sorted(isolated.items())])
        outcome = PUBLISHED if new else CONFIRMED
        if not new:  # W was published with tables isolated that this replay brought to it: its record names them now
            caught_up = record_caught_up(storage, config.name, w, view)
    after = isolation.after()
    if after != read_isolated(storage, config.name):
        lease.check()
        write_isolated(storage, config.name, after)  # retried tables that went through: behind now, not isolated
    starts = {(p.topic, p.partition): p.start for p in manifest.partitions}
    report = {
        "step": "apply",
        "pipeline": config.name,
        "outcome": outcome,
        "finished_at": dt.datetime.now(dt.UTC).isoformat(),
        "interval": {"start": manifest.interval_start.isoformat(), "end": manifest.interval_end.isoformat()},
        "watermark": w,
        "previous_watermark": w_prev,
        "watermark_time": _w_time(w),
        "lag_seconds": round(manifest.interval_end.timestamp() - (w >> 18) / 1000, 3) if w else None,
        # This interval's messages; segments of earlier intervals read again for their pending
        # changes are counted apart, so "decoded" matches what the interval landed.
        "messages_decoded": sum(side.messages for key, side in sides if side.start >= starts.get(key, 0)),
        "events_decoded": sum(side.events for key, side in sides if side.start >= starts.get(key, 0)),
        "messages_reread": sum(side.messages for key, side in sides if side.start < starts.get(key, 0)),
        "already_applied_skipped": skipped,
        "quarantined": len(quarantine.new),
        "bad_messages_accepted": len(quarantine.accepted),
        "tables": {
            name: {
                "events_applied": events_applied.get(name, 0),
                "snapshot": t.current_snapshot().snapshot_id if t.current_snapshot() else None,
                "dropped": DROPPED in t.properties,
                **({"isolated": True} if cat.upstream_name(t) in isolated else {}),
            }
            for name, t in sorted(names.items())
        },
        # Tables held at their last good W (on_table_error = "isolate"): not tagged at this W.
        "isolated": _isolated_report(list(isolated.values())),
        # Tables this run brought to a W that was published while they were isolated.
        "caught_up": caught_up,
        "seconds": round(time.perf_counter() - started, 3),
        # Where the run's time went: decode (stage 1), fold (3), the tables' rewrites and commits (4);
        # "start Spark" apart, when this interval started it.
        "stage_seconds": {name: round(v, 3) for name, v in stages.items()},
        "ran_in": fold.where,  # "driver": without Spark (driver_max_messages)
    }
    storage.write(layout.report_path(config.name, manifest.interval_start, manifest.interval_end, "apply"),
                  orjson.dumps(report, option=orjson.OPT_INDENT_2))
    step("published")
    return ApplyResult(w, w_prev, sorted(names), report)
