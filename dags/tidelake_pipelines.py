"""One Airflow DAG per pipeline file: snapshot offsets -> confirm if done -> land -> apply -> publish; and its maintenance DAG.

Beside ``tidelake_<name>``, every pipeline gets ``tidelake-maintenance-<name>`` on its own
``[maintenance] schedule``: one task that runs ``spark/jobs/maintain.py`` (retention, snapshot
expiry, file deletion). It holds the pipeline's lease like apply does, so the two never write
at once; whichever comes second waits ``lease_wait_seconds`` and then fails and retries.

Pipeline files (TOML, JSON or YAML; see docs/configuration.md) are read from the folder
in ``TIDELAKE_PIPELINES`` (default: ``dags/pipelines/``).

Each run covers its data interval [data_interval_start, data_interval_end) of the pipeline's
cron, bounded by its start and end dates (``spark/jobs/airflow_plugin.py``); runs of one pipeline never overlap (max_active_runs=1) and
every task is safe to retry: offsets are snapshotted once per interval, manifests and
checkpoints are create-only, and apply brings every table to the interval's watermark
whatever state it finds. Replay with ``airflow backfill create --dag-id tidelake_<name>
--from-date A --to-date B`` (A and B select interval *starts*, inclusive), or run one interval
with ``airflow dags trigger tidelake_<name> --logical-date S`` (S its start: ``run_interval``);
a run needs a data interval, so ``airflow dags trigger`` without a logical date fails at its
first task saying so (docs/operating.md).

A broken pipeline file breaks only its own pipeline. Airflow 3.3 offers a DAG file no way
to report an error and still deliver its other DAGs (apache/airflow#53971 is open): an
exception loses every DAG of the module, and an import error recorded against this module
would mark every DAG defined here stale (``_update_import_errors`` flags all DAGs whose
fileloc is the erring file), so the healthy pipelines would stop being scheduled. One
Python file per pipeline would give each its own import error, but doubles what an
operator deploys and breaks the ``TIDELAKE_PIPELINES`` folder that deploy/ mounts. So a file
that does not validate becomes *stand-in DAGs* under the ids its pipeline has (or would
have), the pipeline's and its maintenance DAG's: unscheduled, tagged ``config-error``, their
description and docs stating the file, the key and what was expected. An Airflow user sees
the broken pipeline where they look for it -- in the DAG list, with the error -- while every
other pipeline keeps its schedule; because a stand-in creates no runs, fixing the file
resumes the pipeline where its schedule left off (with catch-up, the missed intervals run).

A stand-in has its pipeline's task ids, each a sensor that waits (reschedule mode) for the
file to be fixed, logging the error at every poke. A file edited while a run is in flight
(with Airflow's unversioned local bundle, a running run follows the DAG's latest version) so
neither removes the run's tasks nor adds any: the run's next task waits, and once the file
validates it runs the pipeline's own task on the same try -- what Airflow itself does for a
task whose DAG it cannot load at start (``[workers] missing_dag_retries``), without its
three-minute limit. A stand-in task fails after ``STAND_IN_WAIT`` (then fix the file and
``airflow tasks clear`` the run). The error is also logged by the dag-processor.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
from pathlib import Path
from typing import Any

import pendulum
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, Asset, BaseSensorOperator, Param, get_parsing_context, task
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException
from airflow.timetables.interval import CronDataIntervalTimetable

import spark.jobs
from spark.jobs.airflow_plugin import PipelineTimetable
from spark.config import PipelineConfig, load_pipeline_config

log = logging.getLogger(__name__)

# The spark-submit entry points of the tidelake installed beside this DAG: the same code as the
# archive shipped to the executors (deploy/README.md, "How the code reaches Spark").
JOBS = Path(spark.jobs.__file__).resolve().parent
PIPELINES = Path(os.environ.get("TIDELAKE_PIPELINES", Path(__file__).parent / "pipelines"))
PIPELINE_SUFFIXES = (".toml", ".json", ".yaml", ".yml")
# The run's interval (``run_interval``, through the DAG's macro ``tidelake_interval``).
INTERVAL_ARGS = ["--start", "{{ tidelake_interval(logical_date, data_interval_start, data_interval_end)[0].isoformat() }}",
                 "--end", "{{ tidelake_interval(logical_date, data_interval_start, data_interval_end)[1].isoformat() }}"]
CONFIG_ERROR_TAG = "config-error"
# The tasks of a pipeline's DAG and of its maintenance DAG, in order: their stand-ins keep them.
PIPELINE_TASK_IDS = ("snapshot_offsets", "confirm_if_done", "land", "apply", "publish")
MAINTENANCE_TASK_IDS = ("maintain",)


def dag_id_of(pipeline: str) -> str:
    return f"tidelake_{pipeline}"


def watermark_asset(pipeline: str) -> Asset:
    """Downstream DAGs schedule on this: one event per newly published watermark (docs/operating.md, "Asset events")."""
    return Asset(f"tidelake://{pipeline}/watermark", extra={"pipeline": pipeline})


def asset_event_extra(pipeline: str, announcement: Any) -> dict[str, Any]:
    """The event's ``extra`` for a ``spark.commit.published.Announcement``.

    Watermarks are TiDB TSOs above 2^53: JavaScript (the Airflow UI, most JSON clients)
    rounds such integers, so each also travels as an exact decimal string.
    """
    repaired_from = announcement.repaired_from
    previous = announcement.previous_watermark  # the W before it: read_changes(previous, W) is what is new
    return {
        "pipeline": pipeline,
        "watermark": announcement.watermark,
        "watermark_str": str(announcement.watermark),
        "previous_watermark": previous,
        "previous_watermark_str": str(previous),
        "interval_end": announcement.interval_end.isoformat(),
        "repair": announcement.repair,
        "repaired_from": repaired_from,
        "repaired_from_str": None if repaired_from is None else str(repaired_from),
        # Tables isolated while earlier Ws were announced, caught up since: a mirror reads each one's
        # changes from its held W (docs/operating.md, "A downstream DAG").
        "caught_up": [{"database": c["database"], "table": c["table"], "from_watermark": c["held_at"],
                       "from_watermark_str": str(c["held_at"])} for c in announcement.caught_up],
    }


# The deploy shape (deploy/README.md): spark-submit runs on the Airflow worker in client mode, so the
# driver reads the pipeline file and the worker's environment (credentials) where the DAG sees them;
# executors get the code from the archive in TIDELAKE_PY_FILES and the cluster's settings from the
# properties file in TIDELAKE_SPARK_PROPERTIES. Both unset: a local master running this installation.
PY_FILES_ENV = "TIDELAKE_PY_FILES"
SPARK_PROPERTIES_ENV = "TIDELAKE_SPARK_PROPERTIES"


def maintenance_dag_id_of(pipeline: str) -> str:
    # "tidelake-" never starts a pipeline DAG id ("tidelake_<name>"), so no pipeline name can collide with it.
    return f"tidelake-maintenance-{pipeline}"


# The maintain job's "now": the run's run_after, fixed when the run is created, so a retry decides
# the same. A scheduled run's is its interval end; a triggered run's is the time it was triggered,
# with or without --logical-date (Airflow 3.3 gives such a run the last complete cron interval
# before the trigger, which says nothing the operator chose; and a logical date in the future
# would make files written a moment ago look older than grace_period).
MAINTENANCE_NOW = "{{ dag_run.run_after.isoformat() }}"


def maintain_args(path: Path) -> list[str]:
    """The maintain job's arguments (``MAINTENANCE_NOW``)."""
    return ["--config", str(path), "--now", MAINTENANCE_NOW]


