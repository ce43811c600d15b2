"""The change feed across another table under the name (made anew in the window, or renamed onto
it: a DROP and CREATE, gh-ost's or pt-osc's cut-over of a MODIFY) whose columns of the same names
have other types: W1's rows are W1's table's, every value as it was, whatever W2's types hold."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from spark.query.changes import read_changes
from tests.spark.query.test_changes import Lake, rows

pytestmark = pytest.mark.slow


def _made_anew(tmp_path: Path, before: list[tuple[str, str]], after: list[tuple[str, str]],
               rows1: list[dict], rows2: list[dict], keys1: tuple[str, ...] = ("id",)) -> tuple[Lake, int, int, int, int]:
    lake = Lake(tmp_path, "canal-json")
    t = lake.create("t", before, keys=keys1)
    for row in rows1:
        lake.insert(t, **row)
    w1 = lake.publish()
    lake.h.ddl("shop", "t", "DROP TABLE shop.t", kind="DROP")
    t_drop = lake.h.ts
    t2 = lake.create("t", after)
    t_new = 0
    for row in rows2:
        t_new = lake.insert(t2, **row)
    return lake, w1, lake.publish(), t_drop, t_new


def test_a_narrower_type_shows_the_wider_and_another_kind_keeps_w1s_values_apart(tmp_path: Path) -> None:
    lake, w1, w2, t_drop, t_new = _made_anew(
        tmp_path, [("id", "bigint"), ("v", "bigint"), ("amount", "decimal(12,2)"), ("note", "varchar(8)")],
        [("id", "int"), ("v", "int"), ("amount", "decimal(14,2)"), ("note", "int")],
        [{"id": 5_000_000_000, "v": 7_000_000_000, "amount": "1.50", "note": "big"},
         {"id": 1, "v": 1, "amount": "2.25", "note": "small"}],
        [{"id": 1, "v": 1, "amount": "2.25", "note": 3}])
    changes = read_changes(lake.config, w1, w2)
    table, details = changes[("shop", "t")], changes.details[("shop", "t")]
    # id and v: BIGINT at W1 holds W2's INT (shown as long); amount: W2's precision holds W1's; note:
    # neither holds the other, so W1's texts are kept apart, as a dropped column's are.
    assert table.column_names == ["_change_type", "_commit_ts", "id", "v", "amount", "note", "_note"]
    assert [str(table.schema.field(c).type) for c in ("id", "v", "amount", "note", "_note")] == \
        ["int64", "int64", "decimal128(14, 2)", "int32", "large_string"]
    assert rows(changes, "t") == [
        ("update_before", t_new, {"id": 1, "v": 1, "amount": Decimal("2.25"), "_note": "small"}),
        ("update_after", t_new, {"id": 1, "v": 1, "amount": Decimal("2.25"), "note": 3}),
        ("delete", t_drop, {"id": 5_000_000_000, "v": 7_000_000_000, "amount": Decimal("1.50"), "_note": "big"}),
    ]
    assert details.dropped_columns == ("_note",)
    assert "column 'id' is long at W1 and int at W2: shown as long" in details.reason
    assert "column 'note' is string at W1 and int at W2: W1's values are kept apart" in details.reason
    # Without before images: every key of W1 the window removed, in the feed's (wider) type.
    after = read_changes(lake.config, w1, w2, before_images=False)
    assert rows(after, "t") == [("upsert", t_new, {"id": 1, "v": 1, "amount": Decimal("2.25"), "note": 3}),
                                ("delete", t_drop, {"id": 5_000_000_000})]


def test_a_key_of_another_kind_keeps_w1s_keys_apart_in_both_modes(tmp_path: Path) -> None:
    lake, w1, w2, t_drop, t_new = _made_anew(
        tmp_path, [("id", "varchar(8)"), ("v", "int")], [("id", "int"), ("v", "int")],
        [{"id": "7", "v": 1}], [{"id": 7, "v": 1}])
    for before_images in (True, False):
        changes = read_changes(lake.config, w1, w2, before_images=before_images)
        # W1's key "7" is not W2's 7: one row leaves, another comes; W1's key is in the before image, apart.
        assert sorted(rows(changes, "t"), key=repr) == [("delete", t_drop, {"v": 1, "_id": "7"}),
                                                        ("insert", t_new, {"id": 7, "v": 1})]
        assert changes[("shop", "t")].column_names == ["_change_type", "_commit_ts", "id", "v", "_id"]


def test_columns_match_by_name_ignoring_case_as_mysql_does(tmp_path: Path) -> None:
    lake, w1, w2, t_drop, t_new = _made_anew(
        tmp_path, [("ID", "bigint"), ("V", "int")], [("id", "int"), ("v", "int")],
        [{"ID": 1, "V": 1}, {"ID": 2, "V": 2}], [{"id": 1, "v": 1}, {"id": 2, "v": 20}], keys1=("ID",))
    for before_images in (True, False):
        changes = read_changes(lake.config, w1, w2, before_images=before_images)
        assert changes[("shop", "t")].column_names == ["_change_type", "_commit_ts", "id", "v"]
        if before_images:  # W1's ID is W2's id: the row with id 1 is the same, id 2's v changed
            assert rows(changes, "t") == [("update_before", t_new, {"id": 2, "v": 2}),
                                          ("update_after", t_new, {"id": 2, "v": 20})]
        else:
            assert rows(changes, "t") == [("upsert", t_new - (1 << 18), {"id": 1, "v": 1}), ("upsert", t_new, {"id": 2, "v": 20})]
