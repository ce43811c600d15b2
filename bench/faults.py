"""python -m bench faults: the fault matrix -- real services failing under real ``tidelake`` runs.

Services: Kafka (noida-db), S3 (SeaweedFS, directly or through a small fault-injecting proxy), the
Iceberg SQL catalog in a PostgreSQL of the bench's own (``initdb`` + ``pg_ctl``), and for the Spark faults
a Spark standalone master and worker (the pipeline's ``driver_max_messages = 0`` sends every stage to it)
with the run's local scratch space (``TMPDIR``, ``SPARK_LOCAL_DIRS`` of the driver and the worker) on a
tmpfs of its own (mounting it takes root). Each fault is injected at each stage of a run where it makes
sense (the Spark executor only where Spark runs): the run is paused at the stage's step (``TIDELAKE_STOP_AT``,
SIGSTOP), the fault is injected, the run resumes. Then the service comes back and the same
command runs again (the retry, as Airflow would run it). Each cell reads

- ``survived``       the run completed, and the pipeline reads exactly what a clean pipeline does;
- ``failed clearly`` the run ended within its bound, exit code 1, its last stderr line naming the
                     service ("... unavailable: ...; check ...", "local disk full: ...; free space ..."),
                     at most 3 lines on stderr (besides what a clean run prints there too: on Spark,
                     the JVM's and Spark's start-up warnings); the retry
                     then completed at once (no lease to wait for) and the pipeline is exact;
- ``WRONG: ...``     anything else (a traceback, a hang past the bound, a retry refused, data that
                     differ from the clean pipeline's).

The bounds are shortened for the bench through ``TIDELAKE_<BOUND>`` (``spark.runtime.services``), so
a hung service fails a call in seconds rather than minutes; the defaults are documented in
docs/operating.md. ``--faults`` and ``--stages`` pick a part of the matrix.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import http.client
import dataclasses
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Iterator

from spark.runtime.embedded import (
    BIN, StandaloneCluster, seaweed_ports, free_port, postgres_service, remove_weed_sockets, standalone_cluster,
    start_process_group, stop_process_group, wait_for_port,
)

UTC = dt.timezone.utc
T0 = dt.datetime(2024, 1, 1, tzinfo=UTC)
MINUTE = dt.timedelta(minutes=1)
INTERVALS = 3
KEY, SECRET = "tidelake-bench", "tidelake-bench-secret"

# Bounds shortened for the bench (the defaults: docs/operating.md, "When a service fails").
SHORT_BOUNDS = {
    "TIDELAKE_S3_CONNECT_TIMEOUT": "2", "TIDELAKE_S3_REQUEST_TIMEOUT": "4", "TIDELAKE_S3_MAX_ATTEMPTS": "5",
    "TIDELAKE_CATALOG_CONNECT_TIMEOUT": "3", "TIDELAKE_CATALOG_STATEMENT_TIMEOUT": "5", "TIDELAKE_CATALOG_CLIENT_GRACE": "3",
    "TIDELAKE_KAFKA_SOCKET_TIMEOUT": "5", "TIDELAKE_KAFKA_CALL_TIMEOUT": "5",
}
# What a run may take with those bounds: a few calls' timeouts, the lease's release patience (20 s), start-up -- or,
# surviving a flaky store, every call's retries with the SDK's backoff (maintenance makes hundreds of calls).
RUN_BOUND = 180.0


# ------------------------------------------------------------------ services that can fail


class Seaweed:
    """SeaweedFS (``weed mini``) on fixed ports over one data folder: killed, paused, started again."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.ports = seaweed_ports(5)  # every port named, its admin service's too: its sockets in /tmp are found by them
        self.data = workdir / "seaweed"
        self.data.mkdir(parents=True)
        self.proc: subprocess.Popen | None = None
        self.endpoint = f"http://127.0.0.1:{self.ports[0]}"

    def start(self) -> None:
        s3, master, volume, filer, admin = self.ports
        log = self.workdir / "seaweed.log"
        self.proc = start_process_group(
            [str(BIN / "weed"), "mini", f"-dir={self.data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-s3.port={s3}",
             f"-master.port={master}", f"-volume.port={volume}", f"-filer.port={filer}", f"-admin.port={admin}", "-webdav=false",
             "-admin.ui=false", "-s3.port.iceberg=0", "-s3.port.lance=0", "-master.telemetry=false", "-s3.allowDeleteBucketNotEmpty=false"],
            log, {**os.environ, "AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": SECRET})
        wait_for_port(s3, self.proc, "SeaweedFS S3", log, timeout=60)
        deadline = time.monotonic() + 60
        while True:  # up when its buckets list and an object reads back (the volume server registered)
            try:
                client = self.client()
                names = [b["Name"] for b in client.list_buckets()["Buckets"]]
                if "lake" in names:
                    client.put_object(Bucket="lake", Key="probe", Body=b"probe")
                    assert client.get_object(Bucket="lake", Key="probe")["Body"].read() == b"probe"
                    objects = client.list_objects_v2(Bucket="lake", Prefix="reference/", MaxKeys=5).get("Contents", [])
                    for o in objects:
                        client.get_object(Bucket="lake", Key=o["Key"])["Body"].read()
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)

    def client(self):  # noqa: ANN201
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=KEY, aws_secret_access_key=SECRET,
                            region_name="us-east-1")

    def kill(self) -> None:
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        time.sleep(0.5)

    def pause(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGCONT)
            stop_process_group(self.proc)
            remove_weed_sockets(self.ports)


