from __future__ import annotations

from pathlib import Path

from cdc_codecs import RawMessage, SourcePosition, get_decoder
from cdc_codecs.events import Event


def decode_values(protocol: str, *values: bytes, keys: list[bytes | None] | None = None, **options) -> list[Event]:
    decoder = get_decoder(protocol, **options)
    events: list[Event] = []
    for offset, value in enumerate(values):
        key = keys[offset] if keys else None
        events += decoder.decode(RawMessage(key, value, SourcePosition("t", 0, offset)))
    return events


def decode_file(protocol: str, path: Path, key: Path | None = None, **options) -> list[Event]:
    return decode_values(protocol, path.read_bytes(), keys=[key.read_bytes() if key else None], **options)
