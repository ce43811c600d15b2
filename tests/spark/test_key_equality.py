"""Keys equal as MySQL compares them are one key in the fold and in the rewrite alike."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from cdc_codecs import Op, get_encoder
from spark.commit.apply import apply_interval
from spark.config import LayoutConfig
from spark.query.read import read_pipeline
from spark.archive.storage import open_storage

from .archives import HOUR, T0, ArchiveWriter, make_config
from .test_schema_evolution import History, per_mark, schema


def run(tmp: Path, batches: list[list], write_mode: str):
    """Each batch one interval of Canal-JSON on two partitions, applied in ``write_mode``."""
    config = make_config(tmp, "canal-json")
    config = dataclasses.replace(config, layout=LayoutConfig(write_mode=write_mode))
    writer = ArchiveWriter(config, open_storage(config.storage), {"cdc": 2})
    for i, batch in enumerate(batches):
        writer.interval(T0 + i * HOUR, T0 + (i + 1) * HOUR, [("cdc", r) for r in get_encoder("canal-json").encode_all(batch, 2)])
        apply_interval(config, T0 + i * HOUR, T0 + (i + 1) * HOUR)
    return config


@pytest.mark.parametrize("write_mode", ["merge-on-read", "copy-on-write"])
def test_minus_zero_and_zero_are_one_key_in_every_run(tmp_path: Path, write_mode: str) -> None:
    # MySQL: -0.0 = 0.0, so a PRIMARY KEY holds one of them; an UPDATE may store the other.
    h = History()
    keyed = schema("db", "m", [("id", "double"), ("v", "int")])
    bag = schema("db", "bag", [("x", "double"), ("tag", "varchar(8)")], keys=())
    h.ddl("db", "m", "CREATE TABLE `db`.`m` (`id` double NOT NULL, `v` int, PRIMARY KEY (`id`))", keyed, kind="CREATE")
    h.ddl("db", "bag", "CREATE TABLE `db`.`bag` (`x` double, `tag` varchar(8))", bag, kind="CREATE")
    h.row(Op.INSERT, keyed, None, {"id": 0.0, "v": 1})
    h.row(Op.INSERT, bag, None, {"x": 0.0, "tag": "a"})
    h.row(Op.INSERT, bag, None, {"x": 1.0, "tag": "b"})
    first = h.mark()
    h.row(Op.UPDATE, keyed, {"id": 0.0, "v": 1}, {"id": -0.0, "v": 2})
    h.row(Op.DELETE, bag, {"x": -0.0, "tag": "a"}, None)
    second = h.mark()
    config = run(tmp_path, per_mark(h.events), write_mode)

    def rows(w: int, table: str) -> list[tuple]:
        return sorted(tuple(r.values()) for r in read_pipeline(config, w)[1][("db", table)].to_pylist())

    assert rows(first, "m") == [(0.0, 1)] and rows(first, "bag") == [(0.0, "a"), (1.0, "b")]
    assert rows(second, "m") == [(-0.0, 2)]
    assert rows(second, "bag") == [(1.0, "b")]
