"""Decode once: raw segments -> change log + side outputs, carrying decoder state between segments."""

from __future__ import annotations

import json
import pickle
import re
from pathlib import Path
from typing import Any, Callable, Sequence

import pytest

from cdc_codecs import (
    DECODER_VERSION,
    PROTOCOLS,
    Column,
    DdlChange,
    Event,
    Op,
    PendingSchemaError,
    ProducerRecord,
    RowChange,
    SchemaSnapshot,
    SourcePosition,
    TableSchema,
    TypeKind,
    Watermark,
    get_encoder,
    parse_mysql_type,
)
from spark.demo.workload import tso
from spark.runtime import credentials
from spark.archive import layout
from spark.config import PipelineConfig
from spark.decode.changelog import (
    CHANGE_LOG_FORMAT,
    CHANGE_LOG_SCHEMA,
    ChangeLogError,
    ChangeLogTask,
    decode_effect,
    decode_schema,
    decode_segments,
    decoder_version,
    encode_schema,
    ensure_change_log,
    read_change_log,
    schema_id,
    segments_carry_state,
)
from spark.archive.manifest import SegmentRef
from spark.decode.side_output import DecoderState, SideOutput, SideOutputError, read_side_output
from spark.archive.land import open_segment_writer, segment_table
from spark.core.keys import key_bytes
from spark.archive.storage import LocalStorage, Storage, open_storage
from spark.core.watermark import derived_commit_ts, derived_mark
from tests.spark.archives import make_config
from tests.spark.history import GARBAGE

TOPIC = "cdc"
PART = (TOPIC, 0)
TYPES = {"id": parse_mysql_type("bigint"), "name": parse_mysql_type("varchar(64)")}
SCHEMA = TableSchema("shop", "t", (Column("id", TYPES["id"], False), Column("name", TYPES["name"])), ("id",))
ORIGIN = SourcePosition("generated", 0, 0)
COMMIT_TS = ["canal-json", "simple"]
DERIVED = ["canal", "debezium-mysql"]


class PicklingRunner:
    """Runs tasks in process, but pickles tasks and results as Spark does; records every task."""

    where = "spark"  # it stands for Spark's executors
    start_seconds = 0.0

    def __init__(self) -> None:
        self.tasks: list[Any] = []
        self.calls = 0

    def map(self, fn: Callable[[Any], Any], tasks: Sequence[Any]) -> list[Any]:
        self.calls += 1
        self.tasks.extend(tasks)
        return [pickle.loads(pickle.dumps(fn(pickle.loads(pickle.dumps(t))))) for t in tasks]


# ---------------------------------------------------------------- histories and archives


def ddl(ms: int) -> DdlChange:
    return DdlChange("shop", "t", "CREATE TABLE `shop`.`t` (`id` bigint NOT NULL, `name` varchar(64), PRIMARY KEY (`id`))",
                     tso(ms), ORIGIN, "CREATE", None, SCHEMA, ms)


def change(op: Op, ms: int, before: dict | None, after: dict | None) -> RowChange:
    return RowChange(op, "shop", "t", before, after, ("id",), TYPES, tso(ms, 1), ORIGIN, ms)


def row(key: int, name: str) -> dict[str, Any]:
    return {"id": key, "name": name}


def encode(protocol: str, events: list[Event], rows_per_message: int = 1) -> list[ProducerRecord]:
    """One partition's records; Canal batches rows only when asked, so offsets stay simple."""
    options = dict(PROTOCOLS[protocol].encoder_defaults)
    if "rows_per_message" in PROTOCOLS[protocol].encoder.options_spec:
        options["rows_per_message"] = rows_per_message
    return get_encoder(protocol, **options).encode_all(events, 1)


def write_segments(storage: Storage, config: PipelineConfig, chunks: list[list[ProducerRecord]],
                   partition: int = 0, first: int = 0) -> list[SegmentRef]:
    """One raw segment per chunk, laid out as landing does; offsets continue from ``first``."""
    refs = []
    for chunk in chunks:
        end = first + len(chunk)
        path = layout.segment_path(config.name, TOPIC, partition, first, end)
        out, writer = open_segment_writer(storage, path)
        writer.write_table(segment_table(TOPIC, partition, list(range(first, end)), [0] * len(chunk), [0] * len(chunk),
                                         [r.key for r in chunk], [r.value for r in chunk], [None] * len(chunk)))
        writer.close()
        out.close()
        refs.append(SegmentRef(path, first, end))
        first = end
    return refs


