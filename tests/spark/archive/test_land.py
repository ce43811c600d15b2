"""The raw archive against a real Kafka protocol broker (noida-db) and real S3 (SeaweedFS).

The invariant every test checks: per partition, the archive's message count and checksum
over the offsets the manifests cover equal the broker's for the same offsets.
"""

from __future__ import annotations

import datetime as dt
import zlib
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from cdc_codecs import ConfigError
from spark.archive import layout
from spark.config import PipelineConfig
from spark.archive.land import LandResult, land_chunk, land_interval
from spark.runtime.runners import LocalRunner
from spark.archive.manifest import ManifestError, list_manifests
from spark.archive.offsets import OffsetsMissingError
from spark.archive.storage import LocalStorage, Storage, open_storage

pytestmark = pytest.mark.slow  # whole intervals, Spark or services: make test-fast leaves it out (docs/testing.md)

UTC = dt.timezone.utc


def message_checksum(offset: int, key: bytes | None, value: bytes | None) -> int:
    """One message's share of an order-independent checksum (sum mod 2**64), for verification."""
    crc = zlib.crc32(value or b"", zlib.crc32(key or b"")) | (0 if key is None else 1 << 32) | (0 if value is None else 1 << 33)
    return (offset * 0x9E3779B97F4A7C15 + crc) % (1 << 64)
T0 = dt.datetime(2024, 1, 1, tzinfo=UTC)
HOUR = dt.timedelta(hours=1)
MS = lambda t: int(t.timestamp() * 1000)  # noqa: E731


def config(kafka, topics, url: str, **extra) -> PipelineConfig:
    doc = {
        "name": extra.pop("name", "orders"),
        "kafka": {"bootstrap_servers": kafka.bootstrap},
        "topics": [{"name": t, "protocol": "canal-json"} for t in topics],
        "storage": {"url": url, **extra.pop("storage", {})},
        **extra,
    }
    return PipelineConfig.from_mapping(doc, "test.yaml")


def produce(kafka, topic: str, items: list[tuple[int, dt.datetime, bytes]], compression: str = "none", headers=None) -> None:
    p = Producer({"bootstrap.servers": kafka.bootstrap, "compression.type": compression, "linger.ms": 5,
                  "message.max.bytes": 2_000_000})
    for i, (partition, at, value) in enumerate(items):
        p.produce(topic, key=f"k{i}".encode(), value=value, partition=partition, timestamp=MS(at), headers=headers)
    assert p.flush(30) == 0


def broker_checksums(kafka, topic: str, partition: int, start: int, end: int) -> tuple[int, int]:
    c = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "verify", "enable.auto.commit": False,
                  "receive.message.max.bytes": 1_000_000_000})
    c.assign([TopicPartition(topic, partition, start)])
    count = checksum = 0
    while start < end:
        msgs = c.consume(min(1000, end - start), timeout=5)
        assert msgs, f"broker returned nothing at {start} < {end}"
        for m in msgs:
            if m.error() or m.offset() >= end:
                continue
            count += 1
            checksum = (checksum + message_checksum(m.offset(), m.key(), m.value())) % (1 << 64)
            start = m.offset() + 1
    c.close()
    return count, checksum


def archive_checksums(storage: Storage, results: list[LandResult]) -> dict[tuple[str, int], tuple[int, int, list[int]]]:
    out: dict[tuple[str, int], tuple[int, int, list[int]]] = {}
    for r in results:
        for p in r.manifest.partitions:
            count, checksum, offsets = out.get((p.topic, p.partition), (0, 0, []))
            for seg in p.segments:
                table = pq.read_table(storage.arrow_fs.open_input_file(storage.arrow_path(seg.path)))
                rows = table.to_pydict()
                for o, k, v in zip(rows["offset"], rows["key"], rows["value"]):
                    assert seg.start <= o < seg.end and p.start <= o < p.end
                    count += 1
                    checksum = (checksum + message_checksum(o, k, v)) % (1 << 64)
                    offsets.append(o)
            out[(p.topic, p.partition)] = (count, checksum, offsets)
    return out


def assert_exact(kafka, storage: Storage, results: list[LandResult]) -> None:
    """No message missing or duplicated, and the manifests chain with no overlap."""
    archived = archive_checksums(storage, results)
    first: dict = {}
    last: dict = {}
    for r in results:
        for p in r.manifest.partitions:
            key = (p.topic, p.partition)
            first.setdefault(key, p.start)
            if key in last:
                assert p.start == last[key], f"{key}: interval starts at {p.start}, previous ended at {last[key]}"
            last[key] = p.end
            assert sum(s.messages for s in p.segments) == p.messages
    for key, (count, checksum, offsets) in archived.items():
        assert len(offsets) == len(set(offsets)), f"{key}: duplicated offsets"
        assert (count, checksum) == broker_checksums(kafka, key[0], key[1], first[key], last[key]), key


