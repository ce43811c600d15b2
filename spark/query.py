"""Read tables at one consistent watermark.

"At W" reads every table at its ``wm_<W>`` tag. "At a TSO or a wall time" resolves to the
greatest published W <= it (TiDB TSO = physical ms << 18 | logical). Only published
watermarks are readable: publishing happens after every table carries the tag.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Union

import orjson
import pyarrow as pa

from cdc_codecs import TidelakeError
from spark import catalog as cat
from spark import layout
from spark.commit import DROPPED
from spark.config import PipelineConfig
from spark.schema_map import METADATA_COLUMNS
from spark.storage import Storage, open_storage
from spark.watermark import tag_name

At = Union[str, int, dt.datetime]


class NoSuchWatermark(TidelakeError):
    """Nothing is published at or before the requested point."""


def published_watermarks(config: PipelineConfig, storage: Storage | None = None) -> list[int]:
    storage = storage or open_storage(config.storage)
    out = []
    for path in storage.list(f"{layout.pipeline_root(config.name)}/published"):
        name = path.rsplit("/", 1)[-1]
        if name.endswith(".json") and name[:-5].isdigit():
            out.append(int(name[:-5]))
    return sorted(out)


def published(config: PipelineConfig, watermark: int, storage: Storage | None = None) -> dict[str, Any]:
    storage = storage or open_storage(config.storage)
    return orjson.loads(storage.read(f"{layout.pipeline_root(config.name)}/published/{watermark:020d}.json"))


def to_tso(at: dt.datetime) -> int:
    """The greatest TSO of a wall-clock instant (all logical values of its millisecond)."""
    return (int(at.timestamp() * 1000) << 18) | ((1 << 18) - 1)


def resolve_watermark(config: PipelineConfig, at: At = "latest", storage: Storage | None = None) -> int:
    """The published W to read for ``at``: "latest", a TSO (int) or a datetime."""
    marks = published_watermarks(config, storage)
    if isinstance(at, str) and at != "latest":
        if at.isdigit():
            at = int(at)
        else:
            at = dt.datetime.fromisoformat(at.replace("Z", "+00:00"))
    if isinstance(at, dt.datetime):
        if at.tzinfo is None:
            raise NoSuchWatermark(f"{at.isoformat()} has no time zone; give it in UTC, e.g. 2024-01-01T00:00:00Z")
        at = to_tso(at)
    candidates = marks if at == "latest" else [w for w in marks if w <= at]  # type: ignore[operator]
    if not candidates:
        first = f"; the first is {marks[0]} ({dt.datetime.fromtimestamp((marks[0] >> 18) / 1000, dt.timezone.utc).isoformat()})" if marks else ""
        raise NoSuchWatermark(f"pipeline {config.name}: no watermark is published at or before {at}{first}")
    return candidates[-1]


def read_table(config: PipelineConfig, database: str, table: str, watermark: int, *, metadata: bool = False, catalog: Any = None) -> pa.Table:
    catalog = catalog or cat.open_catalog(config)
    t = cat.load_table(catalog, config, database, table)
    snapshot = t.snapshot_by_name(tag_name(watermark)) if t is not None else None
    if snapshot is None:
        raise NoSuchWatermark(f"{database}.{table} has no tag {tag_name(watermark)}")
    data = t.scan(snapshot_id=snapshot.snapshot_id).to_arrow()
    if not metadata:
        data = data.drop_columns([c for c in METADATA_COLUMNS if c in data.column_names])
    return data


def read_pipeline(config: PipelineConfig, at: At = "latest", *, metadata: bool = False) -> tuple[int, dict[tuple[str, str], pa.Table]]:
    """Every table of the pipeline at one consistent W: (W, {(database, table): rows})."""
    storage = open_storage(config.storage)
    w = resolve_watermark(config, at, storage)
    catalog = cat.open_catalog(config)
    out = {}
    for t in cat.pipeline_tables(catalog, config):
        snapshot = t.snapshot_by_name(tag_name(w))
        if snapshot is None:
            continue  # created after W
        dropped = t.properties.get(DROPPED)
        if dropped is not None and int(dropped) <= w:
            continue
        data = t.scan(snapshot_id=snapshot.snapshot_id).to_arrow()
        if not metadata:
            data = data.drop_columns([c for c in METADATA_COLUMNS if c in data.column_names])
        out[cat.upstream_name(t)] = data
    return w, out
