"""What a run costs each table in the catalog: its changes and its tag ``wm_<W>`` in one commit, and
the table read once per run (not once per step): issue 26, many tables."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

from pyiceberg.catalog.sql import SqlCatalog

from bench.apply_tables import build_archive
from bench.archive import HOUR, T0, clone_archive, pipeline_config
from spark.commit.apply import apply_interval
from spark.core.watermark import tag_name
from spark.tables import catalog as cat
from spark.tables.internals import MAIN_BRANCH

TABLES = 6


def _pipeline(tmp_path: Path):  # noqa: ANN202
    build_archive(tmp_path / "archive", TABLES, 3, 2)
    return pipeline_config(clone_archive(tmp_path / "archive", tmp_path / "run"))


def test_each_changed_table_takes_one_commit_holding_its_rows_and_its_tag(tmp_path: Path) -> None:
    config = _pipeline(tmp_path)
    first = apply_interval(config, T0, T0 + HOUR)
    catalog = cat.open_catalog(config)
    before = {t.name(): t for t in cat.pipeline_tables(catalog, config)}
    second = apply_interval(config, T0 + HOUR, T0 + 2 * HOUR)
    assert second.outcome == "published" and second.watermark > first.watermark
    for table in cat.pipeline_tables(catalog, config):
        old = before[table.name()]
        # One new metadata file: the commit that wrote the rows tagged them too.
        assert len(table.metadata.metadata_log) == len(old.metadata.metadata_log) + 1, table.name()
        head = table.metadata.snapshot_by_name(MAIN_BRANCH)
        assert table.metadata.refs[tag_name(second.watermark)].snapshot_id == head.snapshot_id
        assert head.summary["tidelake.watermark"] == str(second.watermark)
        assert old.metadata.snapshot_by_name(MAIN_BRANCH).snapshot_id != head.snapshot_id


def test_a_run_loads_each_table_once_besides_the_catalog_s_own_load_at_each_commit(tmp_path: Path) -> None:
    config = _pipeline(tmp_path)
    apply_interval(config, T0, T0 + HOUR)
    loads: list[tuple[str, ...]] = []
    original = SqlCatalog.load_table

    def counted(self, identifier):  # noqa: ANN001, ANN202
        loads.append(tuple(identifier))
        return original(self, identifier)

    with mock.patch.object(SqlCatalog, "load_table", counted):
        apply_interval(config, T0 + HOUR, T0 + 2 * HOUR)
    per_table = {i: loads.count(i) for i in set(loads)}
    assert len(per_table) == TABLES
    # Once when the run lists the tables, once inside the catalog's commit_table (pyiceberg's own).
    assert set(per_table.values()) == {2}, per_table


def test_the_embedded_catalog_journals_to_a_write_ahead_log(tmp_path: Path) -> None:
    config = _pipeline(tmp_path)
    catalog = cat.open_catalog(config)
    with catalog.engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
