"""The reference model agrees with the generated history, through every protocol, with duplicates."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdc_codecs import PROTOCOLS, RawMessage, RowChange, SourcePosition, Watermark, get_decoder, get_encoder
from tests.model.oracle import Oracle, row_key
from spark.demo.workload import Workload, WorkloadSpec

TIDB_PROTOCOLS = sorted(p for p, spec in PROTOCOLS.items() if spec.has_commit_ts)


def truth_at(history, watermark: int) -> dict:
    """The upstream tables after every change committed at or before ``watermark``."""
    tables: dict = {}
    for e in history:
        if isinstance(e, RowChange) and e.commit_ts <= watermark:
            t = tables.setdefault((e.database, e.table), {})
            if e.before is not None:
                t.pop(row_key(e.key_columns, dict(e.before)), None)
            if e.after is not None:
                t[row_key(e.key_columns, dict(e.after))] = {k: v for k, v in e.after.items() if v is not None}
    return {name: sorted(rows.values(), key=lambda r: repr(sorted(r.items()))) for name, rows in tables.items()}


@pytest.mark.parametrize("protocol", TIDB_PROTOCOLS)
@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 10_000), partitions=st.integers(1, 4), cuts=st.integers(1, 4), dup_rate=st.sampled_from([0.0, 0.1]))
def test_oracle_matches_history_at_every_cut(protocol: str, seed: int, partitions: int, cuts: int, dup_rate: float) -> None:
    history = list(Workload(WorkloadSpec(tables=2, events=150, seed=seed, key_space=30, watermark_every=20)).events())
    records = get_encoder(protocol).encode_all(history, partitions)
    rng = random.Random(seed)
    # At-least-once delivery: some messages are sent again, later in their partition.
    delivered = []
    for r in records:
        delivered.append(r)
        if rng.random() < dup_rate:
            delivered.append(r)
    decoders = [get_decoder(protocol) for _ in range(partitions)]
    oracle = Oracle()
    boundaries = sorted(set(rng.sample(range(1, len(delivered)), k=cuts - 1)) | {len(delivered)})
    start = 0
    last = 0
    for end in boundaries:
        for offset in range(start, end):
            r = delivered[offset]
            oracle.add(decoders[r.partition].decode(RawMessage(r.key, r.value, SourcePosition("t", r.partition, offset))))
        w = oracle.cut([("t", p) for p in range(partitions)])
        assert w >= last
        last = w
        got = {name: oracle.rows(*name) for name in oracle.tables if oracle.tables[name]}
        want = {name: rows for name, rows in truth_at(history, w).items() if rows}
        assert got == want, (protocol, w)
        start = end
    # After everything is delivered, the pipeline watermark is the last one TiCDC sent.
    assert last == max(e.ts for e in history if isinstance(e, Watermark))


def test_drop_database_drops_the_tables_of_that_database_only() -> None:
    """MySQL 8 manual, DROP DATABASE: it drops all tables in the database; CREATE DATABASE makes none."""
    from cdc_codecs import DdlChange, Op

    at = SourcePosition("t", 0, 0)
    ts = iter(range(1, 100))

    def row(db: str, table: str, key: int) -> RowChange:
        return RowChange(Op.INSERT, db, table, None, {"id": key}, ("id",), {}, next(ts), at)

    def ddl(sql: str, db: str = "d") -> DdlChange:
        return DdlChange(db, "", sql, next(ts), at, "QUERY")

    oracle = Oracle()
    oracle.add([row("d", "a", 1), row("d", "b", 1), row("e", "a", 1), row("d e", "c", 1), ddl("DROP DATABASE IF EXISTS `d`"),
                ddl("CREATE DATABASE d"), row("d", "a", 2), ddl("drop schema `d e`", "d e"), Watermark(next(ts), at)])
    oracle.cut([("t", 0)])
    assert {name: oracle.rows(*name) for name in oracle.tables} == {
        ("d", "a"): [{"id": 2}], ("d", "b"): [], ("e", "a"): [{"id": 1}], ("d e", "c"): []}


def test_a_table_without_a_primary_key_is_a_multiset_and_a_row_event_changes_one_row() -> None:
    # MySQL 8 reference, CREATE TABLE: without a PRIMARY KEY or UNIQUE index identical rows may
    # coexist; a row event (binlog_format=ROW) names one row, so it inserts, deletes or updates one.
    from cdc_codecs import Op

    p = SourcePosition("t", 0, 0)
    types: dict = {}
    ts = iter(range(10, 1000, 10))

    def row(op: Op, before: dict | None, after: dict | None, commit_ts: int | None = None) -> RowChange:
        return RowChange(op, "db", "bag", before, after, (), types, commit_ts or next(ts), p)

    a, b = {"x": 1, "s": "a"}, {"x": 2, "s": "b"}
    oracle = Oracle()
    same = next(ts)
    oracle.add([row(Op.INSERT, None, a), row(Op.INSERT, None, a, same), row(Op.INSERT, None, a, same),
                row(Op.INSERT, None, b), Watermark(500, p)])
    oracle.cut([("t", 0)])
    assert oracle.rows("db", "bag") == [a, a, a, b]
    oracle.add([row(Op.DELETE, a, None, 510), row(Op.UPDATE, a, b, 520), row(Op.UPDATE, b, b, 530), Watermark(600, p)])
    oracle.cut([("t", 0)])
    assert oracle.rows("db", "bag") == [a, b, b]


def test_a_key_less_row_is_found_by_its_image_after_a_column_is_added() -> None:
    from cdc_codecs import Column, DdlChange, Op, TableSchema, parse_mysql_type

    p = SourcePosition("t", 0, 0)
    after = TableSchema("db", "bag", (Column("x", parse_mysql_type("int")), Column("note", parse_mysql_type("text"))), ())
    a = {"x": 1}
    oracle = Oracle()
    oracle.add([RowChange(Op.INSERT, "db", "bag", None, a, (), {}, 10, p), RowChange(Op.INSERT, "db", "bag", None, a, (), {}, 20, p),
                DdlChange("db", "bag", "ALTER TABLE `db`.`bag` ADD COLUMN `note` text", 30, p, "ALTER", None, after),
                RowChange(Op.DELETE, "db", "bag", {**a, "note": None}, None, (), {}, 40, p), Watermark(50, p)])
    oracle.cut([("t", 0)])
    assert oracle.rows("db", "bag") == [a]


def _model_after(statements: list[str], tables: dict[str, list[int]]) -> dict[str, list[int]]:
    """The model's tables (by name: their row ids) after CREATE + INSERT of ``tables``, then ``statements``."""
    from cdc_codecs import Column, DdlChange, Op, TableSchema
    from cdc_codecs.types import parse_mysql_type

    oracle, ts = Oracle(), 0
    pos = SourcePosition("t", 0, 0)
    for name, ids in tables.items():
        schema = TableSchema("db", name, (Column("id", parse_mysql_type("int"), False),), ("id",))
        ts += 1
        oracle.add([DdlChange("db", name, f"CREATE TABLE `db`.`{name}` (id int primary key)", ts, pos, "CREATE", None, schema)])
        for i in ids:
            ts += 1
            oracle.add([RowChange(Op.INSERT, "db", name, None, {"id": i}, ("id",), schema.column_types, ts, pos)])
    for sql in statements:
        ts += 1
        oracle.add([DdlChange("db", "x", sql, ts, pos, "QUERY")])
    oracle.add([Watermark(ts, pos)])
    oracle.cut([("t", 0)])
    return {name[1]: [r["id"] for r in oracle.rows(*name)] for name in oracle.tables if oracle.tables[name]}


