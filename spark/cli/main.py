"""``tidelake``: run, backfill and query pipelines without Airflow.

    tidelake run --config pipeline.toml --start 2024-01-01T00:00:00Z --end 2024-01-01T01:00:00Z
    tidelake backfill --config pipeline.toml 2024-01-01T00:00:00Z 2024-01-02T00:00:00Z
    tidelake watermarks --config pipeline.toml
    tidelake tables --config pipeline.toml [--at latest|TSO|ISO-time]
    tidelake query --config pipeline.toml [--at ...] "SELECT count(*) FROM shop.orders"
    tidelake changes --config pipeline.toml --from W1 [--to W2] [--table db.t] [--out DIR]
    tidelake repair --config pipeline.toml [--from W|ISO-time] [--dry-run]
    tidelake maintain --config pipeline.toml [--dry-run]
    tidelake engines --config pipeline.toml [--engine spark|duckdb|trino]
    tidelake decode --protocol canal-json segment.parquet|message-files...
    tidelake demo

``query`` runs DuckDB SQL in which every table of the pipeline is ``<database>.<table>``
(quote names with unusual characters: ``"my db"."my table"``); it reads only the tables the
SQL names. Errors print one line and exit 2 (usage: config, bad times, bad SQL, unknown table
or column) or 1 (the run failed, or the output was closed); ``--debug`` shows the traceback.
Results go to stdout; diagnostics go through ``logging`` to stderr (``-v`` more, ``-q`` errors
only), as do the progress bars of ``run`` and ``backfill``. Lags and ages read ``2h 03m``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import re
import sys
from typing import Any, Sequence

from cdc_codecs import ConfigError, TidelakeError
from spark.cli.common import instant, pipeline_config, write_result
from spark.cli.progress import StepProgress, progress_bars
from spark.jobs.interval import intervals, run_interval
from spark.commit.report import backfill_line, print_report
from spark.core.text import human_duration
from spark.core.watermark import watermark_seconds, watermark_time

UTC = dt.timezone.utc
log = logging.getLogger("tidelake.cli")


def _interval(start: str, end: str, start_flag: str, end_flag: str) -> tuple[dt.datetime, dt.datetime]:
    """The interval the user typed, checked before anything runs; errors echo the text as typed."""
    a, b = instant(start, start_flag), instant(end, end_flag)
    if b <= a:
        raise ConfigError(f"{end_flag} {end!r} is not after {start_flag} {start!r}")
    return a, b


def cmd_run(args: argparse.Namespace) -> int:
    config = pipeline_config(args)
    start, end = _interval(args.start, args.end, "--start", "--end")
    with progress_bars(args.quiet) as bars:
        report = run_interval(config, start, end, args.spark, progress=StepProgress(bars))
    print_report(report)
    return 0


def cmd_backfill(args: argparse.Namespace) -> int:
    config = pipeline_config(args)
    start, end = _interval(args.start, args.end, "FROM", "TO")
    spans = intervals(config.schedule.cron, start, end)
    if not spans:
        raise ConfigError(f"no {config.schedule.cron!r} interval fits between FROM {args.start!r} and TO {args.end!r}")
    with progress_bars(args.quiet) as bars:
        steps = StepProgress(bars)
        task = bars.add_task(f"backfill {config.name}", total=len(spans))
        for a, b in spans:
            steps.clear()
            report = run_interval(config, a, b, args.spark, progress=steps)
            print(backfill_line(a, b, report), flush=True)
            bars.advance(task)
    return 0


def cmd_watermarks(args: argparse.Namespace) -> int:
    from spark.query.read import published, published_watermarks, retired_watermarks

    config = pipeline_config(args)
    marks = published_watermarks(config)
    if not marks:
        print(f"{config.name}: no watermark published yet")
        return 0
    retired = set(retired_watermarks(config))
    now = dt.datetime.now(UTC).timestamp()
    print(f"{'watermark (TSO)':>20}  {'wall time':<26} {'age now':>10}  {'status':<8}  interval")
    for w in marks:
        doc = published(config, w)
        status = "retired" if w in retired else "retained"
        from spark.commit.isolation import held_phrase

        held = "".join(f"; isolated: {e['database']}.{e['table']} ({held_phrase(e)})" for e in doc.get("isolated", []))
        print(f"{w:>20}  {watermark_time(w):<26} {human_duration(now - watermark_seconds(w)):>10}  {status:<8}  {doc['interval']}{held}")
    from spark.archive.floors import pruned_intervals
    from spark.archive.storage import open_storage

    pruned = (pruned_intervals(open_storage(config.storage), config.name) or {}).get("retired_watermarks_pruned") or 0
    print(f"{config.name}: {len(marks) - len(retired)} retained, {len(retired)} retired by the retention policy ([maintenance] keep_*)"
          + (f"; {pruned} older retired W(s) pruned with their intervals' records by archive retention" if pruned else ""))
    return 0


def _at(text: str) -> Any:
    return int(text) if text.isdigit() else text


def cmd_tables(args: argparse.Namespace) -> int:
    from spark.commit.isolation import held_phrase, release_hint
    from spark.query.read import open_view

    config = pipeline_config(args)
    view = open_view(config, _at(args.at))
    w = view.watermark
    print(f"{config.name} at W={w} ({watermark_time(w)}):")
    for (db, table) in sorted({*view.tables, *view.isolated}):
        if (db, table) in view.isolated:
            e = view.isolated[(db, table)]
            where = held_phrase(e) if e.get("new_name") else f"held at W {e['held_at']} since {e['since']} (read it --at {e['held_at']})"
            print(f"  {db}.{table}: ISOLATED, {where}: "
                  f"{e['error']}{' on ' + repr(e['ddl']) if e.get('ddl') else ''}: {e['message']}"
                  + (f" -- it stays held: {e['stays']}" if e.get("stays") else ""))
            print(f"    to release it: {release_hint(e)}")
            continue
        data = view.scan((db, table))
        print(f"  {db}.{table}: {data.num_rows:,} rows, {data.num_columns} columns")
    return 0


def query(config: Any, sql: str, at: Any = "latest", *, metadata: bool = False, changes_from: Any = None,
          before_images: bool = True) -> tuple[int, Any]:
    """Run DuckDB SQL over the tables it names, at one consistent W: (W, Arrow result). See ``spark.query.sql.run_query``."""
    from spark.query.sql import run_query

    return run_query(config, sql, at, metadata=metadata, changes_from=changes_from, before_images=before_images)


def cmd_query(args: argparse.Namespace) -> int:
    config = pipeline_config(args)
    changes_from = args.changes_from
    if changes_from is not None and not changes_from.isdigit():
        changes_from = instant(changes_from, "--changes-from")
    if args.no_before_images and changes_from is None:
        raise ConfigError("--no-before-images applies to the changes: give --changes-from W")
    w, result = query(config, args.sql, _at(args.at), metadata=args.with_metadata, changes_from=changes_from,
                      before_images=not args.no_before_images)
    log.info("-- %s at W=%s (%s)", config.name, w, watermark_time(w))
    write_result(result, "json" if args.json else args.format, sys.stdout)
    return 0


def from_watermark(text: str | None) -> int | None:
    """``--from``: a W (TSO), or an ISO time meaning every W from that instant's first TSO on."""
    if text is None:
        return None
    if text.isdigit():
        return int(text)
    return int(instant(text, "--from").timestamp() * 1000) << 18


