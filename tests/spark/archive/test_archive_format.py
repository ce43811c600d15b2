"""The archive is documented data: docs/archive.md, checked against the committed fixture archive.

``tests/fixtures/archive-v<N>`` (written by ``tests/fixtures/make_archive.py`` through tidelake's
own code) is read here twice:

- with plain pyarrow, orjson and msgspec, against the columns and fields docs/archive.md lists
  (its tables are parsed, and its msgspec reader of ``change`` is run), so the documentation and
  the format cannot drift apart silently;
- by tidelake, from a copy holding only the source of truth and the change logs: the tables it
  builds must hold, at each published W, what the reference model applies from the upstream
  history, the derived files of the fixture's version must be read and not derived again, and the
  checkpoints, published watermarks and quarantine must come out as the fixture has them.

A change of format fails here until it is deliberate: a new fixture next to the old one, and
docs/archive.md saying what changed.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import shutil
import zlib
from pathlib import Path
from typing import Any

import msgspec
import orjson
import pyarrow.parquet as pq
import pytest

from cdc_codecs import DECODER_VERSION
from tests.model.oracle import BinlogOracle, Oracle
from spark.archive import manifest as manifest_module
from spark.archive.checkpoint import Checkpoint, checkpoint_path
from spark.commit.apply import apply_interval
from spark.decode import side_output
from spark.decode.changelog import CHANGE_LOG_FORMAT, decode_effect, decoder_version
from spark.commit.published import published_watermarks, read_published
from spark.query.read import read_pipeline
from spark.archive.storage import open_storage
from tests.fixtures import make_archive

from tests.spark.archives import normalise, oracle_rows

REPO = Path(__file__).resolve().parents[3]
DOC = REPO / "docs" / "archive.md"
FIXTURES = sorted((REPO / "tests" / "fixtures").glob("archive-v*"), key=lambda p: int(p.name.rsplit("v", 1)[1]))
CURRENT = REPO / "tests" / "fixtures" / f"archive-v{CHANGE_LOG_FORMAT}"

# Which files of an archive each section of docs/archive.md describes (every file must be in one).
SECTIONS = {
    "Raw segment": "*/segments/*/*/*.parquet",
    "Manifest": "*/manifests/*.json",
    "Offset plan": "*/plans/*.json",
    "Change log": "*/changelog/*/*/*/*.parquet",
    "Side output": "*/changelog/*/*/*/*.json",
    "Quarantine record": "*/quarantine/*/*/*.json",
    "Checkpoint": "*/checkpoints/*.json",
    "Published watermark": "*/published/*.json",
    "Lease": "*/lease/*.json",
    "Reports": "*/reports/*/apply.json",
    "Topic clock": "*/topics/*.json",
}
SOURCE_OF_TRUTH = ("segments", "manifests")


# ---------------------------------------------------------------- what docs/archive.md says


def _section(title: str) -> str:
    text = DOC.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)]


def documented(title: str) -> list[tuple[str, str]]:
    """(name, type) of every row of the section's first column or field table."""
    rows = []
    table = False
    for line in _section(title).splitlines():
        if line.startswith("| column |") or line.startswith("| field |"):
            table = True
        elif table and line.startswith("|"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            if not set(cells[0]) <= {"-"}:
                rows.append((cells[0].strip("`"), cells[1].strip("`")))
        elif table:
            break
    assert rows, f"docs/archive.md, section {title!r}, has no column or field table"
    return rows


_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null", dict: "object",
               list: "array"}


def _json_type(value: Any) -> str:
    return _JSON_TYPES[type(value)]


def _observe(value: Any, path: str, declared: set[str], out: dict[str, set[str]]) -> None:
    """The JSON type at every path the documentation declares (``a.b``, ``a[]``, ``a{}``); objects
    and arrays it declares nothing inside are opaque."""
    if path and not path.endswith("[]"):  # an array's items: described by its row and theirs
        out.setdefault(path, set()).add(_json_type(value))
    inside = [d for d in declared if d.startswith(path)] if path else declared
    if isinstance(value, dict):
        if f"{path}{{}}" in declared:
            for v in value.values():
                _observe(v, f"{path}{{}}", declared, out)
        elif any(d.startswith(f"{path}.") for d in inside) or not path:
            for k, v in value.items():
                _observe(v, f"{path}.{k}" if path else k, declared, out)
    elif isinstance(value, list) and any(d.startswith(f"{path}[]") for d in inside):
        for item in value:
            _observe(item, f"{path}[]", declared, out)


