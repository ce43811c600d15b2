"""One TiDB transaction, many changes: what a commitTs holds is its final state, whatever the partitions.

TiDB commits one final mutation per row, and two live rows never share a key, so within one
commitTs a key is present iff some row image writes it. TiCDC's index-value dispatcher sends a
row's changes by key: an UPDATE that moves a row from key 1 to key 2 goes to key 2's partition,
an INSERT of a new key 1 in the same transaction (a non-clustered primary key) to key 1's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cdc_codecs import Op, ProducerRecord, RowChange, Watermark, get_encoder
from tests.model.oracle import Oracle
from spark.commit.apply import apply_interval
from spark.query.read import read_pipeline
from spark.archive.storage import open_storage

from .archives import HOUR, T0, ArchiveWriter, make_config, oracle_from_records
from .test_schema_evolution import History, schema

pytestmark = pytest.mark.slow  # whole intervals, Spark or services: make test-fast leaves it out (docs/testing.md)

ITEMS = schema("shop", "items", [("id", "int"), ("v", "int")])
CREATE = "CREATE TABLE `shop`.`items` (`id` int NOT NULL, `v` int, PRIMARY KEY (`id`) /*T![clustered_index] NONCLUSTERED */)"


def _records(protocol: str, events: list, placement: dict[int, int]) -> list[ProducerRecord]:
    """Each event encoded alone; row change ``i`` of ``events`` sent to partition ``placement[i]``."""
    encoder = get_encoder(protocol)
    out = []
    for i, e in enumerate(events):
        records = encoder.encode_all([e], 2)
        if isinstance(e, RowChange) and i in placement:
            records = [r._replace(partition=placement[i]) for r in records]
        out.extend(records)
    return out


# (partition of the UPDATE 1 -> 2, partition of the INSERT of 1, the UPDATE sent first)
PLACEMENTS = [(1, 0, True), (1, 0, False), (0, 0, False), (0, 1, True)]


@pytest.mark.parametrize("protocol", ["canal-json", "open-protocol", "simple"])
@pytest.mark.parametrize("update_partition,insert_partition,update_first", PLACEMENTS)
def test_a_key_moved_away_and_written_again_in_one_transaction_is_present(
        tmp_path: Path, protocol: str, update_partition: int, insert_partition: int, update_first: bool) -> None:
    h = History()
    h.ddl("shop", "items", CREATE, ITEMS, kind="CREATE")
    h.row(Op.INSERT, ITEMS, None, {"id": 1, "v": 1})
    first = h.mark()
    commit_ts = h.tick()
    move = RowChange(Op.UPDATE, "shop", "items", {"id": 1, "v": 1}, {"id": 2, "v": 1}, ("id",), ITEMS.column_types, commit_ts,
                     h.events[0].position)
    insert = RowChange(Op.INSERT, "shop", "items", None, {"id": 1, "v": 9}, ("id",), ITEMS.column_types, commit_ts,
                       h.events[0].position)
    transaction = [move, insert] if update_first else [insert, move]
    second_batch = [*transaction, Watermark(h.tick(), h.events[0].position)]
    second = second_batch[-1].ts
    moves_at = transaction.index(move)
    placement = {moves_at: update_partition, 1 - moves_at: insert_partition}
    batches = [_records(protocol, h.events, {}), _records(protocol, second_batch, placement)]

    config = make_config(tmp_path, protocol)
    writer = ArchiveWriter(config, open_storage(config.storage), {"cdc": 2})
    for i, records in enumerate(batches):
        writer.interval(T0 + i * HOUR, T0 + (i + 1) * HOUR, [("cdc", r) for r in records])
        apply_interval(config, T0 + i * HOUR, T0 + (i + 1) * HOUR)

    def rows(w: int) -> list[tuple[int, int]]:
        return sorted((r["id"], r["v"]) for r in read_pipeline(config, w)[1][("shop", "items")].to_pylist())

    assert rows(first) == [(1, 1)]
    assert rows(second) == [(1, 9), (2, 1)]
    # The reference model says the same, whatever order it reads the partitions in.
    for order in (batches[0] + batches[1], batches[0] + batches[1][::-1]):
        oracle = oracle_from_records(protocol, "cdc", order, 2, Oracle())
        oracle.cut([("cdc", 0), ("cdc", 1)])
        assert sorted((r["id"], r["v"]) for r in oracle.rows("shop", "items")) == [(1, 9), (2, 1)]
