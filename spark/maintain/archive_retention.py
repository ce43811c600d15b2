"""Archive retention: delete raw and change-log segments no retained watermark can need.

A replay from a retained W starts at that W's checkpoint's *pending offsets* (the first offset
per partition holding a change above W): ``spark.commit.apply`` decodes a partition from there, with
the checkpoint's announced schemas, and the derived clock of protocols without commitTs is
lifted to W + 1, so nothing before the pending offset is read or needed. Per partition the
*floor* is the least pending offset over the retained checkpoints; a segment whose offsets end
at or below the floor, in an interval that ended before ``now - horizon``, can go -- with its
change-log Parquet files in every decoder version. The side output (``.json``) of the last
pruned segment of each partition and decoder version is kept (a few KB): it carries that
version's decoder state into the first kept segment, so the change log stays continuous.

Manifests and checkpoints are kept (they are small, and the run walk reads them). The end of
the pruned offsets per partition is recorded in ``<pipeline>/pruned.json`` *before* anything is deleted, so a replay that would
need a pruned range fails with ``ArchivePruned`` naming it (``require_replayable``), and a
prune that crashed half-way is finished by the next one.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field

import orjson

from spark.archive import layout
from spark.maintain.archive_files import archive_file
from spark.archive.manifest import list_manifests, read_manifest
from spark.archive.floors import pruned_doc, pruned_floors
from spark.archive.storage import Storage

PKey = tuple[str, int]


@dataclass(frozen=True)
class ArchiveReport:
    pipeline: str
    dry_run: bool
    floors: dict[str, int]  # "topic/partition" -> first offset any retained W can replay from
    segments: int = 0
    segment_bytes: int = 0
    changelog_files: int = 0
    changelog_bytes: int = 0
    side_outputs_kept: int = 0
    paths: tuple[str, ...] = field(default=(), repr=False)  # dry run: what would be deleted


def _ptext(key: PKey) -> str:
    return f"{key[0]}/{key[1]}"


def replay_floors(retained_checkpoints: Sequence, partitions: Sequence[PKey]) -> dict[PKey, int]:
    """Per partition, the least pending offset over the retained checkpoints (0: some retained
    checkpoint predates the partition, or none is retained -- keep everything)."""
    floors = {}
    for key in partitions:
        pending = [cp.pending.get(key) for cp in retained_checkpoints]
        floors[key] = 0 if not pending or None in pending else min(pending)  # type: ignore[type-var]
    return floors


def prune_archive(
    storage: Storage, pipeline: str, *, retained_checkpoints: Sequence, horizon_seconds: float, now: dt.datetime,
    dry_run: bool = False,
) -> ArchiveReport:
    """Delete the raw and change-log segments below every retained checkpoint's pending offsets
    in intervals that ended more than ``horizon_seconds`` before ``now``.

    Args:
        retained_checkpoints: the ``spark.archive.checkpoint.Checkpoint`` of every retained W (the latest included).
    """
    manifests = [read_manifest(storage, path) for _, _, path in list_manifests(storage, pipeline)]
    partitions = sorted({(p.topic, p.partition) for m in manifests for p in m.partitions})
    floors = replay_floors(retained_checkpoints, partitions)
    cutoff = now - dt.timedelta(seconds=horizon_seconds)
    pruned = {(p.topic, p.partition, s.start, s.end): s.path for m in manifests if m.interval_end <= cutoff
              for p in m.partitions for s in p.segments if s.end <= floors[(p.topic, p.partition)]}
    sizes = {f.path: f.size for f in storage.list_files(layout.segments_dir(pipeline))}
    segments = [path for path in pruned.values() if path in sizes]
    changelog = storage.list_files(layout.changelog_root(pipeline))
    last_end: dict[tuple[str | None, str, int], int] = {}
    for f in changelog:
        what = archive_file(pipeline, f.path)
        if what is not None and what.range_key in pruned:
            k = (what.decoder, what.topic, what.partition)
            last_end[k] = max(last_end.get(k, 0), what.end)
    doomed, kept_side = [], 0
    for f in changelog:
        what = archive_file(pipeline, f.path)
        if what is None or what.range_key not in pruned:
            continue
        if what.kind == "side-output" and what.end == last_end[(what.decoder, what.topic, what.partition)]:
            kept_side += 1
            continue
        doomed.append(f)
    report = ArchiveReport(
        pipeline, dry_run, {_ptext(k): v for k, v in floors.items()}, len(segments), sum(sizes[p] for p in segments),
        len(doomed), sum(f.size for f in doomed), kept_side,
        tuple(f"{storage.url}/{p}" for p in [*segments, *(f.path for f in doomed)]) if dry_run else (),
    )
    if dry_run or not (segments or doomed):
        return report
    recorded = pruned_floors(storage, pipeline)  # raised to the end of what this prune deletes
    for topic, partition, _, end in pruned:
        recorded[(topic, partition)] = max(recorded.get((topic, partition), 0), end)
    doc = pruned_doc(storage, pipeline)  # the other keys (the pruned intervals) stay
    doc["floors"] = {_ptext(k): v for k, v in sorted(recorded.items())}
    storage.write(layout.pruned_path(pipeline), orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    for path in [*segments, *(f.path for f in doomed)]:
        storage.delete(path)
    return report
