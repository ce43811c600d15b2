"""Real services failing under real runs (bench/faults.py): the lease's fencing with two runs and a
real pause, and a part of the fault matrix (``python -m bench faults`` prints all of it)."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from bench.faults import FAULTS, STAGES, Lab, _stopped, lab, print_matrix, run_cell

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def the_lab(tmp_path_factory: pytest.TempPathFactory):
    with lab(tmp_path_factory.mktemp("faults")) as made:
        yield made


def _state(the_lab: Lab, config: Path) -> tuple:
    """What a run may change: every table's metadata location (any commit or tag moves it), and the archive's
    published records, checkpoints and isolation record."""
    from spark.config import load_pipeline_config
    from spark.runtime.credentials import from_environment
    from spark.tables import catalog as cat

    # The lab's credentials on this config alone: left in os.environ they would be every later test's in this worker.
    conf = from_environment(load_pipeline_config(str(config)))
    conf = dataclasses.replace(conf, storage=dataclasses.replace(conf.storage, access_key_id="tidelake-bench",
                                                                  secret_access_key="tidelake-bench-secret"))
    catalog = cat.open_catalog(conf)
    tables = sorted((t.name(), t.metadata_location) for t in cat.RunTables(catalog, conf).all())
    client = the_lab.s3.client()
    listed = client.list_objects_v2(Bucket="lake", Prefix=f"{conf.name}/").get("Contents", [])
    archive = sorted((o["Key"], o["ETag"]) for o in listed
                     if any(f"/{d}/" in o["Key"] for d in ("published", "checkpoints", "isolated")))
    cat.close_catalogs()
    return tuple(tables), tuple(archive)


@pytest.mark.parametrize("point", ["catalog-write", "committed:0", "tagged", "checkpointed"])
def test_a_run_frozen_past_its_lease_commits_and_publishes_nothing_once_another_run_took_it(the_lab: Lab, point: str) -> None:
    """Run A is frozen (SIGSTOP) at a commit point for longer than the lease's time to live; run B (another
    run) takes the lease and applies the interval; A resumes: it must stop without one more write --
    at ``catalog-write`` A passed its last lease check and is inside the catalog write itself, where only
    the fence in the catalog's transaction can stop it."""
    ttl = 4
    config = the_lab.pipeline(top=f"lease_ttl_seconds = {ttl}\n")
    assert the_lab.run(config, "run", 0).returncode == 0
    a = subprocess.Popen(the_lab.command(config, "run", 1), env={**the_lab.env(point), "TIDELAKE_RUN_ID": "A"},
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while a.poll() is None and not _stopped(a.pid):
            assert time.monotonic() < deadline, "run A never reached its pause"
            time.sleep(0.02)
        assert a.poll() is None, a.stderr.read()
        time.sleep(ttl + 1)  # frozen past its lease: its renewal thread is frozen too
        b = subprocess.run(the_lab.command(config, "run", 1), env={**the_lab.env(), "TIDELAKE_RUN_ID": "B"},
                           capture_output=True, text=True, timeout=120, check=False)
        assert b.returncode == 0, b.stderr
        after_b = _state(the_lab, config)
        os.kill(a.pid, signal.SIGCONT)
        _, err = a.communicate(timeout=120)
    finally:
        if a.poll() is None:
            os.kill(a.pid, signal.SIGCONT)
            a.kill()
    assert a.returncode == 1, err
    lines = err.strip().splitlines()
    assert len(lines) <= 2 and "lease" in lines[-1] and "Traceback" not in err, err
    assert _state(the_lab, config) == after_b  # A wrote nothing after B took over
    # And the pipeline goes on exactly.
    assert the_lab.run(config, "run", 2).returncode == 0
    assert the_lab.snapshot(config) == the_lab.reference


CELLS = [  # (fault, stage, the outcomes it may have)
    ("S3 killed", "rewrite+commit", {"failed clearly"}),
    ("S3 hung", "publish", {"failed clearly"}),
    # Retried by the clients; a 503 answering a small ranged read can still fail Arrow's read (its error
    # body overflows the range's buffer: "Failed to flush response stream"), clearly.
    ("S3 503", "rewrite+commit", {"survived", "failed clearly"}),
    ("S3 500", "checkpoint", {"failed clearly"}),
    ("catalog stopped", "commit (catalog txn)", {"failed clearly"}),
    ("catalog hung", "rewrite+commit", {"failed clearly"}),
    ("broker killed", "snapshot+land", {"failed clearly"}),
    ("broker killed", "publish", {"survived"}),  # nothing after landing asks the broker
]


@pytest.mark.faults
def test_part_of_the_fault_matrix_survives_or_fails_clearly_and_the_retry_is_exact(the_lab: Lab) -> None:
    cells = []
    for name, stage, expected in CELLS:
        fault = next(f for f in FAULTS if f.name.startswith(name))
        assert stage in STAGES
        cells.append((run_cell(the_lab, fault, stage), expected))
    print_matrix([c for c, _ in cells])
    assert [(c.fault, c.stage, c.outcome, c.detail) for c, e in cells if c.outcome not in e] == []


SPARK_CELLS = [  # on the lab's standalone master + worker (driver_max_messages = 0)
    ("Spark executor lost", "rewrite+commit", {"survived"}),  # the tasks rerun on the executor the master relaunches
    ("local disk full", "decode+fold", {"failed clearly"}),  # "local disk full: ... <path>; free space ...", then exact
]


@pytest.mark.faults
@pytest.mark.skipif(os.geteuid() != 0, reason="the local disk fault mounts a tmpfs (root)")
def test_spark_faults_an_executor_lost_is_survived_and_a_full_local_disk_fails_clearly(the_lab: Lab) -> None:
    cells = []
    for name, stage, expected in SPARK_CELLS:
        fault = next(f for f in FAULTS if f.name.startswith(name))
        assert fault.stages is not None and stage in fault.stages
        cells.append((run_cell(the_lab, fault, stage), expected))
    print_matrix([c for c, _ in cells])
    assert [(c.fault, c.stage, c.outcome, c.detail) for c, e in cells if c.outcome not in e] == []
    assert "killed with" in cells[0][0].detail  # a task was in flight when its executor died
    assert the_lab.scratch is not None and str(the_lab.scratch.path) in cells[1][0].detail  # the line names the disk


def test_the_fault_lab_s_object_store_leaves_no_socket_in_tmp_when_stopped(tmp_path: Path) -> None:
    """Like the tests' object store (test_embedded.py): the lab's ``weed mini``, killed and started again
    as the matrix does, leaves none of its Unix sockets in /tmp once stopped."""
    from bench.faults import Seaweed

    from tests.weed_sockets import sockets_made_since, weed_sockets

    before = weed_sockets()
    s3 = Seaweed(tmp_path)
    try:
        s3.start()
        s3.kill()
        s3.start()
        made = sockets_made_since(before)
    finally:
        s3.stop()
    assert not made & weed_sockets()
