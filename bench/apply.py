"""Apply benchmarks (issue 12): throughput end to end, one batch as a table grows, the driver's memory.

    python -m bench apply [--only throughput,growth,memory,tables] [--repeat 3] [--workdir DIR] [suite flags]

(a) throughput  N events over 10 tables through ``spark-submit spark/jobs/apply.py`` on local[2]
                and local[1], Spark start-up included; baseline: a bare decode of the same archive, and
                the peer's parse + dedup + MERGE over as many events with --peer-home.
(b) growth      one 20k-change batch as the table grows; baseline: the batch at the smallest size.
(c) memory      a run touching K keys with a 1g driver and maxResultSize=64m; peak RSS per process;
                baseline: the same job over 1,000 keys.
(d) tables      one interval touching N tables, C changes each (every table existing); baseline: Spark
                alone, and the peer's MERGE per table with --peer-home.
(e) tiny        the fixed cost of a run: a tiny interval in the driver and always on Spark, a
                confirm-only rerun; baseline: Spark alone.

Every figure is a median over ``--repeat`` repetitions. Generated archives are cached under
``--workdir`` by their parameters, so a second run measures without generating again.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable
from pathlib import Path

from spark.config import WRITE_MODES

SUITES = ("throughput", "growth", "memory", "tables", "tiny")


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(float(s)) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated row counts such as 500000,5000000, found {text!r}") from None
    if not sizes or sizes != sorted(sizes) or sizes[0] < 1:
        raise argparse.ArgumentTypeError(f"expected increasing positive row counts, found {text!r}")
    return sizes


def _choices(allowed: tuple[str, ...]) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        picked = [s for s in text.split(",") if s]
        unknown = sorted(set(picked) - set(allowed))
        if unknown or not picked:
            raise argparse.ArgumentTypeError(f"unknown {', '.join(unknown) or 'empty list'}; choose from {', '.join(allowed)}")
        return picked
    return parse


def _conf(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.startswith("spark."):
        raise argparse.ArgumentTypeError(f"expected spark.KEY=VALUE, found {text!r}")
    return key, value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench apply", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", type=_choices(SUITES), default=",".join(SUITES), help="comma-separated suites to run (default %(default)s)")
    parser.add_argument("--repeat", type=int, default=3, help="repetitions per figure; medians are reported (default %(default)s)")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "tidelake-bench",
                        help="generated archives are cached here by parameters; runs use (and remove) runs/ below it (default %(default)s)")
    parser.add_argument("--tables", type=int, default=10, help="(a), (c) tables (default %(default)s)")
    parser.add_argument("--partitions", type=int, default=4, help="Kafka partitions of the generated topic (default %(default)s)")
    parser.add_argument("--buckets", type=int, default=0, help="the pipeline's layout.buckets; 0 is unpartitioned (default %(default)s)")
    parser.add_argument("--spark-conf", type=_conf, action="append", default=[], metavar="spark.KEY=VALUE",
                        help="extra Spark configuration for every job (repeatable); (c)'s own memory settings win")
    a = parser.add_argument_group("(a) throughput")
    a.add_argument("--events", type=int, default=1_000_000, help="generated row changes (default %(default)s)")
    a.add_argument("--key-space", type=int, default=None, help="keys per table (default max(1000, events / 20))")
    b = parser.add_argument_group("(b) growth")
    b.add_argument("--sizes", type=_sizes, default="500000,2000000,5000000", help="table sizes in rows, increasing (default %(default)s)")
    b.add_argument("--batch", type=int, default=20_000, help="changes per batch (default %(default)s)")
    b.add_argument("--keys", type=_choices(("hot", "uniform")), default="hot,uniform", help="key distributions (default %(default)s)")
    b.add_argument("--rounds", type=int, default=3,
                   help="measured suites, one after another, each on a fresh copy; a size's figure is the median of "
                        "all its batches (default %(default)s)")
    b.add_argument("--write-modes", type=_choices(WRITE_MODES), default=",".join(WRITE_MODES),
                   help="layout.write_mode of each measured pipeline; later ones also as a ratio to the first (default %(default)s)")
    c = parser.add_argument_group("(c) memory")
    c.add_argument("--touch-keys", type=int, default=5_000_000, help="keys touched by the one run (default %(default)s)")
    c.add_argument("--cluster", choices=("local", "standalone"), default="local",
                   help="local[2] (the JVM hosts driver and executors), or a standalone master and worker started "
                        "on 127.0.0.1 (the driver's JVM alone) (default %(default)s)")
    d = parser.add_argument_group("(d) tables")
    d.add_argument("--table-count", type=int, default=1000, help="tables the measured interval touches (default %(default)s)")
    d.add_argument("--changes-per-table", type=int, default=5, help="row changes of each table (default %(default)s)")
    parser.add_argument("--peer-home", type=Path, default=None,
                        help="(a), (d): the peer benchmark's PEER_HOME (../shared/peer/README.md): its end-to-end section "
                             "(MERGE INTO per table) over as many events and tables runs in each round")
    parser.add_argument("--same-input", action="store_true",
                        help="(a), with --peer-home: once after the rounds, the peer's pipeline over tidelake's own messages "
                             "(the same archive), both final tables compared row by row (bench/same_input.py); fails on "
                             "any difference but the peer's key-change leftovers")
    e = parser.add_argument_group("(e) tiny")
    e.add_argument("--tiny-sizes", type=_sizes, default="100,10000,50000",
                   help="row changes of the measured intervals, increasing (default %(default)s)")
    e.add_argument("--driver-max-messages", type=int, default=None,
                   help="the measured pipeline's driver_max_messages (default: the pipeline default); 0 is the always-Spark column")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.repeat < 1:
        build_parser().error(f"--repeat: expected at least 1, found {args.repeat}")
    if args.same_input and args.peer_home is None:
        build_parser().error("--same-input needs --peer-home")
    args.workdir.mkdir(parents=True, exist_ok=True)
    conf = dict(args.spark_conf)
    # Imported here: --help stays fast and needs no Spark.
    if "throughput" in args.only:
        from bench import apply_throughput

        apply_throughput.main(args.events, args.tables, args.partitions, args.key_space, args.repeat, args.buckets, args.workdir,
                              conf, args.peer_home, args.same_input)
    if "growth" in args.only:
        from bench import apply_growth

        apply_growth.main(args.sizes, args.batch, args.keys, args.partitions, args.repeat, args.buckets, args.workdir, conf,
                          args.write_modes, args.rounds)
    if "memory" in args.only:
        from bench import apply_memory

        apply_memory.main(args.touch_keys, args.tables, args.partitions, args.repeat, args.buckets, args.workdir, conf,
                          args.cluster)
    if "tables" in args.only:
        from bench import apply_tables

        apply_tables.main(args.table_count, args.changes_per_table, args.partitions, args.repeat, args.workdir, conf,
                          args.peer_home)
    if "tiny" in args.only:
        from bench import apply_tiny

        apply_tiny.main(args.tiny_sizes, args.partitions, args.repeat, args.workdir, conf, args.driver_max_messages)
    return 0
