"""Same input, same answer (issue 37): the peer's pipeline and tidelake over tidelake's own messages.

``run`` takes a benchmark archive (``bench/apply_throughput.py``'s), applies it with the real job
(``spark-submit spark/jobs/apply.py`` on local[2]) and reads every table at the final W; runs the
peer's section-b pipeline (``bench/peer_same_input.py``, with the peer's Python and jars) over the
raw segments of the same archive, all partitions; and compares the final tables.

The comparison is one function of rows on both sides: every row is rendered canonically (the
columns in one order, absent columns as null; integers and decimals as their normalized value,
timestamps as UTC ISO with microseconds, bytes as hex), hashed to 64 bits (BLAKE2b), and a table's
checksum is the sum of its rows' hashes modulo 2^64 (order-independent, duplicates counted). Per
table: row counts, checksums, then the rows that differ (a multiset difference of the renderings).
A row only the peer has is *explained* when its key is the ``old`` image's key of an UPDATE that
changed the key and no later change wrote that key (the messages say so): the peer's MERGE matches
on the new image's key only and never deletes the old one. Every other differing row is
*unexplained*, and the bench fails on any. Once the explained rows are taken out of the peer's
side, its checksum must equal tidelake's.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson

UTC = dt.UTC
MASK = (1 << 64) - 1
NULL = None

# Canal-JSON's mysqlType (TiCDC writes it without parameters, "unsigned" kept) -> the peer's Spark type.
# TiCDC drops DECIMAL's precision and scale: the peer declares the widest exact decimal that holds
# the bench's values; the canonical rendering compares decimals by value.
SPARK_TYPES = {
    "tinyint": "INT", "smallint": "INT", "mediumint": "INT", "int": "INT", "integer": "INT", "year": "INT",
    "tinyint unsigned": "INT", "smallint unsigned": "INT", "mediumint unsigned": "INT", "int unsigned": "BIGINT",
    "bigint": "BIGINT", "bigint unsigned": "DECIMAL(20,0)",
    "decimal": "DECIMAL(38,10)", "decimal unsigned": "DECIMAL(38,10)",
    "float": "DOUBLE", "double": "DOUBLE",
    "datetime": "TIMESTAMP_NTZ", "timestamp": "TIMESTAMP", "date": "DATE",
    "binary": "BINARY", "varbinary": "BINARY", "tinyblob": "BINARY", "blob": "BINARY", "mediumblob": "BINARY",
    "longblob": "BINARY",
}


# ---------------------------------------------------------------- the canonical rendering, both sides


def canonical_value(value: Any) -> str | None:
    """One value as text that is the same for the same value on both sides (None stays None)."""
    if value is None:
        return NULL
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Decimal):
        if value == value.to_integral_value():
            return str(int(value))
        return format(value.normalize(), "f")
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
        return value.isoformat(sep=" ", timespec="microseconds")
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "0x" + bytes(value).hex()
    return str(value)


def canonical_row(row: Mapping[str, Any], columns: Sequence[str]) -> bytes:
    """A row rendered over ``columns`` (in that order; a column the row lacks is null) as JSON bytes."""
    return orjson.dumps([canonical_value(row.get(c)) for c in columns])


def row_hash(rendered: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(rendered, digest_size=8).digest(), "little")


def checksum(rendered: Iterable[bytes]) -> int:
    """The sum of the rows' 64-bit hashes modulo 2^64: independent of order, duplicates counted."""
    total = 0
    for r in rendered:
        total = (total + row_hash(r)) & MASK
    return total


def key_of(row: Mapping[str, Any], keys: Sequence[str]) -> tuple[str | None, ...]:
    return tuple(canonical_value(row.get(k)) for k in keys)


# ---------------------------------------------------------------- what the messages say about keys


