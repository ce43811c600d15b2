"""Thin entry points for spark-submit; each parses arguments and calls one tested function."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Callable, Sequence

from cdc_codecs import ConfigError, TidelakeError


def interval_job(prog: str, run: Callable[[Any, Any, Any, Any, argparse.Namespace], int],
                 argv: Sequence[str] | None, extra: Callable[[argparse.ArgumentParser], None] | None = None) -> int:
    """Parse ``--config --start --end [--master]``, start Spark, call ``run(config, start, end, spark, args)``.

    Exit codes: 0 done, 2 configuration error, 1 the run failed (the message says why).
    """
    from spark.config import load_pipeline_config, parse_instant
    from spark.session import build_session

    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--config", required=True, help="pipeline file (.toml, .json, .yaml)")
    parser.add_argument("--start", required=True, help="data interval start, ISO-8601 UTC")
    parser.add_argument("--end", required=True, help="data interval end, ISO-8601 UTC")
    parser.add_argument("--master", default=None, help="Spark master when not set by spark-submit")
    if extra:
        extra(parser)
    args = parser.parse_args(argv)
    try:
        config = load_pipeline_config(args.config)
        start, end = parse_instant(args.start, "--start"), parse_instant(args.end, "--end")
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    spark = build_session(f"tidelake-{prog}-{config.name}", args.master)
    try:
        return run(config, start, end, spark, args)
    except TidelakeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
