"""The services a run depends on, how long tidelake waits for each, and what a failure of one says.

Every call a run makes goes to one of four services: the object store of the archive and the
tables (S3), the Iceberg catalog (its SQL database, or a REST service), the Kafka brokers, and
Spark. Each has a bounded wait (the constants below, documented in docs/operating.md "When a
service fails"), and transient faults are retried a bounded number of times with backoff:

============  ==========================================  ============================================
service       timeouts                                    retries (transient faults)
============  ==========================================  ============================================
S3            connect 5 s, request 30 s (Arrow's client,  5 attempts in all (the AWS SDK's "standard"
              the tables' pyiceberg FileIO and boto3)     retry mode: exponential backoff with jitter,
                                                          at most 20 s apart): 500, 502, 503, 504,
                                                          SlowDown and throttling, timeouts, connection
                                                          reset/refused
catalog (SQL) connect 10 s; statement 60 s (server side,  none by tidelake (a commit is not repeated
              PostgreSQL ``statement_timeout``); 75 s     blindly: the run fails and its retry
              on the client for a server that stopped     resumes exactly)
              answering (the socket is shut)
Kafka         socket 30 s, each metadata/offset call 30 s librdkafka's own reconnects inside the
              (``spark.archive.kafka.TIMEOUT_S``), no     bounded call; then the run fails
              progress reading a partition for 30 s
Spark         ``spark.network.timeout`` 120 s; a lost     Spark's task retries (``spark.task.maxFailures``
              executor's tasks rerun elsewhere; a job     = 4); a job that still fails fails the run
              with no executor at all for 180 s is
              cancelled (``session.watch_executors``)
============  ==========================================  ============================================

The run also writes to local disk on Spark: PySpark writes each job's tasks (``parallelize``'s data,
broadcasts) to a folder in ``spark.local.dir`` before handing them to the JVM, Spark its shuffle and
spilled blocks there too (``SPARK_LOCAL_DIRS``, which wins, on a standalone worker), and PySpark's
start a file in the Python temp dir (``TMPDIR``). A full one (``ENOSPC``,
``EDQUOT``) is the "service" ``LOCAL_DISK``: not retried (freeing space takes an operator).

Past those bounds a run fails, and ``describe(exc)`` turns what the client library raised (a
pyarrow ``OSError`` quoting the AWS SDK, a SQLAlchemy ``OperationalError`` quoting the
connection URL, a ``KafkaException``, a ``Py4JJavaError``, an ``OSError`` with ``ENOSPC``) into
**one line** naming the service (the local disk: "local disk full: ... <path>"), what failed and what to do -- never a credential: URLs lose their passwords, keys are masked.
The CLI and the spark-submit jobs print that line and exit 1, so Airflow's retry runs the
task again once the service is back (a run is exact when repeated: contract §5).
"""

from __future__ import annotations

import errno
import os
import re
from dataclasses import dataclass

from cdc_codecs import TidelakeError



# The environment variables the bounds below are read from, once, at import (a process forked from
# one that imported this module keeps its values: spark.runtime.forkserver compares them).
SETTINGS: list[str] = []


def _setting(name: str, default: float) -> float:
    """A bound, overridden by ``$TIDELAKE_<NAME>`` in the driver's environment (the fault bench shortens them)."""
    SETTINGS.append(f"TIDELAKE_{name}")
    value = os.environ.get(SETTINGS[-1])
    return type(default)(float(value)) if value else default


# -- the bounds (seconds); docs/operating.md "When a service fails" states them.
S3_CONNECT_TIMEOUT = _setting("S3_CONNECT_TIMEOUT", 5.0)
S3_REQUEST_TIMEOUT = _setting("S3_REQUEST_TIMEOUT", 30.0)
S3_MAX_ATTEMPTS = _setting("S3_MAX_ATTEMPTS", 5)
CATALOG_CONNECT_TIMEOUT = _setting("CATALOG_CONNECT_TIMEOUT", 10)
CATALOG_STATEMENT_TIMEOUT = _setting("CATALOG_STATEMENT_TIMEOUT", 60.0)
CATALOG_CLIENT_GRACE = _setting("CATALOG_CLIENT_GRACE", 15.0)  # past the server's statement timeout: it stopped answering
KAFKA_SOCKET_TIMEOUT = _setting("KAFKA_SOCKET_TIMEOUT", 30.0)
KAFKA_CALL_TIMEOUT = _setting("KAFKA_CALL_TIMEOUT", 30.0)
SPARK_NO_EXECUTOR_TIMEOUT = _setting("SPARK_NO_EXECUTOR_TIMEOUT", 180.0)
# Set by spark.runtime.session.watch_executors when it cancelled jobs that had no executor.
spark_stalled: str | None = None

