"""The run: a pipeline's walk to an interval's W (``PipelineRun``) and one interval applied (``IntervalRun``).

``PipelineRun`` holds what every step of a run shares -- the pipeline's config, its storage, its
tables as the run sees them, the runner, the lease, the fault and progress hooks -- and walks the
chain of landed intervals (``bring_forward``): intervals before the target that are not
published yet are applied first, in order; an interval whose tables are all at or past its W
and whose W is published is skipped -- or, for the target, *confirmed* without writing, so
``main`` never moves back; a table behind (its own ``tidelake.watermark``, or an isolated
table's held W) makes the walk replay every interval since, each committing only to the tables
still below its W.

``IntervalRun`` applies one interval (landed by stage 1) through stages 2 to 5 of
docs/architecture.md and publishes it, one method per step, over the interval's window
(``spark.fold.window.IntervalWindow``, the one the change feed reads back):

- ``decode`` (stage 2): each partition's raw segments from its pending offset to the manifest's end
  are decoded once into the change log on the executors; the driver reads only their side outputs.
- ``quarantine``: undecodable messages are recorded once; ``on_bad_message`` fails or goes on.
- ``select``: W = min over every partition of its greatest watermark; the DDL in (W_prev, W].
- ``fold`` (stage 3): the changes with W_prev < commitTs <= W folded on the executors into one net
  change per table, DDL segment and key (``spark.fold``, the one rule in ``net_change``).
- ``commit`` (stages 4 and 5): per table, executors rewrite the files holding touched keys; the
  driver commits one transaction per table (``spark.commit.rounds``); a table's own failure holds it.
- ``tag``, ``checkpoint``, ``publish``: every table tagged ``wm_<W>``, the checkpoint written,
  W published last; then the report (``spark.commit.report``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from collections.abc import Callable
from typing import Any

import orjson

from cdc_codecs import TidelakeError
from spark.archive import layout
from spark.archive.checkpoint import Checkpoint, checkpoint_path, read_checkpoint
from spark.archive.floors import IntervalPruned, pruned_intervals
from spark.runtime.runners import Runner
from spark.archive.manifest import Manifest, list_manifests, read_manifest
from spark.archive.storage import AlreadyExists, Storage
from spark.commit.isolation import (
    Isolated, RunIsolation, mark_held, published_names, read_isolated, write_isolated,
)
from spark.archive.lease import Lease
from spark.commit.plan import TableRef, UpstreamTables, build_apply_plans
from spark.commit.published import (
    CONFIRMED, NOT_CONSISTENT, PUBLISHED, PublishedTable, is_retired, publish_watermark, published_path,
    read_published, record_catch_up, record_caught_up,
)
from spark.commit.quarantine import quarantine_messages
from spark.commit.report import applied_report, confirmed_report, write_report
from spark.commit.rounds import Links, TimedRewrites, commit_plans, ddl_links
from spark.commit.table import RunContext, TableCommitter, tag_table
from spark.core.watermark import tag_name
from spark.config import PipelineConfig
from spark.core.keys import Order, change_order
from spark.fold.window import IntervalWindow, carried_segments
from spark.runtime import credentials
from spark.write.plane import Fold, LocalPlane, SparkPlane
from spark.runtime.tasks import sized
from spark.tables import catalog as cat
from spark.tables.properties import CREATED_AT, DROPPED, table_watermark, walk_watermark


class ApplyError(TidelakeError):
    """The run could not bring the tables to the interval's watermark."""


class BadMessagesError(ApplyError):
    """Messages could not be decoded and the pipeline's policy is to fail."""


class TablesAheadError(ApplyError):
    """Tables are past a watermark that is not published: a writer outside the lease moved them."""


@dataclasses.dataclass
class ApplyResult:
    watermark: int
    previous: int
    tables: list[str]
    report: dict[str, Any]
    replayed: list[str] = dataclasses.field(default_factory=list)

    @property
    def outcome(self) -> str:
        return self.report["outcome"]


@dataclasses.dataclass(frozen=True)
class Interval:
    """A landed interval of the chain: its bounds and its manifest."""

    start: dt.datetime
    end: dt.datetime
    manifest_path: str

    @property
    def name(self) -> str:
        return f"{layout.instant(self.start)}_{layout.instant(self.end)}"


