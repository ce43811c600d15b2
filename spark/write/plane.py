"""Where a run's row work happens: Spark executors (``SparkPlane``) or this process (``LocalPlane``).

Both run the same functions on Arrow data -- ``fold.slices.read_slice`` / ``fold_slice`` (the
window, the counts, the one fold rule), ``write.upsert.route`` / ``run_groups`` -- and differ
only in how rows get to them. On Spark the fold is cut into key-hash slices, one Python task
each: a slice reads only its row groups of the change log, folds them in Arrow and leaves its
net change in the archive (``layout.net_change_path``) for the rewrite job, which routes it and
shuffles it by (request, file group). The local plane folds one slice covering everything and
keeps its net change in memory (tiny runs, the fast tests, the demo). The driver gets back
counts and summaries per slice and ``FileRewrite``s (file metadata), never rows.
"""

from __future__ import annotations

import functools
import uuid
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.manifest import DataFile

from cdc_codecs import ColumnType
from spark.runtime import credentials
from spark.archive import layout
from spark.archive.records import CorruptArchiveFile
from spark.decode.effect import CorruptChangeValue
from spark.config import PipelineConfig
from spark.decode.changelog import decode_schema
from spark.fold.select import FoldWindow
from spark.fold.slices import (
    EVERYTHING, NetSummary, Slice, add_counts, fold_slice, merge_summaries, net_groups, read_net_change, read_slice,
)
from spark.write.rewrite import FileRewrite, fill_columns
from spark.write.target import TableTarget
from spark.write.upsert import ROUTED_SCHEMA, UpsertTarget, group_sorted, placements, results, route, run_groups
from spark.archive.storage import Storage, open_storage
from spark.runtime.tasks import no_cyclic_gc, on_executor

PKey = tuple[str, int]
TableRef = tuple[str, str]

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


@dataclass(frozen=True)
class FillRequest:
    """Set columns to constants in every row of one table (``ADD COLUMN ... DEFAULT``): each live
    data file is rewritten, its position deletes applied, by one task (``rewrite.fill_columns``)."""

    database: str
    table: str
    target: TableTarget
    files: tuple[DataFile, ...]
    deletes: tuple[tuple[DataFile, ...], ...]  # each file's position delete files (empty: none)
    values: pa.Table  # one row: each filled column's value, in the table's Arrow type

    def tasks(self) -> list[FillTask]:
        return [(self.target, f, self.values, self.deletes[i] if self.deletes else ()) for i, f in enumerate(self.files)]


FillTask = tuple[TableTarget, DataFile, pa.Table, tuple[DataFile, ...]]


def fill_file(task: FillTask) -> FileRewrite:
    """Executor side of a ``FillRequest``: one data file."""
    return fill_columns(*task)


def _fills(requests: Sequence[RewriteRequest | FillRequest]) -> list[tuple[int, FillTask]]:
    """Every file task of the ``FillRequest``s among ``requests``, with the request's index."""
    return [(i, task) for i, r in enumerate(requests) if isinstance(r, FillRequest) for task in r.tasks()]


class Fold(Protocol):
    outcome: FoldOutcome
    where: str  # "driver" or "spark": where the run's rows are worked

    def rewrite(self, requests: Sequence[RewriteRequest | FillRequest]) -> list[list[FileRewrite]]:
        """Each request's file rewrites, all requests in one pass over the executors."""
        ...

    def row_schema(self, database: str, table: str, segment: int) -> tuple[dict[str, ColumnType], tuple[str, ...]]: ...

    def written_column_sets(self, database: str, table: str, segment: int) -> set[frozenset[str]]: ...

    def row_keys(self, database: str, table: str, segment: int) -> set[tuple[str, ...]]: ...

    def close(self) -> None: ...


class _NetSchemas:
    """``row_schema`` from the fold's summaries and the side outputs' schemas: no rows are read."""

    outcome: FoldOutcome
    schemas: Mapping[int, bytes]

    def row_schema(self, database: str, table: str, segment: int) -> tuple[dict[str, ColumnType], tuple[str, ...]]:
        """Column types and key of rows for a table no DDL created: the union over its written rows."""
        summary = self._summary(database, table, segment)
        keys: tuple[str, ...] = ()
        for sid in sorted(summary.schema_ids):
            keys = decode_schema(self.schemas[sid])[0] or keys
        columns: dict[str, ColumnType] = {}
        for sid in sorted(summary.written_schema_ids):
            columns.update(decode_schema(self.schemas[sid])[1] or {})
        return columns, keys

    def written_column_sets(self, database: str, table: str, segment: int) -> set[frozenset[str]]:
        """Each set of columns written rows of a table's DDL segment carry together (one per schema
        of theirs; none where the protocol carries no column types)."""
        summary = self._summary(database, table, segment)
        return {frozenset(decode_schema(self.schemas[sid])[1] or ()) for sid in summary.written_schema_ids}

    def row_keys(self, database: str, table: str, segment: int) -> set[tuple[str, ...]]:
        """The key columns the rows of a table's DDL segment are keyed by (``()``: none carried)."""
        return {decode_schema(self.schemas[sid])[0] for sid in self._summary(database, table, segment).schema_ids}

    def _summary(self, database: str, table: str, segment: int) -> NetSummary:
        return self._summaries[(database, table, segment)]

    @functools.cached_property
    def _summaries(self) -> dict[tuple[str, str, int], NetSummary]:
        """The summaries by (database, table, segment), indexed once (``outcome`` is set when the fold
        is made): every data step of every table asks, and a run may touch thousands of tables."""
        return {(s.database, s.table, s.segment): s for s in self.outcome.summaries}


