"""The local masters' Python daemon (``spark.runtime.daemon``): tidelake's task modules imported once,
before it forks the workers. The daemon in a real context: tests/spark/archive/test_land_spark.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from spark.runtime.preload import TASK_MODULES

REPO = Path(__file__).resolve().parents[3]


def test_every_stage_s_task_functions_live_in_a_preloaded_module() -> None:
    """What ``SparkRunner.map`` and the write plane ship: a stage whose tasks live elsewhere would
    have each worker import its module again, once per task slot."""
    from spark.archive.land import land_chunk
    from spark.decode.changelog import decode_segments
    from spark.maintain.compaction import compact_bin
    from spark.query.changes_log import touched_slice
    from spark.write import plane

    shipped = {f.__module__ for f in (land_chunk, decode_segments, compact_bin, touched_slice)} | {plane.__name__}
    assert shipped <= set(TASK_MODULES)


def test_a_worker_forked_after_the_preload_runs_arrow_s_threads_and_parquet() -> None:
    """The preload imports pyarrow, numpy and pyiceberg before ``fork``; a forked worker must still
    run pyarrow's thread pools (compute, a multi-threaded parquet read) without deadlocking."""
    probe = (
        "import os, io, sys\n"
        "from spark.runtime.preload import preload\n"
        "preload()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    import pyarrow as pa, pyarrow.compute as pc, pyarrow.parquet as pq\n"
        "    t = pa.table({'k': pa.array(range(200_000)), 'v': pa.array([str(i) for i in range(200_000)])})\n"
        "    buf = io.BytesIO(); pq.write_table(t, buf, row_group_size=10_000); buf.seek(0)\n"
        "    back = pq.read_table(buf, use_threads=True)\n"
        "    ok = back.equals(t) and pc.sum(back['k']).as_py() == sum(range(200_000))\n"
        "    os._exit(0 if ok else 3)\n"
        "_, status = os.waitpid(pid, 0)\n"
        "sys.exit(os.waitstatus_to_exitcode(status))\n"
    )
    run = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
