"""Decode once: raw segments -> change log (Parquet) + side outputs (JSON), per decoder version.

Each raw segment is decoded exactly once per decoder version, in offset order within its
partition; the decoder starts every segment from the ``DecoderState`` the segment before it
left (announced schemas, the derived clock), so a segment decodes the same whether it follows
its predecessor in one task or is derived again alone. Executors write the rows; the driver
(``ensure_change_log``) sees only side outputs. See docs/data-plane.md, section 2.

Change-log rows: one per *key effect* of a row change (an update that changes the key has
two: the old key deleted, the new one written), each with its ``key_hash``; a file holds
the segment's rows in writes of up to ROW_GROUP rows in offset order, each write sorted by
``key_hash`` into row groups of disjoint hash ranges.

A row of a table without a primary key also names its *run* (``run``; -1 for a keyed table's):
the offset of the first row of the offset-contiguous rows of its commitTs around it in the
partition, as far as its segment shows (a run cut by the segment's start begins there; the side
output's ``runs`` lets a run link it to the segment before). A transaction's rows in one
partition are one run; a re-sent copy of it is another; the fold counts a key-less change once
per copy (``net_change.multiset_net``).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from cdc_codecs import (
    DECODER_VERSION,
    ColumnType,
    DdlChange,
    DecodeError,
    Op,
    RawMessage,
    RowChange,
    SourcePosition,
    TidelakeError,
    get_decoder,
    protocol_spec,
    stored_type,
)
from spark.runtime import credentials
from spark.archive import layout, records
from spark.config import PipelineConfig
from spark.decode.batch import CanalBatch
from spark.decode.clock import CommitTsClock, DerivedClock
from spark.archive.records import CorruptArchiveFile
from spark.decode.effect import CorruptChangeValue, decode_effect, encode_effect, image_encoder
from spark.archive.manifest import SegmentRef, segment_batches
from spark.decode.side_output import DecoderState, SegmentRuns, SideOutput, read_side_output
from spark.core.keys import change_effects, key_bytes, key_hash, table_seed
from spark.archive.storage import AlreadyExists, Storage, open_storage
from spark.runtime.tasks import no_cyclic_gc, sized

__all__ = [
    "CHANGE_LOG_FORMAT", "CHANGE_LOG_SCHEMA", "ChangeLogError", "ChangeLogTask", "DecoderState", "SegmentRef", "SideOutput",
    "decode_effect", "decode_schema", "decode_segments", "decoder_version", "encode_effect", "ensure_change_log",
    "read_change_log", "read_side_output", "schema_id", "segments_carry_state",
]

PartitionKey = tuple[str, int]

# Raw messages read per batch, and change-log rows buffered per write: a segment may hold
# hundreds of thousands of messages, and each row carries a change of a few hundred bytes.
# Each write is sorted by ``key_hash`` and cut into HASH_RANGES row groups, so the row groups of
# one write cover disjoint hash ranges and a fold slice (a hash range) reads ~1/slices of them.
# 30,000 messages a batch: the column-wise path's work per table schema a batch (~950 numpy and
# Arrow calls) costs ~0.35 us a message less than at 10,000 (measured over the bench archive, its
# values made objects of a slice at a time: a whole batch's at once made larger batches slower).
READ_BATCH = 30_000
# A segment's first read batch is cut after this many messages: the column-wise path meets its
# tables' schemas there and reads the rest by their schema structs (spark/decode/batch.py), which
# a batch's messages only get from the batch after the one that met them.
FIRST_BATCH = 1_000
ROW_GROUP = 20_000
HASH_RANGES = 16

CHANGE_LOG_SCHEMA = pa.schema([
    ("topic", pa.string()),
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("index", pa.int32()),
    ("commit_ts", pa.int64()),
    ("database", pa.string()),
    ("table", pa.string()),
    ("key", pa.binary()),
    ("deletes", pa.bool_()),
    ("first", pa.bool_()),
    ("change", pa.binary()),
    ("schema_id", pa.int64()),
    ("key_hash", pa.int64()),
    ("run", pa.int64()),
])

# The change log's own format, part of its directory name next to the decoder version. 2: rows
# name their table schema by ``schema_id`` and the side output holds the schemas (1 carried the
# pickled schema in every row, ~0.5 KB a row through every shuffle); ``change`` is MessagePack
# (``spark.decode.effect``), not a pickle. 3: rows carry ``net_change.key_hash`` and each write
# is sorted by it into row groups of disjoint hash ranges (fold slices read only theirs). 4: key
# bytes of decimals keep every digit (3 rounded non-integral ones to 28 significant digits, so
# wider keys that differ only past them folded as one key): change logs derive again.
# 5: no pickle anywhere: ``change`` values, side-output DDL, errors and schemas are documented
# encodings (docs/archive.md); rows of key-less tables name their run (``run``) and count once
# per copy of a transaction (4 folded identical rows as one), and a key-less UPDATE always
# deletes its before-image.
CHANGE_LOG_FORMAT = 5
KEYED = -1  # ``run`` of a keyed table's row
UNNUMBERED = -2  # a key-less table's row before ``_number_runs``


def encode_schema(key_columns: tuple[str, ...], column_types: Mapping[str, ColumnType] | None) -> bytes:
    """A change's schema as the side output keeps it (docs/archive.md): compact JSON of its key
    columns and its columns' MySQL types in order (``null`` where the protocol carries none)."""
    columns = [[name, str(ct)] for name, ct in column_types.items()] if column_types is not None else None
    return orjson.dumps({"key_columns": list(key_columns), "columns": columns})


