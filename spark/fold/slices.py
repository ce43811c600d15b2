"""A run's fold, one key slice at a time: the same Arrow code on a Spark executor or in process.

A *slice* is a range of ``net_change.key_hash``'s 32-bit space. Every effect on one key of one
table has the same hash, whichever partition, segment or run it came from, so a slice folds
alone: its counts, net change and summaries are exactly its share of the whole run's, and the
driver adds the shares up (``add_counts``, ``merge_summaries``).

``read_slice`` reads, of each change-log file, only the row groups whose ``key_hash``
statistics meet the slice (each write of the change log is sorted by key hash into row groups
of disjoint hash ranges, ``spark.decode.changelog``), keeps the slice's rows and selects the
run's window (``select``). ``fold_slice`` counts them and keeps, per (table, DDL segment, key),
the greatest change (``net_change.greatest``, the one fold rule) -- for a key-less
table, the count of copies of the image (``net_change.multiset_net``). The Spark plane runs
one task per slice; the local plane folds one slice covering everything.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from spark.archive import records
from spark.archive.records import damaged_file
from spark.decode.changelog import CHANGE_LOG_SCHEMA
from spark.fold.select import APPLY, PENDING, SELECTED_FIELDS, SKIPPED, FoldWindow, select
from spark.core.keys import Order
from spark.fold.net_change import COUNT, ORDER_COLUMNS, greatest, multiset_net, with_count
from spark.archive.storage import Storage

PKey = tuple[str, int]
HASH_SPACE = 1 << 32  # key_hash is a CRC-32


@dataclass(frozen=True)
class Slice:
    """Slice ``index`` of ``count`` equal ranges of the key-hash space."""

    index: int
    count: int

    @property
    def bounds(self) -> tuple[int, int]:
        return self.index * HASH_SPACE // self.count, (self.index + 1) * HASH_SPACE // self.count


EVERYTHING = Slice(0, 1)
# The rows ``select`` gives: the change log's columns and those it adds; a net change's rows: those
# and how many copies each writes or deletes.
SELECTED_SCHEMA = pa.schema([*CHANGE_LOG_SCHEMA, *SELECTED_FIELDS])
NET_SCHEMA = SELECTED_SCHEMA.append(COUNT)


@dataclass(frozen=True)
class NetSummary:
    """One table's net change in one DDL segment of the run (or of one slice of it), as counts."""

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
class FoldedSlice:
    """What folding one slice gives: its net change (rows) and, for the driver, counts and summaries."""

    net: pa.Table  # one row per (table, DDL segment, key): the greatest applied change
    counts: pa.Table  # COUNTS_SCHEMA
    summaries: list[NetSummary] = field(default_factory=list)


def read_slice(storage: Storage, paths: Iterable[str], window: FoldWindow, part: Slice = EVERYTHING) -> Iterator[pa.Table]:
    """The selected rows of one slice of these change-log files (runs on an executor).

    Raises:
        CorruptArchiveFile: a file that is not a change log (Arrow refuses it, or other columns),
        naming it (``records.damaged_file``; an ``OSError`` of the storage stays the storage's).
    """
    lo, hi = part.bounds
    for path in paths:
        where = f"{storage.url}/{path}"
        with storage.arrow_fs.open_input_file(storage.arrow_path(path)) as f, damaged_file(where, "change log"):
            source = pq.ParquetFile(f)
            records.check_columns(source.schema_arrow, CHANGE_LOG_SCHEMA, where, "change log")
            groups = slice_row_groups(source.metadata, lo, hi) if part.count > 1 else list(range(source.num_row_groups))
            if not groups:
                continue
            rows = source.read_row_groups(groups)
            rows.validate(full=True)  # Arrow reads text without checking it is UTF-8
        if part.count > 1:
            hashes = rows.column("key_hash")
            rows = rows.filter(pc.and_(pc.greater_equal(hashes, lo), pc.less(hashes, hi)))
        yield select(rows, window)


def read_net_change(storage: Storage, path: str) -> pa.Table:
    """A slice's net change as the fold left it in the archive for the rewrite job (read whole).

    Raises:
        CorruptArchiveFile: not a net change (damaged, other columns), naming the file.
    """
    return records.parquet(storage.read(path), NET_SCHEMA, f"{storage.url}/{path}", "net change")


