"""TiCDC's default Canal-JSON (``enable-tidb-extension=false``): no ``_tidb``, no commitTs, no WATERMARK.

Messages are written by hand as docs/ticdc-canal-json.md shows them (``es``: the commitTs'
physical milliseconds, ``mysqlType`` without parameters, DDL to partition 0 only) and run
through the pipeline in process. A topic with ``enable_tidb_extension = false`` is ordered by
the derived clock and must equal, at every published W, the derived-order reference model
(``BinlogOracle``) fed with the same messages; a topic left at the default (extension on)
rejects them with an error naming the settings that fix it.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from cdc_codecs import ProducerRecord, RawMessage, SourcePosition, get_decoder
from tests.model.oracle import BinlogOracle
from spark.decode.topic_clock import topic_clock_path
from spark.commit.apply import BadMessagesError, apply_interval
from spark.query.read import read_pipeline
from spark.archive.storage import open_storage

from .archives import HOUR, T0, ArchiveWriter, make_config, normalise, oracle_rows

OPTIONS = {"enable_tidb_extension": "false"}
TYPES = {"id": "int", "name": "varchar", "price": "decimal"}
SQL_TYPES = {"id": 4, "name": 12, "price": 3}


def ddl(es: int, sql: str, table: str = "items") -> ProducerRecord:
    doc = {"id": 0, "database": "shop", "table": table, "pkNames": None, "isDdl": True, "type": "CREATE", "es": es,
           "ts": es + 700, "sql": sql, "sqlType": None, "mysqlType": None, "data": None, "old": None}
    return ProducerRecord(0, None, orjson.dumps(doc))  # TiCDC sends DDL to partition 0


def row(partition: int, kind: str, es: int, data: dict, old: dict | None = None) -> ProducerRecord:
    doc = {"id": 0, "database": "shop", "table": "items", "pkNames": ["id"], "isDdl": False, "type": kind, "es": es,
           "ts": es + 900, "sql": "", "sqlType": SQL_TYPES, "mysqlType": TYPES, "data": [data],
           "old": [old] if old is not None else None}
    return ProducerRecord(partition, None, orjson.dumps(doc))


def item(i: int, name: str, price: str) -> dict:
    return {"id": str(i), "name": name, "price": price}


CREATE = "CREATE TABLE shop.items (id int primary key, name varchar(20), price decimal(10,2))"
# Two intervals of one changefeed, two partitions (a key stays in its partition). Within a
# millisecond several transactions commit; TiCDC writes each partition in commit order.
INTERVALS = [
    [ddl(1000, CREATE),
     row(0, "INSERT", 1001, item(1, "a", "1.50")), row(1, "INSERT", 1001, item(2, "b", "2.00")),
     row(0, "UPDATE", 1003, item(1, "a2", "1.75"), item(1, "a", "1.50")),
     row(1, "DELETE", 1005, item(2, "b", "2.00")), row(1, "INSERT", 1006, item(3, "c", "3.00")),
     row(0, "INSERT", 1008, item(4, "d", "4.00"))],
    [row(1, "UPDATE", 1009, item(3, "c2", "3.25"), item(3, "c", "3.00")),
     row(0, "DELETE", 1010, item(1, "a2", "1.75")), row(0, "INSERT", 1012, item(5, "e", "5.00")),
     row(1, "INSERT", 1012, item(6, "f", "6.00"))],
]


def _archive(tmp_path: Path, options: dict) -> tuple:
    config = make_config(tmp_path, "canal-json", options)
    writer = ArchiveWriter(config, open_storage(config.storage), {"cdc": 2})
    for i, records in enumerate(INTERVALS):
        writer.interval(T0 + i * HOUR, T0 + (i + 1) * HOUR, [("cdc", r) for r in records])
    return config


@pytest.mark.parametrize("options", [OPTIONS, {}], ids=["false", "auto (the default)"])
def test_rows_at_every_derived_w_equal_the_model(tmp_path: Path, options: dict) -> None:
    """TiCDC's default changefeed works as configured by default: the topic's first message
    (no ``_tidb``) settles it in derived order, recorded once in the archive."""
    config = _archive(tmp_path, options)
    decoders = [get_decoder("canal-json", **OPTIONS) for _ in range(2)]
    oracle, offsets = BinlogOracle(), [0, 0]
    for i, records in enumerate(INTERVALS):
        result = apply_interval(config, T0 + i * HOUR, T0 + (i + 1) * HOUR)
        for r in records:
            oracle.add(decoders[r.partition].decode(RawMessage(r.key, r.value, SourcePosition("cdc", r.partition, offsets[r.partition]))))
            offsets[r.partition] += 1
        w = oracle.cut([("cdc", 0), ("cdc", 1)])
        assert result.watermark == w
        _, tables = read_pipeline(config, w)
        assert normalise(tables[("shop", "items")].to_pylist()) == oracle_rows(oracle, ("shop", "items")), w
    # Written out, what the two Ws hold: every commit before the millisecond the slower
    # partition reached (1006, then 1012), none at or after it, whatever the partition.
    assert [r["id"] for r in oracle_rows(oracle, ("shop", "items"))] == [3, 4]
    _, first = read_pipeline(config, (1006 << 18) - 1)
    assert sorted(r["id"] for r in first[("shop", "items")].to_pylist()) == [1]
    if not options:
        record = orjson.loads(open_storage(config.storage).read(topic_clock_path("shop", "cdc")))
        assert record == {"format": 1, "enable_tidb_extension": False, "decided_from": "cdc/0@0"}


def test_a_topic_set_to_the_extension_rejects_messages_without_it_naming_the_settings(tmp_path: Path) -> None:
    config = _archive(tmp_path, {"enable_tidb_extension": "true"})
    with pytest.raises(BadMessagesError) as info:
        apply_interval(config, T0, T0 + HOUR)
    quarantined = [orjson.loads(open_storage(config.storage).read(p)) for p in
                   open_storage(config.storage).list("shop/quarantine")]
    assert quarantined and all(q["field"] == "_tidb.commitTs" for q in quarantined)
    reason = quarantined[0]["reason"]
    assert "enable-tidb-extension=true" in reason and "enable_tidb_extension = false" in reason, reason
    assert "_tidb.commitTs: missing" in str(info.value)


def test_an_auto_topic_keeps_the_clock_its_first_message_showed(tmp_path: Path) -> None:
    """One clock per topic for its life: a topic whose first messages carry ``_tidb`` stays in
    commit order, and a later message without it is a bad message naming the settings."""
    from cdc_codecs import get_encoder
    from spark.demo.workload import Workload, WorkloadSpec

    config = make_config(tmp_path, "canal-json")
    storage = open_storage(config.storage)
    writer = ArchiveWriter(config, storage, {"cdc": 2})
    with_extension = get_encoder("canal-json").encode_all(list(Workload(WorkloadSpec(tables=1, events=10, seed=1)).events()), 2)
    writer.interval(T0, T0 + HOUR, [("cdc", r) for r in with_extension])
    assert apply_interval(config, T0, T0 + HOUR).watermark > 0
    assert orjson.loads(storage.read(topic_clock_path("shop", "cdc")))["enable_tidb_extension"] is True
    writer.interval(T0 + HOUR, T0 + 2 * HOUR, [("cdc", r) for r in INTERVALS[0]])
    with pytest.raises(BadMessagesError, match="_tidb.commitTs: missing"):
        apply_interval(config, T0 + HOUR, T0 + 2 * HOUR)
