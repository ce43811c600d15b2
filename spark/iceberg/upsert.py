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

``run_groups`` executes the groups of a stream sorted by (request, group); each yields one
pickled ``FileRewrite`` (removed file, added files) for its request. A *request* is one table's
net change in one DDL segment, rewritten against its ``UpsertTarget``: the tables of a run are
rewritten by one Spark job, their routed rows told apart by the request's index. Spark shuffles
routed rows by (request, group); the in-process plane sorts them; both call these functions, and
only the pickled ``FileRewrite``s (file metadata) go back to the driver.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.manifest import DataFile
from pyiceberg.transforms import IdentityTransform

from spark.decode.changelog import decode_effect
from spark.decode.effect import CorruptChangeValue
from spark.iceberg.files import _transformed, key_file_pairs
from spark.iceberg.rewrite import FileRewrite, delete_keys, rewrite_file, write_rows
from spark.iceberg.target import TableTarget
from spark.schema_map import arrow_table, metadata_columns

GROUP, ROLE = "_tidelake_group", "_tidelake_role"
DROP, WRITE = 0, 1
# Routed rows cross the shuffle as (group, Arrow IPC bytes of that group's rows): Spark moves
# them without mapping Iceberg types (time, uuid, fixed) onto its own.
ROUTED_SCHEMA = pa.schema([pa.field("request", pa.int32()), pa.field("group", pa.string()), pa.field("rows", pa.binary())])
RESULT_SCHEMA = pa.schema([pa.field("request", pa.int32()), pa.field("rewrite", pa.binary())])


@dataclass(frozen=True)
class UpsertTarget:
    """Everything an executor needs to rewrite one table for one net change (plain values)."""

    table: TableTarget
    files: tuple[DataFile, ...]
    key_columns: tuple[str, ...]
    upstream_types: Mapping[str, str] = field(default_factory=dict)
    deletes: tuple[tuple[DataFile, ...], ...] = ()  # each file's position delete files (empty: none)
    merge_on_read: bool = False  # drop keys with position deletes instead of rewriting files

    def deletes_of(self, index: int) -> tuple[DataFile, ...]:
        return self.deletes[index] if self.deletes else ()

    def routed_schema(self) -> pa.Schema:
        schema = self.table.metadata().schema().as_arrow()
        return schema.insert(0, pa.field(ROLE, pa.int8())).insert(0, pa.field(GROUP, pa.string()))


def _rows(net: pa.Table, target: UpsertTarget) -> tuple[pa.Table, np.ndarray]:
    """The net change's rows in the table's columns (deleted keys as key-only rows) and which write."""
    images = []
    writes = np.zeros(net.num_rows, dtype=bool)
    metadata = target.table.metadata()
    names = metadata_columns(metadata.schema(), metadata.properties)  # upstream names are data: never these
    for i, (blob, deletes, ts) in enumerate(zip(net.column("change").to_pylist(), net.column("deletes").to_pylist(),
                                                net.column("ts").to_pylist())):
        try:
            op, row = decode_effect(blob)
        except CorruptChangeValue as exc:
            where = f"{net.column('topic')[i]}/{net.column('partition')[i]}@{net.column('offset')[i]}"
            raise CorruptChangeValue(f"change log of {target.table.name} at {where}: {exc}") from None
        if not deletes:
            writes[i] = True
            row[names.commit_ts] = ts
            row[names.op] = op.value
        images.append(row)
    return arrow_table(metadata.schema(), images, target.upstream_types), writes


