"""The pipeline's lease: one run at a time, a folder that stays small, a check that lists nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark.commit.lease import Lease, LeaseHeldError, LeaseLostError, current_lease, lease_dir
from spark.archive.storage import LocalStorage


class CountingStorage(LocalStorage):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.lists = 0

    def list(self, prefix: str) -> list[str]:
        self.lists += 1
        return super().list(prefix)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def lease(storage, clock, owner: str) -> Lease:  # noqa: ANN001
    return Lease(storage, "shop", ttl_seconds=60, owner=owner, clock=clock, renew=False)


def test_the_lease_folder_stays_small_however_many_runs_took_it(tmp_path: Path) -> None:
    storage, clock = CountingStorage(tmp_path), Clock()
    for run in range(30):
        with lease(storage, clock, f"run{run}"):
            pass
        clock.now += 1
    assert len(storage.list(lease_dir("shop"))) == 2  # the last run's epoch and the one before
    held = current_lease(storage, "shop")
    assert held is not None and (held.epoch, held.owner, held.released) == (30, "run29", True)


def test_check_lists_nothing_and_notices_a_run_that_took_an_expired_lease(tmp_path: Path) -> None:
    storage, clock = CountingStorage(tmp_path), Clock()
    first = lease(storage, clock, "first").acquire()
    lists = storage.lists
    for _ in range(5):
        first.check()
    assert storage.lists == lists  # two reads per check, no listing
    with pytest.raises(LeaseHeldError, match="being run by first"):
        lease(storage, clock, "second").acquire()
    clock.now += 61  # the first run died: its lease expired
    second = lease(storage, clock, "second").acquire()
    with pytest.raises(LeaseLostError, match="was taken by second"):
        first.check()
    second.check()
    first.release()  # the old holder's release changes nothing of the new one's
    held = current_lease(storage, "shop")
    assert held is not None and (held.owner, held.released) == ("second", False)
    second.release()


def test_a_lease_expired_but_not_taken_is_renewed_by_its_check(tmp_path: Path) -> None:
    storage, clock = CountingStorage(tmp_path), Clock()
    run = lease(storage, clock, "run").acquire()
    clock.now += 120
    run.check()
    held = current_lease(storage, "shop")
    assert held is not None and held.expires_at == clock.now + 60
    run.release()
