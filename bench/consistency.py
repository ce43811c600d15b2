"""Soak of the consistency promise: many generated histories of operations per protocol.

    python -m bench consistency --histories 1000 [--protocols canal-json,simple] [--seed S] [--steps 25]

Runs the model-based state machine of ``tests/spark/test_operations.py`` (replays, reruns,
backfills, crashes, overlapping runs, bad messages, table DDL; every published W and every
table's main checked against the reference model after every step) with new examples, one
pytest process per protocol, and prints per protocol the histories run, the mismatches
found (a mismatch stops that protocol and prints its shrunk example) and histories/s.
The state machine is the single harness: this command only drives it at a larger size.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cdc_codecs import PROTOCOLS

REPO = Path(__file__).resolve().parents[1]
TEST = "tests/spark/test_operations.py::test_operations_match_the_model_many"


def soak(protocol: str, histories: int, steps: int, seed: int) -> tuple[int, bool, float, str]:
    """(histories run, mismatch found, seconds, pytest's tail) for one protocol."""
    with tempfile.TemporaryDirectory() as tmp:
        counter = Path(tmp) / "histories"
        env = {**os.environ, "TIDELAKE_HISTORIES": str(histories), "TIDELAKE_STEPS": str(steps),
               "TIDELAKE_HISTORY_COUNTER": str(counter), "HYPOTHESIS_PROFILE": "default"}
        started = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-x", "-m", "slow", "-p", "no:cacheprovider",
             f"--hypothesis-seed={seed}", f"{TEST}[{protocol}]"],
            cwd=REPO, env=env, capture_output=True, text=True,
        )
        took = time.perf_counter() - started
        ran = len(counter.read_text().splitlines()) if counter.exists() else 0
    return ran, proc.returncode != 0, took, (proc.stdout + proc.stderr)[-4000:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench consistency", description=__doc__.split("\n\n")[0])
    parser.add_argument("--histories", type=int, default=50, help="histories per protocol (default 50)")
    parser.add_argument("--protocols", default=",".join(sorted(PROTOCOLS)), help="comma-separated protocol names (default: all)")
    parser.add_argument("--steps", type=int, default=25, help="operations per history (default 25)")
    parser.add_argument("--seed", type=int, default=None, help="hypothesis seed (default: random, printed)")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    print(f"consistency soak: {args.histories} histories per protocol, {args.steps} steps each, seed {seed}")
    print(f"{'protocol':<24}{'histories':>10}{'mismatches':>12}{'seconds':>10}{'histories/s':>13}")
    failed = False
    for protocol in args.protocols.split(","):
        ran, mismatch, took, tail = soak(protocol, args.histories, args.steps, seed)
        failed |= mismatch
        print(f"{protocol:<24}{ran:>10}{int(mismatch):>12}{took:>10.0f}{ran / took:>13.2f}", flush=True)
        if mismatch:
            print(tail)
    return 1 if failed else 0