def check_json(title: str, docs: list[Any], where: str) -> None:
    """Every field of ``docs`` is documented with its type; every documented top-level field is there."""
    fields = {}
    for name, kind in documented(title):
        optional = kind.endswith("(optional)")
        types = {t.strip() for t in kind.removesuffix("(optional)").split(" or ")}
        if "number" in types:
            types.add("integer")  # a JSON number may be written without a fraction
        fields[name] = (types, optional)
    seen: dict[str, set[str]] = {}
    for doc in docs:
        _observe(doc, "", set(fields), seen)
    for path, types in seen.items():
        assert path in fields, f"{where}: field {path!r} is not in docs/archive.md, section {title!r}"
        assert types <= fields[path][0], f"{where}: {path} is {types}, docs/archive.md says {fields[path][0]}"
    missing = [n for n, (_, optional) in fields.items() if not optional and not re.search(r"[.\[{]", n.lstrip("[]."))
               and n.lstrip("[].") not in {p.lstrip("[].") for p in seen}]
    assert not missing, f"{where}: docs/archive.md, section {title!r}, lists {missing}, which no file has"


def doc_change_decoder() -> msgspec.msgpack.Decoder:
    """The msgspec reader of the ``change`` column as docs/archive.md prints it."""
    blocks = re.findall(r"```python\n(.*?)```", _section("Change log"), re.S)
    code = next(b for b in blocks if "def ext(" in b)
    scope: dict[str, Any] = {}
    exec(compile(code.replace("op, image = decoder.decode(change)", ""), str(DOC), "exec"), scope)  # noqa: S102
    return scope["decoder"]


# ---------------------------------------------------------------- (a) plain readers, against the documentation


def _files(root: Path) -> dict[str, list[Path]]:
    return {title: sorted(root.glob(pattern)) for title, pattern in SECTIONS.items()}


@pytest.mark.parametrize("root", FIXTURES, ids=lambda p: p.name)
def test_every_file_of_the_fixture_is_documented(root: Path) -> None:
    everything = {p for p in root.rglob("*") if p.is_file()}
    described = {p for paths in _files(root).values() for p in paths}
    assert everything - described == set(), "files docs/archive.md does not describe"
    assert all(_files(root).values()), "every documented kind of file is in the fixture"
    assert sum(p.stat().st_size for p in everything) < 200_000


def test_the_current_formats_have_a_fixture() -> None:
    """A format change is a deliberate step: a new fixture (make_archive.py) and docs/archive.md."""
    assert CURRENT.is_dir(), (f"the change-log format is {CHANGE_LOG_FORMAT} but no fixture holds it: run "
                              f"tests/fixtures/make_archive.py and describe the change in docs/archive.md")
    versions = {p.name for p in CURRENT.glob("*/changelog/*")}
    assert {v.rsplit("-f", 1)[1] for v in versions} == {str(CHANGE_LOG_FORMAT)}
    for path in CURRENT.glob("*/changelog/*/*/*/*.json"):
        assert orjson.loads(path.read_bytes())["format"] == side_output.FORMAT
    for path in CURRENT.glob("*/manifests/*.json"):
        assert orjson.loads(path.read_bytes())["format"] == manifest_module.FORMAT
    versions_table = _section("Versions")
    assert f"`{manifest_module.FORMAT}` |" in versions_table.split("| manifest |")[1].split("\n")[0]
    assert f", `{CHANGE_LOG_FORMAT}` |" in versions_table.split("| change log |")[1].split("\n")[0]
    assert f", `{DECODER_VERSION}` |" in versions_table.split("| decoders |")[1].split("\n")[0]
    assert f"`{side_output.FORMAT}` |" in versions_table.split("| side output |")[1].split("\n")[0]


@pytest.mark.parametrize("title", ["Raw segment", "Change log"])
def test_parquet_columns_are_the_documented_ones(title: str) -> None:
    for path in _files(CURRENT)[title]:
        schema = pq.read_schema(path)
        assert [(f.name, str(f.type)) for f in schema] == documented(title), path


@pytest.mark.parametrize("title", [t for t in SECTIONS if SECTIONS[t].endswith(".json")])
def test_json_fields_are_the_documented_ones(title: str) -> None:
    paths = _files(CURRENT)[title]
    check_json(title, [orjson.loads(p.read_bytes()) for p in paths], f"{CURRENT.name}/{SECTIONS[title]}")


