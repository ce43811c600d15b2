"""Orphan cleanup: unreferenced files older than the grace period go; referenced or young ones never do."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

from spark.archive import layout
from spark.config import PipelineConfig
from spark.decode.changelog import decoder_version
from spark.tables import internals
from spark.write.target import TableTarget
from spark.runtime.runners import LocalRunner
from spark.maintain.compaction import compact_table
from spark.maintain.orphans import referenced_files, remove_orphans
from spark.archive.storage import open_storage

from tests.spark.archives import HOUR, T0, ArchiveWriter
from .conftest import all_referenced, keyed_table, read_at, rows

UTC = dt.UTC
LATER = dt.datetime.now(UTC) + dt.timedelta(hours=2)  # every file written by the test is 2h old by then


def local(uri: str) -> str:
    return uri.removeprefix("file://")


def files_under(path: str) -> set[str]:
    return {os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs}


def crashed_write(table) -> list[str]:
    """Data files a run wrote and never committed."""
    target = TableTarget.of(table)
    return [local(f.file_path) for f in internals.write_data_files(target.io(), target.metadata(), rows(range(500, 520)))]


def a_table_with_history(catalog):
    table = keyed_table(catalog, runs=6)
    table.transaction().set_properties({"write.metadata.previous-versions-max": "2"}).commit_transaction()
    compact_table(catalog.load_table("ns.t"), LocalRunner(), target_file_size=1 << 20)
    return catalog.load_table("ns.t")


def test_referenced_files_survive_and_orphans_older_than_grace_go(catalog, tmp_path):
    table = a_table_with_history(catalog)
    orphans = crashed_write(table)
    tags = {name: read_at(table, ref.snapshot_id) for name, ref in table.refs().items()}
    referenced = {local(p) for p in all_referenced(table)}
    metadata_before = {p for p in files_under(local(table.location())) if p.endswith(".metadata.json")}

    report = remove_orphans(open_storage(_storage_config(tmp_path)), [table], grace_seconds=3600, now=LATER)

    table = catalog.load_table("ns.t")
    assert not any(os.path.exists(p) for p in orphans)
    assert all(os.path.exists(p) for p in referenced)  # every snapshot's files, deleted entries too
    kept_metadata = {p for p in files_under(local(table.location())) if p.endswith(".metadata.json")}
    logged = {local(table.metadata_location), *(local(e.metadata_file) for e in table.metadata.metadata_log)}
    assert kept_metadata == logged and len(metadata_before) > len(kept_metadata)  # fell out of the log: gone
    assert {name: read_at(table, ref.snapshot_id) for name, ref in table.refs().items()} == tags
    assert report.table_files == len(orphans) + len(metadata_before - kept_metadata) and report.table_bytes > 0
    assert files_under(local(table.location())) >= referenced


def test_files_younger_than_grace_are_kept(catalog, tmp_path):
    table = a_table_with_history(catalog)
    orphans = crashed_write(table)
    report = remove_orphans(open_storage(_storage_config(tmp_path)), [table], grace_seconds=3600,
                            now=dt.datetime.now(UTC))
    assert report.table_files == 0 and report.young >= len(orphans)
    assert all(os.path.exists(p) for p in orphans)


def test_dry_run_deletes_nothing_and_names_what_it_would(catalog, tmp_path):
    table = a_table_with_history(catalog)
    orphans = crashed_write(table)
    before = files_under(local(table.location()))
    report = remove_orphans(open_storage(_storage_config(tmp_path)), [table], grace_seconds=3600, now=LATER, dry_run=True)
    assert files_under(local(table.location())) == before
    assert {local(p) for p in report.paths} >= set(orphans) and report.table_files == len(report.paths)
    assert not {local(p) for p in report.paths} & {local(p) for p in referenced_files(table)}


def test_tables_sharing_a_location_keep_each_others_files(catalog, tmp_path):
    """RENAME TABLE t TO r keeps t's location; a later CREATE TABLE t gets the same one. Found by
    the model-based test: cleaning one table's location deleted the other's files."""
    renamed = a_table_with_history(catalog)
    catalog.rename_table("ns.t", "ns.r")
    created = catalog.create_table("ns.t", schema=renamed.schema(), location=renamed.location())
    created.append(rows(range(3)))
    created = catalog.load_table("ns.t")
    renamed = catalog.load_table("ns.r")
    orphans = crashed_write(renamed)
    referenced = {local(p) for t in (renamed, created) for p in all_referenced(t)}

    report = remove_orphans(open_storage(_storage_config(tmp_path)), [renamed, created], grace_seconds=0, now=LATER)

    assert all(os.path.exists(p) for p in referenced)
    assert not any(os.path.exists(p) for p in orphans) and report.table_files >= len(orphans)
    assert catalog.load_table("ns.t").scan().to_arrow().num_rows == 3
    assert catalog.load_table("ns.r").scan().to_arrow().num_rows == renamed.scan().to_arrow().num_rows > 0


def _storage_config(tmp_path: Path):
    return _config(tmp_path).storage


def _config(tmp_path: Path) -> PipelineConfig:
    return PipelineConfig.from_mapping({
        "name": "shop", "kafka": {"bootstrap_servers": "unused:9092"},
        "topics": [{"name": "cdc", "protocol": "canal-json"}], "storage": {"url": str(tmp_path / "archive")},
    }, "test")


def test_archive_orphans_are_crashed_segments_change_logs_without_side_output_and_net_change_left(tmp_path):
    config = _config(tmp_path)
    storage = open_storage(config.storage)
    from cdc_codecs import ProducerRecord

    writer = ArchiveWriter(config, storage, {"cdc": 1})
    manifest = writer.interval(T0, T0 + HOUR, [("cdc", ProducerRecord(0, b"k", b"v")) for _ in range(3)])
    [landed] = manifest.partitions[0].segments
    crashed = "shop/segments/cdc/0/00000000000000000003-00000000000000000009.parquet"  # no manifest lists it
    storage.write(crashed, b"x")
    version = f"shop/changelog/{decoder_version('canal-json')}/cdc/0"
    decoded = f"{version}/00000000000000000000-00000000000000000003"
    abandoned = f"{version}/00000000000000000003-00000000000000000009"
    for path in (f"{decoded}.parquet", f"{decoded}.json", f"{abandoned}.parquet"):
        storage.write(path, b"x")
    storage.write("shop/checkpoints/whatever.json", b"{}")  # not maintenance's to judge
    left = layout.net_change_path("shop", "a-crashed-run", 3)  # a run that crashed between fold and rewrite
    storage.write(left, b"x")

    young = remove_orphans(storage, [], grace_seconds=3600, now=dt.datetime.now(UTC), pipelines=["shop"])
    assert young.archive_files == 0 and young.young == 3 and storage.exists(crashed)
    dry = remove_orphans(storage, [], grace_seconds=3600, now=LATER, pipelines=["shop"], dry_run=True)
    assert len(dry.paths) == 3 and storage.exists(crashed) and storage.exists(f"{abandoned}.parquet")

    report = remove_orphans(storage, [], grace_seconds=3600, now=LATER, pipelines=["shop"])
    assert report.archive_files == 3 and report.archive_bytes == 3
    assert not storage.exists(crashed) and not storage.exists(f"{abandoned}.parquet") and not storage.exists(left)
    for kept in (landed.path, f"{decoded}.parquet", f"{decoded}.json", manifest.path, "shop/checkpoints/whatever.json"):
        assert storage.exists(kept), kept