S3, CATALOG, KAFKA, SPARK = "object storage (S3)", "Iceberg catalog", "Kafka", "Spark"
# The run's local scratch space: Spark's spark.local.dir / SPARK_LOCAL_DIRS (PySpark's job data, shuffle and
# spilled blocks, on the driver and the workers) and the Python temp dir (TMPDIR).
LOCAL_DISK = "local disk"



def s3_retry_strategy() -> object:
    """Arrow's S3 retry strategy (``pyarrow.fs.AwsStandardS3RetryStrategy`` with ``S3_MAX_ATTEMPTS``)."""
    import pyarrow.fs as pafs

    return pafs.AwsStandardS3RetryStrategy(max_attempts=S3_MAX_ATTEMPTS)


def _s3_retries_class() -> type:
    import pyarrow.fs as pafs

    class S3Retries(pafs.AwsStandardS3RetryStrategy):  # type: ignore[misc, valid-type]
        """For pyiceberg's ``s3.retry-strategy-impl``, which builds the class without arguments."""

        def __init__(self) -> None:
            super().__init__(max_attempts=S3_MAX_ATTEMPTS)

    return S3Retries


def __getattr__(name: str) -> object:  # ``spark.runtime.services.S3Retries``, built when pyiceberg imports it
    if name == "S3Retries":
        return _s3_retries_class()
    raise AttributeError(name)


def s3_fileio_properties() -> dict[str, str]:
    """pyiceberg FileIO properties bounding its S3 calls the way ``S3Storage`` bounds the archive's."""
    return {"s3.connect-timeout": str(S3_CONNECT_TIMEOUT), "s3.request-timeout": str(S3_REQUEST_TIMEOUT),
            "s3.retry-strategy-impl": f"{__name__}.S3Retries"}


def boto_config() -> object:
    """botocore's ``Config`` for S3: the same timeouts, the standard retry mode, ``S3_MAX_ATTEMPTS`` attempts."""
    from botocore.config import Config

    return Config(connect_timeout=S3_CONNECT_TIMEOUT, read_timeout=S3_REQUEST_TIMEOUT,
                  retries={"mode": "standard", "total_max_attempts": S3_MAX_ATTEMPTS})


_ADVICE = {
    S3: "check that the object store is reachable and answering (endpoint, credentials, bucket); "
        "the task's retry resumes exactly",
    CATALOG: "check that the catalog's database is up and accepting connections; the task's retry resumes exactly",
    KAFKA: "check that the brokers in kafka.bootstrap_servers are up and reachable; the task's retry resumes exactly",
    SPARK: "check the Spark cluster (master, workers, executor logs); the task's retry resumes exactly",
    LOCAL_DISK: "free space there, or point TMPDIR and spark.local.dir (SPARK_LOCAL_DIRS on the Spark workers) at a "
                "larger volume; the task's retry resumes exactly",
}
# How a service's failure reads: "<service> unavailable: ...", the local disk "local disk full: ...".
_STATE = {LOCAL_DISK: "full"}


class ServiceError(TidelakeError):
    """A service did not answer, or answered with a failure, within its bounds."""

    def __init__(self, service: str, what: str) -> None:
        self.service, self.what = service, what
        super().__init__(f"{service} {_STATE.get(service, 'unavailable')}: {what}; {_ADVICE[service]}")


@dataclass(frozen=True)
class _Match:
    service: str
    what: str


