"""One run of a pipeline at a time: a lease in the archive.

Airflow's ``max_active_runs`` does not cover everything (a backfill's runs have their own
limit, a worker that lost its heartbeat keeps running, a ``tidelake run`` by hand), so
every run that changes tables holds the pipeline's lease:

    <pipeline>/lease/<epoch>.json      {"owner", "acquired_at", "expires_at", "released"}

Taking the lease creates the next epoch's object *create-only*, so of two runs racing for
it exactly one wins. The holder renews it (rewrites its own object with a later expiry)
from a background thread while it lives, and releases it when done. A lease that expired
(its holder died) may be taken by the next run; the old holder then finds a newer epoch at
its next ``check()`` -- every commit calls it -- and stops before writing anything.

The folder stays small: a run that takes epoch N deletes the epochs before N - 1 (the one
before its own stays, for ``tidelake`` to show who ran last). Nothing depends on them: a
taker always creates the newest epoch + 1, and the newest is never deleted. So ``check()``
reads two objects, its own epoch and the next one, and lists nothing: O(1) per commit
however long the pipeline has run.
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Callable

import orjson

from cdc_codecs import TidelakeError
from spark.archive import layout, records
from spark.archive.records import CorruptArchiveFile
from spark.archive.storage import AlreadyExists, Storage

EPOCH_DIGITS = 12


class LeaseHeldError(TidelakeError):
    """Another run holds the pipeline's lease."""


class LeaseLostError(TidelakeError):
    """This run's lease expired and another run took it: this run must stop."""


def lease_dir(pipeline: str) -> str:
    return f"{layout.pipeline_root(pipeline)}/lease"


@dataclass(frozen=True)
class LeaseRecord:
    epoch: int
    owner: str
    acquired_at: float
    expires_at: float
    released: bool

    def live(self, now: float) -> bool:
        return not self.released and self.expires_at > now

    def describe(self) -> str:
        at = dt.datetime.fromtimestamp(self.acquired_at, dt.timezone.utc).isoformat(timespec="seconds")
        until = dt.datetime.fromtimestamp(self.expires_at, dt.timezone.utc).isoformat(timespec="seconds")
        return f"{self.owner} (since {at}, expires {until} unless renewed)"


def default_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _path(pipeline: str, epoch: int) -> str:
    return f"{lease_dir(pipeline)}/{epoch:0{EPOCH_DIGITS}d}.json"


def _epoch_of(path: str) -> int:
    return int(path.rsplit("/", 1)[-1][:-5])


def _epoch_paths(storage: Storage, pipeline: str) -> list[str]:
    return [p for p in storage.list(lease_dir(pipeline)) if p.endswith(".json") and p.rsplit("/", 1)[-1][:-5].isdigit()]


class CorruptLease(CorruptArchiveFile):
    """A lease file is not one tidelake writes: which run holds the pipeline cannot be told."""


def _record(storage: Storage, path: str) -> LeaseRecord:
    where = f"{storage.url}/{path}"
    doc = records.read_record(storage.read(path), records.Lease, where, "lease record", CorruptLease)
    return LeaseRecord(_epoch_of(path), doc["owner"], float(doc["acquired_at"]), float(doc["expires_at"]), doc["released"])


def current_lease(storage: Storage, pipeline: str) -> LeaseRecord | None:
    """The newest epoch's record, or None if the pipeline never had a lease."""
    epochs = _epoch_paths(storage, pipeline)
    if not epochs:
        return None
    try:
        return _record(storage, max(epochs))
    except FileNotFoundError:  # pruned between the listing and the read: a newer epoch exists
        return current_lease(storage, pipeline)


