"""No upstream column name collides with the change feed's own (contract §8, issue 33).

Every name MySQL allows for a column (1-64 characters of the BMP, no NUL, not ending in a space,
unique ignoring case) goes through land, fold, write, commit, the change feed and ``query
--changes-from``; the names the feed's code uses for its own columns are always among them. The
feed's bookkeeping (sort order, touched keys' commitTs) is carried beside the rows, never as
columns among them; its two output columns take the first of ``_change_type``/``_commit_ts``,
``__change_type``/... that no upstream column has, and the change set names them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from spark.query.changes import read_changes
from spark.query.names import quote_ident
from spark.query.sql import run_query

from tests.spark.query.test_changes import Lake

pytestmark = pytest.mark.slow  # whole intervals, Spark or services: make test-fast leaves it out (docs/testing.md)

# Column names the feed, the key-less sort and the touched keys used or use internally, and the
# metadata columns' names: each one is an upstream column of some drawn table.
INTERNAL = ["_change_type", "_commit_ts", "__change_type", "__commit_ts", "__side", "_ts", "_deleted", "c0", "c1",
            "side", "ts", "key", "change", "deletes", "schema_id", "key_hash", "run", "state", "segment", "rank",
            "database", "table", "topic", "partition", "offset", "index", "commit_ts", "first",
            "_tidelake_op", "_tidelake_commit_ts", "__tidelake_0", "__tidelake_changes_0"]

mysql_name = st.text(st.characters(min_codepoint=1, max_codepoint=0xFFFF, exclude_categories=("Cs",)),
                     min_size=1, max_size=64).filter(lambda s: not s.endswith(" "))


@st.composite
def columns(draw: st.DrawFn) -> list[str]:
    forced = draw(st.lists(st.sampled_from(INTERNAL), min_size=2, max_size=4, unique_by=str.casefold))
    drawn = draw(st.lists(mysql_name, max_size=2))
    out: list[str] = []
    for name in [*forced, *drawn]:
        if name.casefold() not in {n.casefold() for n in out}:
            out.append(name)
    return out


def _history(tmp: Path, names: list[str], keyed: bool) -> tuple[Lake, list[int]]:
    lake = Lake(tmp, "canal-json")
    key, *rest = names
    cols = [(key, "int"), *((n, "varchar(16)") for n in rest)]
    t = lake.create("t", cols, keys=(key,) if keyed else ())

    def row(i: int, v: str) -> dict:
        return {key: i, **{n: f"{v}{j}" for j, n in enumerate(rest)}}

    for i in (1, 2, 3):
        lake.insert(t, **row(i, "a"))
    lake.publish()
    lake.update(t, row(1, "a"), row(1, "b"))
    lake.delete(t, row(2, "a"))
    lake.insert(t, **row(4, "c"))
    lake.publish()
    return lake, lake.ws


@pytest.mark.parametrize("keyed", [True, False], ids=["keyed", "keyless"])
@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(names=columns())
@example(names=["_ts", *[n for n in INTERNAL if n != "_ts"]])  # every internal name at once, one of them the key
def test_every_mysql_column_name_goes_through_the_feed(tmp_path_factory, keyed: bool, names: list[str]) -> None:
    lake, (w1, w2) = _history(tmp_path_factory.mktemp("n"), names, keyed)
    key, *rest = names
    for a in (0, w1):
        changes = read_changes(lake.config, a, w2)
        d = changes.details[("shop", "t")]
        table = changes[("shop", "t")]
        assert {d.change_type_column, d.commit_ts_column}.isdisjoint(n.casefold() for n in names)
        assert table.column_names == [d.change_type_column, d.commit_ts_column, *names]
        got = sorted((r[d.change_type_column], r[key], tuple(r[n] for n in rest)) for r in table.to_pylist())
        if a == 0:
            assert got == sorted([("insert", 1, tuple(f"b{j}" for j in range(len(rest)))),
                                  ("insert", 3, tuple(f"a{j}" for j in range(len(rest)))),
                                  ("insert", 4, tuple(f"c{j}" for j in range(len(rest))))])
            continue
        updated = ("update_before", "update_after") if keyed else ("delete", "insert")
        assert got == sorted([(updated[0], 1, tuple(f"a{j}" for j in range(len(rest)))),
                              (updated[1], 1, tuple(f"b{j}" for j in range(len(rest)))),
                              ("delete", 2, tuple(f"a{j}" for j in range(len(rest)))),
                              ("insert", 4, tuple(f"c{j}" for j in range(len(rest))))])
    # The query form names the same columns.
    d = read_changes(lake.config, w1, w2).details[("shop", "t")]
    _, result = run_query(lake.config, f"SELECT {quote_ident(d.change_type_column)} AS k, {quote_ident(key)} AS id "
                                       "FROM changes.shop.t", w2, changes_from=w1)
    assert sorted((r["k"], r["id"]) for r in result.to_pylist()) == sorted(
        [("update_before" if keyed else "delete", 1), ("update_after" if keyed else "insert", 1), ("delete", 2),
         ("insert", 4)])