# user:password@ in URLs; key=value secrets in connection strings and messages
_URL_PASSWORD = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.\-]*://)(?P<user>[^:/@\s]+):(?P<pw>[^@\s]*)@")
_SECRET_PAIRS = re.compile(r"(?i)\b(password|secret[_-]?access[_-]?key|secret|token|sasl\.password)(\s*[=:]\s*)('[^']*'|\"[^\"]*\"|[^\s,;&]+)")


def redact(text: str) -> str:
    """``text`` without credentials: URL passwords and ``password=...``-like values become ``***``."""
    text = _URL_PASSWORD.sub(lambda m: f"{m['scheme']}{m['user']}:***@", text)
    return _SECRET_PAIRS.sub(lambda m: f"{m[1]}{m[2]}***", text)


def _first_line(text: str, limit: int = 300) -> str:
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    # SQLAlchemy appends "[SQL: ...]" / "(Background on this error at: ...)" lines: the cause is the first.
    line = lines[0] if lines else ""
    line = re.sub(r"^\([\w.]+\)\s*", "", line)  # "(psycopg2.OperationalError) connection ..." -> "connection ..."
    return redact(line if len(line) <= limit else line[: limit - 3] + "...")


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    while exc is not None and exc not in seen and len(seen) < 20:
        seen.append(exc)
        # ``raise ... from None`` hides the context: the message raised says it all then.
        exc = exc.__cause__ if exc.__cause__ is not None else None if exc.__suppress_context__ else exc.__context__
    return seen


_SPARK_LOST = ("ExecutorLostFailure", "Lost executor", "SparkContext was shut down", "Master removed our application",
               "All masters are unresponsive", "Connection refused", "Answer from Java side is empty")
_S3_HINTS = ("AWS Error", "curlCode", "S3 ", "s3://", "HeadObject", "GetObject", "PutObject", "ListObjects", "When reading",
             "When writing", "When listing", "When getting information", "When initiating", "When completing",
             "When uploading", "When deleting", "When creating")


def _s3_words(text: str) -> bool:
    """Whether an error's text is the S3 client's (pyarrow's S3 file system quotes the AWS SDK)."""
    return any(h in text for h in _S3_HINTS)


def storage_failed(exc: OSError) -> bool:
    """Whether an ``OSError`` met while a file is read is the storage's (the system's errno, the S3
    client's words), not the file's bytes: Arrow's Parquet reader refuses damaged bytes with a bare
    ``OSError`` ("Couldn't deserialize thrift", "Corrupt snappy compressed data"), no errno."""
    return exc.errno is not None or _s3_words(str(exc))


_DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
_DISK_FULL_TEXTS = ("No space left on device", "Disk quota exceeded")
# A Java exception's path: "/spark/blockmgr-.../temp_shuffle_... (No space left on device)".
_JAVA_PATH = re.compile(r"(/[^\s:()'\"]+)\s*\((?:No space left on device|Disk quota exceeded)\)")


def scratch_dirs() -> list[str]:
    """This process's local scratch space: Spark's local dir in use (the running SparkContext's, where PySpark
    writes each job's tasks; else ``SPARK_LOCAL_DIRS``, else Java's temp dir ``/tmp``), then the Python temp
    dir (``TMPDIR``: as set, since ``tempfile`` skips a directory it cannot write to, a full one)."""
    dirs: list[str] = []
    local = None
    try:
        from pyspark import SparkContext

        active = SparkContext._active_spark_context
        if active is not None and getattr(active, "_temp_dir", None):
            local = os.path.dirname(active._temp_dir)  # <spark.local.dir>/spark-<uuid>/pyspark-<uuid>
            local = os.path.dirname(local)
    except Exception:  # noqa: BLE001 - no pyspark, or a context stopping: the settings are what is known
        local = None
    for d in ([local] if local else (os.environ.get("SPARK_LOCAL_DIRS") or "/tmp").split(",")) + [
            os.environ.get("TMPDIR") or os.environ.get("TEMP") or os.environ.get("TMP") or "/tmp"]:
        if d and d.strip() and d.strip() not in dirs:
            dirs.append(d.strip())
    return dirs


