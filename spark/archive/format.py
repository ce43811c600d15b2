"""The archive's format: which tidelake may run on a pipeline's archive and tables.

A run leaves state an older tidelake reads differently: isolated tables it caught up (an older
version would meet their statements again in a replay and hold them at an old W), partitionings
it computes (LINEAR HASH, EXCHANGE records), fields of ``isolated.json`` an older reader does not
know. ``<pipeline>/format.json`` says which format the pipeline's state is in; every run and
repair checks it first (``require_format``), under the pipeline's lease, and refuses an archive
of a newer format with ``NewerArchive`` -- changing nothing -- instead of going on with rules
that no longer hold. A run of this or a newer version then writes its own format there.

Bump ``ARCHIVE_FORMAT`` with any change an older version must not run after. Versions from before
the marker (format 1) do not read it. Run after a newer one, such a version fails the run on an
``isolated.json`` entry that carries a field it does not know (``renamed``, ``new_name``,
``stays``: a ``TypeError`` in ``Isolated.from_dict``), holds a table at a HASH partition statement
(it computes no HASH) with the statement named, and goes on from each table's own watermark
otherwise: a table the newer version caught up is past the statement that held it, and meets it
again only in a replay from before it (a table behind, ``tidelake repair``), where it is held
again, at the W before that statement -- the hole this marker closes from format 2 on.
"""

from __future__ import annotations

import importlib.metadata

import orjson

from cdc_codecs import TidelakeError
from spark.archive import layout
from spark.archive.storage import Storage

# 2: tables held by on_table_error hold only themselves (renamed / new_name / stays in isolated.json),
#    HASH and LINEAR HASH partitionings, EXCHANGE PARTITION records (tidelake.exchanged).
ARCHIVE_FORMAT = 2


class NewerArchive(TidelakeError):
    """The pipeline's archive was written by a newer tidelake, in a format this one does not follow."""


def format_path(pipeline: str) -> str:
    return f"{layout.pipeline_root(pipeline)}/format.json"


def _version() -> str:
    try:
        return importlib.metadata.version("tidelake")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def require_format(storage: Storage, pipeline: str) -> None:
    """Refuse a pipeline whose state a newer format wrote; else record this format (a run is about to write).

    Raises:
        NewerArchive: ``format.json`` names a format above ``ARCHIVE_FORMAT``; nothing is changed.
    """
    path = format_path(pipeline)
    doc = None
    if storage.exists(path):
        try:
            doc = orjson.loads(storage.read(path))
            found = int(doc["format"])
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            raise NewerArchive(f"{storage.url}/{path}: not a format record this tidelake reads "
                               f"(it follows format {ARCHIVE_FORMAT}); a newer tidelake may have written it") from None
        if found > ARCHIVE_FORMAT:
            raise NewerArchive(
                f"pipeline {pipeline}: its archive is in format {found} ({storage.url}/{path}, written by tidelake "
                f"{doc.get('by', '?')}); this tidelake ({_version()}) follows format {ARCHIVE_FORMAT}, and a run of it "
                "could hold tables the newer one caught up at older Ws or read its records wrongly. Run that version "
                "or a newer one; nothing was changed")
        if found == ARCHIVE_FORMAT:
            return
    storage.write(path, orjson.dumps({"format": ARCHIVE_FORMAT, "by": _version()}, option=orjson.OPT_INDENT_2))
