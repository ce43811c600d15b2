"""Where a run's row work happens: Spark executors (``SparkPlane``) or this process (``LocalPlane``).

Both run the same functions on Arrow data -- ``fold.select.select``, ``window_counts``,
``iceberg.upsert.route`` / ``run_groups`` -- and differ only in how rows get to them: Spark
shuffles by key and by (request, file group) across executors, and folds per key in the JVM
(``net_change.greatest_per_key_spark``); the local plane sorts one in-memory table and folds it
with ``net_change.greatest_per_key`` (tiny runs, the fast tests, the demo) -- the one rule, held
equal by a test. The driver gets back aggregates (pending offsets, counts, one summary per table
and DDL segment) and ``FileRewrite``s (file metadata), never rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from cdc_codecs import ColumnType
from spark import credentials
from spark.config import PipelineConfig
from spark.decode.changelog import CHANGE_LOG_SCHEMA, decode_schema
from spark.fold.select import APPLY, PENDING, SELECTED_FIELDS, SKIPPED, FoldWindow, select
from spark.iceberg.rewrite import FileRewrite
from spark.iceberg.upsert import RESULT_SCHEMA, ROUTED_SCHEMA, UpsertTarget, group_sorted, results, route, run_groups
from spark.net_change import ORDER_COLUMNS, Order, greatest_per_key, greatest_per_key_spark, sort_for_fold
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
        applied_rows = selected.filter(pc.equal(selected.column("state"), APPLY))
        folded = pa.Table.from_batches(list(greatest_per_key(sort_for_fold(applied_rows).to_batches())), applied_rows.schema) \
            if applied_rows.num_rows else applied_rows
        summaries = []
        for group in _groups(folded):
            g = folded.filter(group[1])
            self.net[group[0]] = g
            written = g.filter(pc.invert(g.column("deletes")))
            summaries.append(NetSummary(*group[0], g.num_rows, int(pc.sum(g.column("deletes")).as_py() or 0), _first_order(g),
                                        _ids(g.column("schema_id")), _ids(written.column("schema_id"))))
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

# The selected change-log rows as Spark sees them: the change log's Arrow schema and the columns
# ``select`` adds, in Spark's type names (one schema, derived, so the two cannot drift apart).
SELECTED_SCHEMA = pa.schema([*CHANGE_LOG_SCHEMA, *SELECTED_FIELDS])
_SPARK_TYPES = {pa.string(): "string", pa.int8(): "tinyint", pa.int32(): "int", pa.int64(): "long", pa.binary(): "binary",
                pa.bool_(): "boolean"}


def _spark_ddl(schema: pa.Schema) -> str:
    """An Arrow schema as the DDL string ``mapInArrow`` declares its output with."""
    return ", ".join(f"`{f.name}` {_SPARK_TYPES[f.type]}" for f in schema)


_SELECTED_DDL = _spark_ddl(SELECTED_SCHEMA)


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

        def count(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in batches:
                for table in read_change_log(config, batch.column("path").to_pylist(), window):
                    yield from window_counts(table).to_batches()

        def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in batches:
                for table in read_change_log(config, batch.column("path").to_pylist(), window):
                    applied = table.filter(pc.equal(table.column("state"), APPLY))
                    yield from applied.select(SELECTED_SCHEMA.names).cast(SELECTED_SCHEMA).to_batches()

        # The change log is read twice by Python (Parquet reads are cheap): once for the counts,
        # once for the rows to apply, which reach the JVM once and are folded there, without
        # caching every selected row.
        files = spark.createDataFrame([(p,) for p in paths], "path string").repartition(min(len(paths), plane.parallelism))
        pending, skipped, applied = add_counts([files.mapInArrow(count, _spark_ddl(COUNTS_SCHEMA)).toArrow()])
        folded = greatest_per_key_spark(files.mapInArrow(read, _SELECTED_DDL), plane.parallelism) \
            .persist(StorageLevel.MEMORY_AND_DISK)
        self._cached.append(folded)
        self.folded = folded
        summaries = []
        sid, deletes = F.col("schema_id"), F.col("deletes")
        for r in folded.groupBy("database", "table", "segment").agg(
            F.count(F.lit(1)).alias("keys"), F.sum(deletes.cast("int")).alias("deletes"),
            F.min(F.struct(*ORDER_COLUMNS)).alias("first"),
            F.collect_set(sid).alias("ids"), F.collect_set(F.when(~deletes, sid)).alias("written_ids"),
        ).collect():
            summaries.append(NetSummary(r["database"], r["table"], r["segment"], r["keys"], r["deletes"] or 0, tuple(r["first"]),
                                        tuple(sorted(r["ids"])), tuple(sorted(r["written_ids"]))))
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
                rows = pa.Table.from_batches([batch])
                for (database, table, segment), mask in _groups(rows):
                    request = index.get((database, table, segment))
                    if request is not None:
                        yield from route(rows.filter(mask), targets[request], request).to_batches()

        def grouped(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            return run_groups(batches, targets)

        rewrites = (self.folded.mapInArrow(routed, _spark_ddl(ROUTED_SCHEMA))
                    .repartition(self.plane.parallelism, "request", "group").sortWithinPartitions("request", "group")
                    .mapInArrow(grouped, _spark_ddl(RESULT_SCHEMA)).toArrow())
        return results(rewrites.to_batches(), len(requests))

    def close(self) -> None:
        for df in self._cached:
            df.unpersist()
        self._cached.clear()
