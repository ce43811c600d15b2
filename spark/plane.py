"""Where a run's row work happens: Spark executors (``SparkPlane``) or this process (``LocalPlane``).

Both run the same functions on Arrow data -- ``fold.select.select``, ``window_counts``,
``fold_rows`` (the one fold rule, ``net_change.greatest_per_key``), ``net_groups``,
``iceberg.upsert.route`` / ``run_groups`` -- and differ only in how rows get to them: Spark moves
them between executors as packs of Arrow IPC (shuffled by a shard of keys, then by (request, file
group)); the local plane holds one in-memory table (tiny runs, the fast tests, the demo). The
driver gets back aggregates (pending offsets, counts, one summary per table and DDL segment) and
``FileRewrite``s (file metadata), never rows.
"""

from __future__ import annotations

import pickle
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from cdc_codecs import ColumnType
from spark import credentials
from spark.config import PipelineConfig
from spark.decode.changelog import decode_schema
from spark.fold.select import APPLY, PENDING, SKIPPED, FoldWindow, select
from spark.iceberg.rewrite import FileRewrite
from spark.iceberg.upsert import (
    RESULT_SCHEMA,
    ROUTED_SCHEMA,
    UpsertTarget,
    from_ipc,
    group_sorted,
    results,
    route,
    run_groups,
    to_ipc,
)
from spark.net_change import ORDER_COLUMNS, Order, greatest_per_key, sort_for_fold
from spark.storage import open_storage

PKey = tuple[str, int]
TableRef = tuple[str, str]


@dataclass(frozen=True)
class NetSummary:
    """One table's net change in one DDL segment of the run, as counts."""

    database: str
    table: str
    segment: int
    keys: int
    deletes: int
    first: Order  # the commit order of its earliest applied row
    schema_ids: tuple[int, ...] = ()  # the table schemas its rows name (side outputs hold them)
    written_schema_ids: tuple[int, ...] = ()  # ... and those of the rows it writes

    @property
    def upserts(self) -> int:
        return self.keys - self.deletes


@dataclass
class FoldOutcome:
    summaries: list[NetSummary]
    pending: dict[PKey, int]  # first offset with commitTs > W, per partition that has one
    skipped: int  # changes at or below W_prev (redeliveries)
    applied: dict[str, int] = field(default_factory=dict)  # changes applied per "db.table"


@dataclass(frozen=True)
class RewriteRequest:
    """Rewrite one table for its net change in one DDL segment, against ``target`` (its files and schema)."""

    database: str
    table: str
    segment: int
    target: UpsertTarget


class Fold(Protocol):
    outcome: FoldOutcome

    def rewrite(self, requests: Sequence[RewriteRequest]) -> list[list[FileRewrite]]:
        """Each request's file rewrites, all requests in one pass over the executors."""
        ...

    def row_schema(self, database: str, table: str, segment: int) -> tuple[dict[str, ColumnType], tuple[str, ...]]: ...

    def close(self) -> None: ...


class _NetSchemas:
    """``row_schema`` from the fold's summaries and the side outputs' schemas: no rows are read."""

    outcome: FoldOutcome
    schemas: Mapping[int, bytes]

    def row_schema(self, database: str, table: str, segment: int) -> tuple[dict[str, ColumnType], tuple[str, ...]]:
        """Column types and key of rows for a table no DDL created: the union over its written rows."""
        summary = next(s for s in self.outcome.summaries if (s.database, s.table, s.segment) == (database, table, segment))
        keys: tuple[str, ...] = ()
        for sid in sorted(summary.schema_ids):
            keys = decode_schema(self.schemas[sid])[0] or keys
        columns: dict[str, ColumnType] = {}
        for sid in sorted(summary.written_schema_ids):
            columns.update(decode_schema(self.schemas[sid])[1] or {})
        return columns, keys


def read_change_log(config: PipelineConfig, paths: Iterable[str], window: FoldWindow) -> Iterator[pa.Table]:
    """The selected rows of change-log files (runs on an executor: ``config`` carries no secrets)."""
    storage = open_storage(credentials.resolve(config).storage)
    for path in paths:
        with storage.arrow_fs.open_input_file(storage.arrow_path(path)) as f:
            rows = pq.read_table(f)
        yield select(rows, window)


