"""The spark-submit entry points in-process: exact task-log lines, printed before Spark stops."""

from __future__ import annotations

import datetime as dt
import json
import logging
from pathlib import Path

import pytest

import spark.runtime.session
from spark.commit.apply import ApplyResult
from spark.jobs import apply as apply_job
from spark.core.text import human_bytes, human_duration
from spark.jobs import interval_job
from spark.jobs import land as land_job
from spark.archive.land import LandResult
from spark.archive.manifest import Gap, Manifest, PartitionRange, Segment

UTC = dt.UTC
T0 = dt.datetime(2024, 1, 1, tzinfo=UTC)
W = 447656165965824001  # a TSO above 2**53


class FakeSpark:
    """Records what stdout held when the job stopped Spark."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys
        self.stdout_at_stop: str | None = None

    def stop(self) -> None:
        self.stdout_at_stop = self.capsys.readouterr().out


@pytest.fixture
def context(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> dict:
    made: dict = {}

    def build_context(app, master=None, *, log_level=None, **conf):
        made.update(app=app, master=master, log_level=log_level, spark=FakeSpark(capsys))
        return made["spark"]

    monkeypatch.setattr(spark.runtime.session, "build_context", build_context)
    monkeypatch.delenv("TIDELAKE_SPARK_LOG_LEVEL", raising=False)
    return made


@pytest.fixture
def pipeline(tmp_path: Path) -> Path:
    path = tmp_path / "shop.toml"
    path.write_text(f'name = "shop"\n[kafka]\nbootstrap_servers = "k:9092"\n[[topics]]\nname = "t"\nprotocol = "canal-json"\n'
                    f'[storage]\nurl = "{tmp_path / "archive"}"\n')
    return path


def interval_args(pipeline: Path) -> list[str]:
    return ["--config", str(pipeline), "--start", "2024-01-01T00:00:00Z", "--end", "2024-01-01T01:00:00Z"]


def test_human_units() -> None:
    assert [human_duration(s) for s in (0, 42.4, 59.6, 425, 3600, 7380, 86399, 93600, -90)] == [
        "0s", "42s", "1m 00s", "7m 05s", "1h 00m", "2h 03m", "23h 59m", "1d 02h", "-1m 30s"]
    day = 86_400
    assert [human_duration(d * day) for d in (29, 30, 100, 364, 365, 365 + 300, 3 * 365 + 31)] == [
        "29d 00h", "1mo 00d", "3mo 10d", "12mo 04d", "1y 00mo", "1y 10mo", "3y 01mo"]
    assert [human_bytes(n) for n in (0, 812, 1536, 3 * 2**20 + 2**19, 2**30)] == ["0 B", "812 B", "1.5 KiB", "3.5 MiB", "1.0 GiB"]


def test_the_summary_is_printed_and_flushed_before_spark_stops(context: dict, pipeline: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    def run(config, start, end, runner, args):
        from spark.jobs import emit

        runner.for_messages(config.driver_max_messages + 1)  # an interval too large for the driver: Spark starts

        emit([f"{config.name} {start.isoformat()} {end.isoformat()}", "  second line"])
        return 0

    assert interval_job("apply", run, interval_args(pipeline)) == 0
    assert context["spark"].stdout_at_stop == "shop 2024-01-01T00:00:00+00:00 2024-01-01T01:00:00+00:00\n  second line\n"
    assert capsys.readouterr().out == ""  # nothing after the stop
    assert (context["app"], context["master"], context["log_level"]) == ("tidelake-apply-shop", None, None)


def test_spark_log_level_quiet_by_default_info_when_asked(context: dict, pipeline: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def run(config, start, end, runner, args):
        runner.context  # noqa: B018 - a run that needs Spark starts it
        return 0

    interval_job("land", run, [*interval_args(pipeline), "--verbose", "--master", "local[2]"])
    assert (context["master"], context["log_level"]) == ("local[2]", "INFO")
    monkeypatch.setenv("TIDELAKE_SPARK_LOG_LEVEL", "ERROR")
    interval_job("land", run, interval_args(pipeline))
    assert context["log_level"] == "ERROR"


def test_errors_are_one_logged_line_with_exit_codes(context: dict, pipeline: Path, tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    from spark.commit.apply import ApplyError

    def failing(config, start, end, runner, args):
        runner.context  # noqa: B018
        raise ApplyError("no manifest for 20240101T000000Z..20240101T010000Z: land the interval first")

    caplog.set_level(logging.ERROR, logger="tidelake")
    assert interval_job("apply", failing, interval_args(pipeline)) == 1
    assert context["spark"].stdout_at_stop == ""  # stopped even so
    missing = tmp_path / "missing.toml"
    assert interval_job("apply", failing, ["--config", str(missing), *interval_args(pipeline)[2:]]) == 2
    assert [r.getMessage() for r in caplog.records] == [
        "no manifest for 20240101T000000Z..20240101T010000Z: land the interval first",
        f"{missing}: cannot read: No such file or directory"]


def apply_report() -> dict:
    return {
        "step": "apply", "pipeline": "shop", "outcome": "published",
        "interval": {"start": "2024-01-01T00:00:00+00:00", "end": "2024-01-01T01:00:00+00:00"},
        "watermark": W, "previous_watermark": W - (3600_000 << 18),
        "watermark_time": "2023-12-31T22:56:29.877000+00:00", "lag_seconds": 7410.123,
        "messages_decoded": 1200, "events_decoded": 1350, "already_applied_skipped": 5, "quarantined": 1,
        "tables": {"shop.orders": {"events_applied": 900, "snapshot": 11, "dropped": False},
                   "shop.x": {"events_applied": 0, "snapshot": 12, "dropped": True}},
        "seconds": 12.3456,
    }


def test_apply_job_prints_one_summary_block(context: dict, pipeline: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = {}

    def apply_interval(config, start, end, runner):
        runner.context  # noqa: B018
        seen.update(policy=config.on_bad_message, tables=config.on_table_error, start=start, end=end)
        return ApplyResult(W, W - 1, ["shop.orders", "shop.x"], apply_report(), replayed=["20231231T230000Z"])

    monkeypatch.setattr("spark.commit.apply.apply_interval", apply_interval)  # the job imports it when it runs
    assert apply_job.main([*interval_args(pipeline), "--on-bad-message", "continue", "--on-table-error", "fail"]) == 0
    assert seen == {"policy": "continue", "tables": "fail", "start": T0, "end": T0 + dt.timedelta(hours=1)}
    assert context["spark"].stdout_at_stop.splitlines() == [
        f"shop 2024-01-01T00:00:00Z..2024-01-01T01:00:00Z: W {W} published (previous W {W - (3600_000 << 18)})",
        "  W wall time 2023-12-31T22:56:29.877Z, lag 2h 03m behind the interval end",
        "  decoded 1200 messages, 1350 events in 12.35 s; 5 already applied, 1 quarantined",
        "  replayed first: intervals ending 20231231T230000Z",
        "  table shop.orders  900 events applied",
        "  table shop.x       0 events applied, dropped",
    ]


def test_apply_summary_without_a_consistent_watermark() -> None:
    report = {**apply_report(), "watermark": 0, "watermark_time": None, "lag_seconds": None, "tables": {}}
    assert apply_job.apply_summary(ApplyResult(0, 0, [], report)) == [
        "shop 2024-01-01T00:00:00Z..2024-01-01T01:00:00Z: no consistent W yet (a partition has reported no watermark); nothing tagged",
        "  decoded 1200 messages, 1350 events in 12.35 s; 5 already applied, 1 quarantined",
    ]


def test_apply_summary_of_a_run_that_confirmed_a_published_watermark() -> None:
    # The report a rerun writes (spark/commit/apply.py): no decode counts, no lag field.
    report = {"step": "apply", "pipeline": "shop", "outcome": "confirmed",
              "interval": {"start": "2024-01-01T00:00:00+00:00", "end": "2024-01-01T01:00:00+00:00"},
              "watermark": W, "previous_watermark": W - 7, "watermark_time": "2024-01-01T00:57:00+00:00",
              "note": "already published by an earlier run; tables and tags left as they are"}
    assert apply_job.apply_summary(ApplyResult(W, W - 7, ["shop.orders"], report)) == [
        f"shop 2024-01-01T00:00:00Z..2024-01-01T01:00:00Z: W {W} confirmed (previous W {W - 7})",
        "  W wall time 2024-01-01T00:57:00Z, lag 3m 00s behind the interval end",
        "  already published by an earlier run; tables and tags left as they are",
    ]


def manifest() -> Manifest:
    seg = [Segment("shop/segments/t/0/0.parquet", 0, 50, 50, 1_000_000), Segment("shop/segments/t/0/50.parquet", 50, 70, 20, 572_864),
           Segment("shop/segments/t/1/0.parquet", 0, 30, 30, 524_288)]
    return Manifest("shop", T0, T0 + dt.timedelta(hours=1),
                    (PartitionRange("t", 0, 0, 70, None, tuple(seg[:2]), 70), PartitionRange("t", 1, 0, 30, Gap(0, 4), (seg[2],), 30),
                     PartitionRange("t", 2, 9, 9)), created_at=dt.datetime(2024, 1, 1, 1, 0, 5, 250_000, tzinfo=UTC))


def test_land_job_prints_its_report(context: dict, pipeline: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    report = {"seconds": 3.456, "gaps": [{"topic": "t", "partition": 1, "start": 0, "end": 4}]}
    monkeypatch.setattr(land_job, "land_interval", lambda config, start, end, runner: (runner.context, LandResult(manifest(), False, report))[1])
    assert land_job.main(interval_args(pipeline)) == 0
    path = "shop/manifests/20240101T000000.000000Z_20240101T010000.000000Z.json"
    assert context["spark"].stdout_at_stop.splitlines() == [
        f"landed: {path}  100 messages in 3 segments over 3 partitions, 2.0 MiB in 3.46 s",
        "  gap: t/1 offsets 0..4 were deleted by retention before they were archived",
    ]
    monkeypatch.setattr(land_job, "land_interval", lambda config, start, end, runner: (runner.context, LandResult(manifest(), True))[1])
    assert land_job.main(interval_args(pipeline)) == 0
    assert context["spark"].stdout_at_stop == (
        f"already landed: {path}  100 messages in 3 segments over 3 partitions, 2.0 MiB "
        "(manifest of 2024-01-01T01:00:05.250Z, kept)\n")


def test_maintain_job_runs_at_the_given_now_and_prints_its_summary_without_starting_spark(
        context: dict, pipeline: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Nothing to compact: retention, expiry and orphan cleanup run on the driver, and Spark,
    which only compaction bins past driver_max_messages rows use, never starts."""
    from spark.jobs import maintain as maintain_job

    assert maintain_job.main(["--config", str(pipeline), "--now", "2024-01-02T03:00:00Z"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "maintain shop at 2024-01-02T03:00:00+00:00"
    assert "  watermarks: 0 retained, 0 retired, 0 retired before" in out.splitlines()
    assert ("  archive retention: nothing pruned (archive_horizon is none): every raw and change-log segment kept"
            in out.splitlines())
    assert out.splitlines()[-1] == "  report: shop/reports/maintenance/20240102T030000.000000Z.json"
    assert (pipeline.parent / "archive" / "shop" / "reports" / "maintenance" / "20240102T030000.000000Z.json").exists()
    assert "app" not in context  # build_context was never called
    assert maintain_job.main(["--config", str(pipeline), "--now", "yesterday"]) == 2


def test_the_apply_job_confirms_a_done_interval_before_starting_spark(tmp_path: Path, monkeypatch, capsys) -> None:  # noqa: ANN001
    """A rerun of an applied interval (an operator clearing it) must not pay for Spark."""
    from cdc_codecs import get_encoder
    from spark.demo.workload import Workload, WorkloadSpec
    from spark.commit.apply import apply_interval
    from spark.jobs import apply as job
    from spark.archive.storage import open_storage

    from tests.spark.archives import HOUR, T0, ArchiveWriter, make_config

    config = make_config(tmp_path, "canal-json")
    records = get_encoder("canal-json").encode_all(list(Workload(WorkloadSpec(tables=1, events=10, seed=2)).events()), 1)
    ArchiveWriter(config, open_storage(config.storage), {"cdc": 1}).interval(T0, T0 + HOUR, [("cdc", r) for r in records])
    w = apply_interval(config, T0, T0 + HOUR).watermark
    path = tmp_path / "shop.json"
    path.write_text(json.dumps({"name": "shop", "kafka": {"bootstrap_servers": "unused:9092"},
                                "topics": [{"name": "cdc", "protocol": "canal-json"}],
                                "storage": {"url": str(tmp_path / "archive")}}))

    started = []

    def no_spark(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        started.append(args)  # recorded: a start ahead runs on a thread, whose error the job would only log
        raise AssertionError("Spark was started for an interval that is done")

    monkeypatch.setattr("spark.runtime.session.build_context", no_spark)
    code = job.main(["--config", str(path), "--start", T0.isoformat(), "--end", (T0 + HOUR).isoformat()])
    assert code == 0
    assert f"W {w} confirmed" in capsys.readouterr().out
    # Nor when every interval goes to Spark (driver_max_messages 0): a run went past it, so nothing is ahead.
    path.write_text(json.dumps({**json.loads(path.read_text()), "driver_max_messages": 0}))
    assert job.main(["--config", str(path), "--start", T0.isoformat(), "--end", (T0 + HOUR).isoformat()]) == 0
    assert f"W {w} confirmed" in capsys.readouterr().out and started == []


def test_the_apply_job_runs_a_small_interval_in_the_driver_and_a_larger_one_on_spark(tmp_path: Path, monkeypatch, capsys) -> None:  # noqa: ANN001
    """A tiny interval must not pay for a SparkContext, its executors and Python workers (issue 26)."""
    from cdc_codecs import TidelakeError, get_encoder
    from spark.demo.workload import Workload, WorkloadSpec
    from spark.jobs import apply as job
    from spark.archive.storage import open_storage

    from tests.spark.archives import HOUR, T0, ArchiveWriter, make_config

    config = make_config(tmp_path, "canal-json")
    records = get_encoder("canal-json").encode_all(list(Workload(WorkloadSpec(tables=2, events=40, seed=3)).events()), 1)
    ArchiveWriter(config, open_storage(config.storage), {"cdc": 1}).interval(T0, T0 + HOUR, [("cdc", r) for r in records])
    doc = {"name": "shop", "kafka": {"bootstrap_servers": "unused:9092"}, "topics": [{"name": "cdc", "protocol": "canal-json"}],
           "storage": {"url": str(tmp_path / "archive")}}
    argv = ["--start", T0.isoformat(), "--end", (T0 + HOUR).isoformat()]

    class SparkWanted(TidelakeError):
        pass

    def no_spark(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise SparkWanted("the job started Spark")

    monkeypatch.setattr("spark.runtime.session.build_context", no_spark)
    on_spark = tmp_path / "on_spark.json"
    on_spark.write_text(json.dumps({**doc, "driver_max_messages": len(records) - 1}))
    assert job.main(["--config", str(on_spark), *argv]) == 1  # one message more than the driver takes: Spark
    capsys.readouterr()
    in_driver = tmp_path / "in_driver.json"
    in_driver.write_text(json.dumps({**doc, "driver_max_messages": len(records)}))
    assert job.main(["--config", str(in_driver), *argv]) == 0
    out = capsys.readouterr().out
    assert " published " in out and "  ran in the driver without starting Spark (at most driver_max_messages messages to read)" in out
    report = json.loads((tmp_path / "archive" / "shop" / "reports" / "20240101T000000.000000Z_20240101T010000.000000Z" / "apply.json").read_text())
    assert report["ran_in"] == "driver" and report["messages_decoded"] == len(records)


def test_each_stage_is_sized_by_its_own_work(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """Decoding is sized by the messages it decodes, the fold by the change-log rows it reads. The
    segment holding the previous interval's pending changes is read again whole but was decoded
    by the run before (bench lag found every minute's run sized twice over and sent to Spark);
    after a decoder fix nothing is decoded, and a small interval decodes what it reads anew."""
    from cdc_codecs import get_encoder
    from spark.runtime.runners import LocalRunner
    from spark.archive.storage import open_storage
    from spark.fold import window as window_module
    from spark.archive.checkpoint import Checkpoint, checkpoint_path
    from spark.commit.apply import apply_interval
    from spark.decode import changelog
    from spark.demo.workload import Workload, WorkloadSpec

    from tests.spark.archives import HOUR, T0, ArchiveWriter, make_config

    events = list(Workload(WorkloadSpec(tables=2, events=80, seed=4, watermark_every=7)).events())
    records = get_encoder("canal-json").encode_all(events, 1)

    class Sized(LocalRunner):
        def __init__(self) -> None:
            self.asked: list[int] = []

        def for_messages(self, work: int) -> LocalRunner:
            self.asked.append(work)
            return LocalRunner()

    def second_interval(root: Path, fixed_decoder: bool) -> tuple[list[int], dict, int]:
        config = make_config(root, "canal-json")
        storage = open_storage(config.storage)
        writer = ArchiveWriter(config, storage, {"cdc": 1})
        writer.interval(T0, T0 + HOUR, [("cdc", r) for r in records[:50]])
        writer.interval(T0 + HOUR, T0 + 2 * HOUR, [("cdc", r) for r in records[50:]])
        apply_interval(config, T0, T0 + HOUR)
        pending = Checkpoint.from_json(storage.read(checkpoint_path(config.name, T0, T0 + HOUR))).pending[("cdc", 0)]
        assert 0 < pending < 50  # changes after the first interval's last watermark wait for the next
        if fixed_decoder:
            version = changelog.decoder_version("canal-json")
            for module in (changelog, window_module):  # a decoder fix moves the change log to a new version
                monkeypatch.setattr(module, "decoder_version", lambda protocol: f"{version}-fixed")
        runner = Sized()
        return runner.asked, apply_interval(config, T0 + HOUR, T0 + 2 * HOUR, runner=runner).report, pending

    (decoded, folded), report, pending = second_interval(tmp_path / "a", fixed_decoder=False)
    assert decoded == len(records) - 50  # the new segment only
    # The first segment is read again whole; its rows count by the share of its offsets in the window.
    assert report["messages_reread"] == 50 and 0 < folded < report["events_decoded"] + 50 - pending
    (decoded, refolded), _, _ = second_interval(tmp_path / "b", fixed_decoder=True)
    assert decoded == len(records) and refolded == folded  # both segments decoded at the new version


def test_the_report_counts_spark_start_up_apart_from_the_stage_that_started_it(tmp_path: Path) -> None:
    """A job starts Spark on first need, inside a stage: the report says how long that took under
    "start Spark" and leaves it out of the stage, once per job (the next interval finds it started)."""
    import time

    from cdc_codecs import get_encoder
    from spark.runtime.runners import LocalRunner
    from spark.archive.storage import open_storage
    from spark.commit.apply import apply_interval
    from spark.demo.workload import Workload, WorkloadSpec

    from tests.spark.archives import HOUR, T0, ArchiveWriter, make_config

    records = get_encoder("canal-json").encode_all(list(Workload(WorkloadSpec(tables=2, events=60, seed=5, watermark_every=7)).events()), 1)
    config = make_config(tmp_path, "canal-json")
    writer = ArchiveWriter(config, open_storage(config.storage), {"cdc": 1})
    writer.interval(T0, T0 + HOUR, [("cdc", r) for r in records[:30]])
    writer.interval(T0 + HOUR, T0 + 2 * HOUR, [("cdc", r) for r in records[30:]])

    class StartsOnFirstNeed(LocalRunner):
        start_seconds = 0.0

        def for_messages(self, work: int) -> LocalRunner:
            if not self.start_seconds:  # what DriverFirstRunner.context does: time the start, once
                clock = time.perf_counter()
                time.sleep(0.3)
                self.start_seconds = time.perf_counter() - clock
            return LocalRunner()

    runner = StartsOnFirstNeed()
    first = apply_interval(config, T0, T0 + HOUR, runner=runner).report
    stages = first["stage_seconds"]
    assert stages["start Spark"] >= 0.3 and 0 <= stages["decode"] < 0.3 <= first["seconds"]
    assert set(stages) == {"start Spark", "decode", "fold", "commit and tag", "rewrite"}
    second = apply_interval(config, T0 + HOUR, T0 + 2 * HOUR, runner=runner).report
    assert "start Spark" not in second["stage_seconds"] and second["stage_seconds"]["decode"] >= 0


def test_an_interval_with_work_ahead_starts_spark_before_the_run_loads(context: dict, pipeline: Path) -> None:
    """``ahead`` is read first; more messages than the driver takes start Spark on a thread before
    ``run`` loads its modules, and the job stops it even if no stage used it. An interval with work
    ahead is not done: ``before_spark`` is not asked; with none known it is."""
    import threading

    began = threading.Event()
    build = spark.runtime.session.build_context

    def recorded(*args, **kwargs):
        context["thread"] = threading.current_thread()
        began.set()
        return build(*args, **kwargs)

    spark.runtime.session.build_context = recorded
    try:
        seen: list[str] = []

        def confirm(config, start, end, args):
            seen.append("confirm")
            return None

        def run(config, start, end, runner, args):
            seen.append(f"run, started ahead: {began.wait(5)}")  # started without any stage asking
            return 0

        ahead = lambda config, start, end: config.driver_max_messages + 1  # noqa: E731
        assert interval_job("apply", run, interval_args(pipeline), before_spark=confirm, ahead=ahead) == 0
        assert seen == ["run, started ahead: True"] and context["thread"] is not threading.main_thread()
        assert context["spark"].stdout_at_stop == ""  # stopped at the end
        context.clear()
        began.clear()
        seen.clear()
        assert interval_job("apply", run, interval_args(pipeline), before_spark=confirm,
                            ahead=lambda config, start, end: config.driver_max_messages) == 0
        assert context == {} and seen == ["run, started ahead: False"]  # what the driver takes starts nothing
        assert interval_job("apply", run, interval_args(pipeline), before_spark=confirm,
                            ahead=lambda config, start, end: None) == 0
        assert context == {} and seen[1:] == ["confirm", "run, started ahead: False"]  # may be done: confirm first
    finally:
        spark.runtime.session.build_context = build


def test_a_run_that_stayed_in_the_driver_says_when_spark_was_started_ahead() -> None:
    """A retry whose failed attempt decoded the interval folds what was decoded, maybe in the driver,
    though the interval's landed messages started Spark ahead: the summary does not say it never started."""
    report = {**apply_report(), "ran_in": "driver"}
    quiet = apply_job.apply_summary(ApplyResult(W, W - 1, [], report))
    ahead = apply_job.apply_summary(ApplyResult(W, W - 1, [], report), spark_started=True)
    assert "  ran in the driver without starting Spark (at most driver_max_messages messages to read)" in quiet
    assert ("  ran in the driver (at most driver_max_messages messages to read); Spark, started ahead for the "
            "interval's landed messages, was not needed") in ahead
    assert not any("without starting Spark" in line for line in ahead)


def test_the_apply_job_s_work_ahead_is_an_unapplied_interval_s_landed_messages(tmp_path: Path) -> None:
    from cdc_codecs import get_encoder
    from spark.archive.storage import open_storage
    from spark.commit.apply import apply_interval
    from spark.demo.workload import Workload, WorkloadSpec

    from tests.spark.archives import HOUR, T0, ArchiveWriter, make_config

    records = get_encoder("canal-json").encode_all(list(Workload(WorkloadSpec(tables=2, events=60, seed=5, watermark_every=7)).events()), 1)
    config = make_config(tmp_path, "canal-json")
    writer = ArchiveWriter(config, open_storage(config.storage), {"cdc": 1})
    first = writer.interval(T0, T0 + HOUR, [("cdc", r) for r in records[:30]])
    second = writer.interval(T0 + HOUR, T0 + 2 * HOUR, [("cdc", r) for r in records[30:]])
    ahead = [apply_job.messages_ahead(config, T0 + i * HOUR, T0 + (i + 1) * HOUR) for i in range(3)]
    assert ahead == [first.messages, second.messages, None] and first.messages == 30  # the third is not landed
    apply_interval(config, T0, T0 + HOUR)
    assert apply_job.messages_ahead(config, T0, T0 + HOUR) is None  # applied: a rerun may only confirm it
    assert apply_job.messages_ahead(config, T0 + HOUR, T0 + 2 * HOUR) == second.messages
    apply_interval(config, T0 + HOUR, T0 + 2 * HOUR)
    assert apply_job.messages_ahead(config, T0, T0 + HOUR) is None  # a later interval applied: nothing ahead


@pytest.mark.parametrize("harm", ["deleted", "damaged"])
def test_a_raw_segment_deleted_or_damaged_under_its_manifest_fails_the_run_in_one_line_naming_it(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, harm: str) -> None:
    """The archive is the system of record: a segment a manifest lists that is gone, or that Arrow
    cannot read, stops the run with a typed error naming the file (``manifest.segment_batches``),
    never a traceback; nothing is applied."""
    from cdc_codecs import get_encoder
    from spark.archive.storage import open_storage
    from spark.demo.workload import Workload, WorkloadSpec

    from tests.spark.archives import HOUR, T0, ArchiveWriter, make_config

    config = make_config(tmp_path, "canal-json")
    records = get_encoder("canal-json").encode_all(list(Workload(WorkloadSpec(tables=1, events=30, seed=2)).events()), 1)
    manifest = ArchiveWriter(config, open_storage(config.storage), {"cdc": 1}).interval(T0, T0 + HOUR, [("cdc", r) for r in records])
    segment = tmp_path / "archive" / manifest.partitions[0].segments[0].path
    if harm == "deleted":
        segment.unlink()
    else:
        segment.write_bytes(b"not a Parquet file, overwritten")  # Arrow: ArrowInvalid (an OSError stays the storage's)
    path = tmp_path / "shop.json"
    path.write_text(json.dumps({"name": "shop", "kafka": {"bootstrap_servers": "unused:9092"},
                                "topics": [{"name": "cdc", "protocol": "canal-json"}], "storage": {"url": str(tmp_path / "archive")}}))
    caplog.set_level(logging.ERROR, logger="tidelake")
    assert apply_job.main(["--config", str(path), "--start", T0.isoformat(), "--end", (T0 + HOUR).isoformat()]) == 1
    [line] = [r.getMessage() for r in caplog.records]
    expected = "raw segment missing from the archive, though a manifest lists it" if harm == "deleted" else "damaged raw segment"
    assert line.startswith(f"{open_storage(config.storage).url}/{manifest.partitions[0].segments[0].path}: {expected}"), line
    assert not (tmp_path / "archive" / "shop" / "published").exists()


@pytest.mark.slow  # a Spark context
def test_a_tidelake_error_a_spark_task_raised_is_the_job_s_one_line_too(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The same deleted segment, decoded by a Spark task (``driver_max_messages = 0``; the segment of
    partition 1, which the topic clock's peek in the driver does not read): the driver gets a Py4J
    error carrying the task's traceback; the job prints the task's error line, not that traceback."""
    from cdc_codecs import get_encoder
    from spark.archive.storage import open_storage
    from spark.demo.workload import Workload, WorkloadSpec

    from tests.spark.archives import HOUR, T0, ArchiveWriter, make_config

    config = make_config(tmp_path, "canal-json")
    records = get_encoder("canal-json").encode_all(list(Workload(WorkloadSpec(tables=1, events=40, seed=2)).events()), 2)
    manifest = ArchiveWriter(config, open_storage(config.storage), {"cdc": 2}).interval(T0, T0 + HOUR, [("cdc", r) for r in records])
    [gone] = [s.path for p in manifest.partitions if p.partition == 1 for s in p.segments]
    (tmp_path / "archive" / gone).unlink()
    path = tmp_path / "shop.json"
    path.write_text(json.dumps({"name": "shop", "kafka": {"bootstrap_servers": "unused:9092"}, "driver_max_messages": 0,
                                "topics": [{"name": "cdc", "protocol": "canal-json"}], "storage": {"url": str(tmp_path / "archive")}}))
    caplog.set_level(logging.ERROR, logger="tidelake")
    argv = ["--config", str(path), "--start", T0.isoformat(), "--end", (T0 + HOUR).isoformat(), "--master", "local[1]"]
    assert apply_job.main(argv) == 1
    [line] = [r.getMessage() for r in caplog.records]
    assert line == (f"{open_storage(config.storage).url}/{gone}: raw segment missing from the archive, though a manifest lists it: "
                    "no run can derive its interval without it; restore the file (a backup, the bucket's versioning)"), line
