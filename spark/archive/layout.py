"""Every path in the archive, built here and nowhere else.

    <root>/<pipeline>/manifests/<interval-start>_<interval-end>.json    (20240101T000000.000000Z_...)
    <root>/<pipeline>/segments/<topic>/<partition>/<first-offset>-<end-offset>.parquet
    <root>/<pipeline>/changelog/<decoder-version>/<topic>/<partition>/<first-offset>-<end-offset>.{parquet,json}
    <root>/<pipeline>/reports/<interval-start>_<interval-end>/land.json
    <root>/<pipeline>/reports/maintenance/<time>.json                    (one per maintenance run)
    <root>/<pipeline>/retired/<W>.json                                   (W retired by retention)
    <root>/<pipeline>/maintenance/expired-files/<table uuid>/<time>.json (files of expired snapshots, to delete)
    <root>/<pipeline>/pruned.json      (archive retention: offsets below which segments are gone)

Names from upstream (topics, and later databases and tables) are data: ``encode_name``
percent-encodes anything outside ``[A-Za-z0-9_-]`` (dots included, so ``.`` and ``..``
can never be a path step), which keeps paths safe and reversible.
"""

from __future__ import annotations

import datetime as dt
import re
from urllib.parse import quote, unquote

UTC = dt.timezone.utc
_INSTANT = "%Y%m%dT%H%M%S"
_MANIFEST_RE = re.compile(r"^(\d{8}T\d{6}\.\d{6}Z)_(\d{8}T\d{6}\.\d{6}Z)\.json$")
OFFSET_DIGITS = 20


def encode_name(name: str) -> str:
    if not name:
        return "%00empty"
    return quote(name, safe="-_").replace(".", "%2E").replace("~", "%7E")


def decode_name(encoded: str) -> str:
    return "" if encoded == "%00empty" else unquote(encoded)


def instant(value: dt.datetime) -> str:
    """A UTC instant as a path step; fixed width, so names sort in time order."""
    value = value.astimezone(UTC)
    return f"{value.strftime(_INSTANT)}.{value.microsecond:06d}Z"


def parse_instant_name(text: str) -> dt.datetime:
    base, _, frac = text.rstrip("Z").partition(".")
    return dt.datetime.strptime(base, _INSTANT).replace(tzinfo=UTC, microsecond=int(frac or 0))


def pipeline_root(pipeline: str) -> str:
    return encode_name(pipeline)


def manifests_dir(pipeline: str) -> str:
    return f"{pipeline_root(pipeline)}/manifests"


def manifest_path(pipeline: str, start: dt.datetime, end: dt.datetime) -> str:
    return f"{manifests_dir(pipeline)}/{instant(start)}_{instant(end)}.json"


def parse_manifest_name(path: str) -> tuple[dt.datetime, dt.datetime] | None:
    m = _MANIFEST_RE.match(path.rsplit("/", 1)[-1])
    if not m:
        return None
    return parse_instant_name(m.group(1)), parse_instant_name(m.group(2))


def segment_path(pipeline: str, topic: str, partition: int, start: int, end: int) -> str:
    return (
        f"{pipeline_root(pipeline)}/segments/{encode_name(topic)}/{partition}/{_offsets(start, end)}.parquet"
    )


def _offsets(start: int, end: int) -> str:
    return f"{start:0{OFFSET_DIGITS}d}-{end:0{OFFSET_DIGITS}d}"


def changelog_dir(pipeline: str, version: str, topic: str, partition: int) -> str:
    """Where one partition's change log lives for one decoder version (``<protocol>-<n>``)."""
    return f"{pipeline_root(pipeline)}/changelog/{encode_name(version)}/{encode_name(topic)}/{partition}"


def changelog_paths(pipeline: str, version: str, topic: str, partition: int, start: int, end: int) -> tuple[str, str]:
    """The change-log Parquet and the side output JSON of the raw segment ``[start, end)``."""
    base = f"{changelog_dir(pipeline, version, topic, partition)}/{_offsets(start, end)}"
    return f"{base}.parquet", f"{base}.json"


def lake_tables_path(pipeline: str, start: dt.datetime, end: dt.datetime) -> str:
    """The lake's tables when the interval's first run started (``spark.commit.run.IntervalRun.lake_tables``)."""
    return f"{pipeline_root(pipeline)}/lake-tables/{instant(start)}_{instant(end)}.json"


def net_change_dir(pipeline: str) -> str:
    """Where runs leave their folded net change between the fold and the rewrite (removed by the run)."""
    return f"{pipeline_root(pipeline)}/net"


def net_change_path(pipeline: str, run: str, index: int) -> str:
    """One fold slice's net change in one run (``run``: a fresh id per fold)."""
    return f"{net_change_dir(pipeline)}/{encode_name(run)}/{index:05d}.parquet"


def report_path(pipeline: str, start: dt.datetime, end: dt.datetime, step: str) -> str:
    return f"{pipeline_root(pipeline)}/reports/{instant(start)}_{instant(end)}/{step}.json"


def maintenance_report_path(pipeline: str, at: dt.datetime) -> str:
    return f"{pipeline_root(pipeline)}/reports/maintenance/{instant(at)}.json"


def retired_dir(pipeline: str) -> str:
    return f"{pipeline_root(pipeline)}/retired"


def retired_path(pipeline: str, watermark: int) -> str:
    return f"{retired_dir(pipeline)}/{watermark:020d}.json"


def expired_files_dir(pipeline: str, table_uuid: str) -> str:
    return f"{pipeline_root(pipeline)}/maintenance/expired-files/{encode_name(table_uuid)}"


def expired_files_path(pipeline: str, table_uuid: str, at: dt.datetime) -> str:
    return f"{expired_files_dir(pipeline, table_uuid)}/{instant(at)}.json"


def segments_dir(pipeline: str) -> str:
    return f"{pipeline_root(pipeline)}/segments"


def changelog_root(pipeline: str) -> str:
    return f"{pipeline_root(pipeline)}/changelog"


def pruned_path(pipeline: str) -> str:
    return f"{pipeline_root(pipeline)}/pruned.json"
