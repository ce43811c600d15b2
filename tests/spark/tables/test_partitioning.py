"""Which rows a MySQL partition holds (MySQL 8 manual 26.2, 26.2.7), computed from the definition."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest

from cdc_codecs.types import parse_mysql_type
from spark.tables.ddl import parse_ddl
from spark.tables.ddl_changes import SetPartitioning
from spark.tables.partitioning import MYSQL, TIDB, Partitioning, UnknownPartitionRows, _to_days, hash_partition, upstream_server


def partitioning(create: str) -> Partitioning:
    (_, change), = [c for c in parse_ddl(create, "d") if isinstance(c[1], SetPartitioning)]
    assert change.partitioning is not None
    return change.partitioning


def held(p: Partitioning, names: tuple[str, ...], rows: dict, types: dict[str, str], server: str = MYSQL) -> list[bool]:
    table = pa.table(rows)
    mask = p.holding(names, {c: c for c in p.columns}, {c: parse_mysql_type(t) for c, t in types.items()}, server)(table)
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


def test_tidb_s_default_partition_written_either_way_holds_the_values_no_other_lists() -> None:
    """TiDB's manual (Partitioning, "Default List partition"): ``PARTITION pDef DEFAULT`` and
    ``PARTITION pDef VALUES IN (DEFAULT)`` are the same partition. The first form was read as a
    partition without values, holding nothing: its TRUNCATE PARTITION deleted no row in the lake."""
    rows, types = {"k": pa.array([1, 2, None, 3], pa.int32())}, {"k": "int"}
    for default in ("DEFAULT", "VALUES IN (DEFAULT)", "default ENGINE = InnoDB"):
        p = partitioning(f"CREATE TABLE t (k INT) PARTITION BY LIST (k) (PARTITION a VALUES IN (1, 3), PARTITION d {default})")
        assert held(p, ("d",), rows, types) == [False, True, True, False], default
        assert held(p, ("a",), rows, types) == [True, False, False, True], default


def test_a_range_or_list_partition_without_bounds_is_not_taken_to_hold_nothing() -> None:
    """MySQL refuses a RANGE / LIST partition without VALUES (ER_PARTITION_REQUIRES_VALUES_ERROR): met
    anyway, which rows it holds is unknown -- not none."""
    p = partitioning("CREATE TABLE t (k INT) PARTITION BY LIST (k) (PARTITION a VALUES IN (1), PARTITION b)")
    with pytest.raises(UnknownPartitionRows, match="partition b"):
        held(p, ("b",), {"k": pa.array([1, 2], pa.int32())}, {"k": "int"})


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
    ("CREATE TABLE t (k INT) PARTITION BY KEY () PARTITIONS 2", {"k": "int"}, r"internal hash .*\(KEY partitioning\)"),
    ("CREATE TABLE t (k INT) PARTITION BY LINEAR KEY (k) PARTITIONS 2", {"k": "int"}, r"\(LINEAR KEY partitioning\)"),
    ("CREATE TABLE t (k DATE) PARTITION BY HASH (k) PARTITIONS 2", {"k": "date"}, "is not an integer"),
    ("CREATE TABLE t (k INT) PARTITION BY HASH (k DIV 2) PARTITIONS 2", {"k": "int"}, r"the expression k DIV 2"),
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


def test_hash_is_mod_with_the_remainder_made_positive() -> None:
    """MySQL 26.2.4: MOD(value, num); the server takes |v % num| (sql_partition.cc get_part_id_hash),
    as TiDB does (locateHashPartition)."""
    p = partitioning("CREATE TABLE t (k INT) PARTITION BY HASH (k) PARTITIONS 4")
    rows = {"k": pa.array([0, 1, 5, -1, -5, -4, 7], pa.int32())}
    assert held(p, ("p1",), rows, {"k": "int"}) == [False, True, True, True, True, False, False]
    assert held(p, ("p3",), rows, {"k": "int"}, TIDB) == [False, False, False, False, False, False, True]
    assert held(p, ("p0",), {"k": pa.array([None, 4], pa.int32())}, {"k": "int"}) == [True, True]  # NULL: 0 of 2^n


def test_hash_of_year_named_partitions_and_unsigned_values_wrapping_as_the_server_s_longlong() -> None:
    p = partitioning("CREATE TABLE t (d DATE) PARTITION BY HASH (YEAR(d)) (PARTITION a, PARTITION b, PARTITION c)")
    rows = {"d": pa.array([dt.date(2003, 4, 14), dt.date(1998, 10, 19), dt.date(2002, 1, 1)], pa.date32())}
    assert held(p, ("b",), rows, {"d": "date"}) == [False, False, True]  # 2003 % 3 = 2, 1998 % 3 = 0, 2002 % 3 = 1
    u = partitioning("CREATE TABLE t (k BIGINT UNSIGNED) PARTITION BY HASH (k) PARTITIONS 3")
    rows = {"k": pa.array([Decimal(2**64 - 1), Decimal(2**63), Decimal(4)], pa.decimal128(20, 0))}
    # 2^64-1 is the longlong -1: |-1 % 3| = 1; 2^63 is LLONG_MIN: |LLONG_MIN % 3| = 2^63 % 3 = 2
    assert held(u, ("p1",), rows, {"k": "bigint unsigned"}) == [True, False, True]
    assert held(u, ("p2",), rows, {"k": "bigint unsigned"}) == [False, True, False]


def test_linear_hash_is_the_manual_s_powers_of_two_on_mysql_and_plain_hash_on_tidb() -> None:
    """MySQL 26.2.4.1's example: 6 partitions, YEAR('2003-04-14') -> 3, YEAR('1998-10-19') -> 2. TiDB
    parses LINEAR and ignores it."""
    p = partitioning("CREATE TABLE t1 (col1 INT, col2 CHAR(5), col3 DATE) PARTITION BY LINEAR HASH( YEAR(col3) ) PARTITIONS 6")
    assert p.linear and p.describe() == "PARTITION BY LINEAR HASH (YEAR(col3))"
    rows = {"col3": pa.array([dt.date(2003, 4, 14), dt.date(1998, 10, 19), None], pa.date32())}
    assert held(p, ("p3",), rows, {"col3": "date"}) == [True, False, False]
    assert held(p, ("p2",), rows, {"col3": "date"}) == [False, True, False]
    assert held(p, ("p0",), rows, {"col3": "date"}) == [False, False, True]  # NULL: LLONG_MIN & (V - 1) = 0
    assert held(p, ("p5",), rows, {"col3": "date"}, TIDB) == [True, False, False]  # 2003 % 6
    assert [hash_partition(v, 6, MYSQL, linear=True) for v in (-1, 13, 6, 7)] == [3, 5, 2, 3]
    assert [hash_partition(v, 13, MYSQL, linear=True) for v in (29, 12, 15)] == [5, 12, 7]  # 29 & 15 = 13 >= 13: 29 & 7
    assert Partitioning.from_json(p.to_json()) == p


def test_a_null_the_manual_and_the_server_place_differently_is_not_placed() -> None:
    """MySQL's manual: NULL hashes as 0; its server hashes LLONG_MIN: 2^63 % 3 = 2 of 3 partitions."""
    p = partitioning("CREATE TABLE t (k INT) PARTITION BY HASH (k) PARTITIONS 3")
    rows = {"k": pa.array([1, None], pa.int32())}
    with pytest.raises(UnknownPartitionRows, match="manual .* partition 0, its server .* partition 2"):
        held(p, ("p0",), rows, {"k": "int"})
    assert held(p, ("p0",), rows, {"k": "int"}, TIDB) == [False, True]  # TiDB: NULL is 0


