"""One run of a pipeline at a time: a lease in the archive.

Airflow's ``max_active_runs`` does not cover everything (a backfill's runs have their own
limit, a worker that lost its heartbeat keeps running, a ``tidelake run`` by hand), so
every run that changes tables holds the pipeline's lease:

    <pipeline>/lease/<epoch>.json      {"owner", "run", "acquired_at", "expires_at", "released"}

Taking the lease creates the next epoch's object *create-only*, so of two runs racing for
it exactly one wins. The holder renews it (rewrites its own object with a later expiry)
from a background thread while it lives, and releases it when done. A lease that expired
(its holder died) may be taken by the next run; the old holder then finds a newer epoch at
its next ``check()`` -- every commit calls it -- and stops before writing anything.

**Fencing.** A run can be frozen past its lease (a GC pause, a stopped VM, SIGSTOP) and then go
on: its renewal thread was frozen too, and its last ``check()`` may be a moment before a write.
So nothing is renewed on the assumption that nobody came: a holder whose own lease expired
takes it again only as any other run would, by creating the *next* epoch create-only (if
another run was first, this one has lost). And every write is fenced by the epoch: the SQL
catalog keeps the newest epoch in its own table (``spark.tables.catalog.CatalogFence``), raised
by each taker, and checked *in the transaction* of every catalog write (commits, tags, creates,
renames), so a run resumed after another took the lease cannot commit, however long it was
frozen; the archive's own writes (checkpoint, published record, isolation record) are preceded
by ``check()`` and are create-only or the same whoever writes them.

**The same run again.** A lease names the run that holds it (``run``: the Airflow DAG run and
interval, ``tidelake run``'s interval): the retry of a run that failed without releasing it (the
store was down when it tried) takes it over at once instead of waiting out its time to live;
the failed attempt, if it still lives, is fenced out by the new epoch. A run that fails releases
its lease (retrying the release for a while); a storage blip therefore never blocks the
pipeline for the lease's time to live.

The folder stays small: a run that takes epoch N deletes the epochs before N - 1 (the one
before its own stays, for ``tidelake`` to show who ran last). Nothing depends on them: a
taker always creates the newest epoch + 1, and the newest is never deleted. So ``check()``
reads two objects, its own epoch and the next one, and lists nothing: O(1) per commit
however long the pipeline has run.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable

import orjson

from cdc_codecs import TidelakeError
from spark.archive import layout, records
from spark.archive.records import CorruptArchiveFile
from spark.archive.storage import AlreadyExists, Storage

EPOCH_DIGITS = 12
# How long a failing run keeps trying to release its lease (each try is a storage call with its own
# bounded retries); after that its retry, the same run, takes the lease over anyway.
RELEASE_SECONDS = 20.0
log = logging.getLogger("tidelake.lease")


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
    run: str | None = None  # the run's identity, the same for its retries (None: not given)

    def live(self, now: float) -> bool:
        return not self.released and self.expires_at > now

    def describe(self) -> str:
        at = dt.datetime.fromtimestamp(self.acquired_at, dt.timezone.utc).isoformat(timespec="seconds")
        until = dt.datetime.fromtimestamp(self.expires_at, dt.timezone.utc).isoformat(timespec="seconds")
        run = f" for run {self.run}" if self.run else ""
        return f"{self.owner}{run} (since {at}, expires {until} unless renewed)"


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


# A lease record is the one record rewritten in place while other runs read it (renewed, released).
# An S3 PUT replaces an object whole, but an S3-compatible store that does not (SeaweedFS, loaded:
# the old body's tail after a shorter new one) can serve a read mid-overwrite. Such a read is read
# again after a pause; a record still malformed then is damaged.
REREADS = 2
REREAD_PAUSE = 0.25  # seconds


def _record(storage: Storage, path: str) -> LeaseRecord:
    where = f"{storage.url}/{path}"
    for attempt in range(REREADS + 1):
        try:
            doc = records.read_record(storage.read(path), records.Lease, where, "lease record", CorruptLease)
            break
        except CorruptLease:
            if attempt == REREADS:
                raise
            time.sleep(REREAD_PAUSE)
    return LeaseRecord(_epoch_of(path), doc["owner"], float(doc["acquired_at"]), float(doc["expires_at"]), doc["released"], doc.get("run"))


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
                 owner: str | None = None, clock: Callable[[], float] = time.time, renew: bool = True,
                 run: str | None = None, fence: Any = None) -> None:
        """``run``: the identity of the run, the same for its retries (``run_identity``): a live lease of
        the same run is taken over. ``fence``: a ``spark.tables.catalog.CatalogFence`` (or None) that
        every taker raises to its epoch and that checks each catalog write against it."""
        self.storage, self.pipeline = storage, pipeline
        self.ttl, self.wait = ttl_seconds, wait_seconds
        self.owner = owner or default_owner()
        self.run = run if run is not None else run_identity()
        self.fence = fence
        self.clock = clock
        self.renew_in_background = renew
        self.epoch: int | None = None
        self.epoch_at_failure: int | None = None
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
            again = held is not None and held.live(now) and self.run is not None and held.run == self.run
            if held is None or not held.live(now) or again:
                epoch = 1 if held is None else held.epoch + 1
                if self.fence is not None:  # never below the catalog's fence (a lease folder removed by hand)
                    epoch = max(epoch, (self.fence.epoch() or 0) + 1)
                if not self._take(epoch, now):
                    continue  # another run took it between our read and our create: look again
                if again:
                    log.warning("pipeline %s: took over the lease of an earlier attempt of this run (%s)",
                                self.pipeline, held.describe())  # type: ignore[union-attr]
                self._prune_before(epoch - 1)
                if self.renew_in_background:
                    self._stop.clear()
                    self._thread = threading.Thread(target=self._renew_loop, name=f"lease-{self.pipeline}", daemon=True)
                    self._thread.start()
                return self
            if now >= deadline:
                raise LeaseHeldError(
                    f"pipeline {self.pipeline} is being run by {held.describe()}; one run of a pipeline at a time. "
                    "Wait for it to finish, or if that run is dead, wait for its lease to expire"
                )
            time.sleep(min(1.0, max(0.05, deadline - now)))

    def _take(self, epoch: int, now: float) -> bool:
        """Create ``epoch`` create-only and fence the catalog to it; False if another run created it first."""
        acquired_at = self._acquired_at
        self._acquired_at = now
        try:
            self.storage.create(_path(self.pipeline, epoch), self._doc(now, released=False))
        except AlreadyExists:
            self._acquired_at = acquired_at
            return False
        self.epoch = epoch
        if self.fence is not None:
            try:
                self.fence.raise_to(epoch)
            except LeaseLostError:  # a newer epoch fenced the catalog meanwhile: give this one back at once
                self.storage.write(_path(self.pipeline, epoch), self._doc(now, released=True))
                self.epoch = None
                raise
            self.fence.attach(lambda: self.epoch)
        return True

    def release(self, patience: float = 0.0) -> None:
        """Give the lease back. ``patience``: seconds to keep trying when the store fails (a failing run's
        release); past them the lease is left to expire -- or to be taken over by this run's retry."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(patience or None)  # a renewal stuck in a hung store call is left behind (a daemon)
            self._thread = None
        if self.fence is not None:
            self.fence.detach()
        epoch, self.epoch = self.epoch, None
        if epoch is None:
            return
        if not patience:
            self._give_back(epoch, 0.0)
            return
        # A failing run: the release runs beside it for at most ``patience`` seconds -- a store that hangs
        # must not hold the failing task up for its calls' timeouts as well.
        done = threading.Thread(target=self._give_back, args=(epoch, patience), name=f"release-{self.pipeline}",
                                daemon=True)
        done.start()
        done.join(patience)
        if done.is_alive():
            log.warning("pipeline %s: could not release the lease (epoch %s) within %.0fs; it expires in at most "
                        "%.0fs, and this run's retry takes it over at once", self.pipeline, epoch, patience, self.ttl)

    def _give_back(self, epoch: int, patience: float) -> None:
        deadline = time.monotonic() + patience
        delay = 0.5
        while True:
            try:
                if self._mine(epoch):
                    self.storage.write(_path(self.pipeline, epoch), self._doc(self.clock(), released=True))
                return
            except Exception:  # noqa: BLE001 - the store is failing: try again while patience lasts
                if time.monotonic() + delay > deadline:
                    if patience:
                        log.warning("pipeline %s: could not release the lease (epoch %s) while the store fails; "
                                    "it expires in at most %.0fs, and this run's retry takes it over at once",
                                    self.pipeline, epoch, self.ttl)
                        return
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 5.0)

    def __enter__(self) -> Lease:
        return self if self.epoch is not None else self.acquire()

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        # A failing run (the store or the catalog failing, most often) must not leave its lease to
        # block the retry, nor hide its own error behind the release's: it tries for a while, then leaves it.
        taken = self._taken_by_another(exc) if exc is not None else None
        self.release(patience=RELEASE_SECONDS if exc_type is not None else 0.0)
        if taken is not None:
            # A run frozen past its lease fails on resuming in whatever it touches first (the catalog closed
            # its idle session, a fence refused its write): the cause to report is that another run took over.
            from spark.runtime.services import describe

            raise LeaseLostError(
                f"pipeline {self.pipeline}: another run took the lease from this run ({self.owner}, epoch "
                f"{self.epoch_at_failure}): {taken.describe()}; this run stopped without committing (its own error: "
                f"{describe(exc)})") from exc

    def _taken_by_another(self, exc: BaseException) -> LeaseRecord | None:
        """The run that took this run's lease, if one did -- asked only when the store is not what failed."""
        self.epoch_at_failure = self.epoch
        if self.epoch is None or isinstance(exc, LeaseLostError):
            return None
        from spark.runtime.services import S3, classify

        found = classify(exc)
        if found is not None and found.service == S3:
            return None
        try:
            held = self._held()
        except Exception:  # noqa: BLE001 - only to word the error better
            return None
        return held if held is not None and (held.epoch != self.epoch or held.owner != self.owner) else None

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
        now = self.clock()
        if held.expires_at <= now:
            # Expired: this run may have been frozen, and another may be about to take it. It is taken
            # again the way any run takes it -- the next epoch, create-only -- never renewed in place.
            lost = self.epoch
            if not self._take(lost + 1, now):
                raise LeaseLostError(
                    f"pipeline {self.pipeline}: the lease of this run ({self.owner}, epoch {lost}) expired and another run "
                    "took it; this run stops without committing")
            self._prune_before(lost)

    def renew(self) -> None:
        if self.epoch is not None:
            self.storage.write(_path(self.pipeline, self.epoch), self._doc(self.clock(), released=False))

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            try:
                held = self._held()
                # Only a lease still live is renewed: an expired one is taken again by check() (create-only).
                if held is not None and held.epoch == self.epoch and held.owner == self.owner and held.live(self.clock()):
                    self.renew()
            except Exception:  # noqa: BLE001 - the next check() before a commit reports a lost lease
                pass

    def _mine(self, epoch: int | None = None) -> bool:
        epoch = self.epoch if epoch is None else epoch
        held = self._held(epoch)
        return held is not None and held.epoch == epoch and held.owner == self.owner

    def _held(self, epoch: int | None = None) -> LeaseRecord | None:
        """The current holder as far as this run's epoch can tell, without listing: the next
        epoch's record if another run took the lease, else this epoch's."""
        epoch = self.epoch if epoch is None else epoch
        assert epoch is not None
        taken = _path(self.pipeline, epoch + 1)
        if self.storage.exists(taken):
            return _record(self.storage, taken)
        own = _path(self.pipeline, epoch)  # never pruned while it is the newest
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
        return orjson.dumps({"owner": self.owner, "run": self.run, "acquired_at": self._acquired_at,
                             "expires_at": now + self.ttl, "released": released})


RUN_ENV = "TIDELAKE_RUN_ID"


def run_identity(environ: Any = None) -> str | None:
    """This run's identity, the same for each of its retries: ``$TIDELAKE_RUN_ID`` if set (``tidelake run``
    sets it to the interval, ``--run-id`` overrides), else the Airflow task's DAG and run id (Airflow puts
    ``AIRFLOW_CTX_DAG_ID`` and ``AIRFLOW_CTX_DAG_RUN_ID`` in the environment of a task's processes),
    else None: a run with no identity never takes over a live lease."""
    env = os.environ if environ is None else environ
    if env.get(RUN_ENV):
        return env[RUN_ENV]
    if env.get("AIRFLOW_CTX_DAG_ID") and env.get("AIRFLOW_CTX_DAG_RUN_ID"):
        return f"airflow:{env['AIRFLOW_CTX_DAG_ID']}/{env['AIRFLOW_CTX_DAG_RUN_ID']}"
    return None
