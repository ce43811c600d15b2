"""The one place a SparkSession is configured."""

from __future__ import annotations

import os
import sys
from typing import Any


def build_session(app: str, master: str | None = None, **conf: str) -> Any:
    """A SparkSession in UTC whose Python workers run this interpreter unless told otherwise.

    On a cluster, spark-submit's ``--conf spark.pyspark.python=...`` (or PYSPARK_PYTHON)
    wins; locally the workers must import the same packages as the driver, so they run
    ``sys.executable``.
    """
    from pyspark.sql import SparkSession

    # PySpark reads the worker interpreter from the environment when the context starts.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app).config("spark.sql.session.timeZone", "UTC")
    if master:
        builder = builder.master(master)
    for key, value in conf.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