class Broker:
    """noida-db as Kafka on a fixed port over one data folder: killed and started again."""

    def __init__(self, workdir: Path) -> None:
        self.workdir, self.port = workdir, free_port()
        self.data = workdir / "noida"
        self.data.mkdir(parents=True)
        self.proc: subprocess.Popen | None = None
        self.bootstrap = f"127.0.0.1:{self.port}"

    def start(self) -> None:
        log = self.workdir / "noida.log"
        exe = str(BIN / "noida-db")
        self.proc = start_process_group([exe, "start", "--data-dir", str(self.data), "--host", "127.0.0.1", "--only", "kafka",
                                         "--kafka-port", str(self.port)], log)
        wait_for_port(self.port, self.proc, "noida-db", log)

    def kill(self) -> None:
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def pause(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGCONT)
            stop_process_group(self.proc)


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry))
    return out


def signal_postgres(pg: Any, sig: int) -> None:
    """Every process of the PostgreSQL server (postmaster and backends): SIGSTOP hangs it as a frozen host would."""
    pid = pg.postmaster_pid()
    if pid is None:
        return
    for p in [pid, *_children(pid)]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, sig)


class FaultProxy:
    """An HTTP proxy in front of the S3 endpoint that passes requests through, or answers some itself:
    ``flaky`` -- every third request 503 SlowDown (retried by the clients: the run survives);
    ``outage`` -- every request 500 InternalError (the run fails, naming S3)."""

    def __init__(self, backend: str) -> None:
        self.backend = backend.split("://", 1)[1]
        self.mode = "pass"
        self.count = 0
        self.injected = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _forward(self) -> None:
                if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                    body = self._dechunked()  # Arrow's S3 client streams parts with HTTP chunked encoding
                else:
                    length = int(self.headers.get("Content-Length") or 0)
                    body = self.rfile.read(length) if length else b""
                proxy.count += 1
                fault = ((proxy.mode == "flaky" and proxy.count % 3 == 0) or proxy.mode == "outage")
                if fault:
                    proxy.injected += 1
                    code, error = (503, "SlowDown") if proxy.mode == "flaky" else (500, "InternalError")
                    payload = (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{error}</Code>'
                               f"<Message>injected by the bench</Message></Error>").encode()
                    self.send_response(code)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(payload)
                    return
                conn = http.client.HTTPConnection(proxy.backend, timeout=60)
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ("connection", "proxy-connection", "transfer-encoding", "content-length")}
                headers["Content-Length"] = str(len(body))
                conn.request(self.command, self.path, body=body or None, headers=headers)
                answer = conn.getresponse()
                data = answer.read()
                self.send_response(answer.status, answer.reason)
                for k, v in answer.getheaders():
                    if k.lower() not in ("connection", "transfer-encoding", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data) if self.command != "HEAD" else answer.getheader("Content-Length") or 0))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                conn.close()

            def _dechunked(self) -> bytes:
                out = bytearray()
                while True:
                    size = int(self.rfile.readline().split(b";", 1)[0].strip() or b"0", 16)
                    if size == 0:
                        while self.rfile.readline().strip():  # trailers, then the blank line
                            pass
                        return bytes(out)
                    out += self.rfile.read(size)
                    self.rfile.readline()  # the CRLF after the chunk

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()