def print_repair(report: Any, out: Any = None) -> None:
    from spark.commit.isolation import held_phrase

    out = out or sys.stdout
    scope = f"W >= {report.from_watermark}" if report.from_watermark is not None else "all"
    print(f"repair {report.pipeline}: re-derived from the archive; compared {len(report.compared)} published "
          f"watermark(s) ({scope})", file=out)
    for name in report.caught_up:
        print(f"  caught up {name}: replayed from its held W to the pipeline's W", file=out)
    for e in report.stays_held:
        print(f"  stays held {e.name} ({held_phrase(e.to_dict())}): {e.stays or e.reason()}", file=out)
    if not (report.differences or report.checkpoints or report.resumed):
        print("  nothing differs: every published W reads what the archive derives", file=out)
        return
    width = max([len(d.name) for d in report.differences] + [5])
    for d in report.differences:
        move = "would move" if report.dry_run else f"moved to snapshot {d.snapshot_after}"
        before = "tag lost" if d.snapshot_before is None else f"{d.rows_before:>8,} rows published"
        print(f"  W {d.watermark} ({watermark_time(d.watermark)})  {d.name:<{width}}  {before}, {d.rows_after:>8,} derived; "
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
    from spark.repair.run import repair

    config = pipeline_config(args)
    print_repair(repair(config, from_watermark(args.start), dry_run=args.dry_run))
    return 0


def print_maintenance(report: Any, out: Any = None) -> None:
    from spark.maintain.run import summary_lines

    print("\n".join(summary_lines(report)), file=out or sys.stdout)


def cmd_maintain(args: argparse.Namespace) -> int:
    from spark.maintain.run import maintain

    from spark.archive.lease import RUN_ENV

    config = pipeline_config(args)
    # Maintenance by hand is one run per pipeline: a rerun after one that died holding the lease takes it over.
    given = os.environ.get(RUN_ENV)
    os.environ[RUN_ENV] = given or f"tidelake-maintain:{config.name}"
    try:
        with progress_bars(args.quiet) as bars:
            report = maintain(config, dry_run=args.dry_run, progress=StepProgress(bars))
    finally:
        if given is None:
            os.environ.pop(RUN_ENV, None)
    print_maintenance(report)
    return 0


def cmd_decode(args: argparse.Namespace) -> int:
    from cdc_codecs import DecodeError, RawMessage, SourcePosition, get_decoder
    from cdc_codecs.render import event_to_json

    options = {}
    for text in args.option or []:
        key, eq, value = text.partition("=")
        if not (key and eq):
            raise ConfigError(f"--option {text!r}: expected KEY=VALUE, e.g. --option timezone=Asia/Shanghai")
        options[key] = value
    decoder = get_decoder(args.protocol, **options)
    out = sys.stdout.buffer
    for path in args.files:
        try:
            if path.endswith(".parquet"):
                import pyarrow.parquet as pq

                rows = pq.read_table(path).to_pylist()
                messages = [RawMessage(r["key"], r["value"], SourcePosition(str(r["topic"]), r["partition"], r["offset"]),
                                       tuple((h["key"], h["value"]) for h in r["headers"] or ()), r["timestamp_ms"]) for r in rows]
            else:
                with open(path, "rb") as f:
                    messages = [RawMessage(None, f.read(), SourcePosition(path.rsplit("/", 1)[-1], 0, 0))]
        except OSError as exc:  # pyarrow raises FileNotFoundError (an OSError) too
            raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
        for msg in messages:
            try:
                for event in decoder.decode(msg):
                    out.write(event_to_json(event) + b"\n")
            except DecodeError as exc:
                log.error("%s: %s", path, exc)
                return 1
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from spark.demo.run import run_demo

    return run_demo(args.workdir, args.events)


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tidelake")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def _output_options(p: argparse.ArgumentParser, default: Any) -> None:
    """``--debug``, ``-v``, ``-q``: on the top level (defaults) and on every subcommand (SUPPRESS, so
    ``tidelake -v run`` and ``tidelake run -v`` both work and neither resets the other)."""
    p.add_argument("--debug", action="store_true", default=default, help="show the traceback of an error")
    loudness = p.add_mutually_exclusive_group()
    loudness.add_argument("-v", "--verbose", action="store_true", default=default,
                          help="more diagnostics on stderr (tidelake's debug lines, libraries' info)")
    loudness.add_argument("-q", "--quiet", action="store_true", default=default,
                          help="errors only on stderr: no progress bars, no warnings")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tidelake", description="CDC in Kafka -> Iceberg tables at consistent watermarks")
    p.add_argument("--version", action="version", version=f"%(prog)s {package_version()}",
                   help="print the installed tidelake version and exit")
    _output_options(p, False)
    common = argparse.ArgumentParser(add_help=False)
    _output_options(common, argparse.SUPPRESS)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, summary: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=summary, description=summary, parents=[common])

    def with_config(sp: argparse.ArgumentParser) -> argparse.ArgumentParser:
        sp.add_argument("--config", required=True, help="pipeline file (.toml, .json, .yaml/.yml)")
        return sp

    spark_help = ("run the tasks on Spark with this master (e.g. local[2]) instead of in-process; work of at most the "
                  "pipeline's driver_max_messages still runs in-process (0: always Spark)")
    run = with_config(command("run", "land and apply one interval, end to end"))
    run.add_argument("--start", required=True, help="interval start, ISO-8601 with a time zone (2024-01-01T00:00:00Z)")
    run.add_argument("--end", required=True, help="interval end (exclusive), after --start, ISO-8601 with a time zone")
    run.add_argument("--spark", metavar="MASTER", help=spark_help)
    run.set_defaults(fn=cmd_run)
    back = with_config(command("backfill", "run every scheduled interval in [FROM, TO)"))
    back.add_argument("start", metavar="FROM", help="first interval's start, ISO-8601 with a time zone")
    back.add_argument("end", metavar="TO", help="last interval's end (exclusive), ISO-8601 with a time zone")
    back.add_argument("--spark", metavar="MASTER", help=spark_help)
    back.set_defaults(fn=cmd_backfill)
    with_config(command("watermarks", "published watermarks, with wall time and age")).set_defaults(fn=cmd_watermarks)
    tables = with_config(command("tables", "tables and row counts at a watermark"))
    tables.add_argument("--at", default="latest", help="latest (default), a TSO, or an ISO time (greatest published W <= it)")
    tables.set_defaults(fn=cmd_tables)
    q = with_config(command("query", "DuckDB SQL over the pipeline's tables at one consistent watermark"))
    q.add_argument("--at", default="latest", help="latest (default), a TSO, or an ISO time (greatest published W <= it)")
    q.add_argument("--format", choices=("table", "json", "csv"), default="table",
                   help="an aligned table (default), JSON lines (binary values as base64 text), or CSV with a header")
    q.add_argument("--json", action="store_true", help="the same as --format json")
    q.add_argument("--with-metadata", action="store_true",
                   help="also expose each row's _tidelake_commit_ts (upstream commit TSO) and _tidelake_op columns")
    q.add_argument("--changes-from", metavar="W|ISO-TIME",
                   help='also expose each table\'s changes since this W (up to --at) as changes."<database>"."<table>"')
    q.add_argument("--no-before-images", action="store_true",
                   help="with --changes-from: after images and deleted keys only (upsert/delete), reading no data "
                        "file at the --changes-from W")
    q.add_argument("sql", help='one statement; tables are "<database>"."<table>", e.g. SELECT count(*) FROM shop.orders')
    q.set_defaults(fn=cmd_query)
    from spark.cli.changes import add_arguments as changes_arguments  # spark/cli/changes.py

    changes_arguments(with_config(command("changes", "the net changes of every table between two published watermarks")))
    from spark.cli.engines import add_arguments as engines_arguments  # spark/cli/engines.py

    engines_arguments(with_config(command("engines", "the settings Spark, DuckDB and Trino need to read the pipeline's tables")))
    rep = with_config(command("repair", "re-derive published watermarks from the archive, move tags that changed"))
    rep.add_argument("--from", dest="start", metavar="W|ISO-TIME", help="only published W at or after this (default: all)")
    rep.add_argument("--dry-run", action="store_true", help="list what differs, change nothing")
    rep.set_defaults(fn=cmd_repair)
    mt = with_config(command("maintain", "retire old watermarks, expire snapshots, delete the files only they read"))
    mt.add_argument("--dry-run", action="store_true", help="print what would be removed, change nothing")
    mt.set_defaults(fn=cmd_maintain)
    d = command("decode", "a raw segment (.parquet) or message files to JSON lines")
    d.add_argument("--protocol", required=True, help="the topic's protocol, e.g. canal-json (tidelake-codecs lists them)")
    d.add_argument("--option", action="append", metavar="KEY=VALUE",
                   help="a decoder option, as in a topic's options (repeatable), e.g. timezone=Asia/Shanghai")
    d.add_argument("files", nargs="+", metavar="FILE", help="a landed segment (.parquet) or files holding one message each")
    d.set_defaults(fn=cmd_decode)
    demo = command("demo", "embedded broker + generated TiCDC workload -> tables, then a query")
    demo.add_argument("--workdir", default=".tidelake/demo", help="where the demo writes (emptied first; default %(default)s)")
    demo.add_argument("--events", type=int, default=3000, help="upstream events per feed (default %(default)s)")
    demo.set_defaults(fn=cmd_demo)
    return p


