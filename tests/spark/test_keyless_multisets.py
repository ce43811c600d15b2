"""Tables without a primary key are multisets: W holds as many copies of a row as upstream.

MySQL 8 allows identical rows in a table without a PRIMARY KEY or UNIQUE index, and a row event
(binlog_format=ROW, what every CDC protocol carries) inserts, deletes or updates one row.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from cdc_codecs import Op, RowChange, SourcePosition, get_encoder
from tests.model.oracle import Oracle
from spark.commit.apply import apply_interval
from spark.config import WRITE_MODES, LayoutConfig
from spark.query.read import published_watermarks, read_pipeline
from spark.archive.storage import open_storage

from .archives import HOUR, T0, ArchiveWriter, make_config
from .test_schema_evolution import History, schema

pytestmark = pytest.mark.slow  # whole intervals, Spark or services: make test-fast leaves it out (docs/testing.md)

BAG = schema("db", "bag", [("x", "int"), ("s", "varchar(8)")], keys=())
CREATE = "CREATE TABLE `db`.`bag` (`x` int, `s` varchar(8))"
A, B, C, D, E = ({"x": i, "s": s} for i, s in enumerate("abcde"))
P = SourcePosition("gen", 0, 0)


def change(op: Op, before: dict | None, after: dict | None, commit_ts: int) -> RowChange:
    return RowChange(op, "db", "bag", before, after, (), BAG.column_types, commit_ts, P)


def run(tmp: Path, protocol: str, intervals: list[list], write_mode: str, partitions: int = 2, runner=None):  # noqa: ANN001
    """Each of ``intervals`` (lists of events) encoded, landed and applied in turn."""
    config = make_config(tmp, protocol)
    config = dataclasses.replace(config, layout=LayoutConfig(write_mode=write_mode))
    writer = ArchiveWriter(config, open_storage(config.storage), {"cdc": partitions})
    encoder = get_encoder(protocol)
    for i, interval in enumerate(intervals):
        writer.interval(T0 + i * HOUR, T0 + (i + 1) * HOUR, [("cdc", r) for r in encoder.encode_all(interval, partitions)])
        apply_interval(config, T0 + i * HOUR, T0 + (i + 1) * HOUR, runner=runner)
    return config


def bag(config, w: int) -> list[tuple]:  # noqa: ANN001
    return sorted((r["x"], r["s"]) for r in read_pipeline(config, w)[1][("db", "bag")].to_pylist())


def rows(*images: dict) -> list[tuple]:
    return sorted((r["x"], r["s"]) for r in images)


def oracle_bag(events: list) -> list[tuple]:
    oracle = Oracle()
    oracle.add(events)
    oracle.cut([("gen", 0)])
    return sorted((r["x"], r["s"]) for r in oracle.rows("db", "bag"))


def sliced():  # noqa: ANN201
    """The Spark plane through a stand-in for Spark's core API: the fold in 6 key-hash slices."""
    from spark.runtime.runners import SparkRunner

    from .fold.test_spark_fold import FakeContext

    return SparkRunner(FakeContext(3))


@pytest.mark.parametrize("plane", ["local", "spark"])
@pytest.mark.parametrize("write_mode", WRITE_MODES)
def test_identical_rows_are_copies_that_inserts_deletes_and_updates_count(
        tmp_path: Path, write_mode: str, plane: str) -> None:
    h = History()
    h.ddl("db", "bag", CREATE, BAG, kind="CREATE")
    h.row(Op.INSERT, BAG, None, A)
    h.row(Op.INSERT, BAG, None, A)  # another transaction: a second copy
    both = h.tick()  # INSERT INTO bag VALUES (1, 'b'), (1, 'b'): one transaction, two copies
    h.events += [change(Op.INSERT, None, B, both), change(Op.INSERT, None, B, both)]
    h.row(Op.INSERT, BAG, None, C)
    first = h.mark()
    first_events = list(h.events)
    h.row(Op.DELETE, BAG, A, None)  # DELETE ... LIMIT 1: one of two copies
    h.row(Op.UPDATE, BAG, B, D)  # UPDATE ... LIMIT 1: one copy changes
    h.row(Op.UPDATE, BAG, C, C)  # an UPDATE that leaves its row as it was: still one copy
    second = h.mark()
    config = run(tmp_path, "canal-json", [first_events, h.events[len(first_events):]], write_mode,
                 runner=sliced() if plane == "spark" else None)
    assert bag(config, first) == rows(A, A, B, B, C) == oracle_bag(first_events)
    assert bag(config, second) == rows(A, B, C, D) == oracle_bag(h.events)


