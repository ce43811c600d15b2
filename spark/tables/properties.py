"""The Iceberg table properties tidelake keeps on each table: its progress, and what upstream said of it.

Progress is recorded with the data (``spark.commit.table``): a table is either fully at a run's
watermark or untouched. What upstream said -- each column's MySQL type, the key, the partitioning
-- is what later DDL and the type mapping read, since an Iceberg schema cannot say it.
"""

from __future__ import annotations

import json

from pyiceberg.table import Table

from spark.tables.catalog import KEY_COLUMNS

WATERMARK = "tidelake.watermark"
PREVIOUS = "tidelake.previous-watermark"
INTERVAL = "tidelake.interval"
DROPPED = "tidelake.dropped"
RENAME_PENDING = "tidelake.rename-pending"
RENAMED_FROM = "tidelake.renamed-from"
PLAN = "tidelake.plan"  # "<interval>:<n>": the last plan of that interval's run to commit to the table
CREATED_AT = "tidelake.created-at-watermark"  # the first W the table (its Iceberg identity) exists at
UPSTREAM_TYPE_PREFIX = "tidelake.column-type."
SCHEMA_CHANGED_AT = "tidelake.schema-changed-at"  # commitTs of the last DDL that changed the columns or key
PARTITIONING = "tidelake.partitioning"  # the upstream table's partitioning as the stream defined it (JSON)
# On an isolated table (``on_table_error = "isolate"``): the W its ``main`` is held at, and why. Another
# engine reading ``main`` sees the table as it was at that W, not at the pipeline's latest (docs/engines.md).
HELD_AT = "tidelake.held-at-watermark"
HELD_REASON = "tidelake.held-reason"

# Iceberg's table properties for how updates, deletes and merges drop old rows.
WRITE_MODE_PROPERTIES = ("write.update.mode", "write.delete.mode", "write.merge.mode")
DELETE_GRANULARITY = "write.delete.granularity"


def table_watermark(table: Table) -> int:
    return int(table.properties.get(WATERMARK, "0"))


def created_at(table: Table) -> int:
    """The first W the table exists at (0: unknown, a table made before this was recorded)."""
    return int(table.properties.get(CREATED_AT, "0"))


def walk_watermark(table: Table) -> int:
    """How far the run walk (``spark.commit.apply``) counts a table: its watermark, or, for a table a run
    created and died before committing, just below the W it was created at -- no earlier interval
    has anything for it, so the walk need not replay them."""
    return table_watermark(table) or max(created_at(table) - 1, 0)


def key_columns(properties: dict[str, str]) -> tuple[str, ...]:
    return tuple(json.loads(properties.get(KEY_COLUMNS, "[]")))


def upstream_types(properties: dict[str, str]) -> dict[str, str]:
    """{column: its MySQL type as upstream declared it}."""
    return {k[len(UPSTREAM_TYPE_PREFIX):]: v for k, v in properties.items() if k.startswith(UPSTREAM_TYPE_PREFIX)}


# What upstream said of the table's key, column types and partitioning, by the W it took effect at:
# the current ``KEY_COLUMNS``, ``UPSTREAM_TYPE_PREFIX`` and ``PARTITIONING`` properties are today's,
# but a reader of an older W (the change feed's window) needs that W's. A run whose DDL changed them
# records the new ones under its W (``tidelake.upstream-schema.<W, 20 digits>``, JSON {"key": [...],
# "types": {...}, "partitioning": <PARTITIONING's JSON text, or null: none known>}): one entry per
# change, bounded by the table's DDL, not by its runs. Records made before the partitioning was kept
# lack "partitioning": the partitioning at their W is not known (``partitioning_at``).
UPSTREAM_SCHEMA_PREFIX = "tidelake.upstream-schema."
_UNRECORDED = object()  # a record without "partitioning" (made before it was kept)


def upstream_schema(properties: dict[str, str]) -> tuple[tuple[str, ...], dict[str, str]]:
    """Today's (key columns, upstream types)."""
    return key_columns(properties), upstream_types(properties)


def upstream_schema_record(properties: dict[str, str], watermark: int) -> dict[str, str]:
    """The property to set for a run at ``watermark`` that leaves ``properties``: none if the upstream
    schema (key, types, partitioning) in force at that W already says the same."""
    key, types = upstream_schema(properties)
    partitioning = properties.get(PARTITIONING)
    recorded = _recorded(properties)
    at = [w for w in recorded if w <= watermark]
    if at and recorded[max(at)] == (key, types, partitioning):
        return {}
    return {f"{UPSTREAM_SCHEMA_PREFIX}{watermark:020d}": json.dumps(
        {"key": list(key), "types": types, "partitioning": partitioning}, sort_keys=True)}


def upstream_schema_at(properties: dict[str, str], watermark: int) -> tuple[tuple[str, ...], dict[str, str]]:
    """(key columns, upstream types) of the table at W: the last record at or before it; today's
    for a table with no record that old (made before records were kept)."""
    recorded = _recorded(properties)
    at = [w for w in recorded if w <= watermark]
    return recorded[max(at)][:2] if at else upstream_schema(properties)


def upstream_keys(properties: dict[str, str]) -> set[tuple[str, ...]]:
    """Every primary key the table has had by its records (the runs that made it or changed its key),
    today's with them."""
    return {key for key, _, _ in _recorded(properties).values()} | {key_columns(properties)}


def partitioning_at(properties: dict[str, str], watermark: int) -> tuple[bool, str | None]:
    """(known, the table's partitioning at W as ``PARTITIONING`` holds it, None: none the stream
    defined): the last record at or before W. Not known (False, None) for a table with no record
    that old, or whose record predates the partitioning's: today's partitioning may not be W's
    (partition DDL since), so none is guessed."""
    recorded = _recorded(properties)
    at = [w for w in recorded if w <= watermark]
    partitioning = recorded[max(at)][2] if at else _UNRECORDED
    return (False, None) if partitioning is _UNRECORDED else (True, partitioning)  # type: ignore[return-value]


def _recorded(properties: dict[str, str]) -> dict[int, tuple[tuple[str, ...], dict[str, str], object]]:
    out = {}
    for name, value in properties.items():
        if name.startswith(UPSTREAM_SCHEMA_PREFIX) and name[len(UPSTREAM_SCHEMA_PREFIX):].isdigit():
            doc = json.loads(value)
            out[int(name[len(UPSTREAM_SCHEMA_PREFIX):])] = (
                tuple(doc["key"]), dict(doc["types"]), doc.get("partitioning", _UNRECORDED))
    return out
