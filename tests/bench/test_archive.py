"""The benchmarks' generated archives and rows: landing's layout, and seeds equal to the change events."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from bench import rows
from bench.archive import HOUR, T0, ArchiveBuilder, cached_archive, clone_archive, pipeline_config, segment_paths
from cdc_codecs import Op, RawMessage, RowChange, SourcePosition, get_decoder, get_encoder
from spark.archive.manifest import read_manifest
from spark.archive.storage import open_storage


def _records(keys: range, partitions: int) -> list:
    clock = rows.Clock()
    events = [rows.create("t", clock)] + [rows.change(Op.INSERT, "t", k, 1, clock) for k in keys]
    return get_encoder("canal-json").encode_all(events, partitions)


def test_builder_writes_landing_layout_in_chunks_and_chained_manifests(tmp_path: Path) -> None:
    config = pipeline_config(tmp_path, segment_max_messages=7)
    builder = ArchiveBuilder(config, 2)
    first, second = _records(range(30), 2), _records(range(30, 35), 2)[1:]
    builder.add(first, T0)
    m1 = builder.close_interval(T0, T0 + HOUR)
    builder.add(second, T0 + HOUR)
    m2 = builder.close_interval(T0 + HOUR, T0 + 2 * HOUR)
    storage = open_storage(config.storage)
    assert read_manifest(storage, m2.path) == m2 and m2.previous == m1.path
    for p in range(2):
        sent = [r for r in first + second if r.partition == p]
        a, b = m1.partitions[p], m2.partitions[p]
        assert (a.start, a.end, b.start, b.end) == (0, a.messages, a.messages, len(sent))
        assert all(s.messages <= 7 for s in a.segments + b.segments) and len(a.segments) == -(-a.messages // 7)
        assert [s.start for s in a.segments + b.segments][1:] == [s.end for s in a.segments + b.segments][:-1]
        values = [v for s in a.segments + b.segments for v in pq.read_table(tmp_path / s.path).column("value").to_pylist()]
        assert values == [r.value for r in sent]


def test_cached_archive_builds_once_and_clones_by_hard_link(tmp_path: Path) -> None:
    calls = []

    def build(root: Path) -> dict:
        calls.append(root)
        builder = ArchiveBuilder(pipeline_config(root), 2)
        builder.add(_records(range(10), 2), T0)
        builder.close_interval(T0, T0 + HOUR)
        return {"rows": 10}

    archive, facts = cached_archive(tmp_path, "t", {"n": 10}, build)
    again, facts_again = cached_archive(tmp_path, "t", {"n": 10}, build)
    other, _ = cached_archive(tmp_path, "t", {"n": 11}, build)
    assert (again, facts_again, facts) == (archive, {"rows": 10}, {"rows": 10}) and other != archive and len(calls) == 2
    run = clone_archive(archive, tmp_path / "run")
    (partition, paths), _ = segment_paths(run)
    assert partition == 0 and paths[0].stat().st_ino == segment_paths(archive)[0][1][0].stat().st_ino
    decoder = get_decoder("canal-json")
    decoded = [e for i, v in enumerate(pq.read_table(paths[0]).column("value").to_pylist())
               for e in decoder.decode(RawMessage(None, v, SourcePosition("cdc", 0, i))) if isinstance(e, RowChange)]
    assert decoded and all(e.after == rows.row(e.after["id"], 1) for e in decoded)


def test_seeded_arrow_rows_equal_the_change_events_rows() -> None:
    assert rows.arrow_rows(998, 1003, 4).to_pylist() == [rows.row(k, 4) for k in range(998, 1003)]
