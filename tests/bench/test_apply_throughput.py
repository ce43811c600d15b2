"""`python -m bench apply --only throughput` at a tiny size: both masters submitted, every figure printed,
where each job's time went (its report's stages), and what Spark alone costs on each master."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench import apply_throughput

pytestmark = pytest.mark.slow


@pytest.mark.bench
def test_the_throughput_bench_prints_events_per_second_and_the_stages_of_both_masters(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    apply_throughput.main(3000, 2, 2, None, 1, 0, tmp_path, {})
    out = capsys.readouterr().out
    for master in ("local[2]", "local[1]"):
        assert re.search(rf"apply job {re.escape(master)}, spark-submit to exit +[\d.]+ +[\d,]+ +[\d.]+", out), out
    # Every job starts Spark (driver_max_messages = 0), counted apart from the stage that started it.
    assert len(re.findall(r"^ {8}(start Spark|decode|fold|commit and tag) +[\d.]+$", out, re.M)) == 8, out
    assert re.search(r"speed-up per stage local\[1\] -> local\[2\]: start Spark [\d.]+x, decode [\d.]+x, fold [\d.]+x, "
                     r"rewrite [\d.]+x, commit and tag [\d.]+x", out), out
    assert re.search(r"^    decode vs parse: [\d.]+x \(the decode stage's CPU a message", out, re.M), out
    for master in ("local[2]", "local[1]"):
        assert re.search(rf"Spark alone {re.escape(master)}: start, a task per slot, stop +[\d.]+$", out, re.M), out
    assert re.search(r"speed-up local\[1\] -> local\[2\]: [\d.]+x \(target >= 1.7\); beyond Spark alone: -?[\d.]+x; "
                     r"the bound if all of that scaled perfectly: [\d.]+x", out), out
    assert re.search(r"round 1: local\[1\] on one core [\d.]+s \(Spark alone [\d.]+s\)", out), out
    assert re.search(r"scale-out one core -> two \(local\[1\] on one core [\d.]+s, Spark alone [\d.]+s; local\[2\] on both\): "
                     r"[\d.]+x whole; beyond Spark alone: -?[\d.]+x \(target >= 1.8\)", out), out
    assert re.search(r"speed-up per stage one core -> two \(local\[1\] on one core -> local\[2\]\): start Spark [\d.]+s -> "
                     r"[\d.]+s [\d.]+x, decode [\d.]+s -> [\d.]+s [\d.]+x, fold .*, commit and tag [\d.]+s -> [\d.]+s [\d.]+x$",
                     out, re.M), out
    assert re.search(r"serial part by the machine's CPU counters \(beyond Spark alone, medians\): one core works -?[\d.]+ core-s; "
                     r"local\[2\] works -?[\d.]+ \([+-][\d.]+: the same work slower with both cores busy", out), out
    assert re.search(r"the host's own scale-out: the decode stage's tasks in one process on one core [\d.]+s, dealt between "
                     r"two processes on two cores [\d.]+s: [\d.]+x", out), out


@pytest.mark.parametrize("rounds", [1, 3])
def test_the_peer_table_prints_the_strict_ratio_beside_the_headline_one(capsys, rounds: int) -> None:  # noqa: ANN001
    """Strict: spark-submit to exit against the peer's session start + table creation + parse + dedup + MERGE."""
    from bench.jobs import JobRun

    peer = [{"total_s": 20.0, "events_per_s": 50_000, "parse_s": 10.0, "dedup_s": 5.0, "merge_s": 5.0,
             "strict_s": 30.0}] * rounds
    ours = [JobRun(15.0, 0, {"seconds": 10.0, "stage_seconds": {"start Spark": 1.0}})] * rounds
    apply_throughput._print_peer(peer, ours, 1_000_000, ["1.0/1.0/1.0"] * rounds)
    out = capsys.readouterr().out
    assert re.search(rf"strict \(spark-submit to exit against the peer's Spark session start \+ table creation \+ parse "
                     rf"\+ dedup \+ MERGE, median of {rounds}\): 2.00x the peer \(target >= 2x\); headline ratio 2.22x", out), out


def test_a_pinned_job_and_every_process_it_starts_run_on_the_cores_asked_for() -> None:
    """``cores=1`` confines spark-submit's whole tree (JVM, Python driver, PySpark workers) to one core:
    what the one-core side of the scale-out figure relies on."""
    import os
    import subprocess
    import sys

    from bench.jobs import pinned

    first = sorted(os.sched_getaffinity(0))[0]
    child = [sys.executable, "-c", "import os, subprocess, sys; print(sorted(os.sched_getaffinity(0))); sys.stdout.flush(); "
             "subprocess.run([sys.executable, '-c', 'import os; print(sorted(os.sched_getaffinity(0)))'])"]
    out = subprocess.run(child, preexec_fn=pinned(1), capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[:2] == [f"[{first}]", f"[{first}]"], out
    with pytest.raises(Exception, match="cores asked for"):
        pinned(len(os.sched_getaffinity(0)) + 1)
