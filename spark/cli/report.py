"""What ``tidelake run`` and ``backfill`` print of a run's reports (and the apply job's summary shares)."""

from __future__ import annotations

import datetime as dt
import sys
from typing import Any

from spark.core.text import human_duration

UTC = dt.timezone.utc


def w_time(w: int) -> str:
    return dt.datetime.fromtimestamp((w >> 18) / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def lag_seconds(apply: dict[str, Any]) -> float | None:
    """How far W's wall time is behind the interval end (a confirming run's report does not store it)."""
    w = apply["watermark"]
    if not w:
        return None
    if apply.get("lag_seconds") is not None:
        return float(apply["lag_seconds"])
    return dt.datetime.fromisoformat(apply["interval"]["end"]).timestamp() - (w >> 18) / 1000


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
        print(f"  watermark  {w} = {w_time(w)} (lag {human_duration(lag_seconds(apply) or 0)} behind the interval end)",
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
    from spark.commit.isolation import held_phrase

    lines = [(f"ISOLATED {name}: {held_phrase(e)}, not tagged at this W: {e['reason']}" if e.get("new_name") else
              f"ISOLATED {name}: held at W {e['held_at']} ({w_time(e['held_at']) if e['held_at'] else 'before its first W'}) "
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
    return (line + f", W={w} ({w_time(w)}, lag {human_duration(lag_seconds(apply) or 0)}) "
            f"{apply.get('outcome', 'published')}")

