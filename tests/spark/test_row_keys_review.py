"""Review of 96bd6c2 / ac50def (``spark.commit.table.row_columns``): rows keyed otherwise than
the table's key hold the table (RowSchemaMismatch).

Streams MySQL 8 / TiDB send, that tidelake applied correctly before 96bd6c2, must not be held.
Every test drives the real pipeline in process (``apply_interval``) with ``on_table_error =
"fail"``, so a hold shows as the run's error. Tests marked ``xfail(strict=True)`` describe what
MySQL does and fail today; each says why.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from cdc_codecs import Column, DdlChange, Op, ProducerRecord, RowChange, TableSchema
from cdc_codecs.types import parse_mysql_type
from spark.query.read import read_table
from spark.tables.updates import RowSchemaMismatch

from .test_row_schema_fit import _Canal, _derived, _single_partition
from .test_schema_evolution import P

# ---------------------------------------------------------------- derived order around a key change

# Canal-JSON as the TiDB-less decoder reads it (official Canal, or TiCDC without its TiDB
# extension): ``es`` the event's milliseconds, DDL on partition 0 only, ``pkNames`` per message.
TYPES = {"id": "int", "Item_ID": "int", "name": "varchar", "code": "varchar", "price": "decimal", "cost": "decimal"}
SQL_TYPES = {"id": 4, "Item_ID": 4, "name": 12, "code": 12, "price": 3, "cost": 3}


def _ddl(es: int, sql: str, kind: str, table: str = "items") -> ProducerRecord:
    doc = {"id": 0, "database": "shop", "table": table, "pkNames": None, "isDdl": True, "type": kind, "es": es,
           "ts": es + 700, "sql": sql, "sqlType": None, "mysqlType": None, "data": None, "old": None}
    return ProducerRecord(0, None, orjson.dumps(doc))


def _row(partition: int, kind: str, es: int, keys: list[str] | None, data: dict, old: dict | None = None,
         table: str = "items") -> ProducerRecord:
    doc = {"id": 0, "database": "shop", "table": table, "pkNames": keys, "isDdl": False, "type": kind, "es": es,
           "ts": es + 900, "sql": "", "sqlType": {k: SQL_TYPES[k] for k in data},
           "mysqlType": {k: TYPES[k] for k in data}, "data": [data], "old": [old] if old is not None else None}
    return ProducerRecord(partition, None, orjson.dumps(doc))


def _rows(config, w: int) -> dict:  # noqa: ANN001
    return {r["id"]: {k: str(v) if k in ("price", "cost") and v is not None else v for k, v in r.items()}
            for r in read_table(config, "shop", "items", w).to_pylist()}


CREATE = "CREATE TABLE shop.items (id int primary key, name varchar(20), price decimal(10,2))"


def test_a_row_committed_just_before_a_primary_key_change_in_its_millisecond_is_applied(tmp_path: Path) -> None:
    """Was held by row_columns' first version; now applied. derived order places a row committed
    just before `DROP PRIMARY KEY, ADD PRIMARY KEY (id, name)` in the DDL's millisecond after it
    (docs/consistency.md, as for DROP / RENAME COLUMN); it carries the old key (id), the table now
    (id, name), and the table is held (RowSchemaMismatch). Before 96bd6c2 it was written by the
    table's key, as MySQL has it (the row has every key column)"""
    first = [_ddl(1000, CREATE, "CREATE"),
             _row(0, "INSERT", 1001, ["id"], {"id": "1", "name": "a", "price": "1.50"}),
             _row(1, "INSERT", 1001, ["id"], {"id": "2", "name": "b", "price": "2.00"})]
    # One millisecond: the UPDATE on partition 1 commits, then the ALTER (a partitioned table's
    # key must hold its partitioning column: the usual first step of partitioning a table).
    second = [_row(1, "UPDATE", 2000, ["id"], {"id": "2", "name": "b", "price": "2.50"}, {"price": "2.00"}),
              _ddl(2000, "ALTER TABLE shop.items DROP PRIMARY KEY, ADD PRIMARY KEY (id, name)", "ALTER"),
              _row(0, "INSERT", 2002, ["id", "name"], {"id": "3", "name": "c", "price": "3.00"}),
              _row(1, "INSERT", 2002, ["id", "name"], {"id": "4", "name": "d", "price": "4.00"})]
    config, results = _derived(tmp_path, [first, second])
    rows = _rows(config, results[-1].watermark)
    assert rows[2] == {"id": 2, "name": "b", "price": "2.50"}
    assert sorted(rows) == [1, 2]  # the rows stamped 2002 wait for W to pass them


