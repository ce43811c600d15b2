"""spark-submit entry point for steps 3 and 4: apply the interval's changes and publish W.

    spark-submit spark/jobs/apply.py --config pipeline.toml --start 2024-01-01T00:00:00Z --end 2024-01-01T01:00:00Z

Decoding runs on the executors (one task per partition); the driver plans, commits to
Iceberg, tags and publishes. Prints the run report; exits 0 when every table is at the
interval's watermark, 2 on a configuration error, 1 on any other failure.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

import orjson

from cdc_codecs import ConfigError, TidelakeError
from spark.apply import apply_interval
from spark.config import load_pipeline_config, parse_instant
from spark.land import SparkRunner
from spark.session import build_session


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="apply")
    parser.add_argument("--config", required=True, help="pipeline file (.toml, .json, .yaml)")
    parser.add_argument("--start", required=True, help="data interval start, ISO-8601 UTC")
    parser.add_argument("--end", required=True, help="data interval end, ISO-8601 UTC")
    parser.add_argument("--master", default=None, help="Spark master when not set by spark-submit")
    parser.add_argument("--on-bad-message", choices=["fail", "continue"], default=None, help="override the pipeline's policy")
    args = parser.parse_args(argv)
    try:
        config = load_pipeline_config(args.config)
        if args.on_bad_message:
            config = dataclasses.replace(config, on_bad_message=args.on_bad_message)
        start, end = parse_instant(args.start, "--start"), parse_instant(args.end, "--end")
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    spark = build_session(f"tidelake-apply-{config.name}", args.master)
    try:
        result = apply_interval(config, start, end, runner=SparkRunner(spark))
    except TidelakeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
    print(orjson.dumps(result.report, option=orjson.OPT_INDENT_2).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