def test_coalesce_and_add_partitions_change_which_partition_a_hash_row_is_in() -> None:
    p = partitioning("CREATE TABLE t (k INT) PARTITION BY HASH (k) PARTITIONS 4")
    rows = {"k": pa.array([3, 5, 6], pa.int32())}
    three = p.coalesced(1)
    assert [q.name for q in three.partitions] == ["p0", "p1", "p2"]
    assert held(three, ("p0",), rows, {"k": "int"}) == [True, False, True]
    five = three.with_more(2)
    assert [q.name for q in five.partitions] == ["p0", "p1", "p2", "p3", "p4"]
    assert held(five, ("p0",), rows, {"k": "int"}) == [False, True, False]
    with pytest.raises(UnknownPartitionRows, match="cannot coalesce 4"):
        p.coalesced(4)
    assert upstream_server("canal-json") == TIDB and upstream_server("canal") == MYSQL and upstream_server("debezium-mysql") == MYSQL


TYPES = {
    "RANGE": "RANGE (k) (PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN MAXVALUE)",
    "RANGE COLUMNS": "RANGE COLUMNS (k) (PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN (MAXVALUE))",
    "LIST": "LIST (k) (PARTITION p0 VALUES IN (1, 2), PARTITION p1 VALUES IN (3, NULL))",
    "LIST COLUMNS": "LIST COLUMNS (k) (PARTITION p0 VALUES IN (1, 2), PARTITION p1 VALUES IN (3))",
    "HASH": "HASH (k) PARTITIONS 2",
    "LINEAR HASH": "LINEAR HASH (k) PARTITIONS 2",
    "KEY": "KEY (k) PARTITIONS 2",
    "LINEAR KEY": "LINEAR KEY (k) PARTITIONS 2",
}
# Each statement on the types MySQL allows it on (26.3.1, 26.3.2: DROP on RANGE / LIST, COALESCE on HASH / KEY).
STATEMENTS = {
    "TRUNCATE PARTITION": ("ALTER TABLE t TRUNCATE PARTITION p0", set(TYPES)),
    "DROP PARTITION": ("ALTER TABLE t DROP PARTITION p0", {"RANGE", "RANGE COLUMNS", "LIST", "LIST COLUMNS"}),
    "EXCHANGE PARTITION": ("ALTER TABLE t EXCHANGE PARTITION p0 WITH TABLE nt", set(TYPES)),
    "REORGANIZE PARTITION": ("ALTER TABLE t REORGANIZE PARTITION p0 INTO ({})", set(TYPES)),
    "COALESCE PARTITION": ("ALTER TABLE t COALESCE PARTITION 1", {"HASH", "LINEAR HASH", "KEY", "LINEAR KEY"}),
    "ADD PARTITION": ("ALTER TABLE t ADD PARTITION {}", set(TYPES)),
    "REMOVE PARTITIONING": ("ALTER TABLE t REMOVE PARTITIONING", set(TYPES)),
    "PARTITION BY": ("ALTER TABLE t PARTITION BY {}", set(TYPES)),
}
REORGANIZED = {"RANGE": "PARTITION a VALUES LESS THAN (5), PARTITION b VALUES LESS THAN (10)",
               "LIST": "PARTITION a VALUES IN (1), PARTITION b VALUES IN (2)"}
