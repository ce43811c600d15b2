"""Which rows a MySQL partition holds (MySQL 8 manual 26.2, 26.2.7), computed from the definition."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest

from cdc_codecs.types import parse_mysql_type
from spark.tables.ddl import SetPartitioning, parse_ddl
from spark.tables.partitioning import Partitioning, UnknownPartitionRows, _to_days


def partitioning(create: str) -> Partitioning:
    (_, change), = [c for c in parse_ddl(create, "d") if isinstance(c[1], SetPartitioning)]
    assert change.partitioning is not None
    return change.partitioning


def held(p: Partitioning, names: tuple[str, ...], rows: dict, types: dict[str, str]) -> list[bool]:
    table = pa.table(rows)
    mask = p.holding(names, {c: c for c in p.columns}, {c: parse_mysql_type(t) for c, t in types.items()})(table)
    return mask.to_pylist()


def test_range_columns_compare_left_to_right_with_maxvalue_and_null_lowest() -> None:
    p = partitioning("CREATE TABLE t (a INT, b DATE) PARTITION BY RANGE COLUMNS (a, b) ("
                     "PARTITION p0 VALUES LESS THAN (10, '2020-01-01'), PARTITION p1 VALUES LESS THAN (10, MAXVALUE), "
                     "PARTITION p2 VALUES LESS THAN (MAXVALUE, MAXVALUE))")
    rows = {"a": pa.array([None, 5, 10, 10, 10, 11], pa.int32()),
            "b": pa.array([None, dt.date(2030, 1, 1), dt.date(2019, 12, 31), dt.date(2020, 1, 1), None, None], pa.date32())}
    types = {"a": "int", "b": "date"}
    assert held(p, ("p0",), rows, types) == [True, True, True, False, True, False]
    assert held(p, ("P1",), rows, types) == [False, False, False, True, False, False]  # names ignore case
    assert held(p, ("p2",), rows, types) == [False, False, False, False, False, True]


def test_range_after_a_dropped_partition_the_next_holds_its_range() -> None:
    p = partitioning("CREATE TABLE t (k BIGINT UNSIGNED) PARTITION BY RANGE (k) (PARTITION p0 VALUES LESS THAN (10), "
                     "PARTITION p1 VALUES LESS THAN (20), PARTITION p2 VALUES LESS THAN MAXVALUE)").without(("p0",))
    rows = {"k": pa.array([Decimal(3), Decimal(15), Decimal(25), None], pa.decimal128(20, 0))}
    assert held(p, ("p1",), rows, {"k": "bigint unsigned"}) == [True, True, False, True]
    added = partitioning("CREATE TABLE t (k INT) PARTITION BY RANGE (k) (PARTITION p0 VALUES LESS THAN (10))")
    added = added.with_added(partitioning("CREATE TABLE t (k INT) PARTITION BY RANGE (k) (PARTITION p1 VALUES LESS THAN (20))").partitions)
    assert held(added, ("p1",), {"k": pa.array([5, 15, 25], pa.int32())}, {"k": "int"}) == [False, True, False]


def test_list_columns_tuples_null_and_tidb_default() -> None:
    p = partitioning("CREATE TABLE t (a INT, b DATETIME) PARTITION BY LIST COLUMNS (a, b) ("
                     "PARTITION p VALUES IN ((1, '2020-01-01 10:00:00'), (2, NULL)), PARTITION rest VALUES IN (DEFAULT))")
    rows = {"a": pa.array([1, 1, 2, 2, None], pa.int32()),
            "b": pa.array([dt.datetime(2020, 1, 1, 10), dt.datetime(2020, 1, 1, 11), None, dt.datetime(2020, 1, 1), None],
                          pa.timestamp("us"))}
    types = {"a": "int", "b": "datetime"}
    assert held(p, ("p",), rows, types) == [True, False, True, False, False]
    assert held(p, ("rest",), rows, types) == [False, True, False, True, True]


def test_reorganize_puts_the_new_partitions_in_place_of_the_old() -> None:
    p = partitioning("CREATE TABLE t (k INT) PARTITION BY RANGE (k) (PARTITION a VALUES LESS THAN (10), "
                     "PARTITION b VALUES LESS THAN (20), PARTITION c VALUES LESS THAN (30))")
    into = partitioning("CREATE TABLE t (k INT) PARTITION BY RANGE (k) (PARTITION x VALUES LESS THAN (5), "
                        "PARTITION y VALUES LESS THAN (20))").partitions
    p = p.reorganized(("a", "b"), into)
    assert [q.name for q in p.partitions] == ["x", "y", "c"]
    assert held(p, ("y",), {"k": pa.array([4, 5, 19, 20], pa.int32())}, {"k": "int"}) == [False, True, True, False]
    assert Partitioning.from_json(p.to_json()) == p


def test_year_and_to_days_of_date_and_datetime_columns() -> None:
    """The manual's partitioning by YEAR(d) and TO_DAYS(d), bounds as integers or TO_DAYS('date')."""
    p = partitioning("CREATE TABLE t (d DATETIME) PARTITION BY RANGE (TO_DAYS(d)) ("
                     "PARTITION old VALUES LESS THAN (TO_DAYS('2020-01-01')), PARTITION new VALUES LESS THAN MAXVALUE)")
    rows = {"d": pa.array([None, dt.datetime(1960, 5, 1, 12), dt.datetime(2019, 12, 31, 23, 59), dt.datetime(2020, 1, 1)],
                          pa.timestamp("us"))}
    assert held(p, ("old",), rows, {"d": "datetime"}) == [True, True, True, False]
    assert _to_days(dt.date(2007, 10, 7)) == 733321  # the manual's example of TO_DAYS
    p = partitioning("CREATE TABLE t (d DATE) PARTITION BY LIST (YEAR(d)) (PARTITION y19 VALUES IN (2019), "
                     "PARTITION y20 VALUES IN (2020, NULL))")
    rows = {"d": pa.array([dt.date(2019, 12, 31), dt.date(2020, 1, 1), None, dt.date(1999, 1, 1)], pa.date32())}
    assert held(p, ("y20",), rows, {"d": "date"}) == [False, True, True, False]
    assert held(p, ("y19",), rows, {"d": "date"}) == [True, False, False, False]


