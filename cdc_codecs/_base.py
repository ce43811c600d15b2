"""The decoder and encoder interfaces every protocol module implements."""

from __future__ import annotations

import abc
import datetime as dt
import re
import zoneinfo
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Iterable

import orjson

from cdc_codecs._fields import FieldError
from cdc_codecs.errors import ConfigError, DecodeError
from cdc_codecs.events import (
    DdlChange,
    Event,
    ProducerRecord,
    RawMessage,
    RowChange,
    SchemaSnapshot,
    Watermark,
)
from cdc_codecs.types import UTC, ColumnValueError

ClaimCheckReader = Callable[[str], bytes]
"""Reads a claim-check object by the location TiCDC wrote into the message."""


@dataclass(frozen=True, slots=True)
class Option:
    """A decoder/encoder option: how to parse it from text, its default, what it means."""

    parse: Callable[[Any], Any]
    default: Any
    doc: str


def parse_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, found {value!r}")


_OFFSET_RE = re.compile(r"([+-])(\d{2}):?(\d{2})")


def parse_timezone(value: Any) -> dt.tzinfo:
    """A time zone: an IANA name (``Asia/Shanghai``), ``UTC`` / ``Z``, or a fixed offset (``+08:00``, ``-0530``).

    TiCDC's changefeed ``time-zone`` and MySQL's ``time_zone`` are written either way.
    """
    if isinstance(value, dt.tzinfo):
        return value
    name = str(value).strip()
    if name.upper() in ("UTC", "Z"):
        return UTC
    m = _OFFSET_RE.fullmatch(name)
    if m:
        sign, hours, minutes = m.groups()
        if int(minutes) >= 60 or int(hours) >= 24:
            raise ValueError(f"offset {name!r} is out of range; use -23:59 to +23:59")
        offset = dt.timedelta(hours=int(hours), minutes=int(minutes))
        return UTC if not offset else dt.timezone(-offset if sign == "-" else offset)
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"unknown time zone {name!r}; use an IANA name such as 'Asia/Shanghai', 'UTC', or an offset such as '+08:00'"
        ) from None


def parse_reader(value: Any) -> ClaimCheckReader | None:
    if value is None or callable(value):
        return value
    raise ValueError("expected a callable(location) -> bytes")


TIMEZONE_OPTION = Option(
    parse_timezone,
    UTC,
    "time zone the encoder wrote MySQL TIMESTAMP values in (TiCDC: the changefeed's time zone)",
)
def parse_schemas(value: Any) -> tuple:
    from cdc_codecs.events import TableSchema

    items = tuple(value or ())
    if not all(isinstance(s, TableSchema) for s in items):
        raise ValueError("expected TableSchema objects (from another decoder's known_schemas())")
    return items


SCHEMAS_OPTION = Option(
    parse_schemas,
    (),
    "table schemas this stream already announced (a previous decoder's known_schemas()), set by the pipeline",
)
CLAIM_CHECK_OPTION = Option(
    parse_reader,
    None,
    "callable(location) -> bytes that fetches claim-check objects (set by the pipeline, not on the CLI)",
)


class _Configurable:
    protocol: ClassVar[str]
    options_spec: ClassVar[dict[str, Option]] = {}

    def __init__(self, **options: Any) -> None:
        unknown = sorted(set(options) - set(self.options_spec))
        if unknown:
            known = ", ".join(sorted(self.options_spec)) or "none"
            raise ConfigError(f"{self.protocol}: unknown option(s) {', '.join(unknown)}; known options: {known}")
        self.options: dict[str, Any] = {}
        for name, spec in self.options_spec.items():
            if name in options:
                try:
                    self.options[name] = spec.parse(options[name])
                except ValueError as exc:
                    raise ConfigError(f"{self.protocol}: option {name}: {exc}") from None
            else:
                self.options[name] = spec.default


