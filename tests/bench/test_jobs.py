"""The machine's CPU counters around a job, and the serial part of the scale-out figure computed from them."""

from __future__ import annotations

import os
import re
from pathlib import Path

from bench.apply_throughput import serial_part
from bench.jobs import JobRun, machine_cpu


def test_machine_cpu_reads_busy_and_idle_core_seconds_from_the_kernel_s_first_line(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal guest guest_nice; then a per-core line, ignored
    stat.write_text("cpu  100 20 30 400 50 6 7 80 9 0\ncpu0 1 1 1 1 1 1 1 1 0 0\n")
    hz = os.sysconf("SC_CLK_TCK")
    assert machine_cpu(str(stat)) == ((100 + 20 + 30 + 6 + 7) / hz, (400 + 50) / hz)  # steal and guest in neither


def test_machine_cpu_counts_this_process_s_work_as_busy() -> None:
    busy, idle = machine_cpu()
    spin = sum(i * i for i in range(3_000_000))
    after_busy, after_idle = machine_cpu()
    assert spin and after_busy > busy and after_idle >= idle


def _run(busy: float, idle: float) -> JobRun:
    return JobRun(0.0, 0, {}, busy_core_seconds=busy, idle_core_seconds=idle)


def test_the_serial_part_is_local_2_s_idle_core_seconds_and_its_work_beyond_one_core_s() -> None:
    # one core: 25 busy, its Spark alone 7 -> 18 of work; local[2]: 27 - 8 = 19 of work, 3 - 1.5 = 1.5 idle
    line = serial_part([_run(27.0, 3.0)], [_run(8.0, 1.5)], [_run(25.0, 24.0)], [_run(7.0, 7.0)])
    assert re.search(r"one core works 18\.00 core-s; local\[2\] works 19\.00 \(\+1\.00: the same work slower with both cores busy.*"
                     r"leaves 1\.50 core-s idle .*: 1\.76x by these counters; without the idle 1\.89x, without the extra "
                     r"work 1\.85x$", line), line
