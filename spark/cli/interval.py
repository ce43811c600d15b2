"""Running intervals from the command line: land and apply one interval in process (or on Spark), the
schedule's intervals in a range, and progress bars on stderr. ``tidelake run``, ``backfill`` and the demo."""

from __future__ import annotations

import datetime as dt
import logging
import os
import sys
from contextlib import contextmanager, nullcontext
from typing import Any, Iterator

log = logging.getLogger("tidelake.cli")


class StepProgress:
    """Progress bars (on stderr) for the long steps of a run: land, then apply's decode, net change,
    commit (one per table plan) and tag. Pass it as ``apply_interval``'s ``progress`` callback."""

    def __init__(self, bars: Any) -> None:
        self.bars = bars
        self.tasks: dict[str, Any] = {}

    @contextmanager
    def land(self) -> Iterator[None]:
        task = self._task("land", None)  # one call that reports nothing until done: a pulsing bar
        yield
        self.bars.update(task, total=1, completed=1)

    def __call__(self, step: str, done: int, total: int) -> None:
        self.bars.update(self._task(step, total), total=total, completed=done)

    def _task(self, step: str, total: int | None) -> Any:
        if step not in self.tasks:
            self.tasks[step] = self.bars.add_task(step, total=total)
        return self.tasks[step]

    def clear(self) -> None:
        """Drop the step bars: the next interval of a backfill starts its own."""
        for task in self.tasks.values():
            self.bars.remove_task(task)
        self.tasks.clear()


def progress_bars(quiet: bool) -> Any:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    # Bars on stderr, results on stdout. When stdout is the same terminal, rich routes print()
    # above the bars; when it is a pipe or file, results go there untouched.
    return Progress(TextColumn("{task.description:<12}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=Console(stderr=True), disable=quiet, redirect_stdout=sys.stdout.isatty())


def run_interval(config: Any, start: dt.datetime, end: dt.datetime, spark_master: str | None = None,
                 progress: StepProgress | None = None) -> dict[str, Any]:
    """Steps 1-4 for one interval, in-process (or on Spark with ``spark_master``).

    Returns ``{"land": report, "apply": report}``; the land report always says whether the
    interval's manifest was ``reused`` (landed by an earlier run) and how many ``messages`` it holds.
    """
    from spark.commit.apply import apply_interval
    from spark.archive.land import DriverFirstRunner, LocalRunner, land_interval
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
        from spark.commit.lease import RUN_ENV
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

