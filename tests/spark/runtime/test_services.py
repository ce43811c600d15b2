"""What a service's failure says (spark.runtime.services): one line naming the service, no credentials."""

from __future__ import annotations

import pytest

from spark.runtime.services import CATALOG, KAFKA, S3, ServiceError, boto_config, classify, describe, redact

pytestmark = pytest.mark.slow  # whole intervals, Spark or services: make test-fast leaves it out (docs/testing.md)


def test_urls_and_secrets_lose_their_passwords() -> None:
    text = redact("(psycopg2.OperationalError) postgresql+psycopg2://tidelake:s3cr3t@db:5432/cat password=hunter2 "
                  "secret_access_key='abc'")
    assert "s3cr3t" not in text and "hunter2" not in text and "abc" not in text
    assert "postgresql+psycopg2://tidelake:***@db:5432/cat" in text


def test_a_sqlalchemy_failure_is_the_catalogs_one_line_without_its_url() -> None:
    from sqlalchemy import create_engine

    engine = create_engine("postgresql+psycopg2://root:sekrit@127.0.0.1:1/postgres?connect_timeout=2")
    with pytest.raises(Exception) as raised:
        engine.connect()
    found = classify(raised.value)
    assert isinstance(found, ServiceError) and found.service == CATALOG
    line = str(found)
    assert "\n" not in line and "sekrit" not in line and "sqlalche.me" not in line
    assert line.startswith("Iceberg catalog unavailable: connection to server at") and "retry" in line


def test_an_arrow_s3_failure_names_s3() -> None:
    import pyarrow.fs as pafs

    fs = pafs.S3FileSystem(endpoint_override="127.0.0.1:1", scheme="http", access_key="k", secret_key="s",
                           region="us-east-1", connect_timeout=1, request_timeout=1,
                           retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=1))
    with pytest.raises(OSError) as raised:
        fs.get_file_info("bucket/key")
    found = classify(raised.value)
    assert found is not None and found.service == S3 and "\n" not in str(found)


def test_a_broker_that_is_down_is_kafkas_one_line(monkeypatch) -> None:
    import spark.archive.kafka as kafka

    monkeypatch.setattr(kafka, "TIMEOUT_S", 2.0)
    with kafka.KafkaHook("127.0.0.1:1") as hook, pytest.raises(kafka.KafkaHookError) as raised:
        hook.partitions("t")
    found = classify(raised.value)
    assert found is not None and found.service == KAFKA
    assert "Connection refused" in str(found)  # the client's own last line, quoted once


def test_anything_else_is_not_a_service_and_keeps_its_text() -> None:
    assert classify(ValueError("x")) is None
    assert describe(ValueError("bad\nvalue")) == "ValueError: bad"


def test_boto_retries_are_bounded() -> None:
    config = boto_config()
    assert config.retries == {"mode": "standard", "total_max_attempts": 5}
    assert (config.connect_timeout, config.read_timeout) == (5.0, 30.0)


def _cli(tmp_path, toml: str, *args: str, env: dict | None = None):  # noqa: ANN202
    import os
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / "p.toml").write_text(toml)
    exe = Path(sys.executable).parent / "tidelake"
    return subprocess.run([str(exe), *args, "--config", str(tmp_path / "p.toml")], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=120, check=False)


def test_the_cli_ends_a_catalog_outage_with_one_line_and_exit_1(tmp_path) -> None:
    toml = ('name = "p"\n[kafka]\nbootstrap_servers = "127.0.0.1:1"\n[[topics]]\nname = "t"\nprotocol = "canal-json"\n'
            f'[storage]\nurl = "{tmp_path / "archive"}"\n'
            '[catalog]\ntype = "sql"\nproperties = { uri = "postgresql+psycopg2://root:sekrit@127.0.0.1:1/postgres" }\n')
    done = _cli(tmp_path, toml, "maintain", "-q")
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: Iceberg catalog unavailable: "), done.stderr
    assert "sekrit" not in done.stderr


