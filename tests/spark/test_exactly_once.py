"""contract §5: crashes, retries, duplicates and backfills give tables identical to one straight run.

Property: for generated histories (DDL, duplicates, a partition whose watermarks lag,
several intervals) and a crash injected at any step of any run, followed by a retry,
every table at every published tag equals the reference model at that watermark.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cdc_codecs import PROTOCOLS
from spark.commit.apply import apply_interval
from spark.query.read import published_watermarks, read_pipeline

from .archives import HOUR, T0, build, normalise

pytestmark = pytest.mark.slow  # whole intervals, Spark or services: make test-fast leaves it out (docs/testing.md)

TIDB = sorted(p for p, s in PROTOCOLS.items() if s.has_commit_ts)
CRASH_POINTS = ["decoded", "staged", "committed:0", "tagged", "checkpointed", "published"]


class Crash(Exception):
    pass


def check_tags(config, expected) -> None:
    published = published_watermarks(config)
    assert published == sorted({w for w, _ in expected if w})
    for w, tables in expected:
        if not w:
            continue
        _, got_tables = read_pipeline(config, w)
        got = {name: normalise(t.to_pylist()) for name, t in got_tables.items()}
        want = {name: rows for name, rows in tables.items() if rows or name in got}
        assert got == want, w


def table_watermarks(config) -> dict[str, int]:
    from spark.tables import catalog as cat
    from spark.tables.properties import table_watermark

    return {".".join(cat.upstream_name(t)): table_watermark(t) for t in cat.pipeline_tables(cat.open_catalog(config), config)}


def run_with_crash(config, intervals: int, crash_run: int | None, crash_at: str | None) -> None:
    for i in range(intervals):
        start, end = T0 + i * HOUR, T0 + (i + 1) * HOUR
        if i == crash_run and crash_at is not None:
            def fault(step: str) -> None:
                if step == crash_at or (crash_at == "staged" and step.startswith("staged:")):
                    raise Crash(step)

            try:
                apply_interval(config, start, end, fault=fault)
            except Crash:
                pass  # the run died here; Airflow retries it
        apply_interval(config, start, end)


def property_case(protocol, seed, partitions, intervals, dup_rate, lagging, crash_run, crash_at) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        config, expected = build(Path(tmp), protocol, seed, partitions, intervals, dup_rate, lagging)
        run_with_crash(config, intervals, crash_run, crash_at)
        check_tags(config, expected)


case = dict(
    seed=st.integers(0, 10_000), partitions=st.integers(1, 3), intervals=st.integers(2, 4),
    dup_rate=st.sampled_from([0.0, 0.1]), lagging=st.booleans(),
    crash_run=st.integers(0, 3), crash_at=st.sampled_from([None, *CRASH_POINTS]),
)


@pytest.mark.parametrize("protocol", TIDB)
@settings(max_examples=3, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(**case)
def test_crash_anywhere_then_retry_matches_the_oracle(protocol, seed, partitions, intervals, dup_rate, lagging, crash_run, crash_at) -> None:
    property_case(protocol, seed, partitions, intervals, dup_rate, lagging, crash_run, crash_at)


@pytest.mark.slow
@pytest.mark.parametrize("protocol", TIDB)
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(**case)
def test_crash_anywhere_then_retry_matches_the_oracle_many(protocol, seed, partitions, intervals, dup_rate, lagging, crash_run, crash_at) -> None:
    property_case(protocol, seed, partitions, intervals, dup_rate, lagging, crash_run, crash_at)


@pytest.mark.parametrize("crash_at", CRASH_POINTS)
def test_every_crash_point(tmp_path: Path, crash_at: str) -> None:
    config, expected = build(tmp_path, "canal-json", seed=11, partitions=3, intervals=3, dup_rate=0.1, lagging=True)
    run_with_crash(config, 3, crash_run=1, crash_at=crash_at)
    check_tags(config, expected)


def test_backfill_of_an_earlier_range_equals_a_straight_run(tmp_path: Path) -> None:
    straight, expected = build(tmp_path / "straight", "open-protocol", seed=5, partitions=2, intervals=4, dup_rate=0.1, lagging=False)
    for i in range(4):
        apply_interval(straight, T0 + i * HOUR, T0 + (i + 1) * HOUR)
    backfilled, _ = build(tmp_path / "backfilled", "open-protocol", seed=5, partitions=2, intervals=4, dup_rate=0.1, lagging=False)
    for i in range(4):
        apply_interval(backfilled, T0 + i * HOUR, T0 + (i + 1) * HOUR)
    heads = table_watermarks(backfilled)
    # Backfill intervals 1..2 again: their W are published, so they are confirmed, and main stays ahead.
    replay = [apply_interval(backfilled, T0 + i * HOUR, T0 + (i + 1) * HOUR) for i in (1, 2)]
    assert [r.outcome for r in replay] == ["confirmed", "confirmed"]
    assert table_watermarks(backfilled) == heads
    apply_interval(backfilled, T0 + 3 * HOUR, T0 + 4 * HOUR)
    check_tags(straight, expected)
    check_tags(backfilled, expected)
    for w, _ in expected:
        if w:
            a = {k: normalise(v.to_pylist()) for k, v in read_pipeline(straight, w)[1].items()}
            b = {k: normalise(v.to_pylist()) for k, v in read_pipeline(backfilled, w)[1].items()}
            assert a == b


def test_skipping_an_interval_replays_it_first(tmp_path: Path) -> None:
    config, expected = build(tmp_path, "simple", seed=8, partitions=2, intervals=3, dup_rate=0.0, lagging=False)
    result = apply_interval(config, T0 + 2 * HOUR, T0 + 3 * HOUR)  # intervals 0 and 1 never ran
    assert len(result.replayed) == 2
    check_tags(config, expected)


def test_backfill_from_the_first_interval_keeps_later_tags_readable(tmp_path: Path) -> None:
    config, expected = build(tmp_path, "debezium", seed=6, partitions=2, intervals=3, dup_rate=0.0, lagging=False)
    for i in range(3):
        apply_interval(config, T0 + i * HOUR, T0 + (i + 1) * HOUR)
    heads = table_watermarks(config)
    rerun = apply_interval(config, T0, T0 + HOUR)
    assert rerun.outcome == "confirmed" and table_watermarks(config) == heads
    check_tags(config, expected)  # the later tags still read what they published
    for i in (1, 2):
        apply_interval(config, T0 + i * HOUR, T0 + (i + 1) * HOUR)
    check_tags(config, expected)