def _nothing(*_: Any) -> None:
    return None


class PipelineRun:
    """One run of a pipeline (``spark.commit.apply.apply_interval``), holding the pipeline's lease:
    see the module's docstring. ``step`` is called with a step name at each step boundary (tests
    inject crashes there); ``progress(step, done, total)`` as an interval is applied."""

    def __init__(self, config: PipelineConfig, storage: Storage, tables: cat.RunTables, runner: Runner | None = None,
                 lease: Lease | None = None, step: Callable[[str], None] = _nothing,
                 progress: Callable[[str, int, int], None] = _nothing) -> None:
        self.config, self.storage, self.tables = config, storage, tables
        self.runner, self.lease, self.step, self.progress = runner, lease, step, progress
        self.chain = [Interval(s, e, p) for s, e, p in list_manifests(storage, config.name)]

    @property
    def pipeline(self) -> str:
        return self.config.name

    def target(self, start: dt.datetime, end: dt.datetime) -> int | None:
        """The chain's index of the interval [start, end); None if it is not landed."""
        return next((i for i, iv in enumerate(self.chain) if (iv.start, iv.end) == (start, end)), None)

    # ---------------------------------------------------------------- what the lake holds

    def lake_tables(self) -> list[TableRef]:
        """The upstream names of the tables the lake holds, dropped ones left out."""
        return [cat.upstream_name(t) for t in self.tables.all() if DROPPED not in t.properties]

    def table_watermarks(self) -> dict[str, int]:
        return {cat.table_label(t): walk_watermark(t) for t in self.tables.all()}

    def behind(self, ref: TableRef, w: int) -> bool:
        table = self.tables.load(*ref)
        return table is not None and table_watermark(table) < w

    def lowest(self, applied: int | None = None) -> int | None:
        """The lowest watermark the walk brings tables forward from: every table's own, but an isolated
        table's held W instead -- so each run tries it again from there, once: after the walk applied
        the interval ending at ``applied``, a table still held below it waits for the next run."""
        held = read_isolated(self.storage, self.pipeline)
        names = {e.name for e in held.values()}
        marks = [w for name, w in self.table_watermarks().items() if name not in names]
        marks += [e.held_at for e in held.values() if e.retryable and (applied is None or e.held_at >= applied)]
        return min(marks, default=None)

    def checkpoint_of(self, iv: Interval) -> Checkpoint | None:
        return read_checkpoint(self.storage, self.pipeline, iv.start, iv.end)

    def done(self, cp: Checkpoint | None) -> bool:
        return cp is not None and (cp.watermark == 0 or self.storage.exists(published_path(self.pipeline, cp.watermark)))

    def base(self, lowest: int | None) -> tuple[int, dict[int, Checkpoint | None]]:
        """The newest interval done for every table (published, tables at or past its W; -1: none),
        and the checkpoints read to find it. Reads stay bounded by what is left to do, not by the
        history: runs apply intervals in order, so everything before the base is done too."""
        checkpoints: dict[int, Checkpoint | None] = {}
        for i in range(len(self.chain) - 1, -1, -1):
            cp = checkpoints[i] = self.checkpoint_of(self.chain[i])
            if self.done(cp) and (lowest is None or lowest >= cp.watermark):  # type: ignore[union-attr]
                return i, checkpoints
        pruned = pruned_intervals(self.storage, self.pipeline)
        if pruned is not None:  # the walk would start before the first kept interval, from state that is gone
            raise IntervalPruned(
                f"pipeline {self.pipeline}: tables are behind every kept checkpoint (lowest table watermark {lowest}); "
                f"replaying them needs intervals older than the retained history (maintenance deleted the records "
                f"of intervals ending at or before {pruned['before']}; the first W kept is {pruned['watermark']})")
        return -1, checkpoints

    # ---------------------------------------------------------------- the walk

    def bring_forward(self, target: int) -> ApplyResult:
        """The target interval applied or confirmed, after every interval before it the tables need."""
        # The lowest table watermark: an interval at or below it is done for every table. Only an
        # applied interval moves tables, so it is read again only then.
        lowest = self.lowest()
        base, checkpoints = self.base(lowest)
        if target <= base:  # an interval whose W is published and every table past it: confirmed
            return self.confirm_target(target, checkpoints)
        # Every run leaves main at the latest published W at least: a table behind it is replayed.
        last_published = max((i for i, cp in checkpoints.items() if i > base and self.done(cp)), default=-1)
        previous = checkpoints.get(base) if base >= 0 else None
        result: ApplyResult | None = None
        replayed: list[str] = []
        for i in range(base + 1, max(target, last_published) + 1):
            iv, cp = self.chain[i], checkpoints[i]
            if self.done(cp) and (lowest is None or lowest >= cp.watermark):  # type: ignore[union-attr]
                if i == target:
                    result = self.confirm(iv, cp, previous)  # type: ignore[arg-type]
                previous = cp
                continue
            if i != target:
                replayed.append(layout.instant(iv.end))
            r = IntervalRun(self, read_manifest(self.storage, iv.manifest_path), previous).apply()
            lowest = self.lowest(r.watermark)
            if i == target:
                result = r
            previous = self.checkpoint_of(iv)
        assert result is not None
        result.replayed = replayed
        return result

    def confirm_target(self, target: int, checkpoints: dict[int, Checkpoint | None]) -> ApplyResult:
        """An interval at or before the base: its W is published and every table is past it."""
        cp = checkpoints.get(target) or self.checkpoint_of(self.chain[target])
        previous = self.checkpoint_of(self.chain[target - 1]) if target else None
        if cp is None:
            return self.confirm_landed_late(target)
        return self.confirm(self.chain[target], cp, previous)

    def confirm_landed_late(self, target: int) -> ApplyResult:
        """An interval landed after a later one was applied (a backfill of 05:00, then of 04:00):
        the later interval's offsets began where the one before this ended, so this one holds no
        message and has nothing to apply. It is confirmed at the W of the newest applied interval
        before it -- what the pipeline held at its end."""
        iv = self.chain[target]
        manifest = read_manifest(self.storage, iv.manifest_path)
        if any(p.end > p.start for p in manifest.partitions):
            raise ApplyError(f"interval {iv.name} was landed after a later interval was applied, yet holds messages "
                             f"({iv.manifest_path}); its offsets overlap the later interval's: re-land it")
        before = next((cp for cp in (self.checkpoint_of(self.chain[i]) for i in range(target - 1, -1, -1))
                       if cp is not None), None)
        cp = before or Checkpoint(iv.start, iv.end, 0, {}, {})
        return self.confirm(iv, cp, before, note="landed after a later interval that took its offsets: it holds no "
                                                 "message; confirmed at the W of the interval before it")

    def confirm(self, iv: Interval, cp: Checkpoint, previous: Checkpoint | None, note: str | None = None) -> ApplyResult:
        """The interval's W is published and every table is at or past it: nothing to write."""
        w = cp.watermark
        # A W the retention policy retired has no tags by design: confirmed as published, not re-derived.
        retired = bool(w) and is_retired(self.storage, self.pipeline, w)
        isolated = (read_published(self.storage, self.pipeline, w) or {}).get("isolated", []) if w else []
        held = {(e["database"], e["table"]) for e in isolated}  # not tagged at W by design
        missing = [".".join(cat.upstream_name(t)) for t in self.tables.all()
                   if w and not retired and t.snapshot_by_name(tag_name(w)) is None and _existed_at(t, w)
                   and cat.upstream_name(t) not in held]
        if missing:
            raise ApplyError(f"watermark {w} is published but {', '.join(missing)} carry no tag {tag_name(w)}; "
                             f"run `tidelake repair --from {w}` to re-derive it from the archive")
        note = ((note or "already published by an earlier run; tables and tags left as they are")
                + ("; W is retired by the retention policy (its tags are gone)" if retired else ""))
        report = confirmed_report(pipeline=self.pipeline, start=iv.start, end=iv.end, w=w,
                                  w_prev=previous.watermark if previous else 0, note=note,
                                  isolated=[Isolated.from_dict(e) for e in isolated])
        write_report(self.storage, self.pipeline, iv.start, iv.end, report, confirmation=True)
        return ApplyResult(w, report["previous_watermark"], sorted(self.table_watermarks()), report)


