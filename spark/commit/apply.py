"""The run's entry: stages 2 to 5 of an interval (decode, fold, rewrite, commit), then publish W.

``apply_interval(config, start, end)`` leaves the pipeline published at the watermark W of
the interval's end, whatever happened before and in whatever order runs come (contract §5),
holding the pipeline's lease throughout. The run itself is ``spark.commit.run``: the walk over
the chain of landed intervals (``PipelineRun.bring_forward``) and one interval applied, one
method per stage (``IntervalRun``: decode, quarantine, select W and the DDL, fold, commit in
rounds, tag, checkpoint, publish), over the window the change feed also reads
(``spark.fold.window``).

Undecodable messages are quarantined once (``spark.commit.quarantine``); the pipeline's
``on_bad_message`` policy then fails the run or lets it continue. A table whose DDL or values
the run cannot apply fails it, or under ``on_table_error = "isolate"`` is held at its last
good W while the others go on (``spark.commit.isolation``); the walk tries it again from there.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from spark.archive import layout
from spark.archive.checkpoint import applied_from
from spark.archive.floors import require_interval_kept
from spark.archive.format import require_format
from spark.runtime.runners import LocalRunner, Runner
from spark.archive.manifest import chain_index, list_manifests
from spark.archive.storage import Storage, open_storage
from spark.archive.lease import Lease
from spark.commit.run import ApplyError, ApplyResult, BadMessagesError, PipelineRun, TablesAheadError
from spark.config import PipelineConfig
from spark.decode.topic_clock import settle_topic_clocks
from spark.tables import catalog as cat

__all__ = ["ApplyError", "ApplyResult", "BadMessagesError", "TablesAheadError", "apply_interval", "confirm_if_done"]


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
    held = lease or Lease(storage, config.name, ttl_seconds=config.lease_ttl_seconds, wait_seconds=config.lease_wait_seconds,
                          fence=cat.catalog_fence(catalog, config.name))
    run = PipelineRun(config, storage, cat.RunTables(catalog, config), runner or LocalRunner(), held,
                      fault or (lambda step: None), progress or (lambda step, done, total: None))
    require_interval_kept(storage, config.name, interval_start, interval_end, "apply")
    target = run.target(interval_start, interval_end)
    if target is None:
        raise ApplyError(
            f"no manifest for {layout.instant(interval_start)}..{layout.instant(interval_end)}: land the interval first "
            "(the DAG's land task, or spark/jobs/land.py)"
        )
    with held:
        require_format(storage, config.name)  # not an archive a newer tidelake wrote
        return run.bring_forward(target)


def confirm_if_done(config: PipelineConfig, interval_start: dt.datetime, interval_end: dt.datetime,
                    storage: Storage | None = None, catalog: Any = None) -> ApplyResult | None:
    """The interval's confirmation if it is done -- its W published and every table at or past
    it -- decided from the archive and the catalog alone, before any Spark starts; None if a run
    has work to do (or the interval is not landed). The DAG and the apply job call it first, so
    a rerun of an old interval or a completed backfill costs seconds, not two spark-submits."""
    storage = storage or open_storage(config.storage)
    require_interval_kept(storage, config.name, interval_start, interval_end, "confirm")
    chain = list_manifests(storage, config.name)
    target = chain_index(chain, interval_start, interval_end)
    if target is None:
        return None
    if not applied_from(storage, config.name, chain, target):
        return None  # nothing at or after the interval was applied (the schedule's next run): no table is read
    run = PipelineRun(config, storage, cat.RunTables(catalog or cat.open_catalog(config), config))
    base, checkpoints = run.base(run.lowest())
    return run.confirm_target(target, checkpoints) if target <= base else None