def test_the_model_renames_several_tables_left_to_right_in_one_statement() -> None:
    """MySQL 8 manual, 15.1.36 RENAME TABLE: pairs are renamed left to right, so a later pair sees
    the earlier ones (a swap through a temporary name); gh-ost's cut-over statement, comment and all."""
    assert _model_after(["RENAME TABLE a TO tmp, b TO a, tmp TO b"], {"a": [1], "b": [2]}) == {"a": [2], "b": [1]}
    assert _model_after(["rename /* gh-ost */ table `db`.`t` to `db`.`_t_del`, `db`.`_t_gho` to `db`.`t`"],
                        {"t": [1], "_t_gho": [1, 2]}) == {"_t_del": [1], "t": [1, 2]}


def test_the_model_drops_every_table_a_drop_names() -> None:
    """15.1.32 DROP TABLE: ``DROP TABLE [IF EXISTS] a, b`` drops each; a TEMPORARY one is no replicated table."""
    assert _model_after(["DROP TABLE IF EXISTS a, `db`.`b`, missing"], {"a": [1], "b": [2], "c": [3]}) == {"c": [3]}
    assert _model_after(["DROP TEMPORARY TABLE a"], {"a": [1]}) == {"a": [1]}


def test_the_model_renames_a_table_an_alter_renames() -> None:
    """15.1.9 ALTER TABLE ... RENAME [TO | AS]: gh-ost's two-step cut-over; RENAME COLUMN / INDEX rename no table."""
    assert _model_after(["alter /* gh-ost */ table `db`.`t` rename `db`.`_t_del`", "ALTER TABLE _t_gho RENAME TO t"],
                        {"t": [1], "_t_gho": [1, 2]}) == {"_t_del": [1], "t": [1, 2]}
    assert _model_after(["ALTER TABLE a RENAME COLUMN x TO y, RENAME INDEX i TO j"], {"a": [1]}) == {"a": [1]}


