"""A fork server for the local daemon: tidelake's task modules imported while the JVM starts the context.

On a local master Spark launches PySpark's worker daemon (``spark.runtime.daemon``) on a job's
first task, and the daemon imports the task modules (``spark.runtime.preload``, ~0.9 s) before it
forks a worker: on two cores, one core waits through that. Yet the context's own start, just
before, is 1.5-2 s in which the driver only waits for the JVM. So ``session.build_context`` starts
this server first (``start``): it imports the modules while the JVM starts, then waits.

When Spark launches the daemon, the daemon hands itself over (``hand_over``): over the server's
Unix socket it passes its standard streams (SCM_RIGHTS), arguments, environment, working
directory and ``sys.path``. The server forks a child that takes them and runs PySpark's own
``daemon.manager()``: it writes its port to Spark's pipe, reads Spark's kill requests from it, and
forks workers with the modules loaded. The launched process stays as Spark's handle on the
daemon: it passes SIGTERM (Spark's ``stopDaemon``) on and exits when the daemon does. What the
daemon reads from its environment is Spark's, as before; only the imports were done earlier.

The server takes a hand-over only from the same interpreter started with the same hash seed
(PySpark gives its workers ``PYTHONHASHSEED``: a shuffle's partitions depend on it); anything
else -- no server, another interpreter, another seed, the server gone -- and the daemon imports
the modules itself, as without it. The server lives as long as the driver: it exits when the
driver's end of its standard input closes, whatever ended the driver. Daemons it forked live on
until Spark closes their own standard input, as PySpark's do.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
import threading
from typing import Any

# The context's environment variable naming the server's socket (``spark.executorEnv.<this>``):
# the daemon Spark launches finds the server by it.
SOCKET_ENV = "TIDELAKE_DAEMON_FORKSERVER"
# How long a daemon waits for the server to take it (its imports included) before importing itself.
HAND_OVER_TIMEOUT = 120.0
_HEADER = 4  # bytes of a hand-over's length

_server: Any = None  # the server's subprocess.Popen
_socket_path: str | None = None
_lock = threading.Lock()


def start() -> str:
    """The socket of this driver's fork server, started if it is not running (one per driver process,
    shared by the contexts it starts one after another)."""
    import atexit
    import shutil
    import subprocess
    import tempfile

    global _server, _socket_path
    with _lock:
        if _server is not None and _server.poll() is None and _socket_path is not None:
            return _socket_path
        directory = tempfile.mkdtemp(prefix="tidelake-forkserver-")  # private (0700): only this user connects
        atexit.register(shutil.rmtree, directory, True)
        path = os.path.join(directory, "server.sock")
        # As Spark starts the daemon: the hash seed PySpark gives the workers (SparkContext sets
        # PYTHONHASHSEED in the executors' environment from the driver's, "0" without one), unbuffered.
        env = {**os.environ, "PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED", "0"), "PYTHONUNBUFFERED": "YES"}
        _server = subprocess.Popen([sys.executable, "-m", __name__, path], stdin=subprocess.PIPE, env=env)
        _socket_path = path
        return path


def hand_over(path: str) -> bool:
    """This process (the daemon Spark launched) handed to the server at ``path``: True once the
    daemon it became has exited; False if the server did not take it (nothing was changed)."""
    payload = json.dumps({"executable": sys.executable, "argv": sys.argv, "env": dict(os.environ),
                          "cwd": os.getcwd(), "path": sys.path}).encode()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(HAND_OVER_TIMEOUT)
            conn.connect(path)
            socket.send_fds(conn, [len(payload).to_bytes(_HEADER, "big") + payload], [0, 1, 2])
            answer = conn.recv(64)
            if not answer.startswith(b"ok "):
                return False
            daemon = int(answer[3:])
            # Spark stops the daemon with SIGTERM to the process it launched: passed on.
            signal.signal(signal.SIGTERM, lambda *_: _signal(daemon, signal.SIGTERM))
            conn.settimeout(None)
            while conn.recv(64):  # the daemon holds its end until it exits
                pass
            return True
    except (OSError, ValueError):
        return False


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def serve(path: str) -> None:
    """Bind ``path``, import the task modules, then fork a daemon for each hand-over until the
    driver closes this process's standard input."""
    from spark.runtime.preload import preload

    seed = os.environ.get("PYTHONHASHSEED")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)  # before the imports: a daemon launched meanwhile waits in the queue
    listener.listen(16)
    try:
        preload()
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the daemons it forks are reaped by the kernel
        poller = select.poll()
        poller.register(0, select.POLLIN)
        poller.register(listener, select.POLLIN)
        while True:
            for fd, _ in poller.poll():
                if fd == 0:
                    if not os.read(0, 4096):
                        return  # the driver is gone
                else:
                    conn, _ = listener.accept()
                    _fork_daemon(conn, listener, seed)
    finally:
        listener.close()
        try:
            os.remove(path)
        except OSError:
            pass


def _fork_daemon(conn: socket.socket, listener: socket.socket, seed: str | None) -> None:
    fds: list[int] = []
    try:
        conn.settimeout(HAND_OVER_TIMEOUT)
        message, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
        size = int.from_bytes(message[:_HEADER], "big")
        while len(message) < _HEADER + size:
            chunk = conn.recv(1 << 16)
            if not chunk:
                raise EOFError("hand-over cut short")
            message += chunk
        request: dict[str, Any] = json.loads(message[_HEADER:_HEADER + size])
        refused = _refusal(request, seed, fds)
        if refused:
            conn.sendall(b"no " + refused.encode())
            return
        if os.fork() == 0:
            _become_daemon(conn, listener, fds, request)  # never returns
    except (OSError, ValueError, EOFError) as exc:
        print(f"tidelake fork server: a daemon's hand-over failed ({exc}); it imports its modules itself",
              file=sys.stderr)
    finally:
        for fd in fds:
            os.close(fd)
        conn.close()


def _refusal(request: dict[str, Any], seed: str | None, fds: list[int]) -> str | None:
    """Why this server cannot become the requesting daemon (None: it can)."""
    if len(fds) != 3:
        return "no standard streams"
    if request["executable"] != sys.executable:
        return f"another interpreter ({request['executable']})"
    if request["env"].get("PYTHONHASHSEED") != seed:
        return "another hash seed"
    return None


def _become_daemon(conn: socket.socket, listener: socket.socket, fds: list[int], request: dict[str, Any]) -> None:
    """In the forked child: take the launched daemon's streams and state, then run PySpark's manager.
    ``conn`` stays open until this process exits: the launched daemon waits on it."""
    code = 1
    try:
        listener.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        # The answer comes from the daemon itself, before it touches Spark's streams: a launched
        # daemon that gave up waiting (and imports its modules itself) has closed its end, so this
        # send fails and the two never both answer Spark.
        try:
            conn.sendall(f"ok {os.getpid()}".encode())
        except OSError:
            return  # (the finally exits)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv[:] = request["argv"]
        sys.path[:] = request["path"]
        from pyspark import daemon

        daemon.manager()
        code = 0
    except SystemExit as exc:  # the manager's shutdown
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - whatever it is, this child must not return into the server's loop
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)


if __name__ == "__main__":
    from spark.runtime.pyspark_path import prefer_installed_pyspark

    prefer_installed_pyspark()  # as the daemon does: the driver's PYTHONPATH, under spark-submit, puts Spark's zips first
    serve(sys.argv[1])
