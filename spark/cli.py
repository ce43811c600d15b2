"""``tidelake``: run, backfill and query pipelines without Airflow.

    tidelake run --config pipeline.toml --start 2024-01-01T00:00:00Z --end 2024-01-01T01:00:00Z
    tidelake backfill --config pipeline.toml 2024-01-01T00:00:00Z 2024-01-02T00:00:00Z
    tidelake watermarks --config pipeline.toml
    tidelake tables --config pipeline.toml [--at latest|TSO|ISO-time]
    tidelake query --config pipeline.toml [--at ...] "SELECT count(*) FROM shop.orders"
    tidelake repair --config pipeline.toml [--from W|ISO-time] [--dry-run]
    tidelake decode --protocol canal-json segment.parquet|message-files...
    tidelake demo

``query`` runs DuckDB SQL in which every table of the pipeline is ``<database>.<table>``
(quote names with unusual characters: ``"my db"."my table"``); it reads only the tables the
SQL names. Errors print one line and exit 2 (usage: config, bad SQL, unknown table or column)
or 1 (the run failed); ``--debug`` shows the traceback.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
from typing import Any, Sequence

import orjson

from cdc_codecs import ConfigError, TidelakeError

UTC = dt.timezone.utc


def _config(args: argparse.Namespace) -> Any:
    from spark.config import load_pipeline_config

    return load_pipeline_config(args.config)


def _instant(text: str, what: str) -> dt.datetime:
    from spark.config import parse_instant

    return parse_instant(text, what)


def _w_time(w: int) -> str:
    return dt.datetime.fromtimestamp((w >> 18) / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def run_interval(config: Any, start: dt.datetime, end: dt.datetime, spark_master: str | None = None) -> dict[str, Any]:
    """Steps 1-4 for one interval, in-process (or on Spark with ``spark_master``)."""
    from spark.apply import apply_interval
    from spark.land import LocalRunner, SparkRunner, land_interval

    runner: Any = LocalRunner()
    session = None
    if spark_master:
        from spark.session import build_session

        session = build_session(f"tidelake-{config.name}", spark_master)
        runner = SparkRunner(session)
    try:
        landed = land_interval(config, start, end, runner=runner)
        applied = apply_interval(config, start, end, runner=runner)
    finally:
        if session is not None:
            session.stop()
    return {"land": landed.report or {"messages": landed.manifest.messages, "reused": True}, "apply": applied.report}


def print_report(report: dict[str, Any], out: Any = None) -> None:
    out = out or sys.stdout
    apply = report["apply"]
    w = apply["watermark"]
    print(f"interval {apply['interval']['start']} .. {apply['interval']['end']}", file=out)
    print(f"  landed     {report['land'].get('messages', 0):>10,} messages", file=out)
    print(f"  decoded    {apply['events_decoded']:>10,} events ({apply['already_applied_skipped']:,} already applied, "
          f"{apply['quarantined']:,} quarantined)", file=out)
    if w:
        print(f"  watermark  {w} = {_w_time(w)} (lag {apply['lag_seconds']:.1f}s behind the interval end)", file=out)
    else:
        print("  watermark  none yet: some partition has reported no watermark", file=out)
    width = max([len(n) for n in apply["tables"]] + [5])
    for name, t in apply["tables"].items():
        flag = " (dropped)" if t["dropped"] else ""
        print(f"  {name:<{width}}  {t['events_applied']:>8,} events applied{flag}", file=out)


def cmd_run(args: argparse.Namespace) -> int:
    config = _config(args)
    report = run_interval(config, _instant(args.start, "--start"), _instant(args.end, "--end"), args.spark)
    print_report(report)
    return 0


def intervals(cron: str, start: dt.datetime, end: dt.datetime) -> list[tuple[dt.datetime, dt.datetime]]:
    """The schedule's data intervals that lie within [start, end)."""
    from croniter import croniter

    it = croniter(cron, start - dt.timedelta(microseconds=1))
    out = []
    a = it.get_next(dt.datetime)
    while True:
        b = it.get_next(dt.datetime)
        if b > end:
            break
        out.append((a, b))
        a = b
    return out


def cmd_backfill(args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    config = _config(args)
    spans = intervals(config.schedule.cron, _instant(args.start, "FROM"), _instant(args.end, "TO"))
    if not spans:
        raise ConfigError(f"no {config.schedule.cron!r} interval fits between {args.start} and {args.end}")
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), transient=False) as progress:
        task = progress.add_task(f"backfill {config.name}", total=len(spans))
        for a, b in spans:
            report = run_interval(config, a, b, args.spark)
            w = report["apply"]["watermark"]
            progress.console.print(f"{a.isoformat()} .. {b.isoformat()}: {report['land'].get('messages', 0):,} messages, "
                                   f"W={w}" + (f" ({_w_time(w)})" if w else ""))
            progress.advance(task)
    return 0