@pytest.mark.parametrize("write_mode", WRITE_MODES)
def test_a_re_sent_range_does_not_add_copies(tmp_path: Path, write_mode: str) -> None:
    h = History()
    h.ddl("db", "bag", CREATE, BAG, kind="CREATE")
    h.row(Op.INSERT, BAG, None, A)
    first = h.mark()
    setup = list(h.events)
    one = h.tick()
    transaction = [change(Op.INSERT, None, E, one), change(Op.INSERT, None, E, one), change(Op.DELETE, A, None, one)]
    h.events += transaction
    h.row(Op.INSERT, BAG, None, B)
    sent = h.events[len(setup):]
    # The changefeed restarts from a checkpoint before ``one``: both transactions again, then the watermark.
    second = h.mark()
    config = run(tmp_path, "canal-json", [setup, [*sent, *sent, h.events[-1]]], write_mode)
    assert bag(config, first) == rows(A)
    assert bag(config, second) == rows(B, E, E) == oracle_bag(h.events)


@pytest.mark.parametrize("write_mode", WRITE_MODES)
def test_a_transaction_cut_by_a_segment_boundary_counts_its_copies_once_each(tmp_path: Path, write_mode: str) -> None:
    # Landing cuts segments by time: one transaction's rows may lie in two intervals' segments.
    h = History()
    h.ddl("db", "bag", CREATE, BAG, kind="CREATE")
    one = h.tick()
    transaction = [change(Op.INSERT, None, A, one) for _ in range(3)]
    h.events += transaction
    w = h.mark()
    config = run(tmp_path, "canal-json", [[h.events[0], *transaction[:2]], [transaction[2], h.events[-1]]], write_mode)
    assert bag(config, w) == rows(A, A, A) == oracle_bag(h.events)


def test_without_commit_ts_every_delivered_change_counts(tmp_path: Path) -> None:
    h = History()
    h.ddl("db", "bag", CREATE, BAG, kind="CREATE")
    for image in (A, A, B):
        h.row(Op.INSERT, BAG, None, image)
    h.row(Op.DELETE, BAG, B, None)
    h.events = [e._replace(event_time_ms=1_700_000_000_000 + i) for i, e in enumerate(h.events)]
    later = RowChange(Op.INSERT, "db", "bag", None, C, (), BAG.column_types, None, P, 1_700_000_100_000)
    config = run(tmp_path, "canal", [[*h.events, later]], "merge-on-read", partitions=1)
    w = published_watermarks(config)[-1]
    assert bag(config, w) == rows(A, A)


@pytest.mark.parametrize("write_mode", WRITE_MODES)
def test_a_re_sent_delete_of_a_row_that_is_gone_does_not_take_a_later_copy(tmp_path: Path, write_mode: str) -> None:
    """Found by the model-based test (cloudcanal-canal-json): a connector restart re-sent a DELETE
    whose row was gone, and a new INSERT of an identical row followed in the same interval. A
    row event changes the row it names, if it is there (a MySQL replica applies it so); the fold
    summed the interval's copies (-1 + 1) and the new row never appeared."""
    h = History()
    h.ddl("db", "bag", CREATE, BAG, kind="CREATE")
    h.row(Op.INSERT, BAG, None, A)
    h.row(Op.DELETE, BAG, A, None)
    h.row(Op.INSERT, BAG, None, A)
    h.events = [e._replace(event_time_ms=1_700_000_000_000 + i) for i, e in enumerate(h.events)]
    re_sent, new = h.events[2], h.events[3]
    # A change of another table moves each interval's W past the bag's changes.
    later = [RowChange(Op.INSERT, "db", "other", None, B, (), BAG.column_types, None, P, 1_700_000_100_000 + 100_000 * i)
             for i in range(2)]
    config = run(tmp_path, "canal", [[*h.events[:3], later[0]], [re_sent, new, later[1]]], write_mode, partitions=1)
    first_w, second_w = published_watermarks(config)[-2:]
    assert bag(config, first_w) == []
    assert bag(config, second_w) == rows(A)


@pytest.mark.parametrize("write_mode", WRITE_MODES)
def test_a_delete_counted_twice_of_a_single_copy_leaves_a_later_insert_standing(tmp_path: Path, write_mode: str) -> None:
    """A DELETE re-sent right after itself joins its transaction's run and counts twice (README,
    known gaps): on a table holding one copy it deletes that one. An INSERT of the image in a
    later transaction of the same interval then adds a copy, as it would after any delete."""
    h = History()
    h.ddl("db", "bag", CREATE, BAG, kind="CREATE")
    h.row(Op.INSERT, BAG, None, A)
    first = h.mark()
    setup = list(h.events)
    gone = h.tick()
    h.events += [change(Op.DELETE, A, None, gone), change(Op.DELETE, A, None, gone)]
    h.row(Op.INSERT, BAG, None, A)
    second = h.mark()
    config = run(tmp_path, "canal-json", [setup, h.events[len(setup):]], write_mode, partitions=1)
    assert bag(config, first) == rows(A)
    assert bag(config, second) == rows(A) == oracle_bag(h.events)