# What a run counts of the rows it selects: per partition and table, the first offset waiting for a
# later run, the redeliveries skipped and the changes applied (``first``: a change's first key
# effect). Both planes count with ``window_counts`` (on Spark, per change-log file on the executors)
# and add up with ``add_counts`` on the driver.
COUNTS_SCHEMA = pa.schema([pa.field("topic", pa.string()), pa.field("partition", pa.int32()), pa.field("database", pa.string()),
                           pa.field("table", pa.string()), pa.field("pending", pa.int64()), pa.field("skipped", pa.int64()),
                           pa.field("applied", pa.int64())])


def window_counts(selected: pa.Table) -> pa.Table:
    """``COUNTS_SCHEMA`` rows of ``select``'s output (a few per partition and table)."""
    if selected.num_rows == 0:
        return COUNTS_SCHEMA.empty_table()
    state, first = selected.column("state"), selected.column("first")
    marks = pa.table({
        "topic": selected.column("topic"), "partition": selected.column("partition"), "database": selected.column("database"),
        "table": selected.column("table"),
        "pending": pc.if_else(pc.equal(state, PENDING), selected.column("offset"), pa.scalar(None, pa.int64())),
        "skipped": pc.cast(pc.and_(pc.equal(state, SKIPPED), first), pa.int64()),
        "applied": pc.cast(pc.and_(pc.equal(state, APPLY), first), pa.int64()),
    })
    counted = marks.group_by(["topic", "partition", "database", "table"]).aggregate(
        [("pending", "min"), ("skipped", "sum"), ("applied", "sum")])
    return counted.rename_columns(["topic", "partition", "database", "table", "pending", "skipped", "applied"]) \
        .select(COUNTS_SCHEMA.names).cast(COUNTS_SCHEMA)


def add_counts(counts: Iterable[pa.Table]) -> tuple[dict[PKey, int], int, dict[str, int]]:
    """Pending offset per partition, redeliveries skipped, changes applied per "db.table"."""
    pending: dict[PKey, int] = {}
    skipped = 0
    applied: dict[str, int] = {}
    for table in counts:
        for r in table.to_pylist():
            key = (r["topic"], r["partition"])
            if r["pending"] is not None:
                pending[key] = min(pending.get(key, r["pending"]), r["pending"])
            skipped += r["skipped"] or 0
            if r["applied"]:
                name = f"{r['database']}.{r['table']}"
                applied[name] = applied.get(name, 0) + r["applied"]
    return pending, skipped, applied


def fold_rows(selected: pa.Table) -> pa.Table:
    """The rows to apply of ``select``'s output, folded: one per (table, DDL segment, key)."""
    applied = selected.filter(pc.equal(selected.column("state"), APPLY))
    if applied.num_rows == 0:
        return applied
    return pa.Table.from_batches(list(greatest_per_key(sort_for_fold(applied).to_batches())), applied.schema)


def net_groups(folded: pa.Table) -> Iterator[tuple[NetSummary, pa.Table]]:
    """Each (table, DDL segment) of folded rows: its summary and its rows."""
    for (database, table, segment), mask in _groups(folded):
        g = folded.filter(mask)
        written = g.filter(pc.invert(g.column("deletes")))
        yield NetSummary(database, table, segment, g.num_rows, int(pc.sum(g.column("deletes")).as_py() or 0), _first_order(g),
                         _ids(g.column("schema_id")), _ids(written.column("schema_id"))), g


def merge_summaries(summaries: Iterable[NetSummary]) -> list[NetSummary]:
    """One summary per (table, DDL segment) from summaries of disjoint key sets."""
    merged: dict[tuple[str, str, int], NetSummary] = {}
    for s in summaries:
        key = (s.database, s.table, s.segment)
        m = merged.get(key)
        merged[key] = s if m is None else NetSummary(
            *key, m.keys + s.keys, m.deletes + s.deletes, min(m.first, s.first),
            tuple(sorted(set(m.schema_ids) | set(s.schema_ids))),
            tuple(sorted(set(m.written_schema_ids) | set(s.written_schema_ids))))
    return [merged[k] for k in sorted(merged)]


# ----------------------------------------------------------------------------- in process


class LocalPlane:
    def fold(self, config: PipelineConfig, paths: Sequence[str], window: FoldWindow, schemas: Mapping[int, bytes]) -> LocalFold:
        parts = list(read_change_log(config, paths, window))
        return LocalFold(pa.concat_tables(parts) if parts else None, schemas)


