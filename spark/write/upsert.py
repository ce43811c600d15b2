"""A table's net change as file rewrites, on the executors: route, then rewrite or write per group.

``route`` turns net-change rows (one per touched key: ``key``, ``deletes``, ``change``, ``ts``)
into the table's own typed columns and sends every key where it must go:

- a *drop* row to each live data file that can hold the key (``files.key_file_pairs``): group
  ``f<file index>``; that file is rewritten without its dropped keys (``rewrite.rewrite_file``,
  copy-on-write) or gets a position delete file naming their rows (``rewrite.delete_keys``,
  merge-on-read);
- a *write* row for every key the net change writes: group ``p<partition>`` (one writer per
  bucket of a bucketed table; ``p`` alone for an unpartitioned one), written sorted by key
  (``rewrite.write_rows``).
- merge-on-read, a small file the driver chose to merge (``UpsertTarget.merged``,
  ``small_file_merges``) takes its drop rows in the write group of its partition instead of a
  group of its own: that group writes its rows together with what is left of the file
  (``rewrite.merge_files``), and the file goes. Drop rows travel as packs whose schema metadata
  says so (``DROPS``), beside the write rows of the same group.

A key-less table is a multiset (``UpsertTarget.multiset``): a net row writes or deletes
``count`` copies of its image. Written copies are write rows, one per copy, and nothing is
dropped for them; the images losing copies go to one group ``m`` with their counts, whose task
walks the files that can hold them in file order and drops the first copies it finds
(``rewrite.drop_copies``): deterministic, so a run done again writes the same table.

``run_groups`` executes the groups of a stream sorted by (request, group); each yields one
pickled ``FileRewrite`` (removed file, added files) for its request. A *request* is one table's
net change in one DDL segment, rewritten against its ``UpsertTarget``: the tables of a run are
rewritten by one Spark job, their routed rows told apart by the request's index. Spark shuffles
routed rows by (request, group); the in-process plane sorts them; both call these functions, and
only the pickled ``FileRewrite``s (file metadata) go back to the driver.
"""

from __future__ import annotations

import heapq
import itertools
import pickle
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.manifest import DataFile
from pyiceberg.partitioning import PartitionField
from pyiceberg.transforms import BucketTransform, IdentityTransform

from cdc_codecs import Op
from spark.decode.changelog import decode_effect
from spark.decode.effect import CorruptChangeValue
from spark.write.image_columns import ImageColumns, read_images
from spark.tables.files import is_small, key_file_pairs, partition_values
from spark.write.rewrite import FileRewrite, delete_keys, drop_copies, merge_files, rewrite_file, write_rows
from spark.write.target import TableTarget
from spark.tables.schema_map import MetadataColumns, UnsupportedValue, arrow_table, metadata_columns

# A multiset's dropped images carry their counts as one more column, the last: found by its place,
# never by its name, so that no upstream column name can be taken for it (upstream names are data).
COPIES = "_tidelake_copies"
MULTISET_DROPS = "m"
# Routed rows cross the shuffle as (group, Arrow IPC bytes of that group's rows): Spark moves
# them without mapping Iceberg types (time, uuid, fixed) onto its own.
ROUTED_SCHEMA = pa.schema([pa.field("request", pa.int32()), pa.field("group", pa.string()), pa.field("rows", pa.binary())])
# A pack of drop rows (keys alone) says so in its schema's metadata, never by a column's name
# (upstream names are data): a write group that merges small files receives both kinds.
DROPS = {b"tidelake.routed": b"drops"}
RESULT_SCHEMA = pa.schema([pa.field("request", pa.int32()), pa.field("rewrite", pa.binary())])
_OP_VALUES = {op: op.value for op in Op}  # a dict lookup: Enum.value is a Python property call, per written row


