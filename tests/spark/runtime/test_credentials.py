"""No secret travels inside a Spark task: tasks carry a secret-free config, executors resolve the rest."""

from __future__ import annotations

import dataclasses
import functools
import pickle
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from pyspark import cloudpickle  # what PySpark pickles task closures with

from cdc_codecs import ConfigError
from spark.runtime import credentials
from spark.config import CatalogConfig, PipelineConfig
from spark.archive.land import chunks, land_chunk
from spark.archive.manifest import PartitionRange

from tests.spark.archives import HOUR, T0, build, normalise

S3_KEY_ID = "AKIA-INLINE-KEY-ID-7f3a"
S3_SECRET = "s3-inline-secret-9c1e"
KAFKA_USER = "kafka-inline-user-41d0"
KAFKA_PASSWORD = "kafka-inline-password-5b2c"
CATALOG_PASSWORD = "catalog-inline-password-0e8d"
SECRETS = (S3_KEY_ID, S3_SECRET, KAFKA_USER, KAFKA_PASSWORD, CATALOG_PASSWORD)


@pytest.fixture(autouse=True)
def fresh_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(credentials, "_REGISTERED", {})


def with_inline_secrets(config: PipelineConfig) -> PipelineConfig:
    return dataclasses.replace(
        config,
        storage=dataclasses.replace(config.storage, access_key_id=S3_KEY_ID, secret_access_key=S3_SECRET),
        kafka_options={"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "SCRAM-SHA-512",
                       "sasl.username": KAFKA_USER, "sasl.password": KAFKA_PASSWORD},
        catalog=CatalogConfig(config.catalog.type, config.catalog.namespace, {"credential": f"client:{CATALOG_PASSWORD}"}),
    )


def assert_no_secret(blob: bytes) -> None:
    found = [s for s in SECRETS if s.encode() in blob]
    assert not found, f"secrets inside a pickled task: {found}"


class PicklingRunner:
    """Runs each task the way Spark ships it: the closure and the task pickled, unpickled, then called."""

    where = "spark"  # it stands for Spark's executors
    start_seconds = 0.0

    def __init__(self) -> None:
        self.pickles: list[bytes] = []

    def map(self, fn: Callable[[Any], Any], tasks: Sequence[Any]) -> list[Any]:
        out = []
        for task in tasks:
            blob = cloudpickle.dumps((fn, task), protocol=pickle.HIGHEST_PROTOCOL)
            self.pickles.append(blob)
            shipped_fn, shipped_task = pickle.loads(blob)
            out.append(shipped_fn(shipped_task))
        return out


def test_land_tasks_pickle_without_secrets_and_resolve_them_from_the_executor_environment(monkeypatch) -> None:
    # This process's registry and environment alone: an earlier test's pipelines may have registered theirs.
    monkeypatch.setattr(credentials, "_REGISTERED", {})
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name, raising=False)
    config = with_inline_secrets(PipelineConfig.from_mapping({
        "name": "secretive", "kafka": {"bootstrap_servers": "broker:9092"},
        "topics": [{"name": "cdc", "protocol": "canal-json"}],
        "storage": {"url": "s3://archive/lake", "endpoint_url": "http://s3.internal:8333"}}, "test"))
    tasks = chunks([PartitionRange("cdc", 0, 0, 250, None, (), 0, "")], dataclasses.replace(config, segment_max_messages=100))
    assert [(t.start, t.end) for t in tasks] == [(0, 100), (100, 200), (200, 250)]
    for task in tasks:
        assert_no_secret(cloudpickle.dumps((land_chunk, task)))
    carried = tasks[0].config
    assert carried.kafka_options == {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "SCRAM-SHA-512"}
    assert carried.storage.endpoint_url == "http://s3.internal:8333" and carried.catalog.properties == {}

    # In the driver's own process (LocalRunner) the secrets come back from its registry.
    resolved = credentials.resolve(carried)
    assert (resolved.storage.access_key_id, resolved.storage.secret_access_key) == (S3_KEY_ID, S3_SECRET)
    assert resolved.kafka_options["sasl.password"] == KAFKA_PASSWORD
    # What SparkRunner hands the executors' environment: the pipeline's secrets under its own names.
    scoped = functools.partial(credentials.pipeline_env_name, "secretive")
    assert credentials.executor_environment_of_registered().items() >= {
        scoped("AWS_ACCESS_KEY_ID"): S3_KEY_ID, scoped("AWS_SECRET_ACCESS_KEY"): S3_SECRET,
        scoped("TIDELAKE_KAFKA_SASL_USERNAME"): KAFKA_USER, scoped("TIDELAKE_KAFKA_SASL_PASSWORD"): KAFKA_PASSWORD}.items()

    # A stripped config passed on (a task's config handed to the next stage) keeps them registered:
    # stripping it again must not erase what the executors are given.
    assert credentials.task_config(carried) == carried
    assert credentials.executor_environment_of_registered()[scoped("AWS_SECRET_ACCESS_KEY")] == S3_SECRET
    assert credentials.resolve(carried).storage.secret_access_key == S3_SECRET

    # On an executor given the driver's environment: the pipeline's own names win over plain ones.
    shipped = credentials.executor_environment_of_registered()
    monkeypatch.setattr(credentials, "_REGISTERED", {})
    monkeypatch.setattr(credentials.os, "environ", {**shipped, "AWS_ACCESS_KEY_ID": "someone-else"})
    given = credentials.resolve(pickle.loads(cloudpickle.dumps(carried)))
    assert (given.storage.access_key_id, given.kafka_options["sasl.password"]) == (S3_KEY_ID, KAFKA_PASSWORD)
    monkeypatch.undo()
    monkeypatch.setattr(credentials, "_REGISTERED", {})
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name, raising=False)

    # On an executor (another process: no registry) they come from its environment.
    monkeypatch.setattr(credentials, "_REGISTERED", {})
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "executor-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "executor-secret")
    monkeypatch.setenv("TIDELAKE_KAFKA_SASL_USERNAME", "executor-user")
    monkeypatch.setenv("TIDELAKE_KAFKA_SASL_PASSWORD", "executor-password")
    on_executor = credentials.resolve(pickle.loads(cloudpickle.dumps(carried)))
    assert (on_executor.storage.access_key_id, on_executor.storage.secret_access_key) == ("executor-key", "executor-secret")
    assert (on_executor.kafka_options["sasl.username"], on_executor.kafka_options["sasl.password"]) == ("executor-user", "executor-password")


