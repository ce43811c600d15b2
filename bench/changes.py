"""The change feed: ``read_changes(W1, W2)`` against a full diff of the two tags, as the table grows.

    python -m bench changes [--sizes 500000,5000000] [--changed 50000] [--keys hot,uniform]
                            [--write-mode merge-on-read] [--repeat 3] [--workdir DIR]

Per key distribution and table size: a pipeline whose table holds ``size`` rows at W1 (seeded
straight into the Iceberg table, not timed, then tagged by a run), then one run applying
``changed`` changes to distinct keys (60% updates, 20% deletes, 20% inserts of new keys, as
``bench apply --only growth`` draws them: ``hot`` from the newest ``5 * changed`` keys, where
an OLTP table's changes gather; ``uniform`` from every key) publishes W2. Timed, in the same run
and alternating: the change feed ``read_changes(config, W1, W2)`` (the change log, then the
touched keys' rows at both tags) and a full diff of the two tags (both snapshots read whole with
pyiceberg, then ``EXCEPT ALL`` both ways in DuckDB, the anti-join a user would write). Both must
find the same rows. Prints per size the medians, their ratio, and the feed's time at each size
over its time at the smallest.

Also timed: the feed without before images (``before_images=False``: upserts and deleted keys),
which reads no data file of W1.

Targets (issues 25, 33): with before images, hot keys: the feed >= 20x faster than the full diff at
1% changed keys of 5M rows, and flat (<= 1.3x) as the table grows 10x with the same number of
changed keys. Without before images, uniform keys: >= 20x the full diff and <= 1.2x as the table
grows 10x.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from bench import rows
from bench.archive import HOUR, T0, ArchiveBuilder, pipeline_config
from cdc_codecs import Op, Watermark, get_encoder
from spark.tables import catalog as cat
from spark.commit.apply import apply_interval
from spark.query.changes import DELETE, INSERT, UPDATE_AFTER, UPDATE_BEFORE, UPSERT, read_changes
from spark.tables.properties import table_watermark
from spark.tables.schema_map import COMMIT_TS, OP, metadata_columns
from spark.core.watermark import tag_name

PROTOCOL = "canal-json"
TABLE = "feed"
SEED_CHUNK = 500_000  # rows per seeding append: a file (and a row group) each, of the same size at every table size


def _table(config: Any) -> Any:
    (table,) = cat.pipeline_tables(cat.open_catalog(config), config)
    return table


def _seed(config: Any, end: int) -> None:
    """Rows ``0..end-1`` appended straight to the table in its own schema (not timed)."""
    for lo in range(0, end, SEED_CHUNK):
        table = _table(config)
        target = table.schema().as_arrow()
        data = rows.arrow_rows(lo, min(end, lo + SEED_CHUNK), 0)
        data = data.append_column(COMMIT_TS, pa.repeat(pa.scalar(table_watermark(table), pa.int64()), len(data)))
        data = data.append_column(OP, pa.repeat(pa.scalar(Op.INSERT.value, pa.string()), len(data)))
        table.append(data.select(target.names).cast(target))


def build(root: Path, size: int, changed: int, keys: str, write_mode: str, partitions: int = 2) -> tuple[Any, int, int]:
    """The pipeline at ``root``: W1 with ``size`` rows, W2 after ``changed`` changes. Returns (config, W1, W2)."""
    config = pipeline_config(root, protocol=PROTOCOL, write_mode=write_mode)
    builder = ArchiveBuilder(config, partitions)
    encoder = get_encoder(PROTOCOL)
    clock = rows.Clock()
    rng = random.Random(f"{keys}-{size}-{changed}")

    def run(events: list[Any], i: int) -> int:
        events.append(Watermark(clock.tick(), rows.POSITION))
        builder.add(encoder.encode_all(events, partitions), T0 + i * HOUR)
        builder.close_interval(T0 + i * HOUR, T0 + (i + 1) * HOUR)
        return apply_interval(config, T0 + i * HOUR, T0 + (i + 1) * HOUR).watermark

    run([rows.create(TABLE, clock)], 0)
    _seed(config, size)
    w1 = run([rows.change(Op.INSERT, TABLE, size, 0, clock)], 1)  # the seeded rows tagged at W1
    live = size + 1
    updates, deletes = changed * 6 // 10, changed * 2 // 10
    window = range(max(0, live - 5 * changed), live) if keys == "hot" else range(live)
    picked = rng.sample(window, updates + deletes)
    inserts = range(live, live + changed - updates - deletes)
    batch = ([rows.change(Op.UPDATE, TABLE, k, 1, clock) for k in picked[:updates]]
             + [rows.change(Op.DELETE, TABLE, k, 1, clock) for k in picked[updates:]]
             + [rows.change(Op.INSERT, TABLE, k, 1, clock) for k in inserts])
    rng.shuffle(batch)
    w2 = run([c._replace(commit_ts=clock.tick()) for c in batch], 2)
    return config, w1, w2


def feed(config: Any, w1: int, w2: int) -> tuple[int, int]:
    """read_changes: (before images, after images)."""
    changes = read_changes(config, w1, w2)
    # Counted in Arrow: a Python loop over the rows would time the bench, not the feed.
    kinds = changes[(rows.DATABASE, TABLE)].column("_change_type")
    count = {k.as_py(): n.as_py() for k, n in zip(*pc.value_counts(kinds).flatten())}
    return count.get(DELETE, 0) + count.get(UPDATE_BEFORE, 0), count.get(INSERT, 0) + count.get(UPDATE_AFTER, 0)


def after_images(config: Any, w1: int, w2: int) -> tuple[int, int]:
    """read_changes(before_images=False): (deleted keys, after images)."""
    counts = read_changes(config, w1, w2, before_images=False).details[(rows.DATABASE, TABLE)].counts
    return counts[DELETE], counts[UPSERT]


def full_diff(config: Any, w1: int, w2: int) -> tuple[int, int]:
    """Both tags read whole, then their rows EXCEPT ALL each other: (rows only at W1, rows only at W2)."""
    import duckdb

    table = _table(config)
    meta = list(metadata_columns(table.schema(), table.properties).names)
    at = {w: table.scan(snapshot_id=table.snapshot_by_name(tag_name(w)).snapshot_id).to_arrow().drop_columns(meta)
          for w in (w1, w2)}
    con = duckdb.connect()
    con.register("w1", at[w1])
    con.register("w2", at[w2])
    gone = con.sql("SELECT count(*) FROM (SELECT * FROM w1 EXCEPT ALL SELECT * FROM w2)").fetchone()[0]
    new = con.sql("SELECT count(*) FROM (SELECT * FROM w2 EXCEPT ALL SELECT * FROM w1)").fetchone()[0]
    con.close()
    return gone, new


def measure(config: Any, w1: int, w2: int, repeat: int, changed: int) -> tuple[float, float, float]:
    """Median seconds of the feed, the feed without before images and the full diff, measured
    alternately; their answers must agree."""
    took: dict[str, list[float]] = {"feed": [], "after": [], "diff": []}
    answers = {}
    for _ in range(repeat):
        for name, fn in (("feed", feed), ("after", after_images), ("diff", full_diff)):
            started = time.perf_counter()
            answers[name] = fn(config, w1, w2)
            took[name].append(time.perf_counter() - started)
    if answers["feed"] != answers["diff"]:
        raise AssertionError(f"the change feed found {answers['feed']} rows (before, after), the full diff {answers['diff']}")
    deleted, upserts = answers["after"]
    if upserts != answers["diff"][1] or deleted + upserts != changed:
        raise AssertionError(f"without before images: {upserts} upserts and {deleted} deletes; the full diff has "
                             f"{answers['diff'][1]} new rows, and {changed} keys changed")
    return statistics.median(took["feed"]), statistics.median(took["after"]), statistics.median(took["diff"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench changes", description=__doc__.split("\n\n")[2].replace("\n", " "))
    p.add_argument("--sizes", default="500000,5000000", help="table sizes in rows at W1 (default %(default)s)")
    p.add_argument("--changed", type=int, default=50_000, help="keys changed between W1 and W2 (default %(default)s)")
    p.add_argument("--keys", default="hot,uniform", help="hot and/or uniform (default %(default)s)")
    p.add_argument("--write-mode", default="merge-on-read", choices=("merge-on-read", "copy-on-write"))
    p.add_argument("--repeat", type=int, default=3, help="timed repetitions, medians printed (default %(default)s)")
    p.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "tidelake-bench",
                   help="where the pipelines are built (default %(default)s)")
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"change feed vs full diff: {args.changed:,} keys changed (60% updates, 20% deletes, 20% inserts) between "
          f"two Ws of a {' -> '.join(f'{s:,}' for s in sizes)}-row table; {args.write_mode}; median of {args.repeat}",
          flush=True)
    for keys in args.keys.split(","):
        first = None
        first_after = None
        print(f"  {keys} keys: {'rows':>12} {'changed':>8} {'feed s':>8} {'after s':>8} {'full diff s':>12} "
              f"{'diff/feed':>10} {'diff/after':>11} {'feed vs ' + format(sizes[0], ','):>16} {'after vs':>9}", flush=True)
        for size in sizes:
            root = args.workdir / "runs" / f"changes-{keys}-{size}"
            if root.exists():
                shutil.rmtree(root)
            started = time.perf_counter()
            config, w1, w2 = build(root, size, args.changed, keys, args.write_mode)
            built = time.perf_counter() - started
            took, after, diff = measure(config, w1, w2, args.repeat, args.changed)
            first, first_after = first or took, first_after or after
            print(f"  {'':{len(keys) + 6}} {size:>12,} {args.changed / size:7.1%} {took:8.2f} {after:8.2f} {diff:12.2f} "
                  f"{diff / took:9.1f}x {diff / after:10.1f}x {took / first:15.2f}x {after / first_after:8.2f}x"
                  f"   (built in {built:.0f}s)", flush=True)
            cat.close_catalogs()
            shutil.rmtree(root)
        print(f"  {keys} keys: targets: full diff / feed >= 20x at the largest size and feed growth <= 1.3x over "
              f"{sizes[-1] / sizes[0]:.0f}x the rows for hot keys (before images); full diff / after >= 20x and "
              "after-images growth <= 1.2x for uniform keys", flush=True)
    return 0
