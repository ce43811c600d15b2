"""Pausing a real run at a named point, for the fault tests and ``python -m bench faults``.

``TIDELAKE_STOP_AT=point[#n][,point[#n]...]`` makes the process stop itself (SIGSTOP, as a frozen
VM or a long GC pause would) the ``n``-th time (default: the first) it reaches ``point``: an apply
step boundary (``committed:0``, ``tagged``, ``checkpointed``, ``published``, see
``spark.commit.apply``) or ``catalog-write`` (inside a catalog write's transaction, after the
run's last lease check, before the lease fence is checked). The test resumes it with SIGCONT.
Unset (always, outside tests), ``at`` costs one dictionary lookup.
"""

from __future__ import annotations

import os
import signal
import threading
from collections import Counter

STOP_ENV = "TIDELAKE_STOP_AT"
_seen: Counter[str] = Counter()
_lock = threading.Lock()


def _targets() -> dict[str, int]:
    out = {}
    for item in filter(None, (os.environ.get(STOP_ENV) or "").split(",")):
        point, _, n = item.strip().partition("#")
        out[point] = int(n or 1)
    return out


def at(point: str) -> None:
    """Stop this process here if ``TIDELAKE_STOP_AT`` names ``point`` (and this is its n-th time)."""
    if STOP_ENV not in os.environ:
        return
    targets = _targets()
    if point not in targets:
        return
    with _lock:
        _seen[point] += 1
        hit = _seen[point] == targets[point]
    if hit:
        os.kill(os.getpid(), signal.SIGSTOP)


def step_hook():  # noqa: ANN201 - Callable[[str], None] | None
    """``apply_interval``'s ``fault`` hook pausing at ``TIDELAKE_STOP_AT``'s steps; None when unset."""
    return at if os.environ.get(STOP_ENV) else None
