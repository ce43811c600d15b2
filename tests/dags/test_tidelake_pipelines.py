"""The DAG file: one DAG per pipeline file, parse-time validation, and a real dag.test() run."""

from __future__ import annotations

import datetime as dt
import sys
import textwrap
import types
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.spark.archives import oracle_from_records

from .conftest import REPO

pytestmark = pytest.mark.slow  # whole intervals, Spark or services: make test-fast leaves it out (docs/testing.md)

UTC = dt.UTC
T0 = dt.datetime(2024, 1, 1, tzinfo=UTC)


def write_pipeline(folder: Path, name: str, body: str) -> Path:
    path = folder / f"{name}.toml"
    path.write_text(textwrap.dedent(body))
    return path


VALID = """
    name = "{name}"
    [kafka]
    bootstrap_servers = "{bootstrap}"
    [[topics]]
    name = "{topic}"
    protocol = "canal-json"
    [storage]
    url = "{url}"
    {extra}
    [schedule]
    cron = "0 * * * *"
    start_date = "2024-01-01T00:00:00Z"
    retries = 0
"""


def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(REPO / "dags"))


def test_one_dag_per_pipeline_with_real_intervals(pipelines: Path, tmp_path: Path) -> None:
    write_pipeline(pipelines, "shop", VALID.format(name="shop", bootstrap="k:9092", topic="t", url=tmp_path, extra=""))
    write_pipeline(pipelines, "crm", VALID.format(name="crm", bootstrap="k:9092", topic="c", url=tmp_path, extra=""))
    bag = dagbag()
    assert bag.import_errors == {}
    assert sorted(bag.dags) == ["tidelake-maintenance-crm", "tidelake-maintenance-shop", "tidelake_crm", "tidelake_shop"]
    dag = bag.dags["tidelake_shop"]
    from spark.jobs.airflow_plugin import PipelineTimetable

    assert isinstance(dag.timetable, PipelineTimetable) and dag.timetable.summary == "0 * * * *"
    assert dag.max_active_runs == 1
    assert dag.params["on_bad_message"] == "fail"
    assert dag.params["on_table_error"] == "isolate"
    order = [t.task_id for t in dag.topological_sort()] if hasattr(dag, "topological_sort") else None
    tasks = {t.task_id: t for t in dag.tasks}
    assert set(tasks) == {"snapshot_offsets", "confirm_if_done", "land", "apply", "publish"}
    assert tasks["confirm_if_done"].upstream_task_ids == {"snapshot_offsets"}
    assert tasks["land"].upstream_task_ids == {"confirm_if_done"}
    assert tasks["apply"].upstream_task_ids == {"land"}
    assert tasks["publish"].upstream_task_ids == {"apply"}
    assert [o.uri for o in tasks["publish"].outlets] == ["tidelake://shop/watermark"]
    assert tasks["land"].application.endswith("spark/jobs/land.py")
    from dags.tidelake_pipelines import INTERVAL_ARGS

    assert tasks["apply"].application_args[2:6] == INTERVAL_ARGS and tasks["land"].application_args[2:] == INTERVAL_ARGS
    assert tasks["apply"].application_args[-4:] == ["--on-table-error", "{{ params.on_table_error }}",
                                                    "--run-id", "{{ dag.dag_id }}/{{ run_id }}"]
    assert order is None or order.index("land") < order.index("apply")


def test_every_pipeline_has_a_maintenance_dag_on_its_own_schedule(pipelines: Path, tmp_path: Path) -> None:
    from airflow.timetables.interval import CronDataIntervalTimetable

    from dags.tidelake_pipelines import MAINTENANCE_NOW, maintain_args

    path = write_pipeline(pipelines, "shop", VALID.format(name="shop", bootstrap="k:9092", topic="t", url=tmp_path,
                                                          extra='[maintenance]\n    schedule = "15 4 * * 6"\n'))
    write_pipeline(pipelines, "crm", VALID.format(name="crm", bootstrap="k:9092", topic="c", url=tmp_path, extra=""))
    # The argv the maintain task passes, exactly: the run's logical time is its interval end.
    assert maintain_args(path) == ["--config", str(path), "--now", MAINTENANCE_NOW]
    bag = dagbag()
    assert bag.import_errors == {}
    dag, default = bag.dags["tidelake-maintenance-shop"], bag.dags["tidelake-maintenance-crm"]
    assert isinstance(dag.timetable, CronDataIntervalTimetable)
    assert dag.timetable.summary == "15 4 * * 6" and default.timetable.summary == "0 3 * * *"
    assert dag.max_active_runs == 1 and not dag.catchup
    (task,) = dag.tasks
    assert task.task_id == "maintain" and task.application.endswith("spark/jobs/maintain.py")
    assert task.application_args == maintain_args(path)
    assert "tidelake_shop" in bag.dags and "maintain" not in {t.task_id for t in bag.dags["tidelake_shop"].tasks}


