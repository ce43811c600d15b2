"""Apply: tables at every published watermark equal the reference model, for every TiDB protocol."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from cdc_codecs import PROTOCOLS
from spark.commit.apply import apply_interval
from spark.query.read import published_watermarks, read_pipeline

from .archives import HOUR, T0, normalise, run_history

pytestmark = pytest.mark.slow  # whole intervals, Spark or services: make test-fast leaves it out (docs/testing.md)

TIDB = sorted(p for p, s in PROTOCOLS.items() if s.has_commit_ts)


@pytest.mark.parametrize("protocol", TIDB)
def test_every_published_watermark_matches_the_oracle(tmp_path: Path, protocol: str) -> None:
    config, checks = run_history(tmp_path, protocol, seed=3, intervals=3, partitions=3, dup_rate=0.05)
    for i, w, expected in checks:
        result = apply_interval(config, T0 + i * HOUR, T0 + (i + 1) * HOUR)
        assert result.watermark == w
    assert published_watermarks(config) == sorted({w for _, w, _ in checks if w})
    for i, w, expected in checks:
        if not w:
            continue
        got_w, tables = read_pipeline(config, w)
        assert got_w == w
        got = {name: normalise(t.to_pylist()) for name, t in tables.items()}
        want = {name: rows for name, rows in expected.items() if name in got or rows}
        assert got == want, (protocol, w)


@pytest.mark.parametrize("write_mode", ["merge-on-read", "copy-on-write"])
def test_the_write_mode_decides_delete_files_or_rewrites_and_is_recorded_on_every_table(tmp_path: Path, write_mode: str) -> None:
    import dataclasses

    from spark.tables import catalog as cat
    from spark.tables.files import live_files

    config, checks = run_history(tmp_path, "canal-json", seed=3, intervals=3, partitions=2)
    # No file small (a one-byte target size): merge-on-read merges none into what it writes (test_small_file_merges).
    config = dataclasses.replace(config, layout=dataclasses.replace(config.layout, write_mode=write_mode),
                                 maintenance=dataclasses.replace(config.maintenance, target_file_size=1))
    for i, w, expected in checks:
        assert apply_interval(config, T0 + i * HOUR, T0 + (i + 1) * HOUR).watermark == w
        if not w:
            continue
        got = {name: normalise(t.to_pylist()) for name, t in read_pipeline(config, w)[1].items()}
        assert got == {name: rows for name, rows in expected.items() if name in got or rows}
    tables = cat.pipeline_tables(cat.open_catalog(config), config)
    for table in tables:
        assert {k: table.properties.get(k) for k in ("write.update.mode", "write.delete.mode", "write.merge.mode")} == dict.fromkeys(
            ("write.update.mode", "write.delete.mode", "write.merge.mode"), write_mode)
        assert table.properties.get("write.delete.granularity") == "file"
    deletes = [d for t in tables for d in live_files(t.io, t.current_snapshot()).delete_files]
    replaced = sum(int(s.summary.get("deleted-data-files") or 0) for t in tables for s in t.metadata.snapshots if s.summary)
    if write_mode == "merge-on-read":
        assert deletes and replaced == 0  # updates and deletes named rows; no data file was rewritten
    else:
        assert not deletes and replaced > 0


def test_a_pickle_planted_in_a_change_log_row_fails_the_run_naming_where_and_never_runs(tmp_path: Path) -> None:
    """The archive is data: a change-log value that is a pickle (what format 4 stored) is refused."""
    import pickle

    import msgspec
    import pyarrow.parquet as pq

    from cdc_codecs import get_encoder
    from spark.demo.workload import Workload, WorkloadSpec
    from spark.decode.effect import CorruptChangeValue
    from spark.archive.storage import open_storage

    from .archives import ArchiveWriter, make_config

    class Boom:
        def __reduce__(self):  # noqa: ANN204
            return (exec, ("raise SystemExit('the pickle ran')",))

    config = make_config(tmp_path, "canal-json")
    storage = open_storage(config.storage)
    records = get_encoder("canal-json").encode_all(list(Workload(WorkloadSpec(tables=1, events=20, seed=3)).events()), 1)
    ArchiveWriter(config, storage, {"cdc": 1}).interval(T0, T0 + HOUR, [("cdc", r) for r in records])

    def crash_after_decode(step: str) -> None:
        if step == "decoded":
            raise RuntimeError("crash")

    with pytest.raises(RuntimeError, match="crash"):
        apply_interval(config, T0, T0 + HOUR, fault=crash_after_decode)
    (path,) = [p for p in storage.list(f"{config.name}/") if p.endswith(".parquet") and "/changelog/" in p]
    table = pq.read_table(storage.arrow_fs.open_input_file(storage.arrow_path(path)))
    planted = msgspec.msgpack.encode(["insert", {"id": msgspec.msgpack.Ext(6, pickle.dumps(Boom()))}])
    table = table.set_column(table.schema.get_field_index("change"), "change", pa.array([planted] * table.num_rows, pa.binary()))
    storage.delete(path)
    with storage.open_output(path) as out:
        pq.write_table(table, out)
    with pytest.raises(CorruptChangeValue, match=r"change log of .* at cdc/0@\d+: a pickled value .* is never unpickled"):
        apply_interval(config, T0, T0 + HOUR)