@pytest.mark.parametrize(("alter", "later_key"), [
    pytest.param("ALTER TABLE shop.items ADD PRIMARY KEY (id)", ["id"], id="then-add-primary-key"),
    pytest.param(None, ["code"], id="no-primary-key"),
])
def test_a_row_keyed_by_a_unique_index_is_applied(tmp_path: Path, alter: str | None, later_key: list[str]) -> None:
    """A table without a primary key but with a UNIQUE NOT NULL index, rows keyed by that index
    upstream (TiCDC's handle key; Debezium MySQL; Canal's DESC shows its column as PRI); the lake's
    key is empty (the DDL's primary key). Without a primary key the rows flow, netted and written by
    their own key. After ADD PRIMARY KEY, a row committed just before it in its millisecond is placed
    after it (derived order) keyed by the index: written by the new key, as MySQL has it (row_columns'
    first version held it)."""
    create = "CREATE TABLE shop.items (id int not null, code varchar(8) not null, price decimal(10,2), unique key (code))"
    first = [_ddl(1000, create, "CREATE"),
             _row(0, "INSERT", 1001, ["code"], {"id": "1", "code": "a", "price": "1.50"}),
             _row(1, "INSERT", 1001, ["code"], {"id": "2", "code": "b", "price": "2.00"})]
    second = [_row(1, "UPDATE", 2000, ["code"], {"id": "2", "code": "b", "price": "2.50"}, {"price": "2.00"}),
              *([_ddl(2000, alter, "ALTER")] if alter else []),
              _row(0, "INSERT", 2002, later_key, {"id": "3", "code": "c", "price": "3.00"}),
              _row(1, "INSERT", 2002, later_key, {"id": "4", "code": "d", "price": "4.00"})]
    config, results = _derived(tmp_path, [first, second])
    rows = _rows(config, results[-1].watermark)
    assert rows[2] == {"id": 2, "code": "b", "price": "2.50"}
    assert sorted(rows) == [1, 2]  # the rows stamped 2002 wait for W to pass them


def test_a_row_committed_just_before_its_key_column_is_renamed_is_applied(tmp_path: Path) -> None:
    """The key column renamed by the DDL: a row placed after it names (and is keyed by) the old name,
    which row_columns maps through the run's rename: applied, not held."""
    first = [_ddl(1000, CREATE, "CREATE"),
             _row(0, "INSERT", 1001, ["id"], {"id": "1", "name": "a", "price": "1.50"}),
             _row(1, "INSERT", 1001, ["id"], {"id": "2", "name": "b", "price": "2.00"})]
    second = [_row(1, "UPDATE", 2000, ["id"], {"id": "2", "name": "b", "price": "2.50"}, {"price": "2.00"}),
              _ddl(2000, "ALTER TABLE shop.items RENAME COLUMN id TO Item_ID", "ALTER"),
              _row(0, "INSERT", 2002, ["Item_ID"], {"Item_ID": "3", "name": "c", "price": "3.00"}),
              _row(1, "INSERT", 2002, ["Item_ID"], {"Item_ID": "4", "name": "d", "price": "4.00"})]
    config, results = _derived(tmp_path, [first, second])
    got = {r["Item_ID"]: {k: str(v) if k == "price" else v for k, v in r.items()}
           for r in read_table(config, "shop", "items", results[-1].watermark).to_pylist()}
    assert got[2] == {"Item_ID": 2, "name": "b", "price": "2.50"}
    assert sorted(got) == [1, 2]


