"""A table's error is told by where it arises, not by its class (issue 34, item 3).

Exceptions of any type -- Python's own, a class tidelake never raises, one defined where it is
raised -- injected into one table's DDL parse, schema change, rewrite (on the driver and on
Spark's executors) or commit hold that table at its last good W while the others publish
exactly; once the fault is gone, the next run catches it up. A service's failure (storage, the
catalog, the lease) injected at the same places fails the run instead, and the retry publishes
exactly.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.exceptions import CommitFailedException

from cdc_codecs import Op
from spark.commit import plan as apply_plan
from spark.commit.isolation import read_isolated
from spark.archive.lease import LeaseLostError
from spark.commit.published import read_published
from spark.commit import table as commit_table
from spark.commit.table import TableCommitter
from spark.tables import updates
from spark.archive.storage import open_storage
from spark.write.target import TableTarget

from tests.spark.test_isolation import A, B, _apply, _pipeline, _rows
from tests.spark.test_schema_evolution import History, schema

pytestmark = pytest.mark.slow  # whole intervals, Spark or services: make test-fast leaves it out (docs/testing.md)

A2 = schema("shop", "a", [("id", "int"), ("v", "bigint")])
WIDEN = "ALTER TABLE shop.a MODIFY COLUMN v bigint"


class NeverRaisedByTidelake(Exception):
    pass


def _local_class() -> type[Exception]:
    class DefinedWhereRaised(LookupError):  # pickled by value to Spark's executors
        pass

    return DefinedWhereRaised


TABLE_ERRORS = [RuntimeError, ZeroDivisionError, KeyError, NeverRaisedByTidelake, _local_class()]
SERVICE_ERRORS = [OSError, LeaseLostError, CommitFailedException]


def _history() -> tuple[list[list], list[int]]:
    """a and b; in the second interval a's column is widened (a schema change with no change to its rows)."""
    h = History()
    h.ddl("shop", "a", "CREATE TABLE shop.a (id int primary key, v int)", A, kind="CREATE")
    h.ddl("shop", "b", "CREATE TABLE shop.b (id int primary key, v int)", B, kind="CREATE")
    h.row(Op.INSERT, A, None, {"id": 1, "v": 1})
    h.row(Op.INSERT, B, None, {"id": 1, "v": 1})
    marks, batches = [h.mark()], [h.events]
    h.events = []
    h.row(Op.INSERT, A, None, {"id": 2, "v": 2})
    h.ddl("shop", "a", WIDEN, A2, A, kind="ALTER")
    h.row(Op.INSERT, A2, None, {"id": 3, "v": 3})
    h.row(Op.UPDATE, B, {"id": 1, "v": 1}, {"id": 1, "v": 10})
    h.row(Op.INSERT, B, None, {"id": 2, "v": 2})
    marks.append(h.mark())
    batches.append(h.events)
    h.events = []
    h.row(Op.INSERT, A2, None, {"id": 4, "v": 4})
    h.row(Op.INSERT, B, None, {"id": 3, "v": 3})
    marks.append(h.mark())
    batches.append(h.events)
    return batches, marks


def _inject(monkeypatch: pytest.MonkeyPatch, where: str, exc: BaseException) -> None:
    """Raise ``exc`` in table a's ``where`` only (the others go through the same code)."""
    if where == "parse":
        parse = apply_plan.parse_ddl

        def parse_ddl(sql: str, database: str):  # noqa: ANN202
            if sql == WIDEN:
                raise exc
            return parse(sql, database)

        monkeypatch.setattr(apply_plan, "parse_ddl", parse_ddl)
    elif where == "schema change":
        stage = updates.stage

        def staged(change: Any, update: updates.SchemaUpdate) -> None:
            if update.name == "shop.a":
                raise exc
            stage(change, update)

        monkeypatch.setattr(updates, "stage", staged)
    elif where == "rewrite":
        # The target the executors rewrite table a against raises where they read it: on Spark
        # in the executors' Python workers (the class travels by value), here in the driver.
        make = commit_table.upsert_target

        class Failing(TableTarget):
            def metadata(self):  # noqa: ANN201
                raise exc

        def upsert_target(table, metadata, plan, *rest):  # noqa: ANN001, ANN002, ANN202
            target, head = make(table, metadata, plan, *rest)
            if plan.table == "a":
                failing = Failing(target.table.name, target.table.metadata_json, target.table.io_properties)
                target = type(target)(**{**target.__dict__, "table": failing})
            return target, head

        monkeypatch.setattr(commit_table, "upsert_target", upsert_target)
    else:
        assert where == "commit"
        finish = TableCommitter._finish

        def _finish(self, table, tx, plan, run, tag=False):  # noqa: ANN001, ANN202
            if plan.table == "a":
                raise exc
            return finish(self, table, tx, plan, run, tag)

        monkeypatch.setattr(TableCommitter, "_finish", _finish)