def _executor_backends(cluster: StandaloneCluster) -> dict[str, int]:
    """The executor JVMs (``CoarseGrainedExecutorBackend``) the cluster's worker started: executor id -> pid.
    The worker starts them in its own process group; other Spark clusters on the machine are not touched."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.getpgid(int(entry)) != cluster.worker_pid:
                continue
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"org.apache.spark.executor.CoarseGrainedExecutorBackend" in argv and b"--executor-id" in argv:
            out[argv[argv.index(b"--executor-id") + 1].decode()] = int(entry)
    return out


class ExecutorKiller:
    """Kills (SIGKILL) the executor JVM of the standalone worker as soon as it runs a task of the run, while the
    worker stays up: the tasks in flight are lost, and Spark must run them again on an executor the master
    relaunches. Tasks are seen on the driver's status API (``spark.ui.port``, which the lab sets per run)."""

    def __init__(self) -> None:
        self.thread: threading.Thread | None = None
        self.done = threading.Event()
        self.killed = ""

    def start(self, the_lab: Lab) -> None:
        assert the_lab.cluster is not None and the_lab.ui_port
        self.done.clear()
        self.killed = ""
        cluster, api = the_lab.cluster, f"http://127.0.0.1:{the_lab.ui_port}/api/v1/applications"

        def get(url: str) -> Any:
            import orjson

            with urllib.request.urlopen(url, timeout=2) as answer:
                return orjson.loads(answer.read())

        def watch() -> None:
            while not self.done.is_set():
                try:
                    for app in get(api):
                        for e in get(f"{api}/{app['id']}/executors"):
                            if e["id"] != "driver" and e.get("isActive") and e.get("activeTasks", 0) > 0:
                                pid = _executor_backends(cluster).get(e["id"])
                                if pid is not None:
                                    os.kill(pid, signal.SIGKILL)
                                    self.killed = f"executor {e['id']} killed with {e['activeTasks']} task(s) running"
                                    return
                except (OSError, ValueError, KeyError):
                    pass  # the UI not up yet, or the run between jobs
                time.sleep(0.05)

        self.thread = threading.Thread(target=watch, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.done.set()
        if self.thread is not None:
            self.thread.join(10)


class Scratch:
    """The run's local scratch space on a tmpfs of its own: ``fill`` writes a file until the filesystem is full
    (ENOSPC), ``free`` removes it. Mounting takes root (``mount -t tmpfs``); unmounted at the end."""

    SIZE = "64m"

    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.SIZE}", "tmpfs", str(path)], check=True,
                       capture_output=True)
        self.tmp, self.driver, self.worker = path / "tmp", path / "spark-driver", path / "spark-worker"
        for d in (self.tmp, self.driver, self.worker):
            d.mkdir()
        self.filler = path / "filler"

    def fill(self) -> None:
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            for size in (1 << 20, 4096):  # then the last partial pages
                with contextlib.suppress(OSError):
                    while True:
                        os.write(fd, b"\0" * size)
        finally:
            os.close(fd)

    def free(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.filler.unlink()

    def unmount(self) -> None:
        if subprocess.run(["umount", str(self.path)], capture_output=True, check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(self.path)], capture_output=True, check=False)


# ------------------------------------------------------------------ the lab


@dataclass
class Cell:
    fault: str
    stage: str
    outcome: str = ""
    seconds: float = 0.0
    detail: str = ""