def test_create_table_like_copies_the_partitioning_so_a_later_truncate_partition_applies() -> None:
    """MySQL 8 manual, CREATE TABLE ... LIKE: the copy has the original's definition, partitioning
    included -- so gh-ost's ghost of a partitioned table is partitioned (found by the soak: the
    model had no partitioning for it and failed on its TRUNCATE PARTITION)."""
    from cdc_codecs import DdlChange, Op

    at = SourcePosition("t", 0, 0)
    ts = iter(range(1, 100))

    def ddl(sql: str) -> DdlChange:
        return DdlChange("d", "", sql, next(ts), at, "QUERY")

    def row(table: str, key: int) -> RowChange:
        return RowChange(Op.INSERT, "d", table, None, {"id": key}, ("id",), {}, next(ts), at)

    oracle = Oracle()
    oracle.add([ddl("CREATE TABLE `d`.`t` (`id` int, PRIMARY KEY (`id`)) PARTITION BY RANGE (`id`) "
                    "(PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN (MAXVALUE))"),
                ddl("create /* gh-ost */ table `d`.`g` like `d`.`t`"), row("g", 1), row("g", 20),
                ddl("ALTER TABLE `d`.`g` TRUNCATE PARTITION p0"), Watermark(next(ts), at)])
    oracle.cut([("t", 0)])
    assert oracle.rows("d", "g") == [{"id": 20}]


def _partitioned(by: str, steps: list, server: str = "mysql") -> list:
    """The ``k`` of the rows of `d`.`t` (PARTITION BY ``by``) after ``steps``, applied by the model on
    ``server``: an ``int`` or None inserts a row of that ``k``, a string is ``ALTER TABLE `d`.`t` <string>``."""
    from cdc_codecs import DdlChange, Op

    at = SourcePosition("t", 0, 0)
    ts = iter(range(1, 1000))
    ids = iter(range(1, 1000))
    events: list = [DdlChange("d", "t", f"CREATE TABLE `d`.`t` (`id` int, `k` int, PRIMARY KEY (`id`, `k`)) PARTITION BY {by}",
                              next(ts), at, "CREATE")]
    for step in steps:
        if isinstance(step, str):
            events.append(DdlChange("d", "t", f"ALTER TABLE `d`.`t` {step}", next(ts), at, "ALTER"))
        else:
            events.append(RowChange(Op.INSERT, "d", "t", None, {"id": next(ids), "k": step}, ("id", "k"), {}, next(ts), at))
    oracle = Oracle(server=server)
    oracle.add([*events, Watermark(next(ts), at)])
    oracle.cut([("t", 0)])
    return sorted((r.get("k") for r in oracle.rows("d", "t")), key=lambda k: (k is not None, k))


def test_key_partitioning_is_kept_so_its_partition_statements_apply() -> None:
    """26.2.5 KEY: MySQL's internal hash, which the model does not compute -- but the table is
    partitioned: ADD / COALESCE PARTITION change no row, TRUNCATE PARTITION ALL takes every row
    (before, the model forgot a KEY table's partitioning and failed on all three with KeyError)."""
    for by in ("KEY (`k`) PARTITIONS 4", "LINEAR KEY (`k`) PARTITIONS 3", "KEY () PARTITIONS 2"):
        assert _partitioned(by, [1, 2, 3, "ADD PARTITION PARTITIONS 2", "COALESCE PARTITION 3"]) == [1, 2, 3]
        assert _partitioned(by, [1, 2, "TRUNCATE PARTITION ALL", 3]) == [3]
        with pytest.raises(ValueError, match="internal hash"):  # which rows p1 holds: not computed
            _partitioned(by, [1, 2, "TRUNCATE PARTITION p1"])


MAXLESS = "RANGE (`k`) (PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN (20), PARTITION p2 VALUES LESS THAN (30))"


