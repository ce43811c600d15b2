"""Tag retention: which published watermarks stay readable, and retiring the others on every table together.

The policy (``[maintenance]``) works like backup retention on each W's wall time, (W >> 18) ms
(TiDB TSO = physical ms << 18 | logical; derived watermarks have the same shape). A W's age
is measured on the pipeline's own clock, the wall time of its newest published W (or now,
if that is later than now), not on the wall clock: a pipeline that replayed a historical range
(a migration, a rebuild over an old archive) keeps the tiers of that history, where wall-clock
ages would retire every W but the latest at its first maintenance; and a pipeline that stopped
receiving changes stops aging (its storage does not grow either). Kept:

- every W younger than ``keep_all``;
- the last W of each UTC hour, while younger than ``keep_hourly``;
- the last W of each UTC day, while younger than ``keep_daily``;
- the latest published W, always (it is what ``main`` shows and what ``--at latest`` reads);
- a W an isolated table is held at (``on_table_error = "isolate"``, ``spark.commit.isolation``), while
  it is: the table's last readable state, and the checkpoint its replay starts from.

"Last of its hour/day" is decided over every published W, so a W kept by the hourly tier stays
the last of its hour until it ages out. Retirement is final: a retired W never comes back, even
if the policy is loosened later (its snapshots may be expired and its files deleted).

Retiring never leaves a W half-retired. The order of writes:

1. the marker ``<pipeline>/retired/<W>.json`` (create-only, atomic): from here on every reader
   treats W as gone (``spark.commit.published.retired_watermarks``);
2. a ``retired`` entry in W's published record (a record that says it is retired);
3. tag ``wm_<W>`` removed from every table, one commit per table for all its retired tags.

A crash after (1) leaves W retired for readers with some tags still present; the next run
finds every retired W whose tag is still on a table and finishes (2) and (3). Nothing reads a
tag of a retired W, so the leftover tags are harmless meanwhile (they only delay expiry).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from pyiceberg.table.update.snapshot import ManageSnapshots

from spark.tables import catalog as cat
from spark.config import MaintenanceConfig, PipelineConfig
from spark.archive.lease import Lease
from spark.commit.published import mark_retired, record_retired
from spark.archive.storage import Storage
from spark.tables import internals
from spark.core.watermark import tag_name, tag_watermark, watermark_datetime

UTC = dt.timezone.utc

# Why a W is retained (the first that applies).
LATEST, KEEP_ALL, KEEP_HOURLY, KEEP_DAILY = "latest", "keep_all", "keep_hourly", "keep_daily"
ISOLATED = "isolated"


@dataclass(frozen=True)
class RetentionPlan:
    """What the policy decides at ``now``: retained Ws (with why), Ws to retire now, Ws retired before."""

    now: dt.datetime
    retained: dict[int, str]  # W -> LATEST / KEEP_ALL / KEEP_HOURLY / KEEP_DAILY / ISOLATED
    retire: tuple[int, ...]  # retained until now, expired by the policy
    retired_before: tuple[int, ...]

    @property
    def retained_watermarks(self) -> list[int]:
        return sorted(self.retained)


def plan_retention(published: Sequence[int], retired: Iterable[int], policy: MaintenanceConfig, now: dt.datetime,
                   held: Iterable[int] = ()) -> RetentionPlan:
    """The retention decision for ``published`` Ws at ``now`` (pure; ``retired`` stay retired; ``held``:
    the Ws isolated tables are held at, kept whatever their age)."""
    held = set(held)
    retired_before = set(retired)
    marks = sorted(published)
    last_of_hour: dict[tuple[int, int, int, int], int] = {}
    last_of_day: dict[dt.date, int] = {}
    for w in marks:  # ascending: the last one seen in a bucket wins
        t = watermark_datetime(w)
        last_of_hour[(t.year, t.month, t.day, t.hour)] = w
        last_of_day[t.date()] = w
    hourly, daily = set(last_of_hour.values()), set(last_of_day.values())
    clock = min(now, watermark_datetime(marks[-1])) if marks else now  # the pipeline's clock: its newest W
    retained: dict[int, str] = {}
    retire = []
    for w in marks:
        if w in retired_before:
            continue
        age = clock - watermark_datetime(w)
        if w == marks[-1]:
            why: str | None = LATEST
        elif w in held:
            why = ISOLATED
        elif age < policy.keep_all:
            why = KEEP_ALL
        elif w in hourly and age < policy.keep_hourly:
            why = KEEP_HOURLY
        elif w in daily and age < policy.keep_daily:
            why = KEEP_DAILY
        else:
            why = None
        if why is None:
            retire.append(w)
        else:
            retained[w] = why
    return RetentionPlan(now, retained, tuple(retire), tuple(sorted(retired_before)))


@dataclass
class RetireResult:
    retired: list[int]  # Ws whose marker this run created
    finished: list[int]  # Ws retired by an earlier run that still had tags (a crash in between)
    tags_removed: dict[str, int] = field(default_factory=dict)  # table name -> tags removed


def retired_tags_left(tables: Sequence[Any], retired: Iterable[int]) -> dict[str, list[str]]:
    """Per table (upstream db.table), the tags of retired Ws it still carries."""
    names = {tag_name(w) for w in retired}
    out = {}
    for t in tables:
        left = sorted(n for n in t.metadata.refs if n in names)
        if left:
            out[cat.table_label(t)] = left
    return out


def retire_watermarks(
    config: PipelineConfig, storage: Storage, catalog: Any, plan: RetentionPlan, *, lease: Lease,
    dry_run: bool = False, step: Callable[[str], None] = lambda at: None,
    progress: Callable[[str, int, int], None] = lambda s, d, t: None,
) -> RetireResult:
    """Retire ``plan.retire`` and finish earlier retirements, in the crash-safe order of the module docstring."""
    tables = cat.pipeline_tables(catalog, config)
    left = retired_tags_left(tables, plan.retired_before)
    unfinished = sorted({w for names in left.values() for n in names if (w := tag_watermark(n)) is not None})
    result = RetireResult(list(plan.retire), unfinished)
    if dry_run:
        every = retired_tags_left(tables, [*plan.retire, *plan.retired_before])
        result.tags_removed = {name: len(tags) for name, tags in every.items()}
        return result
    entry = {"retired_at": plan.now.isoformat(), "by": "maintenance"}
    progress("retire", 0, len(plan.retire))
    for i, w in enumerate(plan.retire):
        lease.check()
        mark_retired(storage, config.name, w, entry)
        progress("retire", i + 1, len(plan.retire))
    step("retire:marked")
    for w in [*unfinished, *plan.retire]:
        lease.check()
        record_retired(storage, config.name, w, entry)
    step("retire:recorded")
    gone = {tag_name(w) for w in [*plan.retire, *plan.retired_before]}
    progress("untag", 0, len(tables))
    for i, table in enumerate(tables):
        tags = sorted(n for n in table.metadata.refs if n in gone)
        if tags:
            tx = internals.transaction(table)
            manage = ManageSnapshots(tx)
            for name in tags:
                manage = manage.remove_tag(name)
            manage.commit()  # staged: the transaction commits once
            lease.check()
            tx.commit_transaction()
            result.tags_removed[cat.table_label(table)] = len(tags)
        progress("untag", i + 1, len(tables))
    step("retire:untagged")
    return result
