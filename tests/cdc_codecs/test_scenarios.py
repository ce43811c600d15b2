"""One scenario table, run for every protocol: encode as the upstream does, decode, compare.

insert, update, update that changes the key, delete, DDL, watermark, and bad bytes.
Where a protocol cannot carry something (no commitTs, no watermark, millisecond
timestamps), the expectation says so explicitly.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from cdc_codecs import (
    PROTOCOLS,
    Clock,
    DdlChange,
    DecodeError,
    Op,
    RawMessage,
    RowChange,
    SourcePosition,
    TableSchema,
    Watermark,
    get_decoder,
    get_encoder,
)
from cdc_codecs.events import Column
from cdc_codecs.types import parse_mysql_type

UTC = dt.timezone.utc
SCHEMA = TableSchema(
    "shop",
    "orders",
    tuple(
        Column(n, parse_mysql_type(t), n != "id")
        for n, t in [
            ("id", "bigint"), ("name", "varchar(20)"), ("amt", "decimal(10,2)"), ("at", "datetime(3)"),
            ("ts", "timestamp(3)"), ("bin", "varbinary(8)"), ("u", "bigint unsigned"), ("d", "date"),
        ]
    ),
    ("id",),
)
TYPES = SCHEMA.column_types
ROW1 = {
    "id": 1, "name": "ünï 'q'", "amt": Decimal("-12.50"), "at": dt.datetime(2024, 2, 29, 23, 59, 59, 123000),
    "ts": dt.datetime(2024, 3, 1, 8, 0, 0, 5000, tzinfo=UTC), "bin": b"\x00\n\xff\"\\", "u": 2**64 - 1, "d": dt.date(1970, 1, 1),
}
ROW1B = {**ROW1, "name": "changed", "amt": None}
ROW2 = {**ROW1B, "id": 2}
P = SourcePosition("gen", 0, 0)
TSO = 450_000_000_000_000_000

HISTORY = [
    DdlChange("shop", "orders", "CREATE TABLE `shop`.`orders` (...)", TSO, P, "CREATE", None, SCHEMA),
    RowChange(Op.INSERT, "shop", "orders", None, ROW1, ("id",), TYPES, TSO + 1, P, 1_709_251_200_000),
    RowChange(Op.UPDATE, "shop", "orders", ROW1, ROW1B, ("id",), TYPES, TSO + 2, P, 1_709_251_200_001),
    RowChange(Op.UPDATE, "shop", "orders", ROW1B, ROW2, ("id",), TYPES, TSO + 3, P, 1_709_251_200_002),
    RowChange(Op.DELETE, "shop", "orders", ROW2, None, ("id",), TYPES, TSO + 4, P, 1_709_251_200_003),
    Watermark(TSO + 5, P),
]

# What each protocol cannot carry.
NO_WATERMARK = {"canal", "cloudcanal-canal-json", "debezium-mysql", "cloudcanal-debezium", "cloudcanal-json"}
WALL_CLOCK_WATERMARK = {"dts-avro"}


def roundtrip(protocol: str, events, partitions: int = 3):
    encoder = get_encoder(protocol)
    records = encoder.encode_all(events, partitions)
    decoders = {p: get_decoder(protocol) for p in range(partitions)}
    out = []
    for offset, r in enumerate(records):
        out += decoders[r.partition].decode(RawMessage(r.key, r.value, SourcePosition("orders", r.partition, offset)))
    for d in decoders.values():
        assert d.finish() == []
    return records, out


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
def test_scenario(protocol: str) -> None:
    records, events = roundtrip(protocol, HISTORY)
    has_ts = PROTOCOLS[protocol].has_commit_ts
    ddls = [e for e in events if isinstance(e, DdlChange)]
    rows = [e for e in events if isinstance(e, RowChange)]
    marks = [e for e in events if isinstance(e, Watermark)]

    # DDL: once per partition, except the Canal family, which sends it to partition 0 only.
    expected_ddl_partitions = [0] if protocol in ("canal-json", "canal", "cloudcanal-canal-json") else [0, 1, 2]
    assert sorted(d.position.partition for d in ddls) == expected_ddl_partitions
    assert all(d.sql == HISTORY[0].sql and (d.commit_ts == TSO if has_ts else d.commit_ts is None) for d in ddls)

    # Rows: every change of the key lands on one partition (per key), in order.
    assert [r.op for r in rows] == [Op.INSERT, Op.UPDATE, Op.UPDATE, Op.DELETE]
    ins, upd, move, dele = rows
    expected = {
        "ins": (None, ROW1), "upd": (ROW1, ROW1B), "move": (ROW1B, ROW2), "dele": (ROW2, None),
    }
    for name, row in zip(expected, rows):
        before, after = expected[name]
        assert row.before == before, (protocol, name)
        assert row.after == after, (protocol, name)
        assert row.key_columns == ("id",), protocol
        assert (row.database, row.table) == ("shop", "orders")
        assert row.commit_ts == ({"ins": TSO + 1, "upd": TSO + 2, "move": TSO + 3, "dele": TSO + 4}[name] if has_ts else None)
    assert move.before["id"] == 1 and move.after["id"] == 2  # the key change is visible
    assert rows[0].column_types["u"].kind.value == "unsigned_long" or protocol == "dts-avro"

    # Watermarks: broadcast to every partition.
    if protocol in NO_WATERMARK:
        assert marks == []
    elif protocol in WALL_CLOCK_WATERMARK:
        assert sorted(m.position.partition for m in marks) == [0, 1, 2] and all(m.clock is Clock.EPOCH_MS for m in marks)
    else:
        assert [(m.ts, m.clock) for m in marks] == [(TSO + 5, Clock.TSO)] * 3
        assert sorted(m.position.partition for m in marks) == [0, 1, 2]


@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
@pytest.mark.parametrize(
    "key, value",
    [
        (b"\x00\x01", b"\xff\xfe garbage"),
        (b"", b"{"),
        (None, b'{"payload": 3, "type": 7, "data": "x"}'),
        (b"\x00" * 7, b"\x00" * 9),
    ],
    ids=["binary-garbage", "truncated-json", "mistyped-fields", "short-frames"],
)
def test_bad_bytes_raise_a_located_decode_error(protocol: str, key, value) -> None:
    decoder = get_decoder(protocol)
    msg = RawMessage(key, value, SourcePosition("orders", 4, 1532))
    try:
        events = decoder.decode(msg)
    except DecodeError as exc:
        assert str(exc).startswith(f"{protocol} orders/4@1532[")
        assert exc.raw is msg and exc.protocol == protocol
        assert "internal error" not in exc.reason, exc  # a named field/reason, not a caught bug
    else:
        # Only a Debezium tombstone-like or empty batch may legitimately decode to nothing.
        assert events == [], (protocol, events)