@dataclass(frozen=True)
class UpsertTarget:
    """Everything an executor needs to rewrite one table for one net change (plain values)."""

    table: TableTarget
    files: tuple[DataFile, ...]
    key_columns: tuple[str, ...]
    upstream_types: Mapping[str, str] = field(default_factory=dict)
    deletes: tuple[tuple[DataFile, ...], ...] = ()  # each file's position delete files (empty: none)
    merge_on_read: bool = False  # drop keys with position deletes instead of rewriting files
    # Merge-on-read: small files (indexes into ``files``) the write group of their partition merges
    # into the files it writes, instead of giving each a position delete file (``small_file_merges``).
    merged: tuple[int, ...] = ()
    upserts: int = 0  # rows the net change writes, as the driver counted them: what ``group_costs`` goes by
    # Each group's expected work (``group_costs``), computed by the driver from the metadata it
    # planned with: ``placements`` reads it there, and never the target's own metadata.
    costs: Mapping[str, int] = field(default_factory=dict)
    multiset: bool = False  # a key-less table: identical rows are copies, counted
    # Row column names -> the table's column (None: dropped), where rows name a column otherwise
    # than the table (spark.commit.table.row_columns): lettercase, or a rename or drop earlier in the run.
    renames: Mapping[str, str | None] = field(default_factory=dict)
    # The table's column -> (the value a written row lacking it gets, the statement's commitTs and
    # (topic, partition)), where the run's ADD COLUMN gave the rows of before it that value and other
    # rows carry the column: a row lacking it at the statement's commitTs in another partition is of
    # before it, placed after it by a derived clock (spark.commit.table.older_rows); one later, or after
    # it in its partition (whose order is the binlog's), is a re-sent older image, written as it comes.
    older_rows: Mapping[str, tuple[Any, int, tuple[str, int]]] = field(default_factory=dict)

    def deletes_of(self, index: int) -> tuple[DataFile, ...]:
        return self.deletes[index] if self.deletes else ()

    def drop_groups(self, metadata: Any) -> list[str]:
        """The group each file's dropped keys go to: ``f<file index>``, or for a merged file the
        write group of its partition."""
        groups = [f"f{i}" for i in range(len(self.files))]
        for i in self.merged:
            groups[i] = _write_group_of(metadata, self.key_columns, self.files[i]) or groups[i]
        return groups

    def routed_schema(self) -> pa.Schema:
        """A group's rows: the table's columns, then (a multiset) the copies, by place."""
        schema = self.table.metadata().schema().as_arrow()
        return schema.append(pa.field(COPIES, pa.int64())) if self.multiset else schema


# Image shapes read column-wise in a net change, in the order met (a table's full rows, its
# key-only delete images, ...); images of further shapes are read one by one.
IMAGE_SHAPES = 4


def _rows(net: pa.Table, target: UpsertTarget) -> tuple[pa.Table, np.ndarray]:
    """The net change's rows in the table's columns (deleted keys as key-only rows) and which write.

    Images are read column-wise (``image_columns``), a shape at a time: the names of the first
    image not read yet, then of the next. The rest -- a rename in the run, a value its column does
    not take as it is, corrupt bytes -- are read one by one, as ever, and the parts are put back
    in the net change's order; so is every image of a step with ``older_rows``."""
    metadata = target.table.metadata()
    schema = metadata.schema()
    names = metadata_columns(schema, metadata.properties)  # upstream names are data: never these
    writes = ~pc.fill_null(net.column("deletes"), False).to_numpy(zero_copy_only=False)
    parts, order = [], []
    left = np.arange(net.num_rows)
    for _ in range(IMAGE_SHAPES if not (target.renames or target.older_rows) else 0):
        columns = _column_wise(net.take(pa.array(left, pa.int64())) if len(order) else net, schema, names)
        if columns is None or not columns.read.any():
            break
        read = left[columns.read]
        parts.append(_with_metadata(columns, net, writes[read], read, names))
        order.append(read)
        left = left[~columns.read]
        if not len(left):
            break
    if len(left) or not parts:  # not parts: an empty net change, whose table is the empty one
        parts.append(_one_by_one(net, left, target, names))
        order.append(left)
    if len(parts) == 1:
        return parts[0], writes
    return pa.concat_tables(parts).take(pa.array(np.argsort(np.concatenate(order)), pa.int64())), writes


def _column_wise(net: pa.Table, schema: Any, names: MetadataColumns) -> ImageColumns | None:
    """The images of ``net`` that name its first image's columns in its order, read column-wise."""
    blobs = net.column("change")
    if not net.num_rows or blobs.null_count:
        return None
    try:
        first = list(decode_effect(blobs[0].as_py())[1])
    except CorruptChangeValue:
        return None  # the one-by-one path names it
    if set(first) & set(names.names):
        return None  # an image naming a metadata column (never written): the one-by-one path's rule
    return read_images(blobs, [(f.name, f.field_type) for f in schema.fields], first)


