"""Partition statements through apply, against the reference model (tests/model/oracle.py, which
follows the MySQL 8 manual on its own): every kind of partition maintenance on every partitioning
type tidelake computes, EXCHANGE PARTITION moving rows between two tables, and KEY partitioning
holding its table with the statement named."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest

from cdc_codecs import Op, TableSchema, get_encoder
from spark.archive.storage import open_storage
from spark.commit.apply import apply_interval
from spark.commit.isolation import read_isolated
from tests.model.oracle import Oracle

from .archives import HOUR, T0, ArchiveWriter, make_config
from .test_schema_evolution import P, History, per_mark, published, schema

pytestmark = pytest.mark.slow  # whole intervals, Spark or services: make test-fast leaves it out (docs/testing.md)


def table(h: History, name: str, by: str = "") -> TableSchema:
    t = schema("shop", name, [("id", "int"), ("k", "int"), ("v", "varchar(5)")])
    h.ddl("shop", name, f"CREATE TABLE `shop`.`{name}` (id int primary key, k int, v varchar(5)){' PARTITION BY ' + by if by else ''}",
          t, kind="CREATE")
    return t


def alter(h: History, t: TableSchema, clause: str) -> None:
    h.ddl("shop", t.table, f"ALTER TABLE `shop`.`{t.table}` {clause}", t, t, kind="ALTER")


def rows(h: History, t: TableSchema, ids: range, ks: list, v: str = "a") -> None:
    for i, k in zip(ids, ks):
        h.row(Op.INSERT, t, None, {"id": i, "k": k, "v": v})


def model(events: list, server: str, oracle: Oracle | None = None) -> dict[int, dict]:
    """The model's tables (empty ones left out) at each watermark (``oracle``: the model to feed)."""
    oracle, out = oracle or Oracle(server=server), {}
    for batch in per_mark(events):
        oracle.add(batch)
        w = oracle.cut([(P.topic, P.partition)])
        out[w] = {name: oracle.rows(*name) for name in oracle.tables if oracle.rows(*name)}
    return out


def removed_at(oracle: Oracle) -> Callable[[tuple[str, str], dict, int, int], int | None]:
    """``check_pair``'s ``removed_at`` by the model: the last removal of the row's key in the window."""
    def at(name: tuple[str, str], row: dict, w1: int, w2: int) -> int | None:
        keys = oracle.schemas[name].key_columns if name in oracle.schemas else ()
        return oracle.removed_at(name, tuple(row.get(k) for k in keys), w1, w2) if keys else None
    return at


def apply_all(tmp: Path, protocol: str, events: list, policy: str = "fail"):
    config = dataclasses.replace(make_config(tmp, protocol), on_table_error=policy)
    writer = ArchiveWriter(config, open_storage(config.storage), {"cdc": 2})
    results = []
    for j, batch in enumerate(per_mark(events)):
        writer.interval(T0 + j * HOUR, T0 + (j + 1) * HOUR, [("cdc", rec) for rec in get_encoder(protocol).encode_all(batch, 2)])
        results.append(apply_interval(config, T0 + j * HOUR, T0 + (j + 1) * HOUR))
    return config, results


KS = [None, -7, -4, -1, 0, 1, 2, 3, 5, 6, 7, 12, 13, 2003, -2003]


