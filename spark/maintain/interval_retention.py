"""Interval-record retention: the archive's per-interval records no retained W can need any more.

Every run leaves records of its interval -- its manifest, offset plan, checkpoint, lake tables, ``land.json`` /
``apply.json`` / ``apply.confirmed.json`` -- and every W a published record (and, once retired, a
marker); maintenance leaves a report. Archive retention (``archive_retention``) bounds the segments;
this bounds the records. Only with ``archive_horizon`` (without it the archive is kept whole, for
``tidelake repair`` and rebuilds from the first interval), after the segments were pruned.

What reads them, and why the pruned ones are not needed:

- The run walk (``spark.commit.run.PipelineRun``) reads the chain of manifests and, from the newest
  back, checkpoints until the newest interval every table is past; every table is at or past the
  oldest retained W (an isolated table's held W is retained), so the walk never goes before the
  interval that first published the oldest retained W.
- The change feed between two retained Ws (``spark.query.changes_log.open_window``) reads W1's
  published record, the manifests and checkpoints from the interval named in it (the one that
  first published W1) to W2's.
- A rerun of an interval reads its manifest, its checkpoint and the one before, and W's published
  record or retired marker; the Airflow publish task reads its ``apply.json``.

So the *prunable prefix* is the longest run of oldest intervals that all end before the one named
in the oldest retained W's published record, ended more than ``archive_horizon`` ago, and whose raw
segments all lie below the recorded floors (archive retention deleted them: nothing can read them
again). Their manifests, plans, checkpoints and reports go, and so do the published records and
retired markers of Ws below the first kept checkpoint's W (all retired: below the oldest retained),
side outputs below the floors but the last of each partition and decoder version (the one archive
retention keeps for the decoder state), and maintenance reports older than the horizon (the newest
is kept). ``tidelake watermarks`` counts the pruned Ws from ``pruned.json``.

Crash and concurrency safety: maintenance holds the pipeline's lease (``check`` before each batch of
deletes). ``pruned.json``'s ``intervals`` -- the end of the last pruned interval and the first W
kept -- is written *before* anything is deleted; from then on landing, applying, confirming and
announcing such an interval fail with ``IntervalPruned`` (``spark.archive.floors``), and so does a
walk that would need one. Each interval's manifest goes last, a W's published record before its
retired marker (a W is never published-and-not-retired without tags). A crash leaves a subset; the
next run lists what is left below the recorded end and finishes it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import orjson

from spark.archive import layout
from spark.archive.floors import pruned_doc, pruned_floors, pruned_intervals
from spark.archive.manifest import list_manifests, read_manifest
from spark.archive.storage import Storage
from spark.commit.published import published_path, published_watermarks, read_published, retired_watermarks
from spark.maintain.archive_files import archive_file

INTERVAL_DIRS = ("manifests", "plans", "checkpoints", "lake-tables")  # <pipeline>/<dir>/<interval>.json


@dataclass(frozen=True)
class IntervalReport:
    pipeline: str
    dry_run: bool
    before: str | None = None  # intervals ending at or before this instant have no records (None: none pruned)
    first_watermark: int | None = None  # the first W whose records are kept
    intervals: int = 0  # intervals whose manifest this run deleted
    records: dict[str, int] = field(default_factory=dict)  # kind -> objects deleted
    paths: tuple[str, ...] = field(default=(), repr=False)  # dry run: what would be deleted

    @property
    def objects(self) -> int:
        return sum(self.records.values())


def _interval_of(name: str) -> tuple[dt.datetime, dt.datetime] | None:
    """``<start>_<end>`` (a file or directory name, ``.json`` or not) as instants."""
    return layout.parse_manifest_name(name if name.endswith(".json") else f"{name}.json")


def prunable_prefix(storage: Storage, pipeline: str, retained: Sequence[int], cutoff: dt.datetime) -> list[tuple]:
    """The oldest intervals (start, end, manifest path, checkpoint W or None) whose records no retained W
    needs: before the interval that first published the oldest retained W, ended at or before ``cutoff``,
    every raw segment below the recorded floors."""
    if not retained:
        return []
    doc = read_published(storage, pipeline, min(retained))
    chain = list_manifests(storage, pipeline)
    names = [f"{layout.instant(s)}_{layout.instant(e)}" for s, e, _ in chain]
    if doc is None or doc.get("interval") not in names:
        return []
    first_needed = names.index(doc["interval"])
    floors = pruned_floors(storage, pipeline)
    out = []
    for start, end, path in chain[:first_needed]:
        if end > cutoff:
            break
        manifest = read_manifest(storage, path)
        if any(s.end > floors.get((p.topic, p.partition), 0) for p in manifest.partitions for s in p.segments):
            break  # segments a replay may still read: the interval stays, and every later one
        out.append((start, end, path))
    return out


def prune_interval_records(
    storage: Storage, pipeline: str, *, retained: Sequence[int], horizon_seconds: float, now: dt.datetime,
    dry_run: bool = False, check: Callable[[], None] = lambda: None,
) -> IntervalReport:
    """Delete the records of the prunable prefix (module docstring), and finish an earlier prune.

    Args:
        retained: every retained W (the latest and the Ws isolated tables are held at included).
        check: called before each batch of deletes (the lease's ``check``).
    """
    root = layout.pipeline_root(pipeline)
    cutoff = now - dt.timedelta(seconds=horizon_seconds)
    recorded = pruned_intervals(storage, pipeline)
    prefix = prunable_prefix(storage, pipeline, retained, cutoff)
    before = max([*([layout.parse_instant_name(recorded["before"])] if recorded else []), *(end for _, end, _ in prefix)],
                 default=None)
    if before is None:
        return IntervalReport(pipeline, dry_run)
    # The first W kept: the W of the first checkpoint after the pruned intervals (every W below it is retired).
    first_w = recorded["watermark"] if recorded else 0
    for s, e, _ in list_manifests(storage, pipeline):
        if e > before and storage.exists(p := f"{root}/checkpoints/{layout.instant(s)}_{layout.instant(e)}.json"):
            first_w = max(first_w, orjson.loads(storage.read(p))["watermark"])
            break
    first_w = min(first_w, min(retained))

    doomed: dict[str, list[str]] = {}
    for kind in INTERVAL_DIRS:
        for path in storage.list(f"{root}/{kind}"):
            parsed = _interval_of(path.rsplit("/", 1)[-1])
            if parsed is not None and parsed[1] <= before:
                doomed.setdefault(kind, []).append(path)
    for path in storage.list(f"{root}/reports"):
        step = path[len(root) + len("/reports/"):].split("/")
        parsed = _interval_of(step[0]) if len(step) == 2 else None
        if parsed is not None and parsed[1] <= before:
            doomed.setdefault("reports", []).append(path)
    retired = set(retired_watermarks(storage, pipeline))
    gone = [w for w in published_watermarks(storage, pipeline) if w < first_w and w in retired]
    doomed["published"] = [published_path(pipeline, w) for w in gone]
    doomed["retired"] = [layout.retired_path(pipeline, w) for w in sorted(retired) if w < first_w]
    doomed["side outputs"] = _side_outputs_below_floors(storage, pipeline)
    reports = sorted(p for p in storage.list(f"{root}/reports/maintenance") if p.endswith(".json"))
    doomed["maintenance reports"] = [p for p in reports[:-1]
                                     if _report_time(p) is not None and _report_time(p) <= cutoff]  # type: ignore[operator]
    doomed = {k: v for k, v in doomed.items() if v}
    counts = {k: len(v) for k, v in doomed.items()}
    pruned_now = sum(1 for p in doomed.get("manifests", ()))
    report = IntervalReport(pipeline, dry_run, layout.instant(before), first_w, pruned_now, counts,
                            tuple(f"{storage.url}/{p}" for v in doomed.values() for p in v) if dry_run else ())
    if dry_run or not doomed:
        return report
    check()
    doc = pruned_doc(storage, pipeline)
    earlier = doc.get("intervals") or {}
    doc["intervals"] = {"before": layout.instant(before), "watermark": first_w,
                        "retired_watermarks_pruned": earlier.get("retired_watermarks_pruned", 0) + len(gone),
                        "first_pruned_watermark": earlier.get("first_pruned_watermark") or (min(gone) if gone else None),
                        "last_pruned_watermark": max([*gone, earlier.get("last_pruned_watermark") or 0]) or None}
    storage.write(layout.pruned_path(pipeline), orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    # Records first, each interval's manifest last; a W's published record before its retired marker.
    for kind in ("reports", "plans", "lake-tables", "checkpoints", "manifests", "published", "retired", "side outputs",
                 "maintenance reports"):
        check()
        for path in doomed.get(kind, ()):
            storage.delete(path)
    return report


def _report_time(path: str) -> dt.datetime | None:
    try:
        return layout.parse_instant_name(path.rsplit("/", 1)[-1].removesuffix(".json"))
    except ValueError:
        return None


def _side_outputs_below_floors(storage: Storage, pipeline: str) -> list[str]:
    """Change-log files of segments archive retention pruned that no manifest lists any more: every one
    ending at or below its partition's recorded floor, but the last side output of each partition and
    decoder version (the decoder state the first kept segment resumes from)."""
    floors = pruned_floors(storage, pipeline)
    below = []
    for f in storage.list_files(layout.changelog_root(pipeline)):
        what = archive_file(pipeline, f.path)
        if what is not None and what.end <= floors.get((what.topic, what.partition), 0):
            below.append((what, f.path))
    last: dict[tuple, int] = {}
    for what, _ in below:
        if what.kind == "side-output":
            k = (what.decoder, what.topic, what.partition)
            last[k] = max(last.get(k, 0), what.end)
    return sorted(path for what, path in below
                  if not (what.kind == "side-output" and what.end == last[(what.decoder, what.topic, what.partition)]))