def setup(tmp_path: Path, protocol: str) -> tuple[PipelineConfig, Storage]:
    config = make_config(tmp_path, protocol)
    return config, open_storage(config.storage)


def ensure(config: PipelineConfig, storage: Storage, segments: list[SegmentRef], runner: PicklingRunner | None = None,
           history: list[SegmentRef] | None = None) -> list[SideOutput]:
    out = ensure_change_log(config, storage, runner or PicklingRunner(), {PART: segments}, {PART: history or segments})
    return out[PART]


def paths(config: PipelineConfig, segment: SegmentRef, version: str | None = None) -> tuple[str, str]:
    version = version or decoder_version(config.topics[0].protocol)
    return layout.changelog_paths(config.name, version, TOPIC, 0, segment.start, segment.end)


def rows_of(storage: Storage, config: PipelineConfig, segments: list[SegmentRef]) -> list[dict[str, Any]]:
    return read_change_log(storage, [paths(config, s)[0] for s in segments]).to_pylist()


# ---------------------------------------------------------------- rows and effects


CHANGES = [
    change(Op.INSERT, 1001, None, row(1, "a")),
    change(Op.UPDATE, 1003, row(1, "a"), row(1, "b")),
    change(Op.UPDATE, 1002, row(1, "b"), row(2, "b")),  # moves the row to key 2; its time goes back
    change(Op.DELETE, 1004, row(2, "b"), None),
]


def effects_history(protocol: str) -> list[Event]:
    head: list[Event] = [SchemaSnapshot(SCHEMA, ORIGIN)] if protocol == "simple" else []
    return [*head, ddl(1000), *CHANGES, Watermark(tso(1005), ORIGIN)]


@pytest.mark.parametrize("protocol", COMMIT_TS + DERIVED)
def test_one_row_per_key_effect_for_insert_update_key_change_and_delete(tmp_path: Path, protocol: str) -> None:
    config, storage = setup(tmp_path, protocol)
    records = encode(protocol, effects_history(protocol))
    (segment,) = write_segments(storage, config, [records])
    (side,) = ensure(config, storage, [segment])

    rows = rows_of(storage, config, [segment])
    assert rows[0].keys() == set(CHANGE_LOG_SCHEMA.names)
    assert [(r["deletes"], r["first"], r["key"]) for r in rows] == [
        (False, True, key_bytes((1,))),  # insert
        (False, True, key_bytes((1,))),  # update in place
        (True, True, key_bytes((1,))),  # key change: the old key deleted...
        (False, False, key_bytes((2,))),  # ...and the new one written, by the same change
        (True, True, key_bytes((2,))),  # delete
    ]
    first_change = len(records) - len(CHANGES) - (protocol in COMMIT_TS)  # the insert: after the DDL, before a watermark
    assert [r["offset"] for r in rows] == [first_change, first_change + 1, first_change + 2, first_change + 2, first_change + 3]
    assert {(r["topic"], r["partition"], r["index"], r["database"], r["table"]) for r in rows} == {(TOPIC, 0, 0, "shop", "t")}
    assert [decode_effect(r["change"]) for r in rows] == [
        (Op.INSERT, row(1, "a")),
        (Op.UPDATE, row(1, "b")),
        (Op.DELETE, {"id": 1}),
        (Op.UPDATE, row(2, "b")),
        (Op.DELETE, {"id": 2}),
    ]
    assert len({r["schema_id"] for r in rows}) == 1  # one table schema: one id, its JSON in the side output
    assert list(side.schemas) == [rows[0]["schema_id"]] and rows[0]["schema_id"] == schema_id(side.schemas[rows[0]["schema_id"]])
    assert decode_schema(side.schemas[rows[0]["schema_id"]])[0] == ("id",)

    if protocol in COMMIT_TS:  # the protocol's own commitTs; the mark is the watermark's
        assert [r["commit_ts"] for r in rows] == [tso(1001, 1), tso(1003, 1), tso(1002, 1), tso(1002, 1), tso(1004, 1)]
        assert side.mark == tso(1005)
        assert [d.commit_ts for d in side.ddl] == [tso(1000)]
        assert side.state.clock == 0
    else:  # the running maximum of the event times, the DDL included; marks from event times
        clock = [derived_commit_ts(ms) for ms in (1001, 1003, 1003, 1003, 1004)]
        assert [r["commit_ts"] for r in rows] == clock
        assert side.mark == derived_mark(1004)
        assert [d.commit_ts for d in side.ddl] == [derived_commit_ts(1000)]
        assert side.state.clock == derived_commit_ts(1004)
    assert (side.messages, side.rows, side.errors) == (len(records), 5, ())
    assert side.decoder == f"{protocol}-{DECODER_VERSION}-f{CHANGE_LOG_FORMAT}"
    assert (side.topic, side.partition, side.start, side.end) == (TOPIC, 0, 0, len(records))