@contextmanager
def _first_run_then(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str, error: type,
                    runner: Any) -> Iterator[tuple[Any, Any, list[int]]]:
    """``_history``'s pipeline with its first interval applied; inside, ``error("injected")`` raised
    in table a's ``where`` (``_inject``). Yields the pipeline's config, its storage and the marks."""
    batches, marks = _history()
    config = _pipeline(tmp_path, "isolate", batches)
    storage = open_storage(config.storage)
    _apply(config, 0, runner=runner)
    with monkeypatch.context() as patched:
        _inject(patched, where, error("injected"))
        yield config, storage, marks


def _any_error_holds_its_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str, error: type,
                               runner: Any = None) -> None:
    with _first_run_then(tmp_path, monkeypatch, where, error, runner) as (config, storage, (w1, w2, w3)):
        result = _apply(config, 1, runner=runner)
    assert result.watermark == w2 and result.outcome == "published"
    [entry] = read_published(storage, config.name, w2)["isolated"]
    assert (entry["table"], entry["held_at"], entry["error"]) == ("a", w1, error.__name__), entry
    assert "injected" in entry["message"]
    assert _rows(config, "b", w2) == [(1, 10), (2, 2)]
    assert _rows(config, "a", w1) == [(1, 1)]
    # The fault is gone: the next run catches a up, from its held W.
    assert _apply(config, 2, runner=runner).watermark == w3
    assert read_isolated(storage, config.name) == {}
    assert _rows(config, "a", w2) == [(1, 1), (2, 2), (3, 3)] and _rows(config, "a", w3) == [(1, 1), (2, 2), (3, 3), (4, 4)]
    assert _rows(config, "b", w3) == [(1, 10), (2, 2), (3, 3)]


def _a_service_failure_fails_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str, error: type,
                                     runner: Any = None) -> None:
    with _first_run_then(tmp_path, monkeypatch, where, error, runner) as (config, storage, (w1, w2, w3)):
        with pytest.raises(Exception, match="injected") as raised:
            _apply(config, 1, runner=runner)
    assert runner is not None or isinstance(raised.value, error)
    assert read_published(storage, config.name, w2) is None and read_isolated(storage, config.name) == {}
    assert _apply(config, 1, runner=runner).watermark == w2  # the retry publishes exactly
    assert read_isolated(storage, config.name) == {}
    assert _rows(config, "a", w2) == [(1, 1), (2, 2), (3, 3)] and _rows(config, "b", w2) == [(1, 10), (2, 2)]


@pytest.mark.parametrize("error", TABLE_ERRORS, ids=lambda e: e.__name__)
@pytest.mark.parametrize("where", ["parse", "schema change", "rewrite", "commit"])
def test_any_error_in_one_tables_work_holds_that_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str,
                                                       error: type) -> None:
    _any_error_holds_its_table(tmp_path, monkeypatch, where, error)


@pytest.mark.parametrize("error", SERVICE_ERRORS, ids=lambda e: e.__name__)
@pytest.mark.parametrize("where", ["schema change", "rewrite", "commit"])
def test_a_service_failure_in_one_tables_work_fails_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str,
                                                           error: type) -> None:
    _a_service_failure_fails_the_run(tmp_path, monkeypatch, where, error)


@pytest.mark.slow
@pytest.mark.parametrize("error", [ZeroDivisionError, KeyError, NeverRaisedByTidelake, TABLE_ERRORS[-1]], ids=lambda e: e.__name__)
@pytest.mark.parametrize("where", ["rewrite", "commit"])
def test_any_error_in_one_tables_work_holds_that_table_on_spark(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str,
                                                                error: type, spark_runner) -> None:  # noqa: ANN001
    _any_error_holds_its_table(tmp_path, monkeypatch, where, error, spark_runner)


@pytest.mark.slow
@pytest.mark.parametrize("error", [OSError, LeaseLostError], ids=lambda e: e.__name__)
def test_a_service_failure_in_the_executors_fails_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: type,
                                                          spark_runner) -> None:  # noqa: ANN001
    _a_service_failure_fails_the_run(tmp_path, monkeypatch, "rewrite", error, spark_runner)