def _with_metadata(columns: ImageColumns, net: pa.Table, writes: np.ndarray, read: np.ndarray, names: MetadataColumns) -> pa.Table:
    """Rows ``read`` of the net change, read column-wise, with their metadata columns: a written
    row's commitTs and op, a dropped one's none."""
    table = columns.table
    if names.commit_ts is not None:
        ts = net.column("ts").take(pa.array(read, pa.int64()))
        at = table.schema.get_field_index(names.commit_ts)
        table = table.set_column(at, table.schema.field(at), pc.if_else(pa.array(writes), ts, None))
    if names.op is not None:
        at = table.schema.get_field_index(names.op)
        table = table.set_column(at, table.schema.field(at), pc.if_else(pa.array(writes), columns.ops, None))
    return table


def _one_by_one(net: pa.Table, index: np.ndarray, target: UpsertTarget, names: MetadataColumns) -> pa.Table:
    """Rows ``index`` of the net change, each image decoded and fitted to its column alone."""
    images = []
    metadata = target.table.metadata()
    take = pa.array(index, pa.int64())
    # Where each row came from matters only to ``older_rows``: read then alone (the fallback path of every step).
    wheres = ("topic", "partition") if target.older_rows else ()
    columns = [net.column(c).take(take).to_pylist() for c in ("change", "deletes", "ts", *wheres)]
    positions = zip(*columns[3:]) if wheres else itertools.repeat(None)
    for i, blob, deletes, ts, position in zip(index.tolist(), *columns[:3], positions):
        try:
            op, row = decode_effect(blob)
        except CorruptChangeValue as exc:
            where = f"{net.column('topic')[i]}/{net.column('partition')[i]}@{net.column('offset')[i]}"
            raise CorruptChangeValue(f"change log of {target.table.name} at {where}: {exc}") from None
        for old, new in target.renames.items():
            if old in row:
                value = row.pop(old)
                if new is not None:
                    row.setdefault(new, value)
        if not deletes:
            for name, (value, at, where) in target.older_rows.items():
                if ts == at and position != where:
                    row.setdefault(name, value)
            row[names.commit_ts] = ts
            row[names.op] = _OP_VALUES[op]
        images.append(row)
    try:
        return arrow_table(metadata.schema(), images, target.upstream_types)
    except UnsupportedValue as exc:
        raise UnsupportedValue(f"{exc}, in the change at {_unwritable(net, index, metadata.schema(), images, target)}") from None


def _unwritable(net: pa.Table, index: np.ndarray, schema: Any, images: list[dict], target: UpsertTarget) -> str:
    """Where the first image no column takes came from (``topic/partition@offset``; ``images`` are
    rows ``index``): bad input names its message, as an undecodable one does. Only on the error:
    each image is converted alone."""
    for i, image in zip(index.tolist(), images):
        try:
            arrow_table(schema, [image], target.upstream_types)
        except UnsupportedValue:
            return f"{net.column('topic')[i]}/{net.column('partition')[i]}@{net.column('offset')[i]}"
    return "an unknown offset"  # only the images together fail: not one value's


