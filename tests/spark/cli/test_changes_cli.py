"""``tidelake changes``: the change feed on stdout, or as files and a manifest in a directory or the object store."""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest

from spark.query.changes import read_changes
from spark.cli.changes import write_changes
from spark.cli.main import main
from spark.config import StorageConfig

from tests.spark.query.test_changes import Lake

pytestmark = pytest.mark.slow  # whole intervals, Spark or services: make test-fast leaves it out (docs/testing.md)

ITEMS = [("id", "int"), ("v", "varchar(8)")]


def _lake(tmp: Path) -> tuple[Lake, Path, list[int]]:
    lake = Lake(tmp, "canal-json")
    items = lake.create("items", ITEMS)
    odd = lake.create("we ird.t", ITEMS)
    lake.insert(items, id=1, v="a")
    lake.insert(items, id=2, v="b")
    lake.publish()
    lake.update(items, {"id": 1, "v": "a"}, {"id": 1, "v": "A"})
    lake.insert(odd, id=1, v="x")
    lake.publish()
    lake.delete(items, {"id": 2, "v": "b"})
    lake.publish()
    path = tmp / "pipeline.toml"
    path.write_text(f'name = "{lake.config.name}"\n[kafka]\nbootstrap_servers = "unused:9092"\n[[topics]]\nname = "cdc"\n'
                    f'protocol = "canal-json"\n[storage]\nurl = "{lake.config.storage.url}"\n')
    return lake, path, lake.ws


