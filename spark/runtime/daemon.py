"""PySpark's worker daemon, importing PySpark from its installed package (``pyspark_path``).

On a local master ``session.build_context`` sets ``spark.python.daemon.module`` to this module
(``session.LOCAL_DAEMON``; a cluster's executors may not import tidelake before a task adds the
``--py-files`` archive to the path, so they keep PySpark's own daemon): Spark runs it as
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