def test_rows_batched_in_one_message_keep_their_index(tmp_path: Path) -> None:
    config, storage = setup(tmp_path, "canal")
    inserts = [change(Op.INSERT, 1001, None, row(k, "a")) for k in range(3)]
    (segment,) = write_segments(storage, config, [encode("canal", inserts, rows_per_message=3)])
    (side,) = ensure(config, storage, [segment])
    rows = rows_of(storage, config, [segment])
    assert [(r["offset"], r["index"], r["key"]) for r in rows] == [(0, i, key_bytes((i,))) for i in range(3)]
    assert [decode_effect(r["change"]) for r in rows] == [(Op.INSERT, row(i, "a")) for i in range(3)]
    assert (side.messages, side.events, side.rows) == (1, 3, 3)


def test_a_table_without_key_deletes_the_whole_row_as_its_key(tmp_path: Path) -> None:
    config, storage = setup(tmp_path, "canal-json")
    keyless = [c._replace(key_columns=()) for c in (change(Op.INSERT, 1001, None, row(1, "a")),
                                                     change(Op.DELETE, 1002, row(1, "a"), None))]
    (segment,) = write_segments(storage, config, [encode("canal-json", keyless)])
    ensure(config, storage, [segment])
    inserted, deleted = rows_of(storage, config, [segment])
    assert inserted["key"] == deleted["key"] == key_bytes((("id", 1), ("name", "a")))
    assert decode_effect(deleted["change"]) == (Op.DELETE, row(1, "a"))


def test_equal_keys_have_equal_key_bytes_across_segments_and_values(tmp_path: Path) -> None:
    config, storage = setup(tmp_path, "canal-json")
    segments = write_segments(storage, config, [encode("canal-json", [change(Op.INSERT, 1001, None, row(7, "a"))]),
                                                encode("canal-json", [change(Op.DELETE, 1002, row(7, "a"), None),
                                                                      change(Op.INSERT, 1003, None, row(8, "a"))])])
    ensure(config, storage, segments)
    keys = [r["key"] for r in rows_of(storage, config, segments)]
    assert keys[0] == keys[1] != keys[2]
    assert key_bytes((7,)) == key_bytes((7.0,)) == keys[0]  # equal values, equal bytes, whatever their Python type


# ---------------------------------------------------------------- state carried between segments


def test_simple_schemas_announced_in_one_segment_decode_rows_in_the_next(tmp_path: Path) -> None:
    config, storage = setup(tmp_path, "simple")
    announce, rows = encode("simple", [SchemaSnapshot(SCHEMA, ORIGIN)]), encode("simple", CHANGES[:2])
    segments = write_segments(storage, config, [announce, rows])
    first, second = ensure(config, storage, segments)
    assert [(s.table, s.key_columns) for s in first.state.schemas] == [("t", ("id",))]
    assert first.state.schemas == second.state.schemas
    assert (second.rows, second.errors) == (2, ())
    assert [decode_effect(r["change"])[1] for r in rows_of(storage, config, segments[1:])] == [row(1, "a"), row(1, "b")]

    # Without the carried state the same segment cannot be decoded: the state is what made it work.
    alone = decode_segments(ChangeLogTask(config, TOPIC, 1, (segments[1],), DecoderState()))
    assert [type(e) for e in alone[0].errors] == [PendingSchemaError, PendingSchemaError]