def spark_submit_args(config: PipelineConfig, environ: dict[str, str] | os._Environ = os.environ) -> dict[str, Any]:
    """What the land and apply tasks pass to ``SparkSubmitOperator`` besides their application and arguments."""
    schedule = config.schedule
    args: dict[str, Any] = {"conn_id": schedule.spark_conn_id, "conf": dict(schedule.spark_conf), "name": f"tidelake-{config.name}"}
    if environ.get(PY_FILES_ENV):
        args["py_files"] = environ[PY_FILES_ENV]
    if environ.get(SPARK_PROPERTIES_ENV):
        args["properties_file"] = environ[SPARK_PROPERTIES_ENV]
    return args


def load_task_config(path: Path) -> PipelineConfig:
    """The pipeline file as a task uses it: secrets it leaves out come from the worker's environment."""
    from spark.runtime.credentials import from_environment

    return from_environment(load_pipeline_config(str(path)))


def run_interval(timetable: PipelineTimetable, logical_date: Any, start: Any, end: Any) -> tuple[Any, Any]:
    """The data interval a run covers: the one its logical date names.

    A scheduled or backfill run's logical date is its data interval's start: that interval. A run
    triggered with ``--logical-date L`` gets from Airflow 3.3's CLI the last complete interval
    before the *trigger time*, whatever L says (its REST API: the last one before L), so the
    interval L names is taken instead (``PipelineTimetable.named_interval``): the interval L
    starts if L is an interval start -- the run shows under L as a scheduled run of that interval
    would, and ``airflow backfill create --from-date L --to-date L`` names the same run -- or else
    the last interval complete at L (``--logical-date $(date -u ...)``: the last complete one now).
    A run without a logical date or interval is left as it is: ``require_interval`` fails it.
    """
    if start is None or end is None or not isinstance(logical_date, dt.datetime) or logical_date == start:
        return start, end
    named = timetable.named_interval(logical_date)
    return named.start, named.end