@dataclass
class History:
    """Per table: its key columns and each key's last touch, by (commitTs, partition, offset, position).

    A key is touched when a row image of a change carries it (``data``), or when an UPDATE's ``old``
    image carries it and its ``data`` carries another key (the key moved away). ``moved_away`` holds the
    keys whose last touch is such a move: the rows the peer's MERGE leaves behind."""

    keys: dict[str, tuple[str, ...]] = field(default_factory=dict)
    last: dict[str, dict[tuple[str | None, ...], tuple[tuple[int, ...], bool]]] = field(default_factory=dict)
    types: dict[str, dict[str, str]] = field(default_factory=dict)  # column -> mysqlType, every column seen

    def touch(self, table: str, key: tuple[str | None, ...], order: tuple[int, ...], moved_away: bool) -> None:
        seen = self.last.setdefault(table, {})
        if key not in seen or seen[key][0] < order:
            seen[key] = (order, moved_away)

    def add(self, doc: Mapping[str, Any], partition: int, offset: int) -> None:
        """One Canal-JSON document (a DDL or a watermark adds nothing)."""
        if doc.get("isDdl") or not doc.get("data"):
            return
        table = f"{doc['database']}.{doc['table']}"
        keys = tuple(doc.get("pkNames") or ())
        self.keys.setdefault(table, keys)
        self.types.setdefault(table, {}).update(doc.get("mysqlType") or {})
        commit_ts = (doc.get("_tidb") or {}).get("commitTs") or 0
        olds = doc.get("old") if doc.get("type") == "UPDATE" else None
        for pos, data in enumerate(doc["data"]):
            order = (commit_ts, partition, offset, pos)
            new = key_of(data, keys)
            self.touch(table, new, order, False)
            if olds and pos < len(olds) and olds[pos]:
                old = key_of({**data, **olds[pos]}, keys)
                if old != new:
                    self.touch(table, old, order, True)

    def moved_away(self, table: str) -> set[tuple[str | None, ...]]:
        return {k for k, (_, moved) in self.last.get(table, {}).items() if moved}


def read_history(segments: Iterable[tuple[int, Path]]) -> History:
    """The history of every raw segment ``(partition, path)`` of an archive."""
    import pyarrow.parquet as pq

    history = History()
    for partition, path in segments:
        t = pq.read_table(path, columns=["offset", "value"]).to_pydict()
        for offset, value in zip(t["offset"], t["value"]):
            history.add(orjson.loads(value), partition, offset)
    return history


# ---------------------------------------------------------------- the comparison


@dataclass
class TableDiff:
    table: str
    peer_rows: int
    ours_rows: int
    peer_checksum: int
    ours_checksum: int
    explained: list[bytes]  # rows only the peer has, left behind by a key-changing UPDATE
    unexplained_peer: list[bytes]  # any other row only the peer has
    unexplained_ours: list[bytes]  # rows only tidelake has
    rest_equal: bool  # the peer's checksum less the explained rows equals tidelake's
    columns: Sequence[str] = ()

    @property
    def unexplained(self) -> int:
        return len(self.unexplained_peer) + len(self.unexplained_ours)


def compare_table(table: str, peer: Sequence[Mapping[str, Any]], ours: Sequence[Mapping[str, Any]], columns: Sequence[str],
                  keys: Sequence[str], moved_away: set[tuple[str | None, ...]]) -> TableDiff:
    """Both sides' final rows of one table, compared as the module docstring says."""
    peer_r = [canonical_row(r, columns) for r in peer]
    ours_r = [canonical_row(r, columns) for r in ours]
    peer_c, ours_c = Counter(peer_r), Counter(ours_r)
    only_peer, only_ours = peer_c - ours_c, ours_c - peer_c
    ours_keys = {key_of(r, keys) for r in ours}
    key_index = [columns.index(k) for k in keys]
    explained, unexplained_peer = [], []
    for rendered, n in sorted(only_peer.items()):
        values = orjson.loads(rendered)
        key = tuple(values[i] for i in key_index)
        target = explained if key in moved_away and key not in ours_keys and n == 1 else unexplained_peer
        target.extend([rendered] * n)
    unexplained_ours = [r for rendered, n in sorted(only_ours.items()) for r in [rendered] * n]
    peer_sum, ours_sum = checksum(peer_r), checksum(ours_r)
    rest = (peer_sum - checksum(explained)) & MASK
    return TableDiff(table, len(peer_r), len(ours_r), peer_sum, ours_sum, explained, unexplained_peer, unexplained_ours,
                     rest == ours_sum, tuple(columns))