def derived_segments(storage: Storage, config: PipelineConfig, times: list[list[int]]) -> list[SegmentRef]:
    key = iter(range(100))
    chunks = [encode("canal", [change(Op.INSERT, ms, None, row(next(key), "x")) for ms in chunk]) for chunk in times]
    return write_segments(storage, config, chunks)


def test_derived_clock_never_decreases_and_is_carried_across_segments(tmp_path: Path) -> None:
    config, storage = setup(tmp_path, "canal")
    segments = derived_segments(storage, config, [[1000, 1010], [1005, 1020, 1015], [1001]])
    sides = ensure(config, storage, segments)
    ts = [r["commit_ts"] for r in rows_of(storage, config, segments)]
    assert ts == [derived_commit_ts(ms) for ms in (1000, 1010, 1010, 1020, 1020, 1020)]
    assert [s.state.clock for s in sides] == [derived_commit_ts(ms) for ms in (1010, 1020, 1020)]
    # A segment's mark is what its own events prove, not the carried clock.
    assert [s.mark for s in sides] == [derived_mark(1010), derived_mark(1020), derived_mark(1001)]


# ---------------------------------------------------------------- decoded once


def test_a_second_ensure_decodes_nothing_and_returns_the_same_side_outputs(tmp_path: Path) -> None:
    config, storage = setup(tmp_path, "canal")
    segments = derived_segments(storage, config, [[1000], [1001, 1002], [1003]])
    runner = PicklingRunner()
    first = ensure(config, storage, segments, runner)
    assert [len(t.segments) for t in runner.tasks] == [3]
    parquet = storage.read(paths(config, segments[1])[0])

    again = PicklingRunner()
    second = ensure(config, storage, segments, again)
    assert again.tasks == []
    assert [s.to_json() for s in second] == [s.to_json() for s in first]
    assert storage.read(paths(config, segments[1])[0]) == parquet


def test_new_segments_decode_from_the_state_of_the_last_decoded_one(tmp_path: Path) -> None:
    config, storage = setup(tmp_path, "canal")
    segments = derived_segments(storage, config, [[1000], [1010], [1005]])
    ensure(config, storage, segments[:2])
    runner = PicklingRunner()
    (side,) = ensure(config, storage, segments[2:], runner, history=segments)
    (task,) = runner.tasks
    assert task.segments == (segments[2],)
    assert task.state == DecoderState((), derived_commit_ts(1010))
    assert side.state.clock == derived_commit_ts(1010)


def test_a_missing_side_output_in_the_middle_of_history_is_derived_again_from_the_right_state(tmp_path: Path) -> None:
    config, storage = setup(tmp_path, "canal")
    segments = derived_segments(storage, config, [[1000, 1030], [1010], [1020], [1040]])
    ensure(config, storage, segments[:3])
    before = {p: storage.read(p) for p in paths(config, segments[1])}
    for p in paths(config, segments[1]) + paths(config, segments[2]):
        storage.delete(p)

    runner = PicklingRunner()
    (side,) = ensure(config, storage, segments[3:], runner, history=segments)
    (task,) = runner.tasks
    assert task.segments == tuple(segments[1:])  # walked back over the two missing ones
    assert task.state == read_side_output(storage, paths(config, segments[0])[1]).state
    assert {p: storage.read(p) for p in paths(config, segments[1])} == before
    assert side.state.clock == derived_commit_ts(1040)
    assert [r["commit_ts"] for r in rows_of(storage, config, segments[1:])] == [derived_commit_ts(1030)] * 2 + [derived_commit_ts(1040)]


def test_a_needed_segment_already_decoded_after_a_missing_one_is_read_not_decoded(tmp_path: Path) -> None:
    config, storage = setup(tmp_path, "canal")
    segments = derived_segments(storage, config, [[1000], [1010], [1020]])
    ensure(config, storage, segments)
    kept = storage.read(paths(config, segments[2])[1])
    storage.delete(paths(config, segments[1])[1])
    runner = PicklingRunner()
    sides = ensure(config, storage, segments, runner)
    assert [s.start for s in sides] == [s.start for s in segments]
    assert storage.read(paths(config, segments[2])[1]) == kept
    assert sides[2].to_json() == kept