@pytest.mark.parametrize("protocol", ["canal-json", "simple"])
def test_every_partition_statement_on_every_computed_type_follows_the_model(tmp_path: Path, protocol: str) -> None:
    """HASH and LINEAR HASH (a TiDB upstream: TiCDC's protocols), RANGE, RANGE COLUMNS, LIST, LIST
    COLUMNS: TRUNCATE, DROP, ADD, COALESCE, REORGANIZE, REMOVE PARTITIONING and a partitioning set
    later by ALTER TABLE ... PARTITION BY, with negative values and NULLs."""
    h = History()
    hh = table(h, "hh", "HASH (`k`) PARTITIONS 4")
    lh = table(h, "lh", "LINEAR HASH (`k`) PARTITIONS 6")
    rc = table(h, "rc", "RANGE COLUMNS (`k`) (PARTITION a VALUES LESS THAN (0), PARTITION b VALUES LESS THAN (10), "
               "PARTITION c VALUES LESS THAN MAXVALUE)")
    lc = table(h, "lc", "LIST COLUMNS (`k`) (PARTITION odd VALUES IN (-7, -1, 1, 3, 5, 7, 13, 2003, -2003), "
               "PARTITION even VALUES IN (NULL, -4, 0, 2, 6, 12))")
    rg = table(h, "rg", "RANGE (`k`) (PARTITION lo VALUES LESS THAN (3), PARTITION hi VALUES LESS THAN MAXVALUE)")
    later = table(h, "later")
    for t in (hh, lh, rc, lc, rg, later):
        rows(h, t, range(len(KS)), KS)
    h.mark()
    alter(h, hh, "TRUNCATE PARTITION p1")
    alter(h, hh, "COALESCE PARTITION 1")  # rows move: now MOD 3
    rows(h, hh, range(100, 100 + len(KS)), KS, "b")
    alter(h, hh, "TRUNCATE PARTITION p0, p2")
    alter(h, lh, "ADD PARTITION PARTITIONS 2")  # p6, p7
    alter(h, lh, "TRUNCATE PARTITION p7, p2")
    alter(h, rc, "REORGANIZE PARTITION a, b INTO (PARTITION ab VALUES LESS THAN (5), PARTITION b5 VALUES LESS THAN (10))")
    alter(h, rc, "TRUNCATE PARTITION ab")
    alter(h, rg, "DROP PARTITION lo")  # its rows go; hi holds everything below MAXVALUE now
    rows(h, rg, range(200, 203), [1, None, 50], "c")
    h.mark()
    alter(h, lc, "TRUNCATE PARTITION even")
    alter(h, lc, "REMOVE PARTITIONING")
    alter(h, lc, "PARTITION BY HASH (`k`) PARTITIONS 3")
    rows(h, lc, range(300, 300 + len(KS)), KS, "d")
    alter(h, lc, "TRUNCATE PARTITION p1")
    alter(h, later, "PARTITION BY LIST (`k`) (PARTITION neg VALUES IN (-7, -4, -1, -2003), PARTITION rest VALUES IN "
          "(NULL, 0, 1, 2, 3, 5, 6, 7, 12, 13, 2003))")
    alter(h, later, "TRUNCATE PARTITION neg")
    alter(h, rc, "TRUNCATE PARTITION ALL")
    h.mark()
    config, results = apply_all(tmp_path, protocol, h.events)
    oracle = Oracle(server="tidb")
    expected = model(h.events, "tidb", oracle)
    for r in results:
        assert {n: t for n, t in published(config, r.watermark).items() if t} == expected[r.watermark], f"W {r.watermark}"
    w1, w2, w3 = (r.watermark for r in results)
    # Something went, something stayed: the statements were not no-ops.
    assert 0 < len(expected[w2][("shop", "hh")]) < 2 * len(KS)
    assert 0 < len(expected[w3][("shop", "lc")]) < len(KS) + 8 and ("shop", "rc") not in expected[w3]
    # The change feed: a row a partition statement removed is dated by the one whose partitions held it.
    from .changes_invariant import check_pair

    for a, b in [(w1, w2), (w2, w3), (w1, w3)]:
        check_pair(config, expected, a, b, open_storage(config.storage), removed_at(oracle))


