"""PySpark's worker daemon, importing PySpark from its installed package (``pyspark_path``) and
tidelake's task modules (``spark.runtime.preload``) before it forks a worker.

On a local master ``session.build_context`` sets ``spark.python.daemon.module`` to this module
(``session.LOCAL_DAEMON``; a cluster's executors may not import tidelake before a task adds the
``--py-files`` archive to the path, so they keep PySpark's own daemon): Spark runs it as
``python -m spark.runtime.daemon pyspark.worker`` in place of ``pyspark.daemon``, which it then
is -- the same manager, forking the same workers, which import ``pyspark.worker`` after the
fork as before, only from bytecode instead of compiling it from Spark's zip.

When the driver started a fork server that imported the task modules already
(``spark.runtime.forkserver``), this process hands itself over to it and stays only as Spark's
handle on the daemon the server forked; otherwise it imports them itself.
"""

from __future__ import annotations

import os
import sys

from spark.runtime import forkserver
from spark.runtime.preload import PRELOAD_ENV, preload

if __name__ == "__main__":
    from spark.runtime.pyspark_path import prefer_installed_pyspark

    prefer_installed_pyspark()
    server = os.environ.get(forkserver.SOCKET_ENV)
    if server and os.environ.get(PRELOAD_ENV) != "0":
        if forkserver.hand_over(server):
            sys.exit(0)  # the daemon the server forked in its place has exited
    if os.environ.get(PRELOAD_ENV) != "0":
        preload()
    from pyspark import daemon

    sys.exit(daemon.manager())