def test_the_first_segment_of_a_partition_starts_from_an_empty_state(tmp_path: Path) -> None:
    config, storage = setup(tmp_path, "canal")
    segments = derived_segments(storage, config, [[1000], [1010]])
    runner = PicklingRunner()
    ensure(config, storage, segments[1:], runner, history=segments)
    (task,) = runner.tasks
    assert (task.segments, task.state) == (tuple(segments), DecoderState())


def test_a_decoder_version_change_derives_the_change_log_again_under_a_new_directory(tmp_path: Path,
                                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    config, storage = setup(tmp_path, "canal-json")
    segments = write_segments(storage, config, [encode("canal-json", CHANGES)])
    ensure(config, storage, segments)
    old = decoder_version("canal-json")
    monkeypatch.setattr("spark.decode.changelog.DECODER_VERSION", "next")
    new = decoder_version("canal-json")
    assert new == f"canal-json-next-f{CHANGE_LOG_FORMAT}" and old != new
    runner = PicklingRunner()
    (side,) = ensure(config, storage, segments, runner)
    assert len(runner.tasks) == 1 and side.decoder == new
    assert storage.exists(paths(config, segments[0], new)[1])
    assert storage.exists(paths(config, segments[0], old)[1])  # the old version's is left alone
    assert paths(config, segments[0], new)[0].startswith(layout.changelog_dir(config.name, new, TOPIC, 0))


def test_a_crash_between_the_parquet_and_the_side_output_is_rerun_to_identical_content(tmp_path: Path,
                                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    config, storage = setup(tmp_path, "canal")
    segments = derived_segments(storage, config, [[1000, 1002, 1001]])
    parquet, side_path = paths(config, segments[0])
    real_create = LocalStorage.create

    def crash(self: LocalStorage, path: str, data: bytes) -> None:
        raise RuntimeError("executor lost")

    monkeypatch.setattr(LocalStorage, "create", crash)
    with pytest.raises(RuntimeError, match="executor lost"):
        ensure(config, storage, segments)
    assert storage.exists(parquet) and not storage.exists(side_path)
    crashed = storage.read(parquet)

    monkeypatch.setattr(LocalStorage, "create", real_create)
    (side,) = ensure(config, storage, segments)
    assert storage.read(parquet) == crashed
    assert side.rows == len(rows_of(storage, config, segments)) == 3


def test_an_existing_side_output_wins_over_a_concurrent_attempt(tmp_path: Path) -> None:
    config, storage = setup(tmp_path, "canal")
    segments = derived_segments(storage, config, [[1000]])
    (first,) = ensure(config, storage, segments)
    # An attempt that started before the side output existed still returns the stored one.
    (second,) = decode_segments(ChangeLogTask(config, TOPIC, 0, tuple(segments), DecoderState((), derived_commit_ts(5000))))
    assert second.to_json() == first.to_json()


# ---------------------------------------------------------------- undecodable messages


def test_undecodable_messages_appear_in_the_side_output_of_their_segment_once(tmp_path: Path) -> None:
    config, storage = setup(tmp_path, "canal-json")
    good = encode("canal-json", CHANGES[:2])
    bad = ProducerRecord(0, b"k", GARBAGE)
    segments = write_segments(storage, config, [[good[0], bad, good[1]], [bad]])
    first, second = ensure(config, storage, segments)
    assert [(e.position.offset, e.raw.value) for e in first.errors] == [(1, GARBAGE)]
    assert [(e.position.offset, e.raw.value) for e in second.errors] == [(3, GARBAGE)]
    assert (first.messages, first.rows, second.messages, second.rows) == (3, 2, 1, 0)
    assert rows_of(storage, config, segments[1:]) == []

    again = ensure(config, storage, segments)
    assert [[str(e) for e in s.errors] for s in again] == [[str(e) for e in first.errors], [str(e) for e in second.errors]]


def test_simple_rows_whose_schema_never_arrives_in_their_segment_are_errors_of_that_segment(tmp_path: Path) -> None:
    config, storage = setup(tmp_path, "simple")
    segments = write_segments(storage, config, [encode("simple", CHANGES[:1]), encode("simple", [SchemaSnapshot(SCHEMA, ORIGIN)])])
    first, second = ensure(config, storage, segments)
    assert [(type(e), e.position.offset) for e in first.errors] == [(PendingSchemaError, 0)]
    assert (second.errors, second.rows) == ((), 0)


def test_a_change_without_event_time_cannot_be_ordered_and_is_undecodable(tmp_path: Path) -> None:
    config, storage = setup(tmp_path, "canal")
    records = encode("canal", [change(Op.INSERT, 1000, None, row(1, "a")), change(Op.INSERT, 1001, None, row(2, "a"))])
    timeless = ProducerRecord(0, records[1].key, records[1].value.replace(b'"es":1001', b'"es":null'))
    assert timeless.value != records[1].value
    (segment,) = write_segments(storage, config, [[records[0], timeless]])
    (side,) = ensure(config, storage, [segment])
    assert [(e.position.offset, "no event time" in str(e)) for e in side.errors] == [(1, True)]
    assert (side.rows, side.state.clock) == (1, derived_commit_ts(1000))


# ---------------------------------------------------------------- the side output and the driver's contract


def test_side_output_round_trips_through_json(tmp_path: Path) -> None:
    config, storage = setup(tmp_path, "simple")
    segments = write_segments(storage, config, [encode("simple", [ddl(1000), *CHANGES]) + [ProducerRecord(0, None, GARBAGE)]])
    (side,) = ensure(config, storage, segments)
    copy = SideOutput.from_json(side.to_json())
    assert copy.to_json() == side.to_json()
    assert copy.ddl == side.ddl and copy.state == side.state and copy.state.schemas[0].key_columns == ("id",)
    assert [(type(e), e.position, e.raw) for e in copy.errors] == [(type(e), e.position, e.raw) for e in side.errors]
    assert len(copy.errors) == 1 and copy.mark is None


@pytest.mark.parametrize("planted", ["ddl", "errors", "schemas"])
def test_a_pickle_planted_in_a_side_output_is_refused_as_damaged_naming_the_file(tmp_path: Path, planted: str) -> None:
    import base64

    class Boom:
        def __reduce__(self):  # noqa: ANN204
            return (exec, ("raise SystemExit('the pickle ran')",))

    config, storage = setup(tmp_path, "simple")
    segments = write_segments(storage, config, [encode("simple", [ddl(1000), *CHANGES]) + [ProducerRecord(0, None, GARBAGE)]])
    ensure(config, storage, segments)
    path = paths(config, segments[0])[1]
    doc = json.loads(storage.read(path))
    payload = base64.b64encode(pickle.dumps(Boom())).decode("ascii")
    doc[planted] = {"1": payload} if planted == "schemas" else [payload]
    storage.delete(path)
    storage.write(path, json.dumps(doc).encode())
    with pytest.raises(SideOutputError, match=rf"{re.escape(path)}: damaged side output"):
        read_side_output(storage, path)


def test_a_needed_segment_outside_the_history_is_refused(tmp_path: Path) -> None:
    config, storage = setup(tmp_path, "canal")
    segments = derived_segments(storage, config, [[1000], [1001]])
    with pytest.raises(ChangeLogError, match=r"cdc/0: segment .* \[1, 2\) is not in the partition's history"):
        ensure(config, storage, segments[1:], history=segments[:1])


def test_partitions_are_decoded_one_task_each_and_answered_per_partition(tmp_path: Path) -> None:
    config, storage = setup(tmp_path, "canal")
    zero = derived_segments(storage, config, [[1000], [1001]])
    one = write_segments(storage, config, [encode("canal", [change(Op.INSERT, 2000, None, row(1, "a"))])], partition=1)
    runner = PicklingRunner()
    out = ensure_change_log(config, storage, runner, {PART: zero, (TOPIC, 1): one}, {PART: zero, (TOPIC, 1): one})
    assert runner.calls == 1 and sorted((t.partition, len(t.segments)) for t in runner.tasks) == [(0, 2), (1, 1)]
    assert [[s.start for s in out[k]] for k in (PART, (TOPIC, 1))] == [[0, 1], [0]]
    assert out[(TOPIC, 1)][0].state.clock == derived_commit_ts(2000)
    assert all(t.config.storage.secret_access_key is None for t in runner.tasks)


def test_protocols_whose_segments_carry_state_are_the_schema_announcing_and_derived_clock_ones() -> None:
    carry = {p for p in PROTOCOLS if segments_carry_state(p)}
    assert carry == {"canal", "cloudcanal-canal-json", "debezium", "debezium-mysql", "cloudcanal-debezium", "simple",
                     "cloudcanal-json", "dts-avro"}  # TiCDC canal-json and open protocol do not
    assert segments_carry_state("canal-json", {"enable_tidb_extension": "false"})  # the derived clock, carried


@pytest.mark.parametrize("protocol", ["canal-json", "open-protocol"])
def test_segments_that_carry_no_state_decode_one_task_each_to_what_one_task_over_all_of_them_writes(
        tmp_path: Path, protocol: str) -> None:
    config, storage = setup(tmp_path / "split", protocol)
    events = [ddl(1000)] + [change(Op.INSERT, 1001 + k, None, row(k, f"n{k}")) for k in range(6)]
    records = encode(protocol, events)
    chunks = [records[i:i + 2] for i in range(0, len(records), 2)]
    segments = write_segments(storage, config, chunks)
    runner = PicklingRunner()
    sides = ensure(config, storage, segments, runner)
    assert runner.calls == 1 and [t.segments for t in runner.tasks] == [(s,) for s in segments]
    assert all(t.state == DecoderState() for t in runner.tasks)

    # The same segments decoded by one task, in order, carrying state: the same files.
    whole_config, whole = setup(tmp_path / "whole", protocol)
    assert write_segments(whole, whole_config, chunks) == segments
    task = ChangeLogTask(credentials.task_config(whole_config), TOPIC, 0, tuple(segments), DecoderState())
    assert [s.to_json() for s in decode_segments(task)] == [s.to_json() for s in sides]
    for segment in segments:
        assert [whole.read(p) for p in paths(whole_config, segment)] == [storage.read(p) for p in paths(config, segment)]


def test_segments_that_carry_no_state_decode_only_the_undecoded_ones_and_are_answered_in_order(tmp_path: Path) -> None:
    config, storage = setup(tmp_path, "canal-json")
    chunks = [encode("canal-json", [change(Op.INSERT, 1001 + k, None, row(k, "x"))]) for k in range(5)]
    segments = write_segments(storage, config, chunks)
    first = ensure(config, storage, segments[:4])
    for i in (1, 3):
        storage.delete(paths(config, segments[i])[1])
    runner = PicklingRunner()
    sides = ensure(config, storage, segments, runner)
    assert [t.segments for t in runner.tasks] == [(segments[1],), (segments[3],), (segments[4],)]  # 2 is read, not decoded
    assert [(s.start, s.end) for s in sides] == [(s.start, s.end) for s in segments]
    assert [s.to_json() for s in sides[:4]] == [s.to_json() for s in first]
    with pytest.raises(ChangeLogError, match="is not in the partition's history"):
        ensure(config, storage, segments[3:] + [SegmentRef("elsewhere", 9, 10)], history=segments)


def test_key_less_rows_name_their_run_of_offset_contiguous_rows_at_one_commit_ts(tmp_path: Path, monkeypatch) -> None:
    from spark.decode import changelog
    from spark.decode.side_output import SegmentRuns

    monkeypatch.setattr(changelog, "ROW_GROUP", 2)  # runs go on across the writer's flushes
    bag = {"x": 1}

    def change(offset: int, commit_ts: int, keyless: bool) -> RowChange:
        keys, after = ((), bag) if keyless else (("id",), {"id": offset, "name": "n"})
        return RowChange(Op.INSERT, "shop", "bag" if keyless else "t", None, after, keys, TYPES, commit_ts,
                         SourcePosition(TOPIC, 0, offset))

    # offset 3 is a message without rows (a watermark); 6 re-sends commitTs 10 after 20 began.
    changes = [change(0, 10, True), change(1, 10, False), change(2, 10, True), change(4, 10, True), change(5, 20, True),
               change(6, 10, True), change(7, 30, False), change(8, 30, False), change(9, 30, True)]
    storage = LocalStorage(str(tmp_path))
    writer = changelog.ChangeLogWriter(storage, "c.parquet")
    for c in changes:
        writer.add(c)
    writer.close()
    rows = read_change_log(storage, ["c.parquet"]).to_pylist()
    assert [(r["offset"], r["run"]) for r in rows] == [(0, 0), (1, -1), (2, 0), (4, 4), (5, 5), (6, 6), (7, -1), (8, -1), (9, 7)]
    assert writer.runs == SegmentRuns(0, 10, 9, 30, 7)


def test_a_decode_task_does_not_import_pyiceberg_table() -> None:
    """Every Python worker imports what its first decode task needs; pyiceberg.table alone cost each 0.3 s."""
    import subprocess
    import sys

    probe = "import sys, spark.decode.changelog; print('pyiceberg.table' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_raw_messages_keep_each_messages_headers_and_position_across_read_batches(tmp_path: Path, monkeypatch) -> None:
    """Read batches with headers on some messages, and a batch where no message has any."""
    from cdc_codecs import RawMessage
    from spark.decode import changelog

    monkeypatch.setattr(changelog, "READ_BATCH", 2)
    storage = LocalStorage(str(tmp_path))
    headers = [None, [{"key": "trace", "value": b"\x00\x01"}, {"key": "none", "value": None}], [], None, None]
    path = layout.segment_path("p", TOPIC, 3, 10, 15)
    out, writer = open_segment_writer(storage, path)
    writer.write_table(segment_table(TOPIC, 3, list(range(10, 15)), [7, None, 9, 10, 11], [0] * 5,
                                     [b"k", None, b"k2", None, b"k4"], [b"v0", b"v1", None, b"v3", b"v4"], headers))
    writer.close()
    out.close()
    messages = list(changelog.raw_messages(storage, TOPIC, 3, SegmentRef(path, 10, 15)))
    assert messages == [
        RawMessage(b"k", b"v0", SourcePosition(TOPIC, 3, 10), (), 7),
        RawMessage(None, b"v1", SourcePosition(TOPIC, 3, 11), (("trace", b"\x00\x01"), ("none", None)), None),
        RawMessage(b"k2", None, SourcePosition(TOPIC, 3, 12), (), 9),
        RawMessage(None, b"v3", SourcePosition(TOPIC, 3, 13), (), 10),
        RawMessage(b"k4", b"v4", SourcePosition(TOPIC, 3, 14), (), 11),
    ]
    assert all(type(m) is RawMessage and type(m.position) is SourcePosition for m in messages)


def test_the_writer_compiles_one_image_encoder_per_table_schema_not_per_column_types_mapping(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """The Open protocol and DTS Avro build a column-types mapping per event: the writer's encoder
    cache is by schema (``schema_id``), so a segment compiles one per schema, not one per change."""
    from cdc_codecs import Op, RowChange, SourcePosition, parse_mysql_type
    from spark.archive.storage import open_storage
    from spark.config import StorageConfig
    from spark.decode import changelog

    compiled: list[int] = []
    real = changelog.image_encoder
    monkeypatch.setattr(changelog, "image_encoder", lambda types: compiled.append(len(types)) or real(types))
    writer = changelog.ChangeLogWriter(open_storage(StorageConfig(url=str(tmp_path))), "cl.parquet")
    for i in range(50):
        types = {"id": parse_mysql_type("bigint"), "v": parse_mysql_type("varchar(8)")}  # a fresh mapping each event
        writer.add(RowChange(Op.INSERT, "db", "t", None, {"id": i, "v": "x"}, ("id",), types, 100 + i,
                             SourcePosition("t", 0, i)))
    writer.close()
    assert compiled == [2] and writer.rows == 50


def test_a_schema_read_back_from_the_side_output_keeps_an_unknown_decimal_unknown() -> None:
    """TiCDC's Canal-JSON without ``_tidb`` carries ``decimal`` without precision: the side output
    stores it as ``decimal``, which must not read back as MySQL's DECIMAL(10, 0) (a table made
    from those rows would refuse -5190.44; issue 34, item 7)."""
    from cdc_codecs.canal_json import canal_type

    types = {"id": parse_mysql_type("bigint"), "amount": canal_type("decimal"), "price": parse_mysql_type("decimal(12,2)"),
             "plain": parse_mysql_type("decimal")}
    keys, back = decode_schema(encode_schema(("id",), types))
    assert keys == ("id",) and back == types
    assert back["amount"].kind is TypeKind.DECIMAL and back["amount"].precision is None
    assert back["plain"].precision == 10
