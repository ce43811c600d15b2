"""spark-submit entry point for steps 3 and 4: apply the interval's changes and publish W.

    spark-submit spark/jobs/apply.py --config pipeline.toml --start 2024-01-01T00:00:00Z --end 2024-01-01T01:00:00Z

Decoding runs on the executors (one task per partition); the driver plans, commits to
Iceberg, tags and publishes. Prints the run report; exits 0 when every table is at the
interval's watermark, 2 on a configuration error, 1 on any other failure.
"""

from __future__ import annotations

import dataclasses
import sys

import orjson

from spark.apply import apply_interval
from spark.jobs import interval_job
from spark.land import SparkRunner


def run(config, start, end, spark, args) -> int:  # noqa: ANN001 - see interval_job
    if args.on_bad_message:
        config = dataclasses.replace(config, on_bad_message=args.on_bad_message)
    result = apply_interval(config, start, end, runner=SparkRunner(spark))
    print(orjson.dumps(result.report, option=orjson.OPT_INDENT_2).decode())
    return 0


def main(argv: list[str] | None = None) -> int:
    return interval_job("apply", run, argv, lambda p: p.add_argument(
        "--on-bad-message", choices=["fail", "continue"], default=None, help="override the pipeline's policy"))


if __name__ == "__main__":
    sys.exit(main())