class Decoder(_Configurable, abc.ABC):
    """Turns raw Kafka messages into events. One instance reads one partition's stream.

    A decoder does no I/O of its own (claim-check reads go through the injected reader)
    and keeps only a schema cache as state.
    """

    def decode(self, msg: RawMessage) -> list[Event]:
        """All events of one message, in message order.

        Raises:
            DecodeError: the message is not valid for this protocol; ``raw`` is ``msg``.
        """
        try:
            return list(self._decode(msg))
        except DecodeError as exc:
            if exc.raw is None:
                exc.raw = msg
            raise
        except FieldError as exc:
            raise DecodeError(self.protocol, msg.position.with_index(exc.index), exc.field, exc.reason, raw=msg) from exc
        except ColumnValueError as exc:
            raise DecodeError(self.protocol, msg.position, None, str(exc), raw=msg) from exc
        except orjson.JSONDecodeError as exc:
            raise DecodeError(self.protocol, msg.position, None, f"invalid JSON: {exc}", raw=msg) from exc
        except (KeyError, TypeError, IndexError, AttributeError, ValueError, OverflowError, RecursionError) as exc:
            # A bug-shaped failure on hostile input still leaves typed, located, quarantinable.
            raise DecodeError(
                self.protocol, msg.position, None, f"internal error (please report it with this message): {type(exc).__name__}: {exc}", raw=msg
            ) from exc

    @property
    def carries_commit_ts(self) -> bool:
        """Whether the events of a protocol with commitTs carry it in this decoder's configuration
        (TiCDC's Canal-JSON does only with its TiDB extension); ``ProtocolSpec.carries_commit_ts``."""
        return True

    def finish(self) -> list[DecodeError]:
        """Messages held back that can no longer be decoded (end of the stream)."""
        return []

    def known_schemas(self) -> list:
        """Schemas learnt from the stream (BOOTSTRAP, DDL, tableChanges), to seed the next decoder.

        A pipeline that resumes a partition mid-stream passes them back as the ``schemas``
        option, so rows whose schema was announced in an earlier run still decode.
        """
        return []

    @abc.abstractmethod
    def _decode(self, msg: RawMessage) -> Iterable[Event]: ...

    def error(self, msg: RawMessage, field: str | None, reason: str, index: int = 0) -> DecodeError:
        return DecodeError(self.protocol, msg.position.with_index(index), field, reason, raw=msg)


class Encoder(_Configurable, abc.ABC):
    """Writes events the way the upstream encoder does, including partition dispatch.

    Rows go to ``hash(key) % partitions`` so one key stays on one partition; watermarks
    and DDL are broadcast to every partition unless the protocol says otherwise.
    """

    ddl_to_all_partitions: ClassVar[bool] = True

    def encode(self, event: Event, partitions: int) -> list[ProducerRecord]:
        if isinstance(event, RowChange):
            key, value = self.encode_row(event)
            return [ProducerRecord(self.row_partition(event, partitions), key, value)]
        if isinstance(event, DdlChange):
            key, value = self.encode_ddl(event)
            targets = range(partitions) if self.ddl_to_all_partitions else range(1)
            return [ProducerRecord(p, key, value) for p in targets]
        if isinstance(event, Watermark):
            mark = self.encode_watermark(event)
            return [ProducerRecord(p, *mark) for p in range(partitions)] if mark else []
        if isinstance(event, SchemaSnapshot):
            encoded = self.encode_snapshot(event)
            return [ProducerRecord(p, *encoded) for p in range(partitions)] if encoded else []
        raise TypeError(f"not an event: {event!r}")

    def encode_all(self, events: Iterable[Event], partitions: int) -> list[ProducerRecord]:
        """Encode a stream; protocols that batch rows (``rows_per_message``) group them here.

        A group is consecutive rows of one table, operation, column set and partition.
        """
        limit = max(1, int(self.options.get("rows_per_message", 1)))
        out: list[ProducerRecord] = []
        batch: list[RowChange] = []
        part = -1

        def flush() -> None:
            if batch:
                out.append(ProducerRecord(part, *self.encode_rows(list(batch))))
                batch.clear()

        for event in events:
            if isinstance(event, RowChange):
                p = self.row_partition(event, partitions)
                if batch and (p != part or len(batch) >= limit or _group_key(event) != _group_key(batch[0])):
                    flush()
                part = p
                batch.append(event)
            else:
                flush()
                out.extend(self.encode(event, partitions))
        flush()
        return out

    def encode_rows(self, rows: list[RowChange]) -> tuple[bytes | None, bytes | None]:
        """One message for a group of rows; protocols without batching get groups of one."""
        (row,) = rows
        return self.encode_row(row)

    @staticmethod
    def row_partition(event: RowChange, partitions: int) -> int:
        # TiCDC's default dispatcher hashes the table and the key columns' values.
        image = event.image
        ident = [event.database, event.table] + [repr(image.get(k)) for k in event.key_columns]
        return _stable_hash("\x00".join(ident)) % partitions

    @abc.abstractmethod
    def encode_row(self, event: RowChange) -> tuple[bytes | None, bytes | None]: ...

    @abc.abstractmethod
    def encode_ddl(self, event: DdlChange) -> tuple[bytes | None, bytes | None]: ...

    def encode_watermark(self, event: Watermark) -> tuple[bytes | None, bytes | None] | None:
        """None for protocols (or configurations) that send no watermarks."""
        return None

    def encode_snapshot(self, event: SchemaSnapshot) -> tuple[bytes | None, bytes | None] | None:
        return None


def _group_key(event: RowChange) -> tuple[Any, ...]:
    return (event.op, event.database, event.table, event.column_types)


def _stable_hash(text: str) -> int:
    # FNV-1a: stable across processes (Python's hash() is salted per process).
    h = 0xCBF29CE484222325
    for b in text.encode("utf-8"):
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def loads(data: bytes | None, what: str = "value") -> Any:
    if not data:
        raise FieldError(what, "empty, expected a JSON document")
    return orjson.loads(data)


def dumps(doc: Any) -> bytes:
    return orjson.dumps(doc)
