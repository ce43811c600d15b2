"""PySpark's worker daemon, importing PySpark from its installed package (``pyspark_path``).

``session.DEFAULTS`` sets ``spark.python.daemon.module`` to this module: Spark runs it as
``python -m spark.runtime.daemon pyspark.worker`` in place of ``pyspark.daemon``, which it then
is -- the same manager, forking the same workers, which import ``pyspark.worker`` after the
fork as before, only from bytecode instead of compiling it from Spark's zip.
"""

from __future__ import annotations

import sys

if __name__ == "__main__":
    from spark.runtime.pyspark_path import prefer_installed_pyspark

    prefer_installed_pyspark()
    from pyspark import daemon

    sys.exit(daemon.manager())
