from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def shared_dir() -> Path:
    """The project's shared/ folder: beside the checkout, or where TIDELAKE_SHARED says."""
    candidates = [Path(os.environ["TIDELAKE_SHARED"])] if "TIDELAKE_SHARED" in os.environ else []
    candidates += [REPO.parent / "shared", REPO / "shared"]
    for c in candidates:
        if (c / "conformance" / "MANIFEST.md").exists():
            return c
    raise RuntimeError(
        "shared/conformance not found beside the checkout; set TIDELAKE_SHARED to the folder holding conformance/"
    )


@pytest.fixture(scope="session")
def conformance() -> Path:
    return shared_dir() / "conformance"
