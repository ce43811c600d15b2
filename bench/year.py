"""``python -m bench maintenance --year``: what grows over many runs of one pipeline, with maintenance.

One pipeline on a one-minute schedule (default 1,440 runs: a day) over three tables, each run a few
changes per table; every ``--ghost-every`` runs an online schema change's helper tables come and go
(gh-ost's ``_t0_gho`` created, written and dropped a run later, its ``_t0_ghc`` created and dropped
within the run). Maintenance runs every ``--every`` runs (hourly by default) with a retention that
keeps every W of the last 30 minutes, the hourly ones of the last 6 hours, nothing older, grace 0,
and an archive horizon of 6 hours. Every ``--measure-every`` runs it prints what the issue asks to
stay flat: tables in the catalog (of which dropped), manifests per table at main's head (mean and
max), the current metadata.json per table (mean and max), objects in the archive, and the time to
plan a read of every table at ``main`` and at the latest W's tag (median of 3).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.archive import ArchiveBuilder
from cdc_codecs import get_encoder
from cdc_codecs.events import Column, DdlChange, Op, RowChange, SourcePosition, TableSchema, Watermark
from cdc_codecs.types import parse_mysql_type
from spark.commit.apply import apply_interval
from spark.commit.published import published_watermarks
from spark.core.watermark import tag_name
from spark.config import MaintenanceConfig, PipelineConfig
from spark.maintain.run import maintain
from spark.tables import catalog as cat
from spark.tables.properties import DROPPED

UTC = dt.timezone.utc
T0 = dt.datetime(2024, 1, 1, tzinfo=UTC)
MINUTE = dt.timedelta(minutes=1)
DB = "shop"
P = SourcePosition("gen", 0, 0)
COLUMNS = (("id", "bigint"), ("v", "varchar(32)"), ("n", "int"))


def _schema(table: str) -> TableSchema:
    return TableSchema(DB, table, tuple(Column(n, parse_mysql_type(t), n != "id") for n, t in COLUMNS), ("id",))


def _create_sql(table: str) -> str:
    return f"CREATE TABLE `{DB}`.`{table}` (id bigint primary key, v varchar(32), n int)"


class History:
    """Upstream events run by run, with TSOs on the run's own minute (so retention sees real ages)."""

    def __init__(self, seed: int = 3) -> None:
        self.rng = random.Random(seed)
        self.schemas: dict[str, TableSchema] = {}

    def run(self, r: int, changes: int, ghost_every: int) -> list:
        base = int((T0 + r * MINUTE).timestamp() * 1000)
        tick = iter(range(1, 50_000))
        events: list = []

        def ts() -> int:
            return (base + next(tick)) << 18

        def ddl(table: str, sql: str, kind: str, after: TableSchema | None = None) -> None:
            t = ts()
            events.append(DdlChange(DB, table, sql, t, P, kind, None, after, t >> 18))

        def write(table: str, key: int) -> None:
            s = self.schemas[table]
            t = ts()
            events.append(RowChange(Op.INSERT, DB, table, None, {"id": key, "v": f"r{r}", "n": r}, s.key_columns,
                                    s.column_types, t, P, t >> 18))

        def create(table: str) -> None:
            self.schemas[table] = _schema(table)
            ddl(table, _create_sql(table), "CREATE", self.schemas[table])

        def drop(table: str) -> None:
            ddl(table, f"DROP TABLE IF EXISTS `{DB}`.`{table}`", "QUERY")
            self.schemas.pop(table, None)

        if r == 0:
            for t in ("t0", "t1", "t2"):
                create(t)
        if r % ghost_every == 1 and r > 1 and "_t0_gho" in self.schemas:
            drop("_t0_gho")
        for t in ("t0", "t1", "t2"):
            for _ in range(changes):
                write(t, self.rng.randrange(200))
        if r % ghost_every == 0 and r > 0:
            create("_t0_ghc")
            write("_t0_ghc", 1)
            create("_t0_gho")
            for k in range(3):
                write("_t0_gho", k)
            drop("_t0_ghc")
        t = ts()
        events.append(Watermark(t, P))
        return events


