"""What archive retention pruned: per partition, the first offset still kept (``<pipeline>/pruned.json``).

``spark.maintain.archive_retention`` records the floors before it deletes anything; a run or the
change feed that would replay from below one fails with ``ArchivePruned`` naming it
(``require_replayable``) instead of reading a hole.
"""

from __future__ import annotations

from collections.abc import Mapping

import orjson

from cdc_codecs import TidelakeError
from spark.archive import layout
from spark.archive.storage import Storage

PKey = tuple[str, int]


class ArchivePruned(TidelakeError):
    """A replay needs raw segments that archive retention deleted."""


def pruned_floors(storage: Storage, pipeline: str) -> dict[PKey, int]:
    """The floors recorded by earlier prunes: below them, segments may be gone."""
    path = layout.pruned_path(pipeline)
    if not storage.exists(path):
        return {}
    doc = orjson.loads(storage.read(path))
    return {(k.rpartition("/")[0], int(k.rpartition("/")[2])): v for k, v in doc["floors"].items()}


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