class Lease:
    """The pipeline's lease, held by one run: ``with Lease(...).acquire():``."""

    def __init__(self, storage: Storage, pipeline: str, *, ttl_seconds: float = 600.0, wait_seconds: float = 0.0,
                 owner: str | None = None, clock: Callable[[], float] = time.time, renew: bool = True) -> None:
        self.storage, self.pipeline = storage, pipeline
        self.ttl, self.wait = ttl_seconds, wait_seconds
        self.owner = owner or default_owner()
        self.clock = clock
        self.renew_in_background = renew
        self.epoch: int | None = None
        self._acquired_at = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- taking and giving back

    def acquire(self) -> Lease:
        """Take the lease, waiting up to ``wait_seconds`` for a live holder to finish.

        Raises:
            LeaseHeldError: a live lease is held by another run after waiting.
        """
        deadline = self.clock() + self.wait
        while True:
            held = current_lease(self.storage, self.pipeline)
            now = self.clock()
            if held is None or not held.live(now):
                epoch = 1 if held is None else held.epoch + 1
                self._acquired_at = now
                try:
                    self.storage.create(_path(self.pipeline, epoch), self._doc(now, released=False))
                except AlreadyExists:
                    continue  # another run took it between our read and our create: look again
                self.epoch = epoch
                self._prune_before(epoch - 1)
                if self.renew_in_background:
                    self._thread = threading.Thread(target=self._renew_loop, name=f"lease-{self.pipeline}", daemon=True)
                    self._thread.start()
                return self
            if now >= deadline:
                raise LeaseHeldError(
                    f"pipeline {self.pipeline} is being run by {held.describe()}; one run of a pipeline at a time. "
                    "Wait for it to finish, or if that run is dead, wait for its lease to expire"
                )
            time.sleep(min(1.0, max(0.05, deadline - now)))

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.epoch is not None and self._mine():
            self.storage.write(_path(self.pipeline, self.epoch), self._doc(self.clock(), released=True))
        self.epoch = None

    def __enter__(self) -> Lease:
        return self if self.epoch is not None else self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    # -- while holding it

    def check(self) -> None:
        """Called before every commit: this run still holds the lease.

        Raises:
            LeaseLostError: another run took the lease (ours expired), or it was never taken.
        """
        if self.epoch is None:
            raise LeaseLostError(f"pipeline {self.pipeline}: this run does not hold the lease")
        held = self._held()
        if held is None or held.epoch != self.epoch or held.owner != self.owner or held.released:
            raise LeaseLostError(
                f"pipeline {self.pipeline}: the lease of this run ({self.owner}, epoch {self.epoch}) was taken by "
                f"{held.describe() if held else 'nobody'}; this run stops without committing (its lease expired)"
            )
        if held.expires_at <= self.clock():
            self.renew()  # expired but nobody took it: still ours, renew before writing

    def renew(self) -> None:
        if self.epoch is not None:
            self.storage.write(_path(self.pipeline, self.epoch), self._doc(self.clock(), released=False))

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            try:
                if self._mine():
                    self.renew()
            except Exception:  # noqa: BLE001 - the next check() before a commit reports a lost lease
                pass

    def _mine(self) -> bool:
        held = self._held()
        return held is not None and held.epoch == self.epoch and held.owner == self.owner

    def _held(self) -> LeaseRecord | None:
        """The current holder as far as this run's epoch can tell, without listing: the next
        epoch's record if another run took the lease, else this epoch's."""
        assert self.epoch is not None
        taken = _path(self.pipeline, self.epoch + 1)
        if self.storage.exists(taken):
            return _record(self.storage, taken)
        own = _path(self.pipeline, self.epoch)  # never pruned while it is the newest
        return _record(self.storage, own) if self.storage.exists(own) else None

    def _prune_before(self, epoch: int) -> None:
        """Delete the epochs before ``epoch``; a failure only leaves them for the next run."""
        for path in _epoch_paths(self.storage, self.pipeline):
            if _epoch_of(path) < epoch:
                try:
                    self.storage.delete(path)
                except OSError:
                    return

    def _doc(self, now: float, *, released: bool) -> bytes:
        return orjson.dumps({"owner": self.owner, "acquired_at": self._acquired_at, "expires_at": now + self.ttl,
                             "released": released})
