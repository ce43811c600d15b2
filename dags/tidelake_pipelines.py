"""One Airflow DAG per pipeline file: snapshot offsets -> confirm if done -> land -> apply -> publish; and its maintenance DAG.

Beside ``tidelake_<name>``, every pipeline gets ``tidelake-maintenance-<name>`` on its own
``[maintenance] schedule``: one task that runs ``spark/jobs/maintain.py`` (retention, snapshot
expiry, file deletion). It holds the pipeline's lease like apply does, so the two never write
at once; whichever comes second waits ``lease_wait_seconds`` and then fails and retries.

Pipeline files (TOML, JSON or YAML; see README "Configuration") are read from the folder
in ``TIDELAKE_PIPELINES`` (default: ``dags/pipelines/``).

Each run covers its data interval [data_interval_start, data_interval_end) of a
``CronDataIntervalTimetable``; runs of one pipeline never overlap (max_active_runs=1) and
every task is safe to retry: offsets are snapshotted once per interval, manifests and
checkpoints are create-only, and apply brings every table to the interval's watermark
whatever state it finds. Replay with ``airflow backfill create --dag-id tidelake_<name>
--from-date A --to-date B`` (A and B select interval *starts*, inclusive); a run needs a
data interval, so ``airflow dags trigger`` without a logical date fails at its first task
saying so (docs/operating.md).

A broken pipeline file breaks only its own pipeline. Airflow 3.3 offers a DAG file no way
to report an error and still deliver its other DAGs (apache/airflow#53971 is open): an
exception loses every DAG of the module, and an import error recorded against this module
would mark every DAG defined here stale (``_update_import_errors`` flags all DAGs whose
fileloc is the erring file), so the healthy pipelines would stop being scheduled. One
Python file per pipeline would give each its own import error, but doubles what an
operator deploys and breaks the ``TIDELAKE_PIPELINES`` folder that deploy/ mounts. So a file
that does not validate becomes a *stand-in DAG* under the id its pipeline has (or would
have): unscheduled, tagged ``config-error``, its description and docs stating the file,
the key and what was expected, and one task ``config_error`` that fails with that message
if anyone runs it. An Airflow user sees the broken pipeline where they look for it -- in
the DAG list, with the error -- while every other pipeline keeps its schedule; because the
stand-in creates no runs, fixing the file resumes the pipeline where its schedule left off
(with catch-up, the missed intervals run), exactly as after an import error. The error is
also logged by the dag-processor.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import pendulum
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, Asset, Param, get_parsing_context, task
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException
from airflow.timetables.interval import CronDataIntervalTimetable

import spark.jobs
from spark.config import PipelineConfig, load_pipeline_config

log = logging.getLogger(__name__)

# The spark-submit entry points of the tidelake installed beside this DAG: the same code as the
# archive shipped to the executors (deploy/README.md, "How the code reaches Spark").
JOBS = Path(spark.jobs.__file__).resolve().parent
PIPELINES = Path(os.environ.get("TIDELAKE_PIPELINES", Path(__file__).parent / "pipelines"))
PIPELINE_SUFFIXES = (".toml", ".json", ".yaml", ".yml")
INTERVAL_ARGS = ["--start", "{{ data_interval_start.isoformat() }}", "--end", "{{ data_interval_end.isoformat() }}"]
CONFIG_ERROR_TAG = "config-error"


def dag_id_of(pipeline: str) -> str:
    return f"tidelake_{pipeline}"


def watermark_asset(pipeline: str) -> Asset:
    """Downstream DAGs schedule on this: one event per newly published watermark (README "Asset events")."""
    return Asset(f"tidelake://{pipeline}/watermark", extra={"pipeline": pipeline})


def asset_event_extra(pipeline: str, announcement: Any) -> dict[str, Any]:
    """The event's ``extra`` for a ``spark.publish.Announcement``.

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


# The maintain job's "now": a scheduled run's interval end, so a retry decides the same; a run
# triggered without a logical date has no interval (the variable is undefined, not None), and
# takes the time it was triggered to run after.
MAINTENANCE_NOW = ("{{ (data_interval_end if data_interval_end is defined and data_interval_end "
                   "else dag_run.run_after).isoformat() }}")


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
    from spark.credentials import from_environment

    return from_environment(load_pipeline_config(str(path)))


def require_interval(dag_id: str, start: Any, end: Any) -> None:
    """Fail a run without a data interval at once, saying how to start one that has it.

    ``airflow dags trigger`` without ``--logical-date`` creates such a run. Guessing an
    interval for it would re-run one the scheduler owns without the run showing which; with
    any logical date, Airflow 3.3's CLI gives the run the last complete interval before the
    trigger time (the REST API: before the logical date), shown on the run like any other.
    """
    if start is None or end is None:
        raise AirflowFailException(
            f"{dag_id}: this run has no data interval (it was triggered without a logical date), and every "
            "tidelake run covers one fixed interval. To run given intervals: "
            f"airflow backfill create --dag-id {dag_id} --from-date <first interval start> --to-date <last interval start>; "
            f"to run the last complete interval now: airflow dags trigger {dag_id} --logical-date <now, e.g. "
            "$(date -u +%Y-%m-%dT%H:%M:%SZ)> (docs/operating.md)"
        )


