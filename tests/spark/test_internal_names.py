"""Internal names never collide with upstream names (issue 34, item 3): a table whose upstream
columns carry every name the decode, fold and write path uses for its own columns -- the change
log's, the net change's, the routed rows', the key join's, the bucket partition field, the
metadata columns -- is written and read like any other, keyed or key-less, bucketed or not, in
both write modes. Upstream names are data: the write path carries its helpers by place or beside
the rows, never by a name next to upstream's."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from cdc_codecs import Op, get_encoder
from spark.archive.storage import open_storage
from spark.commit.apply import apply_interval
from spark.config import WRITE_MODES, LayoutConfig
from spark.decode.changelog import CHANGE_LOG_SCHEMA
from spark.fold.slices import NET_SCHEMA
from spark.query.read import read_table
from spark.tables.schema_map import METADATA_COLUMNS
from spark.tables.table_layout import BUCKET_FIELD
from spark.write.upsert import COPIES, RESULT_SCHEMA, ROUTED_SCHEMA

from .archives import HOUR, T0, ArchiveWriter, make_config
from .test_schema_evolution import History, schema

pytestmark = pytest.mark.slow  # whole intervals, Spark or services: make test-fast leaves it out (docs/testing.md)

# Every name the write path gives a column of its own, now and before (the routed rows' group and
# role columns, by name next to upstream's until issue 34), and the key join's.
INTERNAL_NAMES = sorted({
    *CHANGE_LOG_SCHEMA.names, *NET_SCHEMA.names, *ROUTED_SCHEMA.names, *RESULT_SCHEMA.names, COPIES, BUCKET_FIELD,
    *METADATA_COLUMNS, "_tidelake_group", "_tidelake_role", "row", "touched", "v0", "n0", "v1", "n1",
} - {"id"})


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


@pytest.mark.parametrize("write_mode", WRITE_MODES)
@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "key-less"])
@pytest.mark.parametrize("buckets", [0, 4])
def test_upstream_columns_named_like_every_internal_column_are_written_and_read(tmp_path: Path, write_mode: str,
                                                                               keyed: bool, buckets: int) -> None:
    columns = [("id", "int"), *((n, "int") for n in INTERNAL_NAMES)]
    t = schema("shop", "t", columns, keys=("id",) if keyed else ())
    key = ", PRIMARY KEY (`id`)" if keyed else ""
    create = f"CREATE TABLE `shop`.`t` ({', '.join(f'{_quoted(n)} {ty}' for n, ty in columns)}{key})"

    def row(i: int, v: int) -> dict:
        return {"id": i, **{n: v * 1000 + j for j, n in enumerate(INTERNAL_NAMES)}}

    h = History()
    h.ddl("shop", "t", create, t, kind="CREATE")
    for i in range(1, 6):
        h.row(Op.INSERT, t, None, row(i, i))
    h.row(Op.INSERT, t, None, row(1, 1)) if not keyed else None  # a second copy of a key-less row
    w1 = h.mark()
    first, h.events = h.events, []
    h.row(Op.UPDATE, t, row(2, 2), row(2, 20))
    h.row(Op.DELETE, t, row(3, 3), None)
    h.row(Op.DELETE, t, row(1, 1), None)  # key-less: one of its two copies
    h.row(Op.INSERT, t, None, row(6, 6))
    w2 = h.mark()
    config = make_config(tmp_path, "canal-json")
    config = dataclasses.replace(config, layout=LayoutConfig(buckets=buckets, write_mode=write_mode))
    writer = ArchiveWriter(config, open_storage(config.storage), {"cdc": 2})
    encoder = get_encoder("canal-json")
    for i, batch in enumerate([first, h.events]):
        writer.interval(T0 + i * HOUR, T0 + (i + 1) * HOUR, [("cdc", r) for r in encoder.encode_all(batch, 2)])
        assert apply_interval(config, T0 + i * HOUR, T0 + (i + 1) * HOUR).outcome == "published"

    def rows(w: int) -> list[dict]:
        return sorted(read_table(config, "shop", "t", w).to_pylist(), key=lambda r: sorted(r.items()))

    def want(*images: dict) -> list[dict]:
        return sorted(images, key=lambda r: sorted(r.items()))

    once = [] if keyed else [row(1, 1)]
    assert rows(w1) == want(row(1, 1), *once, row(2, 2), row(3, 3), row(4, 4), row(5, 5))
    assert rows(w2) == want(*once, row(2, 20), row(4, 4), row(5, 5), row(6, 6))


@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "key-less"])
def test_columns_added_later_under_every_internal_name_are_written_and_read(tmp_path: Path, keyed: bool) -> None:
    """The same names taken by ``ADD COLUMN`` after the table (bucketed, so it has its partition
    field already) was made -- but the partition field's own name, which Iceberg refuses for a
    column of the table (below)."""
    keys = ("id",) if keyed else ()
    names = [n for n in INTERNAL_NAMES if n != BUCKET_FIELD]
    before = schema("shop", "t", [("id", "int"), ("v", "int")], keys=keys)
    after = schema("shop", "t", [("id", "int"), ("v", "int"), *((n, "int") for n in names)], keys=keys)
    h = History()
    h.ddl("shop", "t", f"CREATE TABLE shop.t (id int, v int{', PRIMARY KEY (id)' if keyed else ''})", before, kind="CREATE")
    h.row(Op.INSERT, before, None, {"id": 1, "v": 1})
    w1 = h.mark()
    first, h.events = h.events, []
    adds = ", ".join(f"ADD COLUMN {_quoted(n)} int" for n in names)
    h.ddl("shop", "t", f"ALTER TABLE shop.t {adds}", after, before, kind="ALTER")
    image = {"id": 2, "v": 2, **{n: j for j, n in enumerate(names)}}
    h.row(Op.INSERT, after, None, image)
    h.row(Op.UPDATE, after, {"id": 1, "v": 1, **dict.fromkeys(names)}, {"id": 1, "v": 10, **dict.fromkeys(names)})
    w2 = h.mark()
    config = dataclasses.replace(make_config(tmp_path, "canal-json"), layout=LayoutConfig(buckets=4))
    writer = ArchiveWriter(config, open_storage(config.storage), {"cdc": 2})
    encoder = get_encoder("canal-json")
    for i, batch in enumerate([first, h.events]):
        writer.interval(T0 + i * HOUR, T0 + (i + 1) * HOUR, [("cdc", r) for r in encoder.encode_all(batch, 2)])
        assert apply_interval(config, T0 + i * HOUR, T0 + (i + 1) * HOUR).outcome == "published"
    assert read_table(config, "shop", "t", w1).to_pylist() == [{"id": 1, "v": 1}]
    got = sorted(read_table(config, "shop", "t", w2).to_pylist(), key=lambda r: r["id"])
    assert got == [{"id": 1, "v": 10, **dict.fromkeys(names)}, image]


def test_a_column_taking_the_partition_fields_name_later_is_that_tables_error(tmp_path: Path) -> None:
    """Iceberg refuses a column named like a partition field of any spec the table ever had, and a
    spec's names never change: ``ADD COLUMN _tidelake_key_bucket`` on a bucketed table is that one
    table's typed error (isolated under ``on_table_error = "isolate"``), naming why."""
    before = schema("shop", "t", [("id", "int"), ("v", "int")])
    after = schema("shop", "t", [("id", "int"), ("v", "int"), (BUCKET_FIELD, "int")])
    other = schema("shop", "o", [("id", "int"), ("v", "int")])
    h = History()
    h.ddl("shop", "t", "CREATE TABLE shop.t (id int, v int, PRIMARY KEY (id))", before, kind="CREATE")
    h.ddl("shop", "o", "CREATE TABLE shop.o (id int, v int, PRIMARY KEY (id))", other, kind="CREATE")
    h.row(Op.INSERT, before, None, {"id": 1, "v": 1})
    h.mark()
    first, h.events = h.events, []
    h.ddl("shop", "t", f"ALTER TABLE shop.t ADD COLUMN {BUCKET_FIELD} int", after, before, kind="ALTER")
    h.row(Op.INSERT, other, None, {"id": 1, "v": 1})
    w2 = h.mark()
    config = dataclasses.replace(make_config(tmp_path, "canal-json"), layout=LayoutConfig(buckets=4), on_table_error="isolate")
    writer = ArchiveWriter(config, open_storage(config.storage), {"cdc": 2})
    encoder = get_encoder("canal-json")
    for i, batch in enumerate([first, h.events]):
        writer.interval(T0 + i * HOUR, T0 + (i + 1) * HOUR, [("cdc", r) for r in encoder.encode_all(batch, 2)])
        result = apply_interval(config, T0 + i * HOUR, T0 + (i + 1) * HOUR)
    isolated = result.report["isolated"]
    assert list(isolated) == ["shop.t"] and isolated["shop.t"]["error"] == "UnsupportedSchemaChange"
    assert "the name of the table's partition field" in isolated["shop.t"]["message"]
    assert read_table(config, "shop", "o", w2).to_pylist() == [{"id": 1, "v": 1}]