@pytest.mark.parametrize("create, types, why", [
    ("CREATE TABLE t (k INT) PARTITION BY HASH (k) PARTITIONS 2", {"k": "int"}, "MySQL's hash"),
    ("CREATE TABLE t (k INT) PARTITION BY KEY () PARTITIONS 2", {"k": "int"}, "MySQL's hash"),
    ("CREATE TABLE t (k INT) PARTITION BY RANGE (k) INTERVAL (10) FIRST PARTITION LESS THAN (10) LAST PARTITION LESS THAN (30)",
     {"k": "int"}, "TiDB names itself"),
    ("CREATE TABLE t (d DATE) PARTITION BY RANGE (MONTH(d)) (PARTITION p0 VALUES LESS THAN (6))", {"d": "date"},
     r"the expression MONTH\(d\)"),
    ("CREATE TABLE t (k INT) PARTITION BY RANGE (TO_DAYS(k)) (PARTITION p0 VALUES LESS THAN (6))", {"k": "int"},
     "DATE and DATETIME columns only"),
    ("CREATE TABLE t (k INT) PARTITION BY RANGE (k) (PARTITION p0 VALUES LESS THAN (6 * 2))", {"k": "int"},
     r"bounded by the expression 6 \* 2"),
    ("CREATE TABLE t (d DATE) PARTITION BY RANGE COLUMNS (d) (PARTITION p0 VALUES LESS THAN (TO_DAYS('2020-01-01')))",
     {"d": "date"}, "is not a date"),
    ("CREATE TABLE t (s CHAR(2)) PARTITION BY LIST COLUMNS (s) (PARTITION p0 VALUES IN ('a'))", {"s": "char(2)"}, "collation"),
    ("CREATE TABLE t (d DATE) PARTITION BY RANGE COLUMNS (d) (PARTITION p0 VALUES LESS THAN ('soon'))", {"d": "date"},
     "'soon' is not a date"),
])
def test_partitions_tidelake_cannot_compute_are_refused_before_any_row_is_read(create: str, types: dict, why: str) -> None:
    p = partitioning(create)
    with pytest.raises(UnknownPartitionRows, match=why):
        p.holding(("p0",), {c: c for c in types}, {c: parse_mysql_type(t) for c, t in types.items()})
