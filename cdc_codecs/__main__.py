"""``python -m cdc_codecs``: decode files of messages to JSON lines.

    python -m cdc_codecs decode --protocol canal-json msg1.json msg2.json
    python -m cdc_codecs decode --protocol open-protocol --key k0 --value v0 --key k1 --value v1
    python -m cdc_codecs protocols

Each FILE is one Kafka message value; events print one JSON document per line. Any
failure prints one line naming the file and what is wrong, and exits with code 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from cdc_codecs.errors import ConfigError, DecodeError
from cdc_codecs.events import RawMessage, SourcePosition
from cdc_codecs.registry import PROTOCOLS, get_decoder
from cdc_codecs.render import event_to_json

EXIT_USAGE = 2


class _Failure(Exception):
    pass


def _parse_options(items: Sequence[str]) -> dict[str, str]:
    options = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise _Failure(f"--option {item!r}: expected key=value")
        options[key.replace("-", "_")] = value
    return options


def _read(path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise _Failure(f"{path}: cannot read: {exc.strerror or exc}") from None


def decode_command(args: argparse.Namespace, out: "SupportsWrite") -> None:
    if bool(args.key) != bool(args.value) or len(args.key or []) != len(args.value or []):
        raise _Failure("--key and --value must be given in pairs")
    try:
        decoder = get_decoder(args.protocol, **_parse_options(args.option or []))
    except ConfigError as exc:
        raise _Failure(str(exc)) from None
    messages: list[tuple[str, bytes | None, bytes | None]] = [(f, None, _read(f)) for f in args.files]
    for k, v in zip(args.key or [], args.value or []):
        messages.append((v, _read(k), _read(v)))
    if not messages:
        raise _Failure("no input: give FILE arguments or --key/--value pairs")
    for offset, (name, key, value) in enumerate(messages):
        msg = RawMessage(key, value, SourcePosition(Path(name).name, 0, offset))
        try:
            for event in decoder.decode(msg):
                out.write(event_to_json(event) + b"\n")
        except DecodeError as exc:
            raise _Failure(f"{name}: {exc}") from None
    for error in decoder.finish():
        raise _Failure(f"{messages[error.position.offset][0] if error.position else '?'}: {error}")


class SupportsWrite:  # typing helper for sys.stdout.buffer
    def write(self, data: bytes) -> int: ...


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cdc_codecs", description="Decode CDC messages to JSON lines.")
    sub = parser.add_subparsers(dest="command", required=True)
    dec = sub.add_parser("decode", help="decode message files, one Kafka message value per file")
    dec.add_argument("--protocol", required=True, help=f"one of: {', '.join(sorted(PROTOCOLS))}")
    dec.add_argument("--option", action="append", metavar="K=V", help="decoder option, e.g. timezone=Asia/Shanghai")
    dec.add_argument("--key", action="append", metavar="FILE", help="Kafka key file (pair with --value)")
    dec.add_argument("--value", action="append", metavar="FILE", help="Kafka value file (pair with --key)")
    dec.add_argument("files", nargs="*", metavar="FILE")
    sub.add_parser("protocols", help="list the protocols and their decoder options")
    args = parser.parse_args(argv)
    if args.command == "protocols":
        for name, spec in sorted(PROTOCOLS.items()):
            print(f"{name:24} {spec.description}")
            for opt, o in spec.decoder.options_spec.items():
                print(f"{'':24}   --option {opt}=...  {o.doc}")
        return 0
    try:
        decode_command(args, sys.stdout.buffer)
    except _Failure as exc:
        sys.stdout.flush()
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return 0


if __name__ == "__main__":
    sys.exit(main())