@dataclass
class Lab:
    workdir: Path
    s3: Seaweed
    broker: Broker
    pg: Any
    proxy: FaultProxy
    topic: str = "cdc"
    reference: dict[int, Any] = field(default_factory=dict)
    reference_outputs: dict[str, str] = field(default_factory=dict)
    made: int = 0
    # The Spark faults' part, started by ``with_spark`` the first time a cell needs it.
    stack: contextlib.ExitStack | None = None
    cluster: StandaloneCluster | None = None
    scratch: Scratch | None = None
    on_spark: set[Path] = field(default_factory=set)
    ui_port: int = 0
    killer: ExecutorKiller = field(default_factory=ExecutorKiller)

    def with_spark(self) -> None:
        """A Spark standalone master and worker whose local dirs (``SPARK_LOCAL_DIRS``), like the driver's and
        its temp dir, are on the scratch tmpfs."""
        if self.cluster is not None:
            return
        assert self.stack is not None
        if os.geteuid() != 0:
            raise RuntimeError("the Spark faults mount a tmpfs for the run's scratch space: run as root")
        self.scratch = Scratch(self.workdir / "scratch")
        self.stack.callback(self.scratch.unmount)
        env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
               "SPARK_LOCAL_DIRS": str(self.scratch.worker)}
        for k in ("TIDELAKE_STOP_AT", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            env.pop(k, None)
        self.cluster = self.stack.enter_context(standalone_cluster(self.workdir / "cluster", env=env))

    def pipeline(self, *, proxied: bool = False, name: str | None = None, top: str = "", spark: bool = False) -> Path:
        """A pipeline file of a fresh pipeline over the lab's topic (``top``: more top-level settings); ``spark``:
        every stage on the lab's standalone cluster (``driver_max_messages = 0``, ``--spark <master>``)."""
        if spark:
            self.with_spark()
            top = "driver_max_messages = 0\n" + top
        self.made += 1
        name = name or f"f{self.made}"
        endpoint = self.proxy.endpoint if proxied else self.s3.endpoint
        path = self.workdir / f"{name}.toml"
        path.write_text(
            f'name = "{name}"\n{top}[kafka]\nbootstrap_servers = "{self.broker.bootstrap}"\n'
            f'[[topics]]\nname = "{self.topic}"\nprotocol = "canal-json"\n'
            f'[storage]\nurl = "s3://lake/{name}"\nendpoint_url = "{endpoint}"\n'
            f'[catalog]\ntype = "sql"\nproperties = {{ uri = "postgresql+psycopg2://root@127.0.0.1:{self.pg.port}/postgres" }}\n'
            f'[schedule]\ncron = "* * * * *"\nstart_date = "{T0.isoformat()}"\n')
        if spark:
            self.on_spark.add(path)
        return path

    def env(self, stop_at: str | None = None, config: Path | None = None) -> dict[str, str]:
        env = {**os.environ, "AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": SECRET, **SHORT_BOUNDS}
        env.pop("TIDELAKE_STOP_AT", None)
        env.pop("TIDELAKE_RUN_ID", None)
        if stop_at:
            env["TIDELAKE_STOP_AT"] = stop_at
        if config in self.on_spark and self.scratch is not None:
            # The driver's scratch space on the tmpfs: Python's temp dir (PySpark writes each job's tasks there)
            # and Spark's local dirs; the status API on a port of the run's own (ExecutorKiller reads it).
            self.ui_port = free_port()
            env.update(TMPDIR=str(self.scratch.tmp), SPARK_LOCAL_DIRS=str(self.scratch.driver),
                       PYSPARK_SUBMIT_ARGS=f"--conf spark.ui.port={self.ui_port} pyspark-shell")
        return env

    def command(self, config: Path, what: str, i: int = 0) -> list[str]:
        exe = [str(BIN / "tidelake"), "-q"]
        if what == "run":
            a = T0 + i * MINUTE
            on = ["--spark", self.cluster.master_url] if config in self.on_spark and self.cluster is not None else []
            return [*exe, "run", "--config", str(config), "--start", a.isoformat(), "--end", (a + MINUTE).isoformat(), *on]
        if what == "maintain":
            return [*exe, "maintain", "--config", str(config)]
        if what == "changes":
            return [*exe, "changes", "--config", str(config), "--from", str(min(self.reference)), "--format", "json"]
        if what == "query":
            return [*exe, "query", "--config", str(config), "--json", "SELECT count(*) AS n, sum(id) AS s FROM shop.t0"]
        raise ValueError(what)

    def run(self, config: Path, what: str, i: int = 0, timeout: float = RUN_BOUND) -> subprocess.CompletedProcess:
        return subprocess.run(self.command(config, what, i), env=self.env(config=config), capture_output=True, text=True,
                              timeout=timeout, check=False)

    def snapshot(self, config: Path) -> dict[int, Any]:
        """Every published W and the rows of every table at it, read with the library (the checked state)."""
        from spark.config import load_pipeline_config
        from spark.query.read import published_watermarks, read_pipeline
        from spark.runtime.credentials import from_environment
        from spark.tables.catalog import close_catalogs

        conf = from_environment(load_pipeline_config(str(config)))  # the lab's keys on this config, not os.environ's
        conf = dataclasses.replace(conf, storage=dataclasses.replace(conf.storage, access_key_id=KEY, secret_access_key=SECRET))
        out = {}
        for w in published_watermarks(conf):
            _, tables = read_pipeline(conf, w)
            out[w] = {k: sorted(map(repr, v.to_pylist())) for k, v in tables.items()}
        close_catalogs()
        return out


@contextlib.contextmanager
def lab(workdir: Path) -> Iterator[Lab]:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from cdc_codecs import get_encoder
    from spark.demo.workload import Workload, WorkloadSpec

    with contextlib.ExitStack() as stack:
        s3 = Seaweed(workdir / "s3")
        stack.callback(s3.stop)
        s3.start()
        s3.client().create_bucket(Bucket="lake")
        broker = Broker(workdir / "kafka")
        stack.callback(broker.stop)
        broker.start()
        pg = stack.enter_context(postgres_service(workdir / "pg"))
        proxy = FaultProxy(s3.endpoint)
        stack.callback(proxy.stop)
        the_lab = Lab(workdir, s3, broker, pg, proxy, stack=stack)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        for f in admin.create_topics([NewTopic(the_lab.topic, 2, 1, config={"retention.ms": "-1"})]).values():
            f.result(30)
        # A history spread over the intervals: every one-minute interval has changes and watermarks.
        spec = WorkloadSpec(tables=2, events=240, seed=5, key_space=30, watermark_every=12)
        records = get_encoder("canal-json").encode_all(list(Workload(spec).events()), 2)
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        span_ms = (INTERVALS + 1) * 60_000
        first = int(T0.timestamp() * 1000)
        for i, r in enumerate(records):
            producer.produce(the_lab.topic, key=r.key, value=r.value, partition=r.partition,
                             timestamp=first + i * span_ms // len(records))
        assert producer.flush(30) == 0
        del producer, admin  # gone before the broker is first killed: no client of the bench's left reconnecting
        ref = the_lab.pipeline(name="reference")
        for i in range(INTERVALS):
            done = the_lab.run(ref, "run", i)
            assert done.returncode == 0, done.stderr
        the_lab.reference = the_lab.snapshot(ref)
        the_lab.reference_outputs = {w: the_lab.run(ref, w).stdout for w in ("changes", "query")}
        yield the_lab


# ------------------------------------------------------------------ faults and stages

@dataclass(frozen=True)
class Fault:
    name: str
    service: str  # the words a clear failure's line names
    inject: Callable[[Lab], None]
    restore: Callable[[Lab], None]
    proxied: bool = False
    state: str = "unavailable"  # what the line says of the service: "<service> <state>: ..."
    spark: bool = False  # the cell's pipeline runs every stage on the lab's standalone cluster
    stages: tuple[str, ...] | None = None  # the stages where the fault makes sense (None: all)
    happened: Callable[[Lab], str] | None = None  # what the fault did ("": it did not happen); None: it always does


FAULTS = [
    Fault("S3 killed", "object storage (S3)", lambda lab: lab.s3.kill(), lambda lab: lab.s3.start()),
    Fault("S3 hung (SIGSTOP)", "object storage (S3)", lambda lab: lab.s3.pause(), lambda lab: lab.s3.resume()),
    Fault("S3 503 SlowDown (1 in 3)", "object storage (S3)", lambda lab: setattr(lab.proxy, "mode", "flaky"),
          lambda lab: setattr(lab.proxy, "mode", "pass"), proxied=True),
    Fault("S3 500 outage", "object storage (S3)", lambda lab: setattr(lab.proxy, "mode", "outage"),
          lambda lab: setattr(lab.proxy, "mode", "pass"), proxied=True),
    Fault("catalog stopped (pg_ctl -m immediate)", "Iceberg catalog", lambda lab: lab.pg.stop(immediate=True),
          lambda lab: lab.pg.start()),
    Fault("catalog hung (SIGSTOP)", "Iceberg catalog", lambda lab: signal_postgres(lab.pg, signal.SIGSTOP),
          lambda lab: signal_postgres(lab.pg, signal.SIGCONT)),
    Fault("broker killed", "Kafka", lambda lab: lab.broker.kill(), lambda lab: lab.broker.start()),
    # The executor JVM killed mid-task (the worker stays): Spark reruns the tasks on a relaunched executor.
    Fault("Spark executor lost (kill -9)", "Spark", lambda lab: lab.killer.start(lab), lambda lab: lab.killer.stop(),
          spark=True, stages=("decode+fold", "rewrite+commit"), happened=lambda lab: lab.killer.killed),
    # TMPDIR and the driver's and the worker's SPARK_LOCAL_DIRS on a full filesystem, freed for the retry.
    Fault("local disk full (ENOSPC)", "local disk", lambda lab: lab.scratch.fill(), lambda lab: lab.scratch.free(),
          state="full", spark=True, stages=("snapshot+land", "decode+fold", "rewrite+commit")),
]

# stage -> (command, the step the run is paused at before the fault; None: the fault is there from the start)
STAGES = {
    "snapshot+land": ("run", None),
    "decode+fold": ("run", "landed"),
    "rewrite+commit": ("run", "decoded"),
    "commit (2nd table)": ("run", "committed:0"),
    "commit (catalog txn)": ("run", "catalog-write"),
    "tag": ("run", "isolated"),
    "checkpoint": ("run", "tagged"),
    "publish": ("run", "checkpointed"),
    "maintenance": ("maintain", None),
    "change feed": ("changes", None),
    "query": ("query", None),
}


def _stopped(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
    except OSError:
        return False


_LOG4J_TIME = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d ")


def _stderr_lines(err: str) -> list[str]:
    return [_LOG4J_TIME.sub("", line) for line in err.splitlines() if line.strip()]


def _judge(cell: Cell, fault: Fault, proc_rc: int | None, err: str, seconds: float, baseline: frozenset[str] = frozenset()) -> None:
    # ``baseline``: what a clean run of the cell's pipeline prints on stderr too (on Spark: the JVM's and Spark's
    # start-up warnings, timestamps aside), not part of the failure's account.
    lines = [line for line in _stderr_lines(err) if line not in baseline]
    cell.seconds = round(seconds, 1)
    if proc_rc is None:
        cell.outcome, cell.detail = "WRONG: hung", f"still running after {RUN_BOUND:.0f}s"
    elif proc_rc == 0:
        cell.outcome = "survived"
    elif lines and f"{fault.service} {fault.state}:" in lines[-1] and len(lines) <= 3 and "Traceback" not in err:
        cell.outcome, cell.detail = "failed clearly", lines[-1][:160]
    else:
        cell.outcome, cell.detail = "WRONG: unclear failure", " | ".join(lines[-3:])[:300] + f" ({len(lines)} lines)"


def run_cell(the_lab: Lab, fault: Fault, stage: str) -> Cell:
    cell = Cell(fault.name, stage)
    what, stop_at = STAGES[stage]
    config = the_lab.pipeline(proxied=fault.proxied, spark=fault.spark)
    target = INTERVALS - 2  # the interval the fault hits; the ones before are applied cleanly
    baseline: set[str] = set()
    for i in range(target if what == "run" else INTERVALS):
        done = the_lab.run(config, "run", i)
        if done.returncode != 0:
            cell.outcome, cell.detail = "WRONG: clean run failed", done.stderr[-300:]
            return cell
        baseline.update(_stderr_lines(done.stderr))
    restored = False
    proc: subprocess.Popen | None = None
    started = time.monotonic()
    try:
        if stop_at is None:
            fault.inject(the_lab)
        proc = subprocess.Popen(the_lab.command(config, what, target), env=the_lab.env(stop_at, config), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        if stop_at is not None:
            while proc.poll() is None and not _stopped(proc.pid):
                time.sleep(0.02)
            if proc.poll() is None:
                fault.inject(the_lab)
                started = time.monotonic()
                os.kill(proc.pid, signal.SIGCONT)
        try:
            out, err = proc.communicate(timeout=RUN_BOUND)
            rc: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            rc = None
        _judge(cell, fault, rc, err, time.monotonic() - started, frozenset(baseline))
        fault.restore(the_lab)
        restored = True
        if fault.happened is not None:
            note = fault.happened(the_lab)
            if not note:  # e.g. the stage's tasks ended before one was seen running: the fault never happened
                cell.outcome, cell.detail = "WRONG: the fault did not happen", cell.detail
                return cell
            cell.detail = f"{note}; {cell.detail}".strip("; ")
        # The retry, once the service is back: at once (no lease left to wait for), and exact.
        again = the_lab.run(config, what, target)
        if again.returncode != 0:
            cell.outcome, cell.detail = "WRONG: the retry failed", again.stderr.strip().splitlines()[-1][:300]
            return cell
        if what == "run":
            for i in range(target + 1, INTERVALS):
                done = the_lab.run(config, "run", i)
                if done.returncode != 0:
                    cell.outcome, cell.detail = "WRONG: the next run failed", done.stderr[-300:]
                    return cell
            got = the_lab.snapshot(config)
            if got != the_lab.reference:
                cell.outcome, cell.detail = "WRONG: tables differ from the clean pipeline's", \
                    f"published {sorted(got)} vs {sorted(the_lab.reference)}"
        elif what in ("changes", "query"):
            expected = the_lab.reference_outputs[what]
            if again.stdout != expected or (rc == 0 and out != expected):
                cell.outcome, cell.detail = "WRONG: output differs from the clean pipeline's", again.stdout[:200]
        return cell
    finally:
        if proc is not None and proc.poll() is None:  # the bench failed while the run was paused: not left behind
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        if not restored:
            fault.restore(the_lab)


def print_matrix(cells: list[Cell], out: Any = None) -> None:
    out = out or sys.stdout
    faults = list(dict.fromkeys(c.fault for c in cells))
    stages = list(dict.fromkeys(c.stage for c in cells))
    by = {(c.fault, c.stage): c for c in cells}
    width = max(len(s) for s in stages)
    short = {"survived": "survived", "failed clearly": "failed clearly"}
    print(f"{'stage':<{width}}  " + "  ".join(f"{f[:30]:<30}" for f in faults), file=out)
    for s in stages:
        row = []
        for f in faults:
            c = by.get((f, s))
            text = "-" if c is None else short.get(c.outcome, "WRONG") + f" {c.seconds:.0f}s"
            row.append(f"{text:<30}")
        print(f"{s:<{width}}  " + "  ".join(row), file=out)
    for c in cells:
        if c.outcome.startswith("WRONG"):
            print(f"  {c.fault} x {c.stage}: {c.outcome}: {c.detail}", file=out)
    counts = {k: sum(1 for c in cells if c.outcome.split(":")[0] == k) for k in ("survived", "failed clearly", "WRONG")}
    print(f"{len(cells)} cells: {counts['survived']} survived, {counts['failed clearly']} failed clearly, {counts['WRONG']} wrong",
          file=out)


def matrix(faults: list[Fault], stages: list[str], workdir: Path | None = None,
           progress: Callable[[Cell], None] | None = None) -> list[Cell]:
    with contextlib.ExitStack() as stack:
        folder = workdir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tidelake-faults-")))
        the_lab = stack.enter_context(lab(folder))
        cells = []
        for fault in faults:
            for stage in stages:
                if fault.stages is not None and stage not in fault.stages:
                    continue
                cell = run_cell(the_lab, fault, stage)
                cells.append(cell)
                if progress:
                    progress(cell)
        return cells


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench faults", description=__doc__.split("\n\n")[0])
    p.add_argument("--faults", help="comma-separated substrings of fault names (default: all): " +
                   "; ".join(f.name for f in FAULTS))
    p.add_argument("--stages", help="comma-separated stages (default: all): " + ", ".join(STAGES))
    args = p.parse_args(argv)
    faults = [f for f in FAULTS if not args.faults or any(k.strip().lower() in f.name.lower() for k in args.faults.split(","))]
    stages = [s for s in STAGES if not args.stages or s in [k.strip() for k in args.stages.split(",")]]
    cells = matrix(faults, stages, progress=lambda c: print(f"  {c.fault} x {c.stage}: {c.outcome} ({c.seconds}s) {c.detail}",
                                                           file=sys.stderr, flush=True))
    print_matrix(cells)
    return 1 if any(c.outcome.startswith("WRONG") for c in cells) else 0


if __name__ == "__main__":
    sys.exit(main())
