"""Data file statistics the planner prunes by, end to end: every bound must hold every row.

A Parquet row group holding a value over 4 KiB gets no min/max; a file of several row groups
then must not be pruned by bounds taken from its other row groups. A string upper bound that
pyiceberg would increment into a lone surrogate must not fail the write.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from cdc_codecs import Op, get_encoder
from spark.tables import catalog as cat
from spark.commit.apply import apply_interval
from spark.tables.files import live_data_files
from spark.query.read import read_table
from spark.archive.storage import open_storage

from .archives import HOUR, T0, ArchiveWriter, make_config
from .test_schema_evolution import History, schema

LONG = "z" * 5000  # over the 4 KiB Parquet keeps min/max for


def run_batches(tmp: Path, batches: list[list], between=None):  # noqa: ANN001
    """Apply one interval per batch; ``between(config, i)`` runs before interval i (i > 0)."""
    config = make_config(tmp, "canal-json")
    writer = ArchiveWriter(config, open_storage(config.storage), {"cdc": 1})
    encoder = get_encoder("canal-json")
    for i, batch in enumerate(batches):
        if i and between is not None:
            between(config, i)
        writer.interval(T0 + i * HOUR, T0 + (i + 1) * HOUR, [("cdc", r) for r in encoder.encode_all(batch, 1)])
        apply_interval(config, T0 + i * HOUR, T0 + (i + 1) * HOUR)
    return config


def small_row_groups(db: str, table: str):  # noqa: ANN201
    """Before the second interval: the table's files get row groups of 2 rows (instead of writing millions)."""
    def set_it(config, i: int) -> None:  # noqa: ANN001
        if i == 1:
            t = cat.load_table(cat.open_catalog(config), config, db, table)
            with t.transaction() as tx:
                tx.set_properties({"write.parquet.row-group-limit": "2"})
    return set_it


@pytest.mark.parametrize("keyed", [False, True], ids=["keyless-text", "long-varchar-key"])
def test_a_row_group_without_min_max_does_not_hide_its_keys(tmp_path: Path, keyed: bool) -> None:
    h = History()
    if keyed:
        s = schema("shop", "docs", [("name", "varchar(6000)"), ("n", "int")], keys=("name",))
        h.ddl("shop", "docs", "CREATE TABLE shop.docs (name varchar(6000) primary key, n int)", s, kind="CREATE")
        rows = [{"name": v, "n": i} for i, v in enumerate(["a", "b", LONG, "c"])]
    else:
        s = schema("shop", "docs", [("id", "int"), ("body", "text")], keys=())
        h.ddl("shop", "docs", "CREATE TABLE shop.docs (id int, body text)", s, kind="CREATE")
        rows = [{"id": i, "body": v} for i, v in enumerate(["a", "b", LONG, "c"])]
    first = h.mark()
    created = list(h.events)
    h.events.clear()
    for r in rows:
        h.row(Op.INSERT, s, None, r)
    second = h.mark()
    inserted = list(h.events)
    h.events.clear()
    h.row(Op.DELETE, s, rows[2], None)  # the long value's row, in the row group without min/max
    third = h.mark()
    config = run_batches(tmp_path, [created, inserted, list(h.events)], small_row_groups("shop", "docs"))

    table = cat.load_table(cat.open_catalog(config), config, "shop", "docs")
    [data_file] = live_data_files(table.io, table.snapshot_by_name(f"wm_{second}"))
    with table.io.new_input(data_file.file_path).open() as f:
        assert pq.read_metadata(f).num_row_groups == 2  # the case: a file of row groups, one without min/max
    assert read_table(config, "shop", "docs", first).num_rows == 0
    assert read_table(config, "shop", "docs", second).num_rows == 4
    assert sorted(map(repr, read_table(config, "shop", "docs", third).to_pylist())) == sorted(
        repr(r) for r in rows if r is not rows[2])


def test_a_string_key_bound_next_to_the_surrogates_is_written_and_prunes_right(tmp_path: Path) -> None:
    """pyiceberg keeps 16 characters of a string bound and increments the last for the upper
    one: U+D7FF would become a lone surrogate, which UTF-8 cannot encode (the write failed)."""
    h = History()
    s = schema("shop", "names", [("name", "varchar(64)"), ("n", "int")], keys=("name",))
    h.ddl("shop", "names", "CREATE TABLE shop.names (name varchar(64) primary key, n int)", s, kind="CREATE")
    edge = "k" * 15 + "\ud7ff" + "tail"
    above = "k" * 15 + "\ue000"  # the first string above every one starting with edge's 16 characters
    h.row(Op.INSERT, s, None, {"name": edge, "n": 1})
    h.row(Op.INSERT, s, None, {"name": "a", "n": 2})
    first = h.mark()
    h.row(Op.UPDATE, s, {"name": edge, "n": 1}, {"name": edge, "n": 3})
    h.row(Op.INSERT, s, None, {"name": above, "n": 4})
    second = h.mark()
    config = run_batches(tmp_path, [h.events[:4], h.events[4:]])
    assert sorted(read_table(config, "shop", "names", first).to_pylist(), key=lambda r: r["n"]) == [
        {"name": edge, "n": 1}, {"name": "a", "n": 2}]
    assert sorted(read_table(config, "shop", "names", second).to_pylist(), key=lambda r: r["n"]) == [
        {"name": "a", "n": 2}, {"name": edge, "n": 3}, {"name": above, "n": 4}]