def test_stdout_as_a_table_json_and_csv(tmp_path: Path, capsys) -> None:
    _, config, (w1, w2, w3) = _lake(tmp_path)
    assert main(["changes", "--config", str(config), "--from", str(w1), "--to", str(w2), "-q"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "shop.items: 1 update_before, 1 update_after (1 keys read)"
    assert out[1].split() == ["_change_type", "_commit_ts", "id", "v"]
    assert [line.split()[0] for line in out[3:5]] == ["update_before", "update_after"]
    assert out[5] == "(2 rows)" and out[6].startswith("shop.we ird.t: 1 insert")
    assert main(["changes", "--config", str(config), "--from", str(w1), "--format", "json", "-q"]) == 0
    lines = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(d["database"], d["table"], d["row"]["_change_type"], d["row"]["id"]) for d in lines] == [
        ("shop", "items", "update_before", 1), ("shop", "items", "update_after", 1), ("shop", "items", "delete", 2),
        ("shop", "we ird.t", "insert", 1)]
    assert main(["changes", "--config", str(config), "--from", str(w2), "--to", str(w3), "--table", "shop.items",
                 "--format", "csv", "-q"]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == [f'"delete",{w3 - (1 << 18)},2,"b"']
    # A time: the greatest published W at or before it.
    at = dt.datetime.fromtimestamp((w2 >> 18) / 1000, dt.UTC).isoformat().replace("+00:00", "Z")
    assert main(["changes", "--config", str(config), "--from", at, "--format", "json", "-q"]) == 0
    assert [orjson.loads(line)["row"]["_change_type"] for line in capsys.readouterr().out.splitlines()] == ["delete"]


def test_out_writes_parquet_per_table_and_a_manifest(tmp_path: Path, capsys) -> None:
    lake, config, (w1, _, w3) = _lake(tmp_path)
    out = tmp_path / "feed"
    assert main(["changes", "--config", str(config), "--from", str(w1), "--out", str(out), "-q"]) == 0
    assert "2 table(s) written" in capsys.readouterr().out
    manifest = orjson.loads((out / "manifest.json").read_bytes())
    assert (manifest["from_watermark"], manifest["to_watermark"], manifest["format"]) == (w1, w3, "parquet")
    assert [(t["database"], t["table"], t["file"]) for t in manifest["tables"]] == [
        ("shop", "items", "shop/items.parquet"), ("shop", "we ird.t", "shop/we%20ird%2Et.parquet")]
    changes = read_changes(lake.config, w1, w3)
    for t in manifest["tables"]:
        assert pq.read_table(out / t["file"]).equals(changes[(t["database"], t["table"])])
        assert t["rows"] == changes.details[(t["database"], t["table"])].counts


def test_out_in_the_object_store(tmp_path: Path, s3, bucket) -> None:
    lake, _, (w1, _, w3) = _lake(tmp_path)
    changes = read_changes(lake.config, w1, w3)
    # The archive's object store: its endpoint and credentials, another prefix (here another bucket).
    config = dataclasses.replace(lake.config, storage=StorageConfig(f"s3://{bucket}/archive", s3.endpoint, None,
                                                                    s3.access_key, s3.secret_key))
    manifest = write_changes(config, changes, f"s3://{bucket}/feed/run-1", "json")
    client = s3.client()
    keys = sorted(o["Key"] for o in client.list_objects_v2(Bucket=bucket)["Contents"])
    assert keys == ["feed/run-1/manifest.json", "feed/run-1/shop/items.jsonl", "feed/run-1/shop/we%20ird%2Et.jsonl"]
    stored = orjson.loads(client.get_object(Bucket=bucket, Key="feed/run-1/manifest.json")["Body"].read())
    assert stored["tables"] == manifest["tables"] and stored["to_watermark"] == w3
    body = client.get_object(Bucket=bucket, Key="feed/run-1/shop/items.jsonl")["Body"].read().decode()
    assert [orjson.loads(line)["_change_type"] for line in body.splitlines()] == ["update_before", "update_after", "delete"]


@pytest.mark.parametrize(("argv", "code", "message"), [
    (["--from", "W2", "--to", "W1"], 2, "is after to "),
    (["--from", "W1", "--table", "shop.nope"], 2, "'shop.nope' is not a table of the pipeline"),
    (["--from", "W1", "--format", "parquet"], 2, "--format parquet writes files: give --out DIR"),
    (["--from", "W1", "--format", "csv"], 2, "--format csv prints one table; these changes hold 2"),
    (["--from", "yesterday"], 2, "--from"),
    (["--from", "1"], 1, "watermark 1 is not published"),
])
def test_errors_are_one_line(tmp_path: Path, capsys, argv: list[str], code: int, message: str) -> None:
    _, config, (w1, w2, _) = _lake(tmp_path)
    argv = [{"W1": str(w1), "W2": str(w2)}.get(a, a) for a in argv]
    assert main(["changes", "--config", str(config), "-q", *argv]) == code
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1, err


def test_from_0_is_before_the_first_watermark_everywhere(tmp_path: Path, capsys) -> None:
    """W1 = 0 (a first Asset event's previous_watermark) in the library, ``changes`` and ``query --changes-from``."""
    lake, config, (w1, w2, w3) = _lake(tmp_path)
    whole = read_changes(lake.config, 0, w3)
    assert {name: rows.column("_change_type").to_pylist() for name, rows in whole.items()} == {
        ("shop", "items"): ["insert"], ("shop", "we ird.t"): ["insert"]}
    assert main(["changes", "--config", str(config), "--from", "0", "--format", "json", "-q"]) == 0
    rows = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["table"], r["row"]["_change_type"], r["row"]["id"], r["row"]["v"]) for r in rows] == [
        ("items", "insert", 1, "A"), ("we ird.t", "insert", 1, "x")]
    out = tmp_path / "first"
    assert main(["changes", "--config", str(config), "--from", "0", "--out", str(out), "-q"]) == 0
    manifest = orjson.loads((out / "manifest.json").read_bytes())
    assert (manifest["from_watermark"], manifest["from_time"], manifest["to_watermark"]) == (0, None, w3)
    capsys.readouterr()
    assert main(["query", "--config", str(config), "--changes-from", "0", "--format", "json",
                 "SELECT _change_type, id, v FROM changes.shop.items"]) == 0
    assert [orjson.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")] == [
        {"_change_type": "insert", "id": 1, "v": "A"}]
    # A time before the first W is before it too.
    before = dt.datetime.fromtimestamp((w1 >> 18) / 1000 - 60, dt.UTC)
    assert read_changes(lake.config, before, w2).from_watermark == 0


def test_window_errors_echo_the_watermarks_as_typed(tmp_path: Path, capsys) -> None:
    lake, config, (w1, w2, w3) = _lake(tmp_path)
    at = dt.datetime.fromtimestamp((w3 >> 18) / 1000, dt.UTC).isoformat().replace("+00:00", "Z")
    assert main(["changes", "--config", str(config), "--from", at, "--to", str(w1), "-q"]) == 2
    err = capsys.readouterr().err
    assert f"from {at} (watermark {w3}) is after to {w1}" in err
    assert main(["query", "--config", str(config), "--at", "1969-12-31T00:00:00Z", "SELECT 1"]) != 0
    assert "at or before 1969-12-31T00:00:00Z" in capsys.readouterr().err
