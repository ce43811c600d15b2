"""A probe script run under spark-submit, as a job is: what the driver sees only there (spark-submit's
conf, its JVM already up, PYSPARK_GATEWAY_PORT)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def submit_probe(tmp_path: Path, code: str, *conf: str, master: str = "local[1]") -> subprocess.CompletedProcess[str]:
    """``code`` (with this checkout first on its path) under ``spark-submit --master <master> <conf...>``;
    fails the test unless it exits 0."""
    probe = tmp_path / "probe.py"
    probe.write_text(f"import sys\nsys.path.insert(0, {str(REPO)!r})\n{code}")
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    run = subprocess.run([str(bin_dir / "spark-submit"), "--master", master, *conf, str(probe)],
                         capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    return run