def require_interval(dag_id: str, start: Any, end: Any, config: PipelineConfig | None = None, path: Path | None = None,
                     logical_date: Any = None) -> None:
    """Fail a run without a data interval, or with one outside the pipeline's bounds, at once, saying what to do.

    ``airflow dags trigger`` without ``--logical-date`` creates a run without an interval.
    Guessing one for it would re-run one the scheduler owns without the run showing which. With
    a logical date the run covers the interval it names (``run_interval``), which for a bounded
    pipeline may lie outside ``[schedule] start_date`` .. ``end_date``, where no interval of the
    pipeline lies (the timetable schedules none there: spark/jobs/airflow_plugin.py).
    """
    if start is None or end is None:
        raise AirflowFailException(
            f"{dag_id}: this run has no data interval (it was triggered without a logical date), and every "
            "tidelake run covers one fixed interval. To run one interval: "
            f"airflow dags trigger {dag_id} --logical-date <its start>; to run given intervals: "
            f"airflow backfill create --dag-id {dag_id} --from-date <first interval start> --to-date <last interval start>; "
            f"to run the last complete interval now: airflow dags trigger {dag_id} --logical-date <now, e.g. "
            "$(date -u +%Y-%m-%dT%H:%M:%SZ)> (docs/operating.md)"
        )
    if config is None:
        return
    first, last = pendulum.parse(config.schedule.start_date), config.schedule.end_date and pendulum.parse(config.schedule.end_date)
    interval = f"{pendulum.instance(start).isoformat()}..{pendulum.instance(end).isoformat()}"
    named = pendulum.instance(logical_date if isinstance(logical_date, dt.datetime) else start).isoformat()
    if last is not None and end > last:
        raise AirflowFailException(
            f"{dag_id}: this run's data interval {interval} ends after the pipeline's end_date {last.isoformat()} "
            f"({path}: schedule.end_date), and no interval of the pipeline does. To run intervals after it, move "
            f"end_date in the file, then clear this run: airflow tasks clear {dag_id} --start-date {named} --end-date {named} --yes "
            "(docs/operating.md)"
        )
    if start < first:
        raise AirflowFailException(
            f"{dag_id}: this run's data interval {interval} starts before the pipeline's start_date {first.isoformat()} "
            f"({path}: schedule.start_date), and no interval of the pipeline does. To run earlier intervals, move "
            "start_date in the file (docs/operating.md)"
        )


def pipeline_timetable(config: PipelineConfig) -> PipelineTimetable:
    """The pipeline's cron intervals within its ``start_date`` and ``end_date`` (exclusive: no interval ends after it)."""
    schedule = config.schedule
    return PipelineTimetable(schedule.cron, "UTC", start=pendulum.parse(schedule.start_date),
                             end=pendulum.parse(schedule.end_date) if schedule.end_date else None)


