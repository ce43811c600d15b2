"""`python -m bench apply --only memory --cluster standalone` at a tiny size: a real standalone master and
worker, the driver's JVM and the executors' sampled apart."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench import apply_memory

pytestmark = pytest.mark.slow


@pytest.mark.bench
def test_the_memory_bench_on_a_standalone_cluster_samples_driver_and_executors_apart(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    apply_memory.main(3000, 2, 2, 1, 0, tmp_path, {}, "standalone")
    out = capsys.readouterr().out
    assert "spark-submit to a standalone cluster (spark://127.0.0.1:" in out
    assert "3,000 keys: 1 of 1 runs completed" in out
    peaks = {m.group(1).strip(): int(m.group(3).replace(",", ""))
             for m in re.finditer(r"^    (Python driver|driver JVM|largest executor JVM|largest Python worker)\s+"
                                  r"([\d,]+) MiB\s+([\d,]+) MiB", out, re.M)}
    assert set(peaks) == {"Python driver", "driver JVM", "largest executor JVM", "largest Python worker"}, out
    assert all(v > 50 for v in peaks.values()), peaks  # each role was found and sampled (a JVM or Python is never that small)