def _config(root: Path, keep_hours: float = 6.0) -> PipelineConfig:
    policy = MaintenanceConfig(keep_all=dt.timedelta(minutes=30), keep_hourly=dt.timedelta(hours=keep_hours),
                               keep_daily=dt.timedelta(0), grace_period=dt.timedelta(0),
                               archive_horizon=dt.timedelta(hours=keep_hours))
    config = PipelineConfig.from_mapping({
        "name": "year", "kafka": {"bootstrap_servers": "unused:9092"},
        "topics": [{"name": "cdc", "protocol": "canal-json"}], "storage": {"url": str(root)},
    }, "bench")
    return dataclasses.replace(config, maintenance=policy)


def _plan_seconds(tables: list, at_tag: str | None) -> float:
    times = []
    for _ in range(3):
        started = time.perf_counter()
        for t in tables:
            ref = t.metadata.refs.get(at_tag) if at_tag else None
            if at_tag and ref is None:
                continue
            list(t.scan(snapshot_id=ref.snapshot_id if ref else None).plan_files())
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure(config: PipelineConfig, storage) -> dict:  # noqa: ANN001
    catalog = cat.open_catalog(config)
    tables = cat.pipeline_tables(catalog, config)
    manifests, meta = [], []
    for t in tables:
        head = t.current_snapshot()
        manifests.append(len(head.manifests(t.io)) if head else 0)
        meta.append(storage.arrow_fs.get_file_info(t.metadata_location.replace("file://", "")).size or 0)
    latest = max(published_watermarks(storage, config.name), default=None)
    objects = storage.list(config.name)
    segments = (f"{config.name}/segments/", f"{config.name}/changelog/")
    return {
        "tables": len(tables), "dropped": sum(1 for t in tables if DROPPED in t.properties),
        "manifests_mean": statistics.mean(manifests), "manifests_max": max(manifests),
        "metadata_kib_mean": statistics.mean(meta) / 1024, "metadata_kib_max": max(meta) / 1024,
        "archive_objects": len(objects),
        "archive_records": sum(1 for p in objects if not p.startswith(segments)),  # all but segments and change logs
        "plan_main_ms": _plan_seconds(tables, None) * 1000,
        "plan_tag_ms": _plan_seconds(tables, tag_name(latest) if latest else None) * 1000,
    }


HEADER = ("run", "tables", "dropped", "manifests/table", "max", "metadata KiB", "max", "archive objs", "records",
          "plan main ms", "plan tag ms")


def row(r: int, m: dict) -> str:
    return (f"{r:>6} {m['tables']:>6} {m['dropped']:>7} {m['manifests_mean']:>15.1f} {m['manifests_max']:>4} "
            f"{m['metadata_kib_mean']:>12.1f} {m['metadata_kib_max']:>6.1f} {m['archive_objects']:>12} {m['archive_records']:>7} "
            f"{m['plan_main_ms']:>12.1f} {m['plan_tag_ms']:>11.1f}")


def simulate(runs: int, every: int, measure_every: int, changes: int, ghost_every: int, root: Path | None = None,
             out=sys.stdout, keep_hours: float = 6.0) -> list[tuple[int, dict]]:  # noqa: ANN001
    with tempfile.TemporaryDirectory(prefix="tidelake-year-") as tmp:
        config = _config(root or Path(tmp), keep_hours)
        archive = ArchiveBuilder(config, 2)  # the layout landing writes (as bench/apply.py)
        storage = archive.storage
        encoder = get_encoder("canal-json")
        history = History()
        rows = []
        print(" ".join(f"{h:>{w}}" for h, w in zip(HEADER, (6, 6, 7, 15, 4, 12, 6, 12, 7, 12, 11))), file=out, flush=True)
        started = time.perf_counter()
        for r in range(runs):
            records = encoder.encode_all(history.run(r, changes, ghost_every), 2)
            start, end = T0 + r * MINUTE, T0 + (r + 1) * MINUTE
            archive.add(records, start)
            archive.close_interval(start, end)
            apply_interval(config, start, end, storage=storage)
            if (r + 1) % every == 0:
                maintain(config, storage=storage, now=end)
            if (r + 1) % measure_every == 0 or r + 1 == runs:
                m = measure(config, storage)
                rows.append((r + 1, m))
                print(row(r + 1, m), file=out, flush=True)
        print(f"{runs} runs in {(time.perf_counter() - started) / 60:.1f} min; maintenance every {every} runs, hourly Ws "
              f"and archive kept {keep_hours:g} h", file=out)
        return rows
