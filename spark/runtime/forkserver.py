"""A fork server for the local daemon: tidelake's task modules imported while the JVM starts the context.

On a local master Spark launches PySpark's worker daemon (``spark.runtime.daemon``) on a job's
first task, and the daemon imports the task modules (``spark.runtime.preload``, ~0.9 s) before it
forks a worker: on two cores, one core waits through that. Yet the context's own start, just
before, is 1.5-2 s in which the driver only waits for the JVM. So the driver starts this server
first (``start``: the apply job as soon as it knows it will start Spark, ``session.load_ahead``;
any context as ``session.build_context`` builds it): it imports the modules while the JVM starts,
then waits.

When Spark launches the daemon, the daemon hands itself over (``hand_over``): over the server's
Unix socket it passes its standard streams (SCM_RIGHTS), arguments, environment, working
directory and ``sys.path``. The server forks a child that takes them and runs PySpark's own
``daemon.manager()``: it writes its port to Spark's pipe, reads Spark's kill requests from it, and
forks workers with the modules loaded. The launched process stays as Spark's handle on the
daemon: it passes SIGTERM (Spark's ``stopDaemon``) on and exits when the daemon does. What the
daemon reads from its environment is Spark's, as before; only the imports were done earlier.

The server takes a hand-over only from the same interpreter with the same values of what its
modules read from the environment at import (``IMPORT_TIME_ENV``: the hash seed PySpark fixes for
its workers, the thread counts Spark gives them, tidelake's bounds); anything else -- no server,
another interpreter, another value, the server gone or stopped -- and the daemon imports the
modules itself, as without it. The server lives as long as the driver: it exits when the
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
# How long a daemon waits for a server still importing to take it, and for one that is ready (its
# ``READY`` file made): a stopped server costs a job seconds, not minutes, before the daemon imports itself.
HAND_OVER_TIMEOUT = 120.0
READY_TIMEOUT = 5.0
READY = ".ready"  # beside the socket, once the imports are done
_HEADER = 4  # bytes of a hand-over's length
# What the preloaded modules read from the environment when they are imported: a daemon whose
# environment differs in any of them is refused, as its workers would not be what Spark asked for.
# PYTHONHASHSEED: a shuffle's partitions hash with it (PySpark fixes it for its workers); the thread
# counts: numpy's OpenBLAS sizes its pool at import (Spark gives the workers OMP_NUM_THREADS =
# spark.task.cpus); PySpark's namedtuple patch; and tidelake's own bounds (``services.SETTINGS``).
IMPORT_TIME_ENV = ("PYTHONHASHSEED", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                   "PYSPARK_ENABLE_NAMEDTUPLE_PATCH")

_server: Any = None  # the server's subprocess.Popen
_socket_path: str | None = None
_lock = threading.Lock()


def start(environment: dict[str, str] | None = None) -> str:
    """The socket of this driver's fork server, started if it is not running (one per driver process,
    shared by the contexts it starts one after another), with ``environment`` over the driver's: what
    Spark will give the daemon of ``IMPORT_TIME_ENV`` (``session.daemon_environment``)."""
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
        env = {**os.environ, **(environment or {}), "PYTHONUNBUFFERED": "YES"}  # unbuffered, as Spark starts the daemon
        _server = subprocess.Popen([sys.executable, "-m", __name__, path], stdin=subprocess.PIPE, env=env)
        _socket_path = path
        return path


def hand_over(path: str) -> bool:
    """This process (the daemon Spark launched) handed to the server at ``path``: True once the
    daemon it became has exited; False if the server did not take it (nothing was changed).

    The forked daemon answers ``ok <pid>`` and waits for ``go`` before it touches Spark's streams:
    only this process decides, so a daemon that gave up waiting and imports its modules itself never
    has a forked twin writing a port to Spark's pipe too. After ``go`` it is committed: it waits for
    the daemon's exit, whatever happens."""
    payload = json.dumps({"executable": sys.executable, "argv": sys.argv, "env": dict(os.environ),
                          "cwd": os.getcwd(), "path": sys.path}).encode()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(READY_TIMEOUT if os.path.exists(path + READY) else HAND_OVER_TIMEOUT)
            conn.connect(path)
            # The streams with the header alone: one sendmsg may send part of a long message.
            socket.send_fds(conn, [len(payload).to_bytes(_HEADER, "big")], [0, 1, 2])
            conn.sendall(payload)
            answer = conn.recv(64)
            if not answer.startswith(b"ok "):
                return False
            daemon = int(answer[3:])
            conn.sendall(b"go")
    except (OSError, ValueError):
        return False
    _wait_for(daemon)
    return True