@pytest.mark.parametrize("by, steps, error", [
    # 26.3.2: HASH and KEY partitions are not dropped (COALESCE merges them).
    ("HASH (`k`) PARTITIONS 4", ["DROP PARTITION p1"], "ER_ONLY_ON_RANGE_LIST_PARTITION"),
    ("KEY (`k`) PARTITIONS 4", ["DROP PARTITION p1"], "ER_ONLY_ON_RANGE_LIST_PARTITION"),
    (MAXLESS, ["COALESCE PARTITION 1"], "ER_COALESCE_ONLY_ON_HASH_PARTITION"),
    ("HASH (`k`) PARTITIONS 2", ["COALESCE PARTITION 2"], "ER_DROP_LAST_PARTITION"),
    (MAXLESS, ["DROP PARTITION p0, p1, p2"], "ER_DROP_LAST_PARTITION"),
    (MAXLESS, ["ADD PARTITION PARTITIONS 2"], "ER_PARTITIONS_MUST_BE_DEFINED_ERROR"),
    # 26.3.1: RANGE partitions are added above the last one; LIST values are listed once.
    (MAXLESS, ["ADD PARTITION (PARTITION p3 VALUES LESS THAN (25))"], "ER_RANGE_NOT_INCREASING_ERROR"),
    ("LIST (`k`) (PARTITION a VALUES IN (1, 2))", ["ADD PARTITION (PARTITION b VALUES IN (2, 3))"],
     "ER_MULTIPLE_DEF_CONST_IN_LIST_PART_ERROR"),
    # REORGANIZE: RANGE partitions adjacent, covering the same range (only the last may grow);
    # HASH as many as before.
    (MAXLESS, ["REORGANIZE PARTITION p0, p2 INTO (PARTITION a VALUES LESS THAN (30))"], "ER_CONSECUTIVE_REORG_PARTITIONS"),
    (MAXLESS, ["REORGANIZE PARTITION p0, p1 INTO (PARTITION a VALUES LESS THAN (5), PARTITION b VALUES LESS THAN (15))"],
     "ER_REORG_OUTSIDE_RANGE"),
    ("HASH (`k`) PARTITIONS 2", ["REORGANIZE PARTITION p0 INTO (PARTITION a, PARTITION b)"], "ER_REORG_HASH_ONLY_ON_SAME_N"),
    # A row no partition holds is refused: RANGE without MAXVALUE, LIST values (NULL too) not listed.
    (MAXLESS, [30], "ER_NO_PARTITION_FOR_GIVEN_VALUE"),
    ("LIST (`k`) (PARTITION a VALUES IN (1, 2))", [3], "ER_NO_PARTITION_FOR_GIVEN_VALUE"),
    ("LIST (`k`) (PARTITION a VALUES IN (1, 2))", [None], "ER_NO_PARTITION_FOR_GIVEN_VALUE"),
    (MAXLESS, [25, "REORGANIZE PARTITION p2 INTO (PARTITION p2 VALUES LESS THAN (30))", "DROP PARTITION p2", 25],
     "ER_NO_PARTITION_FOR_GIVEN_VALUE"),  # the last partition dropped: its range is gone
    ("HASH (`k`) PARTITIONS 2", [7, "PARTITION BY LIST (`k`) (PARTITION a VALUES IN (1))"], "ER_NO_PARTITION_FOR_GIVEN_VALUE"),
    (MAXLESS, ["TRUNCATE PARTITION p7"], "ER_UNKNOWN_PARTITION"),
])
def test_the_model_refuses_the_partition_statements_and_rows_mysql_refuses(by: str, steps: list, error: str) -> None:
    """A statement or row MySQL 8 refuses never reaches the binlog: a history holding one is wrong,
    and the model says so (before, it applied each as if it had happened)."""
    from tests.model.oracle import Refused

    with pytest.raises(Refused, match=error):
        _partitioned(by, steps)


