"""Thin entry points for spark-submit (each parses arguments and calls one tested function) and for Airflow
(``airflow_plugin``: the pipeline DAGs' timetable).

What a task log shows: diagnostics go through ``logging`` to stderr (Spark's own log4j lines
at WARN unless ``--verbose`` or ``TIDELAKE_SPARK_LOG_LEVEL`` asks for more); the job's result
is one summary block on stdout, written in one flushed write before Spark stops, so Spark's
shutdown lines can neither precede nor split it.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any, Callable, Sequence

from cdc_codecs import ConfigError, TidelakeError

log = logging.getLogger("tidelake.jobs")

# Spark's log4j level for the job's driver when neither --verbose nor spark-submit's
# `--conf spark.log.level=...` says otherwise (Spark's own default is INFO: ~100 lines a task).
SPARK_LOG_LEVEL_ENV = "TIDELAKE_SPARK_LOG_LEVEL"
QUIET_SPARK_LOG_LEVEL = "WARN"


# Calendar-free units for long ages: a month is 30 days, a year 365 (an age, not a date).


def emit(lines: Sequence[str]) -> None:
    """Write a summary block to stdout in one write and flush it (see the module docstring)."""
    sys.stdout.write("".join(f"{line}\n" for line in lines))
    sys.stdout.flush()


def configure_logging(verbose: bool) -> None:
    # Root at WARNING keeps py4j's INFO chatter out; tidelake's own diagnostics stay at INFO.
    logging.basicConfig(stream=sys.stderr, level=logging.INFO if verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("tidelake").setLevel(logging.DEBUG if verbose else logging.INFO)


def interval_job(prog: str, run: Callable[[Any, Any, Any, Any, argparse.Namespace], int],
                 argv: Sequence[str] | None, extra: Callable[[argparse.ArgumentParser], None] | None = None,
                 before_spark: Callable[[Any, Any, Any, argparse.Namespace], int | None] | None = None,
                 ahead: Callable[[Any, Any, Any], int | None] | None = None) -> int:
    """Parse ``--config --start --end [--master] [--verbose]``, call ``run(config, start, end, runner, args)``.

    ``before_spark(config, start, end, args)`` may settle the run without Spark (an interval
    that is done already): an exit code, or None to go on. ``runner`` is a
    ``DriverFirstRunner``: Spark starts only if the interval holds more than the pipeline's
    ``driver_max_messages`` messages. ``ahead(config, start, end)``: the messages the run has
    ahead, read before ``before_spark`` and ``run`` load their modules (None: not known, or the
    interval may be done); more than the driver takes starts Spark then, beside that loading
    (``DriverFirstRunner.expect``). A job's module therefore imports what ``run`` needs inside it.
    An interval with work ahead is not done: ``before_spark`` is not asked (it would read the
    same manifests and checkpoints again to say so).

    Exit codes: 0 done, 2 configuration error, 1 the run failed (the message says why).
    """
    from spark.config import load_pipeline_config, parse_instant
    from spark.runtime.credentials import from_environment
    from spark.runtime.runners import DriverFirstRunner
    from spark.runtime.session import build_context, load_ahead

    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--config", required=True, help="pipeline file (.toml, .json, .yaml)")
    parser.add_argument("--start", required=True, help="data interval start, ISO-8601 UTC")
    parser.add_argument("--end", required=True, help="data interval end, ISO-8601 UTC")
    parser.add_argument("--master", default=None, help="Spark master when not set by spark-submit")
    parser.add_argument("--verbose", action="store_true",
                        help=f"Spark's INFO log and tidelake's debug lines (default: Spark at ${SPARK_LOG_LEVEL_ENV} or WARN)")
    parser.add_argument("--run-id", default=None,
                        help="this run's identity, the same for its retries (the DAG passes its DAG and run id): a retry "
                             "takes over the pipeline's lease its failed attempt could not release")
    if extra:
        extra(parser)
    args = parser.parse_args(argv)
    configure_logging(args.verbose)
    if args.run_id:
        from spark.archive.lease import RUN_ENV

        os.environ[RUN_ENV] = args.run_id
    try:
        # Secrets the file leaves out come from the environment (deploy/README.md, "Credentials").
        config = from_environment(load_pipeline_config(args.config))
        start, end = parse_instant(args.start, "--start"), parse_instant(args.end, "--end")
    except ConfigError as exc:
        log.error("%s", exc)
        return 2
    spark_log_level = "INFO" if args.verbose else os.environ.get(SPARK_LOG_LEVEL_ENV)
    runner = DriverFirstRunner(
        lambda: build_context(f"tidelake-{prog}-{config.name}", args.master, log_level=spark_log_level),
        config.driver_max_messages, load=load_ahead)
    try:
        work = ahead(config, start, end) if ahead is not None else None
        runner.expect(work)
        if before_spark is not None and work is None and (settled := before_spark(config, start, end, args)) is not None:
            return settled
        return run(config, start, end, runner, args)
    except Exception as exc:  # noqa: BLE001 - see failed()
        return failed(exc)
    finally:
        try:
            runner.stop()
        except Exception as exc:  # noqa: BLE001 - stopping Spark after a failure must not hide it
            log.debug("stopping Spark: %s", exc)


def failed(exc: BaseException) -> int:
    """A job's failure as one line on stderr and exit code 1 (Airflow retries the task): tidelake's own
    errors as they say (raised in the driver, or in a Spark task: ``executor_tidelake_error``), a
    service's (S3, catalog, Kafka, Spark) naming the service and what to do
    (``spark.runtime.services``). Anything else is a bug: raised, with its traceback."""
    from spark.runtime.services import classify

    found = classify(exc)
    if found is None and not isinstance(exc, TidelakeError):
        from spark.commit.isolation import executor_tidelake_error

        if (own := executor_tidelake_error(exc)) is None:
            raise exc
        log.error("%s", own)
        return 1
    log.error("%s", found or exc)
    return 1
