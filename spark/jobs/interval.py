"""One interval, landed and applied in this process (or on Spark), and the schedule's intervals in a
range: what ``tidelake run``, ``backfill`` and the demo call (the DAGs submit ``jobs/land.py`` and
``jobs/apply.py`` instead)."""

from __future__ import annotations

import datetime as dt
import logging
import os
from contextlib import nullcontext
from typing import Any

log = logging.getLogger("tidelake.cli")


def run_interval(config: Any, start: dt.datetime, end: dt.datetime, spark_master: str | None = None,
                 progress: Any = None) -> dict[str, Any]:
    """Stages 1 to 5 and publish for one interval, in-process (or on Spark with ``spark_master``).

    Returns ``{"land": report, "apply": report}``; the land report always says whether the
    interval's manifest was ``reused`` (landed by an earlier run) and how many ``messages`` it holds.
    """
    from spark.commit.apply import apply_interval
    from spark.archive.land import land_interval
    from spark.runtime.runners import DriverFirstRunner, LocalRunner
    from spark.runtime.session import build_context

    # With a master: one Spark application for both steps, started only if the interval holds
    # more than driver_max_messages messages.
    runner: Any = LocalRunner()
    if spark_master:
        runner = DriverFirstRunner(lambda: build_context(f"tidelake-{config.name}", spark_master), config.driver_max_messages)
    try:
        log.debug("landing %s %s .. %s", config.name, start.isoformat(), end.isoformat())
        with progress.land() if progress else nullcontext():
            landed = land_interval(config, start, end, runner=runner)
        log.debug("landed %s messages (%s); applying", landed.manifest.messages,
                  "manifest reused" if landed.reused else "new manifest")
        from spark.archive.lease import RUN_ENV
        from spark.runtime import faults

        faults.at("landed")

        # The run's identity for the pipeline's lease: a rerun of this interval after a failure that
        # left the lease held (the store was down) takes it over instead of waiting out its time to live.
        given = os.environ.get(RUN_ENV)
        os.environ[RUN_ENV] = given or f"tidelake-run:{config.name}:{start.isoformat()}..{end.isoformat()}"
        try:
            applied = apply_interval(config, start, end, runner=runner, progress=progress, fault=faults.step_hook())
        finally:
            if given is None:
                os.environ.pop(RUN_ENV, None)
    finally:
        if spark_master:
            runner.stop()
    land = {**landed.report, "messages": landed.manifest.messages, "reused": landed.reused}
    return {"land": land, "apply": applied.report}


def intervals(cron: str, start: dt.datetime, end: dt.datetime) -> list[tuple[dt.datetime, dt.datetime]]:
    """The schedule's data intervals that lie within [start, end)."""
    from croniter import croniter

    it = croniter(cron, start - dt.timedelta(microseconds=1))
    out = []
    a = it.get_next(dt.datetime)
    while True:
        b = it.get_next(dt.datetime)
        if b > end:
            break
        out.append((a, b))
        a = b
    return out

