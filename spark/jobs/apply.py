"""spark-submit entry point for stages 2 to 5: apply the interval's changes and publish W.

    spark-submit spark/jobs/apply.py --config pipeline.toml --start 2024-01-01T00:00:00Z --end 2024-01-01T01:00:00Z

Decoding runs on the executors (a task per partition, or per segment where segments carry no
decoder state); the driver plans, commits to Iceberg, tags and publishes. Prints one summary
block (W, its wall time, lag, counts per table) before Spark stops -- the full report is ``reports/<interval>/apply.json`` in the
archive; exits 0 when every table is at the interval's watermark, 2 on a configuration
error, 1 on any other failure.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import sys
from typing import TYPE_CHECKING, Any

if __name__ == "__main__":  # run by spark-submit: this file is the installation's, the library may be the --py-files archive
    import runpy
    from pathlib import Path

    runpy.run_path(str(Path(__file__).with_name("same_build.py")))["require_same_build"](__file__)

from spark.core.text import human_duration, utc_text
from spark.jobs import emit, interval_job

if TYPE_CHECKING:
    from spark.commit.apply import ApplyResult

# The run's modules (spark.commit.apply and what it imports: pyiceberg, pyarrow's datasets, the
# catalog's SQLAlchemy; about a second) load inside ``run`` and ``confirm_without_spark``, after
# ``ahead`` has started Spark beside them (spark.jobs.interval_job).


def apply_summary(result: ApplyResult, spark_started: bool = False) -> list[str]:
    """The task log's account of an apply run, from its report (whatever its outcome);
    ``spark_started``: the job started Spark (ahead, ``DriverFirstRunner.expect``) though the run
    went on in the driver."""
    from spark.commit.report import isolated_lines

    r: dict[str, Any] = result.report
    interval_end = dt.datetime.fromisoformat(r["interval"]["end"])
    span = f"{utc_text(dt.datetime.fromisoformat(r['interval']['start']))}..{utc_text(interval_end)}"
    w = r["watermark"]
    outcome = r.get("outcome", "published" if w else "not-consistent")
    if not w:
        lines = [f"{r['pipeline']} {span}: no consistent W yet (a partition has reported no watermark); nothing tagged"]
    else:
        lines = [f"{r['pipeline']} {span}: W {w} {outcome} (previous W {r['previous_watermark']})"]
        wall = dt.datetime.fromisoformat(r["watermark_time"])
        lag = r.get("lag_seconds")
        lag = (interval_end - wall).total_seconds() if lag is None else lag
        lines.append(f"  W wall time {utc_text(wall)}, lag {human_duration(lag)} behind the interval end")
    if r.get("note"):
        lines.append(f"  {r['note']}")
    if "messages_decoded" in r:
        lines.append(f"  decoded {r['messages_decoded']} messages, {r['events_decoded']} events in {r['seconds']:.2f} s; "
                     f"{r['already_applied_skipped']} already applied, {r['quarantined']} quarantined")
        if r.get("ran_in") == "driver" and spark_started:
            # A retry whose failed attempt decoded the interval: its landed messages started Spark
            # ahead, and the fold of what was decoded was small enough for the driver.
            lines.append("  ran in the driver (at most driver_max_messages messages to read); Spark, started "
                         "ahead for the interval's landed messages, was not needed")
        elif r.get("ran_in") == "driver":
            lines.append("  ran in the driver without starting Spark (at most driver_max_messages messages to read)")
    if result.replayed:
        lines.append(f"  replayed first: intervals ending {', '.join(result.replayed)}")
    tables = r.get("tables", {})
    width = max((len(name) for name in tables), default=0)
    for name, t in tables.items():
        lines.append(f"  table {name:<{width}}  {t['events_applied']} events applied{', dropped' if t.get('dropped') else ''}")
    lines += [f"  {line}" for line in isolated_lines(r)]
    return lines


def run(config, start, end, runner, args) -> int:  # noqa: ANN001 - see interval_job
    from spark.commit.apply import apply_interval

    if args.on_bad_message:
        config = dataclasses.replace(config, on_bad_message=args.on_bad_message)
    if args.on_table_error:
        config = dataclasses.replace(config, on_table_error=args.on_table_error)
    result = apply_interval(config, start, end, runner=runner)
    emit(apply_summary(result, spark_started=runner.started or runner.starting))
    return 0


def confirm_without_spark(config, start, end, args) -> int | None:  # noqa: ANN001 - see interval_job
    """An interval that is done already (a rerun, a completed backfill) is confirmed before Spark starts."""
    from spark.commit.apply import confirm_if_done

    result = confirm_if_done(config, start, end)
    if result is None:
        return None
    emit(apply_summary(result))
    return 0


def messages_ahead(config, start, end) -> int | None:  # noqa: ANN001 - see interval_job
    """The interval's landed messages if no run applied it or a later one (``unapplied_messages``)."""
    from spark.archive.checkpoint import unapplied_messages
    from spark.archive.storage import open_storage

    return unapplied_messages(open_storage(config.storage), config.name, start, end)


def main(argv: list[str] | None = None) -> int:
    def options(p):  # noqa: ANN001, ANN202
        p.add_argument("--on-bad-message", choices=["fail", "continue"], default=None, help="override the pipeline's policy")
        p.add_argument("--on-table-error", choices=["fail", "isolate"], default=None, help="override the pipeline's policy")

    return interval_job("apply", run, argv, options, before_spark=confirm_without_spark, ahead=messages_ahead)


if __name__ == "__main__":
    sys.exit(main())
