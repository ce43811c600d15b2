"""What the local daemon's workers start with loaded: tidelake's task modules, imported once before
the fork (by the daemon, ``spark.runtime.daemon``, or ahead by its fork server, ``spark.runtime.forkserver``).

Each worker used to import the modules of its first task itself (``TASK_MODULES`` and what they
import: pyarrow's compute and parquet, pyiceberg's manifests, the codecs; ~0.9 s), once per task
slot: on two cores, a core's worth of that work was done twice. Imported once in the parent, every
worker starts with them (copy-on-write pages, shared until written). They open no file or socket
at import; the two threads they start (numpy's OpenBLAS pool, jemalloc's background thread under
pyarrow) are rebuilt in a forked child by their own fork handlers, and pyarrow's thread pools
start on first use, in the worker (tests/spark/runtime/test_daemon.py forks after the preload and
runs them). ``PRELOAD_ENV`` set to 0 in the context's environment
(``spark.executorEnv.TIDELAKE_DAEMON_PRELOAD=0``) turns the preload off: the benchmarks'
Spark-alone baseline (bench/spark_alone.py) measures Spark's own start, not tidelake's imports.
"""

from __future__ import annotations

import gc
import importlib

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
    """The task modules imported, then frozen out of the cyclic collector's scans (as
    ``tasks.freeze_imports`` does in a worker): PySpark's reused worker collects after every task,
    which would walk ~130k objects of these modules -- and write to every one's header, copying the
    pages the fork shares. Python's own advice for fork without exec: freeze in the parent."""
    for name in TASK_MODULES:
        importlib.import_module(name)
    gc.freeze()
