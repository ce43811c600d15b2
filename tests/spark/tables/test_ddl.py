"""DDL corpus: statements written from the MySQL 8 and TiDB grammars, each with what it does.

Every row is ``(statement, expected)``: the list of changes ``parse_ddl`` must return (a
bare change is on ``shop.t``; ``(ref, change)`` names another table), ``NOOP`` for statements
that change no table, or ``Fails(pattern)`` for a ``DdlParseError`` whose message matches.
Grammar sections: MySQL 8.0 reference 15.1.9 ALTER TABLE, 15.1.20 CREATE TABLE, 15.1.36
RENAME TABLE, 15.1.37 TRUNCATE TABLE, 15.1.32 DROP TABLE; TiDB SQL statement reference.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from decimal import Decimal

import pytest

from cdc_codecs import Column, DdlChange, SourcePosition, TableSchema
from cdc_codecs.types import parse_mysql_type
from spark.commit.plan import SchemaStep, build_apply_plans, ddl_changes
from spark.tables.ddl import parse_ddl
from spark.tables.ddl_changes import (
    AddColumn,
    ChangeColumnType,
    CreateTable,
    CreateTableLike,
    DdlParseError,
    DefaultLiteral,
    DefaultNow,
    DefaultUnknown,
    DropColumn,
    DropDatabase,
    DropTable,
    MoveColumn,
    RenameColumn,
    RenameTable,
    SetKeyColumns,
    TruncateTable,
)
from spark.tables.ddl_changes import (
    AddPartitions, CoalescePartitions, DropPartitions, ExchangePartition, ReorganizePartitions, SetPartitioning, TruncatePartitions,
)
from spark.tables.ddl_defaults import OlderValue, ValueNotReproducible, existing_rows_value
from spark.tables.partitioning import MAXVALUE, NULL, PartitionDef, Partitioning

DB = "shop"
T = (DB, "t")
NOOP: list = []
GENERATED = DefaultUnknown("a generated column computes the existing rows' values from columns tidelake may not hold")


@dataclass(frozen=True)
class Fails:
    pattern: str


def col(name: str, mysql_type: str, nullable: bool = True) -> Column:
    return Column(name, parse_mysql_type(mysql_type), nullable)


def add(name: str, mysql_type: str, nullable: bool = True, if_not_exists: bool = False, default=None) -> AddColumn:
    return AddColumn(col(name, mysql_type, nullable), if_not_exists, default)


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


@dataclass(frozen=True)
class Expr:
    text: str


def lit(value) -> tuple[str, ...]:  # noqa: ANN001
    if value is MAXVALUE or value is None:
        return MAXVALUE if value is MAXVALUE else NULL
    if isinstance(value, Expr):
        return ("expr", value.text)
    return ("int", str(value)) if isinstance(value, int) else ("str", value)


def less(name: str, *bound) -> PartitionDef:  # noqa: ANN002
    return PartitionDef(name, less_than=tuple(lit(b) for b in bound))


def values(name: str, *items) -> PartitionDef:  # noqa: ANN002
    return PartitionDef(name, values_in=tuple(tuple(lit(v) for v in (i if isinstance(i, tuple) else (i,))) for i in items))


def by(method: str, expression: str, columns: tuple[str, ...] = (), *partitions: PartitionDef, listed: bool = True,
       function: str | None = None, count: int | None = None, linear: bool = False) -> SetPartitioning:
    """``count``: HASH / KEY partitions named by MySQL, p0 ..."""
    if count is not None:
        partitions = tuple(PartitionDef(f"p{i}") for i in range(count))
    return SetPartitioning(Partitioning(method, expression, columns, partitions if listed else None, function, linear))


CORPUS: list[tuple[str, list | Fails]] = [
    # ---- ALTER TABLE ... ADD [COLUMN] col_name column_definition [FIRST | AFTER col_name]
    ("ALTER TABLE t ADD COLUMN a INT", [add("a", "int")]),
    ("ALTER TABLE t ADD a INT", [add("a", "int")]),
    ("alter table t add column a bigint unsigned not null default 0", [add("a", "bigint unsigned", nullable=False, default=DefaultLiteral("0"))]),
    ("ALTER TABLE t ADD COLUMN price DECIMAL(12,2) NULL COMMENT 'gross, in EUR'", [add("price", "decimal(12,2)")]),
    ("ALTER TABLE t ADD COLUMN s ENUM('a','b,c') DEFAULT 'a'", [add("s", "enum('a','b,c')", default=DefaultLiteral("a", True))]),
    ("ALTER TABLE t ADD COLUMN name VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin", [add("name", "varchar(64)")]),
    ("ALTER TABLE t ADD COLUMN at DATETIME(6) DEFAULT CURRENT_TIMESTAMP(6)", [add("at", "datetime(6)", default=DefaultNow(6))]),
    ("ALTER TABLE t ADD COLUMN doc JSON", [add("doc", "json")]),
    ("ALTER TABLE t ADD COLUMN total INT AS (a + b) STORED", [add("total", "int", default=GENERATED)]),
    # types are read as written, by the protocols' type parser (sqlglot would make REAL a FLOAT)
    ("ALTER TABLE t ADD COLUMN r REAL, ADD d DOUBLE PRECISION", [add("r", "double"), add("d", "double")]),
    ("ALTER TABLE t ADD COLUMN g POINT NOT NULL SRID 4326", [add("g", "point", nullable=False)]),
    ("ALTER TABLE t ADD COLUMN v LONG VARCHAR, ADD n NATIONAL VARCHAR(10)", [add("v", "mediumtext"), add("n", "varchar(10)")]),
    ("ALTER TABLE t ADD COLUMN u INT(11) UNSIGNED ZEROFILL NOT NULL", [add("u", "int(11) unsigned zerofill", nullable=False)]),
    ("ALTER TABLE t ADD COLUMN a INT FIRST", [add("a", "int"), first("a")]),
    ("ALTER TABLE t ADD COLUMN a INT AFTER id", [add("a", "int"), after("a", "id")]),
    ("ALTER TABLE t ADD COLUMN a INT NOT NULL DEFAULT 0 COMMENT 'x' AFTER b", [add("a", "int", nullable=False, default=DefaultLiteral("0")), after("a", "b")]),
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
    ("ALTER TABLE t ADD COLUMN c INT PARTITION BY HASH(id) PARTITIONS 4", [add("c", "int"), by("HASH", "id", ("id",), count=4)]),
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
    # partitioning: kept, so that TRUNCATE / DROP PARTITION know which rows go (spark.tables.partitioning)
    ("ALTER TABLE t PARTITION BY HASH(id) PARTITIONS 4", [by("HASH", "id", ("id",), count=4)]),
    ("ALTER TABLE t PARTITION BY LINEAR HASH (YEAR(d)) (PARTITION a, PARTITION `b c`)",
     [by("HASH", "YEAR(d)", ("d",), PartitionDef("a"), PartitionDef("b c"), function="YEAR", linear=True)]),
    ("ALTER TABLE t PARTITION BY HASH (id)", [by("HASH", "id", ("id",), count=1)]),  # PARTITIONS 1 by default
    ("ALTER TABLE t PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN MAXVALUE)",
     [by("RANGE", "id", ("id",), less("p0", 10), less("p1", MAXVALUE))]),
    ("ALTER TABLE t ADD PARTITION (PARTITION p2 VALUES LESS THAN (30))", [AddPartitions((less("p2", 30),))]),
    ("ALTER TABLE t ADD PARTITION PARTITIONS 2", [AddPartitions((), 2)]),
    ("ALTER TABLE t REORGANIZE PARTITION p0 INTO (PARTITION a VALUES LESS THAN (5), PARTITION b VALUES LESS THAN (10))",
     [ReorganizePartitions(("p0",), (less("a", 5), less("b", 10)))]),
    ("ALTER TABLE t REORGANIZE PARTITION `a`, b INTO (PARTITION ab VALUES IN (1, NULL, -2))", [ReorganizePartitions(("a", "b"), (values("ab", 1, None, -2),))]),
    ("ALTER TABLE t COALESCE PARTITION 2", [CoalescePartitions(2)]),
    ("ALTER TABLE t COALESCE PARTITION p0", Fails("cannot read the number of partitions")),
    ("ALTER TABLE t ANALYZE PARTITION p0", NOOP),
    ("ALTER TABLE t OPTIMIZE PARTITION p0, p1", NOOP),
    ("ALTER TABLE t REMOVE PARTITIONING", [SetPartitioning(None)]),
    ("ALTER TABLE t", NOOP),
    # TiDB table options
    ("ALTER TABLE t SET TIFLASH REPLICA 1", NOOP),
    ("ALTER TABLE t SHARD_ROW_ID_BITS = 4", NOOP),
    ("ALTER TABLE t AUTO_ID_CACHE = 100", NOOP),
    ("ALTER TABLE t PLACEMENT POLICY = p1", NOOP),
    ("ALTER TABLE t TTL = created_at + INTERVAL 1 DAY", NOOP),
    ("ALTER TABLE t CACHE", NOOP),
    ("ALTER TABLE t LAST PARTITION LESS THAN (100)", NOOP),
    ("ALTER TABLE t REMOVE TTL", NOOP),
    ("ALTER TABLE t ALTER CHECK qty_positive NOT ENFORCED", NOOP),
    ("ALTER TABLE t ALTER CONSTRAINT qty_positive ENFORCED", NOOP),
    ("ALTER TABLE t ADD UNIQUE KEY ub (b) GLOBAL", NOOP),
    ("ALTER TABLE t ADD VECTOR INDEX iv ((VEC_COSINE_DISTANCE(emb))) USING HNSW", NOOP),
    ("ALTER TABLE t ADD CONSTRAINT positive CHECK (qty >= 0) NOT ENFORCED", NOOP),
    ("ALTER TABLE t PARTITION p1 ATTRIBUTES = 'merge_option=allow'", NOOP),
    ("CREATE GLOBAL TEMPORARY TABLE t (id INT PRIMARY KEY) ON COMMIT DELETE ROWS", NOOP),
    ("CREATE TABLE t (id BIGINT PRIMARY KEY AUTO_RANDOM(5, 54), b INT, UNIQUE KEY ub (b) GLOBAL, "
     "VECTOR INDEX iv ((VEC_L2_DISTANCE(emb))), emb VECTOR(3), CONSTRAINT CHECK (b > 0) NOT ENFORCED)",
     [create("t", [col("id", "bigint", False), col("b", "int"), col("emb", "vector(3)")], ("id",))]),
    # ---- rows removed or brought without row events: fail
    # partitions' rows deleted without row events: by the bounds where the lake knows them (commit)
    ("ALTER TABLE t DROP PARTITION p0", [DropPartitions(("p0",))]),
    ("ALTER TABLE t DROP PARTITION p0, `p 1`", [DropPartitions(("p0", "p 1"))]),
    ("ALTER TABLE t TRUNCATE PARTITION p0, p1", [TruncatePartitions(("p0", "p1"))]),
    ("ALTER TABLE t TRUNCATE PARTITION ALL", [TruncatePartitions(None)]),
    # EXCHANGE PARTITION: a change of both tables (spark.tables.exchange)
    ("ALTER TABLE t EXCHANGE PARTITION p0 WITH TABLE t2", [(T, ExchangePartition(T, "p0", (DB, "t2"))), ((DB, "t2"), ExchangePartition(T, "p0", (DB, "t2")))]),
    ("ALTER TABLE t EXCHANGE PARTITION `p 0` WITH TABLE other.nt WITHOUT VALIDATION",
     [(T, ExchangePartition(T, "p 0", ("other", "nt"), False)), (("other", "nt"), ExchangePartition(T, "p 0", ("other", "nt"), False))]),
    ("ALTER TABLE t EXCHANGE PARTITION p0 WITH TABLE nt WITH VALIDATION",
     [(T, ExchangePartition(T, "p0", (DB, "nt"))), ((DB, "nt"), ExchangePartition(T, "p0", (DB, "nt")))]),
    ("ALTER TABLE t EXCHANGE PARTITION p0 WITH nt", Fails("cannot read the partition and table")),
    ("ALTER TABLE t ADD COLUMN w INT, EXCHANGE PARTITION p0 WITH TABLE nt", Fails("with other clauses, which MySQL refuses")),
    ("ALTER TABLE t EXCHANGE PARTITION p0 WITH TABLE nt SOMEHOW", Fails("cannot read the table")),
    ("ALTER TABLE t DISCARD TABLESPACE", Fails("discards the table's tablespace")),
    ("ALTER TABLE t IMPORT TABLESPACE", Fails("imports rows")),
    ("ALTER TABLE t FIRST PARTITION LESS THAN (10)", Fails("drops the first partitions")),
    ("FLASHBACK TABLE t TO t2", Fails("restores a dropped table's rows")),
    ("FLASHBACK DATABASE shop TO shop_old", Fails("restores a dropped database's rows")),
    ("FLASHBACK CLUSTER TO TIMESTAMP '2024-05-01 10:00:00'", Fails("as they were at a past time without row events")),
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
    # a key part names its column ignoring case, as MySQL does; the key is the column's own name
    ("CREATE TABLE t (ID BIGINT, Region VARCHAR(8), PRIMARY KEY (id, REGION))",
     [create("t", [col("ID", "bigint"), col("Region", "varchar(8)")], ("ID", "Region"))]),
    ("CREATE TABLE t (id INT, PRIMARY KEY (nope))", Fails(r"the primary key \['nope'\] names a column the table does not have")),
    ("CREATE TABLE `other db`.`t.x` (`a.b` INT, `ü x` TEXT)", [create("t.x", [col("a.b", "int"), col("ü x", "text")], db="other db")]),
    (("CREATE TABLE t (id BIGINT NOT NULL AUTO_INCREMENT, c VARCHAR(10) CHARACTER SET utf8mb4 DEFAULT NULL, "
      "g INT AS (id + 1) STORED, PRIMARY KEY (id) /*T![clustered_index] CLUSTERED */, KEY k (c), UNIQUE KEY u (c), "
      "CONSTRAINT fk FOREIGN KEY (c) REFERENCES x (c), CHECK (id > 0)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"),
     [create("t", [col("id", "bigint", False), col("c", "varchar(10)"), col("g", "int")], ("id",))]),
    ("CREATE TABLE t (id INT) PARTITION BY HASH(id) PARTITIONS 4", [create("t", [col("id", "int")]), (T, by("HASH", "id", ("id",), count=4))]),
    ("CREATE TABLE t (id BIGINT AUTO_RANDOM(5) PRIMARY KEY, v INT) SHARD_ROW_ID_BITS=4 PRE_SPLIT_REGIONS=2",
     [create("t", [col("id", "bigint", False), col("v", "int")], ("id",))]),
    ("CREATE TABLE t (g POINT NOT NULL SRID 0, r REAL, `key` INT, PRIMARY KEY (`key`))",
     [create("t", [col("g", "point", False), col("r", "double"), col("key", "int")], ("key",))]),
    ("CREATE TABLE x LIKE y", [on(DB, "x", CreateTableLike((DB, "x"), (DB, "y")))]),
    ("CREATE TABLE IF NOT EXISTS x (LIKE other.y)", [on(DB, "x", CreateTableLike((DB, "x"), ("other", "y"), True))]),
    # primary keys: TiDB's CLUSTERED / NONCLUSTERED bare or in its comment form, key parts with a
    # prefix length or an order, index type and options (MySQL 15.1.20 key_part, index_option)
    ("CREATE TABLE t (id BIGINT, region VARCHAR(8), PRIMARY KEY (id, region) NONCLUSTERED)",
     [create("t", [col("id", "bigint"), col("region", "varchar(8)")], ("id", "region"))]),
    ("CREATE TABLE t (id BIGINT, PRIMARY KEY (id) CLUSTERED, KEY by_id (id))", [create("t", [col("id", "bigint")], ("id",))]),
    ("CREATE TABLE t (id INT NOT NULL PRIMARY KEY NONCLUSTERED, v INT)", [create("t", [col("id", "int", False), col("v", "int")], ("id",))]),
    ("CREATE TABLE t (id BIGINT PRIMARY KEY CLUSTERED AUTO_RANDOM(3), doc JSON)",
     [create("t", [col("id", "bigint", False), col("doc", "json")], ("id",))]),
    ("CREATE TABLE t (a INT, b INT, PRIMARY KEY (a, b) /*T![clustered_index] NONCLUSTERED */) /*T! SHARD_ROW_ID_BITS=2 */",
     [create("t", [col("a", "int"), col("b", "int")], ("a", "b"))]),
    ("CREATE TABLE t (ts DATETIME(3), seq INT, PRIMARY KEY (ts DESC, seq ASC))", [create("t", [col("ts", "datetime(3)"), col("seq", "int")], ("ts", "seq"))]),
    ("CREATE TABLE t (code VARCHAR(255), PRIMARY KEY (code(16) DESC))", [create("t", [col("code", "varchar(255)")], ("code",))]),
    ("CREATE TABLE t (`order` INT, `key` INT, CONSTRAINT `pk x` PRIMARY KEY USING BTREE (`order`, `key`) COMMENT 'pk' KEY_BLOCK_SIZE=8)",
     [create("t", [col("order", "int"), col("key", "int")], ("order", "key"))]),
    ("ALTER TABLE t ADD PRIMARY KEY (id) NONCLUSTERED", [keys("id")]),
    ("ALTER TABLE t ADD PRIMARY KEY (a, b) CLUSTERED", [keys("a", "b")]),
    ("ALTER TABLE t ADD CONSTRAINT PRIMARY KEY (tenant DESC, id)", [keys("tenant", "id")]),
    ("ALTER TABLE t ADD PRIMARY KEY USING HASH (slug(20))", [keys("slug")]),
    ("ALTER TABLE t DROP PRIMARY KEY, ADD PRIMARY KEY (id) NONCLUSTERED", [keys(), keys("id")]),
    ("ALTER TABLE t ADD (k INT NOT NULL, PRIMARY KEY (k) CLUSTERED)", [add("k", "int", nullable=False), keys("k")]),
    ("CREATE TABLE t (a INT, PRIMARY KEY ((a + 1)))", Fails("cannot read the key part")),
    ("ALTER TABLE t ADD PRIMARY KEY (a) FROBNICATE", Fails("cannot tell what 'FROBNICATE' does to the primary key")),
    # partition options (MySQL 15.1.20.x partition_options, TiDB interval partitioning): no change to columns
    ("CREATE TABLE t (id INT, created DATE) PARTITION BY RANGE (YEAR(created)) "
     "(PARTITION p2023 VALUES LESS THAN (2024), PARTITION pmax VALUES LESS THAN MAXVALUE)",
     [create("t", [col("id", "int"), col("created", "date")]), (T, by("RANGE", "YEAR(created)", ("created",), less("p2023", 2024), less("pmax", MAXVALUE), function="YEAR"))]),
    ("CREATE TABLE t (id INT NOT NULL, region CHAR(2)) PARTITION BY LIST COLUMNS (region) "
     "(PARTITION p_eu VALUES IN ('de', 'fr'), PARTITION p_us VALUES IN ('us'))",
     [create("t", [col("id", "int", False), col("region", "char(2)")]),
      (T, by("LIST", "region", ("region",), values("p_eu", "de", "fr"), values("p_us", "us")))]),
    ("CREATE TABLE t (id INT) PARTITION BY LIST (id) (PARTITION odd VALUES IN (1, 3, 5), PARTITION even VALUES IN (2, 4, 6))",
     [create("t", [col("id", "int")]), (T, by("LIST", "id", ("id",), values("odd", 1, 3, 5), values("even", 2, 4, 6)))]),
    ("CREATE TABLE t (a INT, b INT) PARTITION BY LIST COLUMNS (a, `b`) (PARTITION p VALUES IN ((1, NULL), (2, 3)), "
     "PARTITION rest VALUES IN (DEFAULT))",
     [create("t", [col("a", "int"), col("b", "int")]),
      (T, by("LIST", "a, `b`", ("a", "b"), values("p", (1, None), (2, 3)), PartitionDef("rest", default=True)))]),
    ("CREATE TABLE t (id INT PRIMARY KEY) PARTITION BY KEY (id) PARTITIONS 8",
     [create("t", [col("id", "int", False)], ("id",)), (T, by("KEY", "id", ("id",), count=8))]),
    ("CREATE TABLE t (id INT PRIMARY KEY) PARTITION BY LINEAR KEY ALGORITHM=2 () PARTITIONS 3",
     [create("t", [col("id", "int", False)], ("id",)), (T, by("KEY", "", (), count=3, linear=True))]),
    ("CREATE TABLE t (a INT, b DATETIME) ENGINE=InnoDB PARTITION BY RANGE COLUMNS (a, b) "
     "(PARTITION p0 VALUES LESS THAN (0, '2020-01-01 00:00:00'), PARTITION p1 VALUES LESS THAN (MAXVALUE, MAXVALUE))",
     [create("t", [col("a", "int"), col("b", "datetime")]),
      (T, by("RANGE", "a, b", ("a", "b"), less("p0", 0, "2020-01-01 00:00:00"), less("p1", MAXVALUE, MAXVALUE)))]),
    ("CREATE TABLE t (id INT, d DATE) PARTITION BY RANGE (TO_DAYS(d)) SUBPARTITION BY HASH (id) SUBPARTITIONS 2 "
     "(PARTITION p0 VALUES LESS THAN (738000) ENGINE = InnoDB, PARTITION p1 VALUES LESS THAN MAXVALUE)",
     [create("t", [col("id", "int"), col("d", "date")]), (T, by("RANGE", "TO_DAYS(d)", ("d",), less("p0", 738000), less("p1", MAXVALUE), function="TO_DAYS"))]),
    ("CREATE TABLE t (d DATE) PARTITION BY RANGE COLUMNS (d) (PARTITION p0 VALUES LESS THAN (TO_DAYS('2020-01-01')))",
     [create("t", [col("d", "date")]), (T, by("RANGE", "d", ("d",), less("p0", Expr("TO_DAYS('2020-01-01')"))))]),
    ("CREATE TABLE t (id BIGINT PRIMARY KEY) PARTITION BY RANGE (id) INTERVAL (1000) "
     "FIRST PARTITION LESS THAN (1000) LAST PARTITION LESS THAN (10000) MAXVALUE PARTITION",
     [create("t", [col("id", "bigint", False)], ("id",)), (T, by("RANGE", "id", ("id",), listed=False))]),
    # generated columns are columns: row events carry their values
    ("CREATE TABLE t (qty INT, price DECIMAL(8,2), doc JSON, sku VARCHAR(32) AS (doc->>'$.sku') VIRTUAL, "
     "total DECIMAL(10,2) GENERATED ALWAYS AS (qty * price) STORED NOT NULL)",
     [create("t", [col("qty", "int"), col("price", "decimal(8,2)"), col("doc", "json"), col("sku", "varchar(32)"),
                   col("total", "decimal(10,2)", False)])]),
    ("ALTER TABLE t ADD COLUMN yr SMALLINT GENERATED ALWAYS AS (YEAR(created)) VIRTUAL AFTER created",
     [add("yr", "smallint", default=GENERATED), after("yr", "created")]),
    ("ALTER TABLE t MODIFY COLUMN total BIGINT AS (a * b) STORED", [modify("total", "bigint")]),
    # MySQL 8: invisible columns are in row events; expression defaults; SERIAL
    ("ALTER TABLE t ADD COLUMN hidden INT INVISIBLE, ADD COLUMN tags JSON DEFAULT (JSON_ARRAY())",
     [add("hidden", "int"),
      add("tags", "json", default=DefaultUnknown("the expression default JSON_ARRAY() cannot be evaluated for the existing rows"))]),
    ("CREATE TABLE t (id BINARY(16) DEFAULT (UUID_TO_BIN(UUID())) PRIMARY KEY, n SERIAL)",
     [create("t", [col("id", "binary(16)", False), col("n", "bigint unsigned")], ("id",))]),
    # CREATE TABLE ... SELECT: with binlog_format=ROW MySQL logs the CREATE TABLE it made (with
    # START TRANSACTION since 8.0.21) and then row events; the statement as written means rows
    # without row events (STATEMENT / MIXED format); TiDB does not support it.
    ("CREATE TABLE `t` (\n  `id` int DEFAULT NULL,\n  `v` varchar(200) DEFAULT NULL\n) START TRANSACTION",
     [create("t", [col("id", "int"), col("v", "varchar(200)")])]),
    ("CREATE TABLE t AS SELECT 1 AS a", Fails("CREATE TABLE ... SELECT")),
    ("CREATE TABLE t (a INT) SELECT a FROM u", Fails("CREATE TABLE ... SELECT")),
    ("CREATE TABLE t (a INT) IGNORE SELECT a FROM u", Fails("binlog_format STATEMENT or MIXED")),
    ("CREATE TABLE t (SELECT 1 AS a)", Fails("CREATE TABLE ... SELECT")),
    ("CREATE TABLE t (a INT) PARTITION BY HASH (a) PARTITIONS 2 AS SELECT 1 AS a", Fails("CREATE TABLE ... SELECT")),
    ("CREATE TABLE IF NOT EXISTS t REPLACE SELECT * FROM u", Fails("CREATE TABLE ... SELECT")),
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
    # DROP DATABASE: every table of the database goes (the plans name them); CREATE DATABASE: none
    ("drop database if exists test", [on("test", "", DropDatabase("test"))]),
    ("DROP SCHEMA `my db`", [on("my db", "", DropDatabase("my db"))]),
    ("DROP DATABASE `we``ird`", [on("we`ird", "", DropDatabase("we`ird"))]),
    ("DROP DATABASE shop; CREATE DATABASE shop", [on(DB, "", DropDatabase(DB))]),
    ("CREATE SCHEMA IF NOT EXISTS d DEFAULT CHARACTER SET utf8mb4", NOOP),
    ("DROP DATABASE", Fails("cannot read the database name")),
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
    # comments the server executes are read as their content (MySQL's /*!version ... */, TiDB's /*T![feature] ... */)
    ("CREATE TABLE `_t_new` (`id` int NOT NULL, `k` int DEFAULT NULL, PRIMARY KEY (`id`)) ENGINE=InnoDB "
     "/*!50100 PARTITION BY RANGE (`k`) (PARTITION p0 VALUES LESS THAN (10) ENGINE = InnoDB, "
     "PARTITION p1 VALUES LESS THAN MAXVALUE ENGINE = InnoDB) */",
     [create("_t_new", [col("id", "int", False), col("k", "int")], ("id",)),
      on(DB, "_t_new", by("RANGE", "`k`", ("k",), less("p0", 10), less("p1", MAXVALUE)))]),
    ("ALTER TABLE t ADD COLUMN c INT /*!80023 INVISIBLE */ /* a plain comment */", [add("c", "int")]),
    ("CREATE TABLE t (id BIGINT /*T![auto_rand] AUTO_RANDOM(5) */ PRIMARY KEY /*T![clustered_index] NONCLUSTERED */)",
     [create("t", [col("id", "bigint", False)], ("id",))]),
    ("ALTER TABLE t ADD COLUMN c VARCHAR(10) COMMENT 'not /*!executed*/ here', ADD `/*!d*/` INT",
     [add("c", "varchar(10)"), add("/*!d*/", "int")]),
    ("/*!40101 SET NAMES utf8mb4 */", NOOP),
    ("ALTER TABLE t /*!50100 TRUNCATE PARTITION p0 */", [TruncatePartitions(("p0",))]),
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
                    CreateTable, CreateTableLike, TruncateTable, DropTable, DropDatabase, SetPartitioning, AddPartitions,
                    ReorganizePartitions, DropPartitions, TruncatePartitions, CoalescePartitions, ExchangePartition}


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


def test_schema_after_gives_like_its_columns_and_leaves_other_tables_alone() -> None:
    # LIKE still names its source: the copy takes the source's partitioning, which no protocol carries.
    after = TableSchema(DB, "x", (col("id", "int", False), col("v", "text")), ("id",))
    like = DdlChange(DB, "x", "CREATE TABLE x LIKE y", 1, P, "CREATE", None, after)
    assert ddl_changes(like) == [((DB, "x"), CreateTableLike((DB, "x"), (DB, "y"), schema=after))]
    renames = DdlChange(DB, "a", "RENAME TABLE a TO b, c TO d", 1, P, "RENAME", None, TableSchema(DB, "b", (col("id", "int"),), ()))
    assert ddl_changes(renames) == [((DB, "a"), RenameTable(DB, "b")), ((DB, "c"), RenameTable(DB, "d"))]


def test_the_statements_table_is_taken_as_the_event_spells_it_where_they_differ_in_case_only() -> None:
    """TiDB (and MySQL with lower_case_table_names=1) compare table names without case; TiCDC's event
    names the table as the server has it. Where the statement names two tables alike but for case,
    or the event another table, what the SQL says stands."""
    def ddl(table: str, sql: str, kind: str = "ALTER") -> DdlChange:
        return DdlChange(DB, table, sql, 1, P, kind)

    assert ddl_changes(ddl("Items", "ALTER TABLE shop.items DROP COLUMN v")) == [((DB, "Items"), DropColumn("v"))]
    assert ddl_changes(ddl("items", "ALTER TABLE shop.items DROP COLUMN v")) == [((DB, "items"), DropColumn("v"))]
    assert ddl_changes(ddl("Items", "TRUNCATE TABLE ITEMS", "TRUNCATE")) == [((DB, "Items"), TruncateTable())]
    assert ddl_changes(ddl("other", "ALTER TABLE shop.items DROP COLUMN v")) == [((DB, "items"), DropColumn("v"))]
    # Statements moving state between tables: the event may name either (TiCDC names a rename's new table).
    assert ddl_changes(ddl("items", "RENAME TABLE Items TO items", "RENAME")) == [((DB, "Items"), RenameTable(DB, "items"))]
    assert ddl_changes(ddl("Items", "RENAME TABLE items TO t2", "RENAME")) == [((DB, "items"), RenameTable(DB, "t2"))]


def test_plans_put_each_net_change_between_the_ddls_of_its_table() -> None:
    from spark.write.plane import NetSummary

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


# ---- the value ADD COLUMN gives the rows a table holds (MySQL 8.0 manual, 13.6 Data Type Default Values)
UTC8 = dt.timezone(dt.timedelta(hours=8))
AT_MS = 1_700_000_000_123  # 2023-11-14 22:13:20.123 UTC
EXISTING_ROWS = [
    ("ADD c INT NOT NULL DEFAULT 7", 7),
    ("ADD c INT DEFAULT '7'", 7),
    ("ADD c INT DEFAULT 7.5", 8),
    ("ADD c INT DEFAULT -3", -3),
    ("ADD c INT DEFAULT (7)", 7),
    ("ADD c INT", None),
    ("ADD c INT NOT NULL", 0),
    ("ADD c BIGINT UNSIGNED NOT NULL", 0),
    ("ADD c DECIMAL(6,2) DEFAULT 1.555", Decimal("1.56")),
    ("ADD c DECIMAL(6,2) NOT NULL", Decimal("0.00")),
    ("ADD c DECIMAL(65,30) DEFAULT 1.5", Decimal("1.500000000000000000000000000000")),  # beyond 28 digits
    ("ADD c DOUBLE NOT NULL", 0.0),
    ("ADD c FLOAT DEFAULT 1.1", 1.100000023841858),  # a FLOAT holds single precision
    ("ADD c DOUBLE DEFAULT 1.1", 1.1),
    ("ADD c FLOAT(5,2) DEFAULT 1.234", 1.2300000190734863),  # rounded to D decimals, then single precision
    ("ADD c DOUBLE(5,2) DEFAULT '1.235'", 1.24),
    ("ADD c FLOAT(30) DEFAULT 1.1", 1.1),  # FLOAT(p > 24) is a DOUBLE
    ("ADD c VARCHAR(8) NOT NULL", ""),
    ("ADD c VARCHAR(8) DEFAULT 'it''s'", "it's"),
    ("ADD c VARCHAR(8) DEFAULT _utf8mb4'x'", "x"),
    ("ADD c VARCHAR(8) DEFAULT ' x  '", " x  "),
    ("ADD c CHAR(8) DEFAULT ' x  '", " x"),  # a CHAR is read without its trailing spaces
    ("ADD c TEXT DEFAULT ('n/a')", "n/a"),
    ("ADD c VARBINARY(4) DEFAULT 0x4142", b"AB"),
    ("ADD c BINARY(3) NOT NULL", b"\0\0\0"),
    ("ADD c BINARY NOT NULL", b"\0"),  # BINARY is BINARY(1) in a statement
    ("ADD c BINARY(3) DEFAULT 'a'", b"a\0\0"),
    ("ADD c BIT(3) DEFAULT b'101'", 5),
    ("ADD c YEAR DEFAULT 20", 2020),  # "The YEAR Type": 1-69 is 2001-2069, 70-99 1970-1999
    ("ADD c YEAR DEFAULT 75", 1975),
    ("ADD c YEAR DEFAULT '0'", 2000),  # as a string '0' is 2000, as a number the year 0
    ("ADD c YEAR DEFAULT 0", 0),
    ("ADD c YEAR DEFAULT '2024'", 2024),
    ("ADD c TINYINT(1) NOT NULL DEFAULT TRUE", 1),
    ("ADD c ENUM('x','y') NOT NULL", "x"),
    ("ADD c ENUM('1','2') DEFAULT '2'", "2"),
    ("ADD c SET('a','b') DEFAULT 'b,a'", "a,b"),
    ("ADD c SET('a','b') NOT NULL", ""),
    ("ADD c DATE NOT NULL", None),  # the zero date reads as NULL
    ("ADD c DATETIME NOT NULL DEFAULT '2020-01-02 03:04:05'", dt.datetime(2020, 1, 2, 3, 4, 5)),
    ("ADD c TIMESTAMP DEFAULT '2020-01-02 03:04:05'", dt.datetime(2020, 1, 1, 19, 4, 5, tzinfo=dt.timezone.utc)),
    ("ADD c TIME NOT NULL", dt.timedelta(0)),
    ("ADD c DATETIME DEFAULT CURRENT_TIMESTAMP", dt.datetime(2023, 11, 15, 6, 13, 20)),
    ("ADD c DATETIME(3) DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3)", dt.datetime(2023, 11, 15, 6, 13, 20, 123000)),
    ("ADD c DATETIME(6) DEFAULT NOW(6)", dt.datetime(2023, 11, 15, 6, 13, 20, 123000)),
    ("ADD c TIMESTAMP NOT NULL DEFAULT LOCALTIMESTAMP", dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=dt.timezone.utc)),
    ("ADD c DATE DEFAULT (CURRENT_DATE)", dt.date(2023, 11, 15)),
    ("ADD c VARCHAR(36) DEFAULT (UUID())", Fails("expression default UUID()")),
    ("ADD c DOUBLE DEFAULT (RAND())", Fails("expression default RAND()")),
    ("ADD c INT DEFAULT (a + 1)", Fails(r"expression default \(?a \+ 1")),
    ("ADD c INT NOT NULL AUTO_INCREMENT PRIMARY KEY", Fails("AUTO_INCREMENT")),
    ("ADD c INT AS (a + 1) STORED", Fails("generated column")),
    ("ADD c JSON NOT NULL", Fails("implicit default of a NOT NULL json")),
    ("ADD c INT DEFAULT 'abc'", Fails("does not fit")),
]


@pytest.mark.parametrize("clause, expected", EXISTING_ROWS, ids=[c for c, _ in EXISTING_ROWS])
def test_the_value_add_column_gives_existing_rows(clause: str, expected) -> None:
    (_, change), *_ = parse_ddl(f"ALTER TABLE t {clause}", DB)
    assert isinstance(change, AddColumn)
    if isinstance(expected, Fails):
        with pytest.raises(ValueNotReproducible, match=expected.pattern):
            existing_rows_value(change.column, change.default, AT_MS, UTC8)
    else:
        got = existing_rows_value(change.column, change.default, AT_MS, UTC8)
        assert got == expected and type(got) is type(expected)


RETYPED = [
    ("ADD c FLOAT DEFAULT 1.1", "double", 1.100000023841858),
    ("ADD c INT DEFAULT 7", "bigint", 7),
    ("ADD c INT DEFAULT 7", "varchar(4)", "7"),
    ("ADD c DECIMAL(6,2) DEFAULT 1.5", "decimal(8,3)", Decimal("1.500")),
    ("ADD c VARCHAR(8) DEFAULT 'ab  '", "char(8)", "ab"),
    ("ADD c VARCHAR(8) DEFAULT '12'", "int", 12),
    ("ADD c INT", "bigint", None),
    ("ADD c DATETIME DEFAULT '2020-01-02 03:04:05'", "datetime", dt.datetime(2020, 1, 2, 3, 4, 5)),
    ("ADD c DATETIME DEFAULT '2020-01-02 03:04:05'", "datetime(3)", dt.datetime(2020, 1, 2, 3, 4, 5)),
    ("ADD c DATETIME DEFAULT CURRENT_TIMESTAMP", "datetime(0)", dt.datetime(2023, 11, 15, 6, 13, 20)),
    ("ADD c DATETIME(6) DEFAULT '2020-01-02 03:04:05.123500'", "datetime(3)", dt.datetime(2020, 1, 2, 3, 4, 5, 124000)),
    ("ADD c TIMESTAMP(6) DEFAULT '2020-01-02 03:04:05.999999'", "timestamp",
     dt.datetime(2020, 1, 1, 19, 4, 6, tzinfo=dt.timezone.utc)),
    ("ADD c TIME DEFAULT '01:02:03'", "time(3)", dt.timedelta(hours=1, minutes=2, seconds=3)),
    ("ADD c BINARY(2) DEFAULT 'a'", "binary(4)", b"a\0\0\0"),
    ("ADD c BINARY(2) DEFAULT 'a'", "varbinary(8)", b"a\0"),
    ("ADD c VARBINARY(2) DEFAULT 'ab'", "blob", b"ab"),
    ("ADD c INT DEFAULT 20", "year", 2020),
    ("ADD c VARCHAR(4) DEFAULT '0'", "year", 2000),
    ("ADD c VARCHAR(16) DEFAULT '{\"b\":1}'", "json", Fails("does not convert a varchar")),
    ("ADD c INT DEFAULT 300", "tinyint", Fails("300 of a int column as tinyint")),
    ("ADD c VARCHAR(8) DEFAULT 'abc'", "int", Fails("'abc' of a varchar")),
    ("ADD c DATETIME DEFAULT '2020-01-02 03:04:05'", "date", Fails("does not convert a datetime value to date")),
    ("ADD c VARCHAR(36) DEFAULT (UUID())", "varchar(40)", Fails("expression default UUID()")),
]


@pytest.mark.parametrize("clause, mysql_type, expected", RETYPED, ids=[f"{c} -> {t}" for c, t, _ in RETYPED])
def test_the_value_of_rows_before_add_column_after_modify_column(clause: str, mysql_type: str, expected) -> None:
    """``OlderValue.retyped``: what MySQL's MODIFY COLUMN makes of the value ADD COLUMN gave; known or not."""
    (_, change), *_ = parse_ddl(f"ALTER TABLE t {clause}", DB)
    got = OlderValue.of(change.column, change.default, AT_MS, UTC8).retyped(parse_mysql_type(mysql_type), UTC8)
    if isinstance(expected, Fails):
        assert got.value is None and re.search(expected.pattern, got.unknown or "")
    else:
        assert got.unknown is None and got.value == expected and type(got.value) is type(expected)