@pytest.mark.parametrize("validation", ["", " WITH VALIDATION", " WITHOUT VALIDATION"])
def test_an_exchange_of_rows_the_partition_does_not_hold(validation: str) -> None:
    """26.3.3: WITH VALIDATION (the default) MySQL refuses a row of nt that p's definition does not
    hold; WITHOUT VALIDATION it moves it into p, where the model cannot follow it (a later TRUNCATE
    of p takes it, one of the partition its value names does not): it says so rather than guess."""
    from cdc_codecs import DdlChange, Op
    from tests.model.oracle import Refused

    at = SourcePosition("t", 0, 0)
    oracle = Oracle()
    oracle.add([DdlChange("d", "t", f"CREATE TABLE `d`.`t` (`id` int, `k` int) PARTITION BY {MAXLESS}", 1, at, "CREATE"),
                DdlChange("d", "nt", "CREATE TABLE `d`.`nt` (`id` int, `k` int)", 2, at, "CREATE"),
                RowChange(Op.INSERT, "d", "nt", None, {"id": 1, "k": 15}, ("id",), {}, 3, at),
                DdlChange("d", "t", f"ALTER TABLE `d`.`t` EXCHANGE PARTITION p0 WITH TABLE `d`.`nt`{validation}", 4, at, "ALTER"),
                Watermark(5, at)])
    with pytest.raises(ValueError, match="does not follow" if "WITHOUT" in validation else "ER_ROW_DOES_NOT_MATCH_PARTITION") as raised:
        oracle.cut([("t", 0)])
    assert isinstance(raised.value, Refused) != ("WITHOUT" in validation)


def test_partition_statements_mysql_accepts_apply_as_the_manual_says() -> None:
    """26.3.1: REORGANIZE of the last RANGE partition may extend its range; after DROP PARTITION
    the next RANGE partition holds the dropped range (new rows there land in it). 26.2.7: RANGE puts
    NULL in the lowest partition; LIST holds NULL only where listed. 26.2.4 / 26.2.4.1: HASH is
    MOD(k, num) (a negative k's remainder taken positive), LINEAR HASH the powers-of-two rule on
    MySQL, plain HASH on TiDB (its manual: LINEAR is ignored)."""
    assert _partitioned(MAXLESS, [5, 15, 25, "REORGANIZE PARTITION p2 INTO (PARTITION p2 VALUES LESS THAN (40), "
                                  "PARTITION p3 VALUES LESS THAN MAXVALUE)", 35, 99, "TRUNCATE PARTITION p2"]) == [5, 15, 99]
    assert _partitioned(MAXLESS, [5, 15, "DROP PARTITION p0", 6, "TRUNCATE PARTITION p1"]) == []
    assert _partitioned(MAXLESS, [None, 5, 15, "TRUNCATE PARTITION p0"]) == [15]
    assert _partitioned("LIST (`k`) (PARTITION a VALUES IN (1, NULL), PARTITION b VALUES IN (2))",
                        [None, 1, 2, "TRUNCATE PARTITION a"]) == [2]
    assert _partitioned("HASH (`k`) PARTITIONS 3", [-5, -4, 3, 4, None, "TRUNCATE PARTITION p2"]) == [None, -4, 3, 4]
    # LINEAR HASH over 6: V = 8, N = k & 7, and N >= 6 -> N & 3: 6 -> 2, 7 -> 3, 13 -> 5.
    assert _partitioned("LINEAR HASH (`k`) PARTITIONS 6", [6, 7, 13, 2, "TRUNCATE PARTITION p2"]) == [7, 13]
    assert _partitioned("LINEAR HASH (`k`) PARTITIONS 6", [6, 7, 13, 2, "TRUNCATE PARTITION p2"], server="tidb") == [6, 7, 13]
    # TiDB's LIST DEFAULT partition holds every value the others do not list.
    assert _partitioned("LIST (`k`) (PARTITION a VALUES IN (1), PARTITION d DEFAULT)", [1, 2, None, "TRUNCATE PARTITION d"],
                        server="tidb") == [1]


@pytest.mark.parametrize("by", [
    "RANGE COLUMNS (`k`) (PARTITION p0 VALUES LESS THAN ('2020-01-01'), PARTITION p1 VALUES LESS THAN MAXVALUE)",
    "RANGE COLUMNS (`id`, `k`) (PARTITION p0 VALUES LESS THAN (1, 5), PARTITION p1 VALUES LESS THAN (MAXVALUE, MAXVALUE))",
    "LIST COLUMNS (`id`, `k`) (PARTITION p0 VALUES IN ((1, 1), (2, 2)))",
])
def test_a_partitioning_the_model_does_not_follow_raises_rather_than_being_misread(by: str) -> None:
    """Before, a bound the model's pattern missed ('2020-01-01', a tuple) was read as MAXVALUE or as
    its first number, and a partitioning of several columns as none: a TRUNCATE PARTITION then took
    the wrong rows, or failed with KeyError."""
    with pytest.raises(ValueError, match="the model"):
        _partitioned(by, [])