def _routed(net: pa.Table, index: Mapping[tuple[str, str, int], int], targets: Sequence[UpsertTarget]) -> Iterator[pa.Table]:
    """A net change's rows routed for the requests that ask for their (table, segment)."""
    for group, mask in net_groups(net):
        request = index.get(group)
        if request is not None:
            yield route(net.filter(mask), targets[request], request)


# ----------------------------------------------------------------------------- in process


class LocalPlane:
    def fold(self, config: PipelineConfig, paths: Sequence[str], window: FoldWindow, schemas: Mapping[int, bytes],
             rows: int = 0) -> LocalFold:
        storage = open_storage(credentials.resolve(config).storage)
        return LocalFold(fold_slice(read_slice(storage, paths, window, EVERYTHING)) if paths else None, schemas)


class LocalFold(_NetSchemas):
    where = "driver"

    def __init__(self, folded: Any, schemas: Mapping[int, bytes]) -> None:
        self.schemas = schemas
        self.net: pa.Table | None = None
        if folded is None:
            self.outcome = FoldOutcome([], {}, 0)
            return
        pending, skipped, applied = add_counts([folded.counts])
        self.net = folded.net
        self.outcome = FoldOutcome(folded.summaries, pending, skipped, applied)

    def rewrite(self, requests: Sequence[RewriteRequest | FillRequest]) -> list[list[FileRewrite]]:
        out = self._upserts(requests)
        for i, task in _fills(requests):
            out[i].append(fill_file(task))
        return out

    def _upserts(self, requests: Sequence[RewriteRequest | FillRequest]) -> list[list[FileRewrite]]:
        index = {(r.database, r.table, r.segment): i for i, r in enumerate(requests) if isinstance(r, RewriteRequest)}
        targets = [r.target if isinstance(r, RewriteRequest) else None for r in requests]
        routed = list(_routed(self.net, index, targets)) if self.net is not None and index else []  # type: ignore[arg-type]
        if not routed:
            return [[] for _ in requests]
        packed = group_sorted(pa.concat_tables(routed))
        return results(run_groups(packed.to_batches(), targets), len(requests))  # type: ignore[arg-type]

    def close(self) -> None:
        self.net = None


# ----------------------------------------------------------------------------- on Spark


