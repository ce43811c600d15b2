"""The real Airflow: api-server, scheduler and dag-processor run scheduled intervals, then a backfill.

Metadata in a fresh PostgreSQL database (LocalExecutor), Kafka from noida-db, the archive
and the SQLite catalog in local files. Each Airflow component is started as its own
process and stopped by PID (they stop cleanly on TERM; ``airflow standalone`` does not).
Beside the pipeline's DAGs runs the downstream DAG of docs/operating.md (the very code block),
scheduled on the pipeline's Asset: it exports each new W's changes since the W before it.
"""

from __future__ import annotations

from tests.spark.archives import oracle_from_records

import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg2
import pyarrow.parquet as pq
import pytest
from confluent_kafka import Producer

from cdc_codecs import SourcePosition, Watermark, get_encoder
from spark.demo.workload import Workload, WorkloadSpec
from spark.config import load_pipeline_config
from spark.runtime.embedded import free_port, start_process_group, stop_process_group
from spark.query.changes import read_changes
from spark.query.read import published_watermarks, read_pipeline
from tests.spark.archives import normalise, oracle_rows

from .conftest import AIRFLOW_ENV

pytestmark = pytest.mark.slow
UTC = dt.timezone.utc
T0 = dt.datetime(2024, 1, 1, tzinfo=UTC)
AIRFLOW = str(Path(sys.executable).parent / "airflow")


def wait_for(what: str, check, progress, stall: float = 300.0, every: float = 2.0):
    """Poll ``check`` until it returns something truthy, for as long as ``progress()`` keeps changing.

    Fails only when nothing moved for ``stall`` seconds -- no task changed state, no try was
    rescheduled, no running task heartbeat, no DAG version parsed -- so a loaded machine that
    runs slower but runs is never failed, and a stuck scheduler fails in minutes.
    """
    seen, since, last = progress(), time.monotonic(), None
    while True:
        last = check()
        if last:
            return last
        now = progress()
        if now != seen:
            seen, since = now, time.monotonic()
        elif time.monotonic() - since > stall:
            raise AssertionError(f"no progress for {stall:.0f} s waiting for {what} (last: {last!r}; state: {now!r})")
        time.sleep(every)


def scheduler_progress(db: str):
    """What moves while Airflow works: task states and tries, reschedules, task heartbeats, runs, DAG versions."""
    with psycopg2.connect(host="127.0.0.1", port=5432, user="root", dbname=db) as conn, conn.cursor() as cur:
        cur.execute("SELECT dag_id, run_id, task_id, state, try_number FROM task_instance ORDER BY 1, 2, 3")
        tasks = cur.fetchall()
        cur.execute("SELECT count(*), max(last_heartbeat_at) FROM task_instance")
        beats = cur.fetchone()
        cur.execute("SELECT count(*) FROM task_reschedule")
        reschedules = cur.fetchone()
        cur.execute("SELECT dag_id, run_id, state FROM dag_run ORDER BY 1, 2")
        runs = cur.fetchall()
        cur.execute("SELECT count(*) FROM dag_version")
        versions = cur.fetchone()
    return tasks, beats, reschedules, runs, versions


def task_tries(db: str, dag_id: str, run_id: str) -> dict[str, int]:
    with psycopg2.connect(host="127.0.0.1", port=5432, user="root", dbname=db) as conn, conn.cursor() as cur:
        cur.execute("SELECT task_id, try_number FROM task_instance WHERE dag_id = %s AND run_id = %s", (dag_id, run_id))
        return dict(cur.fetchall())


def dag_run(db: str, dag_id: str, logical_date: dt.datetime) -> dict[str, str] | None:
    """The DAG run of ``logical_date`` (its ``run_id`` and ``state``), read from the database (fast, unlike the CLI)."""
    with psycopg2.connect(host="127.0.0.1", port=5432, user="root", dbname=db) as conn, conn.cursor() as cur:
        cur.execute("SELECT run_id, state FROM dag_run WHERE dag_id = %s AND logical_date = %s", (dag_id, logical_date))
        row = cur.fetchone()
        return {"run_id": row[0], "state": row[1]} if row else None


def task_states(db: str, dag_id: str, run_id: str) -> dict[str, str | None]:
    with psycopg2.connect(host="127.0.0.1", port=5432, user="root", dbname=db) as conn, conn.cursor() as cur:
        cur.execute("SELECT task_id, state FROM task_instance WHERE dag_id = %s AND run_id = %s", (dag_id, run_id))
        return dict(cur.fetchall())


def json_out(done: subprocess.CompletedProcess):
    """The JSON an Airflow CLI command printed (it may print log lines before it)."""
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(("[", "{")):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