def route(net: pa.Table, target: UpsertTarget, request: int = 0) -> pa.Table:
    """Drop rows (one per key and file that can hold it) and write rows, packed per group of ``request``.

    A drop row is its key alone: a file's group reads only the keys it drops (``_one_group``), and
    a key pairs with every file whose bounds may hold it -- with uniform keys, every file a batch
    wrote -- so whole images would be shuffled once per such file."""
    rows, writes = _rows(net, target)
    if target.multiset:
        return _route_copies(rows, writes, net.column("count").to_numpy(), target, request)
    metadata = target.table.metadata()
    keys = rows.select(list(target.key_columns))
    key_index, file_index = key_file_pairs(metadata, target.key_columns, keys, target.files)
    groups = np.array(target.drop_groups(metadata), dtype=object)
    if target.merged:  # small files merged by one write group: a key drops there once
        names, code = np.unique(groups, return_inverse=True)
        n = max(1, keys.num_rows)
        pairs = np.unique(code[file_index].astype(np.int64) * n + key_index)
        key_index, pair_groups = pairs % n, names[pairs // n]
    else:
        pair_groups = groups[file_index]
    schema = target.routed_schema()
    drop_schema = pa.schema([schema.field(k) for k in target.key_columns], metadata=DROPS)
    drops = keys.take(pa.array(key_index, pa.int64())).cast(drop_schema)
    written = rows.filter(pa.array(writes)).cast(schema)
    return pa.concat_tables([_pack(drops, pa.array(pair_groups.tolist(), pa.string()), request),
                             _pack(written, _partition_groups(written, target), request)])


def _route_copies(rows: pa.Table, writes: np.ndarray, count: np.ndarray, target: UpsertTarget, request: int) -> pa.Table:
    """A key-less table's routed rows: a write row per copy written, the dropped images in group ``m``
    with their counts (``COPIES``, the last column)."""
    written = rows.take(pa.array(np.repeat(np.flatnonzero(writes), count[writes]), pa.int64()))
    drops = rows.filter(pa.array(~writes))
    routed = pa.concat_tables([
        drops.append_column(COPIES, pa.array(count[~writes], pa.int64())),
        written.append_column(COPIES, pa.array(np.ones(written.num_rows, np.int64))),
    ]).cast(target.routed_schema())
    groups = pa.concat_arrays([pa.array([MULTISET_DROPS] * drops.num_rows, pa.string()), _partition_groups(written, target)])
    return _pack(routed, groups, request)


def _pack(routed: pa.Table, groups: pa.Array, request: int) -> pa.Table:
    """``routed``'s rows packed per group (``groups``, one per row, beside the rows rather than a
    column among the table's: no upstream column name can collide with it)."""
    order = pc.sort_indices(groups)
    routed, names = routed.take(order), groups.take(order).to_pylist()
    packed, blobs = [], []
    start = 0
    for i in range(1, len(names) + 1):
        if i == len(names) or names[i] != names[start]:
            packed.append(names[start])
            blobs.append(_ipc(routed.slice(start, i - start)))
            start = i
    return pa.table([pa.array([request] * len(packed), pa.int32()), pa.array(packed, pa.string()), pa.array(blobs, pa.binary())],
                    schema=ROUTED_SCHEMA)


def _ipc(rows: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rows.schema) as writer:
        writer.write_table(rows)
    return sink.getvalue().to_pybytes()


def _unipc(blob: bytes) -> pa.Table:
    return pa.ipc.open_stream(blob).read_all()


def _partition_groups(rows: pa.Table, target: UpsertTarget) -> pa.Array:
    """``p<value>`` of the default spec's partition field on a key column (the bucket), else ``p``."""
    metadata = target.table.metadata()
    by = _group_field(metadata, target.key_columns)
    if by is None or rows.num_rows == 0:
        return pa.array(["p"] * rows.num_rows, pa.string())
    _, pfield, source = by
    values = partition_values(pfield.transform, source.field_type, rows.column(source.name).combine_chunks())
    return pc.binary_join_element_wise("p", pc.cast(pc.fill_null(pc.cast(values, pa.string()), "null"), pa.string()), "")


def _group_field(metadata: Any, key_columns: Sequence[str]) -> tuple[int, PartitionField, Any] | None:
    """The default spec's field the write groups follow (its place, the field, its source column):
    the first on a key column by a transform other than identity; None: one write group, ``p``."""
    schema = metadata.schema()
    for place, pfield in enumerate(metadata.spec().fields):
        source = schema.find_field(pfield.source_id)
        if source.name in key_columns and not isinstance(pfield.transform, IdentityTransform):
            return place, pfield, source
    return None


# A group's expected work in the rewrite, in key values read (``group_costs``): its fixed part (a
# file opened, a delete file written) costs about what 300k keys do, and a row read whole and written
# about what 45 keys do (bench growth, in process: a 1M-row file's delete file 17-24 ms, a write group
# of 16k rows 11 ms, each 1k rows it merges 0.8 ms more).
GROUP_COST = 300_000
ROW_COST = 45


def group_costs(target: UpsertTarget, metadata: Any) -> dict[str, int]:
    """The groups a net change can route rows to and each one's expected work (see ``GROUP_COST``):
    a file's group reads its key column (merge-on-read) or the whole file (copy-on-write), a write
    group writes its share of the rows and the files it merges. A key-less table's groups are left
    to the hash (``placements``)."""
    if target.multiset:
        return {}
    costs: dict[str, int] = {}
    for i, group in enumerate(target.drop_groups(metadata)):
        rows = target.files[i].record_count
        per_row = 1 if group.startswith("f") and target.merge_on_read else ROW_COST
        costs[group] = costs.get(group, GROUP_COST) + per_row * rows
    for group, rows in _write_shares(metadata, target.key_columns, target.upserts).items():
        costs[group] = costs.get(group, GROUP_COST) + ROW_COST * rows
    return costs


def _write_shares(metadata: Any, key_columns: Sequence[str], upserts: int) -> dict[str, int]:
    """The rows each write group is expected to write of ``upserts``: a bucketed table's buckets an
    equal share each (``pnull``, NULL keys, none), else ``p`` all of them."""
    by = _group_field(metadata, key_columns)
    if by is not None and isinstance(by[1].transform, BucketTransform):
        buckets = by[1].transform.num_buckets
        return {f"p{b}": upserts // buckets for b in range(buckets)}
    return {"p": upserts}


def placements(targets: Sequence[UpsertTarget | None], partitions: int) -> dict[tuple[int, str], int]:
    """The shuffle partition (the Spark task) of each (request, group) the requests' net changes can
    route rows to: largest expected work first (``UpsertTarget.costs``), each to the least loaded of
    ``partitions``. A hash of the group's name spread them unevenly: at the growth bench's 5M rows
    one task of four ran 157 ms where the other three ran 37-67 ms. Groups not listed here (a
    key-less table's, a target without costs) are placed by the hash. Every file's group counts as
    touched: with hot keys most are not, and the placement is then no better than the hash's."""
    work = [(cost, request, group) for request, target in enumerate(targets) if target is not None
            for group, cost in target.costs.items()]
    load = [(0, p) for p in range(partitions)]
    placed: dict[tuple[int, str], int] = {}
    for cost, request, group in sorted(work, key=lambda w: (-w[0], w[1], w[2])):
        total, partition = heapq.heappop(load)
        placed[(request, group)] = partition
        heapq.heappush(load, (total + cost, partition))
    return placed


def run_groups(batches: Iterable[pa.RecordBatch], targets: Sequence[UpsertTarget]) -> Iterator[pa.RecordBatch]:
    """Rewrite or write each group of packed ``batches`` sorted by (request, group), against
    ``targets[request]``: one pickled ``FileRewrite`` per group, with its request."""
    current: tuple[int, str] | None = None
    parts: list[pa.Table] = []
    for batch in batches:
        for request, group, blob in zip(batch.column("request").to_pylist(), batch.column("group").to_pylist(),
                                        batch.column("rows").to_pylist()):
            if (request, group) != current and current is not None:
                yield _result(current[0], _one_group(current[1], parts, targets[current[0]]))
                parts = []
            current = (request, group)
            parts.append(_unipc(blob))
    if current is not None:
        yield _result(current[0], _one_group(current[1], parts, targets[current[0]]))


def _one_group(group: str, parts: list[pa.Table], target: UpsertTarget) -> list[FileRewrite]:
    if target.multiset:  # the copies: the last column, by place
        rows = pa.concat_tables(parts)
        copies, data = rows.column(rows.num_columns - 1), rows.remove_column(rows.num_columns - 1)
        if group == MULTISET_DROPS:
            return _drop_copies(data, copies.to_numpy(), target)
        return [FileRewrite(None, write_rows(target.table, data, target.key_columns), 0, 0)]
    drops = [p for p in parts if p.schema.metadata == DROPS]
    written = [p for p in parts if p.schema.metadata != DROPS]
    touched = pa.concat_tables(drops).select(list(target.key_columns)) if drops else None
    if group.startswith("f"):
        index = int(group[1:])
        drop = delete_keys if target.merge_on_read else rewrite_file
        return [drop(target.table, target.files[index], target.key_columns, touched, deletes=target.deletes_of(index))]
    return _write_group(group, pa.concat_tables(written) if written else None, touched, target)


def _write_group(group: str, rows: pa.Table | None, touched: pa.Table | None, target: UpsertTarget) -> list[FileRewrite]:
    """A write group's rows written as new files, with the small files it merges folded in, less
    their touched keys."""
    groups = target.drop_groups(target.table.metadata())
    merged = [i for i in target.merged if groups[i] == group]
    return merge_files(target.table, [target.files[i] for i in merged], [target.deletes_of(i) for i in merged],
                       target.key_columns, touched, rows)


def small_file_merges(metadata: Any, files: Sequence[DataFile], key_columns: Sequence[str], upserts: int,
                      target_file_size: int) -> tuple[int, ...]:
    """Which small files (``files.is_small``) of the default spec a merge-on-read net change writing
    ``upserts`` rows merges into the files it writes, per write group: smallest first, each while
    it holds no more rows than the group writes and the files merged before it hold (a bucketed
    table's groups each write an equal share). Size tiers, as a log-structured merge keeps them: a
    run of equal batches leaves about log2(batches) small files for the next batch to touch, not one
    per batch, and a row is rewritten about once per doubling of its file until the file is no
    longer small. Planned by the driver, once: every slice routes the same files to the same group."""
    shares = _write_shares(metadata, key_columns, upserts)
    small: dict[str, list[int]] = {}
    for i, data_file in enumerate(files):
        group = _write_group_of(metadata, key_columns, data_file)
        if group is not None and is_small(data_file, target_file_size):
            small.setdefault(group, []).append(i)
    merged: list[int] = []
    for group, indexes in small.items():
        rows = shares.get(group, 0)
        for i in sorted(indexes, key=lambda i: (files[i].record_count, i)):
            if files[i].record_count > rows:
                break
            merged.append(i)
            rows += files[i].record_count
    return tuple(sorted(merged))


def _write_group_of(metadata: Any, key_columns: Sequence[str], data_file: DataFile) -> str | None:
    """The write group whose files ``data_file`` belongs with: ``p``, or ``p<bucket>`` of a table
    bucketed on a key column; None for a file of another spec or a table partitioned otherwise."""
    if data_file.spec_id != metadata.default_spec_id:
        return None
    by = _group_field(metadata, key_columns)
    if by is None:
        return "p"
    if not isinstance(by[1].transform, BucketTransform):
        return None
    value = data_file.partition[by[0]]
    return f"p{'null' if value is None else value}"


def _drop_copies(drops: pa.Table, copies: np.ndarray, target: UpsertTarget) -> list[FileRewrite]:
    """Drop each image's copies (``copies``) from the files that can hold it, in file order until none are left."""
    touched = drops.select(list(target.key_columns))
    left = copies.copy()
    key_index, file_index = key_file_pairs(target.table.metadata(), target.key_columns, touched, target.files)
    out = []
    for index in np.unique(file_index):
        images = key_index[file_index == index]
        images = images[left[images] > 0]
        if not len(images):
            continue
        rewrite, dropped = drop_copies(target.table, target.files[index], target.key_columns,
                                       touched.take(pa.array(images)), left[images], target.deletes_of(index),
                                       target.merge_on_read)
        left[images] -= dropped
        if rewrite.removed is not None or rewrite.deletes_added:
            out.append(rewrite)
    return out


def _result(request: int, rewrites: list[FileRewrite]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {"request": [request] * len(rewrites), "rewrite": [pickle.dumps(r) for r in rewrites]}, schema=RESULT_SCHEMA)


def group_sorted(packed: pa.Table) -> pa.Table:
    return packed.sort_by([("request", "ascending"), ("group", "ascending")])


def results(batches: Iterable[pa.RecordBatch], requests: int) -> list[list[FileRewrite]]:
    """The ``FileRewrite``s of each of ``requests`` requests, from ``run_groups``' batches."""
    out: list[list[FileRewrite]] = [[] for _ in range(requests)]
    for batch in batches:
        for request, blob in zip(batch.column("request").to_pylist(), batch.column("rewrite").to_pylist()):
            out[request].append(pickle.loads(blob))
    return out
