"""How tidelake writes durations, sizes and instants for people: every output uses these."""

from __future__ import annotations

import datetime as dt

_DAY, _MONTH, _YEAR = 86_400, 30 * 86_400, 365 * 86_400


def human_duration(seconds: float) -> str:
    """``42s``, ``7m 05s``, ``2h 03m``, ``3d 04h``, ``4mo 12d``, ``1y 10mo``: lag and ages as people read them.

    Two units at most, the larger first; every tidelake output that shows a lag or an age uses this.
    """
    sign, seconds = ("-", -seconds) if seconds < 0 else ("", seconds)
    total = int(round(seconds))
    if total < 60:
        return f"{sign}{total}s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{sign}{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{sign}{hours}h {minutes:02d}m"
    if total < _MONTH:
        days, hours = divmod(hours, 24)
        return f"{sign}{days}d {hours:02d}h"
    if total < _YEAR:
        months, rest = divmod(total, _MONTH)
        return f"{sign}{months}mo {rest // _DAY:02d}d"
    years, rest = divmod(total, _YEAR)
    return f"{sign}{years}y {rest // _MONTH:02d}mo"


def human_bytes(n: int) -> str:
    """``812 B``, ``1.5 KiB``, ``3.2 MiB``, ``1.0 GiB``."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def utc_text(instant: dt.datetime) -> str:
    """``2024-01-01T00:59:30.123Z``: UTC with milliseconds, the way intervals are written in logs."""
    text = instant.astimezone(dt.timezone.utc).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z").replace(".000Z", "Z")