def _schema_id_of(key_columns: tuple[str, ...], column_types: Mapping[str, ColumnType] | None) -> int:
    return schema_id(encode_schema(key_columns, column_types))


def decode_schema(blob: bytes) -> tuple[tuple[str, ...], dict[str, ColumnType] | None]:
    """A side output's schema (``SideOutput.schemas``): a change's key columns and column types."""
    doc = orjson.loads(blob)
    columns = doc["columns"]
    types = {name: stored_type(text) for name, text in columns} if columns is not None else None
    return tuple(doc["key_columns"]), types


def schema_id(blob: bytes) -> int:
    """The ``schema_id`` of an encoded schema: a 64-bit digest, so segments decoded apart agree."""
    return int.from_bytes(hashlib.blake2b(blob, digest_size=8).digest(), "little", signed=True)


# Runs select by offset and commitTs, slices by key hash: statistics on those; dictionaries on
# the repeated names.
_STATISTICS = ["topic", "partition", "offset", "index", "commit_ts", "database", "table", "key_hash"]
_DICTIONARY = ["topic", "database", "table"]
# Encodings only (readers see the same rows): the positional integer columns delta-encoded (a
# write's rows are sorted by hash: its hashes' deltas are small, its offsets', commitTs' and any
# run's stay within the write's span, and a constant column takes a few bytes a page), and zstd
# only where it still pays: ``change``, ``key``, ``schema_id`` (a few 64-bit digests, repeated:
# PLAIN, which zstd folds to ~2 bits a row) and the commitTs' deltas. The others encode small
# already (dictionary indices, delta-packed integers, bit-packed booleans): zstd over them cost a
# fifth of ``write_table``, and without it the bench's files came out 0.3% smaller, not larger.
_ENCODING = {name: "DELTA_BINARY_PACKED" for name in ("partition", "offset", "index", "commit_ts", "key_hash", "run")}
_COMPRESSION = {f.name: "zstd" if f.name in ("commit_ts", "key", "change", "schema_id") else "none" for f in CHANGE_LOG_SCHEMA}


class ChangeLogError(TidelakeError):
    """The change log cannot be built as asked (a segment outside the known history, an unknown topic)."""


def decoder_version(protocol: str) -> str:
    """The name of one protocol's decoder output: a change log is kept per decoder version and
    change-log format (``<protocol>-<DECODER_VERSION>-f<CHANGE_LOG_FORMAT>``)."""
    return f"{protocol}-{DECODER_VERSION}-f{CHANGE_LOG_FORMAT}"


@dataclass(frozen=True)
class ChangeLogTask:
    """Decode consecutive raw segments of one partition, starting from ``state``.

    ``config`` is ``credentials.task_config``'s: no secrets travel inside a task.
    """

    config: PipelineConfig
    topic: str
    partition: int
    segments: tuple[SegmentRef, ...]
    state: DecoderState


# ---------------------------------------------------------------- executors


