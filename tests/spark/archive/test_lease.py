"""The pipeline's lease: one run at a time, a folder that stays small, a check that lists nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark.archive.lease import Lease, LeaseHeldError, LeaseLostError, current_lease, lease_dir
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


def test_a_lease_expired_but_not_taken_is_taken_again_by_its_check_under_a_new_epoch(tmp_path: Path) -> None:
    """Never renewed in place: a holder frozen past its lease competes for it like any run, create-only."""
    storage, clock = CountingStorage(tmp_path), Clock()
    run = lease(storage, clock, "run").acquire()
    clock.now += 120
    run.check()
    held = current_lease(storage, "shop")
    assert held is not None and (held.epoch, held.owner, held.expires_at) == (2, "run", clock.now + 60)
    assert run.epoch == 2
    run.release()


def test_an_expired_holder_that_another_run_overtook_cannot_take_it_again(tmp_path: Path) -> None:
    storage, clock = CountingStorage(tmp_path), Clock()
    frozen = lease(storage, clock, "frozen").acquire()
    clock.now += 120
    other = lease(storage, clock, "other").acquire()
    with pytest.raises(LeaseLostError):
        frozen.check()
    other.check()
    assert current_lease(storage, "shop").owner == "other"


def test_the_retry_of_the_same_run_takes_over_its_live_lease_and_fences_the_attempt_before(tmp_path: Path) -> None:
    storage, clock = CountingStorage(tmp_path), Clock()
    first = Lease(storage, "shop", ttl_seconds=600, owner="attempt1", clock=clock, renew=False, run="dag/run_1").acquire()
    with pytest.raises(LeaseHeldError, match="for run dag/run_1"):
        Lease(storage, "shop", ttl_seconds=600, owner="other", clock=clock, renew=False, run="dag/run_2").acquire()
    with pytest.raises(LeaseHeldError):  # no identity: never a takeover
        Lease(storage, "shop", ttl_seconds=600, owner="anon", clock=clock, renew=False, run="").acquire()
    retry = Lease(storage, "shop", ttl_seconds=600, owner="attempt2", clock=clock, renew=False, run="dag/run_1").acquire()
    assert retry.epoch == 2
    with pytest.raises(LeaseLostError, match="attempt2"):
        first.check()
    retry.check()
    retry.release()


class FailingStorage(LocalStorage):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.failing = False

    def write(self, path: str, data: bytes) -> None:
        if self.failing:
            raise OSError("AWS Error NETWORK_CONNECTION during PutObject operation: curlCode: 7")
        super().write(path, data)


def test_a_run_failing_on_the_store_gives_up_its_release_after_a_while_and_keeps_its_own_error(tmp_path: Path, caplog) -> None:
    import logging

    import spark.archive.lease as lease_module

    caplog.set_level(logging.WARNING, logger="tidelake.lease")  # whatever an earlier test's CLI set it to
    storage, clock = FailingStorage(tmp_path), Clock()

    lease_module.RELEASE_SECONDS, saved = 1.0, lease_module.RELEASE_SECONDS
    try:
        with pytest.raises(RuntimeError, match="the run's own error"):
            with Lease(storage, "shop", ttl_seconds=600, owner="a", clock=clock, renew=False, run="r"):
                storage.failing = True
                raise RuntimeError("the run's own error")
    finally:
        lease_module.RELEASE_SECONDS = saved
    assert "could not release the lease" in caplog.text
    storage.failing = False
    # Its retry (the same run) does not wait for the lease's 600 s.
    Lease(storage, "shop", ttl_seconds=600, owner="b", clock=clock, renew=False, run="r").acquire().release()


def test_the_catalog_fence_refuses_a_write_of_a_run_whose_lease_was_taken(tmp_path: Path) -> None:
    """Fencing in the catalog's own transaction: whatever the stale run checked before, its write is refused."""
    from pyiceberg.catalog.sql import SqlCatalog
    import pyarrow as pa

    from spark.tables.catalog import catalog_fence

    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path / 'c.db'}", warehouse=(tmp_path / "wh").as_uri())
    catalog.create_namespace("ns")
    table = catalog.create_table("ns.t", pa.schema([("a", pa.int64())]))
    storage, clock = CountingStorage(tmp_path / "archive"), Clock()
    stale = Lease(storage, "shop", ttl_seconds=60, owner="stale", clock=clock, renew=False, fence=catalog_fence(catalog, "shop"))
    stale.acquire()
    table.append(pa.table({"a": [1]}))  # the holder writes
    clock.now += 120  # frozen past its lease
    taker = Lease(storage, "shop", ttl_seconds=60, owner="taker", clock=clock, renew=False, fence=catalog_fence(catalog, "shop"))
    taker.acquire()
    assert catalog_fence(catalog, "shop").epoch() == 2
    # The stale run resumes *without* checking: one process here, so attach its epoch back as its own.
    stale.fence.attach(lambda: 1)
    with pytest.raises(LeaseLostError, match="fenced"):
        catalog.load_table("ns.t").append(pa.table({"a": [2]}))
    stale.fence.attach(lambda: taker.epoch)
    catalog.load_table("ns.t").append(pa.table({"a": [3]}))
    assert sorted(catalog.load_table("ns.t").scan().to_arrow()["a"].to_pylist()) == [1, 3]
    taker.release()


class MidOverwrite(LocalStorage):
    """A store that serves a lease record mid-overwrite ``torn`` times (the new body, then the old
    one's tail: what SeaweedFS served a loaded test once), then whole."""

    def __init__(self, root: Path, torn: int) -> None:
        super().__init__(root)
        self.torn = torn

    def read(self, path: str) -> bytes:
        data = super().read(path)
        if "/lease/" in path and self.torn:
            self.torn -= 1
            return data + b'ires_at": 1.0}'
        return data


def test_a_lease_record_read_mid_overwrite_is_read_again_and_one_still_malformed_is_damaged(tmp_path: Path) -> None:
    from spark.archive import lease as leases

    clock = Clock()
    lease(LocalStorage(tmp_path), clock, "a").acquire()
    assert current_lease(MidOverwrite(tmp_path, torn=leases.REREADS), "shop").owner == "a"
    with pytest.raises(leases.CorruptLease, match="lease record"):
        current_lease(MidOverwrite(tmp_path, torn=leases.REREADS + 1), "shop")
