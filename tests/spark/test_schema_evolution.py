"""DDL through apply: every supported change, the unsupported one's error, hostile names."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from cdc_codecs import Column, DdlChange, Op, RowChange, SourcePosition, TableSchema, Watermark, get_encoder
from cdc_codecs.types import parse_mysql_type
from cdc_codecs.workload import quote_ident
from spark.apply import apply_interval
from spark.commit import UnsupportedSchemaChange
from spark.query import NoSuchWatermark, read_pipeline, read_table
from spark.storage import open_storage

from .archive import ArchiveWriter
from .archive import HOUR, T0, make_config

P = SourcePosition("gen", 0, 0)


class History:
    """Hand-written upstream history with increasing commitTs."""

    def __init__(self) -> None:
        self.ts = 1000 << 18
        self.events: list = []

    def tick(self) -> int:
        self.ts += 1 << 18
        return self.ts

    def ddl(self, db: str, table: str, sql: str, after: TableSchema | None = None, before: TableSchema | None = None, kind: str = "QUERY") -> None:
        self.events.append(DdlChange(db, table, sql, self.tick(), P, kind, before, after))

    def row(self, op: Op, schema: TableSchema, before: dict | None, after: dict | None) -> None:
        self.events.append(RowChange(op, schema.database, schema.table, before, after, schema.key_columns, schema.column_types, self.tick(), P))

    def mark(self) -> int:
        w = self.tick()
        self.events.append(Watermark(w, P))
        return w


def schema(db: str, table: str, cols: list[tuple[str, str]], keys=("id",)) -> TableSchema:
    return TableSchema(db, table, tuple(Column(n, parse_mysql_type(t), n not in keys) for n, t in cols), tuple(keys))


def run(tmp: Path, protocol: str, batches: list[list], options: dict | None = None):
    config = make_config(tmp, protocol, options)
    writer = ArchiveWriter(config, open_storage(config.storage), {"cdc": 2})
    encoder = get_encoder(protocol, **(options or {}))
    results = []
    for i, batch in enumerate(batches):
        writer.interval(T0 + i * HOUR, T0 + (i + 1) * HOUR, [("cdc", r) for r in encoder.encode_all(batch, 2)])
        results.append(apply_interval(config, T0 + i * HOUR, T0 + (i + 1) * HOUR))
    return config, results


@pytest.mark.parametrize("protocol", ["canal-json", "simple", "debezium", "open-protocol"])
def test_add_drop_rename_widen_truncate(tmp_path: Path, protocol: str) -> None:
    h = History()
    v1 = schema("shop", "items", [("id", "int"), ("qty", "int"), ("price", "decimal(8,2)"), ("old", "varchar(8)")])
    h.ddl("shop", "items", "CREATE TABLE shop.items (id int primary key, qty int, price decimal(8,2), old varchar(8))", v1, kind="CREATE")
    h.row(Op.INSERT, v1, None, {"id": 1, "qty": 5, "price": Decimal("1.50"), "old": "x"})
    w1 = h.mark()
    first = list(h.events)
    h.events.clear()
    v2 = schema("shop", "items", [("id", "int"), ("qty", "bigint"), ("price", "decimal(12,2)"), ("note", "text")])
    # Every DDL carries the schema after it, as TiCDC's Simple and Debezium protocols do.
    added = schema("shop", "items", [("id", "int"), ("qty", "int"), ("price", "decimal(8,2)"), ("old", "varchar(8)"), ("note", "text")])
    dropped = schema("shop", "items", [("id", "int"), ("qty", "int"), ("price", "decimal(8,2)"), ("note", "text")])
    widened = schema("shop", "items", [("id", "int"), ("qty", "bigint"), ("price", "decimal(8,2)"), ("note", "text")])
    h.ddl("shop", "items", "ALTER TABLE shop.items ADD COLUMN note text", added, v1, kind="ALTER")
    h.ddl("shop", "items", "ALTER TABLE shop.items DROP COLUMN old", dropped, added, kind="ALTER")
    h.ddl("shop", "items", "ALTER TABLE shop.items MODIFY COLUMN qty bigint", widened, dropped, kind="ALTER")
    h.ddl("shop", "items", "ALTER TABLE shop.items MODIFY COLUMN price decimal(12,2)", v2, widened, kind="ALTER")
    h.row(Op.INSERT, v2, None, {"id": 2, "qty": 2**40, "price": Decimal("1234567890.25"), "note": "n"})
    v3 = schema("shop", "items", [("id", "int"), ("amount", "bigint"), ("price", "decimal(12,2)"), ("note", "text")])
    h.ddl("shop", "items", "ALTER TABLE shop.items RENAME COLUMN qty TO amount", v3, v2, kind="ALTER")
    h.row(Op.UPDATE, v3, {"id": 1, "amount": 5, "price": Decimal("1.50"), "note": None}, {"id": 1, "amount": 6, "price": Decimal("1.50"), "note": "u"})
    w2 = h.mark()
    second = list(h.events)
    h.events.clear()
    h.ddl("shop", "items", "TRUNCATE TABLE shop.items", v3, v3, kind="TRUNCATE")
    h.row(Op.INSERT, v3, None, {"id": 9, "amount": 1, "price": None, "note": None})
    w3 = h.mark()
    config, results = run(tmp_path, protocol, [first, second, list(h.events)])
    assert [r.watermark for r in results] == [w1, w2, w3]
    at1 = read_table(config, "shop", "items", w1).to_pylist()
    assert at1 == [{"id": 1, "qty": 5, "price": Decimal("1.50"), "old": "x"}]
    at2 = sorted(read_table(config, "shop", "items", w2).to_pylist(), key=lambda r: r["id"])
    assert at2 == [
        {"id": 1, "amount": 6, "price": Decimal("1.50"), "note": "u"},
        {"id": 2, "amount": 2**40, "price": Decimal("1234567890.25"), "note": "n"},
    ]
    assert read_table(config, "shop", "items", w3).to_pylist() == [{"id": 9, "amount": 1, "price": None, "note": None}]


def test_unsupported_change_fails_the_table_with_what_to_do(tmp_path: Path) -> None:
    h = History()
    v1 = schema("shop", "t", [("id", "int"), ("v", "int")])
    h.ddl("shop", "t", "CREATE TABLE shop.t (id int primary key, v int)", v1, kind="CREATE")
    h.ddl("shop", "t", "ALTER TABLE shop.t MODIFY COLUMN v varchar(10)", kind="ALTER")
    h.mark()
    with pytest.raises(UnsupportedSchemaChange, match=r"shop.t: 'ALTER TABLE shop.t MODIFY COLUMN v varchar\(10\)' changes 'v' from int to string.*Add a new column"):
        run(tmp_path, "canal-json", [h.events])


def test_drop_and_rename_table(tmp_path: Path) -> None:
    h = History()
    a = schema("shop", "a", [("id", "int"), ("v", "varchar(5)")])
    b = schema("shop", "b", [("id", "int"), ("v", "varchar(5)")])
    h.ddl("shop", "a", "CREATE TABLE shop.a (id int primary key, v varchar(5))", a, kind="CREATE")
    h.row(Op.INSERT, a, None, {"id": 1, "v": "x"})
    w1 = h.mark()
    h.ddl("shop", "a", "RENAME TABLE shop.a TO shop.b", kind="RENAME")
    h.row(Op.INSERT, b, None, {"id": 2, "v": "y"})
    w2 = h.mark()
    h.ddl("shop", "b", "DROP TABLE shop.b", kind="ERASE")
    w3 = h.mark()
    config, results = run(tmp_path, "canal-json", [h.events])
    assert results[-1].watermark == w3
    _, at3 = read_pipeline(config, w3)
    assert at3 == {}
    with pytest.raises(NoSuchWatermark, match="shop.b is not a table"):
        read_table(config, "shop", "b", w3)  # dropped at W3
    assert w1 < w2  # the rename happened inside one run; the renamed table holds both rows before the drop


HOSTILE_DB = "we`ird db"
HOSTILE_TABLE = "sel.ect/\"tbl\" 表"
HOSTILE_COLUMNS = [("id", "int"), ("order", "varchar(10)"), ("a b", "int"), ("`tick`", "int"), ("dot.col", "int"), ("ünï", "varchar(5)"), ("it's", "int")]


@pytest.mark.parametrize("protocol", ["canal-json", "simple", "debezium"])
def test_hostile_names_round_trip(tmp_path: Path, protocol: str) -> None:
    h = History()
    s = schema(HOSTILE_DB, HOSTILE_TABLE, HOSTILE_COLUMNS)
    cols = ", ".join(f"{quote_ident(n)} {t}" for n, t in HOSTILE_COLUMNS)
    h.ddl(HOSTILE_DB, HOSTILE_TABLE, f"CREATE TABLE {quote_ident(HOSTILE_DB)}.{quote_ident(HOSTILE_TABLE)} ({cols}, PRIMARY KEY (`id`))", s, kind="CREATE")
    row = {"id": 1, "order": "o", "a b": 2, "`tick`": 3, "dot.col": 4, "ünï": "ü", "it's": 5}
    h.row(Op.INSERT, s, None, row)
    w = h.mark()
    config, _ = run(tmp_path, protocol, [h.events])
    w_read, tables = read_pipeline(config, "latest")
    assert w_read == w
    assert tables[(HOSTILE_DB, HOSTILE_TABLE)].to_pylist() == [row]
    files = [p for p in (tmp_path / "archive").rglob("*") if p.is_file()]
    assert all(".." not in p.relative_to(tmp_path).parts for p in files)
    assert all(str(p).startswith(str(tmp_path / "archive")) for p in files)
