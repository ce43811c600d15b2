"""The apply run's report (``reports/<interval>/apply.json``): what an interval's run did, for the
DAG's publish task (``spark.commit.published.announcement``), ``tidelake run`` and operators.

A run that applied the interval writes ``apply.json``; one that only confirmed it (W published
already, every table at or past it) writes ``apply.confirmed.json`` beside it, so the applying
run's counts and timings stay (docs/archive.md, "Reports").
"""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from spark.archive import layout
from spark.archive.storage import Storage
from spark.commit.isolation import Isolated, held_phrase
from spark.commit.published import CONFIRMATION_REPORT, CONFIRMED, NOT_CONSISTENT
from spark.core.text import human_duration
from spark.core.watermark import watermark_seconds, watermark_time
from spark.tables import catalog as cat
from spark.tables.properties import DROPPED


def isolated_report(entries: Iterable[Isolated]) -> dict[str, dict[str, Any]]:
    """The held tables, by name: where each is held, why."""
    return {e.name: {"held_at": e.held_at, "held_at_time": watermark_time(e.held_at), "reason": e.reason(), **e.to_dict()}
            for e in sorted(entries, key=lambda e: e.ref)}


def applied_report(*, pipeline: str, outcome: str, start: dt.datetime, end: dt.datetime, w: int, w_prev: int,
                   sides: list[tuple[tuple[str, int], Any]], starts: Mapping[tuple[str, int], int], skipped: int,
                   quarantine: Any, tables: Iterable[Any], events_applied: Mapping[str, int],
                   isolated: Mapping[tuple[str, str], Isolated], caught_up: list[str], seconds: float,
                   stages: Mapping[str, float], ran_in: str) -> dict[str, Any]:
    """The report of a run that applied an interval: ``sides`` its side outputs by partition,
    ``starts`` each partition's first offset of the interval (segments before it were read again)."""
    named = {cat.table_label(t): t for t in tables}
    return {
        "step": "apply",
        "pipeline": pipeline,
        "outcome": outcome,
        "finished_at": dt.datetime.now(dt.UTC).isoformat(),
        "interval": {"start": start.isoformat(), "end": end.isoformat()},
        "watermark": w,
        "previous_watermark": w_prev,
        "watermark_time": watermark_time(w),
        "lag_seconds": round(end.timestamp() - watermark_seconds(w), 3) if w else None,
        # This interval's messages; segments of earlier intervals read again for their pending
        # changes are counted apart, so "decoded" matches what the interval landed.
        "messages_decoded": sum(side.messages for key, side in sides if side.start >= starts.get(key, 0)),
        "events_decoded": sum(side.events for key, side in sides if side.start >= starts.get(key, 0)),
        "messages_reread": sum(side.messages for key, side in sides if side.start < starts.get(key, 0)),
        "already_applied_skipped": skipped,
        "quarantined": len(quarantine.new),
        "bad_messages_accepted": len(quarantine.accepted),
        "tables": {
            name: {
                "events_applied": events_applied.get(name, 0),
                "snapshot": t.current_snapshot().snapshot_id if t.current_snapshot() else None,
                "dropped": DROPPED in t.properties,
                **({"isolated": True} if cat.upstream_name(t) in isolated else {}),
            }
            for name, t in sorted(named.items())
        },
        # Tables held at their last good W (on_table_error = "isolate"): not tagged at this W.
        "isolated": isolated_report(isolated.values()),
        # Tables this run brought to a W that was published while they were isolated.
        "caught_up": caught_up,
        "seconds": round(seconds, 3),
        # Where the run's time went: decode (stage 2), fold (3), the tables' rewrites (4) and commits (5);
        # "start Spark" apart, when this interval started it.
        "stage_seconds": {name: round(v, 3) for name, v in stages.items()},
        "ran_in": ran_in,  # "driver": without Spark (driver_max_messages)
    }


def confirmed_report(*, pipeline: str, start: dt.datetime, end: dt.datetime, w: int, w_prev: int, note: str,
                     isolated: Iterable[Isolated]) -> dict[str, Any]:
    """The report of a run that only confirmed the interval: W published, every table at or past it."""
    return {
        "step": "apply", "pipeline": pipeline, "outcome": CONFIRMED if w else NOT_CONSISTENT,
        "interval": {"start": start.isoformat(), "end": end.isoformat()},
        "watermark": w, "previous_watermark": w_prev,
        "watermark_time": watermark_time(w),
        "note": note,
        "isolated": isolated_report(isolated),
        "confirmed_at": dt.datetime.now(dt.UTC).isoformat(),
    }