def require_registered(timetable: PipelineTimetable, path: Path) -> None:
    """Fail this pipeline alone if Airflow cannot serialize its timetable (tidelake's plugin is not loaded).

    Found later, by the dag-processor, it would be an import error of this module: every
    pipeline's DAG stale.
    """
    from airflow.serialization.encoders import encode_timetable

    try:
        encode_timetable(timetable)
    except Exception as exc:  # noqa: BLE001 - TimetableNotRegistered, or whatever stops serialization
        raise ValueError(
            f"{path}: schedule: the DAG's timetable {type(timetable).__qualname__} cannot be serialized ({exc}); it is registered by "
            "tidelake's Airflow plugin, the airflow.plugins entry point of the tidelake package: install tidelake in the "
            "environment of the dag-processor, scheduler and api-server (deploy/README.md)"
        ) from exc


def one_line_on_service_failure(fn: Any) -> Any:
    """A task body whose failure on a service (S3, the catalog, Kafka) is raised as one line naming the
    service and what to do (``spark.runtime.services``), not the client library's traceback; retried as usual."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            from airflow.sdk.exceptions import AirflowException

            from spark.runtime.services import classify

            found = classify(exc)
            if found is None:
                raise
            raise AirflowException(str(found)) from None

    return wrapper


def build_dag(config: PipelineConfig, path: Path) -> DAG:
    schedule = config.schedule
    asset = watermark_asset(config.name)
    dag_id = dag_id_of(config.name)
    timetable = pipeline_timetable(config)

    def interval(logical_date: Any, start: Any, end: Any) -> tuple[Any, Any]:
        """This run's interval (``run_interval``); logged when it is not the data interval Airflow shows."""
        named = run_interval(timetable, logical_date, start, end)
        if named != (start, end):
            log.warning("%s: this run covers %s..%s, the interval its logical date %s names (Airflow shows %s..%s as its "
                     "data interval; docs/operating.md, \"Running intervals by hand\")", dag_id, named[0].isoformat(),
                     named[1].isoformat(), logical_date.isoformat(), start.isoformat(), end.isoformat())
        return named

    with DAG(
        dag_id=dag_id,
        description=f"CDC {', '.join(t.name for t in config.topics)} -> Iceberg namespace {config.namespace}",
        # The bounds live in the timetable, not in the DAG's end_date: Airflow gives a run past a
        # DAG's (its tasks') end_date no tasks at all, so a trigger there "succeeded" doing nothing.
        schedule=timetable,
        catchup=schedule.catchup,
        max_active_runs=1,
        default_args={
            # As a default argument, the start is also checked by `airflow dags trigger`, which refuses
            # a logical date before it saying so (a run before a task's start_date would have no tasks).
            "start_date": pendulum.parse(schedule.start_date),
            "retries": schedule.retries,
            "retry_delay": pendulum.duration(minutes=1),
            "execution_timeout": schedule.execution_timeout,
            "pool": schedule.pool,
        },
        params={
            "on_bad_message": Param(config.on_bad_message, enum=["fail", "continue"],
                                    description="an undecodable message: fail the run, or quarantine it and continue"),
            "on_table_error": Param(config.on_table_error, enum=["fail", "isolate"],
                                    description="a table's DDL or value tidelake cannot apply: fail the run, or hold that "
                                                "table at its last good W and publish the others"),
        },
        tags=["tidelake"],
        # The land and apply tasks' --start and --end (INTERVAL_ARGS).
        user_defined_macros={"tidelake_interval": lambda logical_date, start, end: run_interval(timetable, logical_date,
                                                                                                 start, end)},
        # Registered explicitly below: a DAG whose construction failed must not be picked up.
        auto_register=False,
    ) as dag:

        @task
        @one_line_on_service_failure
        def snapshot_offsets(logical_date=None, data_interval_start=None, data_interval_end=None) -> int:
            start, end = interval(logical_date, data_interval_start, data_interval_end)
            require_interval(dag_id, start, end, config, path, logical_date)
            from spark.archive.offsets import snapshot_offsets as snapshot

            ranges = snapshot(load_task_config(path), start, end)
            return sum(r.end - r.start for r in ranges)

        @task.short_circuit(ignore_downstream_trigger_rules=True)
        @one_line_on_service_failure
        def confirm_if_done(logical_date=None, data_interval_start=None, data_interval_end=None) -> bool:
            """An interval done already -- an operator cleared an old run, a backfill went over
            published intervals -- is confirmed here in seconds, from the archive and the catalog:
            land, apply and publish are skipped (no spark-submit; no Asset event, nothing is new)."""
            from spark.commit.apply import confirm_if_done as confirm
            from spark.jobs.apply import apply_summary

            result = confirm(load_task_config(path), *interval(logical_date, data_interval_start, data_interval_end))
            if result is None:
                return True
            for line in apply_summary(result):
                log.info("%s", line)
            return False

        spark_args = spark_submit_args(config)
        land = SparkSubmitOperator(
            task_id="land", application=str(JOBS / "land.py"),
            application_args=["--config", str(path), *INTERVAL_ARGS], **spark_args,
        )
        apply = SparkSubmitOperator(
            task_id="apply", application=str(JOBS / "apply.py"),
            application_args=["--config", str(path), *INTERVAL_ARGS, "--on-bad-message", "{{ params.on_bad_message }}",
                              "--on-table-error", "{{ params.on_table_error }}",
                              # Its retries are the same run: one takes over the lease an attempt that
                              # failed on a service could not release (spark.archive.lease).
                              "--run-id", "{{ dag.dag_id }}/{{ run_id }}"],
            **spark_args,
        )

        @task(outlets=[asset])
        @one_line_on_service_failure
        def publish(logical_date=None, data_interval_start=None, data_interval_end=None, outlet_events=None) -> dict[str, Any]:
            # Imported when the task runs: no I/O at parse time, and tests substitute the module.
            from spark.commit.published import announcement

            data_interval_start, data_interval_end = interval(logical_date, data_interval_start, data_interval_end)
            found = announcement(load_task_config(path), data_interval_start, data_interval_end)
            if found is None:
                # A skipped task emits no Asset event (the task runner sends outlet events only on success).
                raise AirflowSkipException(
                    f"{config.name}: {data_interval_start.isoformat()}..{data_interval_end.isoformat()} published no "
                    "new watermark (a rerun or backfill that confirmed already-announced ones): no Asset event"
                )
            extra = asset_event_extra(config.name, found)
            outlet_events[asset].extra = extra
            if found.repair:
                log.info("%s: repaired W %s..%s; Asset event with repair=true", config.name, found.repaired_from, found.watermark)
            else:
                log.info("%s: published W %s (interval end %s); Asset event sent", config.name, found.watermark, extra["interval_end"])
            return extra

        snapshot_offsets() >> confirm_if_done() >> land >> apply >> publish()
    return dag


