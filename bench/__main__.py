"""python -m bench [codecs|land|apply|consistency|maintenance] [suite options]"""

from __future__ import annotations

import argparse
import sys

from bench import apply, codecs, consistency, land, maintenance

SUITES = {"codecs": codecs.main, "land": land.main, "apply": apply.main, "consistency": consistency.main,
          "maintenance": maintenance.main}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("suite", nargs="?", choices=sorted(SUITES), default=None, help="one suite (default: all)")
    args, rest = parser.parse_known_args(argv)
    for name in [args.suite] if args.suite else sorted(SUITES):
        code = SUITES[name](rest)
        if code:
            return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