def test_a_pt_osc_cut_over_that_changes_the_primary_key_keeps_rows_flowing(tmp_path: Path) -> None:
    """Was held by row_columns' first version; now applied. pt-online-schema-change changing the
    primary key (--alter 'DROP PRIMARY KEY, ADD PRIMARY KEY (id, name)'): its trigger copies each
    change to the new table in the same transaction, and the cut-over renames the new table over the
    old. A change to the old table committed just before the RENAME in its millisecond is placed
    after it (derived order), so it reaches the lake's new table keyed by the old key: the table is
    held. Before 96bd6c2 it was written by the new key, the same row as the trigger's copy"""
    new = "_items_new"
    first = [_ddl(1000, CREATE, "CREATE"),
             _row(0, "INSERT", 1001, ["id"], {"id": "1", "name": "a", "price": "1.50"}),
             _row(1, "INSERT", 1001, ["id"], {"id": "2", "name": "b", "price": "2.00"}),
             _ddl(1002, f"CREATE TABLE shop.{new} LIKE shop.items", "CREATE", new),
             _ddl(1003, f"ALTER TABLE shop.{new} DROP PRIMARY KEY, ADD PRIMARY KEY (id, name)", "ALTER", new),
             _row(0, "INSERT", 1004, ["id", "name"], {"id": "1", "name": "a", "price": "1.50"}, table=new),
             _row(1, "INSERT", 1004, ["id", "name"], {"id": "2", "name": "b", "price": "2.00"}, table=new)]
    # One millisecond: an UPDATE and its trigger's copy commit, then the cut-over.
    second = [_row(1, "UPDATE", 2000, ["id"], {"id": "2", "name": "b", "price": "2.50"}, {"price": "2.00"}),
              _row(1, "UPDATE", 2000, ["id", "name"], {"id": "2", "name": "b", "price": "2.50"}, {"price": "2.00"}, table=new),
              _ddl(2000, f"RENAME TABLE shop.items TO shop._items_old, shop.{new} TO shop.items", "RENAME", new),
              _row(0, "INSERT", 2002, ["id", "name"], {"id": "3", "name": "c", "price": "3.00"}),
              _row(1, "INSERT", 2002, ["id", "name"], {"id": "4", "name": "d", "price": "4.00"})]
    config, results = _derived(tmp_path, [first, second])
    rows = _rows(config, results[-1].watermark)
    assert rows[2] == {"id": 2, "name": "b", "price": "2.50"}
    assert sorted(rows) == [1, 2]


def test_a_row_committed_just_before_a_key_column_is_dropped_is_applied(tmp_path: Path) -> None:
    """Was held by row_columns' first version; now applied. DROP COLUMN of one column of a composite
    primary key leaves the others as the key (MySQL, and spark.tables.updates._drop_column); a row
    committed just before it in its millisecond is placed after it (derived order) keyed by (id,
    code): `column(k) or k` keeps the dropped column's old name in the compared set, so the table is
    held. Before 96bd6c2 it was written by (id)"""
    create = "CREATE TABLE shop.items (id int not null, code varchar(8) not null, price decimal(10,2), primary key (id, code))"
    first = [_ddl(1000, create, "CREATE"),
             _row(0, "INSERT", 1001, ["id", "code"], {"id": "1", "code": "a", "price": "1.50"}),
             _row(1, "INSERT", 1001, ["id", "code"], {"id": "2", "code": "b", "price": "2.00"})]
    second = [_row(1, "UPDATE", 2000, ["id", "code"], {"id": "2", "code": "b", "price": "2.50"}, {"price": "2.00"}),
              _ddl(2000, "ALTER TABLE shop.items DROP COLUMN code", "ALTER"),
              _row(0, "INSERT", 2002, ["id"], {"id": "3", "price": "3.00"}),
              _row(1, "INSERT", 2002, ["id"], {"id": "4", "price": "4.00"})]
    config, results = _derived(tmp_path, [first, second])
    rows = _rows(config, results[-1].watermark)
    assert rows[2] == {"id": 2, "price": "2.50"}
    assert sorted(rows) == [1, 2]


def _int_table(table: str, keys: tuple[str, ...]) -> TableSchema:
    return TableSchema("shop", table, tuple(Column(n, parse_mysql_type("int"), n not in keys) for n in ("id", "v")), keys)