class LocalFold(_NetSchemas):
    def __init__(self, selected: pa.Table | None, schemas: Mapping[int, bytes]) -> None:
        self.schemas = schemas
        self.net: dict[tuple[str, str, int], pa.Table] = {}
        if selected is None or selected.num_rows == 0:
            self.outcome = FoldOutcome([], {}, 0)
            return
        pending, skipped, applied = add_counts([window_counts(selected)])
        summaries = []
        for summary, rows in net_groups(fold_rows(selected)):
            self.net[(summary.database, summary.table, summary.segment)] = rows
            summaries.append(summary)
        self.outcome = FoldOutcome(summaries, pending, skipped, applied)

    def rewrite(self, requests: Sequence[RewriteRequest]) -> list[list[FileRewrite]]:
        routed = [route(net, r.target, i) for i, r in enumerate(requests)
                  if (net := self.net.get((r.database, r.table, r.segment))) is not None and net.num_rows]
        if not routed:
            return [[] for _ in requests]
        packed = group_sorted(pa.concat_tables(routed))
        return results(run_groups(packed.to_batches(), [r.target for r in requests]), len(requests))

    def close(self) -> None:
        self.net.clear()


def _groups(folded: pa.Table) -> Iterator[tuple[tuple[str, str, int], pa.Array]]:
    if folded.num_rows == 0:
        return
    keys = folded.group_by(["database", "table", "segment"]).aggregate([]).to_pylist()
    for k in keys:
        mask = pc.and_(pc.and_(pc.equal(folded.column("database"), k["database"]), pc.equal(folded.column("table"), k["table"])),
                       pc.equal(folded.column("segment"), k["segment"]))
        yield (k["database"], k["table"], k["segment"]), mask


def _first_order(rows: pa.Table) -> Order:
    ordered = rows.select(list(ORDER_COLUMNS)).sort_by([(c, "ascending") for c in ORDER_COLUMNS]).slice(0, 1).to_pylist()[0]
    return tuple(ordered[c] for c in ORDER_COLUMNS)  # type: ignore[return-value]


def _ids(column: pa.ChunkedArray) -> tuple[int, ...]:
    return tuple(sorted(pc.unique(column).to_pylist()))


# ----------------------------------------------------------------------------- on Spark

# Rows cross Spark as *packs*: one Spark row holding an Arrow IPC stream of many change-log rows,
# with what it is (``kind``) and where it goes (``part``: a shard of keys; or the (table, DDL
# segment) of folded rows). The JVM moves bytes and shuffles a few thousand packs; the per-row work
# -- select, count, the fold, routing -- runs on Arrow in the Python workers, in the same functions
# the local plane runs. (Rows as Spark rows cost ~10 s per million on local[2] to convert, cache
# and sort in the JVM; measured in docs/data-plane.md.)
COUNTS, ROWS, NET, SUMMARY = 0, 1, 2, 3
PACK_SCHEMA = pa.schema([pa.field("kind", pa.int8()), pa.field("part", pa.int32()), pa.field("database", pa.string()),
                         pa.field("table", pa.string()), pa.field("segment", pa.int32()), pa.field("rows", pa.binary())])
_SPARK_TYPES = {pa.string(): "string", pa.int8(): "tinyint", pa.int32(): "int", pa.int64(): "long", pa.binary(): "binary",
                pa.bool_(): "boolean"}


def _spark_ddl(schema: pa.Schema) -> str:
    """An Arrow schema as the DDL string ``mapInArrow`` declares its output with."""
    return ", ".join(f"`{f.name}` {_SPARK_TYPES[f.type]}" for f in schema)


_PACK_DDL = _spark_ddl(PACK_SCHEMA)


def _pack(kind: int, blob: bytes, part: int = 0, database: str = "", table: str = "", segment: int = 0) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([{"kind": kind, "part": part, "database": database, "table": table, "segment": segment,
                                        "rows": blob}], schema=PACK_SCHEMA)


def key_shards(rows: pa.Table, parts: int) -> Iterator[tuple[int, pa.Table]]:
    """``rows`` split by a stable hash of their key: every change of a key lands in one shard."""
    if rows.num_rows == 0:
        return
    shard = np.fromiter((zlib.crc32(k) for k in rows.column("key").to_pylist()), np.uint32, rows.num_rows) % parts
    for part in np.unique(shard).tolist():
        yield part, rows.filter(pa.array(shard == part))


