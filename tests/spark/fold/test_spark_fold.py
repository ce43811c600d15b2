"""``SparkFold`` run in process through a stand-in for Spark's core API (every function through
cloudpickle, partitions kept apart): many slices, net change left in the archive and read back,
routed rows grouped by the shuffle's partitioner -- against the reference model, leaving no net
change behind."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from cdc_codecs import parse_mysql_type
from spark.archive import layout

pytestmark = pytest.mark.slow  # whole intervals, Spark or services: make test-fast leaves it out (docs/testing.md)



class _RDD:
    """Spark's core RDD API over Python lists, in process: each function goes through cloudpickle
    (as Spark sends it to a worker) and partitions are kept apart."""

    def __init__(self, partitions: list[list[Any]]) -> None:
        self.partitions = partitions

    @staticmethod
    def _shipped(fn: Callable, task: bool = True) -> Callable:
        import functools

        from pyspark import cloudpickle

        from spark.runtime import tasks

        # A job's function runs in a Python worker: made one by on_executor (its imports frozen).
        assert not task or (isinstance(fn, functools.partial) and fn.func is tasks._on_executor), \
            f"{fn!r} is sent to Spark's workers without spark.runtime.tasks.on_executor"
        return cloudpickle.loads(cloudpickle.dumps(fn))

    def map(self, fn: Callable) -> _RDD:
        fn = self._shipped(fn)
        return _RDD([[fn(x) for x in p] for p in self.partitions])

    def flatMap(self, fn: Callable) -> _RDD:
        fn = self._shipped(fn)
        return _RDD([[y for x in p for y in fn(x)] for p in self.partitions])

    def mapPartitions(self, fn: Callable) -> _RDD:
        fn = self._shipped(fn)
        return _RDD([list(fn(iter(p))) for p in self.partitions])

    def repartitionAndSortWithinPartitions(self, n: int, partition: Callable) -> _RDD:
        partition = self._shipped(partition, task=False)
        out: list[list[Any]] = [[] for _ in range(n)]
        for p in self.partitions:
            for kv in p:
                out[partition(kv[0]) % n].append(kv)
        return _RDD([sorted(p, key=lambda kv: kv[0]) for p in out])

    def collect(self) -> list[Any]:
        return [x for p in self.partitions for x in p]


class FakeContext:
    """What tidelake uses of a SparkContext."""

    def __init__(self, parallelism: int) -> None:
        self.defaultParallelism = parallelism
        self.environment: dict[str, str] = {}

    def parallelize(self, data: Iterable[Any], slices: int) -> _RDD:
        data = list(data)
        return _RDD([data[i * len(data) // slices:(i + 1) * len(data) // slices] for i in range(slices)])


def _machine(protocol: str, parallelism: int):
    from spark.runtime.runners import SparkRunner

    from ..test_operations import machine_for

    base = machine_for(protocol, SparkRunner(FakeContext(parallelism)))

    def no_net_change_is_left(self) -> None:
        if hasattr(self, "storage"):
            left = self.storage.list_files(layout.net_change_dir(self.config.name))
            assert not left, f"net change left after a run: {[f.path for f in left]}"

    from hypothesis.stateful import invariant

    return type(base.__name__ + "_sliced", (base,), {"no_net_change_is_left": invariant()(no_net_change_is_left)})


@pytest.mark.parametrize(("protocol", "parallelism"), [("canal-json", 4), ("debezium-mysql", 3)])
def test_operations_match_the_model_with_the_spark_fold_in_many_slices(protocol: str, parallelism: int) -> None:
    """The model-based machine with every run folded by ``SparkFold`` in 2 x parallelism slices
    (8 or 6: keys, key changes, DDL segments and pending offsets spread over slices), the net change
    written to and read back from the archive, routed and grouped through the shuffle's partitioner."""
    from hypothesis import HealthCheck, settings

    machine = _machine(protocol, parallelism)
    machine.TestCase.settings = settings(max_examples=3, stateful_step_count=12, deadline=None,
                                         suppress_health_check=list(HealthCheck))
    machine.TestCase().runTest()


def test_a_fold_with_more_slices_than_row_groups_and_nothing_applied_leaves_no_files(tmp_path: Path) -> None:
    """SparkFold over a change log whose rows are all pending or skipped: counts come back, no
    slice writes a net change (so no file to delete), and close() leaves the net dir empty."""
    from cdc_codecs import Op, RowChange, SourcePosition
    from spark.decode import changelog
    from spark.fold.select import FoldWindow
    from spark.write.plane import SparkPlane
    from spark.archive.storage import open_storage

    from tests.spark.archives import make_config

    config = make_config(tmp_path, "canal-json")
    storage = open_storage(config.storage)
    types = {"id": parse_mysql_type("bigint")}
    path = "shop/changelog/x.parquet"
    writer = changelog.ChangeLogWriter(storage, path)
    for offset in range(40):
        ts = 5 if offset % 2 else 500  # skipped (<= W_prev) or pending (> W)
        writer.add(RowChange(Op.INSERT, "db", "t", None, {"id": offset}, ("id",), types, ts, SourcePosition("cdc", 0, offset)))
    writer.close()
    window = FoldWindow(10, 100, {("cdc", 0): (0, 40)})
    fold = SparkPlane(FakeContext(20)).fold(config, [path], window, {}, rows=40)  # 40 slices > 16 row groups
    assert fold.outcome.pending == {("cdc", 0): 0}
    assert fold.outcome.skipped == 20
    assert fold.outcome.applied == {} and fold.outcome.summaries == []
    assert fold.rewrite([]) == []
    fold.close()
    assert storage.list_files(layout.net_change_dir(config.name)) == []


@pytest.mark.parametrize(("rows", "slice_rows", "slices"), [(40, 1000, 2), (40, 10, 4), (41, 10, 5)])
def test_a_run_is_cut_into_more_slices_than_slots_when_a_slice_would_hold_over_fold_slice_rows(
        tmp_path: Path, rows: int, slice_rows: int, slices: int) -> None:
    import dataclasses

    from cdc_codecs import Op, RowChange, SourcePosition
    from spark.decode import changelog
    from spark.fold.select import FoldWindow
    from spark.write.plane import SparkPlane
    from spark.archive.storage import open_storage

    from tests.spark.archives import make_config

    config = dataclasses.replace(make_config(tmp_path, "canal-json"), fold_slice_rows=slice_rows)
    path = "shop/changelog/x.parquet"
    writer = changelog.ChangeLogWriter(open_storage(config.storage), path)
    for offset in range(rows):
        writer.add(RowChange(Op.INSERT, "db", "t", None, {"id": offset}, ("id",), {"id": parse_mysql_type("bigint")}, 50,
                             SourcePosition("cdc", 0, offset)))
    writer.close()
    asked: list[int] = []

    class Recording(FakeContext):
        def parallelize(self, data: Iterable[Any], slices: int) -> _RDD:
            asked.append(slices)
            return super().parallelize(data, slices)

    # One task slot: two slices at least; more when rows / fold_slice_rows says so.
    fold = SparkPlane(Recording(1)).fold(config, [path], FoldWindow(10, 100, {("cdc", 0): (0, rows)}), {}, rows=rows)
    assert asked == [slices]
    assert sum(s.keys for s in fold.outcome.summaries) == rows and fold.outcome.applied == {"db.t": rows}
    fold.close()