def test_writes_during_an_online_key_change_reach_the_runs_after_it_with_the_old_key(tmp_path: Path) -> None:
    """MySQL 8 changes a primary key in place with concurrent writes allowed (Online DDL, "Primary Key
    Operations"); a write committed during the ALTER is binlogged before it, keyed by the old key,
    with its own start time -- after the ALTER's, which is the ALTER event's time. Derived order
    places it after the ALTER, and a W between the two times puts it in a run after the ALTER's,
    which has no key DDL: keyed by a key the table had, it is applied by the table's (a reviewer's
    case: held by the first version of the key check)."""
    t1, t2, u = _int_table("t", ("id",)), _int_table("t", ("id", "v")), _int_table("u", ("id",))
    row, ddl = _Canal.row, _Canal.ddl
    first = [*ddl("t", "CREATE TABLE shop.t (id int primary key, v int not null)", 1_000, t1),
             *ddl("u", "CREATE TABLE shop.u (id int primary key, v int)", 1_000, u),
             row(0, t1, {"id": 1, "v": 1}, 1_000), row(1, t1, {"id": 2, "v": 2}, 1_000),
             row(0, u, {"id": 8, "v": 8}, 1_500), row(1, u, {"id": 9, "v": 9}, 1_500)]
    # The ALTER starts at 2 s and commits at 60 s; INSERTs started at 30 s and 40 s commit during it.
    second = [*ddl("t", "ALTER TABLE shop.t DROP PRIMARY KEY, ADD PRIMARY KEY (id, v)", 2_000, t2),
              row(1, t1, {"id": 3, "v": 3}, 30_000), row(1, t1, {"id": 6, "v": 6}, 40_000),
              row(0, u, {"id": 1, "v": 1}, 61_000)]
    third = [row(1, t2, {"id": 7, "v": 7}, 62_000), row(0, u, {"id": 2, "v": 2}, 63_000)]
    fourth = [row(0, u, {"id": 3, "v": 3}, 70_000), row(1, u, {"id": 4, "v": 4}, 70_000)]
    config, results = _Canal.apply(tmp_path, [first, second, third, fourth])
    assert sorted(r["id"] for r in read_table(config, "shop", "t", results[-1].watermark).to_pylist()) == [1, 2, 3, 6, 7]


def test_a_row_blocked_by_a_key_narrowing_alter_can_come_a_run_before_it(tmp_path: Path) -> None:
    """The key narrowed from (id, v) to (id): an INSERT that waited for the ALTER's metadata lock is
    binlogged after it, keyed by the new key, with its earlier start time; derived order places it
    before the ALTER (placed by the running maximum of its partition), here a run before it. Its key
    is part of the table's then, and it is applied by the table's (a hold there would be for good:
    the walk replays that run's window alone)."""
    t1, t2, u = _int_table("t", ("id", "v")), _int_table("t", ("id",)), _int_table("u", ("id",))
    row, ddl = _Canal.row, _Canal.ddl
    first = [*ddl("t", "CREATE TABLE shop.t (id int, v int, primary key (id, v))", 1_000, t1),
             *ddl("u", "CREATE TABLE shop.u (id int primary key, v int)", 1_000, u),
             row(0, t1, {"id": 1, "v": 1}, 1_000), row(1, t1, {"id": 2, "v": 2}, 1_000),
             row(0, u, {"id": 8, "v": 8}, 1_500), row(1, u, {"id": 9, "v": 9}, 1_500)]
    # The ALTER starts at 2 s, commits at 5 s; u's row started at 5 s commits before it on partition 0;
    # an INSERT into t started at 4 s waits for the ALTER's lock; u's row started at 4.5 s follows it.
    second = [row(0, u, {"id": 1, "v": 1}, 5_000),
              *ddl("t", "ALTER TABLE shop.t DROP PRIMARY KEY, ADD PRIMARY KEY (id)", 2_000, t2),
              row(1, t2, {"id": 3, "v": 3}, 4_000), row(1, u, {"id": 2, "v": 2}, 4_500)]
    third = [row(0, t2, {"id": 4, "v": 4}, 6_000), row(1, t2, {"id": 5, "v": 5}, 6_000),
             row(0, u, {"id": 3, "v": 3}, 7_000), row(1, u, {"id": 4, "v": 4}, 7_000)]
    config, results = _Canal.apply(tmp_path, [first, second, third])
    assert sorted(r["id"] for r in read_table(config, "shop", "t", results[-1].watermark).to_pylist()) == [1, 2, 3, 4, 5]


# ---------------------------------------------------------------- keys the table has, named otherwise

