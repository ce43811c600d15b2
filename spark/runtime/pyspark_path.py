"""Import PySpark from its installed package, not from the zips Spark puts first on ``sys.path``.

spark-submit (for the driver) and every executor (for the Python daemon and its workers) put
``$SPARK_HOME/python/lib/pyspark.zip`` and ``py4j-<version>-src.zip`` at the head of
PYTHONPATH. Those zips hold sources only, and zipimport keeps no bytecode, so each of those
processes compiles every PySpark module it imports: 0.53 s to import ``pyspark.daemon`` and
``pyspark.worker`` from the zip against 0.12 s from the installed package -- paid by the daemon
and again by each worker before a job's first task, and by the driver. When the zips are those
of the pyspark package installed in this interpreter (a pip-installed PySpark is its own
SPARK_HOME), the installed package is the same code with its bytecode cached: the zips move to
the end of ``sys.path``. Anywhere else -- a cluster's own SPARK_HOME, a py4j of another version
-- they stay where Spark put them.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import sys

_PY4J_ZIP = re.compile(r"py4j-(?P<version>.+)-src\.zip")


def _installed_pyspark_home() -> str | None:
    """The directory of the pyspark package installed outside the zips (None: there is none)."""
    for entry in sys.path:
        if entry.endswith(".zip"):
            continue
        home = os.path.join(entry or os.curdir, "pyspark")
        if os.path.isfile(os.path.join(home, "__init__.py")):
            return os.path.realpath(home)
    return None


def prefer_installed_pyspark() -> list[str]:
    """Move PySpark's zips behind the installed package they came from; the entries moved.

    Call it before anything imports pyspark (a module imported already stays as it is)."""
    home = _installed_pyspark_home()
    if home is None:
        return []
    lib = os.path.join(home, "python", "lib")
    moved = []
    for entry in sys.path:
        if not entry.endswith(".zip") or os.path.dirname(os.path.realpath(entry)) != lib:
            continue
        name = os.path.basename(entry)
        if name == "pyspark.zip":
            moved.append(entry)
        elif (py4j := _PY4J_ZIP.fullmatch(name)) is not None and _version("py4j") == py4j["version"]:
            moved.append(entry)
    for entry in moved:
        sys.path.remove(entry)
        sys.path.append(entry)
    return moved


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
