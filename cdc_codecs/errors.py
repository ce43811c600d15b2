"""Errors. Everything tidelake raises on purpose derives from ``TidelakeError``."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cdc_codecs.events import RawMessage, SourcePosition


class TidelakeError(Exception):
    """Base of every error tidelake raises on purpose."""


class ConfigError(TidelakeError):
    """A decoder, encoder or pipeline was configured wrongly (unknown protocol or option)."""


class DecodeError(TidelakeError):
    """A message could not be decoded.

    The message reads ``<protocol> <topic>/<partition>@<offset>[<index>]: <field>: <reason>``,
    e.g. ``canal-json orders/0@1532[2]: old: missing when 'type' is 'UPDATE'``. The raw
    message travels with the error (``raw``) so the caller can quarantine the exact bytes.
    """

    def __init__(
        self,
        protocol: str,
        position: SourcePosition | None,
        field: str | None,
        reason: str,
        *,
        raw: RawMessage | None = None,
    ) -> None:
        self.protocol = protocol
        self.position = position
        self.field = field
        self.reason = reason
        self.raw = raw
        where = str(position) if position is not None else "<no position>"
        what = f"{field}: {reason}" if field else reason
        super().__init__(f"{protocol} {where}: {what}")

    def __reduce__(self) -> tuple:
        # Picklable (Exception's default would call __init__ with the message alone): errors
        # travel from executors to the driver and are kept in change-log side outputs.
        return type(self), (self.protocol, self.position, self.field, self.reason), dict(self.__dict__)

    def at(self, position: SourcePosition, raw: RawMessage | None = None) -> DecodeError:
        """The same error, placed at a position (used when a helper raised without one)."""
        return DecodeError(self.protocol, position, self.field, self.reason, raw=raw or self.raw)


class HandleKeyOnlyError(DecodeError):
    """TiCDC sent only the handle key of a large row (large-message-handle-option=handle-key-only).

    The full row exists only in the upstream TiDB at the event's commitTs; an archive-only
    pipeline cannot apply it. Switch the changefeed to ``claim-check`` (or raise
    ``max-message-bytes``) so the archive holds complete rows.
    """


class ClaimCheckError(DecodeError):
    """A claim-check message pointed at a location that could not be read or decoded."""


class PendingSchemaError(DecodeError):
    """A Simple-protocol DML arrived for a schema version that never arrived."""
