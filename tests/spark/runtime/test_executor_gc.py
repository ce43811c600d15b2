"""Spark's Python workers freeze what their tasks imported (``spark.runtime.tasks.freeze_imports``):
PySpark's reused worker collects garbage after every task, and the collection then walks only what
tasks left, not every module's objects."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.slow  # a Spark context: make test-fast leaves it out (docs/testing.md)


def _worker_heaps(runner: Any) -> list[tuple[int, int]]:
    """(objects the collector walks, objects frozen) in each task of a plain job, not one of tidelake's."""
    import gc

    return runner.context.parallelize(range(2), 2).map(lambda _: (len(gc.get_objects()), gc.get_freeze_count())).collect()


def test_a_worker_that_ran_a_task_of_tidelake_walks_only_what_tasks_left(spark_runner: Any) -> None:
    # A fresh context's workers: forked by a daemon that imported tidelake's task modules and froze
    # them (spark.runtime.daemon): a collection walks a small part of what they hold.
    before = _worker_heaps(spark_runner)
    assert all(walked * 4 < frozen for walked, frozen in before), before

    def task(n: int) -> tuple[int, int]:
        import gc
        import sys

        import pyarrow.json  # noqa: F401 - no stage's: what a task imports itself is frozen from its next task on

        from spark.runtime import tasks

        return gc.get_freeze_count(), len(sys.modules) - tasks._modules_frozen

    first = spark_runner.map(task, [1, 2])
    assert all(frozen > 0 and imported > 0 for frozen, imported in first)
    assert all(frozen > 0 and imported == 0 for frozen, imported in spark_runner.map(task, [1, 2]))
    after = _worker_heaps(spark_runner)
    # What a collection walks: a few thousand objects of the >100k a worker holds.
    assert all(walked * 4 < frozen for walked, frozen in after), after
