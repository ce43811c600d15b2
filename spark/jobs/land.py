"""spark-submit entry point for steps 1 and 2: snapshot offsets and land raw segments.

    spark-submit spark/jobs/land.py --config pipeline.toml --start 2024-01-01T00:00:00Z --end 2024-01-01T01:00:00Z

Prints the manifest path and counts; exits 0 when the interval is in the archive
(landed now or already), 2 on a configuration error, 1 on any other failure.
"""

from __future__ import annotations

import argparse
import sys

from cdc_codecs import ConfigError, TidelakeError
from spark.config import load_pipeline_config, parse_instant
from spark.land import SparkRunner, land_interval
from spark.session import build_session


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="land")
    parser.add_argument("--config", required=True, help="pipeline file (.toml, .json, .yaml)")
    parser.add_argument("--start", required=True, help="data interval start, ISO-8601 UTC")
    parser.add_argument("--end", required=True, help="data interval end, ISO-8601 UTC")
    parser.add_argument("--master", default=None, help="Spark master when not set by spark-submit")
    args = parser.parse_args(argv)
    try:
        config = load_pipeline_config(args.config)
        start, end = parse_instant(args.start, "--start"), parse_instant(args.end, "--end")
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    spark = build_session(f"tidelake-land-{config.name}", args.master)
    try:
        result = land_interval(config, start, end, runner=SparkRunner(spark))
    except TidelakeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
    m = result.manifest
    state = "already landed" if result.reused else "landed"
    print(f"{state}: {m.path}  {m.messages} messages in {sum(len(p.segments) for p in m.partitions)} segments "
          f"over {len(m.partitions)} partitions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
