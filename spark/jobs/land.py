"""spark-submit entry point for steps 1 and 2: snapshot offsets and land raw segments.

    spark-submit spark/jobs/land.py --config pipeline.toml --start 2024-01-01T00:00:00Z --end 2024-01-01T01:00:00Z

Prints the manifest path and counts; exits 0 when the interval is in the archive
(landed now or already), 2 on a configuration error, 1 on any other failure.
"""

from __future__ import annotations

import sys

from spark.jobs import interval_job
from spark.land import SparkRunner, land_interval


def run(config, start, end, spark, args) -> int:  # noqa: ANN001 - see interval_job
    result = land_interval(config, start, end, runner=SparkRunner(spark))
    m = result.manifest
    state = "already landed" if result.reused else "landed"
    print(f"{state}: {m.path}  {m.messages} messages in {sum(len(p.segments) for p in m.partitions)} segments "
          f"over {len(m.partitions)} partitions")
    return 0


def main(argv: list[str] | None = None) -> int:
    return interval_job("land", run, argv)


if __name__ == "__main__":
    sys.exit(main())