def test_maintenance_now_is_the_runs_run_after_whatever_its_logical_date(pipelines: Path, tmp_path: Path) -> None:
    """A scheduled run's run_after is its interval end; a triggered run's the trigger time, with or without
    --logical-date (Airflow 3.3 gives such a run the last cron interval before the trigger as its data interval)."""
    path = write_pipeline(pipelines, "shop", VALID.format(name="shop", bootstrap="k:9092", topic="t", url=tmp_path, extra=""))
    op = dagbag().dags["tidelake-maintenance-shop"].task_dict["maintain"]
    scheduled_end, triggered = dt.datetime(2024, 6, 2, 3, tzinfo=UTC), dt.datetime(2024, 8, 1, 9, 30, 5, tzinfo=UTC)
    cases = [  # (context, --now)
        ({"logical_date": scheduled_end - dt.timedelta(days=1), "data_interval_start": scheduled_end - dt.timedelta(days=1),
          "data_interval_end": scheduled_end, "dag_run": types.SimpleNamespace(run_after=scheduled_end)}, scheduled_end),
        # `airflow dags trigger tidelake-maintenance-shop --logical-date 2024-01-05T00:00:00Z` at 09:30:05
        ({"logical_date": dt.datetime(2024, 1, 5, tzinfo=UTC), "data_interval_start": dt.datetime(2024, 7, 31, 3, tzinfo=UTC),
          "data_interval_end": dt.datetime(2024, 8, 1, 3, tzinfo=UTC), "dag_run": types.SimpleNamespace(run_after=triggered)},
         triggered),
        # ... and without a logical date: no data interval at all (the variables are None)
        ({"logical_date": None, "data_interval_start": None, "data_interval_end": None,
          "dag_run": types.SimpleNamespace(run_after=triggered)}, triggered),
    ]
    for context, now in cases:
        op.render_template_fields(context)
        assert op.application_args == ["--config", str(path), "--now", now.isoformat()], context
        op.application_args = __import__("dags.tidelake_pipelines", fromlist=["x"]).maintain_args(path)


