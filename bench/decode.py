"""The decode stage's CPU per message against a plain parse of the same messages, by stage.

``python -m bench decode`` (seconds, in process): per protocol, a generated workload of N
messages (bench/codecs.py's corpus, encoded the way the upstream does, over bench apply's key
space: N / 20 keys a table, so a third of the changes are updates) is written as one raw
segment of the archive, then timed in CPU time (``time.process_time``, this process only):

- parse: the plain parse of the same messages (``orjson.loads`` of each JSON document; the
  key too for Debezium) -- the reference, what merely reading them costs;
- stage: ``decode_segments``, the function a Spark decode task runs: read the raw segment,
  decode, write the change log (Parquet) and the side output; and the same with every message
  on the per-change path (``column_wise=False``, what the stage was before issue 37);
- and the stage cut up, each part timed alone on the same messages: raw read (the segment's
  messages as ``RawMessage``s), decoder (``decoder.decode`` + the clock), change-log writer
  (every change's rows written) of which images (``change`` bytes), key bytes (key effects,
  ``key_bytes``, ``key_hash``) and the rest (rows, sort, Parquet). A protocol with a column-wise
  path (``spark.decode.batch``) prints that path's own split beside it.

Rounds are interleaved (parse, stage, parts, parse, ...) and the figures are medians, in
microseconds a message. ``decode vs parse`` is the stage over the parse: issue 37's target is
<= 3x for Canal-JSON.
"""

from __future__ import annotations

import argparse
import gc
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from bench.codecs import bare_parser, corpus
from cdc_codecs import RowChange
from spark.archive import layout
from spark.archive.land import open_segment_writer, segment_table
from spark.archive.manifest import SegmentRef
from spark.archive.storage import open_storage
from spark.config import PipelineConfig
from spark.decode import changelog
from spark.decode.side_output import DecoderState
from spark.core.keys import change_effects, key_bytes, key_hash, table_seed

JSON_PROTOCOLS = ("canal-json", "canal", "cloudcanal-canal-json", "cloudcanal-json", "simple", "debezium-mysql")
DEFAULT_PROTOCOLS = ("canal-json", "canal", "simple", "debezium-mysql")
TOPIC = "cdc"


def _config(root: Path, protocol: str) -> PipelineConfig:
    return PipelineConfig.from_mapping({
        "name": "bench", "kafka": {"bootstrap_servers": "unused:9092"},
        "topics": [{"name": TOPIC, "protocol": protocol}], "storage": {"url": str(root)},
    }, f"bench:{root}")


def write_segment(root: Path, protocol: str, messages: list[tuple[bytes | None, bytes | None]]) -> tuple[PipelineConfig, SegmentRef]:
    """The messages as one raw segment of partition 0, laid out as landing does."""
    config = _config(root, protocol)
    storage = open_storage(config.storage)
    n = len(messages)
    path = layout.segment_path(config.name, TOPIC, 0, 0, n)
    out, writer = open_segment_writer(storage, path)
    writer.write_table(segment_table(TOPIC, 0, list(range(n)), [0] * n, [0] * n, [k for k, _ in messages],
                                     [v for _, v in messages], [None] * n))
    writer.close()
    out.close()
    return config, SegmentRef(path, 0, n)


def _cpu(fn: Callable[[], Any]) -> tuple[float, Any]:
    gc.collect()
    start = time.process_time()
    result = fn()
    return time.process_time() - start, result