def test_paths_are_named_as_documented() -> None:
    digits = re.compile(r"^\d{20}-\d{20}\.(parquet|json)$")
    instant = r"\d{8}T\d{6}\.\d{6}Z"
    for title in ("Raw segment", "Change log", "Side output"):
        for path in _files(CURRENT)[title]:
            assert digits.match(path.name), path
    for title in ("Manifest", "Offset plan", "Checkpoint"):
        for path in _files(CURRENT)[title]:
            assert re.fullmatch(rf"{instant}_{instant}\.json", path.name), path
    for path in _files(CURRENT)["Published watermark"]:
        assert orjson.loads(path.read_bytes())["watermark"] == int(path.stem) and len(path.stem) == 20
    for path in _files(CURRENT)["Lease"]:
        assert re.fullmatch(r"\d{12}\.json", path.name), path


def test_manifests_list_every_raw_segment_as_it_is() -> None:
    for pipeline in make_archive.PIPELINES:
        listed = {}
        for path in sorted(CURRENT.glob(f"{pipeline}/manifests/*.json")):
            for part in orjson.loads(path.read_bytes())["partitions"]:
                for s in part["segments"]:
                    listed[s["path"]] = s
        on_disk = {str(p.relative_to(CURRENT)): p for p in CURRENT.glob(f"{pipeline}/segments/*/*/*.parquet")}
        assert set(listed) == set(on_disk)
        for rel, s in listed.items():
            rows = pq.read_table(on_disk[rel])
            assert (s["messages"], s["bytes"]) == (rows.num_rows, on_disk[rel].stat().st_size)
            assert rows.column("offset").to_pylist() == list(range(s["start"], s["end"]))


def test_change_logs_read_with_plain_tools() -> None:
    """Every row's ``change`` decodes with the documentation's reader to what tidelake reads; its
    ``key_hash`` and ``schema_id`` are computed as documented; the side output matches its file."""
    reader = doc_change_decoder()
    codes: set[int] = set()
    hook = msgspec.msgpack.Decoder(ext_hook=lambda code, data: codes.add(code))
    for path in _files(CURRENT)["Change log"]:
        side = orjson.loads(path.with_suffix(".json").read_bytes())
        topic, partition = path.parent.parent.name, int(path.parent.name)
        start, end = (int(n) for n in path.stem.split("-"))
        assert (side["decoder"], side["topic"], side["partition"], side["start"], side["end"]) == \
            (path.parent.parent.parent.name, topic, partition, start, end)
        schemas = {int(k): orjson.dumps(v) for k, v in side["schemas"].items()}
        rows = pq.read_table(path).to_pylist()
        assert len(rows) == side["rows"]
        for row in rows:
            op, image = reader.decode(row["change"])
            assert (op, image) == tuple(decode_effect(row["change"])), row
            hook.decode(row["change"])
            seed = zlib.crc32(f"{len(row['database'])}:{row['database']}{len(row['table'])}:{row['table']}".encode())
            assert row["key_hash"] == zlib.crc32(row["key"], seed)
            blob = schemas[row["schema_id"]]
            assert row["schema_id"] == int.from_bytes(hashlib.blake2b(blob, digest_size=8).digest(), "little", signed=True)
            assert start <= row["offset"] < end and row["topic"] == topic and row["partition"] == partition
    assert {1, 2, 3, 4, 9, 10, 11} <= codes  # the fixture exercises these layouts of the table


# ---------------------------------------------------------------- (b) tidelake reads the committed archive


def _expected(pipeline: str) -> list[tuple[int, dict]]:
    """(W, rows per table) after each interval, from the reference model over the upstream history."""
    _, protocol, _ = make_archive.PIPELINES[pipeline]
    oracle = Oracle() if pipeline == "shop" else BinlogOracle()
    out = []
    for i in range(len(make_archive.INTERVALS)):
        oracle.add(make_archive.upstream(pipeline, i))
        w = oracle.cut([("gen", 0)])
        out.append((w, {name: oracle_rows(oracle, name) for name in oracle.tables}))
    return out


def _rows(rows: list[dict]) -> list[dict]:
    out = []
    for r in normalise(rows):
        out.append({k: (v.astimezone(dt.timezone.utc) if isinstance(v, dt.datetime) and v.tzinfo else v) for k, v in r.items()})
    return out


