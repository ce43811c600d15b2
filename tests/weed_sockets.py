"""The Unix sockets ``weed mini`` (SeaweedFS) makes in /tmp, for the tests that check none outlives it."""

from __future__ import annotations

import time
from pathlib import Path


def weed_sockets() -> set[Path]:
    return set(Path("/tmp").glob("seaweedfs-*.sock"))


def sockets_made_since(before: set[Path], timeout: float = 20.0) -> set[Path]:
    """The sockets made since ``before`` was taken, once the admin service's is among them: it comes
    a moment after the S3 port answers, and a store stopped before it would leave nothing to check."""
    deadline = time.monotonic() + timeout
    while True:
        made = weed_sockets() - before
        if any(p.name.startswith("seaweedfs-admin-") for p in made) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert any(p.name.startswith("seaweedfs-admin-") for p in made), made
    return made
