"""What any PySpark job pays before and after its own work: submitted by ``bench.jobs.submit_spark_alone``.

Starts the context as the apply job does (``spark.runtime.session.build_context``), but for its Python
daemon's preload of tidelake's task modules (``spark.runtime.daemon``: tidelake's work, not Spark's),
runs one trivial job with a task per slot (so every Python worker starts, as in a real run), and stops
as the job does (``stop_context``).
The throughput benchmark subtracts this from each run's wall time: the part of a run no code
of ours can scale.
"""

from __future__ import annotations

from spark.runtime.preload import PRELOAD_ENV
from spark.runtime.session import build_context, stop_context


def main() -> None:
    # Spark's own start: its Python daemon does not import tidelake's task modules (the job's does).
    context = build_context("tidelake-bench-spark-alone", **{f"spark.executorEnv.{PRELOAD_ENV}": "0"})
    try:
        slots = context.defaultParallelism
        context.parallelize(range(slots), slots).map(abs).count()
    finally:
        stop_context(context)  # as the apply job stops it


if __name__ == "__main__":
    main()