def build_maintenance_dag(config: PipelineConfig, path: Path) -> DAG:
    """The pipeline's maintenance: one spark-submit of ``spark/jobs/maintain.py`` per ``[maintenance] schedule`` interval."""
    schedule = config.schedule
    with DAG(
        dag_id=maintenance_dag_id_of(config.name),
        description=f"maintenance of tidelake pipeline {config.name}: retention, snapshot expiry, file deletion",
        schedule=CronDataIntervalTimetable(config.maintenance.schedule, timezone="UTC"),
        # No end_date: a bounded pipeline's tables still age through the retention tiers and
        # need expiry after its last interval (and Airflow gives a run past a DAG's end_date no
        # tasks, so a trigger would do nothing).
        catchup=False,  # missed maintenance runs are not owed: the next one does their work
        max_active_runs=1,
        default_args={
            # As for the pipeline DAG: `airflow dags trigger` then refuses a logical date before it,
            # where Airflow would give the run no task.
            "start_date": pendulum.parse(schedule.start_date),
            "retries": schedule.retries,
            "retry_delay": pendulum.duration(minutes=5),
            "execution_timeout": schedule.execution_timeout,
            "pool": schedule.pool,
        },
        tags=["tidelake", "tidelake-maintenance"],
        auto_register=False,
    ) as dag:
        SparkSubmitOperator(task_id="maintain", application=str(JOBS / "maintain.py"), application_args=maintain_args(path),
                            **spark_submit_args(config))
    return dag