class ChangeLogWriter:
    """Streams change-log rows of one segment into Parquet, a row group at a time."""

    def __init__(self, storage: Storage, path: str) -> None:
        self._out = storage.open_output(path)
        self._writer = pq.ParquetWriter(self._out, CHANGE_LOG_SCHEMA, compression=_COMPRESSION, use_dictionary=_DICTIONARY,
                                        write_statistics=_STATISTICS, column_encoding=_ENCODING)
        # A write's rows in order: the column-wise path's as Arrow tables, the per-change path's as
        # tuples (one append per row) in ``_rows``, each run of them placed in ``_chunks`` by its
        # (start, stop) there, so a write builds one Arrow table of them, not one per run.
        self._rows: list[tuple[Any, ...]] = []
        self._chunks: list[pa.Table | tuple[int, int]] = []
        self._placed = 0  # rows of ``_rows`` placed in ``_chunks``
        self._pending = 0  # rows of the tables in ``_chunks``
        self.rows = 0
        # Decoders share one column-types mapping per table schema: encoded once per mapping.
        self._schemas: dict[tuple[int, tuple[str, ...]], tuple[Any, int]] = {}
        self.schemas: dict[int, bytes] = {}  # schema_id -> encoded schema, for the side output
        self._tables: dict[tuple[str, str], tuple[Any, tuple[str, ...], int, int, Callable[[Op, Any], bytes]]] = {}  # ``_table``
        self._encoders: dict[int, Callable[[Op, Any], bytes]] = {}  # schema_id -> image_encoder
        # Runs: (offset, commitTs) of the segment's first row, and of its last row with its run.
        self._first: tuple[int, int] | None = None
        self._last: tuple[int, int, int] | None = None
        self._keyless = False  # the buffered rows hold a key-less table's

    @property
    def runs(self) -> SegmentRuns | None:
        if self._first is None or self._last is None:
            return None
        return SegmentRuns(*self._first, *self._last)

    def _schema(self, change: RowChange) -> int:
        ident = (id(change.column_types), change.key_columns)
        cached = self._schemas.get(ident)
        if cached is None or cached[0] is not change.column_types:
            if len(self._schemas) >= 1024:
                self._schemas.clear()
            blob = encode_schema(change.key_columns, change.column_types)
            sid = schema_id(blob)
            self.schemas.setdefault(sid, blob)
            cached = self._schemas[ident] = (change.column_types, sid)
        return cached[1]

    def _table(self, change: RowChange) -> tuple[Any, tuple[str, ...], int, int, Callable[[Op, Any], bytes]]:
        """(column types, key columns, ``schema_id``, ``key_hash`` seed, image encoder) of the change's
        table, kept per table while its changes share the decoder's column-types mapping and key columns."""
        schema = self._schema(change)
        entry = (change.column_types, change.key_columns, schema, table_seed(change.database, change.table),
                 self._encoder(schema, change.column_types))
        if len(self._tables) >= 1024:
            self._tables.clear()
        self._tables[(change.database, change.table)] = entry
        return entry

    def _encoder(self, schema: int, column_types: Mapping[str, ColumnType] | None) -> Callable[[Op, Any], bytes]:
        """The compiled ``image_encoder`` of a table schema, by its ``schema_id``: compiled once per
        schema, whether the decoder shares one column-types mapping per schema (Canal JSON) or
        builds one per event (the Open protocol, DTS Avro)."""
        if column_types is None:
            return encode_effect
        encoder = self._encoders.get(schema)
        if encoder is None:
            if len(self._encoders) >= 1024:
                self._encoders.clear()
            encoder = self._encoders[schema] = image_encoder(column_types)
        return encoder

    def add(self, change: RowChange) -> None:
        """One row per key effect of the change."""
        op, database, table, _, after, keys, types, commit_ts, p = change[:9]
        entry = self._tables.get((database, table))
        if entry is None or entry[0] is not types or entry[1] != keys:
            entry = self._table(change)
        schema, seed, encode_image = entry[2], entry[3], entry[4]
        topic, partition, offset, index = p
        run = KEYED
        if not keys:
            run, self._keyless = UNNUMBERED, True
        first = True
        rows = self._rows
        for key, deletes in change_effects(change):
            if deletes:
                stored = encode_effect(Op.DELETE, dict(zip(keys, key)) if keys else dict(key))
            else:
                stored = encode_image(op, after)
            kb = key_bytes(key)
            rows.append((topic, partition, offset, index, commit_ts, database, table, kb, deletes, first, stored, schema,
                         key_hash(kb, seed), run))
            first = False
            self.rows += 1
            if len(rows) + self._pending >= ROW_GROUP:
                self._flush()
                rows = self._rows

    def note_schema(self, key_columns: tuple[str, ...], column_types: Mapping[str, ColumnType]) -> int:
        """The ``schema_id`` of a table schema the column-wise path writes rows of, kept for the side output."""
        blob = encode_schema(key_columns, column_types)
        sid = schema_id(blob)
        self.schemas.setdefault(sid, blob)
        return sid

    def add_table(self, table: pa.Table) -> None:
        """Change-log rows already in columns (``CHANGE_LOG_SCHEMA``, keyed tables', in offset order)
        after the rows added so far: written exactly as the same rows added one by one."""
        self._place_rows()
        while table.num_rows:
            take = min(ROW_GROUP - self._pending - len(self._rows), table.num_rows)
            self._chunks.append(table.slice(0, take))
            self._pending += take
            self.rows += take
            table = table.slice(take)
            if self._pending + len(self._rows) >= ROW_GROUP:
                self._flush()

    def _place_rows(self) -> None:
        """Place the per-change rows added since the last table before what follows."""
        if len(self._rows) > self._placed:
            self._chunks.append((self._placed, len(self._rows)))
            self._placed = len(self._rows)

    def _number_runs(self, table: pa.Table) -> pa.Table:
        """Give the buffered key-less rows their ``run`` (they are in offset order), and note the
        last row's: a run goes on while the rows' commitTs stays and their offsets leave no gap
        (a message without rows -- a watermark, a DDL -- ends it)."""
        offsets, stamps = table.column("offset").to_numpy(), table.column("commit_ts").to_numpy()
        if self._first is None:
            self._first = (int(offsets[0]), int(stamps[0]))
        offset, commit_ts, run = self._last if self._last is not None else (-2, None, -1)
        if not self._keyless:  # keyed rows only: the last row's run is all that is needed
            breaks = np.flatnonzero((stamps[1:] != stamps[:-1]) | (offsets[1:] - offsets[:-1] > 1))
            i = int(breaks[-1]) + 1 if len(breaks) else 0
            if i > 0 or int(stamps[0]) != commit_ts or int(offsets[0]) - offset > 1:
                run = int(offsets[i])
            self._last = (int(offsets[-1]), int(stamps[-1]), run)
            return table
        runs = table.column("run").to_pylist()
        for i, (o, ts) in enumerate(zip(offsets.tolist(), stamps.tolist())):
            if ts != commit_ts or o - offset > 1:
                run = o
            offset, commit_ts = o, ts
            if runs[i] == UNNUMBERED:
                runs[i] = run
        self._last = (offset, commit_ts, run)  # type: ignore[assignment]
        self._keyless = False
        return table.set_column(table.schema.get_field_index("run"), "run", pa.array(runs, pa.int64()))

    def _flush(self) -> None:
        self._place_rows()
        if self._chunks:
            rows = _tuple_table(self._rows) if self._rows else None
            chunks = [c if isinstance(c, pa.Table) else rows.slice(c[0], c[1] - c[0]) for c in self._chunks]  # type: ignore[union-attr]
            table = self._number_runs(pa.concat_tables(chunks))  # the take below copies once
            self._chunks, self._rows, self._placed, self._pending = [], [], 0, 0
            table = table.take(_hash_order(table.column("key_hash").to_numpy()))
            self._writer.write_table(table, row_group_size=-(-table.num_rows // HASH_RANGES))

    def close(self) -> None:
        self._flush()
        self._writer.close()
        self._out.close()


def _hash_order(hashes: np.ndarray) -> np.ndarray:
    """``np.argsort(hashes, kind="stable")``, ~4x cheaper: numpy's vectorized quicksort, then the
    rows of each run of equal hashes (one key's rows in a write) put back in row order."""
    order = np.argsort(hashes)
    ranked = hashes[order]
    tie = ranked[1:] == ranked[:-1]
    if tie.any():
        member = np.zeros(len(order), bool)
        member[1:] = tie
        member[:-1] |= tie
        at = np.flatnonzero(member)
        run = np.cumsum(np.concatenate(([True], ranked[at[1:]] != ranked[at[:-1]])))
        n = len(order)
        order[at] = np.sort(run * n + order[at]) % n  # by run, then row
    return order


def _tuple_table(rows: list[tuple[Any, ...]]) -> pa.Table:
    columns = zip(*rows)  # transposed in C
    return pa.Table.from_arrays([pa.array(c, f.type) for c, f in zip(columns, CHANGE_LOG_SCHEMA)], schema=CHANGE_LOG_SCHEMA)


_RAW_COLUMNS = ("offset", "timestamp_ms", "key", "value", "headers")


_UNSET: Any = object()
_ONE_BY_ONE = 64  # a column's values a batch reads one by one (``RawBatch.item``) before converting it whole


class RawBatch:
    """One read batch of a raw segment: its columns as Python lists, each converted when first
    asked for (the column-wise path reads only offsets and values; the per-change path's
    messages the rest)."""

    __slots__ = ("_batch", "_columns", "_taken", "one_by_one")

    def __init__(self, batch: pa.RecordBatch) -> None:
        self._batch = batch
        self._columns: dict[str, list[Any] | None] = {}
        self._taken: dict[str, int] = {}
        self.one_by_one = _ONE_BY_ONE  # the values of a column read one by one before converting it whole

    def __len__(self) -> int:
        return self._batch.num_rows

    def column(self, name: str) -> list[Any] | None:
        """A column as a list (``headers``: None when no message of the batch has any: most have none)."""
        try:
            return self._columns[name]
        except KeyError:
            array = self._batch.column(name)
            values = None if name == "headers" and array.null_count == len(array) else array.to_pylist()
            self._columns[name] = values
            return values

    def item(self, name: str, i: int) -> Any:
        """One message's field, as ``column(name)[i]`` (None for ``headers`` when it has none): a
        column-wise batch's few per-change messages read theirs one by one, not whole columns."""
        values = self._columns.get(name, _UNSET)
        if values is _UNSET:
            array = self._batch.column(name)
            if array.null_count == len(array):
                return None
            taken = self._taken.get(name, 0)
            if taken < self.one_by_one:
                self._taken[name] = taken + 1
                return array[i].as_py()
            values = self.column(name)
        return values[i] if values is not None else None

    def offsets(self) -> np.ndarray:
        return self._batch.column("offset").to_numpy()

    def arrow(self, name: str) -> pa.Array:
        """A column as read, an Arrow array."""
        return self._batch.column(name)


def _raw_batches(storage: Storage, segment: SegmentRef) -> Iterator[RawBatch]:
    """A raw segment's messages in offset order, in row-group sized batches."""
    for n, batch in enumerate(segment_batches(storage, segment.path, list(_RAW_COLUMNS), READ_BATCH)):
        if n == 0 and batch.num_rows > 2 * FIRST_BATCH:
            yield RawBatch(batch.slice(0, FIRST_BATCH))
            batch = batch.slice(FIRST_BATCH)
        yield RawBatch(batch)


# Built with tuple.__new__ (a NamedTuple's own __new__ is a Python call, ~0.3 us a message each),
# and a headers tuple only for the messages that have headers.
_message, _position = partial(tuple.__new__, RawMessage), partial(tuple.__new__, SourcePosition)


def _raw_message(topic: str, partition: int, batch: RawBatch, i: int) -> RawMessage:
    item = batch.item
    pairs = item("headers", i)
    return _message((item("key", i), item("value", i), _position((topic, partition, item("offset", i), 0)),
                     tuple((h["key"], h["value"]) for h in pairs) if pairs else (), item("timestamp_ms", i)))


def raw_messages(storage: Storage, topic: str, partition: int, segment: SegmentRef) -> Iterator[RawMessage]:
    """A raw segment's messages in offset order, read in row-group sized batches."""
    message, position = _message, _position
    for batch in _raw_batches(storage, segment):
        if batch.column("headers") is None:
            columns = (batch.column(name) for name in _RAW_COLUMNS[:4])
            for offset, ts, key, value in zip(*columns):  # type: ignore[call-overload]
                yield message((key, value, position((topic, partition, offset, 0)), (), ts))
            continue
        for i in range(len(batch)):
            yield _raw_message(topic, partition, batch, i)


def segment_decoder(topic: Any, state: DecoderState) -> tuple[Any, CommitTsClock | DerivedClock]:
    """The decoder and clock a segment of ``topic`` (a ``TopicConfig``) decodes with, from ``state``."""
    spec = protocol_spec(topic.protocol)
    options: dict[str, Any] = dict(topic.options)
    if _carries_schemas(topic.protocol) and state.schemas:
        options["schemas"] = state.schemas
    decoder = get_decoder(topic.protocol, **options)
    clock = (CommitTsClock(topic.protocol) if spec.carries_commit_ts(topic.options)
             else DerivedClock(topic.protocol, state.clock, state.binlog, spec.binlog_ordered))
    return decoder, clock


def _decode_segment(storage: Storage, task: ChangeLogTask, segment: SegmentRef, state: DecoderState,
                    times: dict[str, float] | None = None, column_wise: bool = True) -> SideOutput:
    """Decode one raw segment from ``state``: write its change log, return its side output.

    ``column_wise=False`` decodes every message by the per-change path (the reference the
    column-wise one is tested against); ``times`` adds CPU seconds per stage (bench decode)."""
    topic = next((t for t in task.config.topics if t.name == task.topic), None)
    if topic is None:
        raise ChangeLogError(f"pipeline {task.config.name}: topic {task.topic!r} is not configured")
    carries_schemas = _carries_schemas(topic.protocol)
    decoder, clock = segment_decoder(topic, state)
    version = decoder_version(topic.protocol)
    parquet, _ = layout.changelog_paths(task.config.name, version, task.topic, task.partition, segment.start, segment.end)
    messages = events = 0
    mark: int | None = None
    ddl: list[DdlChange] = []
    errors: list[DecodeError] = []
    writer = ChangeLogWriter(storage, parquet)
    # TiCDC's Canal-JSON rows take the column-wise path (spark/decode/batch.py); every other
    # message, in its place, this loop's.
    fast = CanalBatch(decoder, task.topic, task.partition, _schema_id_of, writer.note_schema) \
        if column_wise and CanalBatch.applies(decoder, isinstance(clock, CommitTsClock)) else None
    cpu = time.process_time if times is not None else None

    def note(stage: str, started: float) -> float:
        now = cpu()  # type: ignore[misc]
        times[stage] = times.get(stage, 0.0) + now - started  # type: ignore[index]
        return now

    try:
        started = cpu() if cpu else 0.0
        for batch in _raw_batches(storage, segment):
            if cpu:
                started = note("raw read", started)
            n = len(batch)
            messages += n
            table, row_message, done = None, None, 0
            slow: Iterable[int] = range(n)
            if fast is not None:
                try:
                    table, row_message, is_fast = fast.split(batch.offsets(), None, times, batch.arrow("value"))
                except Exception:  # noqa: BLE001 - never a message's error: the per-change path decides
                    table = None
                else:
                    slow = np.flatnonzero(~is_fast).tolist()
                    events += int(is_fast.sum())
                    # The column-wise path read the values itself: a few per-change messages read
                    # theirs one by one (~0.5 us each), not the whole column (~0.2 us a message).
                    if len(slow) <= n // 8:
                        batch.one_by_one = max(_ONE_BY_ONE, len(slow))
                if cpu:
                    started = cpu()
            for i in slow:
                msg = _raw_message(task.topic, task.partition, batch, i)
                try:
                    decoded, proved = clock.stamp(decoder.decode(msg))
                except DecodeError as exc:
                    if exc.raw is None:
                        exc.raw = msg
                    errors.append(exc)
                    continue
                events += len(decoded)
                if proved is not None and (mark is None or proved > mark):
                    mark = proved
                for e in decoded:
                    if isinstance(e, RowChange):
                        if table is not None:  # the column-wise rows of the messages before this one first
                            cut = int(np.searchsorted(row_message, i))
                            if cut > done:
                                writer.add_table(table.slice(done, cut - done))
                                done = cut
                        writer.add(e)
                    elif isinstance(e, DdlChange):
                        ddl.append(e)
            # Most per-change messages (watermarks, DDL) have no rows: the batch's column-wise rows
            # then go to the writer whole, not cut around each of them.
            if table is not None and done < table.num_rows:
                writer.add_table(table.slice(done) if done else table)
            if cpu:
                started = note("per-change path, sort, Parquet", started)
        # Messages still waiting for a schema at the segment's end (Simple) are undecodable here.
        errors.extend(decoder.finish())
    finally:
        writer.close()
    if cpu:
        note("per-change path, sort, Parquet", started)
    after = DecoderState(tuple(decoder.known_schemas()) if carries_schemas else (), clock.value, clock.binlog)
    return SideOutput(task.topic, task.partition, segment.start, segment.end, version, messages, events,
                      writer.rows, mark, tuple(ddl), tuple(errors), after, dict(sorted(writer.schemas.items())),
                      writer.runs)


def decode_segments(task: ChangeLogTask, times: dict[str, float] | None = None, column_wise: bool = True,
                    ) -> list[SideOutput]:
    """Decode a partition's segments in order, carrying decoder state (runs on an executor).

    A segment whose side output exists is not decoded again: its side output is read and its
    state carried on. Otherwise the change-log Parquet is written (replacing what a crashed
    attempt left), then the side output, create-only; if another attempt created it meanwhile,
    that one is returned.
    """
    storage = open_storage(credentials.resolve(task.config).storage)
    protocol = next((t.protocol for t in task.config.topics if t.name == task.topic), None)
    if protocol is None:
        raise ChangeLogError(f"pipeline {task.config.name}: topic {task.topic!r} is not configured")
    version = decoder_version(protocol)
    state = task.state
    out: list[SideOutput] = []
    with no_cyclic_gc():
        for segment in task.segments:
            side_path = _side_path(task.config.name, version, task.topic, task.partition, segment)
            if storage.exists(side_path):
                side = read_side_output(storage, side_path)
            else:
                data = _decode_segment(storage, task, segment, state, times, column_wise).to_json()
                try:
                    storage.create(side_path, data)
                except AlreadyExists:
                    data = storage.read(side_path)
                # The next segment starts from the state as stored, exactly as a later re-derivation would.
                side = SideOutput.from_json(data, f"{storage.url}/{side_path}")
            out.append(side)
            state = side.state
    return out


# ---------------------------------------------------------------- driver


def ensure_change_log(
    config: PipelineConfig,
    storage: Storage,
    runner: Any,
    needed: Mapping[PartitionKey, Sequence[SegmentRef]],
    history: Mapping[PartitionKey, Sequence[SegmentRef]],
    full_history: Callable[[PartitionKey], Sequence[SegmentRef]] | None = None,
) -> dict[PartitionKey, list[SideOutput]]:
    """The side outputs of the ``needed`` raw segments, decoding those not decoded yet.

    ``needed``: per partition, the raw segments a run reads, in offset order; ``history``:
    every raw segment of each partition the manifests know, in offset order. A partition whose
    needed segments are all decoded costs one ``exists`` and one read per segment. Otherwise,
    when its protocol's segments carry no decoder state (``segments_carry_state``), each segment
    from the first undecoded one is a task of its own; else one task decodes the partition from
    its first undecoded segment, starting from the state the side output
    of the segment before it in ``history`` stored (walking back over missing ones, down to
    the partition's first segment with an empty state). ``history`` may hold only the recent
    segments (a run passes those its checkpoint names); a walk back past its first one then asks
    ``full_history`` for every segment of the partition. ``runner.map`` runs the tasks
    (``LocalRunner``, ``SparkRunner``).

    Raises:
        ChangeLogError: a needed segment is not in the partition's history, or its topic is not configured.
    """
    protocols = {t.name: t.protocol for t in config.topics}
    options = {t.name: t.options for t in config.topics}
    carried = credentials.task_config(config)
    result: dict[PartitionKey, list[SideOutput]] = {}
    tasks: list[ChangeLogTask] = []
    by_range: dict[PartitionKey, dict[tuple[int, int], SideOutput]] = {}  # side outputs past the decoded prefix
    for (topic, partition), segments in needed.items():
        if topic not in protocols:
            raise ChangeLogError(f"pipeline {config.name}: topic {topic!r} is not configured")
        version = decoder_version(protocols[topic])
        decoded = result[(topic, partition)] = []
        for segment in segments:
            path = _side_path(config.name, version, topic, partition, segment)
            if not storage.exists(path):
                break
            decoded.append(read_side_output(storage, path))
        else:
            continue
        undecoded = segments[len(decoded):]
        known = list(history.get((topic, partition), ()))
        _require_known(topic, partition, known, undecoded)
        if not segments_carry_state(protocols[topic], options[topic]):
            # Nothing passes from one segment to the next: a task per segment, so decoding spreads
            # over every executor whatever the topic's partition count, and a lagging partition's
            # backlog decodes side by side. Segments decoded already (after a missing one) are read here.
            for s in undecoded:
                path = _side_path(config.name, version, topic, partition, s)
                if storage.exists(path):
                    by_range.setdefault((topic, partition), {})[(s.start, s.end)] = read_side_output(storage, path)
                else:
                    tasks.append(ChangeLogTask(carried, topic, partition, (s,), DecoderState()))
            continue
        # Some needed segment is not decoded: one task from it to the last needed one.
        start = _start_of_decoding(config.name, storage, version, topic, partition, known, undecoded)
        if start is None and full_history is not None:
            known = list(full_history((topic, partition)))
            start = _start_of_decoding(config.name, storage, version, topic, partition, known, undecoded)
        first, state = start if start is not None else (0, DecoderState())
        last = next(i for i, s in enumerate(known) if (s.start, s.end) == (undecoded[-1].start, undecoded[-1].end))
        tasks.append(ChangeLogTask(carried, topic, partition, tuple(known[first:last + 1]), state))
    # Sized by what is decoded, which a decoder fix (a new version: nothing decoded) or a lost
    # change log can make the partition's whole history, whatever the interval holds.
    runner = sized(runner, sum(s.end - s.start for task in tasks for s in task.segments))
    for task, outputs in zip(tasks, runner.map(decode_segments, tasks)):
        by_range.setdefault((task.topic, task.partition), {}).update(((o.start, o.end), o) for o in outputs)
    for key, outputs in by_range.items():
        result[key].extend(outputs[(s.start, s.end)] for s in needed[key][len(result[key]):])
    return result


def _carries_schemas(protocol: str) -> bool:
    """Whether the protocol's decoder learns table schemas from the stream (``DecoderState.schemas``)."""
    return "schemas" in protocol_spec(protocol).decoder.options_spec


def segments_carry_state(protocol: str, options: Mapping[str, Any] | None = None) -> bool:
    """Whether decoding a segment of this protocol (with these decoder options) needs the
    ``DecoderState`` the segment before it left: announced schemas, or the derived clock of a
    stream without commitTs. TiCDC's canal-json (with its TiDB extension) and open protocol need
    neither (every message names its commitTs and column types), so their segments decode independently."""
    return _carries_schemas(protocol) or not protocol_spec(protocol).carries_commit_ts(options)


def _start_of_decoding(pipeline: str, storage: Storage, version: str, topic: str, partition: int, known: list[SegmentRef],
                       undecoded: Sequence[SegmentRef]) -> tuple[int, DecoderState] | None:
    """Where in ``known`` a decode task starts, and the state it starts from: just after the last
    decoded segment before the first undecoded one. None when ``known`` runs out first (it may be
    only the recent history); its start is then the partition's start, with an empty state."""
    index = {(s.start, s.end): i for i, s in enumerate(known)}
    first = index[(undecoded[0].start, undecoded[0].end)]
    while first > 0:  # walk back to the last decoded segment: the state to start from
        path = _side_path(pipeline, version, topic, partition, known[first - 1])
        if storage.exists(path):
            return first, read_side_output(storage, path).state
        first -= 1
    return None


def _require_known(topic: str, partition: int, known: Sequence[SegmentRef], undecoded: Sequence[SegmentRef]) -> None:
    ranges = {(s.start, s.end) for s in known}
    for s in undecoded:
        if (s.start, s.end) not in ranges:
            raise ChangeLogError(f"{topic}/{partition}: segment {s.path} [{s.start}, {s.end}) is not in the "
                                 "partition's history")


def undecoded(config: PipelineConfig, storage: Storage, needed: Mapping[PartitionKey, Sequence[SegmentRef]],
              ) -> list[tuple[PartitionKey, SegmentRef]]:
    """The ``needed`` raw segments this tidelake's decoders have not decoded yet (no side output of
    their decoder version): what ``ensure_change_log`` would decode, and so write."""
    versions = {t.name: decoder_version(t.protocol) for t in config.topics}
    return [((topic, partition), s) for (topic, partition), segments in needed.items() for s in segments
            if topic in versions and not storage.exists(_side_path(config.name, versions[topic], topic, partition, s))]


def _side_path(pipeline: str, version: str, topic: str, partition: int, segment: SegmentRef) -> str:
    return layout.changelog_paths(pipeline, version, topic, partition, segment.start, segment.end)[1]


def read_change_log(storage: Storage, paths: Sequence[str]) -> pa.Table:
    """The change-log rows of these Parquet files, in the order given and each in offset order
    (tests and tools), every one checked: the file's columns, and each row's change.

    Raises:
        CorruptArchiveFile: naming the file (and the row's offset, for a change it cannot read).
    """
    tables = []
    for path in paths:
        where = f"{storage.url}/{path}"
        table = records.parquet(storage.read(path), CHANGE_LOG_SCHEMA, where, "change log")
        for offset, index, blob in zip(*(table.column(c).to_pylist() for c in ("offset", "index", "change"))):
            try:
                decode_effect(blob)
            except CorruptChangeValue as exc:
                raise CorruptArchiveFile(f"{where}: damaged change log: the change at offset {offset} [{index}]: {exc}") from None
        tables.append(table.sort_by([("offset", "ascending"), ("index", "ascending"), ("deletes", "descending")]))
    return pa.concat_tables(tables) if tables else CHANGE_LOG_SCHEMA.empty_table()