class _StderrHandler(logging.Handler):
    """``error: ...`` / ``warning: ...`` lines (info as it is) on whatever ``sys.stderr`` is *now*,
    so lines go above rich's progress bars while they are shown."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)
            prefix = "" if record.levelno == logging.INFO else f"{record.levelname.lower()}: "
            sys.stderr.write(f"{prefix}{text}\n")
        except Exception:  # noqa: BLE001 - logging's own contract: report, never raise
            self.handleError(record)


OWN_LOGGERS = ("tidelake", "spark", "cdc_codecs")


def configure_logging(verbose: bool, quiet: bool) -> None:
    """Diagnostics to stderr: ours at INFO (DEBUG with -v, ERROR with -q); libraries at WARNING
    (INFO with -v, ERROR with -q); Python warnings become one ``warning:`` line each."""
    root = logging.getLogger()
    for h in [h for h in root.handlers if isinstance(h, _StderrHandler)]:
        root.removeHandler(h)
    root.addHandler(_StderrHandler())
    root.setLevel(logging.ERROR if quiet else logging.INFO if verbose else logging.WARNING)
    own = logging.ERROR if quiet else logging.DEBUG if verbose else logging.INFO
    for name in OWN_LOGGERS:
        logging.getLogger(name).setLevel(own)
    logging.captureWarnings(True)


def _one_line(exc: BaseException) -> str:
    return re.sub(r"\s*\n\s*", " ", str(exc)).strip() or type(exc).__name__


def _output_closed() -> int:
    # The reader left (`| head`): point stdout at /dev/null so the flush at exit cannot fail again.
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout has no descriptor (captured, replaced)
        sys.stdout = os.fdopen(devnull, "w")
    log.error("the output was closed before everything was written")
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    """Exit codes: 0 done, 2 usage or configuration error, 1 the run failed (or the output was closed).

    A service's failure (S3, the catalog, Kafka, Spark: ``spark.runtime.services``) is one line naming
    the service and what to do, exit 1; ``--debug`` shows the traceback."""
    try:
        args = parser().parse_args(argv)
    except BrokenPipeError:  # argparse itself ignores a closed pipe for --help and --version; a belt to its braces
        return _output_closed()
    configure_logging(args.verbose, args.quiet)
    try:
        code = args.fn(args)
        sys.stdout.flush()  # a closed pipe shows here, not as an "Exception ignored" at exit
        return code
    except TidelakeError as exc:
        if args.debug:
            raise
        from spark.query.names import QueryError
        from spark.runtime.services import classify

        log.error("%s", _one_line(classify(exc) or exc))
        return 2 if isinstance(exc, (ConfigError, QueryError)) else 1
    except BrokenPipeError:
        if args.debug:
            raise
        return _output_closed()
    except KeyboardInterrupt:
        if args.debug:
            raise
        log.error("interrupted")
        return 130
    except Exception as exc:  # noqa: BLE001 - a service's failure is one line; anything else is a bug: its traceback
        from spark.runtime.services import classify

        found = classify(exc)
        if found is None or args.debug:
            raise
        log.error("%s", found)
        return 1


if __name__ == "__main__":
    sys.exit(main())