# A stand-in task polls like Airflow's own reschedule of a task whose DAG it cannot load
# ([workers] missing_dag_retry_delay); it gives up after a sensor's default timeout.
STAND_IN_POKE = pendulum.duration(seconds=60)
STAND_IN_WAIT = pendulum.duration(days=7)


class WaitForValidPipelineFile(BaseSensorOperator):
    """A stand-in's task: waits, in reschedule mode, until the pipeline file validates again.

    Every poke is a new try's process, which parses the file afresh: while it is broken, this
    stand-in task runs and logs the error as it is now; once it validates, the try after the
    fix runs the pipeline's own task under the same task id (a reschedule keeps the try number).
    It never succeeds: that would mark the pipeline's task done without running it.
    """

    def __init__(self, *, message: str, **kwargs: Any) -> None:
        # retry_delay: a pipeline task that failed on the broken file (its job read it) is retried
        # while the stand-in is the DAG, and so waits here after one poke interval, not five minutes.
        super().__init__(mode="reschedule", poke_interval=STAND_IN_POKE, timeout=STAND_IN_WAIT, retries=0,
                         retry_delay=STAND_IN_POKE, **kwargs)
        self.message = message

    def poke(self, context: Any) -> bool:
        log.error("%s; %s waits for it to be fixed (poking every %s, for %s at most), then runs the pipeline's own task",
                  self.message, self.task_id, STAND_IN_POKE.in_words(), STAND_IN_WAIT.in_words())
        return False


def config_error_dag(dag_id: str, path: Path, error: str, task_ids: tuple[str, ...]) -> DAG:
    """A stand-in for a pipeline file that does not validate (see the module docstring).

    ``task_ids``: the tasks of the DAG it stands in for, chained in that order, so a run in
    flight when the file broke keeps its tasks and waits.
    """
    message = f"tidelake pipeline file {path} is invalid: {error}"
    with DAG(
        dag_id=dag_id,
        description=f"CONFIG ERROR: {error}",
        doc_md=f"**This pipeline is not running.** Fix the file and the DAG comes back with its schedule; "
               f"a run that was in flight waits for the fix (at most {STAND_IN_WAIT.in_words()}) and goes on.\n\n"
               f"```\n{message}\n```",
        schedule=None,
        max_active_runs=1,
        tags=["tidelake", CONFIG_ERROR_TAG],
        auto_register=False,
    ) as dag:
        previous = None
        for task_id in task_ids:
            waiting = WaitForValidPipelineFile(task_id=task_id, message=message)
            if previous is not None:
                previous >> waiting
            previous = waiting
    return dag


PIPELINE_NAME = r"[A-Za-z0-9_.\-]+"


def _name_in_text(text: str, suffix: str) -> str | None:
    """The top-level ``name`` of a pipeline file that does not parse, read from its text: a syntax
    error elsewhere in the file must not move its stand-ins to other DAG ids than the fixed file's
    (Airflow keeps every DAG id it ever saw listed, as a stale DAG, until ``airflow dags delete``)."""
    import re

    if suffix == ".json":
        depth, in_string, escaped = 0, False, False
        for i, c in enumerate(text):
            if in_string:
                escaped, in_string = (not escaped and c == "\\"), in_string and (escaped or c != '"')
                continue
            if c == '"':
                found = re.match(rf'"name"\s*:\s*"({PIPELINE_NAME})"', text[i:])
                if depth == 1 and found:
                    return found.group(1)
                in_string = True
            elif c in "{[":
                depth += 1
            elif c in "}]":
                depth -= 1
        return None
    if suffix == ".toml":
        top = re.split(r"^\s*\[", text, maxsplit=1, flags=re.M)[0]  # keys before the first table
        found = re.search(rf"""^\s*name\s*=\s*["']({PIPELINE_NAME})["']\s*(#.*)?$""", top, re.M)
    else:  # YAML: an unindented key
        found = re.search(rf"""^name:\s*["']?({PIPELINE_NAME})["']?\s*(#.*)?$""", text, re.M)
    return found.group(1) if found else None


