"""What archive retention pruned (``<pipeline>/pruned.json``): per partition, the first offset still
kept; and the intervals whose records went.

``spark.maintain.archive_retention`` records the floors before it deletes anything; a run or the
change feed that would replay from below one fails with ``ArchivePruned`` naming it
(``require_replayable``) instead of reading a hole. ``spark.maintain.interval_retention`` records
``intervals`` (the end of the last interval whose manifest, checkpoint, plan and reports it deletes,
and the first W kept) before it deletes them: landing, applying, confirming or announcing an
interval ending at or before it fails with ``IntervalPruned`` (``require_interval_kept``), and a
run whose walk would need such an interval fails the same way.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping

import orjson

from cdc_codecs import TidelakeError
from spark.archive import layout
from spark.archive.storage import Storage

PKey = tuple[str, int]


class ArchivePruned(TidelakeError):
    """A replay needs raw segments that archive retention deleted."""


class IntervalPruned(ArchivePruned):
    """An interval older than the pipeline's retained history: maintenance deleted its records."""


def pruned_doc(storage: Storage, pipeline: str) -> dict:
    """``pruned.json`` as written (``{}``: nothing was pruned)."""
    path = layout.pruned_path(pipeline)
    return orjson.loads(storage.read(path)) if storage.exists(path) else {}


def pruned_intervals(storage: Storage, pipeline: str) -> dict | None:
    """``{"before": <instant>, "watermark": W, ...}``: intervals ending at or before ``before`` have no
    records left (their Ws are below ``watermark``, the first W whose records are kept); None: none pruned."""
    return pruned_doc(storage, pipeline).get("intervals")


def _interval_text(start: dt.datetime, end: dt.datetime) -> str:
    return f"{layout.instant(start)}..{layout.instant(end)}"


def require_interval_kept(storage: Storage, pipeline: str, start: dt.datetime, end: dt.datetime,
                          doing: str = "run") -> None:
    """Raise ``IntervalPruned`` if the interval ``[start, end)`` ends at or before the pruned intervals."""
    pruned = pruned_intervals(storage, pipeline)
    if pruned is not None and end <= layout.parse_instant_name(pruned["before"]):
        raise IntervalPruned(
            f"pipeline {pipeline}: cannot {doing} interval {_interval_text(start, end)}: it is older than the pipeline's "
            f"retained history -- maintenance (archive retention) deleted the records of every interval ending at or "
            f"before {pruned['before']} (their watermarks were retired, the first kept is {pruned['watermark']}); "
            "nothing is left to land, apply or confirm there, and a rerun would change nothing"
        )


def pruned_floors(storage: Storage, pipeline: str) -> dict[PKey, int]:
    """The floors recorded by earlier prunes: below them, segments may be gone."""
    doc = pruned_doc(storage, pipeline)
    return {(k.rpartition("/")[0], int(k.rpartition("/")[2])): v for k, v in doc.get("floors", {}).items()}


def require_replayable(storage: Storage, pipeline: str, starts: Mapping[PKey, int]) -> None:
    """Raise ``ArchivePruned`` if a replay from ``starts`` (per partition) needs pruned segments."""
    floors = pruned_floors(storage, pipeline)
    below = {k: (s, floors[k]) for k, s in starts.items() if s < floors.get(k, 0)}
    if below:
        k, (s, f) = min(below.items())
        raise ArchivePruned(
            f"pipeline {pipeline}: replaying partition {k[0]}/{k[1]} from offset {s} needs raw segments that archive "
            f"retention deleted (kept from offset {f}); only watermarks whose checkpoints were retained can be "
            f"replayed from ({len(below)} partition(s) affected)"
        )
