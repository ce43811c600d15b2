"""The retention policy as a pure decision: which published Ws stay readable at ``now``."""

from __future__ import annotations

import datetime as dt

from spark.config import MaintenanceConfig
from spark.maintain.retention import KEEP_ALL, KEEP_DAILY, KEEP_HOURLY, LATEST, plan_retention
from spark.core.watermark import watermark_datetime

UTC = dt.timezone.utc
NOW = dt.datetime(2025, 6, 30, 12, 0, tzinfo=UTC)


def w_at(at: dt.datetime, logical: int = 5) -> int:
    return (int(at.timestamp() * 1000) << 18) | logical


def every_15_minutes(days: int) -> list[int]:
    first = NOW - dt.timedelta(days=days)
    return [w_at(first + i * dt.timedelta(minutes=15)) for i in range(days * 96)]


def test_default_policy_keeps_everything_for_two_days_then_hourly_for_30_days_then_daily_for_a_year() -> None:
    marks = every_15_minutes(400)
    plan = plan_retention(marks, [], MaintenanceConfig(), NOW)
    kept = set(plan.retained)
    assert set(plan.retire) | kept == set(marks) and not set(plan.retire) & kept
    clock = watermark_datetime(marks[-1])  # ages count on the pipeline's clock: its newest W
    for w in marks:
        age, t = clock - watermark_datetime(w), watermark_datetime(w)
        last_of_hour = t.minute == 45 or w == marks[-1]
        last_of_day = (t.hour, t.minute) == (23, 45) or w == marks[-1]
        if age < dt.timedelta(days=2):
            assert w in kept, t
        elif age < dt.timedelta(days=30):
            assert (w in kept) == last_of_hour, t
        elif age < dt.timedelta(days=365):
            assert (w in kept) == last_of_day, t
        else:
            assert w not in kept, t
    assert plan.retained[marks[-1]] == LATEST
    assert {plan.retained[w] for w in kept} == {LATEST, KEEP_ALL, KEEP_HOURLY, KEEP_DAILY}
    # About 2*96 + 28*24 + 335 Ws stay readable out of 38,400.
    assert 1150 < len(kept) < 1250, len(kept)


def test_the_latest_w_is_kept_whatever_the_policy_and_retired_ws_stay_retired() -> None:
    marks = [w_at(dt.datetime(2020, 1, 1, h, tzinfo=UTC)) for h in range(5)]
    nothing = MaintenanceConfig(keep_all=dt.timedelta(0), keep_hourly=dt.timedelta(0), keep_daily=dt.timedelta(0))
    plan = plan_retention(marks, [marks[1]], nothing, NOW)
    assert plan.retained == {marks[-1]: LATEST}
    assert plan.retire == (marks[0], marks[2], marks[3]) and plan.retired_before == (marks[1],)
    # A loosened policy does not bring a retired W back.
    everything = MaintenanceConfig(keep_all=dt.timedelta(days=36500))
    again = plan_retention(marks, [marks[1]], everything, NOW)
    assert sorted(again.retained) == [marks[0], *marks[2:]] and again.retire == ()


def test_last_of_an_hour_is_decided_by_wall_time_in_utc_and_ws_in_the_future_are_kept() -> None:
    hour = dt.datetime(2025, 6, 20, 10, tzinfo=UTC)
    marks = [w_at(hour + dt.timedelta(minutes=m)) for m in (0, 59)] + [w_at(hour + dt.timedelta(hours=1))]
    future = w_at(NOW + dt.timedelta(minutes=5))
    policy = MaintenanceConfig(keep_all=dt.timedelta(days=1), keep_hourly=dt.timedelta(days=30), keep_daily=dt.timedelta(0))
    plan = plan_retention([*marks, future], [], policy, NOW)
    assert plan.retire == (marks[0],)
    assert plan.retained == {marks[1]: KEEP_HOURLY, marks[2]: KEEP_HOURLY, future: LATEST}


def test_ages_count_from_the_newest_w_so_a_replayed_history_keeps_its_tiers() -> None:
    """A pipeline rebuilt over an old archive publishes Ws of 2023 in 2025: measured against the
    wall clock every one but the latest would be over a year old and retired at once."""
    replayed = [w - (w_at(NOW) - w_at(dt.datetime(2023, 6, 30, 12, tzinfo=UTC))) for w in every_15_minutes(40)]
    plan = plan_retention(replayed, [], MaintenanceConfig(), NOW)
    clock = watermark_datetime(replayed[-1])
    assert clock.year == 2023
    assert all(w in plan.retained for w in replayed if clock - watermark_datetime(w) < dt.timedelta(days=2))
    assert 2 * 96 + 28 * 24 - 5 < len(plan.retained) < 2 * 96 + 40 * 24  # every 15 min for 2 days, then hourly
    # A pipeline that stopped receiving changes stops aging: years later the same Ws stay.
    later = plan_retention(replayed, [], MaintenanceConfig(), clock + dt.timedelta(days=700))
    assert later.retained == plan.retained
