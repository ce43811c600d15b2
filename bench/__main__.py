"""python -m bench [codecs|decode|land|apply|changes|consistency|maintenance|lag|faults] [suite options]

The suite name is taken from the first argument and everything after it goes to that suite's
own parser, so ``python -m bench apply --help`` shows the suite's flags. Without a suite every
suite runs with its defaults.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable

SUITES = ("apply", "changes", "codecs", "consistency", "decode", "faults", "lag", "land", "maintenance")


def suite_main(name: str) -> Callable[[list[str]], int]:
    # Imported on demand: one suite's --help should not import every suite's dependencies (Kafka, Spark).
    return importlib.import_module(f"bench.{name}").main


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in SUITES:
        return suite_main(argv[0])(argv[1:]) or 0
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[1].replace("\n", " "),
                                     epilog="`python -m bench <suite> --help` lists a suite's own options.")
    parser.add_argument("suite", nargs="?", choices=SUITES, help="one suite, followed by its options (default: all)")
    args = parser.parse_args(argv)  # only --help, an unknown suite or options without a suite get here
    # The fault matrix starts and breaks services for ~15 minutes: only when asked for by name.
    for name in [args.suite] if args.suite else [s for s in SUITES if s != "faults"]:
        code = suite_main(name)([])
        if code:
            return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