class SparkPlane:
    """Python tasks on Spark's executors; rows move between them through the archive (net change
    per slice) and one Spark shuffle (routed rows, packed per file group). The driver collects
    counts, summaries and file metadata only.

    Spark's core API (``parallelize``, ``repartitionAndSortWithinPartitions``), as the decode
    stage's ``SparkRunner``: every task is Python working on Arrow, and the first Spark SQL job of
    a session costs ~5.6 s on local[2] (``createDataFrame`` 1.8 s, the first ``mapInArrow`` 4.7 s
    where the next takes 0.8 s) that a run never needs to pay."""

    def __init__(self, context: Any) -> None:
        self.context = context

    @property
    def parallelism(self) -> int:
        return max(2, self.context.defaultParallelism * 2)

    def fold(self, config: PipelineConfig, paths: Sequence[str], window: FoldWindow, schemas: Mapping[int, bytes],
             rows: int = 0) -> SparkFold:
        self.context.environment.update(credentials.executor_environment_of_registered())
        # Two slices per task slot at least; more when a slice would hold over ``fold_slice_rows`` rows.
        return SparkFold(self, config, list(paths), window, schemas, max(self.parallelism, -(-rows // config.fold_slice_rows)))


class SparkFold(_NetSchemas):
    where = "spark"

    def __init__(self, plane: SparkPlane, config: PipelineConfig, paths: list[str], window: FoldWindow,
                 schemas: Mapping[int, bytes], slices: int) -> None:
        self.plane = plane
        self.schemas = schemas
        self.config = config
        self.net_paths: list[str] = []
        if not paths:
            self.outcome = FoldOutcome([], {}, 0)
            return
        # A fresh directory per fold: a crashed run's net change is never read, and orphan cleanup removes it.
        run = uuid.uuid4().hex

        def fold(index: int) -> tuple[int, int, pa.Table, list[NetSummary]]:
            storage = open_storage(credentials.resolve(config).storage)
            with no_cyclic_gc():
                folded = fold_slice(read_slice(storage, paths, window, Slice(index, slices)))
                if folded.net.num_rows:
                    _write_net(storage, layout.net_change_path(config.name, run, index), folded.net)
            return index, folded.net.num_rows, folded.counts, folded.summaries

        reports = plane.context.parallelize(range(slices), slices).map(on_executor(fold)).collect()
        summaries = []
        for index, net_rows, _, slice_summaries in reports:
            summaries += slice_summaries
            if net_rows:
                self.net_paths.append(layout.net_change_path(config.name, run, index))
        pending, skipped, applied = add_counts(counts for _, _, counts, _ in reports)
        self.outcome = FoldOutcome(merge_summaries(summaries), pending, skipped, applied)

    def rewrite(self, requests: Sequence[RewriteRequest | FillRequest]) -> list[list[FileRewrite]]:
        """One Spark job for every net change: each slice's net change is read back and routed per
        request, shuffled by (request, group) and each group rewritten by one task. Fills are one
        more job, a task per data file."""
        out = self._upserts(requests)
        fills = _fills(requests)
        if fills:
            sc = self.plane.context
            slices = min(len(fills), self.plane.parallelism * 4)
            fill = on_executor(lambda pair: (pair[0], fill_file(pair[1])))
            for i, rewrite in sc.parallelize(fills, slices).map(fill).collect():
                out[i].append(rewrite)
        return out

    def _upserts(self, requests: Sequence[RewriteRequest | FillRequest]) -> list[list[FileRewrite]]:
        index = {(r.database, r.table, r.segment): i for i, r in enumerate(requests) if isinstance(r, RewriteRequest)}
        if not self.net_paths or not index:
            return [[] for _ in requests]
        targets = [r.target if isinstance(r, RewriteRequest) else None for r in requests]
        config = self.config

        def routed(path: str) -> Iterator[tuple[tuple[int, str], bytes]]:
            storage = open_storage(credentials.resolve(config).storage)
            net = read_net_change(storage, path)
            with no_cyclic_gc():
                try:
                    for packed in _routed(net, index, targets):
                        yield from zip(zip(packed.column("request").to_pylist(), packed.column("group").to_pylist()),
                                       packed.column("rows").to_pylist())
                except CorruptChangeValue as exc:
                    raise CorruptArchiveFile(f"{storage.url}/{path}: damaged net change: {exc}") from None

        def grouped(pairs: Iterator[tuple[tuple[int, str], bytes]]) -> Iterator[pa.RecordBatch]:
            with no_cyclic_gc():
                yield from run_groups(_packed_batches(pairs), targets)

        placed = placements(targets, self.plane.parallelism)

        def partition(key: tuple[int, str]) -> int:
            return placed.get(key, _group_partition(key))

        sc = self.plane.context
        rewrites = (sc.parallelize(self.net_paths, len(self.net_paths)).flatMap(on_executor(routed))
                    .repartitionAndSortWithinPartitions(self.plane.parallelism, partition)
                    .mapPartitions(on_executor(grouped)).collect())
        return results(rewrites, len(requests))

    def close(self) -> None:
        storage = open_storage(credentials.resolve(self.config).storage)
        for path in self.net_paths:
            storage.delete(path)
        self.net_paths = []


def _group_partition(key: tuple[int, str]) -> int:
    # A group ``placements`` does not list. Not Python's hash of the group name: a stable one,
    # whatever PYTHONHASHSEED the workers have.
    return zlib.crc32(f"{key[0]}/{key[1]}".encode("utf-8", "surrogatepass"))


def _packed_batches(pairs: Iterable[tuple[tuple[int, str], bytes]], rows: int = 64) -> Iterator[pa.RecordBatch]:
    """``ROUTED_SCHEMA`` batches of (request, group) sorted packs, a few packs at a time."""
    chunk: list[tuple[tuple[int, str], bytes]] = []
    for pair in pairs:
        chunk.append(pair)
        if len(chunk) == rows:
            yield _routed_batch(chunk)
            chunk = []
    if chunk:
        yield _routed_batch(chunk)


def _routed_batch(chunk: list[tuple[tuple[int, str], bytes]]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([k[0] for k, _ in chunk], pa.int32()), pa.array([k[1] for k, _ in chunk], pa.string()),
                                       pa.array([b for _, b in chunk], pa.binary())], schema=ROUTED_SCHEMA)


def _write_net(storage: Storage, path: str, net: pa.Table) -> None:
    # Written whole by one task; a retried task writes the same rows again over it.
    with storage.open_output(path) as out:
        pq.write_table(net, out, compression="zstd")