class Subject:
    """One protocol's segment and the timed parts of decoding it."""

    def __init__(self, root: Path, protocol: str, messages: list[tuple[bytes | None, bytes | None]]) -> None:
        self.protocol, self.messages = protocol, messages
        self.root = root
        self.config, self.segment = write_segment(root, protocol, messages)
        self.storage = open_storage(self.config.storage)
        self.parse = bare_parser(protocol, {})
        self.runs = 0

    def time_parse(self) -> float:
        parse, messages = self.parse, self.messages

        def run() -> None:
            for k, v in messages:
                parse(k, v)
        return _cpu(run)[0]

    def time_stage(self, times: dict[str, float] | None = None, column_wise: bool = True) -> float:
        """``decode_segments`` over the segment into a fresh change-log directory (the task's own work)."""
        shutil.rmtree(self.root / "bench" / "changelog", ignore_errors=True)
        task = changelog.ChangeLogTask(self.config, TOPIC, 0, (self.segment,), DecoderState())
        return _cpu(lambda: changelog.decode_segments(task, times=times, column_wise=column_wise))[0]

    def time_parts(self) -> dict[str, float]:
        """The per-change path cut up: each part timed alone over the same messages."""
        with changelog.no_cyclic_gc():
            raw_s, messages = _cpu(lambda: list(changelog.raw_messages(self.storage, TOPIC, 0, self.segment)))
            decoder, clock = changelog.segment_decoder(self.config.topics[0], DecoderState())

            def decode() -> list[RowChange]:
                changes = []
                for msg in messages:
                    try:
                        decoded, _ = clock.stamp(decoder.decode(msg))
                    except changelog.DecodeError:
                        continue
                    changes += [e for e in decoded if isinstance(e, RowChange)]
                return changes
            decoder_s, changes = _cpu(decode)
            out = self.root / "parts"
            shutil.rmtree(out, ignore_errors=True)
            writer = changelog.ChangeLogWriter(self.storage, "parts/x.parquet")

            def write() -> None:
                for c in changes:
                    writer.add(c)
                writer.close()
            writer_s, _ = _cpu(write)
            encoders = writer._encoders | {}

            def images() -> None:
                # The ``change`` bytes of every effect, as ``add`` makes them (its encoder cache warm).
                for c in changes:
                    types = c.column_types
                    encode = changelog.encode_effect if types is None else encoders.get(
                        writer._schema(c), changelog.encode_effect)
                    for key, deletes in change_effects(c):
                        if deletes:
                            changelog.encode_effect(changelog.Op.DELETE, dict(zip(c.key_columns, key)) if c.key_columns
                                                    else dict(key))
                        else:
                            encode(c.op, c.after)
            images_s, _ = _cpu(images)

            def keys() -> None:
                for c in changes:
                    seed = table_seed(c.database, c.table)
                    for key, _ in change_effects(c):
                        key_hash(key_bytes(key), seed)
            keys_s, _ = _cpu(keys)
        return {"raw read": raw_s, "decoder": decoder_s, "writer": writer_s, "images": images_s, "key bytes": keys_s,
                "rows, sort, Parquet": max(0.0, writer_s - images_s - keys_s)}


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench decode", description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000, help="generated events per protocol (~messages)")
    parser.add_argument("--protocols", default=",".join(DEFAULT_PROTOCOLS),
                        help=f"comma-separated, in order (JSON protocols: {', '.join(JSON_PROTOCOLS)})")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds; medians printed")
    parser.add_argument("--key-space", type=int, default=0,
                        help="keys a table (default: bench apply's, messages / 20; 100000 gives mostly inserts)")
    args = parser.parse_args(list(argv or []))
    protocols = [p for p in args.protocols.split(",") if p]
    print(f"decode stage vs plain parse, CPU us a message (process_time, in process), ~{args.messages:,} generated "
          f"events per protocol, {args.key_space or max(1000, args.messages // 20):,} keys a table, median of "
          f"{args.rounds} interleaved rounds; load {_load()}", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="bench-decode-"))
    try:
        # The key space of bench apply's archive (events / 20): a third of the changes are updates.
        key_space = args.key_space or max(1000, args.messages // 20)
        subjects = [Subject(tmp / p, p, corpus(p, {}, args.messages, key_space=key_space)) for p in protocols]
        parse: dict[str, list[float]] = {p: [] for p in protocols}
        stage: dict[str, list[float]] = {p: [] for p in protocols}
        per_change: dict[str, list[float]] = {p: [] for p in protocols}
        parts: dict[str, list[dict[str, float]]] = {p: [] for p in protocols}
        batch: dict[str, list[dict[str, float]]] = {p: [] for p in protocols}
        for _ in range(args.rounds):
            for s in subjects:
                parse[s.protocol].append(s.time_parse())
                stage[s.protocol].append(s.time_stage())
                per_change[s.protocol].append(s.time_stage(column_wise=False))
                parts[s.protocol].append(s.time_parts())
                times: dict[str, float] = {}
                s.time_stage(times)
                if "parse + check" in times:  # the column-wise path ran (TiCDC's Canal-JSON)
                    batch[s.protocol].append(times)
        for s in subjects:
            p, n = s.protocol, len(s.messages)

            def us(seconds: float, n: int = n) -> float:
                return seconds / n * 1e6
            median_parts = {k: statistics.median(r[k] for r in parts[p]) for k in parts[p][0]}
            ratio = statistics.median(stage[p]) / statistics.median(parse[p])
            print(f"{p:24} {n:>9,} messages: parse {us(statistics.median(parse[p])):6.2f}  decode stage "
                  f"{us(statistics.median(stage[p])):6.2f}  decode vs parse: {ratio:.2f}x")
            print(f"{'':24}   the stage with every message on the per-change path: {us(statistics.median(per_change[p])):.2f} "
                  f"= {statistics.median(per_change[p]) / statistics.median(parse[p]):.2f}x the parse")
            print(f"{'':24}   per-change path, each part alone: " + ", ".join(
                f"{k} {us(v):.2f}" for k, v in median_parts.items()))
            if batch[p]:
                keys = list(dict.fromkeys(k for r in batch[p] for k in r))
                print(f"{'':24}   column-wise path, inside the stage: " + ", ".join(
                    f"{k} {us(statistics.median(r.get(k, 0.0) for r in batch[p])):.2f}" for k in keys))
        print(f"load at the end: {_load()}", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def _load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def archive_stage_vs_parse(archive: Path, run_dir: Path, protocol: str = "canal-json") -> dict[str, float]:
    """The decode stage over a landed bench archive (``bench.archive``), in this process, against
    ``orjson.loads`` of the same messages: CPU seconds of each and the messages. The stage is what the
    apply job's decode tasks run (``decode_segments``, a task per segment of a protocol whose
    segments carry no state), into a hard-linked clone of the archive."""
    import pyarrow.parquet as pq

    from bench.archive import clone_archive

    clone_archive(archive, run_dir)
    tasks = archive_tasks(run_dir, protocol)
    values = [pq.read_table(run_dir / t.segments[0].path, columns=["value"]).column("value").to_pylist() for t in tasks]
    parse = bare_parser(protocol, {})

    def parse_all() -> None:
        for chunk in values:
            for v in chunk:
                parse(None, v)
    parse_s, _ = _cpu(parse_all)
    stage_s, _ = _cpu(lambda: [changelog.decode_segments(t) for t in tasks])
    shutil.rmtree(run_dir, ignore_errors=True)
    return {"messages": sum(len(c) for c in values), "parse_s": parse_s, "stage_s": stage_s}


def archive_tasks(run_dir: Path, protocol: str) -> list[changelog.ChangeLogTask]:
    """The apply job's decode tasks over a landed bench archive at ``run_dir``: one per raw segment
    (a protocol whose segments carry no state)."""
    from bench.archive import TOPIC as BENCH_TOPIC
    from bench.archive import pipeline_config, segment_paths

    config = pipeline_config(run_dir, protocol=protocol)
    return [changelog.ChangeLogTask(config, BENCH_TOPIC, partition,
                                    (SegmentRef(str(path.relative_to(run_dir)), *map(int, path.stem.split("-"))),), DecoderState())
            for partition, paths in segment_paths(run_dir) for path in paths]


def stage_scale_out(archive: Path, run_dir: Path, protocol: str = "canal-json") -> dict[str, float]:
    """The host's own scale-out for the decode stage's work: its tasks (``decode_segments``, a task
    per segment, as ``archive_stage_vs_parse`` builds them) in one process confined to one core,
    against the same tasks dealt between two processes, one on each core, started together: the
    wall seconds of each (``one_s``, ``two_s``). Two processes sharing nothing but the machine --
    its caches, its memory's bandwidth, its neighbours -- show what two cores give this work here:
    the most the job's one core -> two can reach for the part Spark runs in parallel."""
    import multiprocessing
    import os

    from bench.archive import clone_archive

    cores = sorted(os.sched_getaffinity(0))[:2]
    if len(cores) < 2:
        raise RuntimeError(f"two cores needed for the host's scale-out, this process may use {len(cores)}")
    fork = multiprocessing.get_context("fork")
    seconds = {}
    for name, deal in (("one_s", ((cores[0], 0, 1),)), ("two_s", ((cores[0], 0, 2), (cores[1], 1, 2)))):
        clone_archive(archive, run_dir)  # the change logs each run writes are new files
        tasks = archive_tasks(run_dir, protocol)
        start = fork.Barrier(len(deal))
        done: Any = fork.Queue()
        workers = [fork.Process(target=_decode_share, args=(tasks[first::step], core, start, done)) for core, first, step in deal]
        for w in workers:
            w.start()
        shares = [done.get() for _ in workers]
        for w in workers:
            w.join()
        if sum(n for _, n in shares) != len(tasks) or any(w.exitcode for w in workers):
            raise RuntimeError(f"the host's scale-out decoded {sum(n for _, n in shares)} of {len(tasks)} tasks")
        seconds[name] = max(s for s, _ in shares)
        shutil.rmtree(run_dir, ignore_errors=True)
    return seconds


def _decode_share(tasks: list[Any], core: int, start: Any, done: Any) -> None:
    """One process's share of ``stage_scale_out``: confined to ``core``, timed from the common start."""
    import os

    os.sched_setaffinity(0, {core})
    start.wait()
    began = time.perf_counter()
    for task in tasks:
        changelog.decode_segments(task)
    done.put((time.perf_counter() - began, len(tasks)))