def test_a_composite_key_in_another_order_and_lettercase_is_the_tables_key(tmp_path: Path) -> None:
    """Debezium MySQL keys by the primary key's columns as its DDL parser names them; a key in
    another order and lettercase than the lake's DDL is the same key (MySQL's names ignore case):
    rows flow, and an UPDATE and a DELETE reach the row."""
    cols = (Column("id", parse_mysql_type("int"), False), Column("region", parse_mysql_type("varchar(8)"), False),
            Column("v", parse_mysql_type("int")))
    t = TableSchema("shop", "t", cols, ("region", "id"))
    other = TableSchema("shop", "clock", (Column("id", parse_mysql_type("int"), False),), ("id",))
    create = DdlChange("shop", "t", "CREATE TABLE shop.t (ID int, Region varchar(8), v int, PRIMARY KEY (Region, ID))",
                       None, P, "CREATE", None, t, 1_000)
    keys = ("id", "region")

    def row(op: Op, before: dict | None, after: dict | None, ms: int) -> RowChange:
        return RowChange(op, "shop", "t", before, after, keys, t.column_types, None, P, ms)

    def tick(ms: int) -> RowChange:
        return RowChange(Op.INSERT, "shop", "clock", None, {"id": ms}, ("id",), other.column_types, None, P, ms)

    first = [create, row(Op.INSERT, None, {"id": 1, "region": "eu", "v": 1}, 1_001),
             row(Op.INSERT, None, {"id": 2, "region": "eu", "v": 2}, 1_002), tick(1_100)]
    second = [row(Op.UPDATE, {"id": 1, "region": "eu", "v": 1}, {"id": 1, "region": "eu", "v": 10}, 2_000),
              row(Op.DELETE, {"id": 2, "region": "eu", "v": 2}, None, 2_001), tick(2_100)]
    config, results = _single_partition(tmp_path, "debezium-mysql", [first, second])
    got = [{k.casefold(): v for k, v in r.items()} for r in read_table(config, "shop", "t", results[-1].watermark).to_pylist()]
    assert got == [{"id": 1, "region": "eu", "v": 10}]


# ---------------------------------------------------------------- (1) columns through the run's renames

def test_a_row_just_before_rename_and_re_add_of_its_column_keeps_its_value_in_the_renamed_column(tmp_path: Path) -> None:
    """`RENAME COLUMN price TO cost, ADD COLUMN price` (keep the old column aside, add a new one under its
    name); a row committed just before it in its millisecond is placed after it (derived order) and names
    `price` without `cost`. Its value is cost's (MySQL: cost 2.50, price NULL); before, row_columns found
    the table's new `price` first and wrote it there with `cost` NULL -- a silent wrong answer. Which one
    a row naming `price` alone means cannot be told on a derived clock: the table is held, saying so."""
    first = [_ddl(1000, CREATE, "CREATE"),
             _row(0, "INSERT", 1001, ["id"], {"id": "1", "name": "a", "price": "1.50"}),
             _row(1, "INSERT", 1001, ["id"], {"id": "2", "name": "b", "price": "2.00"})]
    second = [_row(1, "UPDATE", 2000, ["id"], {"id": "2", "name": "b", "price": "2.50"}, {"price": "2.00"}),
              _ddl(2000, "ALTER TABLE shop.items RENAME COLUMN price TO cost, ADD COLUMN price decimal(10,2)", "ALTER"),
              _row(0, "INSERT", 2002, ["id"], {"id": "3", "name": "c", "cost": "3.00", "price": None}),
              _row(1, "INSERT", 2002, ["id"], {"id": "4", "name": "d", "cost": "4.00", "price": None})]
    try:
        config, results = _derived(tmp_path, [first, second])
    except RowSchemaMismatch as exc:
        assert "name 'price' without 'cost'" in str(exc), exc
        return  # held, saying why
    rows = _rows(config, results[-1].watermark)
    assert rows[2] == {"id": 2, "name": "b", "cost": "2.50", "price": None}


def test_rows_after_rename_and_re_add_of_a_column_carrying_both_are_written(tmp_path: Path) -> None:
    """The same DDL, every row after it carrying the renamed column and the new one: nothing to tell
    apart, nothing held; each value in its own column."""
    first = [_ddl(1000, CREATE, "CREATE"),
             _row(0, "INSERT", 1001, ["id"], {"id": "1", "name": "a", "price": "1.50"})]
    second = [_ddl(2000, "ALTER TABLE shop.items RENAME COLUMN price TO cost, ADD COLUMN price decimal(10,2)", "ALTER"),
              _row(0, "UPDATE", 2002, ["id"], {"id": "1", "name": "a", "cost": "1.50", "price": "9.99"}, {"price": None}),
              _row(1, "INSERT", 2002, ["id"], {"id": "2", "name": "b", "cost": "2.00", "price": None})]
    later = [_row(p, "INSERT", 3000, ["id"], {"id": str(8 + p), "name": "z", "cost": None, "price": None}) for p in (0, 1)]
    config, results = _derived(tmp_path, [first, second, later])
    rows = _rows(config, results[-1].watermark)
    assert rows[1] == {"id": 1, "name": "a", "cost": "1.50", "price": "9.99"}
    assert rows[2] == {"id": 2, "name": "b", "cost": "2.00", "price": None}


