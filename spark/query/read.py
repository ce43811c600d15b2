"""Read tables at one consistent watermark.

"At W" reads every table at its ``wm_<W>`` tag. "At a TSO or a wall time" resolves to the
greatest published W <= it (TiDB TSO = physical ms << 18 | logical). Only published
watermarks are readable: publishing happens after every table carries the tag. A W the
retention policy retired is gone: reading at it (or at a time whose W it is) fails with
``RetiredWatermark`` naming the nearest retained Ws. A table W's record lists as isolated
(``on_table_error = "isolate"``, ``spark.commit.isolation``) is held at an earlier W: reading it at W
fails with ``IsolatedTable`` naming that W and why; every other table reads normally.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any, Union

import pyarrow as pa
from pyiceberg.expressions import (
    AlwaysTrue,
    BooleanExpression,
)
from pyiceberg.schema import Schema

from cdc_codecs import TidelakeError
from spark.archive.floors import pruned_intervals
from spark.tables import catalog as cat
from spark.commit import published as publish
from spark.commit.isolation import held_phrase
from spark.config import PipelineConfig
from spark.tables.schema_map import metadata_columns
from spark.archive.storage import Storage, open_storage
from spark.core.watermark import tag_name, watermark_time

At = Union[str, int, dt.datetime]


class NoSuchWatermark(TidelakeError):
    """Nothing is published at or before the requested point."""


class RetiredWatermark(NoSuchWatermark):
    """The W was published, then retired by the pipeline's retention policy."""


class IsolatedTable(NoSuchWatermark):
    """The table is isolated at this W: held at an earlier W (its last good one) for an error."""


def isolated_error(config: PipelineConfig, watermark: int, entry: dict[str, Any]) -> IsolatedTable:
    held = entry["held_at"]
    if entry.get("new_name"):  # not published under this name at any W: nothing earlier to read
        where, at = held_phrase(entry), "it has no earlier W under this name"
    else:
        where, at = f"held at W {_w_text(held) if held else 0} since interval {entry['since']}", (
            f"read it --at {held}" if held else "it has no earlier W")
    why = f"{entry['error']}" + (f" on {entry['ddl']!r} (commitTs {entry.get('commit_ts')})" if entry.get("ddl") else "")
    fix = (f"it stays held: {entry['stays']}" if entry.get("stays") else
           "or fix it (a tidelake version that handles it, then the next run or `tidelake repair` replays it to W)")
    return IsolatedTable(
        f"pipeline {config.name}: {entry['database']}.{entry['table']} is isolated at watermark {watermark}: it is {where}, "
        f"for {why}: {entry['message']}. The pipeline's other tables are at W; {at}, {fix}"
    )


def published_watermarks(config: PipelineConfig, storage: Storage | None = None) -> list[int]:
    """Every published W, retired ones included, ascending."""
    return publish.published_watermarks(storage or open_storage(config.storage), config.name)


def retired_watermarks(config: PipelineConfig, storage: Storage | None = None) -> list[int]:
    return publish.retired_watermarks(storage or open_storage(config.storage), config.name)


def _w_text(w: int) -> str:
    return f"{w} ({watermark_time(w)})"


def retired_error(config: PipelineConfig, watermark: int, retained: list[int], asked: Any = None) -> RetiredWatermark:
    """The error for reading at a retired W: it names the nearest retained W below and above."""
    below = max((w for w in retained if w < watermark), default=None)
    above = min((w for w in retained if w > watermark), default=None)
    near = [f"{label} {_w_text(w)}" for label, w in (("before it", below), ("after it", above)) if w is not None]
    what = f"watermark {_w_text(watermark)}" if asked is None else f"{asked} resolves to watermark {_w_text(watermark)}, which"
    return RetiredWatermark(
        f"pipeline {config.name}: {what} is retired by the retention policy ([maintenance] keep_*), its tags are gone; "
        f"the nearest retained: {', '.join(near) or 'none'}"
    )


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
    asked = at.isoformat().replace("+00:00", "Z") if isinstance(at, dt.datetime) else at  # errors echo what the user gave: a time stays a time
    if isinstance(at, str) and at != "latest":
        if at.isdigit():
            at = int(at)
        else:
            at = dt.datetime.fromisoformat(at.replace("Z", "+00:00"))
    if isinstance(at, dt.datetime):
        if at.tzinfo is None:
            raise NoSuchWatermark(f"{at.isoformat()} has no time zone; give it in UTC, e.g. 2024-01-01T00:00:00Z")
        at = to_tso(at)
    storage = storage or open_storage(config.storage)
    retired = set(retired_watermarks(config, storage))
    retained = [w for w in marks if w not in retired]
    candidates = marks if at == "latest" else [w for w in marks if w <= at]  # type: ignore[operator]
    if not candidates:
        first = f"; the first retained is {_w_text(retained[0])}" if retained else ""
        pruned = pruned_intervals(storage, config.name) or {}
        if at != "latest" and pruned.get("first_pruned_watermark") and at >= pruned["first_pruned_watermark"]:  # type: ignore[operator]
            raise RetiredWatermark(
                f"pipeline {config.name}: {asked} is before the retained history: the Ws published from "
                f"{_w_text(pruned['first_pruned_watermark'])} to {_w_text(pruned['last_pruned_watermark'])} were retired by "
                f"the retention policy ([maintenance] keep_*) and their records pruned by archive retention; the nearest "
                f"retained: after it {_w_text(retained[0]) if retained else 'none'}")
        raise NoSuchWatermark(f"pipeline {config.name}: no watermark is published at or before {asked}{first}")
    # The state at ``at`` is that of the greatest W <= it: if that W is retired, an older
    # retained W would be a different state, so it fails rather than answer with that.
    if candidates[-1] in retired:
        raise retired_error(config, candidates[-1], retained, None if candidates[-1] == at else at)
    return candidates[-1]