def table_columns(*schemas: Iterable[str], order: Sequence[str] = ()) -> list[str]:
    """Every column of either side: those in ``order`` first, in that order, then the others sorted."""
    names = {n for s in schemas for n in s}
    return [c for c in order if c in names] + sorted(names - set(order))


def print_diffs(diffs: Sequence[TableDiff], show: int = 5) -> None:
    print(f"    {'table':<14} {'peer rows':>10} {'tidelake':>10} {'peer checksum':>18} {'tidelake checksum':>18} "
          f"{'equal':>5} {'explained':>9} {'unexplained':>11} {'rest equal':>10}")
    for d in diffs:
        print(f"    {d.table:<14} {d.peer_rows:>10,} {d.ours_rows:>10,} {d.peer_checksum:>18x} {d.ours_checksum:>18x} "
              f"{'yes' if d.peer_checksum == d.ours_checksum and d.peer_rows == d.ours_rows else 'no':>5} "
              f"{len(d.explained):>9,} {d.unexplained:>11,} {'yes' if d.rest_equal else 'NO':>10}")
    for d in diffs:
        for label, rows in (("only the peer has", d.unexplained_peer), ("only tidelake has", d.unexplained_ours)):
            for r in rows[:show]:
                print(f"      UNEXPLAINED {d.table}: {label} {r.decode()}")
            if len(rows) > show:
                print(f"      ... and {len(rows) - show:,} more rows {label} in {d.table}")
    example = next((d for d in diffs if d.explained), None)
    if example is not None:
        print(f"      e.g. a row only the peer has in {example.table} (an old key a key-changing UPDATE moved away): "
              f"{example.explained[0].decode()} ({', '.join(example.columns)})")
    explained = sum(len(d.explained) for d in diffs)
    unexplained = sum(d.unexplained for d in diffs)
    per_table = explained / len(diffs) if diffs else 0
    print(f"    same input, same answer: {len(diffs)} tables; the peer keeps {explained:,} extra rows "
          f"({per_table:,.0f} a table), each the old key of an UPDATE that changed the key (its MERGE never deletes it); "
          f"unexplained differences: {unexplained:,}; everything else "
          f"{'equal' if not unexplained and all(d.rest_equal for d in diffs) else 'NOT equal'}", flush=True)


def assert_same(diffs: Sequence[TableDiff]) -> None:
    bad = [d.table for d in diffs if d.unexplained or not d.rest_equal]
    assert not bad, f"same input, different answer beyond the peer's key-change leftovers in {', '.join(bad)}"


# ---------------------------------------------------------------- the run


def peer_columns(history: History, order: Sequence[str] = ()) -> dict[str, dict[str, Any]]:
    """Each table's columns for the peer: every column the messages' ``mysqlType`` ever names, typed."""
    out = {}
    for table, types in sorted(history.types.items()):
        names = table_columns(types, order=order)
        out[table] = {"columns": [[n, SPARK_TYPES.get(types[n].lower(), "STRING")] for n in names],
                      "keys": list(history.keys[table])}
    return out


def read_ours(archive_run: Path, protocol: str) -> dict[str, list[dict[str, Any]]]:
    """Every table of the applied run at its latest (the final) W, as rows."""
    from bench.archive import pipeline_config
    from spark.query.read import read_pipeline
    from spark.tables.catalog import close_catalogs

    try:
        w, tables = read_pipeline(pipeline_config(archive_run, protocol=protocol))
    finally:
        close_catalogs()
    print(f"    tidelake: {len(tables)} tables read at the final W {w}", flush=True)
    return {f"{db}.{t}": rows.to_pylist() for (db, t), rows in tables.items()}