def _stand_in_names(path: Path) -> list[str]:
    """Pipeline names a broken file's stand-ins may take, best first: the file's ``name`` (parsed, or
    read from the text of a file that does not parse), then its file name."""
    candidates = []
    try:
        import json
        import tomllib

        text = path.read_text()
        try:
            if path.suffix == ".toml":
                doc = tomllib.loads(text)
            elif path.suffix == ".json":
                doc = json.loads(text)
            else:
                import yaml

                doc = yaml.safe_load(text)
            name = doc.get("name") if isinstance(doc, dict) else None
        except Exception:  # noqa: BLE001 - a syntax error: read the name from the text
            name = _name_in_text(text, path.suffix)
        if isinstance(name, str) and name:
            candidates.append(name)
    except Exception:  # noqa: BLE001 - an unreadable file falls back to its file name
        pass
    candidates.append(path.stem)
    return candidates


def load_dags(folder: Path, parsing_for: str | None = None) -> dict[str, DAG]:
    """A DAG for every pipeline file in ``folder``; a stand-in DAG for every file that fails.

    ``parsing_for``: the DAG a worker parses this file for (Airflow's parsing context); a
    broken file is logged only by the dag-processor and by its own stand-in's tasks, not in
    every other pipeline's task logs.
    """
    dags: dict[str, DAG] = {}
    sources: dict[str, Path] = {}
    broken: list[tuple[Path, str]] = []
    for path in sorted(p for p in folder.glob("*") if p.suffix in PIPELINE_SUFFIXES):
        try:
            config = load_pipeline_config(str(path))
            dag_id = dag_id_of(config.name)
            if dag_id in dags:
                raise ValueError(f"{path}: name: {config.name!r} is already the name of {sources[dag_id]}")
            dag = build_dag(config, path)
            maintenance = build_maintenance_dag(config, path)
            # What the DagBag would check (the timetable, params) fails here, for this file alone.
            dag.validate()
            maintenance.validate()
            require_registered(dag.timetable, path)
            dags[dag_id] = dag
            dags[maintenance.dag_id] = maintenance
            sources[dag_id] = path
        except Exception as exc:  # noqa: BLE001 - whatever one file does wrong stays with that file
            # ConfigError messages start with the file and key; others (a cron croniter rejects) get the file.
            error = str(exc) if str(exc).startswith(str(path)) else f"{path}: {type(exc).__name__}: {exc}"
            broken.append((path, error))
    for path, error in broken:
        free = [n for n in _stand_in_names(path) if dag_id_of(n) not in dags and maintenance_dag_id_of(n) not in dags]
        if not free:
            log.error("no DAG id left for the stand-in of %s (taken by %s)", path,
                      ", ".join(dag_id_of(n) for n in _stand_in_names(path)))
            continue
        dag_id, maintenance_id = dag_id_of(free[0]), maintenance_dag_id_of(free[0])
        if parsing_for in (None, dag_id, maintenance_id):
            log.error("tidelake pipeline file is invalid, its DAGs %s and %s are stand-ins: %s", dag_id, maintenance_id, error)
        # Named after the file, not the pipeline: if the fixed file names another pipeline, Airflow keeps
        # listing these ids (stale) until deleted; the stand-in says so.
        names = _stand_in_names(path)
        guessed = free[0] == names[-1] and (len(names) == 1 or names[0] != free[0])
        note = (f" (named after the file, its pipeline name being unreadable or taken: if the fixed file names "
                f"another pipeline, delete these stand-ins: airflow dags delete {dag_id} --yes; airflow dags delete "
                f"{maintenance_id} --yes)") if guessed else ""
        dags[dag_id] = config_error_dag(dag_id, path, error + note, PIPELINE_TASK_IDS)
        dags[maintenance_id] = config_error_dag(maintenance_id, path, error + note, MAINTENANCE_TASK_IDS)
    return dags


for _dag_id, _dag in load_dags(PIPELINES, get_parsing_context().dag_id).items():
    globals()[_dag_id] = _dag
