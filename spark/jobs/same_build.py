"""The spark-submit driver runs one tidelake build: the entry script's and the library's must be the same.

The DAG submits ``<site-packages>/spark/jobs/<job>.py`` of the tidelake installed on the Airflow
worker, with ``--py-files <archive>.zip`` for the executors (deploy/README.md). PySpark puts
the archive first on the driver's ``sys.path`` too, so the driver runs the entry script from
the installation and imports every module it uses from the archive. An archive left from an
earlier build (the image rebuilt without it, ``TIDELAKE_PY_FILES`` naming an old file) would
so run old code, silently, beside a new entry script. ``require_same_build`` compares the two
builds' code -- every ``.py`` and ``.json`` file of the ``spark`` and ``cdc_codecs`` packages --
and stops the job before Spark starts when they differ, naming both.

Stdlib only, and run by path from the entry script (``run_path``), so that an archive of any
age -- one without this module, too -- is checked by the installation's copy.
"""

from __future__ import annotations

import hashlib
import sys
import zipfile
from pathlib import Path

PACKAGES = ("spark", "cdc_codecs")
SUFFIXES = (".py", ".json")
EXIT_CODE = 2  # a configuration error, as the jobs count them (spark.jobs.interval_job)


def code_digest(root: Path) -> str:
    """SHA-256 over the path and bytes of every tidelake source file under ``root``: a directory or a zip archive."""
    files: dict[str, bytes] = {}
    if root.is_file():
        with zipfile.ZipFile(root) as archive:
            for name in archive.namelist():
                if name.split("/", 1)[0] in PACKAGES and name.endswith(SUFFIXES) and "__pycache__" not in name:
                    files[name] = archive.read(name)
    else:
        for package in PACKAGES:
            for path in (root / package).rglob("*"):
                if path.suffix in SUFFIXES and "__pycache__" not in path.parts and path.is_file():
                    files[path.relative_to(root).as_posix()] = path.read_bytes()
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return digest.hexdigest()


def library_root() -> Path:
    """Where ``import spark`` finds the library: a folder on ``sys.path``, or a zip archive on it."""
    import spark

    path = Path(spark.__file__).resolve().parent.parent
    # A module imported from a zip reports <archive>.zip/spark/__init__.py.
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def mismatch(entry_script: str) -> str | None:
    """Why this driver would run two builds, or None when it runs one."""
    installed = Path(entry_script).resolve().parents[2]  # <site-packages>/spark/jobs/<job>.py
    library = library_root()
    if library == installed:
        return None
    ours, theirs = code_digest(installed), code_digest(library)
    if ours == theirs:
        return None
    return (f"tidelake: this job's entry script {entry_script} is from the tidelake installed at {installed} (code digest "
            f"{ours[:12]}), but its library is imported from {library} (code digest {theirs[:12]}), the --py-files archive "
            "(TIDELAKE_PY_FILES) that the executors run too: two different builds. Rebuild the archive from the installed "
            "build and put it where TIDELAKE_PY_FILES points (deploy/README.md, \"Images\").")


def require_same_build(entry_script: str) -> None:
    """Exit with ``EXIT_CODE`` and the reason on stderr when the entry script and the library are different builds."""
    reason = mismatch(entry_script)
    if reason is not None:
        sys.stderr.write(reason + "\n")
        sys.stderr.flush()
        raise SystemExit(EXIT_CODE)