# ---------------------------------------------------------------- MySQL side: a statement blocked by the DDL's lock

def test_a_row_written_after_a_primary_key_change_with_an_earlier_start_time_is_applied(tmp_path: Path) -> None:
    """Was held by row_columns' first version; now applied. an INSERT blocked by `ALTER TABLE ...
    DROP PRIMARY KEY, ADD PRIMARY KEY (id, v)`'s metadata lock is binlogged after the ALTER, keyed
    by the new key, with its own (earlier) start time: derived order puts it before the ALTER (as
    test_row_schema_fit's ADD COLUMN case), where the table's key is (id): the table is held. Before
    96bd6c2 it was written by (id), then re-keyed with the table"""
    def schema_of(table: str, keys: tuple[str, ...]) -> TableSchema:
        cols = tuple(Column(n, parse_mysql_type("int"), n not in keys) for n in ("id", "v"))
        return TableSchema("shop", table, cols, keys)

    t1, t2, u = schema_of("t", ("id",)), schema_of("t", ("id", "v")), schema_of("u", ("id",))
    row, ddl, mark = _Canal.row, _Canal.ddl, _Canal.mark

    first = [*ddl("t", "CREATE TABLE shop.t (id int primary key, v int)", 1_000, t1),
             *ddl("u", "CREATE TABLE shop.u (id int primary key, v int)", 1_000, u),
             row(0, t1, {"id": 1, "v": 1}, 1_000), row(1, t1, {"id": 2, "v": 2}, 1_000), *mark(1_500)]
    # The ALTER starts at 2 s and commits at 5 s; u's row (started at 5 s) commits before it, on
    # partition 0; an INSERT into t started at 4 s waits for the ALTER's lock and is binlogged after it.
    second = [row(0, u, {"id": 1, "v": 1}, 5_000),
              *ddl("t", "ALTER TABLE shop.t MODIFY v int NOT NULL, DROP PRIMARY KEY, ADD PRIMARY KEY (id, v)", 2_000, t2),
              row(1, t2, {"id": 3, "v": 3}, 4_000),
              row(0, t2, {"id": 4, "v": 4}, 6_000), row(1, t2, {"id": 5, "v": 5}, 6_000),
              *mark(7_000)]
    config, results = _Canal.apply(tmp_path, [first, second])
    rows = {r["id"]: r for r in read_table(config, "shop", "t", results[-1].watermark).to_pylist()}
    assert rows[3] == {"id": 3, "v": 3}


def test_a_column_dropped_before_the_table_was_made_again_does_not_hide_a_row_naming_it(tmp_path: Path) -> None:
    """Was held by row_columns' first version; now applied. `gone` takes every RENAME / DROP COLUMN
    of the plan before the step, across a DROP TABLE and CREATE TABLE of the name in the same run: a
    row naming a column the old table dropped, after the table was made again without it (a change
    re-sent after the table was made again: the case RowSchemaMismatch is for), is written with that
    value silently dropped instead of holding the table. `_taken_by_ddl` should start over at the
    plan's last CreateTable / CreateTableLike / DropTable before the step"""
    first = [_ddl(1000, CREATE, "CREATE"),
             _row(0, "INSERT", 1001, ["id"], {"id": "1", "name": "a", "price": "1.50"}),
             _row(1, "INSERT", 1001, ["id"], {"id": "2", "name": "b", "price": "2.00"})]
    second = [_ddl(2000, "ALTER TABLE shop.items DROP COLUMN price", "ALTER"),
              _ddl(2001, "DROP TABLE shop.items", "ERASE"),
              _ddl(2002, "CREATE TABLE shop.items (id int primary key, name varchar(20))", "CREATE"),
              _row(1, "INSERT", 2003, ["id"], {"id": "2", "name": "b", "price": "2.00"}),  # re-sent
              _row(0, "INSERT", 2005, ["id"], {"id": "3", "name": "c"}),
              _row(1, "INSERT", 2005, ["id"], {"id": "4", "name": "d"})]
    with pytest.raises(RowSchemaMismatch, match="price"):
        _derived(tmp_path, [first, second])