def cmd_watermarks(args: argparse.Namespace) -> int:
    from spark.query import published, published_watermarks

    config = _config(args)
    marks = published_watermarks(config)
    if not marks:
        print(f"{config.name}: no watermark published yet")
        return 0
    now = dt.datetime.now(UTC).timestamp()
    print(f"{'watermark (TSO)':>20}  {'wall time':<26} {'lag now':>10}  interval")
    for w in marks:
        doc = published(config, w)
        print(f"{w:>20}  {_w_time(w):<26} {now - (w >> 18) / 1000:>9.0f}s  {doc['interval']}")
    return 0


def _at(text: str) -> Any:
    return int(text) if text.isdigit() else text


def cmd_tables(args: argparse.Namespace) -> int:
    from spark.query import read_pipeline

    config = _config(args)
    w, tables = read_pipeline(config, _at(args.at))
    print(f"{config.name} at W={w} ({_w_time(w)}):")
    for (db, table), data in sorted(tables.items()):
        print(f"  {db}.{table}: {data.num_rows:,} rows, {data.num_columns} columns")
    return 0


def query(config: Any, sql: str, at: Any = "latest", *, metadata: bool = False) -> tuple[int, Any]:
    """Run DuckDB SQL over the tables it names, at one consistent W: (W, Arrow result). See ``spark.query.run_query``."""
    from spark.query import run_query

    return run_query(config, sql, at, metadata=metadata)


def cmd_query(args: argparse.Namespace) -> int:
    config = _config(args)
    w, result = query(config, args.sql, _at(args.at), metadata=args.with_metadata)
    print(f"-- {config.name} at W={w} ({_w_time(w)})", file=sys.stderr)
    write_result(result, "json" if args.json else args.format, sys.stdout)
    return 0


def write_result(table: Any, fmt: str, out: Any) -> None:
    """A query result as an aligned table, JSON lines or CSV (with a header)."""
    if fmt == "json":
        for row in table.to_pylist():
            out.write(orjson.dumps(row, default=str).decode() + "\n")
    elif fmt == "csv":
        import pyarrow.csv as pcsv

        out.flush()
        pcsv.write_csv(table, out.buffer)
        out.buffer.flush()
    else:
        _print_table(table, out)


def _print_table(table: Any, out: Any = None) -> None:
    out = out or sys.stdout
    rows = table.to_pylist()
    cols = table.column_names
    cells = [[str(r[c]) for c in cols] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(cols)]
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths)), file=out)
    print("  ".join("-" * w for w in widths), file=out)
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)), file=out)
    print(f"({len(rows)} row{'s' if len(rows) != 1 else ''})", file=out)


def from_watermark(text: str | None) -> int | None:
    """``--from``: a W (TSO), or an ISO time meaning every W from that instant's first TSO on."""
    if text is None:
        return None
    if text.isdigit():
        return int(text)
    return int(_instant(text, "--from").timestamp() * 1000) << 18


def print_repair(report: Any, out: Any = None) -> None:
    out = out or sys.stdout
    scope = f"W >= {report.from_watermark}" if report.from_watermark is not None else "all"
    print(f"repair {report.pipeline}: re-derived from the archive; compared {len(report.compared)} published "
          f"watermark(s) ({scope})", file=out)
    if not (report.differences or report.checkpoints or report.resumed):
        print("  nothing differs: every published W reads what the archive derives", file=out)
        return
    width = max([len(d.name) for d in report.differences] + [5])
    for d in report.differences:
        move = "would move" if report.dry_run else f"moved to snapshot {d.snapshot_after}"
        before = "tag lost" if d.snapshot_before is None else f"{d.rows_before:>8,} rows published"
        print(f"  W {d.watermark} ({_w_time(d.watermark)})  {d.name:<{width}}  {before}, {d.rows_after:>8,} derived; "
              f"tag wm_{d.watermark} {move}", file=out)
    for name in report.main_moved:
        print(f"  main of {name} moved forward to its repaired latest watermark", file=out)
    if report.checkpoints:
        print(f"  {len(report.checkpoints)} checkpoint(s) {'differ' if report.dry_run else 'replaced'} "
              "(pending offsets or schemas derived differently)", file=out)
    for path in report.resumed:
        print(f"  finished the unfinished repair {path}", file=out)
    if report.dry_run:
        print("  dry run: nothing was changed; run without --dry-run to move the tags", file=out)
    else:
        print(f"  recorded in {report.record}", file=out)


def cmd_repair(args: argparse.Namespace) -> int:
    from spark.repair import repair

    config = _config(args)
    print_repair(repair(config, from_watermark(args.start), dry_run=args.dry_run))
    return 0