def test_chained_intervals_with_every_codec_headers_and_large_messages(kafka, make_topic, tmp_path: Path) -> None:
    busy, quiet = make_topic(3), make_topic(2)
    cfg = config(kafka, [busy, quiet], str(tmp_path / "archive"), segment_max_messages=7)
    for i, codec in enumerate(["none", "gzip", "snappy", "lz4", "zstd"]):
        produce(kafka, busy, [(p, T0 + dt.timedelta(minutes=10 * i + p), f"{codec}-{p}".encode() * 50) for p in (0, 1) for _ in range(4)],
                compression=codec, headers=[("trace", b"\x00\x01"), ("none", None), ("utf8", "é".encode())])
    # Interval 2 gets data on partition 0 only; partition 2 and the quiet topic get nothing ever.
    produce(kafka, busy, [(0, T0 + HOUR + dt.timedelta(minutes=m), b"x" * 900_000 if m == 5 else b"small") for m in range(10)])
    produce(kafka, busy, [(1, T0 + 2 * HOUR + dt.timedelta(minutes=1), b"late")])
    results = [land_interval(cfg, T0 + i * HOUR, T0 + (i + 1) * HOUR) for i in range(3)]
    storage = open_storage(cfg.storage)
    assert [r.reused for r in results] == [False, False, False]
    assert [r.manifest.messages for r in results] == [40, 10, 1]
    by_part = {(p.topic, p.partition): p for p in results[1].manifest.partitions}
    assert by_part[(busy, 1)].messages == 0 and by_part[(busy, 1)].start == by_part[(busy, 1)].end
    assert by_part[(busy, 2)].segments == () and by_part[(quiet, 0)].messages == 0
    assert len(results[0].manifest.partitions) == 5  # every partition of every topic, empty ones too
    assert results[1].manifest.previous == results[0].manifest.path
    assert_exact(kafka, storage, results)
    # Headers and the 900 kB message survive byte for byte.
    seg = by_part[(busy, 0)].segments[0]
    rows = pq.read_table(storage.arrow_fs.open_input_file(storage.arrow_path(seg.path))).to_pylist()
    assert max(len(r["value"]) for r in rows) == 900_000
    first_interval = next(p for p in results[0].manifest.partitions if (p.topic, p.partition) == (busy, 0)).segments[0]
    row = pq.read_table(storage.arrow_fs.open_input_file(storage.arrow_path(first_interval.path))).to_pylist()[0]
    assert row["headers"] == [{"key": "trace", "value": b"\x00\x01"}, {"key": "none", "value": None}, {"key": "utf8", "value": "é".encode()}]
    assert row["timestamp_ms"] == MS(T0) and row["timestamp_type"] == 1
    # Segments are bounded: at most segment_max_messages offsets each.
    assert all(s.end - s.start <= 7 for r in results for p in r.manifest.partitions for s in p.segments)


def test_rerun_reuses_the_manifest(kafka, make_topic, tmp_path: Path) -> None:
    topic = make_topic(2)
    cfg = config(kafka, [topic], str(tmp_path / "a"))
    produce(kafka, topic, [(0, T0 + dt.timedelta(minutes=1), b"a")])
    first = land_interval(cfg, T0, T0 + HOUR)
    storage = open_storage(cfg.storage)
    before = storage.read(first.manifest.path)
    produce(kafka, topic, [(0, T0 + dt.timedelta(minutes=2), b"b")])  # arrives late: not recomputed
    again = land_interval(cfg, T0, T0 + HOUR)
    assert again.reused and storage.read(first.manifest.path) == before
    # ...and it is the next interval's to land, since manifests chain on offsets.
    nxt = land_interval(cfg, T0 + HOUR, T0 + 2 * HOUR)
    assert nxt.manifest.messages == 1
    assert_exact(kafka, storage, [first, nxt])


