"""Archive retention: segments below every retained W's pending offsets go; a replay from each retained W still works."""

from __future__ import annotations

import pytest

from spark.tables import catalog as cat
from spark.archive.checkpoint import Checkpoint, checkpoint_path
from spark.commit.apply import apply_interval
from spark.tables.properties import DROPPED, WATERMARK
from spark.decode.changelog import decoder_version
from spark.archive.floors import ArchivePruned, pruned_floors
from spark.maintain.archive_retention import prune_archive
from spark.archive.manifest import list_manifests, read_manifest
from spark.tables.schema_map import metadata_columns
from spark.archive.storage import open_storage
from spark.core.watermark import tag_name

from tests.spark.archives import HOUR, T0, normalise, run_history

pytestmark = pytest.mark.slow  # whole intervals, Spark or services: make test-fast leaves it out (docs/testing.md)

INTERVALS = 6
NOW = T0 + 1000 * HOUR


@pytest.fixture
def pipeline(tmp_path):
    config, expected = run_history(tmp_path, "canal-json", seed=5, intervals=INTERVALS, partitions=2)
    apply_interval(config, T0 + (INTERVALS - 1) * HOUR, T0 + INTERVALS * HOUR)
    storage = open_storage(config.storage)
    checkpoints = [Checkpoint.from_json(storage.read(checkpoint_path(config.name, T0 + i * HOUR, T0 + (i + 1) * HOUR)))
                   for i in range(INTERVALS)]
    return config, storage, checkpoints, expected


def segments(storage, pipeline: str) -> list:
    return [(p.topic, p.partition, s) for _, _, path in list_manifests(storage, pipeline)
            for p in read_manifest(storage, path).partitions for s in p.segments]


def rewind_to(config, w: int) -> None:
    """Every table's main back at its tag wm_<w> (a table behind: the next run replays from w)."""
    catalog = cat.open_catalog(config)
    for table in cat.pipeline_tables(catalog, config):
        ref = table.snapshot_by_name(tag_name(w))
        assert ref is not None
        table.manage_snapshots().set_current_snapshot(snapshot_id=ref.snapshot_id).commit()
        table.transaction().set_properties({WATERMARK: str(w)}).commit_transaction()


def main_rows(config) -> dict:
    catalog = cat.open_catalog(config)
    out = {}
    for table in cat.pipeline_tables(catalog, config):
        if DROPPED not in table.properties:
            out[cat.upstream_name(table)] = normalise(table.scan().to_arrow().drop_columns(list(metadata_columns(table.schema(), table.properties).names)).to_pylist())
    return out


def test_segments_below_every_retained_pending_offset_go_and_each_retained_w_replays(pipeline):
    config, storage, checkpoints, expected = pipeline
    retained = [checkpoints[i] for i in (2, 4, 5)]
    before = segments(storage, config.name)
    final = main_rows(config)
    assert final == {name: rows for name, rows in expected[-1][2].items() if rows or name in final}

    report = prune_archive(storage, config.name, retained_checkpoints=retained, horizon_seconds=3600, now=NOW)

    floors = {k: min(cp.pending[k] for cp in retained) for k in checkpoints[2].pending}
    gone = [s for t, p, s in before if s.end <= floors[(t, p)]]
    assert gone and report.segments == len(gone) and report.segment_bytes > 0
    assert all(not storage.exists(s.path) for s in gone)
    assert all(storage.exists(s.path) for t, p, s in before if s.end > floors[(t, p)])
    assert report.floors == {f"{t}/{p}": v for (t, p), v in floors.items()}
    assert all(pruned_floors(storage, config.name)[(t, p)] <= floors[(t, p)] for t, p in floors)

    for i in (2, 4):
        cp = checkpoints[i]
        rewind_to(config, cp.watermark)
        result = apply_interval(config, T0 + (INTERVALS - 1) * HOUR, T0 + INTERVALS * HOUR)
        assert result.report.get("events_decoded", 0) > 0  # decoded from the archive, not confirmed
        assert main_rows(config) == final, f"replay from retained W {cp.watermark}"


def test_a_replay_from_a_w_that_was_not_retained_fails_clearly(pipeline):
    config, storage, checkpoints, _ = pipeline
    prune_archive(storage, config.name, retained_checkpoints=[checkpoints[4], checkpoints[5]], horizon_seconds=0, now=NOW)
    earlier = checkpoints[1]
    assert any(earlier.pending[k] < checkpoints[4].pending[k] for k in earlier.pending)
    rewind_to(config, earlier.watermark)
    with pytest.raises(ArchivePruned, match="archive retention deleted"):
        apply_interval(config, T0 + (INTERVALS - 1) * HOUR, T0 + INTERVALS * HOUR)


def test_the_horizon_keeps_recent_intervals_and_dry_run_deletes_nothing(pipeline):
    config, storage, checkpoints, _ = pipeline
    before = segments(storage, config.name)
    dry = prune_archive(storage, config.name, retained_checkpoints=[checkpoints[5]], horizon_seconds=0, now=NOW, dry_run=True)
    assert dry.segments > 0 and len(dry.paths) == dry.segments + dry.changelog_files and all(storage.exists(s.path) for _, _, s in before)
    assert not storage.exists("shop/pruned.json")
    # Intervals ending after now - horizon keep every segment, whatever the floors.
    now = T0 + 3 * HOUR
    report = prune_archive(storage, config.name, retained_checkpoints=[checkpoints[5]], horizon_seconds=0, now=now)
    manifests = {path: read_manifest(storage, path) for _, _, path in list_manifests(storage, config.name)}
    recent = [s for m in manifests.values() if m.interval_end > now for p in m.partitions for s in p.segments]
    assert report.segments < dry.segments and all(storage.exists(s.path) for s in recent)


def test_change_logs_of_pruned_segments_go_but_the_last_side_output_stays(pipeline):
    config, storage, checkpoints, _ = pipeline
    before = segments(storage, config.name)
    version = f"shop/changelog/{decoder_version('canal-json')}"
    for t, p, s in before:  # a change log of every segment, as the decode stage writes it
        for ext in ("parquet", "json"):
            storage.write(f"{version}/{t}/{p}/{s.start:020d}-{s.end:020d}.{ext}", b"x")
    retained = [checkpoints[5]]
    report = prune_archive(storage, config.name, retained_checkpoints=retained, horizon_seconds=0, now=NOW)
    for t, p, s in before:
        name = f"{version}/{t}/{p}/{s.start:020d}-{s.end:020d}"
        pruned = s.end <= retained[0].pending[(t, p)]
        last_pruned = pruned and s.end == max(x.end for tt, pp, x in before if (tt, pp) == (t, p)
                                               and x.end <= retained[0].pending[(t, p)])
        assert storage.exists(f"{name}.parquet") == (not pruned), name
        assert storage.exists(f"{name}.json") == (not pruned or last_pruned), name
    assert report.side_outputs_kept == len({(t, p) for t, p, s in before if s.end <= retained[0].pending[(t, p)]})
    # A second prune (say after a later segment became prunable) finishes the same way: idempotent.
    again = prune_archive(storage, config.name, retained_checkpoints=retained, horizon_seconds=0, now=NOW)
    assert again.segments == 0 and again.changelog_files == 0
