"""Where a stage's tasks run: one after another in this process (``LocalRunner``), one Spark task
each (``SparkRunner``), or small work here and the rest on a Spark context started when first
needed (``DriverFirstRunner``). Land, decode, the fold and the rewrite all take a ``Runner``; the
same task functions run either way."""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Any, Callable, Protocol, Sequence

from spark.runtime import credentials
from spark.runtime.session import stop_context
from spark.runtime.tasks import on_executor

log = logging.getLogger(__name__)

START_SWITCH_INTERVAL = 0.0005  # seconds: the GIL's switch interval while Spark starts on a thread (``_Starting``)


class Runner(Protocol):
    where: str  # "driver" or "spark": what a report's ran_in says
    start_seconds: float  # spent starting Spark so far: a report counts them apart from its stages

    def map(self, fn: Callable[[Any], Any], tasks: Sequence[Any]) -> list[Any]: ...


class LocalRunner:
    """Runs tasks one after another in this process: tiny runs, tests, the demo."""

    where = "driver"
    start_seconds = 0.0

    def map(self, fn: Callable[[Any], Any], tasks: Sequence[Any]) -> list[Any]:
        return [fn(t) for t in tasks]


class SparkRunner:
    """One Spark task per chunk, so landing scales with partitions and executors.

    The secrets of the tasks' pipelines reach the executors as environment variables
    (``credentials``), set on the context before each job: PySpark hands the context's
    environment to every Python worker it starts, as it does with ``spark.executorEnv.*``.
    """

    where = "spark"
    start_seconds = 0.0  # started by its caller

    def __init__(self, spark: Any) -> None:
        self.context = getattr(spark, "sparkContext", spark)  # a SparkContext, or a SparkSession's

    def map(self, fn: Callable[[Any], Any], tasks: Sequence[Any]) -> list[Any]:
        if not tasks:
            return []
        self.context.environment.update(credentials.executor_environment_of_registered())
        return self.context.parallelize(list(tasks), len(tasks)).map(on_executor(fn)).collect()


class DriverFirstRunner:
    """Work of at most ``driver_max_messages`` messages in this process, the rest on Spark, whose
    context starts the first time it is needed.

    A job is submitted before anyone knows how much its interval holds. Each stage knows its
    own size once it has planned -- land: the offsets it lands; decode: the messages of the raw
    segments it must decode; the fold and rewrite: the change-log rows they read -- and asks
    ``sized(runner, n)`` (``spark.runtime.tasks``): small work runs with ``LocalRunner`` (and the
    in-process plane), so a small interval never starts a SparkContext -- its start, executors
    and Python workers are seconds (bench apply --only tiny) that a few hundred messages do not
    need. The same functions run either way.
    """

    def __init__(self, start_context: Callable[[], Any], driver_max_messages: int,
                 load: Callable[[], None] | None = None) -> None:
        self._start_context = start_context
        self._load = load  # what a start ahead imports, imported on the caller's thread (``expect``)
        self._context: Any = None
        self._starting: _Starting | None = None  # a start ``expect`` began, not waited for yet
        self.driver_max_messages = driver_max_messages
        # Seconds the run waited for the context: a job's report counts them apart from its stages
        # (what any Spark job pays first, and what a benchmark beside a warm session leaves out).
        self.start_seconds = 0.0

    @property
    def started(self) -> bool:
        return self._context is not None

    @property
    def starting(self) -> bool:
        """A start ``expect`` began that no stage has waited for yet."""
        return self._starting is not None

    def expect(self, messages: int | None) -> None:
        """The run has at least ``messages`` messages ahead (None: not known yet). If that is more
        than the driver takes, Spark starts now, on a thread, while the driver loads the rest of
        its modules and plans: the JVM starting the context and the driver's imports use a core
        each (a second's wait on two cores), instead of one after the other. On one core they
        take turns and the run takes as long as before. The first stage that needs the context
        waits for it, and fails with the start's error if it failed."""
        if messages is None or self._context is not None or self._starting is not None or self._in_driver(messages):
            return
        log.info("starting Spark: %d messages ahead", messages)
        if self._load is not None:
            self._load()
        self._starting = _Starting(self._start_context)

    @property
    def context(self) -> Any:
        if self._context is None:
            clock = time.perf_counter()
            if self._starting is not None:
                starting, self._starting = self._starting, None
                started = starting.result()
            else:
                log.info("starting Spark")
                started = self._start_context()
            self._context = getattr(started, "sparkContext", started)
            self.start_seconds += time.perf_counter() - clock
        return self._context

    def _in_driver(self, messages: int) -> bool:
        # 0 sends everything to Spark, an empty interval included: a cluster's settings stay exercised.
        return self.driver_max_messages > 0 and messages <= self.driver_max_messages

    def for_messages(self, messages: int) -> LocalRunner | SparkRunner:
        return LocalRunner() if self._in_driver(messages) else SparkRunner(self.context)

    def map(self, fn: Callable[[Any], Any], tasks: Sequence[Any]) -> list[Any]:
        if not tasks:
            return []
        return SparkRunner(self.context).map(fn, tasks)  # work nobody sized: Spark, as before

    def stop(self) -> None:
        if self._starting is not None:  # started ahead and never needed (the run failed, or settled without it)
            starting, self._starting = self._starting, None
            self._context = getattr(started := starting.result(), "sparkContext", started)
        if self._context is not None:
            stop_context(self._context)  # not waiting for PySpark's accumulator server
            self._context = None


class _Starting:
    """``start()`` running on a daemon thread; ``result()`` waits for it and returns what it returned,
    or raises what it raised. A daemon thread, so a job that fails before it needs the context
    never waits at exit for one it will not use (``stop`` waits for it and stops it)."""

    def __init__(self, start: Callable[[], Any]) -> None:
        self._value: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(start,), name="tidelake-spark-start", daemon=True)
        self._thread.start()

    def _run(self, start: Callable[[], Any]) -> None:
        # The start makes ~90 calls into the JVM before the JVM's own start of the context, each
        # waiting for the GIL while the driver imports: at the default 5 ms switch interval, up to
        # 0.45 s. Until the context is up, the driver's thread hands the GIL over sooner.
        interval = sys.getswitchinterval()
        sys.setswitchinterval(min(interval, START_SWITCH_INTERVAL))
        try:
            self._value = start()
        except BaseException as exc:  # noqa: BLE001 - handed to the thread that waits for it
            self._error = exc
        finally:
            sys.setswitchinterval(interval)

    def result(self) -> Any:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value