def _wait_for(pid: int) -> None:
    """Until the process ``pid`` (not this one's child) exits, passing SIGTERM (Spark's stop) on to it."""
    try:
        handle = os.pidfd_open(pid)
    except ProcessLookupError:
        return  # gone already
    except OSError:  # a kernel without pidfds (before Linux 5.3): by pid, polled
        signal.signal(signal.SIGTERM, lambda *_: _signal(pid, signal.SIGTERM))
        while _alive(pid):
            select.select([], [], [], 0.5)
        return
    signal.signal(signal.SIGTERM, lambda *_: _pidfd_signal(handle, signal.SIGTERM))
    select.select([handle], [], [])  # readable once the process has exited
    os.close(handle)


def _pidfd_signal(handle: int, sig: int) -> None:
    try:
        signal.pidfd_send_signal(handle, sig)
    except ProcessLookupError:
        pass


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def serve(path: str) -> None:
    """Bind ``path``, import the task modules, then fork a daemon for each hand-over until the
    driver closes this process's standard input."""
    from spark.runtime.preload import preload

    # A terminal's Ctrl-C reaches the driver's whole process group: the JVM and PySpark's daemons
    # ignore it (PySpark starts the JVM so), and so does this server and the daemons it forks.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from spark.runtime.services import SETTINGS

    imported = {name: os.environ.get(name) for name in (*IMPORT_TIME_ENV, *SETTINGS)}
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)  # before the imports: a daemon launched meanwhile waits in the queue
    listener.listen(16)
    try:
        preload()
        with open(path + READY, "x"):
            pass
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
                    _fork_daemon(conn, listener, imported)
    finally:
        listener.close()
        for leftover in (path, path + READY):
            try:
                os.remove(leftover)
            except OSError:
                pass
        try:
            os.rmdir(os.path.dirname(path))  # its own (``start``), empty now: a driver killed runs no atexit
        except OSError:
            pass


def _fork_daemon(conn: socket.socket, listener: socket.socket, imported: dict[str, str | None]) -> None:
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
        refused = _refusal(request, imported, fds)
        if refused:
            conn.sendall(b"no " + refused.encode())
            return
        if os.fork() == 0:
            _become_daemon(conn, listener, fds, request)  # never returns
    except (OSError, ValueError, EOFError, KeyError, TypeError) as exc:
        print(f"tidelake fork server: a daemon's hand-over failed ({exc}); it imports its modules itself",
              file=sys.stderr)
    finally:
        for fd in fds:
            os.close(fd)
        conn.close()


def _refusal(request: dict[str, Any], imported: dict[str, str | None], fds: list[int]) -> str | None:
    """Why this server cannot become the requesting daemon (None: it can)."""
    if len(fds) != 3:
        return "no standard streams"
    if request["executable"] != sys.executable:
        return f"another interpreter ({request['executable']})"
    env = request["env"]
    differ = sorted(name for name, value in imported.items() if env.get(name) != value)
    if differ:
        return f"another {', '.join(differ)} than its modules were imported with"
    return None


def _become_daemon(conn: socket.socket, listener: socket.socket, fds: list[int], request: dict[str, Any]) -> None:
    """In the forked child: once the launched daemon says ``go`` (``hand_over``), take its streams and
    state, then run PySpark's manager."""
    code = 1
    try:
        listener.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        try:
            conn.sendall(f"ok {os.getpid()}".encode())
            go = conn.recv(2)
        except OSError:
            go = b""
        conn.close()  # not inherited by the workers
        if go != b"go":
            return  # the launched daemon went on alone (the finally exits)
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
