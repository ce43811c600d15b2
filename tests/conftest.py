from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from hypothesis import settings

from spark.runtime.embedded import KafkaService, S3Service, kafka_service, s3_service

REPO = Path(__file__).resolve().parents[1]

# `make test` (what CI runs) replays the same examples, so a red run means a regression;
# any other run (`make test-fast`, plain pytest) explores new ones and may find new bugs.
# No deadline in either: an example's time on a shared 2-core machine under xdist says nothing of
# the code (a 200 ms deadline failed a 0.4 s first example in `make test`); speed is measured in
# bench/, never in a timed test.
settings.register_profile("replay", derandomize=True, database=None, deadline=None)
settings.register_profile("explore", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "explore"))


def shared_dir() -> Path:
    """The project's shared/ folder: beside the checkout, or where TIDELAKE_SHARED says."""
    candidates = [Path(os.environ["TIDELAKE_SHARED"])] if "TIDELAKE_SHARED" in os.environ else []
    candidates += [REPO.parent / "shared", REPO / "shared"]
    for c in candidates:
        if (c / "conformance" / "MANIFEST.md").exists():
            return c
    raise RuntimeError(
        "shared/conformance not found beside the checkout; set TIDELAKE_SHARED to the folder holding conformance/"
    )


@pytest.fixture(autouse=True)
def _no_run_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test inherits another's run identity (``spark.archive.lease.run_identity``): Airflow's
    in-process task runs (``dag.test``) leave AIRFLOW_CTX_* in the worker's environment, which
    would make every later lease of that worker one run's, taking each other's over."""
    for name in ("TIDELAKE_RUN_ID", "AIRFLOW_CTX_DAG_ID", "AIRFLOW_CTX_DAG_RUN_ID"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="session")
def conformance() -> Path:
    return shared_dir() / "conformance"



@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaService]:
    with kafka_service(tmp_path_factory.mktemp("kafka")) as service:
        yield service


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Service]:
    with s3_service(tmp_path_factory.mktemp("s3")) as service:
        yield service


@pytest.fixture
def bucket(s3: S3Service) -> str:
    name = f"archive-{uuid.uuid4().hex[:12]}"
    s3.client().create_bucket(Bucket=name)
    return name


@pytest.fixture
def make_topic(kafka: KafkaService):
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})

    def make(partitions: int, config: dict[str, str] | None = None, name: str | None = None) -> str:
        topic = name or f"t-{uuid.uuid4().hex[:10]}"
        # Tests write messages timestamped in the past: keep them (time retention would not).
        futures = admin.create_topics([NewTopic(topic, partitions, 1, config={"retention.ms": "-1", **(config or {})})])
        for f in futures.values():
            f.result(30)
        return topic

    return make