def asset_events(db: str, uri: str) -> list[dict]:
    """The Asset events' extras in the order Airflow stored them."""
    with psycopg2.connect(host="127.0.0.1", port=5432, user="root", dbname=db) as conn, conn.cursor() as cur:
        cur.execute("SELECT e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id WHERE a.uri = %s ORDER BY e.id", (uri,))
        return [row[0] if isinstance(row[0], dict) else json.loads(row[0]) for row in cur.fetchall()]


REPO = Path(__file__).resolve().parents[2]


def downstream_dag(pipeline: str, pipeline_file: Path, out: Path) -> str:
    """The downstream DAG of docs/operating.md, for ``pipeline``: its Python block, as written there."""
    text = (REPO / "docs" / "operating.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "def shop_changes" in b)
    block = block.replace("tidelake://shop/", f"tidelake://{pipeline}/")
    block = re.sub(r'^PIPELINE_FILE = .*$', f"PIPELINE_FILE = {str(pipeline_file)!r}", block, flags=re.M)
    return re.sub(r'^OUT = .*$', f"OUT = {str(out)!r}", block, flags=re.M)


def exported_windows(out: Path) -> list[dict]:
    """The manifests the downstream DAG wrote, in window order."""
    return [json.loads(p.read_text()) for p in sorted(out.glob("*/manifest.json"))]


def airflow_env(tmp_path: Path, pipelines: Path, extra: dict[str, str] | None = None) -> tuple[str, Any, dict[str, str]]:
    """A new Postgres database for an Airflow (LocalExecutor) whose home is tmp_path/airflow, its DAGs
    in tmp_path/dags and tidelake's pipeline files in ``pipelines``; ``extra`` is added to its
    environment. Returns the database's name, the connection that made it (``stop_airflow`` drops
    it) and the environment of Airflow's processes (its API on a free port)."""
    db = f"airflow_{uuid.uuid4().hex[:8]}"
    admin = psycopg2.connect(host="127.0.0.1", port=5432, user="root", dbname="test")
    admin.autocommit = True
    admin.cursor().execute(f"CREATE DATABASE {db}")
    env = {
        **os.environ,
        **AIRFLOW_ENV,
        "AIRFLOW_HOME": str(tmp_path / "airflow"),
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"postgresql+psycopg2://root@127.0.0.1:5432/{db}",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        # The DAG file reads the pipeline files: re-parse it often, so an edit shows within seconds.
        "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "5",
        "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
        "TIDELAKE_PIPELINES": str(pipelines),
        "AIRFLOW__CORE__DAGS_FOLDER": str(tmp_path / "dags"),
        **(extra or {}),
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{free_port()}",
    }
    return db, admin, env


def start_airflow(tmp_path: Path, env: dict[str, str], db: str, procs: list, pipeline: str, pipeline_file: Path,
                  exports: Path) -> Callable[..., subprocess.CompletedProcess]:
    """Airflow on ``env`` (``airflow_env``), its DAG folder holding tidelake's DAG file and a downstream
    DAG scheduled on pipeline ``pipeline``'s Asset (exporting to ``exports``): the database migrated,
    the API server, scheduler and DAG processor started (appended to ``procs``), both DAGs parsed
    and unpaused. Returns the Airflow CLI."""
    (tmp_path / "dags").mkdir()
    shutil.copy(REPO / "dags" / "tidelake_pipelines.py", tmp_path / "dags")
    (tmp_path / "dags" / "shop_changes.py").write_text(downstream_dag(pipeline, pipeline_file, exports))
    subprocess.run([AIRFLOW, "db", "migrate"], env=env, check=True, capture_output=True, timeout=600)
    api_port = env["AIRFLOW__API__BASE_URL"].rsplit(":", 1)[1]  # the free port airflow_env chose
    for component in (["api-server", "--port", api_port], ["scheduler"], ["dag-processor"]):
        # Each in its own process group: the scheduler's serve-logs child must stop with it.
        procs.append(start_process_group([AIRFLOW, *component], tmp_path / f"{component[0]}.log", env))

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([AIRFLOW, *args], env=env, capture_output=True, text=True, timeout=120)

    dag_id = f"tidelake_{pipeline}"
    wait_for("the DAGs to be parsed", lambda: {dag_id, "shop_changes"} <= {d["dag_id"] for d in
                                                                       json_out(cli("dags", "list", "-o", "json")) or []},
             lambda: scheduler_progress(db))
    assert cli("dags", "unpause", "shop_changes").returncode == 0  # first: it hears every event
    assert cli("dags", "unpause", dag_id).returncode == 0
    return cli


def stop_airflow(procs: list, admin: Any, db: str) -> None:
    """Stop what ``start_airflow`` started and drop the database ``airflow_env`` made."""
    for p in procs:
        stop_process_group(p)
    admin.cursor().execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
    admin.close()


@pytest.mark.mirror_e2e  # kept apart for time (9 min on session 29's host): make test-e2e
def test_scheduled_intervals_then_a_backfill(kafka, make_topic, tmp_path: Path) -> None:
    home, pipelines = tmp_path / "airflow", tmp_path / "pipelines"  # home: airflow_env's AIRFLOW_HOME
    pipelines.mkdir()
    db, admin, env = airflow_env(tmp_path, pipelines)

    topic = make_topic(2)
    spec = WorkloadSpec(tables=2, events=120, seed=21, watermark_every=10, start_ms=int(T0.timestamp() * 1000), spacing_ms=60_000)
    records = get_encoder("open-protocol").encode_all(list(Workload(spec).events()), 2)
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    for i, r in enumerate(records):
        # Four hours of changes: three scheduled intervals first, the fourth after a backfill.
        producer.produce(topic, key=r.key, value=r.value, partition=r.partition, timestamp=int(T0.timestamp() * 1000) + i * 14_400_000 // len(records))
    assert producer.flush(30) == 0
    path = pipelines / "sched.toml"
    path.write_text(
        f'name = "sched"\n[kafka]\nbootstrap_servers = "{kafka.bootstrap}"\n[[topics]]\nname = "{topic}"\n'
        f'protocol = "open-protocol"\n[storage]\nurl = "{tmp_path / "archive"}"\n[schedule]\ncron = "0 * * * *"\n'
        'start_date = "2024-01-01T00:00:00Z"\nend_date = "2024-01-01T03:00:00Z"\ncatchup = true\nretries = 1\n'
    )
    # A broken pipeline file beside the good one: it must not stop the good one's schedule.
    broken = pipelines / "broken.toml"
    broken.write_text(path.read_text().replace('name = "sched"', 'name = "broken"').replace("open-protocol", "canal-xml"))
    # A file named unlike its pipeline, with a TOML syntax error: its stand-ins take the pipeline's ids (read from the
    # text), not the file's, so the fixed file leaves no stale DAG listed.
    typo = pipelines / "typo.toml"
    fixed_typo = (path.read_text().replace('name = "sched"', 'name = "fixme"').replace(str(tmp_path / "archive"), str(tmp_path / "fixme"))
                  .replace("catchup = true", "catchup = false"))
    typo.write_text(fixed_typo.replace("[kafka]", "[kafka"))
    exports = tmp_path / "mart"
    procs = []
    try:
        cli = start_airflow(tmp_path, env, db, procs, "sched", path, exports)
        dag_id = "tidelake_sched"

        def progress():
            return scheduler_progress(db)

        def runs() -> list[dict]:
            # The CLI may print log lines before its JSON: take the line that parses.
            for line in reversed(cli("dags", "list-runs", dag_id, "-o", "json").stdout.splitlines()):
                if line.startswith("["):
                    try:
                        return json.loads(line)
                    except ValueError:
                        continue
            return []

        def all_done(expected: int):
            rs = runs()
            failed = [r for r in rs if r["state"] == "failed"]
            assert not failed, f"runs failed: {failed}; scheduler log tail: {(tmp_path / 'scheduler.log').read_text()[-3000:]}"
            ok = [r for r in rs if r["state"] == "success"]
            return rs if len(ok) >= expected else None

        wait_for("three scheduled runs", lambda: all_done(3), progress)  # beside the downstream DAG's runs
        config = load_pipeline_config(str(path))
        marks = published_watermarks(config)
        assert len(marks) == 3

        # The broken file is a stand-in DAG carrying its error, not an import error of the module.
        listed = {d["dag_id"]: d for d in json_out(cli("dags", "list", "-o", "json"))}
        assert "tidelake_broken" in listed and dag_id in listed
        assert json_out(cli("dags", "list-import-errors", "-o", "json")) in ([], None)
        details = json_out(cli("dags", "details", "tidelake_broken", "-o", "json"))[0]
        assert f"{broken}: topics[0].protocol: expected one of" in details["description"], details
        assert {"tidelake_fixme", "tidelake-maintenance-fixme"} <= set(listed) and "tidelake_typo" not in listed, sorted(listed)
        assert f"{typo}: not valid TOML" in json_out(cli("dags", "details", "tidelake_fixme", "-o", "json"))[0]["description"]
        typo.write_text(fixed_typo)  # fixed: the real pipeline DAG under the same id (new DAGs start paused: no run)

        # One Asset event per new W, the watermark also as an exact string.
        events = asset_events(db, "tidelake://sched/watermark")
        assert [e["watermark"] for e in events] == marks
        assert [e["watermark_str"] for e in events] == [str(w) for w in marks]
        assert [e["previous_watermark_str"] for e in events] == [str(w) for w in [0, *marks[:-1]]]
        assert {e["repair"] for e in events} == {False}
        # The downstream DAG exported each new W's changes since the W before it.
        windows = wait_for("the downstream DAG's exports", lambda: len(exported_windows(exports)) == 3 and exported_windows(exports), progress)
        assert [(m["from_watermark"], m["to_watermark"]) for m in windows] == list(zip([0, *marks[:-1]], marks))

        def heads() -> dict:
            """What a reader of each table's main sees: its watermark and rows."""
            from spark.tables import catalog as cat
            from spark.tables.properties import table_watermark

            return {cat.upstream_name(t): (table_watermark(t), normalise(t.scan().to_arrow().to_pylist()))
                    for t in cat.pipeline_tables(cat.open_catalog(config), config)}

        tags_before = {w: {k: normalise(v.to_pylist()) for k, v in read_pipeline(config, w)[1].items()} for w in marks}
        main_before = heads()
        assert {w for w, _ in main_before.values()} == {marks[-1]}

        # Backfill the middle interval (01:00) while later ones are done. --from-date/--to-date
        # select interval *starts*, inclusive (and the backfill ignores the DAG's end_date).
        created = cli("backfill", "create", "--dag-id", dag_id, "--from-date", "2024-01-01T01:00:00+00:00",
                      "--to-date", "2024-01-01T01:00:00+00:00", "--reprocess-behavior", "completed", "--max-active-runs", "1")
        assert created.returncode == 0, created.stderr[-2000:]
        backfill_started = dt.datetime.now(UTC)

        def backfilled():
            # Reprocessing reuses the run (its type becomes "backfill"): wait for it to end again.
            rs = runs()
            assert not [r for r in rs if r["state"] == "failed"], rs
            again = [r for r in rs if r["state"] == "success" and r.get("end_date")
                     and dt.datetime.fromisoformat(r["end_date"]) > backfill_started]
            return again or None

        wait_for("the backfill run", backfilled, progress)
        assert len(runs()) == 3, runs()  # the backfill re-ran the middle interval and created none
        # It confirmed a published W: readers of main saw nothing move back, tags are unchanged,
        # downstream got no event.
        assert heads() == main_before
        assert {w: {k: normalise(v.to_pylist()) for k, v in read_pipeline(config, w)[1].items()} for w in marks} == tags_before
        assert [e["watermark"] for e in asset_events(db, "tidelake://sched/watermark")] == marks

        # The schedule continues: the next interval (03:00) becomes due. While it is in flight the file
        # gets a typo: its stand-in must take none of the run's tasks away nor add its own; the run waits,
        # and goes on once the file is fixed.
        good = path.read_text().replace('end_date = "2024-01-01T03:00:00Z"', 'end_date = "2024-01-01T04:00:00Z"')
        path.write_text(good)
        # Seen in the database the moment it exists, and its file broken at once: the run's tasks take
        # seconds, as does each Airflow CLI call (a run found by `list-runs`, then `pause`, could end
        # before the typo -- it did, once the decode got faster).
        fourth_at = dt.datetime(2024, 1, 1, 3, tzinfo=dt.timezone.utc)
        fourth = wait_for("the fourth run to start", lambda: dag_run(db, dag_id, fourth_at), progress, every=0.2)
        path.write_text(good.replace('protocol = "open-protocol"', 'protocol = "open-protocl"'))
        assert cli("dags", "pause", dag_id).returncode == 0  # its next tasks wait until the stand-in is parsed
        assert dag_run(db, dag_id, fourth_at)["state"] != "success", "the fourth run ended before the test could edit its file"

        def stand_in_parsed():
            details = json_out(cli("dags", "details", dag_id, "-o", "json"))
            return details and "CONFIG ERROR" in (details[0].get("description") or "")

        wait_for("the stand-in to replace the DAG", stand_in_parsed, progress)
        assert cli("dags", "unpause", dag_id).returncode == 0

        def waiting():
            states = task_states(db, dag_id, fourth["run_id"])
            return states if "up_for_reschedule" in states.values() else None

        states = wait_for("a task of the fourth run to wait for the fixed file", waiting, progress)
        assert set(states) == {"snapshot_offsets", "confirm_if_done", "land", "apply", "publish"}, states
        assert "removed" not in states.values() and "failed" not in states.values(), states
        (waiter,) = [t for t, state in states.items() if state == "up_for_reschedule"]
        # A task whose job was running when the file broke failed reading it, and waits on its retry.
        try_number = task_tries(db, dag_id, fourth["run_id"])[waiter]
        log = home / "logs" / f"dag_id={dag_id}" / f"run_id={fourth['run_id']}" / f"task_id={waiter}" / f"attempt={try_number}.log"
        assert f"{path}: topics[0].protocol: expected one of" in log.read_text() and "waits for it to be fixed" in log.read_text()
        path.write_text(good)
        wait_for("the fourth run to go on once the file is fixed", lambda: all_done(4), progress)
        states = task_states(db, dag_id, fourth["run_id"])
        assert states == {"snapshot_offsets": "success", "confirm_if_done": "success", "land": "success", "apply": "success",
                          "publish": "success"}, states
        final = published_watermarks(config)
        assert final[:3] == marks and len(final) == 4 and final[3] > marks[-1]
        assert [e["watermark"] for e in asset_events(db, "tidelake://sched/watermark")] == final
        # What the downstream DAG received: one window per new W (none for the backfill), each
        # exactly read_changes of its two Ws; applied in order from nothing, they are the tables at the last W.
        windows = wait_for("the downstream DAG's last export", lambda: len(exported_windows(exports)) == 4 and exported_windows(exports), progress)
        assert [(m["from_watermark"], m["to_watermark"]) for m in windows] == list(zip([0, *final[:-1]], final))
        mirror: dict[tuple, Counter] = {}
        for m in windows:
            expected_changes = read_changes(config, m["from_watermark"], m["to_watermark"])
            assert sorted((t["database"], t["table"]) for t in m["tables"]) == sorted(expected_changes)
            for t in m["tables"]:
                got = pq.read_table(exports / f"{m['from_watermark']:020d}-{m['to_watermark']:020d}" / t["file"])
                assert got.equals(expected_changes[(t["database"], t["table"])]), t
                rows = mirror.setdefault((t["database"], t["table"]), Counter())
                for r in got.to_pylist():
                    image = tuple(sorted((k, v) for k, v in r.items() if v is not None and k not in ("_change_type", "_commit_ts")))
                    if r["_change_type"] in ("delete", "update_before"):
                        rows[image] -= 1
                    else:
                        rows[image] += 1
        at_last = {k: Counter(tuple(sorted((c, v) for c, v in r.items() if v is not None)) for r in v.to_pylist())
                   for k, v in read_pipeline(config, final[-1])[1].items()}
        nonzero = {k: {i: n for i, n in c.items() if n} for k, c in mirror.items()}
        assert {k: c for k, c in nonzero.items() if c} == {k: dict(c) for k, c in at_last.items() if c}
        main_after = heads()
        assert all(main_after[k][0] >= w for k, (w, _) in main_before.items())  # main only moved forward

        oracle = oracle_from_records("open-protocol", topic, records, 2)
        assert oracle.cut([(topic, 0), (topic, 1)]) == final[-1]
        expected = {k: oracle_rows(oracle, k) for k in oracle.tables}
        assert {k: normalise(v.to_pylist()) for k, v in read_pipeline(config, final[-1])[1].items()} == expected

        # A manual trigger without a logical date fails in its first task, saying what to do.
        def failed_run(prefix: str):
            return [r for r in runs() if r["run_id"].startswith(prefix) and r["state"] == "failed"] or None

        def first_task_log(run_id: str) -> str:
            logs = list((home / "logs").glob(f"dag_id={dag_id}/run_id={run_id}/task_id=snapshot_offsets/attempt=1.log"))
            assert logs, f"{run_id}: snapshot_offsets did not run: {task_states(db, dag_id, run_id)}"
            return logs[0].read_text()

        triggered = cli("dags", "trigger", dag_id, "-o", "json")
        assert triggered.returncode == 0, triggered.stderr[-2000:]
        manual = wait_for("the manual run to fail", lambda: failed_run("manual__"), progress)
        assert manual[0]["logical_date"] == ""
        assert "triggered without a logical date" in first_task_log(manual[0]["run_id"])

        # A trigger with a logical date after end_date: Airflow would give the run no task and call it a
        # success; it has its tasks, and the first fails at once saying why.
        after = cli("dags", "trigger", dag_id, "--logical-date", "2024-01-01T05:00:00+00:00", "--run-id", "after_end", "-o", "json")
        assert after.returncode == 0, after.stderr[-2000:]
        wait_for("the run after end_date to fail", lambda: failed_run("after_end"), progress)
        assert task_states(db, dag_id, "after_end")["snapshot_offsets"] == "failed"
        after_end_log = first_task_log("after_end")
        assert "ends after the pipeline's end_date 2024-01-01T04:00:00+00:00" in after_end_log
        assert "2024-01-01T05:00:00+00:00..2024-01-01T06:00:00+00:00" in after_end_log  # the interval 05:00 names
        assert published_watermarks(config) == final  # nothing ran past the bounds

        # Two more hours of the changefeed (a watermark in each), and the file's end_date moved past them; catchup off,
        # so the scheduler makes no run of its own: each interval runs only as the operator names it.
        p = SourcePosition(topic, 0, 0)
        for hour in (4, 5):
            ms = int((T0 + dt.timedelta(hours=hour, minutes=30)).timestamp() * 1000)
            for r in get_encoder("open-protocol").encode_all([Watermark(ms << 18, p)], 2):
                producer.produce(topic, key=r.key, value=r.value, partition=r.partition, timestamp=ms)
        assert producer.flush(30) == 0
        path.write_text(good.replace('end_date = "2024-01-01T04:00:00Z"', 'end_date = "2024-01-01T06:00:00Z"')
                        .replace("catchup = true", "catchup = false"))
        wait_for("the DAG with its new end_date", lambda: "ending by 2024-01-01T06:00:00+00:00" in (
            (json_out(cli("dags", "details", dag_id, "-o", "json")) or [{}])[0].get("timetable_description") or ""), progress)

        # `airflow dags trigger --logical-date 04:00` runs the interval 04:00..05:00, whatever interval Airflow stored.
        named = cli("dags", "trigger", dag_id, "--logical-date", "2024-01-01T04:00:00+00:00", "--run-id", "named_0400", "-o", "json")
        assert named.returncode == 0, named.stderr[-2000:]

        def succeeded(run_id: str):
            rs = [r for r in runs() if r["run_id"] == run_id]
            assert not [r for r in rs if r["state"] == "failed"], (rs, task_states(db, dag_id, run_id))
            return rs if rs and rs[0]["state"] == "success" else None

        wait_for("the run of the named interval", lambda: succeeded("named_0400"), progress)
        assert "this run covers 2024-01-01T04:00:00+00:00..2024-01-01T05:00:00+00:00" in first_task_log("named_0400")
        fifth = published_watermarks(config)
        assert fifth[:-1] == final and fifth[-1] > final[-1], fifth
        assert asset_events(db, "tidelake://sched/watermark")[-1]["interval_end"] == "2024-01-01T05:00:00+00:00"
        assert (tmp_path / "archive" / "sched" / "plans" / "20240101T040000.000000Z_20240101T050000.000000Z.json").exists()

        # The run after end_date, cleared exactly as its failure said once end_date is moved: it runs 05:00..06:00.
        advice = re.search(r"airflow tasks clear (\S+) --start-date (\S+) --end-date (\S+) --yes", after_end_log)
        assert advice and advice.groups() == (dag_id, "2024-01-01T05:00:00+00:00", "2024-01-01T05:00:00+00:00"), after_end_log
        cleared = cli("tasks", "clear", *advice.group(0).split()[3:])
        assert cleared.returncode == 0, cleared.stderr[-2000:]
        wait_for("the cleared run after end_date", lambda: succeeded("after_end"), progress)
        sixth = published_watermarks(config)
        assert sixth[:-1] == fifth and sixth[-1] > fifth[-1], sixth
        assert [e["interval_end"] for e in asset_events(db, "tidelake://sched/watermark")][-2:] == [
            "2024-01-01T05:00:00+00:00", "2024-01-01T06:00:00+00:00"]

        # The maintenance DAG triggered with a logical date in the past runs as of the time it was triggered.
        maintenance = "tidelake-maintenance-sched"
        assert cli("dags", "unpause", maintenance).returncode == 0
        trig = cli("dags", "trigger", maintenance, "--logical-date", "2024-01-01T00:00:00+00:00", "--run-id", "maint_past", "-o", "json")
        assert trig.returncode == 0, trig.stderr[-2000:]

        def maintained():
            with psycopg2.connect(host="127.0.0.1", port=5432, user="root", dbname=db) as conn, conn.cursor() as cur:
                cur.execute("SELECT state, run_after FROM dag_run WHERE dag_id = %s AND run_id = 'maint_past'", (maintenance,))
                row = cur.fetchone()
            assert row is None or row[0] != "failed", task_states(db, maintenance, "maint_past")
            return row if row and row[0] == "success" else None

        _, run_after = wait_for("the maintenance run", maintained, progress)
        assert dt.datetime.now(UTC) - run_after < dt.timedelta(minutes=30)  # the trigger time, not 2024 nor a cron tick
        maint_log = (home / "logs" / f"dag_id={maintenance}" / "run_id=maint_past" / "task_id=maintain" / "attempt=1.log").read_text()
        assert f"maintain sched at {run_after.astimezone(UTC).isoformat()}" in maint_log, maint_log[-3000:]
        assert "archive retention: nothing pruned (archive_horizon is none)" in maint_log

        # No stale DAG: the fixed file's pipeline is listed under its own ids, the file's name never was.
        ids = {d["dag_id"] for d in json_out(cli("dags", "list", "-o", "json"))}
        assert ids == {dag_id, maintenance, "tidelake_broken", "tidelake-maintenance-broken", "tidelake_fixme",
                       "tidelake-maintenance-fixme", "shop_changes"}, ids
        assert "CONFIG ERROR" not in (json_out(cli("dags", "details", "tidelake_fixme", "-o", "json"))[0]["description"] or "")
    finally:
        stop_airflow(procs, admin, db)


# A tidelake version that applies the statement the running one cannot (as the truncate it is to the
# rows; tests/spark/test_isolation.py's ``_fixed``): the tasks' Python processes -- the spark-submit
# drivers too, which keep PYTHONPATH -- load it from PYTHONPATH, and it takes effect once the test
# creates the flag file: the operator deploying the fix.
FIXED_VERSION = '''
import importlib.abc, importlib.util, os, sys

FLAG, BAD = os.environ["TIDELAKE_TEST_FIXED"], "ALTER TABLE shop.a DISCARD TABLESPACE"


class _Fixed(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "spark.commit.plan":
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            parse = module.parse_ddl

            def handles(sql, database):
                if sql == BAD and os.path.exists(FLAG):
                    from spark.tables.ddl_changes import TruncateTable

                    return [(("shop", "a"), TruncateTable())]
                return parse(sql, database)

            module.parse_ddl = handles

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _Fixed())
'''


def isolation_history() -> list[list]:
    """tests/spark/test_isolation.py's history: a and b; a statement tidelake cannot apply on a in the
    second interval, rows of both around it and in the third and fourth."""
    from cdc_codecs import Op
    from tests.spark.test_schema_evolution import History, schema

    a = schema("shop", "a", [("id", "int"), ("v", "int")])
    b = schema("shop", "b", [("id", "int"), ("v", "int")])
    h, batches = History(), []

    def interval(*changes) -> None:
        for change in changes:
            change(h)
        h.mark()
        batches.append(h.events)
        h.events = []

    interval(lambda h: h.ddl("shop", "a", "CREATE TABLE shop.a (id int primary key, v int)", a, kind="CREATE"),
             lambda h: h.ddl("shop", "b", "CREATE TABLE shop.b (id int primary key, v int)", b, kind="CREATE"),
             lambda h: h.row(Op.INSERT, a, None, {"id": 1, "v": 1}), lambda h: h.row(Op.INSERT, b, None, {"id": 1, "v": 1}))
    interval(lambda h: h.row(Op.INSERT, a, None, {"id": 2, "v": 2}), lambda h: h.row(Op.INSERT, b, None, {"id": 2, "v": 2}),
             lambda h: h.ddl("shop", "a", "ALTER TABLE shop.a DISCARD TABLESPACE", kind="ALTER"),
             lambda h: h.row(Op.INSERT, a, None, {"id": 3, "v": 3}),
             lambda h: h.row(Op.UPDATE, b, {"id": 1, "v": 1}, {"id": 1, "v": 10}))
    interval(lambda h: h.row(Op.INSERT, a, None, {"id": 4, "v": 4}), lambda h: h.row(Op.INSERT, b, None, {"id": 3, "v": 3}))
    interval(lambda h: h.row(Op.INSERT, a, None, {"id": 5, "v": 5}),
             lambda h: h.row(Op.UPDATE, b, {"id": 2, "v": 2}, {"id": 2, "v": 20}))
    return batches


@pytest.mark.mirror_e2e
def test_a_mirror_built_from_asset_events_stays_exact_through_a_catch_up(kafka, make_topic, tmp_path: Path) -> None:
    """Issue 33: shop.a is isolated for two intervals (a statement this version cannot apply), then a
    fixed version is deployed and the next scheduled run catches it up. The downstream DAG of
    docs/operating.md, scheduled on the Asset, exports each event's window (and for a table the event
    names under ``caught_up``, its changes since the W it was held at); the mirror built from those
    exports alone ends equal to every table at the last W."""
    from spark.archive.storage import open_storage
    from spark.commit.isolation import read_isolated

    pipelines, fixed = tmp_path / "pipelines", tmp_path / "fixed-version"
    pipelines.mkdir()
    fixed.mkdir()
    (fixed / "sitecustomize.py").write_text(FIXED_VERSION)
    flag = tmp_path / "fixed-version-deployed"
    db, admin, env = airflow_env(tmp_path, pipelines, {
        "PYTHONPATH": os.pathsep.join(p for p in (str(fixed), os.environ.get("PYTHONPATH")) if p),
        "TIDELAKE_TEST_FIXED": str(flag),
    })

    topic = make_topic(2)
    producer = Producer({"bootstrap.servers": kafka.bootstrap})
    encoder = get_encoder("canal-json")
    for i, batch in enumerate(isolation_history()):  # interval i's changes in hour i
        records = encoder.encode_all(batch, 2)
        for j, r in enumerate(records):
            ms = int((T0 + dt.timedelta(hours=i, minutes=10)).timestamp() * 1000) + j * 1000
            producer.produce(topic, key=r.key, value=r.value, partition=r.partition, timestamp=ms)
    assert producer.flush(30) == 0
    path = pipelines / "mirror.toml"
    text = (f'name = "mirror"\n[kafka]\nbootstrap_servers = "{kafka.bootstrap}"\n[[topics]]\nname = "{topic}"\n'
            f'protocol = "canal-json"\n[storage]\nurl = "{tmp_path / "archive"}"\n[schedule]\ncron = "0 * * * *"\n'
            'start_date = "2024-01-01T00:00:00Z"\nend_date = "2024-01-01T03:00:00Z"\ncatchup = true\nretries = 1\n')
    path.write_text(text)
    exports = tmp_path / "mart"
    procs = []
    try:
        cli = start_airflow(tmp_path, env, db, procs, "mirror", path, exports)
        dag_id = "tidelake_mirror"

        def progress():
            return scheduler_progress(db)

        def all_done(expected: int):
            rs = json_out(cli("dags", "list-runs", dag_id, "-o", "json")) or []
            failed = [r for r in rs if r["state"] == "failed"]
            assert not failed, f"runs failed: {failed}; scheduler log tail: {(tmp_path / 'scheduler.log').read_text()[-3000:]}"
            return len([r for r in rs if r["state"] == "success"]) >= expected

        def exported(n: int):
            windows = exported_windows(exports)
            return windows if len(windows) == n else None

        # Three scheduled intervals with the version that cannot apply a's statement: a is held at W1.
        wait_for("three scheduled runs", lambda: all_done(3), progress)
        config = load_pipeline_config(str(path))
        marks = published_watermarks(config)
        assert len(marks) == 3
        held = read_isolated(open_storage(config.storage), config.name)
        assert list(held) == [("shop", "a")] and held[("shop", "a")].held_at == marks[0], held
        windows = wait_for("the downstream DAG's three exports", lambda: exported(3), progress)
        assert [[(t["database"], t["table"]) for t in m["isolated"]] for m in windows] == [[], [("shop", "a")], [("shop", "a")]]
        assert [e["caught_up"] for e in asset_events(db, "tidelake://mirror/watermark")] == [[], [], []]

        # The fixed version is deployed, and the schedule goes on: the fourth interval's run catches a up.
        flag.touch()
        path.write_text(text.replace('end_date = "2024-01-01T03:00:00Z"', 'end_date = "2024-01-01T04:00:00Z"'))
        wait_for("the fourth run", lambda: all_done(4), progress)
        final = published_watermarks(config)
        assert final[:3] == marks and len(final) == 4
        assert read_isolated(open_storage(config.storage), config.name) == {}
        events = asset_events(db, "tidelake://mirror/watermark")
        assert [e["watermark"] for e in events] == final
        assert [e["caught_up"] for e in events[:3]] == [[], [], []]
        assert events[3]["caught_up"] == [{"database": "shop", "table": "a", "from_watermark": marks[0],
                                           "from_watermark_str": str(marks[0])}]

        # The mirror, from the downstream DAG's exports alone: each window's files applied in order by key;
        # a table a window leaves out (isolated) keeps its rows of the W it was held at.
        windows = wait_for("the downstream DAG's fourth export", lambda: exported(4), progress)
        assert [(m["from_watermark"], m["to_watermark"]) for m in windows] == list(zip([0, *final[:-1]], final))
        # Each file is what its manifest says: the table's changes from its from_watermark -- for a, caught up in
        # the last window, the W it was held at -- to the window's W.
        assert [{t["table"]: t["from_watermark"] for t in m["tables"]} for m in windows] == [
            {"a": 0, "b": 0}, {"b": marks[0]}, {"b": marks[1]}, {"a": marks[0], "b": marks[2]}]
        mirror: dict[tuple, dict] = {}
        for m in windows:
            left_out = {(t["database"], t["table"]) for t in m["isolated"]}
            for t in m["tables"]:
                name = (t["database"], t["table"])
                assert name not in left_out
                table = mirror.setdefault(name, {})
                got = pq.read_table(exports / f"{m['from_watermark']:020d}-{m['to_watermark']:020d}" / t["file"])
                assert got.equals(read_changes(config, t["from_watermark"], m["to_watermark"], [name])[name]), (m, t)
                assert dict(Counter(got.column("_change_type").to_pylist())) == {k: n for k, n in t["rows"].items() if n}, (m, t)
                for r in got.to_pylist():
                    if r["_change_type"] in ("delete", "update_before"):
                        table.pop(r["id"], None)
                    else:
                        table[r["id"]] = (r["id"], r["v"])
        at_last = {name: sorted((r["id"], r["v"]) for r in rows.to_pylist())
                   for name, rows in read_pipeline(config, final[-1])[1].items()}
        assert at_last == {("shop", "a"): [(3, 3), (4, 4), (5, 5)], ("shop", "b"): [(1, 10), (2, 20), (3, 3)]}
        assert {name: sorted(rows.values()) for name, rows in mirror.items()} == at_last
    finally:
        stop_airflow(procs, admin, db)
