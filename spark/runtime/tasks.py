"""What every Python task body shares, wherever it runs (Spark executors, ``LocalRunner``)."""

from __future__ import annotations

import functools
import gc
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")


def sized(runner: Any, work: int) -> Any:
    """The runner for ``work`` messages or change-log rows: a ``DriverFirstRunner``
    (spark.runtime.runners) runs small work in this process and the rest on Spark; any other
    runner runs everything itself. Each stage asks with its own size once it knows it."""
    pick = getattr(runner, "for_messages", None)
    return pick(work) if pick is not None else runner


@contextmanager
def no_cyclic_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector around a task's row loop.

    Every consumed message and change-log row allocates tuples and dicts, which trigger
    generation-0 collections that find nothing (the loops make no reference cycles;
    refcounting frees it all), and the rows a task buffers make each older-generation
    collection longer. Measured: landing ~0.1 s of CPU per 200k messages, a sixth of its own
    work; decoding 200k canal-json changes into the change log 3.2 s -> 2.8 s (bench/apply).
    The switch is per process: a Python worker runs one task at a time.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def on_executor(fn: Callable[..., T]) -> Callable[..., T]:
    """``fn`` as the function of a Spark job: ``freeze_imports`` before each call."""
    return functools.partial(_on_executor, fn)


def _on_executor(fn: Callable[..., T], *args: Any) -> T:
    freeze_imports()
    return fn(*args)


_modules_frozen = 0


def freeze_imports() -> None:
    """In a Spark task's Python worker, move what the worker holds out of the cyclic collector's
    scans (``gc.freeze``) when modules were loaded since the last time.

    PySpark's reused Python worker runs ``gc.collect()`` after every task, and a full collection
    walks every object the worker holds -- mostly the objects of the modules its tasks imported:
    ~55 ms a task once the decode's and the write's are loaded (125k objects: pyarrow, pyiceberg,
    pydantic), which the next task waits for (Spark's log counts it as the task's "boot"). Frozen
    objects are still freed by reference counting; only a reference cycle among them is never
    collected, so the freeze happens once per set of loaded modules (a stage's first task in each
    worker), not once a task (which would keep every task's cyclic garbage), and only in a Spark
    task (``TaskContext.get()``): never in a driver or a test process running tasks in process."""
    global _modules_frozen
    spark_task = sys.modules.get("pyspark.taskcontext")
    if spark_task is None or spark_task.TaskContext.get() is None or len(sys.modules) == _modules_frozen:
        return
    gc.freeze()
    _modules_frozen = len(sys.modules)