def build_dag(config: PipelineConfig, path: Path) -> DAG:
    schedule = config.schedule
    asset = watermark_asset(config.name)
    dag_id = dag_id_of(config.name)
    with DAG(
        dag_id=dag_id,
        description=f"CDC {', '.join(t.name for t in config.topics)} -> Iceberg namespace {config.namespace}",
        schedule=CronDataIntervalTimetable(schedule.cron, timezone="UTC"),
        start_date=pendulum.parse(schedule.start_date),
        # Airflow schedules every interval that *starts* at or before end_date; ours is exclusive.
        end_date=pendulum.parse(schedule.end_date).subtract(microseconds=1) if schedule.end_date else None,
        catchup=schedule.catchup,
        max_active_runs=1,
        default_args={
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
        # Registered explicitly below: a DAG whose construction failed must not be picked up.
        auto_register=False,
    ) as dag:

        @task
        def snapshot_offsets(data_interval_start=None, data_interval_end=None) -> int:
            require_interval(dag_id, data_interval_start, data_interval_end)
            from spark.offsets import snapshot_offsets as snapshot

            ranges = snapshot(load_task_config(path), data_interval_start, data_interval_end)
            return sum(r.end - r.start for r in ranges)

        @task.short_circuit(ignore_downstream_trigger_rules=True)
        def confirm_if_done(data_interval_start=None, data_interval_end=None) -> bool:
            """An interval done already -- an operator cleared an old run, a backfill went over
            published intervals -- is confirmed here in seconds, from the archive and the catalog:
            land, apply and publish are skipped (no spark-submit; no Asset event, nothing is new)."""
            from spark.apply import confirm_if_done as confirm
            from spark.jobs.apply import apply_summary

            result = confirm(load_task_config(path), data_interval_start, data_interval_end)
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
                              "--on-table-error", "{{ params.on_table_error }}"],
            **spark_args,
        )

        @task(outlets=[asset])
        def publish(data_interval_start=None, data_interval_end=None, outlet_events=None) -> dict[str, Any]:
            # Imported when the task runs: no I/O at parse time, and tests substitute the module.
            from spark.publish import announcement

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
        start_date=pendulum.parse(schedule.start_date),
        # No end_date: a bounded pipeline's tables still age through the retention tiers and
        # need expiry after its last interval (and Airflow gives a run past a DAG's end_date no
        # tasks, so a trigger would do nothing).
        catchup=False,  # missed maintenance runs are not owed: the next one does their work
        max_active_runs=1,
        default_args={
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


def config_error_dag(dag_id: str, path: Path, error: str) -> DAG:
    """The stand-in for a pipeline file that does not validate (see the module docstring)."""
    message = f"tidelake pipeline file {path} is invalid: {error}"
    with DAG(
        dag_id=dag_id,
        description=f"CONFIG ERROR: {error}",
        doc_md=f"**This pipeline is not running.** Fix the file and the DAG comes back with its schedule.\n\n"
               f"```\n{message}\n```",
        schedule=None,
        tags=["tidelake", CONFIG_ERROR_TAG],
        auto_register=False,
    ) as dag:

        @task(task_id="config_error", retries=0)
        def config_error() -> None:
            raise AirflowFailException(message)

        config_error()
    return dag


def _stand_in_ids(path: Path) -> list[str]:
    """DAG ids a broken file's stand-in may take, best first: its pipeline's id, then one from the file name."""
    candidates = []
    try:
        import json
        import tomllib

        text = path.read_text()
        if path.suffix == ".toml":
            doc = tomllib.loads(text)
        elif path.suffix == ".json":
            doc = json.loads(text)
        else:
            import yaml

            doc = yaml.safe_load(text)
        name = doc.get("name") if isinstance(doc, dict) else None
        if isinstance(name, str) and name:
            candidates.append(dag_id_of(name))
    except Exception:  # noqa: BLE001 - an unreadable file falls back to its file name
        pass
    candidates.append(dag_id_of(path.stem))
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
            dags[dag_id] = dag
            dags[maintenance.dag_id] = maintenance
            sources[dag_id] = path
        except Exception as exc:  # noqa: BLE001 - whatever one file does wrong stays with that file
            # ConfigError messages start with the file and key; others (a cron croniter rejects) get the file.
            error = str(exc) if str(exc).startswith(str(path)) else f"{path}: {type(exc).__name__}: {exc}"
            broken.append((path, error))
    for path, error in broken:
        free = [d for d in _stand_in_ids(path) if d not in dags]
        if not free:
            log.error("no DAG id left for the stand-in of %s (taken by %s)", path, ", ".join(_stand_in_ids(path)))
            continue
        if parsing_for in (None, free[0]):
            log.error("tidelake pipeline file is invalid, its DAG %s is a stand-in: %s", free[0], error)
        dags[free[0]] = config_error_dag(free[0], path, error)
    return dags


for _dag_id, _dag in load_dags(PIPELINES, get_parsing_context().dag_id).items():
    globals()[_dag_id] = _dag