class SparkPlane:
    """Rows move between executors through Spark shuffles; the driver collects aggregates only."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark

    @property
    def parallelism(self) -> int:
        return max(2, self.spark.sparkContext.defaultParallelism * 2)

    def fold(self, config: PipelineConfig, paths: Sequence[str], window: FoldWindow, schemas: Mapping[int, bytes]) -> SparkFold:
        self.spark.sparkContext.environment.update(credentials.executor_environment_of_registered())
        return SparkFold(self, config, list(paths), window, schemas)


class SparkFold(_NetSchemas):
    def __init__(self, plane: SparkPlane, config: PipelineConfig, paths: list[str], window: FoldWindow,
                 schemas: Mapping[int, bytes]) -> None:
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        self.plane = plane
        self.schemas = schemas
        spark = plane.spark
        self._cached: list[Any] = []
        if not paths:
            self.folded = None
            self.outcome = FoldOutcome([], {}, 0)
            return
        # A shard per change-log file at least: a segment holds at most segment_max_messages
        # changes, so a fold task holds about one segment's rows whatever the run's size.
        parts = max(plane.parallelism, len(paths))

        def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in batches:
                for selected in read_change_log(config, batch.column("path").to_pylist(), window):
                    yield _pack(COUNTS, to_ipc(window_counts(selected)))
                    applied = selected.filter(pc.equal(selected.column("state"), APPLY))
                    for part, rows in key_shards(applied, parts):
                        yield _pack(ROWS, to_ipc(rows), part)

        def fold(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            packs = [from_ipc(blob) for batch in batches for blob in batch.column("rows").to_pylist()]
            if not packs:
                return
            summaries = []
            for summary, rows in net_groups(fold_rows(pa.concat_tables(packs))):
                summaries.append(summary)
                yield _pack(NET, to_ipc(rows), 0, summary.database, summary.table, summary.segment)
            yield _pack(SUMMARY, pickle.dumps(summaries))

        files = spark.createDataFrame([(p,) for p in paths], "path string").repartition(min(len(paths), plane.parallelism))
        read_packs = files.mapInArrow(read, _PACK_DDL).persist(StorageLevel.MEMORY_AND_DISK)
        self._cached.append(read_packs)
        kind = F.col("kind")
        pending, skipped, applied = add_counts(from_ipc(r["rows"]) for r in read_packs.filter(kind == COUNTS).select("rows").collect())
        folded = (read_packs.filter(kind == ROWS).repartition(parts, "part").mapInArrow(fold, _PACK_DDL)
                  .persist(StorageLevel.MEMORY_AND_DISK))
        self._cached.append(folded)
        self.folded = folded.filter(kind == NET)
        summaries = merge_summaries(s for r in folded.filter(kind == SUMMARY).select("rows").collect() for s in pickle.loads(r["rows"]))
        self.outcome = FoldOutcome(summaries, pending, skipped, applied)

    def rewrite(self, requests: Sequence[RewriteRequest]) -> list[list[FileRewrite]]:
        """One Spark job for every request: the folded rows of the requested (table, segment)s are
        routed per request, shuffled by (request, group) and each group rewritten by one task."""
        if self.folded is None or not requests:
            return [[] for _ in requests]
        index = {(r.database, r.table, r.segment): i for i, r in enumerate(requests)}
        targets = [r.target for r in requests]

        def routed(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in batches:
                for database, table, segment, blob in zip(*(batch.column(c).to_pylist() for c in ("database", "table", "segment", "rows"))):
                    request = index.get((database, table, segment))
                    if request is not None:
                        yield from route(from_ipc(blob), targets[request], request).to_batches()

        def grouped(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            return run_groups(batches, targets)

        rows = (self.folded.mapInArrow(routed, _spark_ddl(ROUTED_SCHEMA))
                .repartition(self.plane.parallelism, "request", "group").sortWithinPartitions("request", "group")
                .mapInArrow(grouped, _spark_ddl(RESULT_SCHEMA)).collect())
        return results([pa.RecordBatch.from_pylist([r.asDict() for r in rows], schema=RESULT_SCHEMA)], len(requests))

    def close(self) -> None:
        for df in self._cached:
            df.unpersist()
        self._cached.clear()
