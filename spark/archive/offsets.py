"""Stage 1, first: the offset range of every partition for one data interval [s, e).

start = the previous manifest's end (first run: the configured earliest / latest /
timestamp; a partition added since: earliest); end = the first offset whose broker
timestamp is >= e, or the high watermark when there is none, never past the start of
an already-landed later interval. So intervals are contiguous in offset space and no
message is skipped or taken twice.
"""

from __future__ import annotations

import datetime as dt

import orjson

from cdc_codecs import TidelakeError
from spark.archive import layout
from spark.config import PipelineConfig
from spark.archive.floors import require_interval_kept
from spark.archive.kafka import KafkaHook
from spark.archive.manifest import Gap, Manifest, PartitionRange, neighbours
from spark.archive.storage import AlreadyExists, Storage, open_storage


class OffsetsMissingError(TidelakeError):
    """Retention deleted offsets the archive still needs."""


def _ms(t: dt.datetime) -> int:
    return int(t.timestamp() * 1000)


def plan_offsets(
    config: PipelineConfig,
    kafka: KafkaHook,
    interval_start: dt.datetime,
    interval_end: dt.datetime,
    previous: Manifest | None,
    following: Manifest | None,
) -> list[PartitionRange]:
    """Offset ranges for every partition of every topic, in (topic, partition) order.

    Raises:
        OffsetsMissingError: a start offset is below the partition's low watermark and the
            pipeline's ``on_missing_offsets`` is ``fail``.
    """
    prev_ends = previous.ends() if previous else {}
    next_starts = following.starts() if following else {}
    ranges: list[PartitionRange] = []
    for topic in sorted({t.name for t in config.topics}):
        partitions = kafka.partitions(topic)
        ends = kafka.offsets_for_time(topic, partitions, _ms(interval_end))
        first_run_starts: dict[int, int | None] = {}
        if previous is None and config.start_time is not None:
            first_run_starts = kafka.offsets_for_time(topic, partitions, _ms(config.start_time))
        for p in partitions:
            marks = kafka.watermarks(topic, p)
            if (topic, p) in prev_ends:
                start = prev_ends[(topic, p)]
            elif previous is not None or config.start == "earliest":
                start = marks.low  # a partition added since the last run is read from its beginning
            elif config.start == "latest":
                start = marks.high
            else:
                found = first_run_starts.get(p)
                start = marks.high if found is None else found
            end = ends.get(p)
            end = marks.high if end is None else end
            if (topic, p) in next_starts:
                end = min(end, next_starts[(topic, p)])
            gap = None
            if start < marks.low:
                if config.on_missing_offsets == "fail":
                    raise OffsetsMissingError(
                        f"{topic}/{p}: offsets {start}..{marks.low - 1} were deleted by retention before they were "
                        f"archived (the partition now starts at {marks.low}). Land more often than the topic's "
                        "retention, or set on_missing_offsets: skip to record the gap and continue"
                    )
                gap = Gap(start, marks.low)
                start = marks.low
            ranges.append(PartitionRange(topic, p, start, max(start, end), gap))
    return ranges


def plan_path(pipeline: str, start: dt.datetime, end: dt.datetime) -> str:
    return f"{layout.pipeline_root(pipeline)}/plans/{layout.instant(start)}_{layout.instant(end)}.json"


def snapshot_offsets(
    config: PipelineConfig, interval_start: dt.datetime, interval_end: dt.datetime, storage: Storage | None = None,
) -> list[PartitionRange]:
    """Stage 1's offsets as their own task: fix the interval's offset ranges once (create-only).

    A plan that already exists is reused, so a retried or backfilled run lands exactly the
    ranges its first attempt planned even after more messages arrived.
    """
    storage = storage or open_storage(config.storage)
    require_interval_kept(storage, config.name, interval_start, interval_end, "snapshot the offsets of")
    path = plan_path(config.name, interval_start, interval_end)
    if storage.exists(path):
        return read_plan(storage, path)
    previous, following = neighbours(storage, config.name, interval_start, interval_end)
    with KafkaHook(config.bootstrap_servers, config.kafka_options) as kafka:
        ranges = plan_offsets(config, kafka, interval_start, interval_end, previous, following)
    doc = [{"topic": r.topic, "partition": r.partition, "start": r.start, "end": r.end,
            "gap": {"start": r.gap.start, "end": r.gap.end} if r.gap else None} for r in ranges]
    try:
        storage.create(path, orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    except AlreadyExists:
        return read_plan(storage, path)
    return ranges


def read_plan(storage: Storage, path: str) -> list[PartitionRange]:
    return [PartitionRange(d["topic"], d["partition"], d["start"], d["end"], Gap(**d["gap"]) if d.get("gap") else None)
            for d in orjson.loads(storage.read(path))]
