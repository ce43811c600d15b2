"""The local daemon's fork server (``spark.runtime.forkserver``): the daemon Spark launches hands itself
over to a server that imported the task modules while the JVM started, or, if it cannot, does as before.

Here Spark's side is played as Spark's ``PythonWorkerFactory.startDaemon`` does it: ``python -m
spark.runtime.daemon pyspark.worker`` with pipes for its standard streams, the port read from its
stdout, SIGTERM to stop it, its stdin closed when the JVM goes. A real context's workers forked
this way: tests/spark/archive/test_land_spark.py."""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import orjson
import psutil
import pytest

from spark.runtime import forkserver

REPO = Path(__file__).resolve().parents[3]


def _server(tmp_path: Path, seed: str = "0") -> tuple[subprocess.Popen[bytes], str]:
    """A fork server as ``forkserver.start`` starts one (in a directory of its own), its imports done."""
    (tmp_path / "server").mkdir()
    path = str(tmp_path / "server" / "server.sock")
    env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONUNBUFFERED": "YES"}
    server = subprocess.Popen([sys.executable, "-m", "spark.runtime.forkserver", path], cwd=REPO, stdin=subprocess.PIPE,
                              env=env)
    deadline = time.monotonic() + 60
    while not os.path.exists(path + forkserver.READY) and time.monotonic() < deadline:
        time.sleep(0.05)
    return server, path


