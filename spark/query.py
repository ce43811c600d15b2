"""Read tables at one consistent watermark.

"At W" reads every table at its ``wm_<W>`` tag. "At a TSO or a wall time" resolves to the
greatest published W <= it (TiDB TSO = physical ms << 18 | logical). Only published
watermarks are readable: publishing happens after every table carries the tag.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Union

import pyarrow as pa

from cdc_codecs import TidelakeError
from spark import catalog as cat
from spark import publish
from spark.config import PipelineConfig
from spark.schema_map import METADATA_COLUMNS
from spark.storage import Storage, open_storage
from spark.watermark import tag_name

At = Union[str, int, dt.datetime]


class NoSuchWatermark(TidelakeError):
    """Nothing is published at or before the requested point."""


def published_watermarks(config: PipelineConfig, storage: Storage | None = None) -> list[int]:
    return publish.published_watermarks(storage or open_storage(config.storage), config.name)


def published(config: PipelineConfig, watermark: int, storage: Storage | None = None) -> dict[str, Any]:
    doc = publish.read_published(storage or open_storage(config.storage), config.name, watermark)
    if doc is None:
        raise NoSuchWatermark(f"pipeline {config.name}: watermark {watermark} is not published")
    return doc


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


def _view(config: PipelineConfig, watermark: int, catalog: Any, storage: Storage) -> list[tuple[publish.PublishedTable, Any]]:
    """The tables of the consistent view at W, with their names at W, found by Iceberg UUID."""
    by_uuid = {str(t.metadata.table_uuid): t for t in cat.pipeline_tables(catalog, config)}
    out = []
    for entry in publish.published_tables(published(config, watermark, storage)):
        table = by_uuid.get(entry.uuid)
        if table is None or table.snapshot_by_name(tag_name(watermark)) is None:
            raise NoSuchWatermark(f"{entry.database}.{entry.table} at {watermark}: its Iceberg table or tag "
                                  f"{tag_name(watermark)} is gone")
        out.append((entry, table))
    return out


def _scan(table: Any, watermark: int, metadata: bool) -> pa.Table:
    data = table.scan(snapshot_id=table.snapshot_by_name(tag_name(watermark)).snapshot_id).to_arrow()
    if not metadata:
        data = data.drop_columns([c for c in METADATA_COLUMNS if c in data.column_names])
    return data


def read_table(config: PipelineConfig, database: str, table: str, watermark: int, *, metadata: bool = False, catalog: Any = None) -> pa.Table:
    """One table at W, by its upstream name at W."""
    storage = open_storage(config.storage)
    for entry, t in _view(config, watermark, catalog or cat.open_catalog(config), storage):
        if (entry.database, entry.table) == (database, table):
            return _scan(t, watermark, metadata)
    raise NoSuchWatermark(f"{database}.{table} is not a table of pipeline {config.name} at watermark {watermark}")


def read_pipeline(config: PipelineConfig, at: At = "latest", *, metadata: bool = False) -> tuple[int, dict[tuple[str, str], pa.Table]]:
    """Every table of the pipeline at one consistent W: (W, {(database, table): rows})."""
    storage = open_storage(config.storage)
    w = resolve_watermark(config, at, storage)
    return w, {(e.database, e.table): _scan(t, w, metadata) for e, t in _view(config, w, cat.open_catalog(config), storage)}