def test_a_run_covers_the_interval_its_logical_date_names(pipelines: Path, tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """Scheduled and backfill runs: their data interval (it starts at the logical date). A run triggered with
    --logical-date L: Airflow 3.3's CLI stores the last complete interval before the trigger time on it; it runs
    the interval L starts (L an interval start) or the last one complete at L -- land and apply get it, exactly."""
    from dags.tidelake_pipelines import pipeline_timetable, run_interval
    from spark.config import load_pipeline_config

    path = write_pipeline(pipelines, "shop", VALID.format(name="shop", bootstrap="k:9092", topic="t", url=tmp_path, extra=""))
    dag = dagbag().dags["tidelake_shop"]
    timetable = pipeline_timetable(load_pipeline_config(str(path)))
    h = lambda hour, minute=0: T0 + dt.timedelta(hours=hour, minutes=minute)  # noqa: E731
    now_interval = (dt.datetime(2026, 11, 28, 17, tzinfo=UTC), dt.datetime(2026, 11, 28, 18, tzinfo=UTC))
    cases = [  # (logical date, Airflow's data interval, the interval run)
        (h(5), (h(5), h(6)), (h(5), h(6))),  # scheduled or backfill
        (h(5), now_interval, (h(5), h(6))),  # `airflow dags trigger --logical-date 05:00` (CLI)
        (h(5), (h(4), h(5)), (h(5), h(6))),  # the same through the REST API
        (h(5, 30), now_interval, (h(4), h(5))),  # not an interval start: the last interval complete at it
        (None, (None, None), (None, None)),  # no logical date: require_interval fails the run
    ]
    for logical, (start, end), expected in cases:
        assert run_interval(timetable, logical, start, end) == expected, (logical, start)
        if logical is None:
            continue
        for task_id in ("land", "apply"):
            op = dag.task_dict[task_id]
            args = list(op.application_args)
            op.render_template_fields({"logical_date": logical, "data_interval_start": start, "data_interval_end": end,
                                       "dag": dag, "run_id": "manual__x",
                                       "params": {k: dag.params[k] for k in dag.params}})
            assert op.application_args[:6] == ["--config", str(path), "--start", expected[0].isoformat(),
                                               "--end", expected[1].isoformat()], (task_id, logical, start)
            op.application_args = args
    # The Python tasks take the same interval: publish announces the named interval's W.
    seen = []
    fake = types.ModuleType("spark.commit.published")
    fake.announcement = lambda config, start, end: seen.append((start, end))
    monkeypatch.setitem(sys.modules, "spark.commit.published", fake)
    with pytest.raises(Exception, match="published no new watermark"):
        dag.task_dict["publish"].python_callable(logical_date=h(5), data_interval_start=now_interval[0],
                                                 data_interval_end=now_interval[1], outlet_events={})
    assert seen == [(h(5), h(6))]


def test_a_bounded_pipeline_keeps_its_maintenance_after_its_end_date(pipelines: Path, tmp_path: Path) -> None:
    body = VALID.format(name="shop", bootstrap="k:9092", topic="t", url=tmp_path, extra="")
    write_pipeline(pipelines, "shop", body + '    end_date = "2024-01-02T00:00:00Z"\n')
    bag = dagbag()
    assert bag.import_errors == {}
    assert bag.dags["tidelake_shop"].timetable.end == dt.datetime(2024, 1, 2, tzinfo=UTC)  # the pipeline's intervals stop
    maintenance = bag.dags["tidelake-maintenance-shop"]
    (task,) = maintenance.tasks
    assert maintenance.end_date is None and task.end_date is None  # a run after it still has its task
    # Its start is a default argument, which `airflow dags trigger` checks a logical date against.
    assert maintenance.default_args["start_date"] == maintenance.start_date == T0


def test_the_pipelines_bounds_are_its_timetables_so_every_run_has_its_tasks(pipelines: Path, tmp_path: Path) -> None:
    """Airflow gives a run outside the DAG's or a task's start_date/end_date no tasks (it "succeeds" doing nothing):
    the bounds live in the timetable; the scheduler and backfills stay inside them, serialized and back."""
    from airflow.serialization.serialized_objects import DagSerialization
    from airflow.timetables.base import TimeRestriction

    from spark.jobs.airflow_plugin import PipelineTimetable

    body = VALID.format(name="shop", bootstrap="k:9092", topic="t", url=tmp_path, extra="")
    write_pipeline(pipelines, "shop", body.replace("retries = 0", "retries = 0\n    catchup = true")
                   + '    end_date = "2024-01-01T03:00:00Z"\n')
    bag = dagbag()
    assert bag.import_errors == {} and "config-error" not in bag.dags["tidelake_shop"].tags
    dag = bag.dags["tidelake_shop"]
    assert dag.end_date is None and all(t.end_date is None for t in dag.tasks)
    # The start is also the DAG's default start_date: `airflow dags trigger` refuses a logical date before it.
    assert dag.default_args["start_date"] == dag.start_date == T0 == dag.timetable.start
    scheduler_side = DagSerialization.from_dict(DagSerialization.to_dict(dag))  # what the scheduler reads
    timetable = scheduler_side.timetable
    assert isinstance(timetable, PipelineTimetable) and timetable == dag.timetable
    assert all(t.end_date is None for t in scheduler_side.tasks)

    def intervals(restriction: TimeRestriction) -> list[tuple[int, int]]:
        found, last = [], None
        while (info := timetable.next_dagrun_info(last_automated_data_interval=last, restriction=restriction)) is not None:
            last = info.data_interval
            found.append((last.start.hour, last.end.hour))
            assert len(found) < 10
        return found

    # The scheduler (no DAG dates: no restriction) with catch-up: 00:00..03:00, nothing ending after end_date.
    assert intervals(TimeRestriction(None, None, catchup=True)) == [(0, 1), (1, 2), (2, 3)]
    # A backfill over 01:00..05:00 (interval starts): the bounds hold there too.
    assert intervals(TimeRestriction(T0.replace(hour=1), T0.replace(hour=5), catchup=True)) == [(1, 2), (2, 3)]
    assert "until 2024-01-01T03:00:00" in timetable.summary


def test_a_run_outside_the_pipelines_bounds_fails_at_once_saying_why(pipelines: Path, tmp_path: Path, airflow_db: Path) -> None:
    """A trigger whose logical date names an interval after end_date: the run has its tasks (Airflow alone would
    give it none); the first fails, without retries, saying why and what to do."""
    from airflow.sdk.exceptions import AirflowFailException

    from dags.tidelake_pipelines import require_interval

    name = f"bounded{uuid.uuid4().hex[:6]}"
    path = write_pipeline(pipelines, name, VALID.format(name=name, bootstrap="k:9092", topic="t", url=tmp_path, extra="")
                          .replace("retries = 0", "retries = 3") + '    end_date = "2024-01-01T03:00:00Z"\n')
    dag = dagbag().dags[f"tidelake_{name}"]
    first = dag.partial_subset(task_ids=["snapshot_offsets"], include_upstream=False)
    logical = dt.datetime(2024, 1, 1, 5, tzinfo=UTC)  # after end_date
    run = first.test(logical_date=logical)
    ti = run.get_task_instance("snapshot_offsets")
    assert ti is not None, "the run has no task (Airflow's task end_date filter)"
    assert str(ti.state).rsplit(".", 1)[-1].lower() == "failed" and ti.try_number == 1
    config = __import__("spark.config", fromlist=["x"]).load_pipeline_config(str(path))
    with pytest.raises(AirflowFailException) as raised:
        require_interval(dag.dag_id, logical, logical + dt.timedelta(hours=1), config, path, logical)
    assert str(raised.value) == (
        f"tidelake_{name}: this run's data interval 2024-01-01T05:00:00+00:00..2024-01-01T06:00:00+00:00 ends after the "
        f"pipeline's end_date 2024-01-01T03:00:00+00:00 ({path}: schedule.end_date), and no interval of the pipeline does. "
        f"To run intervals after it, move end_date in the file, then clear this run: airflow tasks clear tidelake_{name} "
        "--start-date 2024-01-01T05:00:00+00:00 --end-date 2024-01-01T05:00:00+00:00 --yes (docs/operating.md)")
    # The pipeline's own intervals pass; one starting before start_date does not.
    require_interval(dag.dag_id, T0.replace(hour=2), T0.replace(hour=3), config, path)
    with pytest.raises(AirflowFailException, match="starts before the pipeline's start_date 2024-01-01T00:00:00"):
        require_interval(dag.dag_id, T0 - dt.timedelta(hours=1), T0, config, path)


def test_a_broken_file_stays_with_its_pipeline_and_the_others_keep_loading(pipelines: Path, tmp_path: Path) -> None:
    write_pipeline(pipelines, "shop", VALID.format(name="shop", bootstrap="k:9092", topic="t", url=tmp_path, extra=""))
    bad = write_pipeline(pipelines, "broken", VALID.format(name="broken", bootstrap="k:9092", topic="t", url=tmp_path, extra="")
                         .replace('protocol = "canal-json"', 'protocol = "canal-xml"'))
    write_pipeline(pipelines, "crm", VALID.format(name="crm", bootstrap="k:9092", topic="c", url=tmp_path, extra=""))
    bag = dagbag()
    assert bag.import_errors == {}
    assert sorted(bag.dags) == ["tidelake-maintenance-broken", "tidelake-maintenance-crm", "tidelake-maintenance-shop",
                                "tidelake_broken", "tidelake_crm", "tidelake_shop"]
    for good in ("tidelake_crm", "tidelake_shop"):
        assert {t.task_id for t in bag.dags[good].tasks} == {"snapshot_offsets", "confirm_if_done", "land", "apply", "publish"}
        assert "config-error" not in bag.dags[good].tags
    stand_in = bag.dags["tidelake_broken"]
    expected = f"{bad}: topics[0].protocol: expected one of"
    assert stand_in.description.startswith(f"CONFIG ERROR: {expected}") and "found 'canal-xml'" in stand_in.description
    assert expected in stand_in.doc_md
    assert set(stand_in.tags) == {"tidelake", "config-error"}
    assert stand_in.schedule is None and type(stand_in.timetable).__name__ == "NullTimetable"  # it takes no interval
    maintenance = bag.dags["tidelake-maintenance-broken"]
    assert maintenance.description == stand_in.description and set(maintenance.tags) == {"tidelake", "config-error"}
    assert maintenance.schedule is None


def test_a_stand_in_keeps_its_pipelines_tasks_and_waits_for_the_file(pipelines: Path, tmp_path: Path,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    """A run in flight when its file broke keeps its tasks (none removed, none added): each waits for the fix."""
    from airflow.sdk import BaseSensorOperator

    from dags.tidelake_pipelines import MAINTENANCE_TASK_IDS, PIPELINE_TASK_IDS, STAND_IN_POKE, STAND_IN_WAIT

    good = write_pipeline(pipelines, "shop", VALID.format(name="shop", bootstrap="k:9092", topic="t", url=tmp_path, extra=""))
    valid = dagbag().dags
    order = {dag_id: [t.task_id for t in valid[dag_id].topological_sort()] for dag_id in ("tidelake_shop", "tidelake-maintenance-shop")}
    assert order == {"tidelake_shop": list(PIPELINE_TASK_IDS), "tidelake-maintenance-shop": list(MAINTENANCE_TASK_IDS)}

    good.write_text(good.read_text().replace('protocol = "canal-json"', 'protocol = "canal-jsn"'))  # a typo
    bag = dagbag()
    assert bag.import_errors == {}
    for dag_id, tasks in order.items():
        stand_in = bag.dags[dag_id]
        assert "config-error" in stand_in.tags
        assert [t.task_id for t in stand_in.topological_sort()] == tasks
        for real, waiting in zip(valid[dag_id].topological_sort(), stand_in.topological_sort(), strict=True):
            assert waiting.upstream_task_ids == real.upstream_task_ids
            assert isinstance(waiting, BaseSensorOperator) and waiting.mode == "reschedule" and waiting.retries == 0
            assert waiting.timeout == STAND_IN_WAIT.total_seconds()
            # A pipeline task that failed on the broken file retries while the stand-in is the DAG: after one poke.
            assert waiting.retry_delay == STAND_IN_POKE
    apply = bag.dags["tidelake_shop"].task_dict["apply"]
    caplog.clear()
    assert apply.poke({}) is False  # never success: the pipeline's own apply has not run
    (logged,) = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert logged.startswith(f"tidelake pipeline file {good} is invalid: {good}: topics[0].protocol: expected one of")
    assert "apply waits for it to be fixed" in logged


def test_unreadable_and_duplicate_files_get_stand_ins_named_after_the_file(pipelines: Path, tmp_path: Path) -> None:
    write_pipeline(pipelines, "shop", VALID.format(name="shop", bootstrap="k:9092", topic="t", url=tmp_path, extra=""))
    (pipelines / "garbled.toml").write_text('name = "garbled\n')
    write_pipeline(pipelines, "shop_copy", VALID.format(name="shop", bootstrap="k:9092", topic="t", url=tmp_path, extra=""))
    write_pipeline(pipelines, "bad_cron", VALID.format(name="cronned", bootstrap="k:9092", topic="t", url=tmp_path, extra="")
                   .replace('cron = "0 * * * *"', 'cron = "99 * * * *"'))
    bag = dagbag()
    assert bag.import_errors == {}
    assert sorted(bag.dags) == ["tidelake-maintenance-cronned", "tidelake-maintenance-garbled", "tidelake-maintenance-shop",
                                "tidelake-maintenance-shop_copy", "tidelake_cronned", "tidelake_garbled", "tidelake_shop",
                                "tidelake_shop_copy"]
    assert "config-error" not in bag.dags["tidelake_shop"].tags
    assert bag.dags["tidelake_garbled"].description.startswith(f"CONFIG ERROR: {pipelines / 'garbled.toml'}: not valid TOML")
    assert bag.dags["tidelake_shop_copy"].description.startswith(
        f"CONFIG ERROR: {pipelines / 'shop_copy.toml'}: name: 'shop' is already the name of {pipelines / 'shop.toml'} "
        "(named after the file, its pipeline name being unreadable or taken: ")
    assert bag.dags["tidelake_cronned"].description == (
        f"CONFIG ERROR: {pipelines / 'bad_cron.toml'}: schedule.cron: expected a valid cron expression such as '0 * * * *', "
        "found '99 * * * *'")


def test_a_file_with_a_syntax_error_keeps_its_pipelines_dag_ids(pipelines: Path, tmp_path: Path) -> None:
    """Stand-ins under the ids the fixed file will have: Airflow lists every DAG id it saw (stale) until deleted."""
    good = VALID.format(name="shop-eu", bootstrap="k:9092", topic="t", url=tmp_path, extra="")
    write_pipeline(pipelines, "pipeline", good.replace("[kafka]", "[kafka"))  # a TOML syntax error after the name
    (pipelines / "other.json").write_text('{"topics": [{"name": "t"}], "name": "crm", "kafka": ')
    (pipelines / "noname.yaml").write_text("kafka: [\n")
    bag = dagbag()
    assert bag.import_errors == {}
    assert sorted(bag.dags) == ["tidelake-maintenance-crm", "tidelake-maintenance-noname", "tidelake-maintenance-shop-eu",
                                "tidelake_crm", "tidelake_noname", "tidelake_shop-eu"]
    assert bag.dags["tidelake_shop-eu"].description.startswith(f"CONFIG ERROR: {pipelines / 'pipeline.toml'}: not valid TOML")
    assert "named after the file" not in bag.dags["tidelake_shop-eu"].description
    # Named after the file: the stand-in says how to remove it if the fixed file names another pipeline.
    assert bag.dags["tidelake_noname"].description.endswith(
        "(named after the file, its pipeline name being unreadable or taken: if the fixed file names another pipeline, delete "
        "these stand-ins: airflow dags delete tidelake_noname --yes; airflow dags delete tidelake-maintenance-noname --yes)")
    write_pipeline(pipelines, "pipeline", good)
    assert "tidelake_shop-eu" in dagbag().dags and "tidelake_pipeline" not in dagbag().dags


def test_execution_timeout_and_pool_come_from_the_schedule_section(pipelines: Path, tmp_path: Path) -> None:
    write_pipeline(pipelines, "shop", VALID.format(name="shop", bootstrap="k:9092", topic="t", url=tmp_path, extra="")
                   + '    execution_timeout = "1h30m"\n    pool = "tidelake_spark"\n')
    write_pipeline(pipelines, "crm", VALID.format(name="crm", bootstrap="k:9092", topic="c", url=tmp_path, extra=""))
    write_pipeline(pipelines, "open", VALID.format(name="open", bootstrap="k:9092", topic="c", url=tmp_path, extra="")
                   + '    execution_timeout = "none"\n')
    bag = dagbag()
    for task in bag.dags["tidelake_shop"].tasks:
        assert (task.execution_timeout, task.pool) == (dt.timedelta(hours=1, minutes=30), "tidelake_spark"), task.task_id
    for task in bag.dags["tidelake_crm"].tasks:
        assert (task.execution_timeout, task.pool) == (dt.timedelta(hours=1), "default_pool"), task.task_id
    assert {t.execution_timeout for t in bag.dags["tidelake_open"].tasks} == {None}


def test_a_run_without_a_data_interval_fails_at_once_saying_what_to_do(pipelines: Path, tmp_path: Path) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    write_pipeline(pipelines, "shop", VALID.format(name="shop", bootstrap="k:9092", topic="t", url=tmp_path, extra=""))
    snapshot = dagbag().dags["tidelake_shop"].task_dict["snapshot_offsets"]
    # What `airflow dags trigger tidelake_shop` (no --logical-date) puts in the context.
    with pytest.raises(AirflowFailException) as raised:
        snapshot.python_callable(data_interval_start=None, data_interval_end=None)
    message = str(raised.value)
    assert message.startswith("tidelake_shop: this run has no data interval (it was triggered without a logical date)")
    assert ("To run one interval: airflow dags trigger tidelake_shop --logical-date <its start>; "
            "to run given intervals: airflow backfill create --dag-id tidelake_shop --from-date <first interval start> "
            "--to-date <last interval start>; to run the last complete interval now: airflow dags trigger tidelake_shop "
            "--logical-date <now, e.g. $(date -u +%Y-%m-%dT%H:%M:%SZ)> (docs/operating.md)") in message


@pytest.mark.slow
def test_dag_test_runs_the_pipeline_on_s3_and_postgres(pipelines: Path, airflow_db: Path, kafka, make_topic, s3, bucket) -> None:
    """dag.test() of two intervals: Kafka (noida-db) -> SeaweedFS archive -> Iceberg via a PostgreSQL catalog."""
    import uuid

    from confluent_kafka import Producer

    from cdc_codecs import get_encoder
    from spark.demo.workload import Workload, WorkloadSpec
    from spark.config import load_pipeline_config
    from spark.query.read import published_watermarks, read_pipeline
    from tests.spark.archives import normalise, oracle_rows

    topic = make_topic(2)
    t0 = dt.datetime(2024, 1, 1, tzinfo=UTC)
    spec = WorkloadSpec(tables=2, events=120, seed=5, watermark_every=10, start_ms=int(t0.timestamp() * 1000), spacing_ms=45_000)
    history = list(Workload(spec).events())
    records = get_encoder("canal-json").encode_all(history, 2)
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    for i, r in enumerate(records):
        producer.produce(topic, key=r.key, value=r.value, partition=r.partition, timestamp=int(t0.timestamp() * 1000) + i * 7_200_000 // len(records))
    assert producer.flush(30) == 0
    name = f"dagtest{uuid.uuid4().hex[:6]}"
    extra = f"""
    [catalog]
    namespace = "{name}"
    properties = {{ uri = "postgresql+psycopg2://root@127.0.0.1:5432/test" }}
    """
    path = write_pipeline(pipelines, name, VALID.format(name=name, bootstrap=kafka.bootstrap, topic=topic, url=f"s3://{bucket}/lake", extra=extra)
                          .replace('url = "s3', f'endpoint_url = "{s3.endpoint}"\n    access_key_id = "{s3.access_key}"\n    secret_access_key = "{s3.secret_key}"\n    url = "s3'))
    dag = dagbag().dags[f"tidelake_{name}"]
    for hour in range(2):
        # A run with logical date X covers the interval starting at X, as a scheduled run listed under X does
        # (dag.test, like Airflow's REST API, stores the interval ending at X on it: run_interval).
        run = dag.test(logical_date=t0 + dt.timedelta(hours=hour))
        assert str(run.state).endswith("success"), run.state
    config = load_pipeline_config(str(path))
    marks = published_watermarks(config)
    assert len(marks) == 2
    # Every message was produced inside the two hours, so the last W covers the whole history.
    oracle = oracle_from_records("canal-json", topic, records, 2)
    w = marks[-1]
    assert oracle.cut([(topic, 0), (topic, 1)]) == w
    _, tables = read_pipeline(config, w)
    assert {k: normalise(v.to_pylist()) for k, v in tables.items()} == {k: oracle_rows(oracle, k) for k in oracle.tables}
    # Each publish emitted an Asset event carrying its watermark, for downstream DAGs.
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        events = (session.query(AssetEvent).join(AssetModel, AssetEvent.asset_id == AssetModel.id)
                  .filter(AssetModel.uri == f"tidelake://{name}/watermark").order_by(AssetEvent.timestamp).all())
        assert [e.extra["watermark"] for e in events] == marks
        assert [e.extra["interval_end"] for e in events] == [(t0 + dt.timedelta(hours=h)).isoformat() for h in (1, 2)]


# ------------------------------------------------------------------ Asset events

W1, W2, W3 = 447656165965824001, 447656165965824002 + (1 << 18), 447656165965824003 + (2 << 18)  # above 2**53


@dataclass(frozen=True)
class Announcement:
    """The lead's ``spark.commit.published.Announcement`` contract."""

    watermark: int
    repair: bool
    repaired_from: int | None
    interval_end: dt.datetime
    previous_watermark: int = 0
    caught_up: tuple = ()


@pytest.fixture
def announcements(monkeypatch: pytest.MonkeyPatch) -> list:
    """A ``spark.commit.published`` whose ``announcement()`` answers from this list, in order, recording its calls."""
    answers: list = []
    calls: list = []

    def announcement(config, interval_start, interval_end):
        calls.append((config.name, interval_start, interval_end))
        return answers.pop(0)

    fake = types.ModuleType("spark.commit.published")
    fake.Announcement = Announcement
    fake.announcement = announcement
    fake.calls = calls
    monkeypatch.setitem(sys.modules, "spark.commit.published", fake)
    return answers


def test_publish_sends_the_watermark_as_int_and_string_and_skips_when_nothing_is_new(
        pipelines: Path, tmp_path: Path, announcements: list) -> None:
    from airflow.sdk.exceptions import AirflowSkipException
    from airflow.sdk.execution_time.context import OutletEventAccessors

    write_pipeline(pipelines, "shop", VALID.format(name="shop", bootstrap="k:9092", topic="t", url=tmp_path, extra=""))
    publish = dagbag().dags["tidelake_shop"].task_dict["publish"]
    (asset,) = publish.outlets
    start, end = T0, T0 + dt.timedelta(hours=1)

    announcements.append(Announcement(W1, False, None, end))
    events = OutletEventAccessors()
    returned = publish.python_callable(data_interval_start=start, data_interval_end=end, outlet_events=events)
    extra = {"pipeline": "shop", "watermark": W1, "watermark_str": "447656165965824001",
             "previous_watermark": 0, "previous_watermark_str": "0",
             "interval_end": "2024-01-01T01:00:00+00:00", "repair": False, "repaired_from": None, "repaired_from_str": None,
             "caught_up": []}
    assert events[asset].extra == extra and returned == extra
    assert W1 > 2**53 and float(W1) != W1  # what a JavaScript number would lose
    assert sys.modules["spark.commit.published"].calls == [("shop", start, end)]

    announcements.append(Announcement(W3, True, W2, end, W2))
    events = OutletEventAccessors()
    publish.python_callable(data_interval_start=start, data_interval_end=end, outlet_events=events)
    assert events[asset].extra == {**extra, "watermark": W3, "watermark_str": str(W3), "repair": True,
                                   "repaired_from": W2, "repaired_from_str": str(W2),
                                   "previous_watermark": W2, "previous_watermark_str": str(W2)}

    # A table isolated while earlier Ws were announced, caught up since: its held W travels as a string too.
    announcements.append(Announcement(W3, False, None, end, W2, ({"database": "shop", "table": "a", "held_at": W1,
                                                                   "released_at": W2},)))
    events = OutletEventAccessors()
    publish.python_callable(data_interval_start=start, data_interval_end=end, outlet_events=events)
    assert events[asset].extra["caught_up"] == [{"database": "shop", "table": "a", "from_watermark": W1,
                                                 "from_watermark_str": str(W1)}]

    announcements.append(None)
    with pytest.raises(AirflowSkipException, match="published no new watermark"):
        publish.python_callable(data_interval_start=start, data_interval_end=end, outlet_events=OutletEventAccessors())


def test_asset_events_come_only_from_announcements_in_a_real_task_run(
        pipelines: Path, tmp_path: Path, airflow_db: Path, announcements: list) -> None:
    """dag.test() of the publish task: the task runner stores an AssetEvent on success and none on a skip."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    name = f"events{uuid.uuid4().hex[:6]}"
    write_pipeline(pipelines, name, VALID.format(name=name, bootstrap="k:9092", topic="t", url=tmp_path, extra=""))
    publish_only = dagbag().dags[f"tidelake_{name}"].partial_subset(task_ids=["publish"], include_upstream=False)
    hours = [T0 + dt.timedelta(hours=h) for h in range(1, 5)]
    # A first run, a new W, a rerun that confirmed an announced W, then a repair up to a new W.
    announcements.extend([Announcement(W1, False, None, hours[0]), Announcement(W2, False, None, hours[1]), None,
                          Announcement(W3, True, W2, hours[3])])
    states = [str(publish_only.test(logical_date=h).get_task_instance("publish").state) for h in hours]
    assert [s.rsplit(".", 1)[-1].lower() for s in states] == ["success", "success", "skipped", "success"]
    with create_session() as session:
        events = (session.query(AssetEvent).join(AssetModel, AssetEvent.asset_id == AssetModel.id)
                  .filter(AssetModel.uri == f"tidelake://{name}/watermark").order_by(AssetEvent.id).all())
        got = [(e.extra["watermark_str"], e.extra["repair"], e.extra["repaired_from_str"]) for e in events]
    assert got == [(str(W1), False, None), (str(W2), False, None), (str(W3), True, str(W2))]


def test_a_manual_run_without_logical_date_fails_in_its_first_task(pipelines: Path, tmp_path: Path, airflow_db: Path) -> None:
    """dag.test(logical_date=None) creates the run `airflow dags trigger` without --logical-date creates."""
    name = f"manual{uuid.uuid4().hex[:6]}"
    write_pipeline(pipelines, name, VALID.format(name=name, bootstrap="k:9092", topic="t", url=tmp_path, extra="")
                   .replace("retries = 0", "retries = 3"))
    first = dagbag().dags[f"tidelake_{name}"].partial_subset(task_ids=["snapshot_offsets"], include_upstream=False)
    run = first.test(logical_date=None)
    assert run.data_interval_start is None and run.data_interval_end is None
    ti = run.get_task_instance("snapshot_offsets")
    assert str(ti.state).rsplit(".", 1)[-1].lower() == "failed"
    assert ti.try_number == 1  # AirflowFailException: no retry of a run that cannot succeed


def test_a_broken_file_is_logged_by_the_dag_processor_not_in_other_pipelines_task_logs(
        pipelines: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from dags.tidelake_pipelines import load_dags

    write_pipeline(pipelines, "shop", VALID.format(name="shop", bootstrap="k:9092", topic="t", url=tmp_path, extra=""))
    (pipelines / "garbled.toml").write_text('name = "garbled\n')
    for parsing_for, logged in ((None, True), ("tidelake_garbled", True), ("tidelake-maintenance-garbled", True),
                                ("tidelake_shop", False)):
        caplog.clear()
        assert sorted(load_dags(pipelines, parsing_for)) == ["tidelake-maintenance-garbled", "tidelake-maintenance-shop",
                                                             "tidelake_garbled", "tidelake_shop"]
        errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
        assert errors == ([f"tidelake pipeline file is invalid, its DAGs tidelake_garbled and tidelake-maintenance-garbled are "
                           f"stand-ins: {pipelines / 'garbled.toml'}: "
                           "not valid TOML: Illegal character '\\n' (at line 1, column 16)"] if logged else []), parsing_for


def test_an_interval_that_is_done_skips_land_apply_and_publish(pipelines: Path, tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """The short-circuit before land: a done interval (spark.commit.apply.confirm_if_done) costs no spark-submit."""
    import datetime as dt

    from spark.commit.apply import ApplyResult

    write_pipeline(pipelines, "shop", VALID.format(name="shop", bootstrap="k:9092", topic="t", url=tmp_path, extra=""))
    task = dagbag().dags["tidelake_shop"].task_dict["confirm_if_done"]
    start, end = dt.datetime(2024, 1, 1, tzinfo=dt.UTC), dt.datetime(2024, 1, 1, 1, tzinfo=dt.UTC)
    report = {"pipeline": "shop", "outcome": "confirmed", "watermark": 0, "previous_watermark": 0,
              "interval": {"start": start.isoformat(), "end": end.isoformat()}, "note": "already published"}
    answers = iter([None, ApplyResult(0, 0, [], report)])
    monkeypatch.setattr("spark.commit.apply.confirm_if_done", lambda config, s, e: next(answers))
    assert task.python_callable(data_interval_start=start, data_interval_end=end) is True  # work to do: go on
    assert task.python_callable(data_interval_start=start, data_interval_end=end) is False  # done: skip the rest
    assert task.ignore_downstream_trigger_rules


def test_without_tidelakes_airflow_plugin_a_pipeline_is_a_stand_in_saying_so(pipelines: Path, tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Airflow serializes the pipeline's timetable only if the plugin registers it: found at parse time, for this
    pipeline alone, not as an import error of the module later (which would stop every pipeline)."""
    import airflow.plugins_manager

    from dags.tidelake_pipelines import load_dags

    path = write_pipeline(pipelines, "shop", VALID.format(name="shop", bootstrap="k:9092", topic="t", url=tmp_path, extra=""))
    assert "config-error" not in load_dags(pipelines)["tidelake_shop"].tags
    monkeypatch.setattr(airflow.plugins_manager, "get_timetables_plugins", lambda: {})  # tidelake not installed
    stand_in = load_dags(pipelines)["tidelake_shop"]
    assert "config-error" in stand_in.tags
    assert stand_in.description.startswith(f"CONFIG ERROR: {path}: schedule: the DAG's timetable PipelineTimetable cannot "
                                           "be serialized")
    assert "install tidelake in the environment of the dag-processor, scheduler and api-server" in stand_in.description