def _copy_source_and_change_logs(fixture: Path, to: Path) -> None:
    for kept in (*SOURCE_OF_TRUTH, "changelog"):
        for path in fixture.glob(f"*/{kept}"):
            shutil.copytree(path, to / path.relative_to(fixture))


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.name)
def test_tidelake_builds_the_tables_of_the_committed_archive(tmp_path: Path, fixture: Path) -> None:
    root = tmp_path / "archive"
    _copy_source_and_change_logs(fixture, root)
    derived_before = {p: p.read_bytes() for p in root.glob("*/changelog/*/*/*/*")}
    for pipeline, (_, protocol, _) in make_archive.PIPELINES.items():
        config = make_archive.fixture_config(root, pipeline)
        storage = open_storage(config.storage)
        apply_interval(config, *make_archive.INTERVALS[-1])  # builds the tables from the archive
        expected = _expected(pipeline)
        assert published_watermarks(storage, pipeline) == [w for w, _ in expected]
        assert published_watermarks(storage, pipeline) == [int(p.stem) for p in sorted(fixture.glob(f"{pipeline}/published/*"))]
        for w, tables in expected:
            at, read = read_pipeline(config, w)
            assert at == w
            assert {name: _rows(t.to_pylist()) for name, t in read.items()} == {n: _rows(r) for n, r in tables.items()}
        # The run derives the state the fixture recorded: checkpoints, published views, quarantine.
        for start, end in make_archive.INTERVALS:
            path = checkpoint_path(pipeline, start, end)
            assert Checkpoint.from_json((fixture / path).read_bytes()) == Checkpoint.from_json(storage.read(path))
        for w, _ in expected:
            ours, theirs = read_published(storage, pipeline, w), orjson.loads((fixture / f"{pipeline}/published/{w:020d}.json").read_bytes())
            assert [(t["database"], t["table"]) for t in ours["tables"]] == [(t["database"], t["table"]) for t in theirs["tables"]]
            assert ours["interval"] == theirs["interval"]
        quarantined = sorted(p.relative_to(root) for p in root.glob(f"{pipeline}/quarantine/*/*/*.json"))
        assert quarantined == sorted(p.relative_to(fixture) for p in fixture.glob(f"{pipeline}/quarantine/*/*/*.json"))
        for rel in quarantined:
            assert orjson.loads((root / rel).read_bytes()) == orjson.loads((fixture / rel).read_bytes())
    # The fixture's derived files were read, not derived again (nor touched).
    assert {p: p.read_bytes() for p in root.glob("*/changelog/*/*/*/*") if p in derived_before} == derived_before
    versions = {p.name for p in fixture.glob("*/changelog/*")}
    current = {decoder_version(protocol) for _, protocol, _ in make_archive.PIPELINES.values()}
    added = {p.relative_to(root) for p in root.glob("*/changelog/*/*/*/*")} - {p.relative_to(root) for p in derived_before}
    if versions == current:
        assert added == set(), "the fixture's change logs are of this version: they are read, not derived again"
    else:  # an older format or decoder: derived again from the raw segments, next to the old ones
        assert added and {p.parts[2] for p in added} == current


def test_this_tidelake_writes_the_committed_derived_files(tmp_path: Path) -> None:
    """From the fixture's raw segments alone, the current code derives its change logs and side outputs
    row for row and field for field, and every JSON file it writes is as docs/archive.md says: a
    change in what tidelake writes fails here until the fixture and the documentation follow it."""
    root = tmp_path / "archive"
    for kept in SOURCE_OF_TRUTH:
        for path in CURRENT.glob(f"*/{kept}"):
            shutil.copytree(path, root / path.relative_to(CURRENT))
    for pipeline in make_archive.PIPELINES:
        apply_interval(make_archive.fixture_config(root, pipeline), *make_archive.INTERVALS[-1])
    for pipeline, (_, protocol, _) in make_archive.PIPELINES.items():
        for path in CURRENT.glob(f"{pipeline}/changelog/*/*/*/*"):
            rel = path.relative_to(CURRENT).parts
            ours = root.joinpath(rel[0], rel[1], decoder_version(protocol), *rel[3:])
            if path.suffix == ".parquet":
                assert pq.read_table(ours).equals(pq.read_table(path)), ours
            else:
                assert {**orjson.loads(ours.read_bytes()), "decoder": None} == {**orjson.loads(path.read_bytes()), "decoder": None}
    for title, files in _files(root).items():
        if SECTIONS[title].endswith(".json") and files:  # plans are written by landing only
            check_json(title, [orjson.loads(p.read_bytes()) for p in files], f"written by this tidelake: {SECTIONS[title]}")