class DiesHalfway(LocalRunner):
    def map(self, fn, tasks):
        done = [fn(t) for t in tasks[: len(tasks) // 2]]
        raise RuntimeError(f"executor lost after {len(done)} of {len(tasks)} segments")


def test_a_run_that_died_after_half_its_segments_is_retried(kafka, make_topic, tmp_path: Path) -> None:
    topic = make_topic(3)
    cfg = config(kafka, [topic], str(tmp_path / "a"), segment_max_messages=5)
    produce(kafka, topic, [(i % 3, T0 + dt.timedelta(seconds=i), f"m{i}".encode()) for i in range(60)])
    with pytest.raises(RuntimeError, match="executor lost"):
        land_interval(cfg, T0, T0 + HOUR, runner=DiesHalfway())
    storage = open_storage(cfg.storage)
    assert list_manifests(storage, cfg.name) == []  # nothing published
    assert storage.list(f"{layout.pipeline_root(cfg.name)}/segments")  # but half the segments are there
    result = land_interval(cfg, T0, T0 + HOUR)
    assert not result.reused and result.manifest.messages == 60
    assert_exact(kafka, storage, [result])


def test_retention_gap_fails_naming_the_range_or_is_recorded(kafka, make_topic, tmp_path: Path) -> None:
    topic = make_topic(1)
    produce(kafka, topic, [(0, T0 + dt.timedelta(minutes=m), b"v") for m in range(10)])
    cfg = config(kafka, [topic], str(tmp_path / "a"))
    first = land_interval(cfg, T0, T0 + dt.timedelta(minutes=5))
    assert first.manifest.messages == 5
    produce(kafka, topic, [(0, T0 + dt.timedelta(minutes=20), b"w")])
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    for f in admin.delete_records([TopicPartition(topic, 0, 8)]).values():
        f.result(30)
    with pytest.raises(OffsetsMissingError, match=f"{topic}/0: offsets 5..7 were deleted by retention"):
        land_interval(cfg, T0 + dt.timedelta(minutes=5), T0 + HOUR)
    skipping = config(kafka, [topic], str(tmp_path / "a"), on_missing_offsets="skip")
    result = land_interval(skipping, T0 + dt.timedelta(minutes=5), T0 + HOUR)
    (p,) = result.manifest.partitions
    assert (p.gap.start, p.gap.end, p.start, p.end, p.messages) == (5, 8, 8, 11, 3)
    assert result.report["gaps"] == [{"topic": topic, "partition": 0, "start": 5, "end": 8}]


def test_first_run_start_modes(kafka, make_topic, tmp_path: Path) -> None:
    topic = make_topic(1)
    produce(kafka, topic, [(0, T0 + dt.timedelta(minutes=m), b"v") for m in range(10)])
    latest = land_interval(config(kafka, [topic], str(tmp_path / "l"), start="latest"), T0, T0 + HOUR)
    assert latest.manifest.messages == 0 and latest.manifest.partitions[0].start == 10
    at = land_interval(config(kafka, [topic], str(tmp_path / "t"), start="2024-01-01T00:04:00Z"), T0, T0 + HOUR)
    assert at.manifest.partitions[0].start == 4 and at.manifest.messages == 6


def test_overlapping_intervals_are_rejected(kafka, make_topic, tmp_path: Path) -> None:
    topic = make_topic(1)
    cfg = config(kafka, [topic], str(tmp_path / "a"))
    land_interval(cfg, T0, T0 + HOUR)
    with pytest.raises(ManifestError, match="overlaps the landed interval"):
        land_interval(cfg, T0 + HOUR / 2, T0 + 2 * HOUR)


def test_backfilling_a_hole_takes_nothing_twice(kafka, make_topic, tmp_path: Path) -> None:
    """Land hour 0 and hour 2, then backfill hour 1: hour 2 already holds its offsets."""
    topic = make_topic(1)
    produce(kafka, topic, [(0, T0 + dt.timedelta(minutes=30 * i), b"v") for i in range(6)])
    cfg = config(kafka, [topic], str(tmp_path / "a"))
    h0 = land_interval(cfg, T0, T0 + HOUR)
    h2 = land_interval(cfg, T0 + 2 * HOUR, T0 + 3 * HOUR)
    h1 = land_interval(cfg, T0 + HOUR, T0 + 2 * HOUR)
    assert h1.manifest.messages == 0
    assert_exact(kafka, open_storage(cfg.storage), [h0, h2])


def test_s3_archive_and_no_credentials_anywhere(kafka, make_topic, s3, bucket, caplog) -> None:
    topic = make_topic(2)
    cfg = config(kafka, [topic], f"s3://{bucket}/prefix/", storage={
        "endpoint_url": s3.endpoint, "access_key_id": s3.access_key, "secret_access_key": s3.secret_key})
    produce(kafka, topic, [(i % 2, T0 + dt.timedelta(minutes=i), f"s3-{i}".encode() * 100) for i in range(30)])
    results = [land_interval(cfg, T0, T0 + dt.timedelta(minutes=15)), land_interval(cfg, T0 + dt.timedelta(minutes=15), T0 + HOUR)]
    storage = open_storage(cfg.storage)
    assert_exact(kafka, storage, results)
    again = land_interval(cfg, T0, T0 + dt.timedelta(minutes=15))
    assert again.reused
    objects = [o["Key"] for o in s3.client().list_objects_v2(Bucket=bucket)["Contents"]]
    assert all(k.startswith("prefix/orders/") for k in objects)
    texts = [storage.read(k.removeprefix("prefix/")) for k in objects if k.endswith(".json")]
    texts += [repr(cfg).encode(), repr(storage).encode(), caplog.text.encode(), str(results).encode()]
    assert texts and not any(s3.secret_key.encode() in t or s3.access_key.encode() in t for t in texts)


def test_manifest_create_is_create_only_on_s3(s3, bucket) -> None:
    from spark.config import StorageConfig
    from spark.archive.storage import AlreadyExists

    storage = open_storage(StorageConfig(f"s3://{bucket}", s3.endpoint, None, s3.access_key, s3.secret_key))
    storage.create("m/x.json", b"1")
    with pytest.raises(AlreadyExists):
        storage.create("m/x.json", b"2")
    assert storage.read("m/x.json") == b"1"


def test_land_chunk_of_an_empty_range_writes_nothing(kafka, make_topic, tmp_path: Path) -> None:
    topic = make_topic(1)
    cfg = config(kafka, [topic], str(tmp_path / "a"))
    from spark.archive.land import LandTask

    chunk = land_chunk(LandTask(cfg, topic, 0, 0, 0))
    assert chunk.segment is None and chunk.messages == 0
    assert LocalStorage(tmp_path / "a").list("") == []


def test_config_errors_name_the_file_and_key(kafka) -> None:
    with pytest.raises(ConfigError, match=r"test.yaml: topics\[0\].protocol: expected one of .*found 'avro'"):
        PipelineConfig.from_mapping({"name": "p", "kafka": {"bootstrap_servers": "x"}, "topics": [{"name": "t", "protocol": "avro"}],
                                     "storage": {"url": "/tmp/x"}}, "test.yaml")
    with pytest.raises(ConfigError, match=r"test.yaml: storage.bucket: unknown key"):
        PipelineConfig.from_mapping({"name": "p", "kafka": {"bootstrap_servers": "x"}, "topics": [{"name": "t", "protocol": "simple"}],
                                     "storage": {"url": "/tmp/x", "bucket": "b"}}, "test.yaml")
    with pytest.raises(ConfigError, match="start: expected 'earliest', 'latest' or an ISO-8601 time"):
        PipelineConfig.from_mapping({"name": "p", "kafka": {"bootstrap_servers": "x"}, "topics": [{"name": "t", "protocol": "simple"}],
                                     "storage": {"url": "/tmp/x"}, "start": "yesterday"}, "test.yaml")


def test_segment_checksum_ignores_batching_and_tells_null_from_empty() -> None:
    import pyarrow as pa

    from spark.archive.land import SEGMENT_SCHEMA, SegmentChecksum

    def table(rows):
        cols = {n: [r.get(n) for r in rows] for n in SEGMENT_SCHEMA.names}
        cols["topic"] = pa.DictionaryArray.from_arrays(pa.array([0] * len(rows), pa.int32()), pa.array(["t"]))
        return pa.Table.from_pydict(cols, schema=SEGMENT_SCHEMA)

    rows = [{"offset": i, "partition": 0, "key": None if i % 3 else b"k%d" % i, "value": b"v" * i} for i in range(10)]
    whole, split = SegmentChecksum(), SegmentChecksum()
    whole.update(table(rows))
    split.update(table(rows[:4]))
    split.update(table(rows[4:]))
    assert whole.digest() == split.digest()
    other = SegmentChecksum()
    other.update(table([{**r, "key": b"" if r["key"] is None else r["key"]} for r in rows]))
    assert other.digest() != whole.digest()


def test_benchmark_commands_run_on_a_small_corpus(capsys) -> None:
    """The bench commands work end to end (figures are not asserted: benchmarks, not timed tests)."""
    from bench import codecs, land

    assert codecs.main(["--events", "300", "--protocols", "canal-json,simple"]) == 0
    assert land.main(["--messages", "400", "--partitions", "2", "--rounds", "1", "--runners", "local"]) == 0
    out = capsys.readouterr().out
    assert "canal-json" in out and "simple (avro)" in out and "lowest ratio" in out
    assert land.BARE_ALL in out and land.BARE_EACH in out and "in-process runner" in out


def test_a_spark_runner_takes_a_context_or_a_session_and_uses_its_context() -> None:
    from spark.runtime.runners import SparkRunner

    context = object()
    session = type("Session", (), {"sparkContext": context})()
    assert SparkRunner(context).context is context and SparkRunner(session).context is context


class CountingContext:
    """Stands for a SparkContext: counts the jobs the runner sends to it (it runs them in process)."""

    def __init__(self) -> None:
        self.jobs, self.stopped, self.environment = 0, False, {}

    def parallelize(self, items, slices):  # noqa: ANN001, ANN201
        self.jobs += 1
        return type("RDD", (), {"map": lambda _, fn: type("Mapped", (), {"collect": lambda _: [fn(i) for i in items]})()})()

    def stop(self) -> None:
        self.stopped = True


def test_an_interval_at_most_driver_max_messages_lands_without_starting_spark(kafka, make_topic, tmp_path: Path) -> None:
    from spark.runtime.runners import DriverFirstRunner

    topic = make_topic(2)
    produce(kafka, topic, [(i % 2, T0 + dt.timedelta(minutes=1), b"m%d" % i) for i in range(6)])
    started: list[CountingContext] = []

    def start() -> CountingContext:
        started.append(CountingContext())
        return started[-1]

    small = land_interval(config(kafka, [topic], str(tmp_path / "a"), driver_max_messages=6), T0, T0 + HOUR,
                          runner=DriverFirstRunner(start, 6))
    assert small.report["ran_in"] == "driver" and small.manifest.messages == 6 and started == []
    runner = DriverFirstRunner(start, 5)  # one message more than the driver takes: Spark, started once
    large = land_interval(config(kafka, [topic], str(tmp_path / "b")), T0, T0 + HOUR, runner=runner)
    assert large.report["ran_in"] == "spark" and large.manifest.messages == 6
    assert len(started) == 1 and started[0].jobs == 1 and runner.started
    runner.stop()
    assert started[0].stopped and not runner.started
    always = DriverFirstRunner(start, 0)
    assert always.for_messages(0).context is started[-1] and len(started) == 2  # 0: Spark even for nothing
    assert_exact(kafka, open_storage(config(kafka, [topic], str(tmp_path / "b")).storage), [large])


def test_driver_max_messages_is_zero_or_positive(kafka) -> None:
    assert config(kafka, ["t"], "x").driver_max_messages == 100_000
    assert config(kafka, ["t"], "x", driver_max_messages=0).driver_max_messages == 0
    with pytest.raises(ConfigError, match="driver_max_messages: expected 0 .always Spark. or a positive integer, found -1"):
        config(kafka, ["t"], "x", driver_max_messages=-1)


def test_tidelake_run_with_a_master_starts_spark_only_for_work_past_driver_max_messages(kafka, make_topic, tmp_path: Path,
                                                                                       monkeypatch) -> None:  # noqa: ANN001
    from spark.jobs.interval import run_interval
    from spark.demo.workload import WorkloadSpec

    from tests.spark.archives import produce_history

    topic = make_topic(1)
    records = produce_history(kafka.bootstrap, topic, 1, WorkloadSpec(tables=1, events=30, seed=6, watermark_every=5))
    started: list[CountingContext] = []

    def build_context(app, master=None, **kwargs):  # noqa: ANN001, ANN003, ANN202
        assert master == "local[2]"
        started.append(CountingContext())
        return started[-1]

    monkeypatch.setattr("spark.runtime.session.build_context", build_context)
    small = run_interval(config(kafka, [topic], str(tmp_path / "a")), T0, T0 + HOUR, "local[2]")
    assert (small["land"]["ran_in"], small["apply"]["ran_in"], started) == ("driver", "driver", [])
    assert small["apply"]["watermark"] and small["land"]["messages"] == len(records)
    # One message more than the driver takes: landing and decoding go to Spark (one context for both
    # steps), the fold of the ~30 change-log rows stays in the driver.
    mixed = run_interval(config(kafka, [topic], str(tmp_path / "b"), driver_max_messages=len(records) - 1), T0, T0 + HOUR,
                         "local[2]")
    assert (mixed["land"]["ran_in"], mixed["apply"]["ran_in"]) == ("spark", "driver") and mixed["apply"]["watermark"]
    assert len(started) == 1 and started[0].jobs == 2 and started[0].stopped  # land's job and decode's
