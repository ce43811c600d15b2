"""A DDL change staged into a table's Iceberg transaction: one small update per kind of change.

``stage(change, SchemaUpdate(...))`` stages what one parsed change (``spark.tables.ddl_changes``) does to
the table's schema, key, layout, properties and rows, in the transaction the caller gives, and
commits nothing: ``spark.commit.table.TableCommitter`` decides the order, the renames, the fills
of added columns and the one commit per table. Upstream names are single-element Iceberg paths
(`a.b` is a column, not field b of a), matched as MySQL matches them: without case.

Also here, because CREATE needs them: ``recreate`` (CREATE over a table the lake still holds),
``like_schema`` (what CREATE TABLE ... LIKE copies) and ``existing_rows_fill`` (the value MySQL
gives the rows a table holds when ADD COLUMN adds a column).
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.catalog import Catalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table, Transaction
from pyiceberg.types import DecimalType, DoubleType, FloatType, IcebergType, IntegerType, LongType

from cdc_codecs import Column, TableSchema, TidelakeError, stored_type
from cdc_codecs.types import binary_length
from spark.config import PipelineConfig
from spark.tables import catalog as cat
from spark.tables.ddl_changes import (
    AddColumn,
    AddPartitions,
    ChangeColumnType,
    CoalescePartitions,
    CreateTableLike,
    DropColumn,
    DropPartitions,
    DropTable,
    MoveColumn,
    RenameColumn,
    ReorganizePartitions,
    SetKeyColumns,
    SetPartitioning,
    TruncatePartitions,
    TruncateTable,
)
from spark.tables.ddl_defaults import ValueNotReproducible, existing_rows_value
from spark.tables.partitioning import MYSQL, Partitioning, UnknownPartitionRows
from spark.tables.properties import (
    DROPPED,
    HELD_AT,
    HELD_REASON,
    PARTITIONING,
    SCHEMA_CHANGED_AT,
    UPSTREAM_TYPE_PREFIX,
    key_columns,
    table_watermark,
    upstream_types,
)
from spark.tables.schema_map import (
    COMMIT_TS,
    METADATA_PROPERTY,
    OP,
    iceberg_schema,
    iceberg_type,
    metadata_columns,
    metadata_field_ids,
    metadata_name,
    table_columns,
)
from spark.tables import internals
from spark.tables.files import LiveFiles, live_files
from spark.tables.table_layout import lay_out


class UnsupportedSchemaChange(TidelakeError):
    """A DDL that Iceberg cannot express for this table."""


class RowSchemaMismatch(UnsupportedSchemaChange):
    """Rows name columns their table does not have at their commitTs, or are keyed by other
    columns than its primary key: the stream contradicts its own DDL (a schema change it did not
    carry; without commitTs, a change re-sent after its table was made again under its name) or
    keys rows its own way. Their values would have no column to go to, or be netted by one key and
    written by another, so the table is held rather than written wrong."""


def widened(old: IcebergType, new: IcebergType) -> bool:
    """Whether ``new`` holds every value of ``old`` as it is: the same type, or one of Iceberg's
    promotions (int to long, float to double, a decimal's precision at the same scale)."""
    if old == new:
        return True
    if isinstance(old, IntegerType) and isinstance(new, LongType):
        return True
    if isinstance(old, FloatType) and isinstance(new, DoubleType):
        return True
    if isinstance(old, DecimalType) and isinstance(new, DecimalType):
        return new.scale == old.scale and new.precision >= old.precision
    return False


def field_name(fields: dict[str, Any], column: str) -> str | None:
    """The table's name for upstream column ``column`` among ``fields`` (upstream columns): MySQL
    column names ignore case."""
    if column in fields:
        return column
    folded = [n for n in fields if n.casefold() == column.casefold()]
    return folded[0] if len(folded) == 1 else None


def upstream_fields(metadata: Any) -> dict[str, Any]:
    """The table's upstream columns (its metadata columns left out), by name."""
    meta = metadata_columns(metadata.schema(), metadata.properties).names
    return {f.name: f for f in metadata.schema().fields if f.name not in meta}


def _metadata_aside(tx: Transaction, upstream: list[str], *, new_table: bool = False) -> None:
    """Rename the metadata columns (by field id) that an upstream column of ``upstream`` (the
    table's upstream columns after a change) names, and record their ids (see ``schema_map``).
    A metadata column keeps a derived name once it has one (its name at earlier Ws stays its
    name), except for ``new_table`` (CREATE over an old table), named as a new table would be."""
    metadata = tx.table_metadata
    schema = metadata.schema()
    ids = metadata_field_ids(schema, metadata.properties)
    taken = {u.casefold() for u in upstream}
    renames = {}
    for field_id, base in zip(ids, (COMMIT_TS, OP)):
        if field_id is None:
            continue
        name = schema.find_column_name(field_id)
        if new_table or name.casefold() in taken:
            wanted = metadata_name(base, upstream)
            if name != wanted:
                renames[name] = wanted
    if renames:
        with tx.update_schema() as u:
            for old, new in renames.items():
                u.rename_column((old,), new)
    if METADATA_PROPERTY not in metadata.properties and None not in ids:
        tx.set_properties({METADATA_PROPERTY: json.dumps(list(ids))})


def _reset_columns(tx: Transaction, wanted: Schema) -> None:
    """Give an emptied table exactly ``wanted``'s columns, in its order (CREATE over an old table):
    upstream columns of the same name and type stay, the metadata columns stay (renamed as ``wanted`` names them)."""
    have = upstream_fields(tx.table_metadata)
    wanted_upstream = list(wanted.fields[:-2])  # an iceberg_schema: the metadata columns last
    kept = {f.name for f in wanted_upstream if f.name in have and have[f.name].field_type == f.field_type}
    if set(have) - kept:
        with tx.update_schema(allow_incompatible_changes=True) as u:
            for name in set(have) - kept:
                u.delete_column((name,))
    _metadata_aside(tx, [f.name for f in wanted_upstream], new_table=True)
    added = [f for f in wanted_upstream if f.name not in kept]
    if added:
        with tx.update_schema(allow_incompatible_changes=True) as u:
            for f in added:
                u.add_column((f.name,), f.field_type)
    names = [f.name for f in wanted.fields]
    if [f.name for f in tx.table_metadata.schema().fields] != names:
        with tx.update_schema() as u:
            u.move_first((names[0],))
            for before, name in itertools.pairwise(names):
                u.move_after((name,), (before,))


@dataclass(frozen=True)
class SchemaUpdate:
    """Where a change is staged: ``table`` (its committed state) and ``tx`` (the changes staged so
    far, which every update reads: a statement's clauses see each other), and the statement."""

    table: Table
    tx: Transaction
    sql: str
    commit_ts: int | None
    buckets: int  # [layout] buckets: new files follow the key
    server: str = MYSQL  # the server upstream (partitioning.upstream_server): where a HASH row lives

    @property
    def name(self) -> str:
        return f"{self.table.properties.get(cat.UPSTREAM_DATABASE)}.{self.table.properties.get(cat.UPSTREAM_TABLE)}"

    @property
    def properties(self) -> dict[str, str]:
        return self.tx.table_metadata.properties

    def fields(self) -> dict[str, Any]:
        return upstream_fields(self.tx.table_metadata)

    def field(self, column: str) -> str:
        """The table's name for upstream column ``column``; raises if it has none."""
        fields = self.fields()
        found = field_name(fields, column)
        if found is None:
            raise UnsupportedSchemaChange(
                f"{self.name}: {self.sql!r} names column {column!r}, which the table does not have "
                f"(it has {', '.join(repr(n) for n in fields)})"
            )
        return found

    def fail(self, what: str) -> UnsupportedSchemaChange:
        return UnsupportedSchemaChange(f"{self.name}: {self.sql!r} {what}")


def stage(change: Any, update: SchemaUpdate) -> None:
    """Stage one column, key, truncate, partition or drop change (not CREATE, not RENAME TABLE:
    those are the committer's, as they touch the catalog)."""
    stager = _STAGERS.get(type(change))
    if stager is None:
        raise update.fail(f"has no Iceberg update for {type(change).__name__}")
    stager(change, update)
    if type(change) in _COLUMN_CHANGES:
        # CREATE TABLE ... LIKE this table, later in the run, checks this (see like_schema).
        update.tx.set_properties({SCHEMA_CHANGED_AT: str(update.commit_ts or 0)})


def _add_column(change: AddColumn, u: SchemaUpdate) -> None:
    fields, tx = u.fields(), u.tx
    column = change.column.name
    existing = field_name(fields, column)
    if existing is not None:
        if change.if_not_exists:
            return  # ADD COLUMN IF NOT EXISTS: upstream kept the column it had
        if fields[existing].field_type != iceberg_type(change.column.type):
            raise u.fail(f"adds column {column!r}, which the table already has as {fields[existing].field_type}")
    else:
        _not_a_partition_field(u, column, "adds column")
        _metadata_aside(tx, [*fields, column])
        first_metadata = metadata_columns(tx.table_metadata.schema(), tx.table_metadata.properties).commit_ts
        with tx.update_schema() as s:
            s.add_column((column,), iceberg_type(change.column.type))
            if first_metadata is not None:  # last of the upstream columns, as MySQL adds it
                s.move_before((column,), (first_metadata,))
    tx.set_properties({f"{UPSTREAM_TYPE_PREFIX}{existing or column}": str(change.column.type)})


def _not_a_partition_field(u: SchemaUpdate, column: str, what: str) -> None:
    """Iceberg (pyiceberg) refuses a column named like a partition field of any of the table's
    specs, old ones too, and a spec's field names cannot change: a table is laid out under a name
    none of its columns has (``table_layout.bucket_field_name``), but a later column may take it."""
    taken = {f.name.casefold(): f.name for spec in u.tx.table_metadata.partition_specs for f in spec.fields}
    if column.casefold() in taken:
        raise u.fail(f"{what} {column!r}, the name of the table's partition field {taken[column.casefold()]!r} "
                     "(layout buckets), which Iceberg refuses for a column; re-create the table with the column")


def _drop_column(change: DropColumn, u: SchemaUpdate) -> None:
    fields, tx, props = u.fields(), u.tx, u.properties
    column = field_name(fields, change.name)
    if column is None:
        return  # DROP COLUMN IF EXISTS, or a column the lake never had
    keys = key_columns(props)
    _stop_laying_out_by(u, fields[column].field_id)
    with tx.update_schema() as s:
        s.delete_column((column,))
    if f"{UPSTREAM_TYPE_PREFIX}{column}" in props:
        tx.remove_properties(f"{UPSTREAM_TYPE_PREFIX}{column}")
    if column in keys:  # MySQL drops a dropped column from the primary key too
        remaining = [k for k in keys if k != column]
        tx.set_properties({cat.KEY_COLUMNS: json.dumps(remaining)})
        lay_out(tx, remaining, u.buckets)  # new files follow the new key


def _rename_column(change: RenameColumn, u: SchemaUpdate) -> None:
    fields, tx, props = u.fields(), u.tx, u.properties
    old = u.field(change.old)
    clash = field_name(fields, change.new)
    if clash is not None and clash != old:
        raise u.fail(f"renames {old!r} to {change.new!r}, but the table has column {clash!r}")
    keys = key_columns(props)
    old_type = props.get(f"{UPSTREAM_TYPE_PREFIX}{old}")
    _not_a_partition_field(u, change.new, f"renames {old!r} to")
    _metadata_aside(tx, [change.new if n == old else n for n in fields])
    with tx.update_schema() as s:
        s.rename_column((old,), change.new)
    if old_type:
        tx.remove_properties(f"{UPSTREAM_TYPE_PREFIX}{old}")
        tx.set_properties({f"{UPSTREAM_TYPE_PREFIX}{change.new}": old_type})
    if old in keys:
        tx.set_properties({cat.KEY_COLUMNS: json.dumps([change.new if k == old else k for k in keys])})


def _change_column_type(change: ChangeColumnType, u: SchemaUpdate) -> None:
    column = u.field(change.name)
    new_type = iceberg_type(change.type)
    old_type = u.fields()[column].field_type
    if not widened(old_type, new_type):
        raise u.fail(
            f"changes {column!r} from {old_type} to {new_type}, which Iceberg cannot do in place (only int->long, "
            "float->double, decimal precision widening). Add a new column upstream and backfill it, or re-create the "
            "table and replay the archive"
        )
    was = u.properties.get(f"{UPSTREAM_TYPE_PREFIX}{column}")
    if binary_length(change.type) is not None and was != str(change.type) and _holds_rows(u):
        # MySQL pads every value the table holds to the new BINARY(n) (the stream's later values come
        # so padded), which tidelake does not rewrite: a key among them would match none of them.
        raise u.fail(
            f"changes {column!r} from {was or old_type} to {change.type}: MySQL pads the values of the rows the table "
            "holds with 0x00 to the new length, which tidelake does not rewrite (a key among them would no longer match "
            "the changes the stream sends). Re-create the table from a snapshot"
        )
    if old_type != new_type:
        with u.tx.update_schema() as s:
            s.update_column((column,), field_type=new_type)
    u.tx.set_properties({f"{UPSTREAM_TYPE_PREFIX}{column}": str(change.type)})


def _move_column(change: MoveColumn, u: SchemaUpdate) -> None:
    column = u.field(change.name)
    after = u.field(change.after) if change.after is not None else None
    with u.tx.update_schema() as s:
        if after is None:
            s.move_first((column,))
        else:
            s.move_after((column,), (after,))


def _set_key_columns(change: SetKeyColumns, u: SchemaUpdate) -> None:
    new_keys = [u.field(k) for k in change.columns]
    old_keys = key_columns(u.properties)
    u.tx.set_properties({cat.KEY_COLUMNS: json.dumps(new_keys)})
    if tuple(new_keys) != old_keys:
        lay_out(u.tx, new_keys, u.buckets)  # new files follow the new key


def _truncate(change: TruncateTable, u: SchemaUpdate) -> None:
    remove_all_rows(u.table, u.tx)


def _drop_table(change: DropTable, u: SchemaUpdate) -> None:
    # Kept, empty and marked, so tags before the drop stay readable and backfills can restore.
    remove_all_rows(u.table, u.tx)
    u.tx.set_properties({DROPPED: str(u.commit_ts)})


def _partitions(change: Any, u: SchemaUpdate) -> None:
    """Keep the table's partitioning as the stream defines it (``partitioning_after``); delete the
    rows of a truncated or dropped partition by its bounds (upstream sends no row events for them)."""
    tx, props = u.tx, u.properties
    if isinstance(change, TruncatePartitions) and change.names is None:
        remove_all_rows(u.table, tx)  # TRUNCATE PARTITION ALL
        return
    known = Partitioning.from_json(props[PARTITIONING]) if PARTITIONING in props else None
    if isinstance(change, (DropPartitions, TruncatePartitions)):
        names = change.names
        what = (f"deletes the rows of partition(s) {', '.join(names)} without row events, and tidelake cannot tell "
                "which rows those are")
        try:
            _remove_partition_rows(u.table, tx, partition_rows(u, names))
        except UnknownPartitionRows as exc:
            raise u.fail(f"{what}: {exc}. Re-create the table from a snapshot") from None
    after = partitioning_after(known, change)
    if after == known:
        return
    if after is not None:
        tx.set_properties({PARTITIONING: after.to_json()})
    elif known is not None:
        tx.remove_properties(PARTITIONING)  # REMOVE PARTITIONING, or the stream and the lake disagree: forget the bounds


# The partition DDL that changes which rows a partition holds, or removes them (``partitioning_after``).
PARTITION_CHANGES = (SetPartitioning, AddPartitions, ReorganizePartitions, CoalescePartitions, DropPartitions,
                     TruncatePartitions)


def partitioning_after(known: Partitioning | None, change: Any) -> Partitioning | None:
    """The table's partitioning after partition DDL ``change`` (one of ``PARTITION_CHANGES``, or
    ``ExchangePartition``, which changes none), from ``known`` (None: the stream never defined it, or
    it was forgotten): the one rule the apply keeps the ``PARTITIONING`` property by, and the change
    feed follows a window's DDL by (MySQL 8 manual, 26.3). ``PARTITION BY`` sets it, ``REMOVE
    PARTITIONING`` ends it; ADD, COALESCE, REORGANIZE and DROP PARTITION change the partitions (None
    when the definition does not have what they name: the stream and the lake disagree);
    TRUNCATE and EXCHANGE PARTITION leave it."""
    if isinstance(change, SetPartitioning):
        return change.partitioning
    if known is None:
        return None  # still unknown: a later TRUNCATE / DROP PARTITION says so
    try:
        if isinstance(change, AddPartitions):
            return known.with_added(change.partitions).with_more(change.count)
        if isinstance(change, CoalescePartitions):
            return known.coalesced(change.count)
        if isinstance(change, ReorganizePartitions):
            return known.reorganized(change.names, change.into)
    except UnknownPartitionRows:
        return None
    if isinstance(change, DropPartitions):
        return known.without(change.names)
    return known


def partition_rows(u: SchemaUpdate, names: tuple[str, ...]) -> Callable[[pa.Table], pa.Array]:
    """The mask of the rows partitions ``names`` of the table hold, as staged in ``u``.

    Raises:
        UnknownPartitionRows: which rows those are cannot be told (why in the message).
    """
    props = u.properties
    known = Partitioning.from_json(props[PARTITIONING]) if PARTITIONING in props else None
    return held_rows(known, names, u.fields(), upstream_types(props), u.server)


def held_rows(known: Partitioning | None, names: tuple[str, ...], fields: Iterable[str], types: dict[str, str],
              server: str = MYSQL) -> Callable[[pa.Table], pa.Array]:
    """The mask of the rows partitions ``names`` hold under partitioning ``known`` (None: the stream
    never defined it), over rows whose columns are ``fields`` (upstream columns, matched as MySQL
    matches names), with upstream types ``types`` ({column: MySQL type}), on ``server``.

    Raises:
        UnknownPartitionRows: which rows those are cannot be told (why in the message).
    """
    if known is None:
        raise UnknownPartitionRows("the stream never defined the table's partitioning (CREATE TABLE or ALTER TABLE ... "
                                   "PARTITION BY after the pipeline's start)")
    by_name = dict.fromkeys(fields)
    columns = {c: f for c in known.columns if (f := field_name(by_name, c)) is not None}
    typed = {c: stored_type(types[f]) for c, f in columns.items() if f in types}
    return known.holding(names, columns, typed, server)


_STAGERS: dict[type, Callable[[Any, SchemaUpdate], None]] = {
    AddColumn: _add_column, DropColumn: _drop_column, RenameColumn: _rename_column,
    ChangeColumnType: _change_column_type, MoveColumn: _move_column, SetKeyColumns: _set_key_columns,
    TruncateTable: _truncate, DropTable: _drop_table,
    SetPartitioning: _partitions, AddPartitions: _partitions, ReorganizePartitions: _partitions,
    DropPartitions: _partitions, TruncatePartitions: _partitions, CoalescePartitions: _partitions,
}
# The changes after which the lake no longer holds the columns a later CREATE ... LIKE would copy.
_COLUMN_CHANGES = (AddColumn, DropColumn, RenameColumn, ChangeColumnType, MoveColumn, SetKeyColumns)


def recreate(table: Table, tx: Transaction, schema: TableSchema, buckets: int, properties: dict[str, str]) -> None:
    """CREATE over a table the lake holds (a retry, or CREATE after DROP): empty, with the new
    columns and key, laid out as a new table with this key, ``properties`` set."""
    remove_all_rows(table, tx)
    lay_out(tx, (), 0)  # the old key's columns may go
    _reset_columns(tx, iceberg_schema(table_columns(schema)))
    lay_out(tx, schema.key_columns, buckets)
    # A held table's marker goes too: the name's new table is not held (spark.commit.isolation, a held table holds only itself).
    stale = [k for k in tx.table_metadata.properties
             if k in (DROPPED, PARTITIONING, HELD_AT, HELD_REASON) or k.startswith(UPSTREAM_TYPE_PREFIX)]
    if stale:
        tx.remove_properties(*stale)
    tx.set_properties({**properties, cat.KEY_COLUMNS: json.dumps(list(schema.key_columns))})


def like_schema(catalog: Catalog, config: PipelineConfig, change: CreateTableLike, sql: str, commit_ts: int | None,
                source_at: tuple[str, str] | None, watermark: int) -> tuple[TableSchema, str | None]:
    """The columns, upstream types and key of ``CREATE TABLE x LIKE y``'s source, as the lake holds
    them (or as the protocol carried them) (``source_at``: where a rename earlier in the run moved
    it), and its partitioning (JSON, None if unknown)."""
    where = f"{change.table[0]}.{change.table[1]}: {sql!r}"
    src = f"{change.source[0]}.{change.source[1]}"
    # A rename later in the run, committed before this plan, may have moved the source (spark.commit.plan).
    source = cat.load_table(catalog, config, *(source_at or change.source))
    if change.schema is not None:  # the protocol carried the columns: the source gives its partitioning, if known
        held = source is not None and DROPPED not in source.properties
        return change.schema, source.properties.get(PARTITIONING) if held else None  # type: ignore[union-attr]
    if source is None or DROPPED in source.properties:
        raise UnsupportedSchemaChange(
            f"{where} copies {src}, which tidelake does not hold; start the pipeline before {src}'s CREATE TABLE, "
            "or use a protocol that carries the schema after each DDL (Simple, Debezium)"
        )
    # The source's plan in this run may have run first, changing its columns after this
    # statement: then the lake no longer holds the columns this statement copied.
    changed_at = int(source.properties.get(SCHEMA_CHANGED_AT, "0"))
    if table_watermark(source) == watermark and (commit_ts or 0) < changed_at <= watermark:
        raise UnsupportedSchemaChange(
            f"{where} copies {src}, whose columns changed at commitTs {changed_at}, after this statement and in the "
            "same run, so its columns at the statement are unknown; use a protocol that carries the schema after "
            "each DDL (Simple, Debezium)"
        )
    types = upstream_types(source.properties)
    columns = []
    for f in upstream_fields(source.metadata).values():
        if f.name not in types:
            raise UnsupportedSchemaChange(f"{where}: {src} has no upstream type recorded for column {f.name!r}")
        columns.append(Column(f.name, stored_type(types[f.name]), True))
    keys = key_columns(source.properties)
    return TableSchema(change.table[0], change.table[1], tuple(columns), keys), source.properties.get(PARTITIONING)


def existing_rows_fill(u: SchemaUpdate, change: AddColumn, at_ms: int, tz: dt.tzinfo) -> dict[int, Any]:
    """{field id: value} for a column ``change`` just added, when MySQL gives the rows the table
    holds a value other than NULL (its DEFAULT, explicit or implicit; ``existing_rows_value``, the
    statement ran at ``at_ms`` in upstream's ``tz``); {} for NULL (what a column added to Iceberg
    reads in older files) or a table without rows.

    Raises:
        UnsupportedSchemaChange: the table holds rows and their value cannot be known.
    """
    if not _live(u).data:
        return {}  # an empty table: nothing to fill, whatever the default
    try:
        value = existing_rows_value(change.column, change.default, at_ms, tz)
    except ValueNotReproducible as exc:
        if not _holds_rows(u):
            return {}
        raise UnsupportedSchemaChange(
            f"{u.name}: {u.sql!r} at commitTs {u.commit_ts} adds column {change.column.name!r} to a table holding rows, "
            f"and the value MySQL gave those rows cannot be known: {exc}. Re-create the table from a snapshot "
            "that includes the column"
        ) from None
    if value is None:
        return {}
    field = next(f for f in u.tx.table_metadata.schema().fields if f.name == change.column.name)
    return {field.field_id: value}


def _live(u: SchemaUpdate) -> LiveFiles:
    head = u.tx.table_metadata.snapshot_by_name(internals.MAIN_BRANCH)
    return live_files(u.table.io, head) if head is not None else LiveFiles((), {})


def _holds_rows(u: SchemaUpdate) -> bool:
    """Whether the table holds a row: files whose rows are all deleted hold none (our delete files
    name a position once)."""
    live = _live(u)
    return sum(f.record_count for f in live.data) > sum(d.record_count for f in live.data for d in live.deletes_of(f))


def _stop_laying_out_by(u: SchemaUpdate, field_id: int) -> None:
    """Before a column goes: a sort order using it goes first (Iceberg cannot drop a column the
    table is sorted by; new files are then written unsorted). A bucket partition on it cannot go,
    in the default spec nor in the spec of a live file (an older key's, before a key change):
    pyiceberg 0.12's overwrite cannot read manifests of a spec whose source column is gone."""
    metadata = u.tx.table_metadata
    head = metadata.snapshot_by_name(internals.MAIN_BRANCH)
    in_use = {metadata.default_spec_id} | ({f.spec_id for f in live_files(u.table.io, head).data} if head else set())
    specs = metadata.specs()
    if any(f.source_id == field_id for spec_id in in_use for f in specs[spec_id].fields):
        raise u.fail(
            "drops the column the table is bucketed by ([layout] buckets); pyiceberg 0.12 cannot "
            "write the table after that. Rebuild the pipeline under a new name with [layout] buckets = 0 over the same "
            "archive (docs/repair.md)"
        )
    if any(f.source_id == field_id for f in metadata.sort_order().fields):
        internals.unsort(u.tx)


def remove_all_rows(table: Table, tx: Transaction) -> None:
    """Stage a snapshot without any data file (TRUNCATE, DROP, CREATE over an old table)."""
    head = tx.table_metadata.snapshot_by_name(internals.MAIN_BRANCH)
    if head is None:
        return
    live = live_files(table.io, head)
    internals.stage_overwrite(tx, ".".join(table.name()), expected_snapshot_id=head.snapshot_id,
                              removed=live.data, added=[], deletes_removed=live.delete_files)


def _remove_partition_rows(table: Table, tx: Transaction, held: Callable[[pa.Table], pa.Array]) -> None:
    """Stage a snapshot without the rows ``held`` marks (TRUNCATE / DROP PARTITION): every data
    file is read on the driver (a rare statement), and the files holding such rows are rewritten
    without them (their position deletes applied)."""
    head = tx.table_metadata.snapshot_by_name(internals.MAIN_BRANCH)
    if head is None:
        return
    live = live_files(table.io, head)
    removed, added, deletes_removed = [], [], []
    for data_file in live.data:
        rows = internals.read_data_file(table.io, tx.table_metadata, data_file, live.deletes_of(data_file))
        hit = held(rows)
        if not pc.any(hit).as_py():
            continue
        removed.append(data_file)
        deletes_removed += live.deletes_of(data_file)
        added += internals.write_data_files(table.io, tx.table_metadata, rows.filter(pc.invert(hit)))
    internals.stage_overwrite(tx, ".".join(table.name()), expected_snapshot_id=head.snapshot_id, removed=removed,
                              added=added, deletes_removed=deletes_removed)
