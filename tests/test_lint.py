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


def test_the_build_declares_its_license_as_setuptools_77_wants() -> None:
    """``make install`` prints no deprecation: the license is an SPDX string, which needs setuptools >= 77."""
    import re
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert project["project"]["license"] == "Apache-2.0"
    (setuptools,) = [r for r in project["build-system"]["requires"] if r.startswith("setuptools")]
    assert re.fullmatch(r"setuptools>=(\d+)", setuptools) and int(setuptools.split(">=")[1]) >= 77, setuptools