def _existed_at(table: Any, watermark: int) -> bool:
    """Whether the table existed at W (tables created later carry no earlier tags)."""
    created = table.properties.get(CREATED_AT)
    return created is None or int(created) <= watermark


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


def _plane(runner: Runner) -> Any:
    context = getattr(runner, "context", None)
    return SparkPlane(context) if context is not None else LocalPlane()


class IntervalRun:
    """One interval applied by ``run`` after the interval whose checkpoint is ``previous``: see the
    module's docstring. Each step leaves what the next reads on the object."""

    def __init__(self, run: PipelineRun, manifest: Manifest, previous: Checkpoint | None) -> None:
        self.run, self.manifest, self.previous = run, manifest, previous
        self.config, self.storage, self.tables = run.config, run.storage, run.tables
        assert run.runner is not None and run.lease is not None, "an interval is applied under the lease, with a runner"
        self.runner: Runner = run.runner
        self.lease: Lease = run.lease
        self.started = time.perf_counter()
        self.stages = _StageClock(self.runner)
        self.window = IntervalWindow.open(self.config, self.storage, manifest, previous)
        self.interval = self.window.interval
        self._lake: list[TableRef] | None = None  # lake_tables, read once

    def lake_tables(self) -> list[TableRef]:
        """The upstream names of the lake's tables (dropped ones left out) when the interval's first
        run started: the tables a ``DROP DATABASE`` of the interval drops, beside those it makes
        (``UpstreamTables``). A run that died mid-commit leaves tables renamed, made and dropped
        under other names than at the start, and the retry must plan exactly as it did: its
        ``TableCommitter.resume_from`` counts the plans, and the fold cuts rows at the same DDL.
        So the first run whose DDL asks (before its first catalog write) records them, create-only,
        and every later run of the interval reads them."""
        if self._lake is None:
            path = layout.lake_tables_path(self.config.name, self.manifest.interval_start, self.manifest.interval_end)
            if not self.storage.exists(path):
                self.lease.check()
                try:
                    self.storage.create(path, orjson.dumps({"tables": sorted(self.run.lake_tables())}))
                except AlreadyExists:
                    pass  # recorded by an earlier run of the interval: its record counts
            self._lake = [(d, t) for d, t in orjson.loads(self.storage.read(path))["tables"]]
        return self._lake

    def apply(self) -> ApplyResult:
        self.decode()
        self.quarantine()
        self.select()
        fold = self.fold()
        try:
            self.commit(fold)
            self.tag()
            self.checkpoint(fold)
            return self.publish(fold)
        finally:
            fold.close()

    # Stage 2 on the executors: every raw segment is decoded once into the change log; the
    # driver gets the side outputs (watermarks, DDL, bad messages) and nothing per row.
    def decode(self) -> None:
        needed = len(self.window.needed)
        self.run.progress("decode", 0, needed)
        self.decoded = self.window.decode(self.runner)
        self.sides = [(key, side) for key, outputs in self.decoded.items() for side in outputs]
        self.run.progress("decode", needed, needed)
        self.stages.done("decode", self.started)
        self.run.step("decoded")

    def quarantine(self) -> None:
        """Quarantine first: nothing undecodable is lost, whatever the policy says next."""
        self.quarantined = quarantine_messages(self.storage, self.config.name, self.window.errors(self.decoded),
                                               self.interval, accept=self.config.on_bad_message == "continue")

    def select(self) -> None:
        """W, the DDL in (W_prev, W], the tables held back, and the DDL's links between tables."""
        self.w_prev = self.window.w_prev
        self.marks, self.w = self.window.watermark(self.decoded)
        selected = self.window.select_ddl(self.decoded, self.w)
        self.pending = dict(selected.pending)
        self.derived_ddl = selected.derived
        if self.quarantined.unaccepted:
            first = self.quarantined.unaccepted[0]
            raise BadMessagesError(
                f"{len(self.quarantined.unaccepted)} message(s) could not be decoded (first: {first}); they are "
                f"quarantined under {self.storage.url}/{layout.pipeline_root(self.config.name)}/quarantine. Fix the "
                "producer or set on_bad_message: continue, then rerun the interval"
            )
        # Tables held back: a DDL tidelake cannot parse isolates its table (or fails the run), and
        # nothing of an isolated table's is planned.
        self.isolation = RunIsolation(self.config.on_table_error, read_isolated(self.storage, self.config.name),
                                      self.w_prev, self.w, self.interval,
                                      lambda: published_names(self.storage, self.config.name, self.w_prev))
        self.links: Links
        self.links, self.ddls = ddl_links(selected.applied, self.isolation)

    # Stage 3 on the executors: the change-log rows of (W_prev, W], folded per key. A table's rows
    # are folded only between two DDLs that change it (the DDL are in commit order).
    def fold(self) -> Fold:
        ddl_orders: dict[TableRef, list[Order]] = {}
        upstream = UpstreamTables(self.lake_tables)
        for e in self.ddls:
            for ref in {ref for ref, _ in upstream.changes(e)}:
                ddl_orders.setdefault(ref, []).append(change_order(e))  # type: ignore[arg-type]
        self.run.progress("net change", 0, 1)
        folding = time.perf_counter()
        schemas = {sid: blob for _, side in self.sides for sid, blob in side.schemas.items()}
        rows = sum(side.rows for _, side in self.sides)
        # The fold and the rewrite hold the window's rows: sized by the change-log rows it selects,
        # where decoding was sized by the messages it decoded (ensure_change_log).
        fold = _plane(sized(self.runner, self.window.rows(self.decoded))).fold(
            credentials.task_config(self.config), self.window.change_log_paths(),
            self.window.fold_window(self.w, ddl_orders, self.decoded), schemas, rows)
        self.stages.done("fold", folding)
        self.run.progress("net change", 1, 1)
        for key, offset in fold.outcome.pending.items():
            self.pending[key] = min(self.pending.get(key, offset), offset)
        for part in self.manifest.partitions:
            self.pending.setdefault((part.topic, part.partition), part.end)
        return fold

    # Stages 4 and 5: every table's plan, rewritten on the executors and committed in rounds (spark.commit.rounds).
    def commit(self, fold: Fold) -> None:
        w = self.w
        # A table past W while W is not published would need rewriting behind main's head: the
        # walk never gets here for such a run, unless runs broke the one-at-a-time rule.
        ahead = {n: tw for n, tw in self.run.table_watermarks().items() if tw > w}
        if ahead and not self.storage.exists(published_path(self.config.name, w)):
            raise TablesAheadError(
                f"tables {', '.join(f'{n} (at {tw})' for n, tw in sorted(ahead.items()))} are past watermark {w} of "
                f"{self.interval}, which is not published: a run outside the pipeline's lease (or an older tidelake) "
                "wrote them, and W cannot be published consistently any more. Rebuild the pipeline under a new name "
                "over the same archive (docs/repair.md)"
            )
        context = RunContext(w, self.w_prev, self.interval)
        committer = TableCommitter(self.tables.catalog, self.config, self.run.step, self.lease.check, self.tables)
        committer.released = frozenset(self.isolation.gone)
        plans = build_apply_plans(self.ddls, fold.outcome.summaries, self.lake_tables)
        replay = self.storage.exists(published_path(self.config.name, w))
        if replay:
            # A replay of a published W (the walk bringing a table from its held W): every table W lists
            # is at W already, as publishing comes last. Only tables retried from their held W, or behind
            # W, are applied -- never one renamed or dropped since, whose old name would make it again.
            plans = [p for p in plans if p.ref in self.isolation.retried or self.run.behind(p.ref, w)]
        self.committing = time.perf_counter()
        commit_plans(committer, plans, context, TimedRewrites(fold, self.stages.seconds), self.run.step,
                     self.run.progress, self.isolation, self.links, replay)
        self.isolated = self.isolation.at_w()
        before = read_isolated(self.storage, self.config.name)
        if {**before, **self.isolation.new} != before:
            self.lease.check()
            # Before the tables left untagged are tagged: a crash leaves them held, not tagged at W.
            write_isolated(self.storage, self.config.name, {**before, **self.isolation.new})
            for ref, entry in sorted(self.isolation.new.items()):
                if (table := self.tables.load(*ref)) is not None:
                    mark_held(table, entry)
        self.run.step("isolated")

    def tag(self) -> None:
        """Every table not held tagged ``wm_<W>`` (most the run committed carry it already: their commit made it)."""
        w, every = self.w, self.tables.all()
        if w:  # W = 0: some partition has not reported a watermark yet; nothing is consistent
            for i, table in enumerate(every):
                # An isolated table stops at its held W; one past W (made later, in a replayed interval) has its own tags.
                if (cat.upstream_name(table) not in self.isolated and table_watermark(table) <= w
                        and tag_name(w) not in table.refs()):
                    self.lease.check()
                    tag_table(table, w)
                self.run.progress("tag", i + 1, len(every))
        self.stages.seconds["commit and tag"] = time.perf_counter() - self.committing
        self.run.step("tagged")

    def checkpoint(self, fold: Fold) -> None:
        m = self.manifest
        checkpoint = Checkpoint(m.interval_start, m.interval_end, self.w, dict(self.marks.marks), self.pending,
                                ddl_applied=tuple(self.derived_ddl),
                                segments=carried_segments(self.window.history, self.pending))
        path = checkpoint_path(self.config.name, m.interval_start, m.interval_end)
        try:
            self.storage.create(path, checkpoint.to_json())
        except AlreadyExists:
            existing = Checkpoint.from_json(self.storage.read(path))
            if existing.watermark != self.w or existing.pending != self.pending:
                raise ApplyError(f"{path}: a checkpoint with watermark {existing.watermark} exists, this run computed "
                                 f"{self.w}") from None
        self.run.step("checkpointed")

    def publish(self, fold: Fold) -> ApplyResult:
        """W published last (or, replayed, its record names the tables caught up), then the report."""
        w, storage, pipeline = self.w, self.storage, self.config.name
        every = self.tables.all()
        outcome, caught_up = NOT_CONSISTENT, []
        if w:
            self.lease.check()
            # A W published already (a replay) is only confirmed: a table made after it carries no tag of it.
            again = storage.exists(published_path(pipeline, w))
            view = [PublishedTable(*cat.upstream_name(t), str(t.metadata.table_uuid),
                                   t.snapshot_by_name(tag_name(w)).snapshot_id)
                    for t in every if DROPPED not in t.properties and cat.upstream_name(t) not in self.isolated
                    and not (again and t.snapshot_by_name(tag_name(w)) is None)]
            new = publish_watermark(storage, pipeline, w, self.interval, view,
                                    [e.to_dict() for _, e in sorted(self.isolated.items())])
            outcome = PUBLISHED if new else CONFIRMED
            if not new:  # W was published with tables isolated that this replay brought to it: its record names them now
                caught_up = record_caught_up(storage, pipeline, w, view)
        after = self.isolation.after()
        if after != read_isolated(storage, pipeline):
            self.lease.check()
            released = sorted(self.isolation.retried - set(after))
            for ref in released:  # went through: the next W announced names them
                record_catch_up(storage, pipeline, *ref, self.isolation.before[ref].held_at, w)
            write_isolated(storage, pipeline, after)  # retried tables that went through: behind now, not isolated
            for ref in released:
                if (table := self.tables.load(*ref)) is not None:
                    mark_held(table, None)
        m = self.manifest
        report = applied_report(
            pipeline=pipeline, outcome=outcome, start=m.interval_start, end=m.interval_end, w=w, w_prev=self.w_prev,
            sides=self.sides, starts={(p.topic, p.partition): p.start for p in m.partitions},
            skipped=fold.outcome.skipped, quarantine=self.quarantined, tables=every,
            events_applied=fold.outcome.applied, isolated=self.isolated, caught_up=caught_up,
            seconds=time.perf_counter() - self.started, stages=self.stages.seconds, ran_in=fold.where)
        write_report(storage, pipeline, m.interval_start, m.interval_end, report)
        self.run.step("published")
        return ApplyResult(w, self.w_prev, sorted(report["tables"]), report)