@pytest.mark.parametrize("protocol", ["canal-json", "simple"])
def test_exchange_partition_moves_rows_both_ways_exactly(tmp_path: Path, protocol: str) -> None:
    """Whichever table the run changes before the statement (neither, the partitioned one, the
    other), both are published at W with the rows MySQL has: the partition's rows in nt, nt's in pt."""
    h = History()
    pt = table(h, "pt", "RANGE (`k`) (PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN MAXVALUE)")
    nt = table(h, "nt")
    hp = table(h, "hp", "HASH (`k`) PARTITIONS 3")
    hn = table(h, "hn")
    rows(h, pt, range(0, 4), [None, 1, 15, 20])
    rows(h, nt, range(10, 12), [3, 7])
    rows(h, hp, range(0, 6), [0, 1, 2, 3, 4, -5])
    rows(h, hn, range(50, 53), [2, 5, -8])  # all in p2 of 3, as MySQL's validation requires
    h.mark()
    alter(h, pt, "EXCHANGE PARTITION p0 WITH TABLE `shop`.`nt`")  # neither changed before in the run
    rows(h, pt, range(20, 21), [2], "after")
    rows(h, nt, range(21, 22), [4], "after")
    h.mark()
    rows(h, pt, range(30, 31), [11], "pre")  # pt changes first: nt is read as the lake holds it
    h.row(Op.UPDATE, pt, {"id": 2, "k": 15, "v": "a"}, {"id": 2, "k": 16, "v": "upd"})
    alter(h, pt, "EXCHANGE PARTITION p0 WITH TABLE `shop`.`nt`")
    rows(h, nt, range(31, 32), [5], "post")
    h.mark()
    rows(h, nt, range(40, 41), [8], "pre")  # nt changes first
    alter(h, pt, "EXCHANGE PARTITION p0 WITH TABLE `shop`.`nt`")
    rows(h, pt, range(41, 42), [9], "post")
    alter(h, hp, "EXCHANGE PARTITION p2 WITH TABLE `shop`.`hn`")  # HASH: 2 and -5 (|-5 % 3| = 2) go
    h.mark()
    config, results = apply_all(tmp_path, protocol, h.events)
    oracle = Oracle(server="tidb")
    expected = model(h.events, "tidb", oracle)
    for r in results:
        assert {n: t for n, t in published(config, r.watermark).items() if t} == expected[r.watermark], f"W {r.watermark}"
    w2 = results[1].watermark
    assert sorted(r["id"] for r in expected[w2][("shop", "nt")]) == [0, 1, 21]  # p0's rows, NULL's too
    assert sorted(r["id"] for r in expected[w2][("shop", "pt")]) == [2, 3, 10, 11, 20]
    w4 = results[3].watermark
    assert sorted(r["id"] for r in expected[w4][("shop", "hn")]) == [2, 5]
    # The change feed of every window reads both tables of an exchange whole (its rows moved without
    # row events): applied to W1 it gives W2, against the model, a row the exchange took dated by it.
    from .changes_invariant import check_pair

    ws = [r.watermark for r in results]
    for w1, w2 in [*zip(ws, ws[1:]), (ws[0], ws[-1])]:
        check_pair(config, expected, w1, w2, open_storage(config.storage), removed_at(oracle))
    from spark.query.changes import read_changes

    # Over all three exchanges nt's first rows went to pt, came back and went again: which one took
    # them is not told by the window's DDL alone, and the details say so rather than guess.
    assert "may have taken it again" in read_changes(config, ws[0], ws[-1]).details[("shop", "nt")].reason
    assert sorted(r["id"] for r in expected[w4][("shop", "hp")]) == [0, 1, 3, 4, 50, 51, 52]


def _both_changed_before() -> History:
    h = History()
    pt = table(h, "pt", "RANGE (`k`) (PARTITION p0 VALUES LESS THAN (10), PARTITION p1 VALUES LESS THAN MAXVALUE)")
    nt = table(h, "nt")
    other = table(h, "other")
    rows(h, pt, range(0, 2), [1, 15])
    rows(h, nt, range(10, 11), [3])
    h.mark()
    rows(h, pt, range(2, 3), [2], "pre")
    h.row(Op.UPDATE, pt, {"id": 1, "k": 15, "v": "a"}, {"id": 1, "k": 5, "v": "moved"})  # into p0 before it
    rows(h, nt, range(11, 12), [4], "pre")
    alter(h, pt, "EXCHANGE PARTITION p0 WITH TABLE `shop`.`nt`")
    rows(h, pt, range(3, 4), [6], "post")
    rows(h, nt, range(12, 13), [7], "post")
    rows(h, other, range(0, 1), [1])
    h.mark()
    return h