def test_the_cli_ends_a_broker_outage_with_one_line_not_librdkafkas_hundreds(tmp_path) -> None:
    toml = ('name = "p"\n[kafka]\nbootstrap_servers = "127.0.0.1:1"\n[[topics]]\nname = "t"\nprotocol = "canal-json"\n'
            f'[storage]\nurl = "{tmp_path / "archive"}"\n')
    done = _cli(tmp_path, toml, "run", "--start", "2024-01-01T00:00:00Z", "--end", "2024-01-01T01:00:00Z", "-q",
                env={"TIDELAKE_KAFKA_CALL_TIMEOUT": "3"})
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: Kafka unavailable: "), done.stderr


def test_a_full_local_disk_is_one_line_naming_the_path_and_what_to_do(monkeypatch) -> None:
    import errno
    import os

    from spark.runtime.services import LOCAL_DISK

    # Python's own (PySpark writing a job's tasks to the temp dir; a file it names).
    found = classify(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/scratch/tmp/pyspark-1/tmpab"))
    assert found is not None and found.service == LOCAL_DISK
    line = str(found)
    assert line.startswith("local disk full: No space left on device writing /scratch/tmp/pyspark-1/tmpab "
                           "(the filesystem mounted at /)"), line
    assert "TMPDIR" in line and "spark.local.dir" in line and "retry resumes exactly" in line and "\n" not in line
    # A quota counts the same; without a file name the line names the scratch directories.
    try:
        try:
            raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))
        except OSError as inner:
            raise RuntimeError("job failed") from inner
    except RuntimeError as outer:
        found = classify(outer)
    assert found is not None and found.service == LOCAL_DISK
    assert str(found).startswith("local disk full: Disk quota exceeded writing to the run's scratch space (")
    # The directories as set: tempfile.gettempdir() skips a full TMPDIR (it cannot write its probe there).
    monkeypatch.setenv("SPARK_LOCAL_DIRS", "/scratch/spark")
    monkeypatch.setenv("TMPDIR", "/scratch/tmp")
    assert "scratch space (/scratch/spark, /scratch/tmp; on a Spark cluster also the workers' SPARK_LOCAL_DIRS)" in str(
        classify(OSError(errno.ENOSPC, "No space left on device")))
    # Other OSErrors are not a full disk.
    assert classify(OSError(errno.EACCES, "Permission denied", "/x")) is None


def test_a_spark_task_failing_on_a_full_local_dir_is_the_local_disks_line() -> None:
    from spark.runtime.services import LOCAL_DISK

    class Py4JJavaError(Exception):  # the shape of py4j's: a class of that name whose text quotes Java's
        pass

    text = ("An error occurred while calling z:org.apache.spark.api.python.PythonRDD.collectAndServe.\n"
            ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 1.0 failed 4 times, "
            "most recent failure: Lost task 0.3 in stage 1.0 (TID 5) (127.0.0.1 executor 1): java.io.FileNotFoundException: "
            "/spark/blockmgr-8a/02/temp_shuffle_5d (No space left on device)\n\tat java.io.FileOutputStream.open0(Native Method)")
    found = classify(Py4JJavaError(text))
    assert found is not None and found.service == LOCAL_DISK
    assert str(found).startswith("local disk full: No space left on device writing /spark/blockmgr-8a/02/temp_shuffle_5d")
    bare = classify(Py4JJavaError(text.replace("java.io.FileNotFoundException: /spark/blockmgr-8a/02/temp_shuffle_5d "
                                               "(No space left on device)", "java.io.IOException: No space left on device")))
    assert bare is not None and "scratch space" in str(bare) and "SPARK_LOCAL_DIRS" in str(bare)
    # An executor lost stays Spark's.
    lost = classify(Py4JJavaError(text.replace("(No space left on device)", "ExecutorLostFailure (executor 1 exited)")))
    assert lost is not None and lost.service != LOCAL_DISK
