"""``tidelake changes``: the change feed between two published watermarks, on the command line.

    tidelake changes --config F --from W1|ISO-time [--to W2|ISO-time|latest] [--table db.t ...]
                     [--no-before-images] [--format table|json|csv|parquet] [--out DIR] [--spark MASTER]

Without ``--out`` the changes go to stdout: ``table`` (default) a heading per table (its counts)
and its rows; ``json`` one object per change, ``{"database", "table", "row"}`` (values as
``tidelake query --format json`` writes them); ``csv`` the rows of one table (name it with
``--table``). With ``--out DIR`` (a local directory or a URL in the archive's object store,
``s3://bucket/prefix``, reached with the archive's endpoint and credentials) every table's
changes go to ``DIR/<database>/<table>.<parquet|jsonl|csv>`` (names encoded as the archive
encodes them; Parquet by default), then ``DIR/manifest.json`` names W1, W2 and the files.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import io
import logging
import sys
from typing import Any

import orjson

from cdc_codecs import ConfigError

log = logging.getLogger("tidelake.cli")
EXTENSIONS = {"parquet": "parquet", "json": "jsonl", "csv": "csv"}
MANIFEST = "manifest.json"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--from", dest="from_w", required=True, metavar="W|ISO-TIME",
                   help="a published W, or a time: the greatest published W at or before it")
    p.add_argument("--to", dest="to_w", default="latest", metavar="W|ISO-TIME|latest",
                   help="a published W, a time, or latest (default)")
    p.add_argument("--table", dest="tables", action="append", metavar="DB.TABLE",
                   help="only this table (repeatable; default: every table)")
    p.add_argument("--format", choices=("table", "json", "csv", "parquet"),
                   help="stdout: table (default), json (one object per change) or csv (one table); "
                        "--out: parquet (default), json or csv files")
    p.add_argument("--no-before-images", dest="before_images", action="store_false",
                   help="after images and deleted keys only: an upsert per touched key with its row at --to, a "
                        "delete per deleted key (its key columns); reads no data file at --from")
    p.add_argument("--spark", metavar="MASTER",
                   help="fold the window's change log on Spark with this master (e.g. local[2]) instead of in-process")
    p.add_argument("--out", metavar="DIR",
                   help="write a file per table and manifest.json to DIR: a local directory or s3://bucket/prefix "
                        "(the archive's object store)")
    p.set_defaults(fn=cmd_changes)


def _at(text: str, flag: str) -> Any:
    from spark.cli.common import instant

    if text.isdigit():
        return int(text)
    if text == "latest":
        return text
    return instant(text, flag)


def cmd_changes(args: argparse.Namespace) -> int:
    from spark.query.changes import read_changes
    from spark.cli.progress import StepProgress, progress_bars
    from spark.cli.common import pipeline_config
    from spark.core.watermark import watermark_time

    config = pipeline_config(args)
    fmt = args.format or ("parquet" if args.out else "table")
    if args.out and fmt == "table":
        raise ConfigError("--format table prints to stdout; with --out give parquet, json or csv")
    if not args.out and fmt == "parquet":
        raise ConfigError("--format parquet writes files: give --out DIR")
    from_w, to_w = _at(args.from_w, "--from"), _at(args.to_w, "--to")
    runner, context = None, None
    if args.spark:
        from spark.runtime.runners import SparkRunner
        from spark.runtime.session import build_context, stop_context

        context = build_context(f"tidelake-changes-{config.name}", args.spark)
        runner = SparkRunner(context)
    try:
        with progress_bars(args.quiet) as bars:
            changes = read_changes(config, from_w, to_w, args.tables, progress=StepProgress(bars), runner=runner,
                                   before_images=args.before_images)
    finally:
        if context is not None:
            stop_context(context)
    log.info("-- %s: changes from W=%s (%s) to W=%s (%s)", config.name, changes.from_watermark,
             watermark_time(changes.from_watermark), changes.to_watermark, watermark_time(changes.to_watermark))
    from spark.commit.isolation import held_phrase

    for (db, table), e in sorted(changes.isolated.items()):
        log.warning("ISOLATED %s.%s: left out, isolated at W %s (%s): %s: %s", db, table, e["isolated_at"],
                    held_phrase(e), e["error"], e["message"])
    if changes.isolated and fmt == "csv":
        # CSV holds one table's rows, nowhere to name the others: refuse rather than drop them quietly.
        raise ConfigError(f"{', '.join('.'.join(n) for n in sorted(changes.isolated))} left out (isolated): --format csv "
                          "cannot name them; use --format json or table, or --out DIR (manifest.json names them)")
    if args.out:
        write_changes(config, changes, args.out, fmt)
    else:
        print_changes(changes, fmt, sys.stdout)
    return 0


def print_changes(changes: Any, fmt: str, out: Any) -> None:
    from spark.cli.common import json_value, print_table, write_result

    if fmt == "json":
        for (db, table), rows in sorted(changes.items()):
            for row in rows.to_pylist():
                out.write(orjson.dumps({"database": db, "table": table, "row": row}, default=json_value).decode() + "\n")
        # A table left out is named in the output itself (not only in a warning -q hides): a mirror must know.
        for (db, table), entry in sorted(changes.isolated.items()):
            out.write(orjson.dumps({"database": db, "table": table, "left_out": entry}, default=json_value).decode() + "\n")
        return
    if fmt == "csv":
        if len(changes) != 1:
            raise ConfigError(f"--format csv prints one table; these changes hold {len(changes)}: name one with --table, "
                              "or write them all with --out DIR")
        write_result(next(iter(changes.values())), "csv", out)
        return
    for name, rows in sorted(changes.items()):
        print(f"{name[0]}.{name[1]}: {_summary(changes.details[name])}", file=out)
        if rows.num_rows:
            print_table(rows, out)
    for (db, table), e in sorted(changes.isolated.items()):
        print(f"{db}.{table}: LEFT OUT, isolated at W {e['isolated_at']} (held at W {e['held_at']}): {e['error']}: "
              f"{e['message']}", file=out)


def _summary(details: Any) -> str:
    counts = ", ".join(f"{n} {kind}" for kind, n in details.counts.items() if n) or "no changes"
    how = {"keys": f"{details.keys_touched} keys read", "whole": f"read whole: {details.reason}", "nothing": ""}[details.read]
    return counts + (f" ({how})" if how else "")


def write_changes(config: Any, changes: Any, out: str, fmt: str) -> dict[str, Any]:
    """Every table's changes as a file under ``out``, then ``manifest.json``; returns the manifest."""
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    from spark.cli.common import json_value
    from spark.archive.layout import encode_name
    from spark.archive.storage import open_storage

    storage = open_storage(dataclasses.replace(config.storage, url=out))
    files = {}
    for (db, table), rows in sorted(changes.items()):
        path = f"{encode_name(db)}/{encode_name(table)}.{EXTENSIONS[fmt]}"
        buffer = io.BytesIO()
        if fmt == "parquet":
            pq.write_table(rows, buffer, compression="zstd")
        elif fmt == "csv":
            pcsv.write_csv(rows, buffer)
        else:
            for row in rows.to_pylist():
                buffer.write(orjson.dumps(row, default=json_value) + b"\n")
        storage.write(path, buffer.getvalue())
        files[(db, table)] = path
    manifest = {"pipeline": config.name, "format": fmt, **changes.manifest(files),
                "written_at": dt.datetime.now(dt.UTC).isoformat()}
    storage.write(MANIFEST, orjson.dumps(manifest, option=orjson.OPT_INDENT_2))  # last: the files it names are there
    print(f"{len(files)} table(s) written to {storage.url}: {MANIFEST} names them", file=sys.stdout)
    return manifest
