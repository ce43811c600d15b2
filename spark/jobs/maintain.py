"""spark-submit entry point of the maintenance DAG: retire watermarks, expire snapshots, delete files.

    spark-submit spark/jobs/maintain.py --config pipeline.toml --now 2024-01-02T03:00:00Z [--dry-run]

``--now`` is the run's logical time (the DAG passes its interval end), so a retried task
decides the same retention. Prints the maintenance summary before Spark stops (the full
report is ``reports/maintenance/<now>.json`` in the archive); exits 0 when done, 2 on a
configuration error, 1 on any other failure (another run holding the lease, for one).
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

if __name__ == "__main__":  # run by spark-submit: this file is the installation's, the library may be the --py-files archive
    import runpy
    from pathlib import Path

    runpy.run_path(str(Path(__file__).with_name("same_build.py")))["require_same_build"](__file__)

from cdc_codecs import ConfigError
from spark.jobs import configure_logging, emit, failed, log


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="maintain")
    p.add_argument("--config", required=True, help="pipeline file (.toml, .json, .yaml)")
    p.add_argument("--now", required=True, help="the run's logical time, ISO-8601 UTC (the DAG: its interval end)")
    p.add_argument("--dry-run", action="store_true", help="decide and report, change nothing")
    p.add_argument("--master", default=None, help="Spark master when not set by spark-submit")
    p.add_argument("--verbose", action="store_true", help="Spark's INFO log and tidelake's debug lines")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    import os

    from spark.config import load_pipeline_config, parse_instant
    from spark.runtime.credentials import from_environment
    from spark.jobs import SPARK_LOG_LEVEL_ENV
    from spark.runtime.runners import DriverFirstRunner
    from spark.maintain.run import maintain, summary_lines
    from spark.runtime.session import build_context

    args = parser().parse_args(argv)
    configure_logging(args.verbose)
    try:
        config = from_environment(load_pipeline_config(args.config))
        now = parse_instant(args.now, "--now")
    except ConfigError as exc:
        log.error("%s", exc)
        return 2
    # Spark starts only for compaction bins of more than driver_max_messages rows: retention,
    # expiry and orphan cleanup are catalog and storage calls on the driver.
    runner = DriverFirstRunner(
        lambda: build_context(f"tidelake-maintain-{config.name}", args.master,
                              log_level="INFO" if args.verbose else os.environ.get(SPARK_LOG_LEVEL_ENV)),
        config.driver_max_messages)
    try:
        emit(summary_lines(maintain(config, dry_run=args.dry_run, now=now, runner=runner)))
        return 0
    except Exception as exc:  # noqa: BLE001 - one line for a service's failure (spark.jobs.failed)
        return failed(exc)
    finally:
        runner.stop()


if __name__ == "__main__":
    sys.exit(main())
