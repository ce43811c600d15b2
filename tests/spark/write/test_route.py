"""upsert.route: what each group of a net change carries to the task that rewrites it."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pyarrow as pa
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.table.metadata import new_table_metadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER

from cdc_codecs import Op
from spark.decode.effect import image_encoder
from spark.tables.schema_map import iceberg_schema, metadata_property
from spark.write import upsert
from spark.write.target import TableTarget
from spark.write.upsert import UpsertTarget

from ..mysql_values import COLUMN_TYPES

COLUMNS = {"id": COLUMN_TYPES["id"], "name": COLUMN_TYPES["name"], "amount": COLUMN_TYPES["amount"]}


def _net(changes: list[tuple[Op, dict]]) -> pa.Table:
    encode = image_encoder(COLUMNS)
    n = len(changes)
    return pa.table({
        "topic": pa.array(["t"] * n), "partition": pa.array([0] * n, pa.int32()), "offset": pa.array(range(n), pa.int64()),
        "deletes": pa.array([op is Op.DELETE for op, _ in changes]),
        "change": pa.array([encode(op, row) for op, row in changes], pa.binary()), "ts": pa.array(range(100, 100 + n), pa.int64()),
    })


def _groups(packed: pa.Table) -> dict[str, pa.Table]:
    return {group: upsert._unipc(blob) for group, blob in zip(packed.column("group").to_pylist(), packed.column("rows").to_pylist())}


def _apply(net: pa.Table, target: UpsertTarget) -> list:
    packed = upsert.group_sorted(upsert.route(net, target))
    return upsert.results(upsert.run_groups(packed.to_batches(), [target]), 1)[0]


def test_a_file_s_group_gets_the_keys_it_drops_alone_and_the_written_rows_come_whole(tmp_path: Path) -> None:
    schema = iceberg_schema(list(COLUMNS.items()))
    metadata = new_table_metadata(schema, UNPARTITIONED_PARTITION_SPEC, UNSORTED_SORT_ORDER, f"file://{tmp_path}",
                                  metadata_property(schema))
    table = TableTarget.from_metadata("db.t", metadata, {})
    first = _net([(Op.INSERT, {"id": i, "name": f"n{i}", "amount": Decimal(f"{i}.00")}) for i in range(1, 5)])
    (written,) = _apply(first, UpsertTarget(table, (), ("id",), merge_on_read=True))
    (data_file,) = written.added
    target = UpsertTarget(table, (data_file,), ("id",), merge_on_read=True)
    net = _net([(Op.UPDATE, {"id": 2, "name": "two", "amount": Decimal("2.50")}), (Op.DELETE, {"id": 3})])

    groups = _groups(upsert.route(net, target))
    assert set(groups) == {"f0", "p"}
    assert groups["f0"].column_names == ["id"] and sorted(groups["f0"].column("id").to_pylist()) == [2, 3]
    assert groups["p"].select(["id", "name", "amount"]).to_pylist() == [{"id": 2, "name": "two", "amount": Decimal("2.50")}]
    rewrites = _apply(net, target)
    dropped = [r for r in rewrites if r.deletes_added]
    assert len(dropped) == 1 and dropped[0].rows_dropped == 2 and dropped[0].removed is None