def slice_row_groups(metadata: pq.FileMetaData, lo: int, hi: int) -> list[int]:
    """The row groups of a change-log file whose key-hash range meets [lo, hi) (all of them without
    statistics): what a slice reads, in a run's fold and in the change feed's (``spark.query.changes_log``)."""
    column = metadata.schema.names.index("key_hash")
    keep = []
    for i in range(metadata.num_row_groups):
        stats = metadata.row_group(i).column(column).statistics
        if stats is None or not stats.has_min_max or (stats.min < hi and stats.max >= lo):
            keep.append(i)
    return keep


def fold_slice(selected: Iterable[pa.Table]) -> FoldedSlice:
    """Count the selected rows, then fold the applied ones: one net row per (table, segment, key)
    -- the greatest change of a keyed table's key, the count of copies of a key-less table's image."""
    counts, applied = [], []
    for table in selected:
        counts.append(window_counts(table))
        applied.append(table.filter(pc.equal(table.column("state"), APPLY)))
    if not applied:
        return FoldedSlice(NET_SCHEMA.empty_table(), COUNTS_SCHEMA.empty_table())
    rows = pa.concat_tables(applied)
    keyless = pc.greater_equal(rows.column("run"), 0)
    if pc.any(keyless).as_py():
        keyed = with_count(greatest(rows.filter(pc.invert(keyless))))
        net = pa.concat_tables([keyed, multiset_net(rows.filter(keyless))])
    else:
        net = with_count(greatest(rows))
    return FoldedSlice(net, pa.concat_tables(counts), summarise(net))


# ----------------------------------------------------------------------------- counts

# What a run counts of the rows it selects: per partition and table, the first offset waiting for a
# later run, the redeliveries skipped and the changes applied (``first``: a change's first key
# effect). Each slice counts its own rows; ``add_counts`` adds the slices up on the driver.
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


# ----------------------------------------------------------------------------- summaries


def net_groups(net: pa.Table) -> Iterator[tuple[tuple[str, str, int], pa.Array]]:
    """Each (database, table, DDL segment) of a net change, with the mask of its rows."""
    if net.num_rows == 0:
        return
    for k in net.group_by(["database", "table", "segment"]).aggregate([]).to_pylist():
        mask = pc.and_(pc.and_(pc.equal(net.column("database"), k["database"]), pc.equal(net.column("table"), k["table"])),
                       pc.equal(net.column("segment"), k["segment"]))
        yield (k["database"], k["table"], k["segment"]), mask


def summarise(net: pa.Table) -> list[NetSummary]:
    summaries = []
    for (database, table, segment), mask in net_groups(net):
        g = net.filter(mask)
        written = g.filter(pc.invert(g.column("deletes")))
        summaries.append(NetSummary(database, table, segment, g.num_rows, int(pc.sum(g.column("deletes")).as_py() or 0),
                                    _first_order(g), _ids(g.column("schema_id")), _ids(written.column("schema_id"))))
    return summaries


def merge_summaries(parts: Iterable[NetSummary]) -> list[NetSummary]:
    """The slices' summaries of each (table, segment) added up, in (database, table, segment) order."""
    merged: dict[tuple[str, str, int], NetSummary] = {}
    for s in parts:
        key = (s.database, s.table, s.segment)
        m = merged.get(key)
        merged[key] = s if m is None else NetSummary(
            s.database, s.table, s.segment, m.keys + s.keys, m.deletes + s.deletes, min(m.first, s.first),
            tuple(sorted({*m.schema_ids, *s.schema_ids})), tuple(sorted({*m.written_schema_ids, *s.written_schema_ids})))
    return [merged[k] for k in sorted(merged)]


def _first_order(rows: pa.Table) -> Order:
    ordered = rows.select(list(ORDER_COLUMNS)).sort_by([(c, "ascending") for c in ORDER_COLUMNS]).slice(0, 1).to_pylist()[0]
    return tuple(ordered[c] for c in ORDER_COLUMNS)  # type: ignore[return-value]


def _ids(column: pa.ChunkedArray) -> tuple[int, ...]:
    return tuple(sorted(pc.unique(column).to_pylist()))



