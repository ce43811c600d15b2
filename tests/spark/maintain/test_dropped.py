"""Dropped tables -- gh-ost's and pt-osc's helpers among them -- leave the catalog once no retained W reads them."""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path

from spark.archive.storage import open_storage
from spark.commit.published import published_watermarks
from spark.config import MaintenanceConfig
from spark.maintain.dropped import _read_uuids, journal_dir
from spark.maintain.run import maintain
from spark.query.read import read_pipeline
from spark.tables import catalog as cat
from spark.tables.properties import DROPPED

from ..test_online_schema_change import DB, every_w_reads_the_model, gh_ost, model_at_each_w, pt_osc, archive, upstream_with_t
from tests.spark.archives import HOUR, T0, normalise
from spark.commit.apply import apply_interval

UTC = dt.timezone.utc


def keep_last(config, storage, n: int):  # noqa: ANN001, ANN201
    """A policy at the newest W's time keeping the last ``n`` Ws, grace 0."""
    times = [dt.datetime.fromtimestamp((w >> 18) / 1000, UTC) for w in published_watermarks(storage, config.name)]
    now = times[-1] + dt.timedelta(milliseconds=1)
    keep = now - times[-n] + dt.timedelta(milliseconds=1)
    policy = MaintenanceConfig(keep_all=keep, keep_hourly=dt.timedelta(0), keep_daily=dt.timedelta(0),
                               grace_period=dt.timedelta(0))
    return dataclasses.replace(config, maintenance=policy), now


def test_ghost_tables_leave_the_catalog_once_no_retained_w_reads_them(tmp_path: Path) -> None:
    up = upstream_with_t()
    gh_ost(up, "a", ghost_rows_first=True, marks=True)
    up.mark()
    pt_osc(up, "b", new_rows_first=True, marks=True)
    up.mark()
    records, model_at = model_at_each_w("canal-json", up.batches[:-1])
    config = archive(tmp_path, "canal-json", records)
    for i in range(len(model_at)):
        apply_interval(config, T0 + i * HOUR, T0 + (i + 1) * HOUR)
    published = every_w_reads_the_model(config, model_at)
    storage = open_storage(config.storage)
    catalog = cat.open_catalog(config)
    every = cat.pipeline_tables(catalog, config)
    before = {cat.table_label(t): DROPPED in t.properties for t in every}
    assert sum(before.values()) >= 3, before  # _t_ghc, _t_del, _t_old ... kept for the Ws before their drops
    read_by_some_w = _read_uuids(storage, config.name, published)

    # Keeping every W: only dropped tables no W ever read go (made and dropped within one interval).
    kept, now = keep_last(config, storage, len(published))
    assert sorted(maintain(kept, now=now).dropped.removed) == sorted(
        cat.table_label(t) for t in every if DROPPED in t.properties and str(t.metadata.table_uuid) not in read_by_some_w)
    before = {cat.table_label(t): DROPPED in t.properties for t in cat.pipeline_tables(catalog, config)}
    assert any(before.values())
    # Keeping the last W only: every dropped table goes, files and all; the last W reads as before.
    last, now = keep_last(config, storage, 1)
    dry = maintain(last, now=now, dry_run=True).dropped
    report = maintain(last, now=now).dropped
    assert sorted(report.removed) == sorted(dry.removed) == sorted(n for n, d in before.items() if d)
    assert report.files_deleted > 0 and storage.list(journal_dir(config.name)) == []
    after = [t for t in cat.pipeline_tables(catalog, config)]
    assert all(DROPPED not in t.properties for t in after) and len(after) == len(before) - len(report.removed)
    _, tables = read_pipeline(config, published[-1])
    assert {n: normalise(t.to_pylist()) for n, t in tables.items()} == {
        n: rows for n, rows in model_at[published[-1]].items() if rows or n in tables}
    # The pipeline goes on: a third migration reuses the helpers' names.
    assert sorted(tables[(DB, "t")].column_names) == ["a", "b", "id", "v"]