ADDED = {"RANGE": "(PARTITION p2 VALUES LESS THAN (20))", "LIST": "(PARTITION p2 VALUES IN (4))"}


def _statement(kind: str, name: str) -> str:
    sql = STATEMENTS[kind][0]
    hashed = "HASH" in name or "KEY" in name
    family = "RANGE" if name.startswith("RANGE") else "LIST"
    if kind == "PARTITION BY":
        return sql.format(TYPES[name])
    if kind == "ADD PARTITION":
        return sql.format("PARTITIONS 1" if hashed else ADDED[family])
    if kind == "REORGANIZE PARTITION":
        return sql.format("PARTITION a, PARTITION b" if hashed else REORGANIZED[family])
    return sql


def test_the_partition_statements_applied_exactly_and_those_that_hold() -> None:
    """The measure: which statement on which partitioning type tidelake applies exactly (rows it
    deletes or moves computed, or no row changed and the partitioning still followed) and which
    hold their table. Only [LINEAR] KEY's TRUNCATE and EXCHANGE hold (the server's internal hash)."""
    from spark.tables.ddl_changes import (AddPartitions, CoalescePartitions, DropPartitions, ExchangePartition, ReorganizePartitions,
                                  TruncatePartitions)

    types = {"k": parse_mysql_type("int")}
    exact, held = set(), set()
    for kind, (sql, allowed) in STATEMENTS.items():
        for name in allowed:
            p = partitioning(f"CREATE TABLE t (k INT) PARTITION BY {TYPES[name]}")
            change = parse_ddl(_statement(kind, name), "d")[0][1]
            try:
                if isinstance(change, (TruncatePartitions, DropPartitions, ExchangePartition)):  # rows go or move
                    p.holding(("p0",), {"k": "k"}, types)(pa.table({"k": pa.array([1, 5, 15, None], pa.int32())}))
                elif isinstance(change, AddPartitions):
                    assert p.with_added(change.partitions).with_more(change.count).partitions != p.partitions
                elif isinstance(change, CoalescePartitions):
                    assert len(p.coalesced(change.count).partitions) == 1
                elif isinstance(change, ReorganizePartitions):
                    assert [q.name for q in p.reorganized(change.names, change.into).partitions][:2] == ["a", "b"]
                else:  # SetPartitioning: the new definition (or none) replaces the old, no row changes
                    assert isinstance(change, SetPartitioning)
                exact.add((kind, name))
            except UnknownPartitionRows as exc:
                assert "internal hash" in str(exc), (kind, name, exc)
                held.add((kind, name))
    assert held == {(k, t) for k in ("TRUNCATE PARTITION", "EXCHANGE PARTITION") for t in ("KEY", "LINEAR KEY")}
    assert (len(exact), len(held)) == (52, 4)  # of 56 statement x type pairs MySQL allows
