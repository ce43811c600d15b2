"""DDL corpus: statements written from the MySQL 8 and TiDB grammars, each with what it does.

Every row is ``(statement, expected)``: the list of changes ``parse_ddl`` must return (a
bare change is on ``shop.t``; ``(ref, change)`` names another table), ``NOOP`` for statements
that change no table, or ``Fails(pattern)`` for a ``DdlParseError`` whose message matches.
Grammar sections: MySQL 8.0 reference 15.1.9 ALTER TABLE, 15.1.20 CREATE TABLE, 15.1.36
RENAME TABLE, 15.1.37 TRUNCATE TABLE, 15.1.32 DROP TABLE; TiDB SQL statement reference.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from cdc_codecs import Column, DdlChange, SourcePosition, TableSchema
from cdc_codecs.types import parse_mysql_type
from spark.apply_plan import build_apply_plans, ddl_changes
from spark.ddl import (
    AddColumn,
    ChangeColumnType,
    CreateTable,
    CreateTableLike,
    DdlParseError,
    DropColumn,
    DropTable,
    MoveColumn,
    RenameColumn,
    RenameTable,
    SetKeyColumns,
    TruncateTable,
    parse_ddl,
)

DB = "shop"
T = (DB, "t")
NOOP: list = []


@dataclass(frozen=True)
class Fails:
    pattern: str


def col(name: str, mysql_type: str, nullable: bool = True) -> Column:
    return Column(name, parse_mysql_type(mysql_type), nullable)


def add(name: str, mysql_type: str, nullable: bool = True, if_not_exists: bool = False) -> AddColumn:
    return AddColumn(col(name, mysql_type, nullable), if_not_exists)


def modify(name: str, mysql_type: str) -> ChangeColumnType:
    return ChangeColumnType(name, parse_mysql_type(mysql_type))


def first(name: str) -> MoveColumn:
    return MoveColumn(name, None)


def after(name: str, other: str) -> MoveColumn:
    return MoveColumn(name, other)


def keys(*names: str) -> SetKeyColumns:
    return SetKeyColumns(names)


def create(table: str, columns: list[Column], key: tuple[str, ...] = (), db: str = DB, if_not_exists: bool = False):
    return ((db, table), CreateTable(TableSchema(db, table, tuple(columns), key), if_not_exists))


def on(db: str, table: str, change):
    return ((db, table), change)


CORPUS: list[tuple[str, list | Fails]] = [
    # ---- ALTER TABLE ... ADD [COLUMN] col_name column_definition [FIRST | AFTER col_name]
    ("ALTER TABLE t ADD COLUMN a INT", [add("a", "int")]),
    ("ALTER TABLE t ADD a INT", [add("a", "int")]),
    ("alter table t add column a bigint unsigned not null default 0", [add("a", "bigint unsigned", nullable=False)]),
    ("ALTER TABLE t ADD COLUMN price DECIMAL(12,2) NULL COMMENT 'gross, in EUR'", [add("price", "decimal(12,2)")]),
    ("ALTER TABLE t ADD COLUMN s ENUM('a','b,c') DEFAULT 'a'", [add("s", "enum('a','b,c')")]),
    ("ALTER TABLE t ADD COLUMN name VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin", [add("name", "varchar(64)")]),
    ("ALTER TABLE t ADD COLUMN at DATETIME(6) DEFAULT CURRENT_TIMESTAMP(6)", [add("at", "datetime(6)")]),
    ("ALTER TABLE t ADD COLUMN doc JSON", [add("doc", "json")]),
    ("ALTER TABLE t ADD COLUMN total INT AS (a + b) STORED", [add("total", "int")]),
    # types are read as written, by the protocols' type parser (sqlglot would make REAL a FLOAT)
    ("ALTER TABLE t ADD COLUMN r REAL, ADD d DOUBLE PRECISION", [add("r", "double"), add("d", "double")]),
    ("ALTER TABLE t ADD COLUMN g POINT NOT NULL SRID 4326", [add("g", "point", nullable=False)]),
    ("ALTER TABLE t ADD COLUMN v LONG VARCHAR, ADD n NATIONAL VARCHAR(10)", [add("v", "mediumtext"), add("n", "varchar(10)")]),
    ("ALTER TABLE t ADD COLUMN u INT(11) UNSIGNED ZEROFILL NOT NULL", [add("u", "int(11) unsigned zerofill", nullable=False)]),
    ("ALTER TABLE t ADD COLUMN a INT FIRST", [add("a", "int"), first("a")]),
    ("ALTER TABLE t ADD COLUMN a INT AFTER id", [add("a", "int"), after("a", "id")]),
    ("ALTER TABLE t ADD COLUMN a INT NOT NULL DEFAULT 0 COMMENT 'x' AFTER b", [add("a", "int", nullable=False), after("a", "b")]),
    ("ALTER TABLE t ADD COLUMN (a INT, b VARCHAR(10))", [add("a", "int"), add("b", "varchar(10)")]),
    ("ALTER TABLE t ADD (a INT, b INT, INDEX ia (a))", [add("a", "int"), add("b", "int")]),
    ("ALTER TABLE t ADD COLUMN a INT, ADD COLUMN b INT AFTER a", [add("a", "int"), add("b", "int"), after("b", "a")]),
    ("ALTER TABLE t ADD COLUMN id2 BIGINT PRIMARY KEY", [add("id2", "bigint", nullable=False), keys("id2")]),
    # TiDB (and MariaDB): IF NOT EXISTS
    ("ALTER TABLE t ADD COLUMN IF NOT EXISTS a INT", [add("a", "int", if_not_exists=True)]),
    ("ALTER TABLE t ADD COLUMN IF NOT EXISTS (a INT, b INT)", [add("a", "int", if_not_exists=True), add("b", "int", if_not_exists=True)]),
    # ---- DROP [COLUMN]
    ("ALTER TABLE t DROP COLUMN a", [DropColumn("a")]),
    ("ALTER TABLE t DROP a", [DropColumn("a")]),
    ("ALTER TABLE t DROP COLUMN IF EXISTS a", [DropColumn("a")]),
    ("ALTER TABLE t DROP COLUMN a, DROP COLUMN b", [DropColumn("a"), DropColumn("b")]),
    # ---- MODIFY / CHANGE / RENAME COLUMN
    ("ALTER TABLE t MODIFY c BIGINT", [modify("c", "bigint")]),
    ("ALTER TABLE t MODIFY COLUMN c BIGINT NOT NULL", [modify("c", "bigint")]),
    ("ALTER TABLE t MODIFY COLUMN c DECIMAL(20,2) FIRST", [modify("c", "decimal(20,2)"), first("c")]),
    ("ALTER TABLE t MODIFY c INT AFTER d", [modify("c", "int"), after("c", "d")]),
    ("ALTER TABLE t MODIFY id BIGINT PRIMARY KEY", [modify("id", "bigint"), keys("id")]),
    ("ALTER TABLE t CHANGE old new BIGINT", [RenameColumn("old", "new"), modify("new", "bigint")]),
    ("ALTER TABLE t CHANGE COLUMN c c BIGINT", [modify("c", "bigint")]),
    ("ALTER TABLE t CHANGE old new BIGINT FIRST", [RenameColumn("old", "new"), modify("new", "bigint"), first("new")]),
    ("ALTER TABLE t CHANGE COLUMN old new TEXT AFTER x", [RenameColumn("old", "new"), modify("new", "text"), after("new", "x")]),
    ("ALTER TABLE t RENAME COLUMN d TO e", [RenameColumn("d", "e")]),
    # ---- several clauses in one statement, in order
    ("ALTER TABLE t ADD COLUMN a INT, DROP COLUMN b, MODIFY c BIGINT, RENAME COLUMN d TO e",
     [add("a", "int"), DropColumn("b"), modify("c", "bigint"), RenameColumn("d", "e")]),
    ("ALTER TABLE t DROP COLUMN a, ADD COLUMN a VARCHAR(5) FIRST", [DropColumn("a"), add("a", "varchar(5)"), first("a")]),
    ("ALTER TABLE t ADD COLUMN c INT, ALGORITHM=INPLACE, LOCK=NONE", [add("c", "int")]),
    ("ALTER TABLE t ADD COLUMN c INT, ADD INDEX ic (c), COMMENT = 'new c'", [add("c", "int")]),
    ("ALTER TABLE t ADD COLUMN c INT PARTITION BY HASH(id) PARTITIONS 4", [add("c", "int")]),
    # ---- primary key: followed (the table's key columns); applied after the column changes
    ("ALTER TABLE t ADD PRIMARY KEY (a)", [keys("a")]),
    ("ALTER TABLE t ADD CONSTRAINT pk PRIMARY KEY (a, b)", [keys("a", "b")]),
    ("ALTER TABLE t ADD PRIMARY KEY (a(10), b) USING BTREE", [keys("a", "b")]),
    ("ALTER TABLE t DROP PRIMARY KEY", [keys()]),
    ("ALTER TABLE t DROP INDEX `PRIMARY`", [keys()]),
    ("ALTER TABLE t DROP PRIMARY KEY, ADD PRIMARY KEY (id, region)", [keys(), keys("id", "region")]),
    ("ALTER TABLE t ADD PRIMARY KEY (k), ADD COLUMN k INT NOT NULL FIRST", [add("k", "int", nullable=False), first("k"), keys("k")]),
    # ---- table renames
    ("ALTER TABLE a RENAME TO b", [on(DB, "a", RenameTable(DB, "b"))]),
    ("ALTER TABLE a RENAME AS b", [on(DB, "a", RenameTable(DB, "b"))]),
    ("ALTER TABLE a RENAME b", [on(DB, "a", RenameTable(DB, "b"))]),
    ("ALTER TABLE shop.a RENAME TO archive.a", [on(DB, "a", RenameTable("archive", "a"))]),
    ("ALTER TABLE a RENAME TO b, ADD COLUMN c INT", [on(DB, "a", add("c", "int")), on(DB, "a", RenameTable(DB, "b"))]),
    ("RENAME TABLE a TO b", [on(DB, "a", RenameTable(DB, "b"))]),
    ("RENAME TABLE a TO b, c TO d", [on(DB, "a", RenameTable(DB, "b")), on(DB, "c", RenameTable(DB, "d"))]),
    ("RENAME TABLE shop.a TO `other db`.`a b`, b TO a", [on(DB, "a", RenameTable("other db", "a b")), on(DB, "b", RenameTable(DB, "a"))]),
    ("RENAME TABLE a TO tmp, b TO a, tmp TO b",
     [on(DB, "a", RenameTable(DB, "tmp")), on(DB, "b", RenameTable(DB, "a")), on(DB, "tmp", RenameTable(DB, "b"))]),
    # ---- no-ops: indexes, constraints, defaults, visibility, options, partition layout
    ("ALTER TABLE t ADD INDEX idx (a)", NOOP),
    ("ALTER TABLE t ADD UNIQUE KEY u (a, b)", NOOP),
    ("ALTER TABLE t ADD FULLTEXT INDEX f (body)", NOOP),
    ("ALTER TABLE t ADD CONSTRAINT fk FOREIGN KEY (a) REFERENCES u (id) ON DELETE CASCADE", NOOP),
    ("ALTER TABLE t ADD CONSTRAINT c CHECK (a > 0)", NOOP),
    ("ALTER TABLE t DROP INDEX idx", NOOP),
    ("ALTER TABLE t DROP KEY idx", NOOP),
    ("ALTER TABLE t DROP FOREIGN KEY fk", NOOP),
    ("ALTER TABLE t DROP CHECK c", NOOP),
    ("ALTER TABLE t RENAME INDEX a TO b", NOOP),
    ("ALTER TABLE t ALTER INDEX i INVISIBLE", NOOP),
    ("ALTER TABLE t ALTER COLUMN c SET DEFAULT 1", NOOP),
    ("ALTER TABLE t ALTER c DROP DEFAULT", NOOP),
    ("ALTER TABLE t ALTER COLUMN c SET INVISIBLE", NOOP),
    ("ALTER TABLE t COMMENT='x'", NOOP),
    ("ALTER TABLE t COMMENT = 'with, a comma'", NOOP),
    ("ALTER TABLE t ENGINE=InnoDB", NOOP),
    ("ALTER TABLE t ENGINE=InnoDB AUTO_INCREMENT=5", NOOP),
    ("ALTER TABLE t DEFAULT CHARSET=utf8mb4", NOOP),
    ("ALTER TABLE t CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin", NOOP),
    ("ALTER TABLE t ROW_FORMAT=COMPRESSED, KEY_BLOCK_SIZE=8", NOOP),
    ("ALTER TABLE t FORCE", NOOP),
    ("ALTER TABLE t ORDER BY a", NOOP),
    ("ALTER TABLE t PARTITION BY HASH(id) PARTITIONS 4", NOOP),
    ("ALTER TABLE t PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN MAXVALUE)", NOOP),
    ("ALTER TABLE t ADD PARTITION (PARTITION p2 VALUES LESS THAN (30))", NOOP),
    ("ALTER TABLE t REORGANIZE PARTITION p0 INTO (PARTITION a VALUES LESS THAN (5), PARTITION b VALUES LESS THAN (10))", NOOP),
    ("ALTER TABLE t COALESCE PARTITION 2", NOOP),
    ("ALTER TABLE t ANALYZE PARTITION p0", NOOP),
    ("ALTER TABLE t REMOVE PARTITIONING", NOOP),
    ("ALTER TABLE t", NOOP),
    # TiDB table options
    ("ALTER TABLE t SET TIFLASH REPLICA 1", NOOP),
    ("ALTER TABLE t SHARD_ROW_ID_BITS = 4", NOOP),
    ("ALTER TABLE t AUTO_ID_CACHE = 100", NOOP),
    ("ALTER TABLE t PLACEMENT POLICY = p1", NOOP),
    ("ALTER TABLE t TTL = created_at + INTERVAL 1 DAY", NOOP),
    ("ALTER TABLE t CACHE", NOOP),
    ("ALTER TABLE t LAST PARTITION LESS THAN (100)", NOOP),
    # ---- rows removed or brought without row events: fail
    ("ALTER TABLE t DROP PARTITION p0", Fails("drops a partition's rows without row events")),
    ("ALTER TABLE t TRUNCATE PARTITION p0, p1", Fails("deletes a partition's rows")),
    ("ALTER TABLE t EXCHANGE PARTITION p0 WITH TABLE t2", Fails("swaps a partition's rows")),
    ("ALTER TABLE t DISCARD TABLESPACE", Fails("discards the table's tablespace")),
    ("ALTER TABLE t IMPORT TABLESPACE", Fails("imports rows")),
    ("ALTER TABLE t FIRST PARTITION LESS THAN (10)", Fails("drops the first partitions")),
    ("FLASHBACK TABLE t TO t2", Fails("restores a dropped table's rows")),
    ("RECOVER TABLE t", Fails("restores a dropped table's rows")),
    # ---- not understood: fail, naming the clause
    ("ALTER TABLE t ADD COLUMN c INT, FROBNICATE c", Fails(r"cannot tell what 'FROBNICATE c' does")),
    ("ALTER TABLE t ALTER COLUMN c TYPE BIGINT", Fails("is not MySQL")),
    ("ALTER TABLE t ADD", Fails("cannot tell what .ADD. does")),
    ("ALTER TABLE t ADD COLUMN c NOTATYPE(3)", Fails("c NOTATYPE")),
    ("ALTER TABLE 'unterminated", Fails("cannot read")),
    # ---- CREATE TABLE
    ("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))", [create("t", [col("id", "int", False), col("v", "varchar(10)")], ("id",))]),
    ("CREATE TABLE IF NOT EXISTS t (id INT, PRIMARY KEY (id))", [create("t", [col("id", "int")], ("id",), if_not_exists=True)]),
    ("CREATE TABLE t (a INT, b INT, CONSTRAINT pk PRIMARY KEY (a, b))", [create("t", [col("a", "int"), col("b", "int")], ("a", "b"))]),
    ("CREATE TABLE t (a INT)", [create("t", [col("a", "int")])]),
    ("CREATE TABLE `other db`.`t.x` (`a.b` INT, `ü x` TEXT)", [create("t.x", [col("a.b", "int"), col("ü x", "text")], db="other db")]),
    (("CREATE TABLE t (id BIGINT NOT NULL AUTO_INCREMENT, c VARCHAR(10) CHARACTER SET utf8mb4 DEFAULT NULL, "
      "g INT AS (id + 1) STORED, PRIMARY KEY (id) /*T![clustered_index] CLUSTERED */, KEY k (c), UNIQUE KEY u (c), "
      "CONSTRAINT fk FOREIGN KEY (c) REFERENCES x (c), CHECK (id > 0)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"),
     [create("t", [col("id", "bigint", False), col("c", "varchar(10)"), col("g", "int")], ("id",))]),
    ("CREATE TABLE t (id INT) PARTITION BY HASH(id) PARTITIONS 4", [create("t", [col("id", "int")])]),
    ("CREATE TABLE t (id BIGINT AUTO_RANDOM(5) PRIMARY KEY, v INT) SHARD_ROW_ID_BITS=4 PRE_SPLIT_REGIONS=2",
     [create("t", [col("id", "bigint", False), col("v", "int")], ("id",))]),
    ("CREATE TABLE t (g POINT NOT NULL SRID 0, r REAL, `key` INT, PRIMARY KEY (`key`))",
     [create("t", [col("g", "point", False), col("r", "double"), col("key", "int")], ("key",))]),
    ("CREATE TABLE x LIKE y", [on(DB, "x", CreateTableLike((DB, "x"), (DB, "y")))]),
    ("CREATE TABLE IF NOT EXISTS x (LIKE other.y)", [on(DB, "x", CreateTableLike((DB, "x"), ("other", "y"), True))]),
    ("CREATE TABLE t AS SELECT 1 AS a", Fails("CREATE TABLE ... SELECT")),
    ("CREATE TABLE t (a INT) SELECT a FROM u", Fails("CREATE TABLE ... SELECT")),
    ("CREATE TEMPORARY TABLE t (a INT)", NOOP),
    ("CREATE INDEX i ON t (a)", NOOP),
    ("CREATE UNIQUE INDEX i ON t (a, b)", NOOP),
    ("CREATE DATABASE d", NOOP),
    ("CREATE VIEW v AS SELECT 1", NOOP),
    # ---- DROP / TRUNCATE
    ("DROP TABLE t", [DropTable()]),
    ("DROP TABLE IF EXISTS a, b", [on(DB, "a", DropTable()), on(DB, "b", DropTable())]),
    ("DROP TABLE shop.a, other.b RESTRICT", [on(DB, "a", DropTable()), on("other", "b", DropTable())]),
    ("DROP TEMPORARY TABLE t", NOOP),
    ("DROP INDEX i ON t", NOOP),
    ("drop database if exists test", NOOP),
    ("TRUNCATE TABLE t", [TruncateTable()]),
    ("TRUNCATE t", [TruncateTable()]),
    ("TRUNCATE TABLE other.t", [on("other", "t", TruncateTable())]),
    # ---- statements about no table
    ("ANALYZE TABLE t", NOOP),
    ("OPTIMIZE TABLE t", NOOP),
    ("CREATE USER u IDENTIFIED BY 'p'", NOOP),
    ("GRANT SELECT ON shop.* TO u", NOOP),
    ("RENAME USER a TO b", NOOP),
    ("SET GLOBAL tidb_gc_life_time = '10m'", NOOP),
    # ---- comments, backticks, qualified, unicode and dotted names
    ("/* Query from DMS-WEBSQL-0-Qid_1 by user 1 */ ALTER TABLE t ADD COLUMN v INT", [add("v", "int")]),
    ("ALTER TABLE t -- why\n ADD COLUMN v INT # more\n", [add("v", "int")]),
    ("ALTER TABLE t ADD COLUMN c VARCHAR(10) COMMENT 'not a /* comment */, nor -- this'", [add("c", "varchar(10)")]),
    ("ALTER TABLE `shop`.`t` ADD COLUMN `a.b` INT, RENAME COLUMN `a.b` TO `c d`, DROP COLUMN `c d`",
     [add("a.b", "int"), RenameColumn("a.b", "c d"), DropColumn("c d")]),
    ("ALTER TABLE `we``ird`.`sel.ect` ADD COLUMN `ünï` INT FIRST", [on("we`ird", "sel.ect", add("ünï", "int")), on("we`ird", "sel.ect", first("ünï"))]),
    ("ALTER TABLE `table` ADD COLUMN `order` INT AFTER `select`", [on(DB, "table", add("order", "int")), on(DB, "table", after("order", "select"))]),
    ("ALTER TABLE t ADD COLUMN a INT; ALTER TABLE u DROP COLUMN b;", [add("a", "int"), on(DB, "u", DropColumn("b"))]),
]


def _normalised(expected: list) -> list:
    return [e if isinstance(e, tuple) else (T, e) for e in expected]


@pytest.mark.parametrize("sql, expected", CORPUS, ids=[s[:70] for s, _ in CORPUS])
def test_corpus(sql: str, expected) -> None:
    if isinstance(expected, Fails):
        with pytest.raises(DdlParseError, match=expected.pattern):
            parse_ddl(sql, DB)
    else:
        assert parse_ddl(sql, DB) == _normalised(expected)


def test_corpus_is_large_and_covers_every_change() -> None:
    assert len(CORPUS) >= 80
    seen = {type(c) for _, e in CORPUS if not isinstance(e, Fails) for _, c in _normalised(e)}
    assert seen == {AddColumn, DropColumn, RenameColumn, ChangeColumnType, MoveColumn, SetKeyColumns, RenameTable,
                    CreateTable, CreateTableLike, TruncateTable, DropTable}


def test_errors_name_the_statement() -> None:
    sql = "ALTER TABLE t ADD COLUMN c INT, FROBNICATE c"
    with pytest.raises(DdlParseError) as info:
        parse_ddl(sql, DB)
    assert sql in str(info.value)


P = SourcePosition("cdc", 0, 7)


def test_schema_after_fixes_types_of_every_clause() -> None:
    after = TableSchema(DB, "t", (col("id", "int", False), col("a", "bigint unsigned"), col("e", "decimal(30,4)"), col("f", "enum('x','y')")), ("id",))
    ddl = DdlChange(DB, "t", "ALTER TABLE t ADD COLUMN a BIGINT, CHANGE d e DECIMAL(10,2) FIRST, ADD f ENUM('x','y'), DROP b",
                    1, P, "ALTER", None, after)
    assert ddl_changes(ddl) == _normalised([
        add("a", "bigint unsigned"), RenameColumn("d", "e"), modify("e", "decimal(30,4)"), first("e"),
        add("f", "enum('x','y')"), DropColumn("b"),
    ])


def test_schema_after_makes_like_a_create_and_leaves_other_tables_alone() -> None:
    after = TableSchema(DB, "x", (col("id", "int", False), col("v", "text")), ("id",))
    like = DdlChange(DB, "x", "CREATE TABLE x LIKE y", 1, P, "CREATE", None, after)
    assert ddl_changes(like) == [((DB, "x"), CreateTable(after))]
    renames = DdlChange(DB, "a", "RENAME TABLE a TO b, c TO d", 1, P, "RENAME", None, TableSchema(DB, "b", (col("id", "int"),), ()))
    assert ddl_changes(renames) == [((DB, "a"), RenameTable(DB, "b")), ((DB, "c"), RenameTable(DB, "d"))]


def test_plans_put_each_net_change_between_the_ddls_of_its_table() -> None:
    from spark.plane import NetSummary

    alter = DdlChange(DB, "t", "ALTER TABLE t ADD PRIMARY KEY (a, b)", 5, P, "ALTER")
    rename = DdlChange(DB, "t", "RENAME TABLE t TO u", 20, P, "RENAME")
    before = NetSummary(DB, "t", 0, keys=3, deletes=1, first=(3, "topic", 0, 1, 0))
    between = NetSummary(DB, "t", 1, keys=2, deletes=0, first=(10, "topic", 0, 4, 0))
    renamed = NetSummary(DB, "u", 0, keys=1, deletes=0, first=(30, "topic", 0, 9, 0))
    other = NetSummary(DB, "v", 0, keys=1, deletes=1, first=(1, "topic", 1, 0, 0))
    plans = build_apply_plans([rename, alter], [renamed, between, other, before])
    assert [p.summary() for p in plans] == [
        f"{DB}.v: data(0 upserts, 1 deletes)",
        f"{DB}.t: data(2 upserts, 1 deletes); schema(SetKeyColumns); data(2 upserts, 0 deletes); schema(RenameTable)",
        f"{DB}.u: data(1 upserts, 0 deletes)",
    ]
    assert [s.segment for s in plans[1].steps if not hasattr(s, "changes")] == [0, 1]


def _ddl(sql: str, ts: int) -> DdlChange:
    return DdlChange(DB, "t", sql, ts, P, "QUERY")


def _rows(table: str, ts: int, segment: int = 0):  # noqa: ANN202
    from spark.plane import NetSummary

    return NetSummary(DB, table, segment, keys=1, deletes=0, first=(ts, "topic", 0, ts, 0))


def test_plans_follow_who_holds_each_name_not_whose_rows_came_first() -> None:
    """gh-ost's cut-over with the ghost's rows first in the run: t's plan (renamed to _t_del, onto the
    sentry table dropped just before) runs before the ghost's rename into t, and t's later rows after."""
    ddls = [_ddl("CREATE TABLE `_t_gho` LIKE `t`", 2), _ddl("ALTER TABLE `_t_gho` ADD COLUMN a INT", 3),
            _ddl("CREATE TABLE `_t_del` (id INT PRIMARY KEY)", 10), _ddl("DROP TABLE IF EXISTS `_t_del`", 11),
            _ddl("RENAME TABLE `t` TO `_t_del`, `_t_gho` TO `t`", 12), _ddl("DROP TABLE IF EXISTS `_t_del`", 14)]
    net = [_rows("_t_gho", 4, 2), _rows("t", 5), _rows("t", 13, 1)]
    plans = build_apply_plans(ddls, net)
    assert [p.summary() for p in plans] == [
        f"{DB}._t_del: schema(CreateTable); schema(DropTable)",
        f"{DB}.t: data(1 upserts, 0 deletes); schema(RenameTable)",
        f"{DB}._t_gho: schema(CreateTableLike); schema(AddColumn); data(1 upserts, 0 deletes); schema(RenameTable)",
        f"{DB}.t: data(1 upserts, 0 deletes)",
        f"{DB}._t_del: schema(DropTable)",
    ]
    assert [p.sequence for p in plans] == [0, 1, 2, 3, 4]
    like = plans[2].steps[0]
    assert like.source_at == (DB, "_t_del")  # t is under its new name when the ghost's plan copies it


def test_a_swap_through_a_temporary_name_runs_in_statement_order() -> None:
    """MySQL 8 manual 15.1.36: ``RENAME TABLE a TO tmp, b TO a, tmp TO b`` renames left to right."""
    plans = build_apply_plans([_ddl("RENAME TABLE a TO tmp, b TO a, tmp TO b", 10)], [_rows("b", 1), _rows("a", 2)])
    assert [(p.table, p.steps[-1].changes[-1]) for p in plans] == [
        ("a", RenameTable(DB, "tmp")), ("b", RenameTable(DB, "a")), ("tmp", RenameTable(DB, "b"))]


def test_a_copy_before_its_source_changes_runs_first() -> None:
    """``CREATE u LIKE t`` then ``ALTER t``, t without earlier steps: u copies t before t's plan changes it."""
    plans = build_apply_plans([_ddl("CREATE TABLE u LIKE t", 5), _ddl("ALTER TABLE t ADD COLUMN a INT", 6)], [_rows("t", 7, 1)])
    assert [p.table for p in plans] == ["u", "t"] and plans[0].steps[0].source_at is None


def test_a_copy_that_must_run_both_before_and_after_its_source_fails_naming_the_tables() -> None:
    """``CREATE u LIKE t``, ``ALTER t``, ``RENAME t TO x, u TO t`` without schemas in the events: u must copy t
    before t's plan changes it, and rename into t after t's plan moved it away."""
    from spark.apply_plan import UnorderableDdl

    ddls = [_ddl("CREATE TABLE u LIKE t", 5), _ddl("ALTER TABLE t ADD COLUMN a INT", 6), _ddl("RENAME TABLE t TO x, u TO t", 7)]
    with pytest.raises(UnorderableDdl, match=r"shop.t, shop.u.*Simple, Debezium"):
        build_apply_plans(ddls, [])
