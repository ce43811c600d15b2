"""``tidelake query --changes-from W1 [--at W2]``: each table's changes as ``changes."<database>"."<table>"``."""

from __future__ import annotations

from pathlib import Path

import pytest

from spark.query import changes as changes_module
from spark.cli.main import main
from spark.query.read import IsolatedTable
from spark.query.names import QueryError
from spark.query.sql import run_query

from tests.spark.query.test_changes import Lake

ITEMS = [("id", "int"), ("v", "varchar(8)")]


def _lake(tmp: Path) -> tuple[Lake, list[int]]:
    lake = Lake(tmp, "canal-json")
    items = lake.create("items", ITEMS)
    odd = lake.create("we ird.t", ITEMS)
    named = lake.create("x", ITEMS, database="changes")  # a database named like the catalog
    for s in (items, odd, named):
        lake.insert(s, id=1, v="a")
        lake.insert(s, id=2, v="b")
    lake.publish()
    lake.update(items, {"id": 1, "v": "a"}, {"id": 1, "v": "A"})
    lake.delete(odd, {"id": 2, "v": "b"})
    lake.insert(named, id=3, v="c")
    lake.publish()
    lake.insert(items, id=3, v="c")
    lake.publish()
    return lake, lake.ws


def test_changes_are_relations_beside_the_tables(tmp_path: Path, monkeypatch) -> None:
    lake, (w1, w2, w3) = _lake(tmp_path)
    asked = []
    real = changes_module.read_changes

    def recording(*args, **kwargs):
        asked.append(sorted(args[3]))
        return real(*args, **kwargs)

    monkeypatch.setattr(changes_module, "read_changes", recording)
    w, result = run_query(lake.config, "SELECT _change_type, id, v FROM changes.shop.items ORDER BY id, _change_type DESC",
                          w2, changes_from=w1)
    assert w == w2
    assert [tuple(r.values()) for r in result.to_pylist()] == [("update_before", 1, "a"), ("update_after", 1, "A")]
    assert asked == [[("shop", "items")]]  # only the changes the SQL names are read
    # The incremental model: the changed rows joined with the tables at W3, in one statement.
    _, result = run_query(lake.config, """
        SELECT c.id, c._change_type, i.v AS now FROM changes.shop.items c LEFT JOIN shop.items i USING (id)
        WHERE c._change_type IN ('insert', 'update_after') ORDER BY c.id""", "latest", changes_from=w1)
    assert [tuple(r.values()) for r in result.to_pylist()] == [(1, "update_after", "A"), (3, "insert", "c")]
    _, result = run_query(lake.config, 'SELECT _change_type, id FROM changes.shop."we ird.t"', w3, changes_from=w1)
    assert result.to_pylist() == [{"_change_type": "delete", "id": 2}]
    # A database named "changes" is a database as before; its changes are changes.changes.x.
    _, result = run_query(lake.config, "SELECT count(*) AS n FROM changes.x", w3, changes_from=w1)
    assert result.to_pylist() == [{"n": 3}]
    _, result = run_query(lake.config, "SELECT _change_type, id FROM changes.changes.x", w3, changes_from=w1)
    assert result.to_pylist() == [{"_change_type": "insert", "id": 3}]
    calls = len(asked)
    _, result = run_query(lake.config, "SELECT count(*) AS n FROM shop.items", w3, changes_from=w1)
    assert result.to_pylist() == [{"n": 3}] and len(asked) == calls  # no changes named: none read
    with pytest.raises(QueryError, match="unknown table changes.shop.nope"):
        run_query(lake.config, "SELECT * FROM changes.shop.nope", w3, changes_from=w1)


def test_cli(tmp_path: Path, capsys) -> None:
    lake, (w1, _, w3) = _lake(tmp_path)
    config = tmp_path / "pipeline.toml"
    config.write_text(f'name = "{lake.config.name}"\n[kafka]\nbootstrap_servers = "unused:9092"\n[[topics]]\nname = "cdc"\n'
                      f'protocol = "canal-json"\n[storage]\nurl = "{lake.config.storage.url}"\n')
    sql = "SELECT _change_type, id FROM changes.shop.items ORDER BY id, _change_type DESC"
    assert main(["query", "--config", str(config), "--changes-from", str(w1), "--format", "json", sql]) == 0
    assert capsys.readouterr().out.splitlines() == [
        '{"_change_type":"update_before","id":1}', '{"_change_type":"update_after","id":1}', '{"_change_type":"insert","id":3}']
    assert main(["query", "--config", str(config), "--changes-from", "soon", sql]) == 2
    assert "--changes-from" in capsys.readouterr().err
    assert w3 == lake.ws[-1]


def test_an_isolated_tables_changes_fail_to_read(tmp_path: Path) -> None:
    from spark.commit.apply import apply_interval

    from tests.spark.archives import HOUR, T0
    from tests.spark.test_isolation import _history, _pipeline

    _, batches, (w1, _, w3) = _history()
    config = _pipeline(tmp_path, "isolate", batches)
    for i in range(3):
        apply_interval(config, T0 + i * HOUR, T0 + (i + 1) * HOUR)
    with pytest.raises(IsolatedTable, match="held at W"):
        run_query(config, "SELECT * FROM changes.shop.a", w3, changes_from=w1)
    _, result = run_query(config, "SELECT count(*) AS n FROM changes.shop.b", w3, changes_from=w1)
    assert result.to_pylist() == [{"n": 4}]