@pytest.mark.parametrize("crash_at", [None, "committed:0", "committed:1", "staged:shop.pt", "committed:2"])
def test_exchange_between_two_tables_both_changed_before_it_is_exact(tmp_path: Path, crash_at: str | None) -> None:
    """Both tables change in the run before the statement: each one's changes up to it commit
    first, then the exchange reads them as committed; a retry after any of those commits agrees."""
    h = _both_changed_before()
    config = make_config(tmp_path, "canal-json")
    writer = ArchiveWriter(config, open_storage(config.storage), {"cdc": 2})
    for j, batch in enumerate(per_mark(h.events)):
        writer.interval(T0 + j * HOUR, T0 + (j + 1) * HOUR, [("cdc", rec) for rec in get_encoder("canal-json").encode_all(batch, 2)])
    apply_interval(config, T0, T0 + HOUR)

    def fault(step: str) -> None:
        if step == crash_at:
            raise RuntimeError(f"crash at {step}")

    if crash_at is not None:
        with pytest.raises(RuntimeError, match="crash"):
            apply_interval(config, T0 + HOUR, T0 + 2 * HOUR, fault=fault)
    w2 = apply_interval(config, T0 + HOUR, T0 + 2 * HOUR).watermark
    expected = model(h.events, "tidb")[w2]
    assert {n: t for n, t in published(config, w2).items() if t} == expected
    assert sorted(r["id"] for r in expected[("shop", "nt")]) == [0, 1, 2, 12]  # p0 at the statement: 0, 1 (moved), 2
    assert sorted(r["id"] for r in expected[("shop", "pt")]) == [3, 10, 11]


@pytest.mark.parametrize("by", ["KEY (`k`) PARTITIONS 2", "LINEAR KEY (`k`) PARTITIONS 3"])
def test_key_partitioning_holds_its_table_naming_the_statement(tmp_path: Path, by: str) -> None:
    h = History()
    t = table(h, "kt", by)
    other = table(h, "other")
    rows(h, t, range(0, 3), [1, 2, 3])
    w1 = h.mark()
    alter(h, t, "TRUNCATE PARTITION p1")
    rows(h, other, range(0, 1), [1])
    h.mark()
    config, _ = apply_all(tmp_path, "canal-json", h.events, policy="isolate")
    held = read_isolated(open_storage(config.storage), config.name)[("shop", "kt")]
    assert held.held_at == w1 and held.ddl == "ALTER TABLE `shop`.`kt` TRUNCATE PARTITION p1"
    assert "internal hash" in held.message and "TRUNCATE PARTITION p1" in held.message


@pytest.mark.parametrize("crash_at", ["staged:shop.pt", "committed:0", "staged:shop.nt", "committed:1"])
def test_a_run_that_dies_between_the_two_sides_of_an_exchange_is_finished_by_its_retry(tmp_path: Path, crash_at: str) -> None:
    """The first side's commit records the state the second reads: a retry after it reads the same."""
    h = History()
    pt = table(h, "pt", "LIST (`k`) (PARTITION a VALUES IN (1, 2, NULL), PARTITION b VALUES IN (3, 4))")
    nt = table(h, "nt")
    rows(h, pt, range(0, 4), [1, 3, None, 4])
    rows(h, nt, range(10, 12), [2, 1])
    h.mark()
    rows(h, pt, range(20, 21), [2], "pre")
    alter(h, pt, "EXCHANGE PARTITION a WITH TABLE `shop`.`nt`")
    rows(h, pt, range(21, 22), [3], "post")
    rows(h, nt, range(22, 23), [9], "post")
    h.mark()
    config = make_config(tmp_path, "canal-json")
    writer = ArchiveWriter(config, open_storage(config.storage), {"cdc": 2})
    batches = per_mark(h.events)
    for j, batch in enumerate(batches):
        writer.interval(T0 + j * HOUR, T0 + (j + 1) * HOUR, [("cdc", rec) for rec in get_encoder("canal-json").encode_all(batch, 2)])
    apply_interval(config, T0, T0 + HOUR)

    def fault(step: str) -> None:
        if step == crash_at:
            raise RuntimeError(f"crash at {step}")

    with pytest.raises(RuntimeError, match="crash"):
        apply_interval(config, T0 + HOUR, T0 + 2 * HOUR, fault=fault)
    w2 = apply_interval(config, T0 + HOUR, T0 + 2 * HOUR).watermark
    expected = model(h.events, "tidb")[w2]
    assert {n: t for n, t in published(config, w2).items() if t} == expected
    assert sorted(r["id"] for r in expected[("shop", "nt")]) == [0, 2, 20, 22]


