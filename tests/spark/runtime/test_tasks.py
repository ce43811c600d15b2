"""Task bodies pause the cyclic GC around their row loops and give the process back as it was."""

from __future__ import annotations

import gc

from spark.runtime.tasks import no_cyclic_gc


def test_a_task_body_pauses_the_cyclic_gc_and_restores_its_state() -> None:
    assert gc.isenabled()
    with no_cyclic_gc():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with no_cyclic_gc():
            pass
        assert not gc.isenabled()  # a caller that had it off keeps it off
    finally:
        gc.enable()


def test_the_gc_comes_back_when_a_task_body_fails() -> None:
    try:
        with no_cyclic_gc():
            raise ValueError("bad row")
    except ValueError:
        pass
    assert gc.isenabled()


def test_a_generator_task_body_gives_the_gc_back_when_spark_stops_reading_it() -> None:
    # The rewrite's routed rows are a generator Spark may close early (a failed downstream task).
    def rows():
        with no_cyclic_gc():
            yield from range(10)

    stream = rows()
    assert next(stream) == 0 and not gc.isenabled()
    stream.close()
    assert gc.isenabled()


def test_freezing_imports_does_nothing_outside_a_spark_task(monkeypatch) -> None:
    # A driver (or a test process running tasks in process) keeps its collector whole: a freeze
    # there would keep for ever every cycle an earlier test or run left behind.
    from spark.runtime import tasks

    monkeypatch.setattr(tasks, "_modules_frozen", 0)
    frozen = gc.get_freeze_count()
    tasks.freeze_imports()
    assert gc.get_freeze_count() == frozen and tasks._modules_frozen == 0


def test_a_function_made_a_spark_tasks_function_travels_and_returns_what_it_returns() -> None:
    from pyspark import cloudpickle

    from spark.runtime.tasks import on_executor

    shipped = cloudpickle.loads(cloudpickle.dumps(on_executor(lambda a, b=2: (a, b))))
    assert shipped(1) == (1, 2)
