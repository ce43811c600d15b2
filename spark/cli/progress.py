"""Progress bars on stderr for the long steps of ``tidelake run``, ``backfill``, ``maintain`` and
``changes`` (results go to stdout)."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Any, Iterator


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
