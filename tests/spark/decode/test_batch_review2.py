"""Reviewer's stress tests of the chunked column-wise path (``Plan.seal``/``CHUNK``), the numpy text
shapes and the unsorted pending path: random streams over several tables, both paths byte-identical."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson
import pytest

from spark.decode import changelog
from spark.demo.workload import tso
from tests.spark.decode.test_batch import decode_both

pytestmark = pytest.mark.slow  # whole intervals, Spark or services: make test-fast leaves it out (docs/testing.md)

TYPES = {"id": "bigint", "name": "varchar", "amount": "decimal", "qty": "int", "updated_at": "datetime",
         "created_at": "timestamp", "payload": "varbinary", "big": "bigint unsigned", "day": "date"}
EDGE = {
    "id": ["0", "-0", "1", "-1", "9223372036854775807", "-9223372036854775808", "9223372036854775808",
           "-9223372036854775809", "007", "", "-", "١", "1é", None],
    "name": ["", "a", "é", "🦆", "a" * 40, None, "x\u0000y"],
    "amount": ["0", "-0", "1.5", "0.000001", "0.0000001", "00.1", "1.", ".5", "1é", "", None, "12345678901234567890.5"],
    "qty": ["0", "-0", "2147483647", "2147483648", "-2147483648", "-2147483649", "", "-", "1é", "٣", None, "+1"],
    "updated_at": ["2024-01-01 00:00:00", "2024-01-01 00:00:00.123456", "2024-01-01 00:00:00.1",
                   "2024-01-01 00:00:00.1234567", "2024-02-30 00:00:00", "2024-01-01 00:00:0é", "２０２４-01-01 00:00:00",
                   "2024-01-01T00:00:00", "", None, "2024-01-01 00:00:00.12345é", "0000-00-00 00:00:00"],
    "created_at": ["1970-01-01 00:00:01", "2038-01-19 03:14:07.999999", "2024-01-01 00:00:00.5", None,
                   "2024-01-01 00:00:0é"],
    "payload": ["", "ab", "\u00ff", "\u0100", None, "é" * 3],
    "big": ["0", "18446744073709551615", "18446744073709551616", "99999999999999999999", "-0", "-1",
            "00000000000000000001", "000000000000000000001", None, "1844674407370955161é"],
    "day": ["2024-01-01", "2024-02-29", "2023-02-29", "2024-1-01", "2024-01-0é", "", None, "0000-00-00"],
}
# Values one length each (the zero-copy view of leading_bytes): all valid, or all invalid.
ONE_LENGTH = {
    "updated_at": ["2024-01-01 00:00:00", "2024-13-01 00:00:00", "2024-01-01 00:00:0x", "2024-01-01 00:00:00.123456",
                   "2024-01-01 00:00:00.12345x", "2024-01-01T00:00:00.123456"],
    "day": ["2024-01-01", "2024-01-32", "2024x01-01"],
}


def _doc(ts: int, table: str, op: str, row: dict[str, Any], old: dict[str, Any] | None, types: dict[str, str],
         keys: list[str]) -> bytes:
    return orjson.dumps({"id": 0, "database": "db", "table": table, "pkNames": keys, "isDdl": False, "type": op,
                         "es": ts >> 18, "ts": ts >> 18, "sql": "", "sqlType": None, "mysqlType": types,
                         "data": [row], "old": [old] if old is not None else None, "_tidb": {"commitTs": ts}})


def _stream(seed: int, count: int) -> list[tuple[None, bytes]]:
    rng = random.Random(seed)
    ts = tso(1_700_000_000_000)
    # Tables t0..t2 share one mysqlType (one plan); u has the columns in another order, later moved back;
    # v takes new mysqlTypes (a varchar(N) of growing N: pending, learnt after the batch loop).
    tables = {"t0": dict(TYPES), "t1": dict(TYPES), "t2": dict(TYPES), "u": dict(reversed(TYPES.items())),
              "v": dict(TYPES), "k": dict(TYPES), "nokey": dict(TYPES),
              "narrow": {"id": "bigint"}, "w": {"name": "varchar", "day": "date"}}
    live: dict[str, dict[str, dict[str, Any]]] = {t: {} for t in tables}
    one = {c: rng.choice(v) for c, v in ONE_LENGTH.items()}
    mode = rng.choice(["edge", "one", "clean"])
    out = []
    n = 0
    for i in range(count):
        ts += 1
        table = rng.choice(list(tables))
        types = tables[table]
        if table == "v" and rng.random() < 0.05:
            n += 1
            types = tables["v"] = {**types, "name": f"varchar({n})"}
        if table == "u" and rng.random() < 0.03:  # a column moved: the order changes mid-stream
            items = list(types.items())
            j = rng.randrange(len(items))
            items.insert(rng.randrange(len(items)), items.pop(j))
            types = tables["u"] = dict(items)
        keys = ["id", "name"] if table == "k" else [] if table == "nokey" else ["name"] if table == "w" else ["id"]
        if table == "w" and rng.random() < 0.05:  # a one-column key table taking new mysqlTypes too
            types = tables["w"] = {"name": f"varchar({rng.randrange(1000)})", "day": "date"}
        if rng.random() < 0.02:
            mode = rng.choice(["edge", "one", "clean"])

        def value(c: str, mode: str = mode) -> Any:
            if mode == "one" and c in one:
                return one[c]
            if mode == "edge" and rng.random() < 0.15:
                return rng.choice(EDGE[c])
            return {"id": str(rng.randrange(40)), "name": rng.choice(["a", "b", "cc"]), "amount": "1.25", "qty": "7",
                    "updated_at": "2024-05-06 07:08:09.5", "created_at": "2023-06-01 12:00:00", "payload": "ab",
                    "big": "18446744073709551615", "day": "2024-03-04"}[c] if rng.random() < 0.97 else None
        row = {c: value(c) for c in types}
        if rng.random() < 0.3:
            row = dict(reversed(row.items()))
        key = (row["id"], row["name"]) if table == "k" else row["name"] if table == "w" else row["id"]
        old = live[table].get(key)
        if old is not None and rng.random() < 0.6:
            op = "UPDATE" if rng.random() < 0.7 else "DELETE"
            if op == "UPDATE" and rng.random() < 0.3:  # the key moves
                row["name" if table == "w" else "id"] = str(rng.randrange(40))
            if op == "DELETE":
                row = old
                del live[table][key]
            else:
                del live[table][key]
                live[table][(row["id"], row["name"]) if table == "k" else row["name"] if table == "w" else row["id"]] = row
        else:
            op = "INSERT"
            live[table][key] = row
            old = None
        if rng.random() < 0.02:
            out.append((None, b'{"not": "canal"}'))
        out.append((None, _doc(ts, table, op, row, old if op == "UPDATE" else None, types, keys)))
    return out


@pytest.mark.parametrize("seed", range(12))
def test_random_streams_over_chunk_and_batch_sizes_write_the_same_change_log_both_ways(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    rng = random.Random(1000 + seed)
    chunk = rng.choice([1, 2, 3, 7, 1024])
    monkeypatch.setattr(changelog, "READ_BATCH", rng.choice([5, 64, 1023, 1024, 1025, 10_000]))
    monkeypatch.setattr(changelog, "ROW_GROUP", rng.choice([1, 2, 17, 500, 20_000]))
    messages = _stream(seed, rng.choice([300, 2100, 2600]))
    assert decode_both(tmp_path, [messages], monkeypatch=monkeypatch, chunk=chunk) > len(messages) // 20


def _digits(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("0123456789") for _ in range(n))


@pytest.mark.parametrize("shape", ["19", "26", "mixed", "21-26"])
def test_digit_soup_of_one_length_writes_the_same_change_log_both_ways(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                       shape: str) -> None:
    """Datetimes, dates and integers of random digits in the right places (most not a real date or in
    range), a whole read batch of one length (the zero-copy view), around CHUNK's 1,024 rows."""
    rng = random.Random(shape)
    types = {"id": "bigint unsigned", "q": "tinyint", "s": "bigint", "at": "datetime", "ts": "timestamp", "day": "date"}
    ts = tso(1_700_000_000_000)
    messages = []
    live: dict[str, dict[str, Any]] = {}
    for i in range(2049):
        ts += 1
        frac = {"19": 0, "26": 6, "mixed": rng.choice([0, 6]), "21-26": rng.randint(1, 6)}[shape]

        def stamp(frac: int = frac) -> str:
            if rng.random() < 0.8:  # a real one
                return (f"{rng.randint(1, 9999):04}-{rng.randint(1, 12):02}-{rng.randint(1, 28):02} {rng.randint(0, 23):02}:"
                        f"{rng.randint(0, 59):02}:{rng.randint(0, 59):02}") + ("." + _digits(rng, frac) if frac else "")
            year = rng.choice(["0000", "0001", "1969", "2024", "2023", "1900", "2000", "9999", _digits(rng, 4)])
            text = (f"{year}-{rng.choice(['01', '02', '12', '13', '00', _digits(rng, 2)])}-"
                    f"{rng.choice(['01', '28', '29', '30', '31', '32', '00', _digits(rng, 2)])} "
                    f"{rng.choice(['00', '23', '24', _digits(rng, 2)])}:{rng.choice(['00', '59', '60', _digits(rng, 2)])}:"
                    f"{rng.choice(['00', '59', '60', _digits(rng, 2)])}")
            return text + ("." + _digits(rng, frac) if frac else "")
        key = str(rng.randrange(50) if rng.random() < 0.9 else rng.choice([rng.randrange(1 << 64), (1 << 64) - 1, 1 << 64,
                                                                            int(_digits(rng, 20))]))
        row = {"id": key, "q": str(rng.randint(-130, 130)),
               "s": str(rng.choice([-(1 << 63), (1 << 63) - 1, -(1 << 63) - 1, 1 << 63, rng.randint(-(1 << 64), 1 << 64),
                                    *[rng.randint(-(1 << 63), (1 << 63) - 1)] * 5])),
               "at": stamp(), "ts": stamp(), "day": stamp()[:10]}
        old = live.get(key)
        op = "INSERT" if old is None else rng.choice(["UPDATE", "DELETE"])
        if op == "DELETE":
            row = live.pop(key)
        else:
            live[key] = row
        messages.append((None, _doc(ts, "d", op, row, old if op == "UPDATE" else None, types, ["id"])))
    monkeypatch.setattr(changelog, "READ_BATCH", 1024 if shape != "mixed" else 2049)
    assert decode_both(tmp_path, [messages], monkeypatch=monkeypatch, chunk=1024) > 50
