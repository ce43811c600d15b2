"""Pyflakes-level checks (unused imports, undefined names, syntax) over the whole project."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_no_unused_imports_or_undefined_names() -> None:
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--select", "F,E9", "--quiet",
                           "cdc_codecs", "spark", "dags", "tests", "bench"], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-1000:]
