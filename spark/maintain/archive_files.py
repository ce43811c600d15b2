"""What a file of the archive is, read from its path: the one place maintenance matches archive paths.

    <pipeline>/segments/<topic>/<partition>/<start>-<end>.parquet                    raw segment
    <pipeline>/changelog/<decoder-version>/<topic>/<partition>/<start>-<end>.parquet  change log
    <pipeline>/changelog/<decoder-version>/<topic>/<partition>/<start>-<end>.json     its side output

A change-log file covers the raw segment with the same ``<start>-<end>`` offsets.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from spark.archive import layout

_RANGE = re.compile(r"^(\d+)-(\d+)\.(parquet|json)$")


@dataclass(frozen=True)
class ArchiveFile:
    kind: str  # "segment", "changelog" or "side-output"
    topic: str
    partition: int
    start: int
    end: int
    decoder: str | None = None  # change-log files: the decoder version

    @property
    def range_key(self) -> tuple[str, int, int, int]:
        return self.topic, self.partition, self.start, self.end


def archive_file(pipeline: str, path: str) -> ArchiveFile | None:
    """``path`` (relative to the storage root) as a segment or change-log file of ``pipeline``, else None."""
    for base, kind in ((layout.segments_dir(pipeline), "segment"), (layout.changelog_root(pipeline), "changelog")):
        if not path.startswith(base + "/"):
            continue
        steps = path[len(base) + 1:].split("/")
        decoder = None
        if kind == "changelog":
            if len(steps) != 4:
                return None
            decoder, steps = layout.decode_name(steps[0]), steps[1:]
        if len(steps) != 3 or not steps[1].isdigit():
            return None
        m = _RANGE.match(steps[2])
        if m is None or (kind == "segment" and m.group(3) != "parquet"):
            return None
        if kind == "changelog" and m.group(3) == "json":
            kind = "side-output"
        return ArchiveFile(kind, layout.decode_name(steps[0]), int(steps[1]), int(m.group(1)), int(m.group(2)), decoder)
    return None
