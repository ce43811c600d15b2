"""``DriverFirstRunner.expect``: Spark started ahead, on a thread, when the run's size is known
before the driver has loaded its modules; and the job wiring that reads that size."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from spark.runtime.runners import START_SWITCH_INTERVAL, DriverFirstRunner, LocalRunner, SparkRunner


class Context:
    """A context whose start is recorded: by which thread, and whether it was stopped."""

    def __init__(self) -> None:
        self.thread = threading.current_thread()
        self.stopped = False
        self.environment: dict = {}

    def stop(self) -> None:
        self.stopped = True


class Starts:
    def __init__(self, seconds: float = 0.0, error: Exception | None = None) -> None:
        self.seconds, self.error = seconds, error
        self.made: list[Context] = []
        self.began = threading.Event()

    def __call__(self) -> Context:
        self.began.set()
        time.sleep(self.seconds)
        if self.error is not None:
            raise self.error
        self.made.append(Context())
        return self.made[-1]


def test_more_messages_ahead_than_the_driver_takes_start_spark_on_another_thread_at_once() -> None:
    start = Starts(seconds=0.3)
    runner = DriverFirstRunner(start, driver_max_messages=100)
    runner.expect(101)
    assert start.began.wait(5)  # begun before any stage asked for it
    assert not runner.started  # nothing has waited for it yet
    stage = runner.for_messages(101)
    assert isinstance(stage, SparkRunner) and stage.context is start.made[0]
    assert start.made[0].thread is not threading.main_thread()
    assert 0.0 < runner.start_seconds < 5  # what the stage waited: the rest of the start
    runner.for_messages(500)
    assert len(start.made) == 1  # once
    runner.stop()
    assert start.made[0].stopped and not runner.started


def test_while_spark_starts_ahead_the_driver_hands_the_gil_over_sooner() -> None:
    """The start's ~90 calls into the JVM each wait for the GIL while the driver imports: the switch
    interval is short until the context is up, and as it was after, whether the start failed or not."""
    before = sys.getswitchinterval()
    seen: list[float] = []

    def start() -> Context:
        seen.append(sys.getswitchinterval())
        return Context()

    runner = DriverFirstRunner(start, driver_max_messages=0)
    runner.expect(1)
    runner.for_messages(1)
    assert seen == [START_SWITCH_INTERVAL] and START_SWITCH_INTERVAL < before
    assert sys.getswitchinterval() == before
    failing = DriverFirstRunner(Starts(error=RuntimeError("no JVM")), driver_max_messages=0)
    failing.expect(1)
    with pytest.raises(RuntimeError):
        failing.for_messages(1)
    assert sys.getswitchinterval() == before


def test_what_the_driver_takes_or_an_unknown_size_starts_nothing_ahead() -> None:
    start = Starts()
    runner = DriverFirstRunner(start, driver_max_messages=100)
    runner.expect(100)
    runner.expect(None)
    assert isinstance(runner.for_messages(100), LocalRunner)
    runner.stop()
    assert start.made == [] and not start.began.is_set()
    always = DriverFirstRunner(start, driver_max_messages=0)  # 0: Spark for everything, nothing included
    always.expect(0)
    assert start.began.wait(5)
    always.stop()
    assert len(start.made) == 1 and start.made[0].stopped


def test_a_start_ahead_that_no_stage_needed_is_stopped_and_a_failed_one_fails_the_stage_that_needs_it() -> None:
    start = Starts(seconds=0.2)
    runner = DriverFirstRunner(start, driver_max_messages=10)
    runner.expect(11)
    runner.stop()  # the run settled (or failed) without Spark: the start is waited for and stopped
    assert len(start.made) == 1 and start.made[0].stopped and not runner.started
    failing = DriverFirstRunner(Starts(error=RuntimeError("no JVM")), driver_max_messages=10)
    failing.expect(11)
    with pytest.raises(RuntimeError, match="no JVM"):
        failing.for_messages(11)
    failing.stop()  # nothing left to stop


def test_the_apply_job_loads_the_run_s_modules_only_once_it_runs() -> None:
    """``interval_job`` starts Spark ahead before ``run`` loads spark.commit.apply (pyiceberg, pyarrow's
    datasets, SQLAlchemy): a job module importing them at its top would load them first, and the
    driver would again import for a second before the JVM begins to start its context."""
    repo = Path(__file__).resolve().parents[3]
    probe = ("import sys, spark.jobs.apply; "
             "print(sorted(m for m in ('spark.commit.apply', 'pyiceberg', 'sqlalchemy', 'pyarrow.dataset') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=repo, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