def route(net: pa.Table, target: UpsertTarget, request: int = 0) -> pa.Table:
    """Drop rows (one per key and file that can hold it) and write rows, packed per group of ``request``."""
    rows, writes = _rows(net, target)
    metadata = target.table.metadata()
    key_index, file_index = key_file_pairs(metadata, target.key_columns, rows.select(list(target.key_columns)), target.files)
    drops = rows.take(pa.array(key_index, pa.int64()))
    drop_groups = pa.array([f"f{i}" for i in file_index.tolist()], pa.string())
    written = rows.filter(pa.array(writes))
    write_groups = _partition_groups(written, target)
    routed = pa.concat_tables([
        drops.add_column(0, ROLE, pa.array(np.full(drops.num_rows, DROP, np.int8))).add_column(0, GROUP, drop_groups),
        written.add_column(0, ROLE, pa.array(np.full(written.num_rows, WRITE, np.int8))).add_column(0, GROUP, write_groups),
    ]).cast(target.routed_schema())
    return _pack(routed, request)


def _pack(routed: pa.Table, request: int) -> pa.Table:
    routed = routed.sort_by([(GROUP, "ascending")])
    groups, blobs = [], []
    names = routed.column(GROUP).to_pylist()
    start = 0
    for i in range(1, len(names) + 1):
        if i == len(names) or names[i] != names[start]:
            groups.append(names[start])
            blobs.append(_ipc(routed.slice(start, i - start).drop_columns([GROUP])))
            start = i
    return pa.table([pa.array([request] * len(groups), pa.int32()), pa.array(groups, pa.string()), pa.array(blobs, pa.binary())],
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
    spec, schema = metadata.spec(), metadata.schema()
    values: pa.Array | None = None
    for pfield in spec.fields:
        source = schema.find_field(pfield.source_id)
        if source.name in target.key_columns and not isinstance(pfield.transform, IdentityTransform):
            values = _transformed(pfield.transform, source.field_type, rows.column(source.name).combine_chunks())
            break
    if values is None or rows.num_rows == 0:
        return pa.array(["p"] * rows.num_rows, pa.string())
    return pc.binary_join_element_wise("p", pc.cast(pc.fill_null(pc.cast(values, pa.string()), "null"), pa.string()), "")


def run_groups(batches: Iterable[pa.RecordBatch], targets: Sequence[UpsertTarget]) -> Iterator[pa.RecordBatch]:
    """Rewrite or write each group of packed ``batches`` sorted by (request, group), against
    ``targets[request]``: one pickled ``FileRewrite`` per group, with its request."""
    current: tuple[int, str] | None = None
    parts: list[pa.Table] = []
    for batch in batches:
        for request, group, blob in zip(batch.column("request").to_pylist(), batch.column("group").to_pylist(),
                                        batch.column("rows").to_pylist()):
            if (request, group) != current and current is not None:
                yield _result(current[0], _one_group(current[1], pa.concat_tables(parts), targets[current[0]]))
                parts = []
            current = (request, group)
            parts.append(_unipc(blob))
    if current is not None:
        yield _result(current[0], _one_group(current[1], pa.concat_tables(parts), targets[current[0]]))


def _one_group(group: str, rows: pa.Table, target: UpsertTarget) -> FileRewrite:
    data = rows.drop_columns([ROLE])
    if group.startswith("f"):
        touched = data.select(list(target.key_columns))
        index = int(group[1:])
        drop = delete_keys if target.merge_on_read else rewrite_file
        return drop(target.table, target.files[index], target.key_columns, touched, deletes=target.deletes_of(index))
    added = write_rows(target.table, data, target.key_columns)
    return FileRewrite(None, added, 0, 0)


def _result(request: int, rewrite: FileRewrite) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"request": [request], "rewrite": [pickle.dumps(rewrite)]}, schema=RESULT_SCHEMA)


def group_sorted(packed: pa.Table) -> pa.Table:
    return packed.sort_by([("request", "ascending"), ("group", "ascending")])


def results(batches: Iterable[pa.RecordBatch], requests: int) -> list[list[FileRewrite]]:
    """The ``FileRewrite``s of each of ``requests`` requests, from ``run_groups``' batches."""
    out: list[list[FileRewrite]] = [[] for _ in range(requests)]
    for batch in batches:
        for request, blob in zip(batch.column("request").to_pylist(), batch.column("rewrite").to_pylist()):
            out[request].append(pickle.loads(blob))
    return out