def test_schema_after_keeps_the_statements_default() -> None:
    after = TableSchema(DB, "t", (col("id", "int", False), col("c", "bigint", False)), ("id",))
    ddl = DdlChange(DB, "t", "ALTER TABLE t ADD COLUMN c INT NOT NULL DEFAULT 7", 1, P, "ALTER", None, after)
    assert ddl_changes(ddl) == _normalised([add("c", "bigint", nullable=False, default=DefaultLiteral("7"))])


def test_plans_drop_every_table_a_dropped_database_has_at_that_point() -> None:
    """The lake's tables of the database, one created, one renamed into it and one made by rows
    earlier in the run; not one renamed out of it or dropped before, nor another database's."""
    from spark.write.plane import NetSummary

    def ddl(sql: str, ts: int, table: str = "") -> DdlChange:
        return DdlChange(DB, table, sql, ts, P, "QUERY")

    ddls = [
        ddl("CREATE TABLE shop.new (id int)", 2, "new"),
        ddl("RENAME TABLE other.x TO shop.x", 3, "x"),
        ddl("RENAME TABLE shop.out TO other.out", 4, "out"),
        ddl("DROP TABLE shop.gone", 5, "gone"),
        ddl("DROP DATABASE shop", 10),
        ddl("CREATE DATABASE shop", 11),
        ddl("CREATE TABLE shop.lake (id int)", 12, "lake"),
    ]
    rows = NetSummary(DB, "rows", 0, keys=1, deletes=0, first=(6, "topic", 0, 1, 0))
    reads = []

    def lake() -> list[tuple[str, str]]:
        reads.append(1)
        return [(DB, "lake"), (DB, "out"), (DB, "gone"), ("other", "x"), ("other", "y")]

    plans = build_apply_plans(ddls, [rows], lake)
    assert len(reads) == 1
    assert [p.summary() for p in plans] == [
        f"{DB}.new: schema(CreateTable); schema(DropTable)",
        "other.x: schema(RenameTable)",
        f"{DB}.out: schema(RenameTable)",
        f"{DB}.gone: schema(DropTable)",
        f"{DB}.rows: data(1 upserts, 0 deletes); schema(DropTable)",
        f"{DB}.lake: schema(DropTable); schema(CreateTable)",
        f"{DB}.x: schema(DropTable)",  # after other.x's plan renames it
    ]
    dropped_at = {p.ref: s.ddl.commit_ts for p in plans for s in p.steps if isinstance(s, SchemaStep) and s.changes == (DropTable(),)}
    assert dropped_at == {(DB, "new"): 10, (DB, "x"): 10, (DB, "gone"): 5, (DB, "rows"): 10, (DB, "lake"): 10}
    assert build_apply_plans(ddls[:4], [rows], lake) and len(reads) == 1  # no DROP DATABASE: the lake is not listed


def _ddl(sql: str, ts: int) -> DdlChange:
    return DdlChange(DB, "t", sql, ts, P, "QUERY")


def _rows(table: str, ts: int, segment: int = 0):  # noqa: ANN202
    from spark.write.plane import NetSummary

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
    from spark.commit.plan import UnorderableDdl

    ddls = [_ddl("CREATE TABLE u LIKE t", 5), _ddl("ALTER TABLE t ADD COLUMN a INT", 6), _ddl("RENAME TABLE t TO x, u TO t", 7)]
    with pytest.raises(UnorderableDdl, match=r"shop.t, shop.u.*Simple, Debezium"):
        build_apply_plans(ddls, [])