def run_peer(peer_home: Path, segments: list[Path], columns: dict[str, Any], scratch: Path) -> dict[str, Any]:
    """``bench/peer_same_input.py`` with the peer's Python and jars; its results.json."""
    from bench.jobs import JobFailed

    scratch.mkdir(parents=True, exist_ok=True)
    (scratch / "segments.txt").write_text("".join(f"{p}\n" for p in segments))
    (scratch / "columns.json").write_text(json.dumps(columns, indent=1))
    argv = [str(peer_home / "venv" / "bin" / "python"), str(Path(__file__).with_name("peer_same_input.py")),
            "--segments", str(scratch / "segments.txt"), "--columns", str(scratch / "columns.json"),
            "--home", str(scratch), "--out", str(scratch / "out"),
            "--jars", (peer_home / "spark_jars.txt").read_text().strip()]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_HOME")}
    done = subprocess.run(argv, check=False, capture_output=True, text=True, env=env)
    if done.returncode:
        raise JobFailed(f"bench/peer_same_input.py exited {done.returncode}:\n{(done.stdout + done.stderr)[-3000:]}")
    return json.loads((scratch / "out" / "results.json").read_text())


def run(archive: Path, workdir: Path, peer_home: Path, protocol: str, conf: dict[str, str]) -> list[TableDiff]:
    """Apply ``archive`` with tidelake and with the peer, compare, print; fails on an unexplained difference."""
    import pyarrow.parquet as pq

    from bench.apply_throughput import run_job
    from bench.archive import segment_paths
    from spark.demo.workload import ADDED_COLUMN, BASE_COLUMNS

    order = [c[0] for c in BASE_COLUMNS] + [ADDED_COLUMN[0]]
    segments = [(p, path) for p, paths in segment_paths(archive) for path in paths]
    t = time.perf_counter()
    history = read_history(segments)
    print(f"  same input (issue 37): the peer's parse + dedup + MERGE and tidelake over the same {len(segments)} raw "
          f"segments; messages read in {time.perf_counter() - t:.1f}s: {len(history.keys)} tables, "
          f"{sum(len(history.moved_away(x)) for x in history.keys):,} keys last moved away by a key-changing UPDATE", flush=True)
    run_dir = workdir / "runs" / "same-input"
    t = time.perf_counter()
    run_job(archive, run_dir, "local[2]", 0, conf, keep=True)
    ours = read_ours(run_dir, protocol)
    shutil.rmtree(run_dir)
    print(f"    tidelake: applied and read in {time.perf_counter() - t:.1f}s", flush=True)
    t = time.perf_counter()
    scratch = workdir / "runs" / "same-input-peer"
    result = run_peer(peer_home, [path for _, path in segments], peer_columns(history, order), scratch)
    print(f"    peer: {result['row_events']:,} row events, {result['keys']:,} keys after dedup; parse {result['parse_s']:.2f}s, "
          f"dedup {result['dedup_s']:.2f}s, MERGE {result['merge_s']:.2f}s; {time.perf_counter() - t:.1f}s with start-up "
          f"and the tables written out", flush=True)
    diffs = []
    for table in sorted(set(result["tables"]) | set(ours)):
        peer_rows = pq.read_table(scratch / "out" / table).to_pylist() if table in result["tables"] else []
        our_rows = ours.get(table, [])
        keys = history.keys.get(table, ("id",))
        columns = table_columns(keys, *(r.keys() for r in peer_rows[:1] + our_rows[:1]), order=order)
        diffs.append(compare_table(table, peer_rows, our_rows, columns, keys, history.moved_away(table)))
    shutil.rmtree(scratch)
    print_diffs(diffs)
    assert_same(diffs)
    return diffs
