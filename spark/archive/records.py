"""Reading back what tidelake wrote to the archive: typed as written, or a typed error naming the file.

The archive is data (SPEC §9): anything may have changed its bytes since they were written --
a damaged object, a hand edit, another version, crafted bytes. Every JSON record tidelake reads
back is checked against its documented shape (docs/archive.md) before any field is used: each
field of the type it was written with (an int is never a bool or a float, an offset or a
watermark never negative nor beyond 64 bits), each instant an ISO 8601 time with its offset.
What does not fit fails with ``CorruptArchiveFile`` (or the reader's own subclass of it) naming
the file and the field, never with the ``KeyError`` / ``TypeError`` / ``OverflowError`` a later
use would hit, and reading never runs code (JSON and msgspec types only).

The shapes list what readers use; fields they do not know are kept in the record (a newer
version's additions) but not checked.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterator
from typing import Annotated, Any, NotRequired, TypedDict, TypeVar

import msgspec
import pyarrow as pa
import pyarrow.parquet as pq

from cdc_codecs import TidelakeError
from spark.runtime.services import storage_failed

T = TypeVar("T")

# Offsets, watermarks (TiDB TSOs), counts, epochs: what int64 columns and Iceberg longs hold.
Count = Annotated[int, msgspec.Meta(ge=0, le=(1 << 63) - 1)]
Int64 = Annotated[int, msgspec.Meta(ge=-(1 << 63), le=(1 << 63) - 1)]  # any other int tidelake writes
Partition = Annotated[int, msgspec.Meta(ge=0, lt=1 << 31)]
Seconds = Annotated[float, msgspec.Meta(ge=0, lt=1e11)]  # epoch seconds before the year 5138


class CorruptArchiveFile(TidelakeError):
    """Bytes read back from the archive are not the record tidelake writes there: names the file
    and what is wrong in it."""


@contextlib.contextmanager
def damaged_file(where: str, what: str) -> Iterator[None]:
    """An Arrow error reading the file at ``where`` as ``CorruptArchiveFile`` naming it: Arrow's own
    errors, and the bare ``OSError`` its Parquet reader raises for damaged bytes past the footer (a
    page, a dictionary). An ``OSError`` of the storage (``services.storage_failed``) stays its own."""
    try:
        yield
    except pa.ArrowException as exc:
        raise CorruptArchiveFile(f"{where}: damaged {what}: {type(exc).__name__}: {exc}") from None
    except OSError as exc:
        if isinstance(exc, FileNotFoundError) or storage_failed(exc):
            raise
        raise CorruptArchiveFile(f"{where}: damaged {what}: {exc}") from None


def read_record(data: bytes, shape: Any, where: str, what: str, error: type[CorruptArchiveFile] = CorruptArchiveFile) -> Any:
    """``data`` (a JSON record) checked against ``shape`` (a ``TypedDict`` of msgspec types): the
    record as plain JSON values, every field ``shape`` names of its type.

    Raises:
        CorruptArchiveFile (``error``): not JSON, or a field missing or of another type (named by
        its path in the record).
    """
    try:
        msgspec.json.decode(data, type=shape, strict=True)
        return msgspec.json.decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise error(f"{where}: damaged {what}: {exc}") from None
    except (ValueError, RecursionError) as exc:  # too deep, or numbers msgspec refuses
        raise error(f"{where}: damaged {what}: {type(exc).__name__}: {exc}") from None


def parquet(data: bytes, schema: pa.Schema, where: str, what: str, error: type[CorruptArchiveFile] = CorruptArchiveFile) -> pa.Table:
    """A Parquet file of the archive (its bytes, read whole: any failure past the read is the
    bytes'), of exactly ``schema``'s columns and types.

    Raises:
        CorruptArchiveFile (``error``): not Parquet, damaged, or other columns.
    """
    try:
        table = pq.read_table(pa.BufferReader(data))
        table.validate(full=True)  # Arrow reads text without checking it is UTF-8
    except (pa.ArrowException, OSError, ValueError, TypeError, IndexError, KeyError, RecursionError) as exc:
        raise error(f"{where}: damaged {what}: {type(exc).__name__}: {exc}") from None
    check_columns(table.schema, schema, where, what, error)
    return table


def check_columns(found: pa.Schema, schema: pa.Schema, where: str, what: str,
                  error: type[CorruptArchiveFile] = CorruptArchiveFile) -> None:
    """``found`` has ``schema``'s columns, of its types, in its order (metadata and nullability aside).

    Raises:
        CorruptArchiveFile (``error``): naming the columns found and those expected.
    """
    if [(f.name, f.type) for f in found] != [(f.name, f.type) for f in schema]:
        have = ", ".join(f"{f.name} {f.type}" for f in found)[:300]
        raise error(f"{where}: damaged {what}: columns {have}; expected {', '.join(f'{f.name} {f.type}' for f in schema)}")


def instant(text: str, where: str, field: str, error: type[CorruptArchiveFile] = CorruptArchiveFile) -> dt.datetime:
    """An ISO 8601 time with its UTC offset, as ``datetime.isoformat`` writes an aware one."""
    try:
        value = dt.datetime.fromisoformat(text)
    except ValueError:
        raise error(f"{where}: {field} {text[:80]!r} is not an ISO 8601 time") from None
    if value.tzinfo is None:
        raise error(f"{where}: {field} {text[:80]!r} has no UTC offset")
    return value


def partition_key(text: str, where: str, field: str, error: type[CorruptArchiveFile] = CorruptArchiveFile) -> tuple[str, int]:
    """A ``<topic>/<partition>`` key (a checkpoint's)."""
    topic, slash, partition = text.rpartition("/")
    if not slash or not partition.isascii() or not partition.isdigit() or len(partition) > 10:
        raise error(f"{where}: {field} key {text[:80]!r} is not <topic>/<partition>")
    return topic, int(partition)


# ---------------------------------------------------------------- shapes (docs/archive.md)


class _Interval(TypedDict):
    start: str
    end: str


class _Segment(TypedDict):
    path: str
    start: Count
    end: Count
    messages: Count
    bytes: Count


class _Gap(TypedDict):
    start: Count
    end: Count


class _Range(TypedDict):
    topic: str
    partition: Partition
    start: Count
    end: Count
    gap: NotRequired[_Gap | None]
    segments: list[_Segment]
    messages: Count
    checksum: str


class Manifest(TypedDict):
    format: int
    pipeline: str
    interval: _Interval
    previous: NotRequired[str | None]
    created_at: str
    partitions: list[_Range]


class Checkpoint(TypedDict):
    interval: _Interval
    watermark: Count
    marks: dict[str, Count]
    pending: dict[str, Count]
    ddl_applied: NotRequired[list[tuple[Count | None, str, str, str]]]
    segments: NotRequired[dict[str, list[tuple[str, Count, Count]]]]


class Isolated(TypedDict):
    database: str
    table: str
    held_at: Count
    since: str
    error: str
    message: str
    ddl: NotRequired[str | None]
    commit_ts: NotRequired[Count | None]
    position: NotRequired[str | None]
    involved: NotRequired[str | None]


class IsolatedTables(TypedDict):
    tables: list[Isolated]


class _PublishedTable(TypedDict):
    database: str
    table: str
    uuid: str
    snapshot: Int64


class _CaughtUp(TypedDict):
    database: str
    table: str
    at: str


class Published(TypedDict):
    watermark: Count
    interval: str
    tables: list[_PublishedTable]
    isolated: NotRequired[list[Isolated]]
    caught_up: NotRequired[list[_CaughtUp]]
    published_at: NotRequired[str]
    retired: NotRequired[dict[str, Any]]


class ApplyReport(TypedDict):
    """The fields of an apply report (``reports/<interval>/apply.json``) that runs read back."""

    watermark: Count
    outcome: NotRequired[str]
    previous_watermark: NotRequired[Count | None]
    finished_at: NotRequired[str]
    isolated: NotRequired[dict[str, dict[str, Any]]]


class Confirmation(TypedDict):
    """A confirming run's report (``apply.confirmed.json``)."""

    confirmed_at: NotRequired[str]


class Lease(TypedDict):
    owner: str
    acquired_at: Seconds
    expires_at: Seconds
    released: bool
    run: NotRequired[str | None]  # the run's identity, the same for its retries (spark.archive.lease.run_identity)


# ---------------------------------------------------------------- readers of records other modules build


class CorruptCheckpoint(CorruptArchiveFile):
    """A checkpoint is not one tidelake writes."""


def checkpoint(data: bytes, where: str) -> dict[str, Any]:
    """A checkpoint's fields (``spark.archive.checkpoint.Checkpoint``), checked and converted: its interval
    as aware datetimes, its marks, pending offsets and segments keyed by (topic, partition), its
    DDL identities as tuples.

    Raises:
        CorruptCheckpoint: naming the file and the field.
    """
    doc = read_record(data, Checkpoint, where, "checkpoint", CorruptCheckpoint)
    start = instant(doc["interval"]["start"], where, "interval.start", CorruptCheckpoint)
    end = instant(doc["interval"]["end"], where, "interval.end", CorruptCheckpoint)

    def by_partition(field: str) -> dict[tuple[str, int], Any]:
        return {partition_key(k, where, field, CorruptCheckpoint): v for k, v in doc[field].items()}

    segments = None
    if "segments" in doc:
        segments = {k: tuple(tuple(r) for r in v) for k, v in by_partition("segments").items()}
        if any(start_ > end_ for refs in segments.values() for _, start_, end_ in refs):
            raise CorruptCheckpoint(f"{where}: a segment of segments ends before it starts")
    return {"interval_start": start, "interval_end": end, "watermark": doc["watermark"], "marks": by_partition("marks"),
            "pending": by_partition("pending"), "ddl_applied": tuple(tuple(i) for i in doc.get("ddl_applied", ())),
            "segments": segments}