def test_two_pipelines_of_one_driver_hand_their_tasks_their_own_keys(monkeypatch) -> None:
    """Two pipelines with different S3 keys and Kafka passwords, their tasks built in one driver
    process (a backfill of two pipelines, a test session): each task, resolved on an executor that
    got the driver's environment, gets its own pipeline's secrets -- the last registered does not win."""
    monkeypatch.setattr(credentials, "_REGISTERED", {})
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "TIDELAKE_KAFKA_SASL_PASSWORD"):
        monkeypatch.delenv(name, raising=False)

    def pipeline(name: str, key: str) -> PipelineConfig:
        return PipelineConfig.from_mapping({
            "name": name, "kafka": {"bootstrap_servers": "broker:9092", "options": {"sasl.password": f"{key}-kafka"}},
            "topics": [{"name": "cdc", "protocol": "canal-json"}],
            "storage": {"url": f"s3://archive/{name}", "access_key_id": f"{key}-id", "secret_access_key": f"{key}-secret"}}, "test")

    # "." and "-" may be in a pipeline name, not in a variable name.
    carried = [credentials.task_config(pipeline(n, k)) for n, k in (("orders", "a"), ("cdc.billing-eu", "b"))]
    shipped = credentials.executor_environment_of_registered()
    monkeypatch.setattr(credentials, "_REGISTERED", {})
    monkeypatch.setattr(credentials.os, "environ", dict(shipped))
    got = [credentials.resolve(pickle.loads(cloudpickle.dumps(c))) for c in carried]
    assert [(g.storage.access_key_id, g.storage.secret_access_key, g.kafka_options["sasl.password"]) for g in got] == [
        ("a-id", "a-secret", "a-kafka"), ("b-id", "b-secret", "b-kafka")]


def test_apply_decode_tasks_pickle_without_secrets_and_still_apply_exactly(tmp_path: Path) -> None:
    from spark.commit.apply import apply_interval
    from spark.query.read import read_pipeline

    plain, expected = build(tmp_path, "canal-json", seed=3, partitions=2, intervals=1, dup_rate=0.0, lagging=False)
    config = with_inline_secrets(plain)
    runner = PicklingRunner()
    result = apply_interval(config, T0, T0 + HOUR, runner=runner)
    assert len(runner.pickles) >= 2  # both decode phases of both partitions went through the pickler
    for blob in runner.pickles:
        assert_no_secret(blob)
    w, tables = expected[0]
    assert result.watermark == w
    _, got = read_pipeline(plain, w)
    assert {k: normalise(v.to_pylist()) for k, v in got.items()} == tables


def test_kafka_secrets_come_from_the_environment_when_the_file_has_none() -> None:
    config = PipelineConfig.from_mapping({
        "name": "shop", "kafka": {"bootstrap_servers": "broker:9092",
                                  "options": {"security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512"}},
        "topics": [{"name": "cdc", "protocol": "canal-json"}], "storage": {"url": "/tmp/unused"}}, "shop.toml")
    with pytest.raises(ConfigError, match="pipeline shop: kafka.options sets SASL SCRAM-SHA-512 but no sasl.username or "
                                          "sasl.password: set TIDELAKE_KAFKA_SASL_USERNAME and TIDELAKE_KAFKA_SASL_PASSWORD"):
        credentials.from_environment(config, {})
    filled = credentials.from_environment(config, {"TIDELAKE_KAFKA_SASL_USERNAME": "u", "TIDELAKE_KAFKA_SASL_PASSWORD": "p"})
    assert filled.kafka_options == {"security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512",
                                    "sasl.username": "u", "sasl.password": "p"}
    # The file's own value wins over the environment.
    inline = dataclasses.replace(config, kafka_options={**config.kafka_options, "sasl.username": "file", "sasl.password": "filepw"})
    assert credentials.from_environment(inline, {"TIDELAKE_KAFKA_SASL_PASSWORD": "env"}).kafka_options["sasl.password"] == "filepw"