def test_linear_hash_from_a_mysql_upstream_follows_the_powers_of_two_rule(tmp_path: Path) -> None:
    """Canal (MySQL's binlog): LINEAR HASH places rows by the manual's powers-of-two rule, not by
    MOD as TiDB does; the model, fed the decoded messages in derived order, agrees at every W."""
    from cdc_codecs import RawMessage, SourcePosition, get_decoder
    from tests.model.oracle import BinlogOracle

    h = History()
    lh = table(h, "lh", "LINEAR HASH (`k`) PARTITIONS 6")
    rows(h, lh, range(len(KS) - 1), KS[1:])  # no NULL: MySQL's manual and server disagree on it over 6
    h.mark()
    alter(h, lh, "TRUNCATE PARTITION p3")
    alter(h, lh, "COALESCE PARTITION 1")
    rows(h, lh, range(100, 100 + len(KS) - 1), KS[1:], "b")
    alter(h, lh, "TRUNCATE PARTITION p1, p4")
    h.mark()
    pad = table(h, "pad")  # later changes on both partitions: the derived W passes the statements
    rows(h, pad, range(0, 4), [1, 2, 3, 4])
    h.mark()
    # Canal carries the binlog event time (ms), no commitTs: the history's times are its commitTs's.
    h.events = [e._replace(event_time_ms=e.commit_ts >> 18) if hasattr(e, "event_time_ms") else e for e in h.events]
    config = make_config(tmp_path, "canal")
    writer = ArchiveWriter(config, open_storage(config.storage), {"cdc": 2})
    decoders = [get_decoder("canal") for _ in range(2)]
    oracle, offsets = BinlogOracle(server="mysql"), [0, 0]
    for j, batch in enumerate(per_mark(h.events)):
        records = get_encoder("canal").encode_all(batch, 2)
        writer.interval(T0 + j * HOUR, T0 + (j + 1) * HOUR, [("cdc", rec) for rec in records])
        result = apply_interval(config, T0 + j * HOUR, T0 + (j + 1) * HOUR)
        for r in records:
            oracle.add(decoders[r.partition].decode(RawMessage(r.key, r.value, SourcePosition("cdc", r.partition, offsets[r.partition]))))
            offsets[r.partition] += 1
        w = oracle.cut([("cdc", 0), ("cdc", 1)])
        assert result.watermark == w
        assert {n: t for n, t in published(config, w).items() if t} == {
            name: oracle.rows(*name) for name in oracle.tables if oracle.rows(*name)}, f"W {w}"
    # By hand, the manual's rule: over 6 (V = 8), p3 holds -1, 3, 7 (7 >= 6: 7 & 3) and 2003 (2003 & 7, the
    # manual's example); over 5, p1 and p4 hold -7, -4, 1, 5 (5 & 3), 12, 13 (13 & 7 = 5: & 3) and -2003
    # (its two's complement & 7 = 5). MOD, as TiDB places them, would leave other rows.
    first = {r["k"] for r in oracle.rows("shop", "lh") if r["id"] < 100}
    second = {r["k"] for r in oracle.rows("shop", "lh") if r["id"] >= 100}
    assert first == {0, 2, 6} and second == {-1, 0, 2, 3, 6, 7, 2003}