def write_report(storage: Storage, pipeline: str, start: dt.datetime, end: dt.datetime, report: Mapping[str, Any],
                 *, confirmation: bool = False) -> None:
    """``apply.json`` for a run that applied the interval; a ``confirmation`` beside the applying
    run's (``apply.confirmed.json``), or in its place if there is none."""
    path = layout.report_path(pipeline, start, end, "apply")
    if confirmation and storage.exists(path):
        path = layout.report_path(pipeline, start, end, CONFIRMATION_REPORT)
    storage.write(path, orjson.dumps(report, option=orjson.OPT_INDENT_2))


# What ``tidelake run``, ``backfill``, the demo and the apply job's log print of a run's reports.

def lag_seconds(apply: dict[str, Any]) -> float | None:
    """How far W's wall time is behind the interval end (a confirming run's report does not store it)."""
    w = apply["watermark"]
    if not w:
        return None
    if apply.get("lag_seconds") is not None:
        return float(apply["lag_seconds"])
    return dt.datetime.fromisoformat(apply["interval"]["end"]).timestamp() - watermark_seconds(w)


OUTCOMES = {
    "published": "published: this run made W visible to readers",
    "confirmed": "confirmed: W was already published by an earlier run; tables and tags left as they are",
    "not-consistent": "not consistent yet: some partition has reported no watermark, nothing tagged",
}


def print_report(report: dict[str, Any], out: Any = None) -> None:
    out = out or sys.stdout
    apply, land = report["apply"], report["land"]
    w = apply["watermark"]
    print(f"interval {apply['interval']['start']} .. {apply['interval']['end']}", file=out)
    reused = " (reused: an earlier run landed this interval; nothing re-read from Kafka)" if land.get("reused") else ""
    print(f"  landed     {land.get('messages', 0):>10,} messages{reused}", file=out)
    if "events_decoded" in apply:
        print(f"  decoded    {apply['events_decoded']:>10,} events ({apply['already_applied_skipped']:,} already applied, "
              f"{apply['quarantined']:,} quarantined)", file=out)
    if w:
        print(f"  watermark  {w} = {watermark_time(w)} (lag {human_duration(lag_seconds(apply) or 0)} behind the interval end)",
              file=out)
    else:
        print("  watermark  none yet: some partition has reported no watermark", file=out)
    outcome = apply.get("outcome", "published" if w else "not-consistent")
    print(f"  outcome    {OUTCOMES.get(outcome, outcome)}", file=out)
    tables = apply.get("tables", {})
    width = max([len(n) for n in tables] + [5])
    for name, t in tables.items():
        flag = " (dropped)" if t["dropped"] else ""
        print(f"  {name:<{width}}  {t['events_applied']:>8,} events applied{flag}", file=out)
    for line in isolated_lines(apply):
        print(f"  {line}", file=out)


def isolated_lines(apply: dict[str, Any]) -> list[str]:
    """An apply report's isolated tables (on_table_error = "isolate"), one line each, and those it caught up."""
    lines = [(f"ISOLATED {name}: {held_phrase(e)}, not tagged at this W: {e['reason']}" if e.get("new_name") else
              f"ISOLATED {name}: held at W {e['held_at']} ({watermark_time(e['held_at']) if e['held_at'] else 'before its first W'}) "
              f"since {e['since']}, not tagged at this W: {e['reason']}")
             + (f"; it stays held: {e['stays']}" if e.get("stays") else "") for name, e in apply.get("isolated", {}).items()]
    lines += [f"caught up {name}: replayed from the archive to this W" for name in apply.get("caught_up", [])]
    return lines


def backfill_line(start: dt.datetime, end: dt.datetime, report: dict[str, Any]) -> str:
    """One interval of a backfill: messages (reused or landed), W, its wall time and lag, the outcome."""
    land, apply = report["land"], report["apply"]
    w = apply["watermark"]
    line = f"{start.isoformat()} .. {end.isoformat()}: {land.get('messages', 0):,} messages"
    line += " (reused)" if land.get("reused") else ""
    if not w:
        return line + ", no consistent W yet"
    return (line + f", W={w} ({watermark_time(w)}, lag {human_duration(lag_seconds(apply) or 0)}) "
            f"{apply.get('outcome', 'published')}")

