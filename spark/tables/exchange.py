"""``ALTER TABLE pt EXCHANGE PARTITION p WITH TABLE nt`` applied exactly to both tables.

Upstream sends no row events for it: the rows partition p of pt holds go to nt, and nt's rows
into p (MySQL 8 manual 26.3.3). Each table gets the change in its own plan
(``spark.commit.plan``), and each plan needs the other table *as it was at the statement*:

- the plan that runs first reads the other table as the lake holds it: the plans are ordered so
  that the other table has no change of the run before the statement (its state is the one at
  W_prev) and its plan has not run yet. Before staging, it records its own state at the
  statement -- the snapshot its transaction was at (the run's earlier rows are staged there as
  snapshots of their own) and its partitioning -- in its property ``tidelake.exchanged``;
- the plan that runs second reads the first table at that recorded snapshot: the first one's
  later changes, committed since, do not show.

A retry after a crash between the two commits finds the record committed with the first table.
When both tables change in the run before the statement, the plans end there
(``TablePlan.continues``): each table's changes before it commit first, without progress, and
the exchange starts a later plan of each, read as above. Which rows p holds is computed from pt's
partitioning by the rule TRUNCATE and DROP PARTITION delete by (``spark.tables.updates.held_rows``);
where it cannot be, both are held too. ``WITHOUT VALIDATION`` MySQL moves nt's rows into p
unchecked: a row p's definition does not hold would make later partition statements inexact, so
it holds both.

The rows keep their values, their metadata columns too (the commitTs of their last row change):
only their table changes.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from cdc_codecs import DdlChange
from spark.tables import catalog as cat
from spark.tables.ddl_changes import ExchangePartition
from spark.tables.partitioning import Partitioning, UnknownPartitionRows
from spark.tables.properties import PARTITIONING, upstream_types
from spark.tables.schema_map import metadata_columns
from spark.tables.updates import SchemaUpdate, field_name, held_rows, partition_rows, upstream_fields
from spark.tables import internals
from spark.tables.files import live_files

EXCHANGED = "tidelake.exchanged"  # {statement: {"snapshot": id | None, "partitioning": JSON | None}}
FIRST, SECOND = "first", "second"  # SchemaStep.exchange


def statement_id(ddl: DdlChange) -> str:
    """The statement, the same in both plans and in every attempt of the run."""
    return f"{ddl.commit_ts}@{ddl.position.topic}/{ddl.position.partition}/{ddl.position.offset}"


def stage(tables: cat.RunTables, u: SchemaUpdate, change: ExchangePartition, this: tuple[str, str], ddl: DdlChange,
          role: str | None) -> None:
    """Stage ``this`` table's side of the exchange in ``u.tx`` (``role``: ``SchemaStep.exchange``).

    Raises:
        UnsupportedSchemaChange: which rows move cannot be told; the run holds both tables.
    """
    partitioned = this == change.partitioned
    other = change.table if partitioned else change.partitioned
    names = f"{change.partitioned[0]}.{change.partitioned[1]} and {change.table[0]}.{change.table[1]}"
    if role not in (FIRST, SECOND):  # not made by spark.commit.plan any more: a plan from elsewhere
        raise u.fail(f"moves rows between {names} without row events, and the plan does not say which is read first")
    source = tables.load(*other)
    if source is None:
        raise u.fail(f"exchanges rows with {other[0]}.{other[1]}, which tidelake does not hold")
    if role == FIRST:
        at, source_partitioning = source.metadata.snapshot_by_name(internals.MAIN_BRANCH), source.properties.get(PARTITIONING)
    else:
        record = json.loads(source.properties.get(EXCHANGED, "{}")).get(statement_id(ddl))
        if record is None:
            raise u.fail(f"exchanges rows with {other[0]}.{other[1]}, which carries no record of the statement "
                         "(renamed or re-created since?): its rows at the statement are unknown")
        at = source.metadata.snapshot_by_id(record["snapshot"]) if record["snapshot"] is not None else None
        source_partitioning = record["partitioning"]
    own = u.properties.get(PARTITIONING)
    try:
        incoming = _rows(source, at)
        if not partitioned:  # nt receives the rows partition p held
            known = Partitioning.from_json(source_partitioning) if source_partitioning is not None else None
            incoming = incoming.filter(held_rows(known, (change.partition,), upstream_fields(source.metadata),
                                                 upstream_types(source.properties), u.server)(incoming))
        mine = partition_rows(u, (change.partition,)) if partitioned else None
        if partitioned and not change.validation and incoming.num_rows:
            outside = pc.invert(mine(incoming)).true_count  # type: ignore[misc]
            if outside:
                raise UnknownPartitionRows(f"WITHOUT VALIDATION moved {outside} row(s) of {other[0]}.{other[1]} into "
                                           f"partition {change.partition}, whose definition does not hold them")
    except UnknownPartitionRows as exc:
        raise u.fail(f"moves rows between {names} without row events, and which rows cannot be told: {exc}; "
                     "both are held") from None
    if role == FIRST:  # the other plan reads this table as it is now, at the statement
        head = u.tx.table_metadata.snapshot_by_name(internals.MAIN_BRANCH)
        records = json.loads(u.properties.get(EXCHANGED, "{}"))
        records[statement_id(ddl)] = {"snapshot": head.snapshot_id if head else None, "partitioning": own}
        u.tx.set_properties({EXCHANGED: json.dumps(records)})
    _replace_rows(u, mine, _as_table_rows(u, incoming, source))


def _rows(table: Table, at: Snapshot | None) -> pa.Table:
    """Every row of ``table`` at snapshot ``at`` (None: none), in its current schema."""
    schema = schema_to_pyarrow(table.metadata.schema())
    if at is None:
        return schema.empty_table()
    live = live_files(table.io, at)
    parts = [internals.read_data_file(table.io, table.metadata, f, live.deletes_of(f)) for f in live.data]
    return pa.concat_tables(parts) if parts else schema.empty_table()


def _as_table_rows(u: SchemaUpdate, rows: pa.Table, source: Table) -> pa.Table:
    """``rows`` of ``source`` as rows of the table staged in ``u``: upstream columns by name (MySQL
    requires both tables to have the same columns), metadata columns by role."""
    schema = u.tx.table_metadata.schema()
    target = schema_to_pyarrow(schema)
    mine = metadata_columns(schema, u.properties)
    theirs = metadata_columns(source.metadata.schema(), source.properties)
    roles = {mine.commit_ts: theirs.commit_ts, mine.op: theirs.op}
    fields = upstream_fields(source.metadata)
    columns = []
    for f in target:
        name = roles[f.name] if f.name in roles else field_name(fields, f.name)
        if name is None or name not in rows.column_names:
            if rows.num_rows:
                raise u.fail(f"exchanges rows with {cat.table_label(source)}, which has no column {f.name!r}")
            columns.append(pa.nulls(0, f.type))
            continue
        columns.append(rows.column(name).cast(f.type))
    return pa.Table.from_arrays(columns, schema=target)


def _replace_rows(u: SchemaUpdate, leaving: Callable[[pa.Table], pa.Array] | None, incoming: pa.Table) -> None:
    """Stage one snapshot: the rows ``leaving`` marks (None: every row) go, ``incoming`` comes."""
    tx = u.tx
    head = tx.table_metadata.snapshot_by_name(internals.MAIN_BRANCH)
    live = live_files(u.table.io, head) if head is not None else None
    removed, added, deletes_removed = [], [], []
    for data_file in live.data if live is not None else ():
        if leaving is not None:
            rows = internals.read_data_file(u.table.io, tx.table_metadata, data_file, live.deletes_of(data_file))  # type: ignore[union-attr]
            hit = leaving(rows)
            if not pc.any(hit).as_py():
                continue
            added += internals.write_data_files(u.table.io, tx.table_metadata, rows.filter(pc.invert(hit)))
        removed.append(data_file)
        deletes_removed += live.deletes_of(data_file)  # type: ignore[union-attr]
    added += internals.write_data_files(u.table.io, tx.table_metadata, incoming)
    internals.stage_overwrite(tx, ".".join(u.table.name()), expected_snapshot_id=head.snapshot_id if head else None,
                              removed=removed, added=added, deletes_removed=deletes_removed)
