"""One Airflow DAG per pipeline file: snapshot offsets -> land -> apply -> publish.

Pipeline files (TOML, JSON or YAML; see README "Configuration") are read from the folder
in ``TIDELAKE_PIPELINES`` (default: ``dags/pipelines/``). A file that does not validate
fails DAG parsing with an import error naming the file, the key and what is expected.

Each run covers its data interval [data_interval_start, data_interval_end) of a
``CronDataIntervalTimetable``; runs of one pipeline never overlap (max_active_runs=1) and
every task is safe to retry: offsets are snapshotted once per interval, manifests and
checkpoints are create-only, and apply brings every table to the interval's watermark
whatever state it finds. Backfill with ``airflow backfill create --dag-id tidelake_<name>
--from-date A --to-date B``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pendulum
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import DAG, Asset, Param, task
from airflow.timetables.interval import CronDataIntervalTimetable

from spark.config import PipelineConfig, load_pipeline_config

REPO = Path(__file__).resolve().parents[1]
PIPELINES = Path(os.environ.get("TIDELAKE_PIPELINES", Path(__file__).parent / "pipelines"))
INTERVAL_ARGS = ["--start", "{{ data_interval_start.isoformat() }}", "--end", "{{ data_interval_end.isoformat() }}"]


def watermark_asset(pipeline: str) -> Asset:
    """Downstream DAGs schedule on this: one event per published, consistent watermark."""
    return Asset(f"tidelake://{pipeline}/watermark", extra={"pipeline": pipeline})


def build_dag(config: PipelineConfig, path: Path) -> DAG:
    schedule = config.schedule
    asset = watermark_asset(config.name)
    with DAG(
        dag_id=f"tidelake_{config.name}",
        description=f"CDC {', '.join(t.name for t in config.topics)} -> Iceberg namespace {config.namespace}",
        schedule=CronDataIntervalTimetable(schedule.cron, timezone="UTC"),
        start_date=pendulum.parse(schedule.start_date),
        # Airflow schedules every interval that *starts* at or before end_date; ours is exclusive.
        end_date=pendulum.parse(schedule.end_date).subtract(microseconds=1) if schedule.end_date else None,
        catchup=schedule.catchup,
        max_active_runs=1,
        default_args={"retries": schedule.retries, "retry_delay": pendulum.duration(minutes=1)},
        params={
            "on_bad_message": Param(config.on_bad_message, enum=["fail", "continue"],
                                    description="an undecodable message: fail the run, or quarantine it and continue"),
        },
        tags=["tidelake"],
    ) as dag:

        @task
        def snapshot_offsets(data_interval_start=None, data_interval_end=None) -> int:
            from spark.offsets import snapshot_offsets as snapshot

            ranges = snapshot(load_pipeline_config(str(path)), data_interval_start, data_interval_end)
            return sum(r.end - r.start for r in ranges)

        spark_args = {"conn_id": schedule.spark_conn_id, "conf": dict(schedule.spark_conf), "name": f"tidelake-{config.name}"}
        land = SparkSubmitOperator(
            task_id="land", application=str(REPO / "spark/jobs/land.py"),
            application_args=["--config", str(path), *INTERVAL_ARGS], **spark_args,
        )
        apply = SparkSubmitOperator(
            task_id="apply", application=str(REPO / "spark/jobs/apply.py"),
            application_args=["--config", str(path), *INTERVAL_ARGS, "--on-bad-message", "{{ params.on_bad_message }}"],
            **spark_args,
        )

        @task(outlets=[asset])
        def publish(data_interval_start=None, data_interval_end=None, outlet_events=None) -> int:
            from spark.apply import published_watermark_of

            w = published_watermark_of(load_pipeline_config(str(path)), data_interval_start, data_interval_end)
            outlet_events[asset].extra = {"pipeline": config.name, "watermark": w,
                                          "interval_end": data_interval_end.isoformat()}
            return w

        snapshot_offsets() >> land >> apply >> publish()
    return dag


for _path in sorted(p for p in PIPELINES.glob("*") if p.suffix in (".toml", ".json", ".yaml", ".yml")):
    _dag = build_dag(load_pipeline_config(str(_path)), _path)
    globals()[_dag.dag_id] = _dag
