"""The peer benchmark (Spark 3.5 + Iceberg 1.10 ``MERGE INTO``, ``../shared/peer/README.md``), run beside ours.

``merge_bench.py --sections b`` generates ``events`` Canal-JSON messages over ``tables`` tables
(its own generator and seed, cached under its PEER_HOME), pre-loads every table with
``base_rows`` rows, and times parse (``from_json``) + dedup (a window per key) + one ``MERGE
INTO`` per table, without Spark's start-up; it verifies the tables against its generator.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from bench.jobs import JobFailed

REPO = Path(__file__).resolve().parents[1]


def peer_script() -> Path:
    """``shared/peer/merge_bench.py``: beside the checkout, or where TIDELAKE_SHARED says (as the tests find shared/)."""
    shared = [Path(os.environ["TIDELAKE_SHARED"])] if "TIDELAKE_SHARED" in os.environ else []
    for folder in (*shared, REPO.parent / "shared", REPO / "shared"):
        if (folder / "peer" / "merge_bench.py").exists():
            return folder / "peer" / "merge_bench.py"
    raise JobFailed("shared/peer/merge_bench.py not found beside the checkout; set TIDELAKE_SHARED to the folder holding peer/")


def load_averages() -> str:
    """The machine's 1, 5 and 15 minute load averages, as ``a/b/c``."""
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def run_peer(peer_home: Path, tables: int, events: int, base_rows: int) -> dict[str, Any]:
    """The peer's section (b) over ``tables`` tables and ``events`` events; its results.json's "b"."""
    python = peer_home / "venv" / "bin" / "python"
    argv = [str(python), str(peer_script()), "--home", str(peer_home), "--sections", "b", "--tables", str(tables),
            "--events", str(events), "--e2e-base-rows", str(base_rows)]
    done = subprocess.run(argv, check=False, capture_output=True, text=True)
    if done.returncode:
        raise JobFailed(f"the peer's merge_bench.py exited {done.returncode}:\n{(done.stdout + done.stderr)[-3000:]}")
    results = json.loads((peer_home / "results.json").read_text())
    result = results["b"]
    if not result.get("verified"):
        raise JobFailed(f"the peer's tables did not verify: {result.get('mismatches')}")
    # Strict (issue 37): the peer's Spark session start and table creation too, as spark-submit to
    # exit counts ours (its interpreter and JVM launch before the session are not timed by it).
    result["strict_s"] = results.get("meta", {}).get("session_start_s", 0.0) + result.get("preload_s", 0.0) + result["total_s"]
    return result