def cmd_decode(args: argparse.Namespace) -> int:
    from cdc_codecs import DecodeError, RawMessage, SourcePosition, get_decoder
    from cdc_codecs.render import event_to_json

    decoder = get_decoder(args.protocol, **dict(o.split("=", 1) for o in args.option or []))
    out = sys.stdout.buffer
    for path in args.files:
        if path.endswith(".parquet"):
            import pyarrow.parquet as pq

            rows = pq.read_table(path).to_pylist()
            messages = [RawMessage(r["key"], r["value"], SourcePosition(str(r["topic"]), r["partition"], r["offset"]),
                                   tuple((h["key"], h["value"]) for h in r["headers"] or ()), r["timestamp_ms"]) for r in rows]
        else:
            with open(path, "rb") as f:
                messages = [RawMessage(None, f.read(), SourcePosition(path.rsplit("/", 1)[-1], 0, 0))]
        for msg in messages:
            try:
                for event in decoder.decode(msg):
                    out.write(event_to_json(event) + b"\n")
            except DecodeError as exc:
                print(f"error: {path}: {exc}", file=sys.stderr)
                return 1
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from spark.demo import run_demo

    return run_demo(args.workdir, args.events)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tidelake", description="CDC in Kafka -> Iceberg tables at consistent watermarks")
    p.add_argument("--debug", action="store_true", help="show the traceback of an error")
    sub = p.add_subparsers(dest="command", required=True)

    def with_config(sp: argparse.ArgumentParser) -> argparse.ArgumentParser:
        sp.add_argument("--config", required=True, help="pipeline file (.toml, .json, .yaml)")
        return sp

    run = with_config(sub.add_parser("run", help="land and apply one interval, end to end"))
    run.add_argument("--start", required=True)
    run.add_argument("--end", required=True)
    run.add_argument("--spark", metavar="MASTER", help="run the tasks on Spark (e.g. local[2]) instead of in-process")
    run.set_defaults(fn=cmd_run)
    back = with_config(sub.add_parser("backfill", help="run every scheduled interval in [FROM, TO)"))
    back.add_argument("start", metavar="FROM")
    back.add_argument("end", metavar="TO")
    back.add_argument("--spark", metavar="MASTER")
    back.set_defaults(fn=cmd_backfill)
    with_config(sub.add_parser("watermarks", help="published watermarks, with wall time and lag")).set_defaults(fn=cmd_watermarks)
    tables = with_config(sub.add_parser("tables", help="tables and row counts at a watermark"))
    tables.add_argument("--at", default="latest", help="latest, a TSO, or an ISO time")
    tables.set_defaults(fn=cmd_tables)
    q = with_config(sub.add_parser("query", help="DuckDB SQL over the pipeline's tables at one consistent watermark"))
    q.add_argument("--at", default="latest", help="latest, a TSO, or an ISO time (greatest published W <= it)")
    q.add_argument("--format", choices=("table", "json", "csv"), default="table",
                   help="an aligned table (default), JSON lines, or CSV with a header")
    q.add_argument("--json", action="store_true", help="the same as --format json")
    q.add_argument("--with-metadata", action="store_true",
                   help="also expose each row's _tidelake_commit_ts (upstream commit TSO) and _tidelake_op columns")
    q.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show the traceback of an error")
    q.add_argument("sql", help='one statement; tables are "<database>"."<table>", e.g. SELECT count(*) FROM shop.orders')
    q.set_defaults(fn=cmd_query)
    rep = with_config(sub.add_parser("repair", help="re-derive published watermarks from the archive, move tags that changed"))
    rep.add_argument("--from", dest="start", metavar="W|ISO-TIME", help="only published W at or after this (default: all)")
    rep.add_argument("--dry-run", action="store_true", help="list what differs, change nothing")
    rep.set_defaults(fn=cmd_repair)
    d = sub.add_parser("decode", help="a raw segment (.parquet) or message files to JSON lines")
    d.add_argument("--protocol", required=True)
    d.add_argument("--option", action="append", metavar="K=V")
    d.add_argument("files", nargs="+")
    d.set_defaults(fn=cmd_decode)
    demo = sub.add_parser("demo", help="embedded broker + generated TiCDC workload -> tables, then a query")
    demo.add_argument("--workdir", default=".tidelake/demo")
    demo.add_argument("--events", type=int, default=3000)
    demo.set_defaults(fn=cmd_demo)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.fn(args)
    except TidelakeError as exc:
        if args.debug:
            raise
        from spark.query import QueryError

        print(f"error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, (ConfigError, QueryError)) else 1
    except BrokenPipeError:
        if args.debug:
            raise
        # The reader left (`| head`): point stdout at /dev/null so the flush at exit cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        print("error: the output was closed before everything was written", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
