"""PySpark's worker daemon, importing PySpark from its installed package (``pyspark_path``) and
tidelake's task modules before it forks a worker.

On a local master ``session.build_context`` sets ``spark.python.daemon.module`` to this module
(``session.LOCAL_DAEMON``; a cluster's executors may not import tidelake before a task adds the
``--py-files`` archive to the path, so they keep PySpark's own daemon): Spark runs it as
``python -m spark.runtime.daemon pyspark.worker`` in place of ``pyspark.daemon``, which it then
is -- the same manager, forking the same workers, which import ``pyspark.worker`` after the
fork as before, only from bytecode instead of compiling it from Spark's zip.

Each worker used to import the modules of its first task itself (``TASK_MODULES`` and what they
import: pyarrow's compute and parquet, pyiceberg's manifests, the codecs; 0.8 s), once per task
slot: on two cores, a core's worth of that work was done twice. The daemon imports them once,
before its first fork, and every worker starts with them loaded (copy-on-write pages, shared
until written). They open no file or socket at import; the two threads they start (numpy's
OpenBLAS pool, jemalloc's background thread under pyarrow) are rebuilt in a forked child by
their own fork handlers, and pyarrow's thread pools start on first use, in the worker
(tests/spark/runtime/test_daemon.py forks after the preload and runs them). ``PRELOAD_ENV`` set to 0 in the
context's environment (``spark.executorEnv.TIDELAKE_DAEMON_PRELOAD=0``) turns the preload off: the
benchmarks' Spark-alone baseline (bench/spark_alone.py) measures Spark's own start, not tidelake's imports.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys

# The modules whose functions Spark runs as tasks (what ``SparkRunner.map`` and the write plane
# ship): every stage's, so any job's workers find theirs loaded.
TASK_MODULES = (
    "pyspark.worker",
    "spark.archive.land",
    "spark.decode.changelog",
    "spark.write.plane",
    "spark.maintain.compaction",
    "spark.query.changes_log",
)

PRELOAD_ENV = "TIDELAKE_DAEMON_PRELOAD"


def preload() -> None:
    for name in TASK_MODULES:
        importlib.import_module(name)


if __name__ == "__main__":
    from spark.runtime.pyspark_path import prefer_installed_pyspark

    prefer_installed_pyspark()
    if os.environ.get(PRELOAD_ENV) != "0":
        preload()
        # What the workers inherit, out of the cyclic collector's scans (as ``tasks.freeze_imports``
        # does in a worker): PySpark's reused worker collects after every task, which would walk
        # ~130k objects of these modules -- and write to every one's header, copying the pages the
        # fork shares. Python's own advice for fork without exec: freeze in the parent.
        gc.freeze()
    from pyspark import daemon

    sys.exit(daemon.manager())