class View:
    """The consistent view at one published W: each table by its upstream name at W, read at tag ``wm_<W>``."""

    def __init__(self, config: PipelineConfig, watermark: int, tables: dict[tuple[str, str], Any],
                 isolated: dict[tuple[str, str], dict[str, Any]] | None = None) -> None:
        self.config = config
        self.watermark = watermark
        self.tables = tables
        self.isolated = isolated or {}  # (database, table) -> its entry in W's record: not readable at W

    def require_readable(self, name: tuple[str, str]) -> None:
        """Raises ``IsolatedTable`` for a table isolated at W."""
        if name in self.isolated:
            raise isolated_error(self.config, self.watermark, self.isolated[name])

    def snapshot_id(self, name: tuple[str, str]) -> int:
        return self.tables[name].snapshot_by_name(tag_name(self.watermark)).snapshot_id

    def schema(self, name: tuple[str, str], *, metadata: bool = False) -> Schema:
        """The table's Iceberg schema at W (the tag's schema, not today's)."""
        table = self.tables[name]
        schema = table.scan(snapshot_id=self.snapshot_id(name)).projection()
        if metadata:
            return schema
        meta = metadata_columns(schema, table.properties).names
        return Schema(*[f for f in schema.fields if f.name not in meta], schema_id=schema.schema_id,
                      identifier_field_ids=[i for i in schema.identifier_field_ids
                                            if schema.find_field(i).name not in meta])

    def scan(self, name: tuple[str, str], wanted: TableScan | None = None, *, metadata: bool = False) -> pa.Table:
        """The rows of one table at W: ``wanted``'s columns (all when None) of the rows passing its filter."""
        wanted = wanted or TableScan()
        table = self.tables[name]
        columns: tuple[str, ...] = ("*",)
        if wanted.columns is not None:
            columns = wanted.columns or (self.schema(name, metadata=metadata).fields[0].name,)  # keeps the row count
        data = table.scan(snapshot_id=self.snapshot_id(name), row_filter=wanted.row_filter, selected_fields=columns).to_arrow()
        if not metadata:
            meta = metadata_columns(self.schema(name, metadata=True), table.properties).names
            data = data.drop_columns([c for c in meta if c in data.column_names])
        return data


@dataclass(frozen=True)
class TableScan:
    """What a query needs of one table: some columns (None: every column) of the rows that pass ``row_filter``."""

    columns: tuple[str, ...] | None = None
    row_filter: BooleanExpression = field(default_factory=AlwaysTrue)


def view_at(config: PipelineConfig, watermark: int, catalog: Any = None, storage: Storage | None = None) -> View:
    """The tables of the consistent view at W, with their names at W, found by Iceberg UUID. W = 0 is
    before the first W: no table (the change feed's ``--from 0``, a first Asset event's previous W)."""
    if watermark == 0:
        return View(config, 0, {})
    storage = storage or open_storage(config.storage)
    catalog = catalog or cat.open_catalog(config)
    doc = published(config, watermark, storage)
    if "retired" in doc or publish.is_retired(storage, config.name, watermark):
        raise retired_error(config, watermark, publish.retained_watermarks(storage, config.name))
    by_uuid = {str(t.metadata.table_uuid): t for t in cat.pipeline_tables(catalog, config)}
    tables = {}
    for entry in publish.published_tables(doc):
        table = by_uuid.get(entry.uuid)
        if table is None or table.snapshot_by_name(tag_name(watermark)) is None:
            raise NoSuchWatermark(f"{entry.database}.{entry.table} at {watermark}: its Iceberg table or tag "
                                  f"{tag_name(watermark)} is gone")
        tables[(entry.database, entry.table)] = table
    return View(config, watermark, tables, publish.isolated_at(doc))


def open_view(config: PipelineConfig, at: At = "latest", *, catalog: Any = None) -> View:
    """The view at the published W that ``at`` resolves to ("latest", a TSO or a time)."""
    storage = open_storage(config.storage)
    return view_at(config, resolve_watermark(config, at, storage), catalog, storage)


def read_table(config: PipelineConfig, database: str, table: str, watermark: int, *, metadata: bool = False, catalog: Any = None) -> pa.Table:
    """One table at W, by its upstream name at W."""
    view = view_at(config, watermark, catalog)
    view.require_readable((database, table))
    if (database, table) not in view.tables:
        raise NoSuchWatermark(f"{database}.{table} is not a table of pipeline {config.name} at watermark {watermark}")
    return view.scan((database, table), metadata=metadata)


def read_pipeline(config: PipelineConfig, at: At = "latest", *, metadata: bool = False) -> tuple[int, dict[tuple[str, str], pa.Table]]:
    """Every table of the pipeline at one consistent W: (W, {(database, table): rows})."""
    view = open_view(config, at)
    return view.watermark, {name: view.scan(name, metadata=metadata) for name in view.tables}