def _mount_point(path: str) -> str:
    p = os.path.abspath(path)
    while not os.path.ismount(p) and p != os.path.dirname(p):
        p = os.path.dirname(p)
    return p


def _disk_full(exc: BaseException, text: str) -> _Match | None:
    """ENOSPC / EDQUOT: an ``OSError`` of Python's (PySpark writing a job's tasks to the temp dir, a local
    archive) or the text of Spark's (an executor's shuffle or block write), as "local disk full: <where>"."""
    if isinstance(exc, OSError) and exc.errno in _DISK_FULL_ERRNOS:
        cause = os.strerror(exc.errno)
        path = exc.filename
    elif any(t in text for t in _DISK_FULL_TEXTS):
        cause = next(t for t in _DISK_FULL_TEXTS if t in text)
        found = _JAVA_PATH.search(text)
        path = found[1] if found else None
    else:
        return None
    if path:
        where = f"writing {path} (the filesystem mounted at {_mount_point(str(path))})"
    else:
        where = "writing to the run's scratch space (" + ", ".join(scratch_dirs()) + \
                "; on a Spark cluster also the workers' SPARK_LOCAL_DIRS)"
    return _Match(LOCAL_DISK, f"{cause} {where}")


def _classify_one(exc: BaseException) -> _Match | None:
    module = type(exc).__module__ or ""
    name = type(exc).__name__
    text = str(exc)
    if isinstance(exc, ServiceError):
        return _Match(exc.service, exc.what)
    if isinstance(exc, OSError) or module.startswith("py4j") or name in (
            "Py4JJavaError", "SparkException", "PythonException", "StorageError"):
        full = _disk_full(exc, text)
        if full is not None:
            return full
    if module.startswith(("sqlalchemy", "psycopg2", "psycopg", "sqlite3")) and name in (
            "OperationalError", "InterfaceError", "DatabaseError", "DisconnectionError", "TimeoutError", "InternalError"):
        return _Match(CATALOG, _first_line(text))
    if module.startswith("pyiceberg") and name in ("ServerError", "ServiceUnavailableError", "AuthorizationExpiredError"):
        return _Match(CATALOG, _first_line(text))
    if module.startswith("botocore") or module.startswith("boto3"):
        return _Match(S3, _first_line(text))
    if module.startswith(("confluent_kafka", "cimpl")) or (name == "KafkaHookError" and "not found" not in text):
        return _Match(KAFKA, _first_line(text))
    if module.startswith("py4j") or name in ("Py4JJavaError", "Py4JNetworkError", "SparkException"):
        # The cluster failing (the JVM gone, executors lost, the application removed) -- not a task's own
        # error, whose traceback (in the Java one) is a bug's and stays.
        lost = next((m for m in _SPARK_LOST if m in text), None)
        if spark_stalled and "cancel" in text.lower():
            return _Match(SPARK, spark_stalled)
        if name == "Py4JNetworkError" or lost:
            return _Match(SPARK, lost or _first_line(text))
    if name == "StorageError" and "already exists" not in text:
        return _Match(S3, _first_line(text))
    if isinstance(exc, OSError) and _s3_words(text):
        return _Match(S3, _first_line(text))
    return None


def classify(exc: BaseException) -> ServiceError | None:
    """The service a failure came from, as a ``ServiceError`` with one line; None if it is not a service's.

    A tidelake error is its own account (a lost lease caused by a dead connection says the lease was
    lost): only its own kind is classified (``KafkaHookError``, ``StorageError``), not what caused it."""
    if isinstance(exc, TidelakeError):
        match = _classify_one(exc)
        return None if match is None else exc if isinstance(exc, ServiceError) else ServiceError(match.service, match.what)
    for e in _chain(exc):
        match = _classify_one(e)
        if match is not None:
            return e if isinstance(e, ServiceError) else ServiceError(match.service, match.what)
    return None


def describe(exc: BaseException) -> str:
    """One line for any failure: a service's as ``classify`` says, otherwise its own text, redacted."""
    found = classify(exc)
    if found is not None:
        return str(found)
    return _first_line(f"{type(exc).__name__}: {exc}" if not isinstance(exc, TidelakeError) else str(exc), 1000)