def _launch(path: str | None, seed: str = "0", preload: bool = True, **extra: str) -> tuple[subprocess.Popen[bytes], int]:
    """The daemon launched as Spark launches it; the port it reports (a daemon over loopback TCP)."""
    env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONUNBUFFERED": "YES", "PYTHON_WORKER_FACTORY_SECRET": "s3cret",
           "PYTHONPATH": str(REPO), **extra}
    env.pop(forkserver.SOCKET_ENV, None)
    if path is not None:
        env[forkserver.SOCKET_ENV] = path
    if not preload:
        env["TIDELAKE_DAEMON_PRELOAD"] = "0"
    daemon = subprocess.Popen([sys.executable, "-m", "spark.runtime.daemon", "pyspark.worker"], cwd=REPO,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    assert daemon.stdout is not None
    header = daemon.stdout.read(4)
    assert len(header) == 4, "the daemon wrote no port"
    return daemon, struct.unpack(">i", header)[0]


def _listener(port: int) -> int:
    """The pid listening on ``port`` (the daemon PySpark's workers are forked from)."""
    for conn in psutil.net_connections("tcp"):
        if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN:
            return conn.pid
    raise AssertionError(f"nothing listens on {port}")


def _gone(pid: int, within: float = 20.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def _stop(*procs: subprocess.Popen[bytes]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait(10)


def test_the_daemon_spark_launches_is_forked_by_the_server_and_stops_on_sigterm(tmp_path: Path) -> None:
    server, path = _server(tmp_path)
    daemon, port = _launch(path)
    try:
        real = _listener(port)
        assert real != daemon.pid and psutil.Process(real).ppid() == server.pid  # the server's child
        # A worker it forks is its child, and has the environment Spark launched the daemon with (the
        # server's own has no secret): it accepts Spark's secret.
        with socket.create_connection(("127.0.0.1", port)) as conn:
            stream = conn.makefile("rwb")
            worker = psutil.Process(struct.unpack(">i", stream.read(4))[0])
            assert worker.ppid() == real
            stream.write(struct.pack(">i", 6) + b"s3cret")
            stream.flush()
            assert stream.read(struct.unpack(">i", stream.read(4))[0]) == b"ok"
        # Spark stops the daemon with SIGTERM to what it launched: passed on, both end.
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(20) == 0
        assert _gone(real)
    finally:
        _stop(daemon, server)


def test_the_daemon_ends_when_spark_closes_its_stdin(tmp_path: Path) -> None:
    """The JVM gone (its end of the daemon's stdin closed): the forked daemon shuts down, the launched one exits."""
    server, path = _server(tmp_path)
    daemon, port = _launch(path)
    try:
        real = _listener(port)
        assert daemon.stdin is not None
        daemon.stdin.close()
        assert daemon.wait(20) == 0
        assert _gone(real)
        assert server.poll() is None  # the server serves the driver's next context
    finally:
        _stop(daemon, server)


@pytest.mark.parametrize("case", ["no server", "another hash seed", "another thread count", "preload off", "server stopped"])
def test_a_daemon_the_server_cannot_take_imports_its_modules_itself(tmp_path: Path, case: str) -> None:
    server, path = _server(tmp_path)
    try:
        if case == "no server":
            daemon, port = _launch(str(tmp_path / "absent.sock"))
        elif case == "another hash seed":  # PySpark's workers must share one seed: a shuffle's partitions hash with it
            daemon, port = _launch(path, seed="7")
        elif case == "another thread count":  # numpy's OpenBLAS sizes its pool from it at import
            daemon, port = _launch(path, OMP_NUM_THREADS=str(os.cpu_count() or 1) + "7")
        elif case == "server stopped":  # ready, yet not answering: the daemon waits seconds, not minutes
            server.send_signal(signal.SIGSTOP)
            began = time.monotonic()
            daemon, port = _launch(path)
            assert time.monotonic() - began < forkserver.READY_TIMEOUT + 20
            server.send_signal(signal.SIGCONT)
        else:  # the benchmarks' Spark alone: not tidelake's imports at all
            daemon, port = _launch(path, preload=False)
        try:
            assert _listener(port) == daemon.pid
            # No daemon of the server's (a stopped one, resumed, forks for the request it finds queued:
            # that child exits without "go", not touching Spark's streams).
            assert all(_gone(child.pid) for child in psutil.Process(server.pid).children())
        finally:
            _stop(daemon)
    finally:
        _stop(server)


def test_the_server_exits_with_the_driver_and_leaves_no_file(tmp_path: Path) -> None:
    server, path = _server(tmp_path)
    server.send_signal(signal.SIGINT)  # a terminal's Ctrl-C reaches the driver's process group: ignored
    time.sleep(0.5)
    assert server.poll() is None
    assert server.stdin is not None
    server.stdin.close()  # what the driver's exit does, however it ends
    assert server.wait(20) == 0
    assert not os.path.exists(os.path.dirname(path))  # its socket, ready file and directory


def test_a_large_environment_is_handed_over_whole(tmp_path: Path) -> None:
    """One sendmsg may carry part of a long message: the streams go with the header, the rest after."""
    server, path = _server(tmp_path)
    began = time.monotonic()
    daemon, port = _launch(path, **{f"BIG{i}": "x" * 100_000 for i in range(3)})
    try:
        assert time.monotonic() - began < 30
        assert psutil.Process(_listener(port)).ppid() == server.pid
    finally:
        _stop(daemon, server)


def test_the_launched_daemon_follows_the_daemon_not_its_workers(tmp_path: Path) -> None:
    """The launched process ends when the forked daemon does, even while a worker of it lives on
    (the workers do not hold the hand-over's socket)."""
    server, path = _server(tmp_path)
    daemon, port = _launch(path)
    try:
        real = _listener(port)
        with socket.create_connection(("127.0.0.1", port)) as conn:
            worker = struct.unpack(">i", conn.makefile("rb").read(4))[0]
            os.kill(real, signal.SIGKILL)
            assert daemon.wait(20) == 0
            assert psutil.pid_exists(worker)
    finally:
        _stop(daemon, server)


def test_a_daemon_that_does_not_say_go_is_never_doubled(tmp_path: Path) -> None:
    """The forked daemon waits for ``go``: a launched daemon that gave up (and imports itself) after
    the server forked leaves nothing writing to Spark's pipe."""
    server, path = _server(tmp_path)
    read_end, write_end = os.pipe()
    stdin_read, stdin_write = os.pipe()
    try:
        payload = orjson.dumps({"executable": sys.executable, "argv": ["x", "pyspark.worker"], "env": {**os.environ, "PYTHONHASHSEED": "0"},
                                "cwd": str(REPO), "path": sys.path})
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(30)
            conn.connect(path)
            socket.send_fds(conn, [len(payload).to_bytes(4, "big")], [stdin_read, write_end, 2])
            conn.sendall(payload)
            answer = conn.recv(64)
            assert answer.startswith(b"ok ")
            child = int(answer[3:])
        assert _gone(child)  # closed without "go": the child exits
        os.close(write_end)
        write_end = -1
        assert os.read(read_end, 64) == b""  # and wrote no port
    finally:
        for fd in (read_end, write_end, stdin_read, stdin_write):
            if fd >= 0:
                os.close(fd)
        _stop(server)


def test_a_driver_starts_one_server_for_all_its_contexts() -> None:
    first = forkserver.start()
    server = forkserver._server
    assert forkserver.start() == first and forkserver._server is server
    deadline = time.monotonic() + 60
    while not os.path.exists(first) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert os.path.exists(first)
    server.kill()  # gone (whatever killed it): the next context gets a new one
    server.wait(10)
    assert forkserver.start() != first and forkserver._server.poll() is None


class Conf(dict):
    """A SparkConf's reads, over a dict."""

    def contains(self, key: str) -> bool:
        return key in self


@pytest.mark.parametrize(("conf", "wanted"), [
    ({"spark.master": "local[2]"}, True),
    ({"spark.master": "local[*]", "spark.python.daemon.module": "spark.runtime.daemon"}, True),
    ({"spark.master": "spark://host:7077"}, False),  # a cluster keeps PySpark's own daemon
    ({"spark.master": "spark://host:7077", "spark.python.daemon.module": "spark.runtime.daemon"}, False),
    ({"spark.master": "yarn", "spark.python.daemon.module": "spark.runtime.daemon"}, False),
    ({"spark.master": "local[2]", "spark.python.daemon.module": "pyspark.daemon"}, False),
    ({"spark.master": "local[2]", "spark.python.use.daemon": "false"}, False),
    ({"spark.master": "local[2]", "spark.executorEnv.TIDELAKE_DAEMON_PRELOAD": "0"}, False),  # Spark alone
    ({"spark.master": "local[2]", f"spark.executorEnv.{forkserver.SOCKET_ENV}": "/elsewhere.sock"}, False),
])
def test_a_server_is_started_only_for_tidelake_s_local_daemon_with_its_preload(conf: dict, wanted: bool) -> None:
    from spark.runtime.session import _preloading_daemon

    assert _preloading_daemon(Conf(conf)) is wanted
