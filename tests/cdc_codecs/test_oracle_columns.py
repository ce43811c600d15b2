"""The reference model's columns per table name (``Oracle.columns``) and the rows it flags
(``Oracle.unfit``), against the MySQL 8 manual; and what the model test accepts as a hold."""

from __future__ import annotations

import types

import pytest

from cdc_codecs import DdlChange, Op, RowChange, SourcePosition, Watermark
from tests.model.oracle import Oracle

AT = SourcePosition("t", 0, 0)


def _unfit_after(statements: list[str], row: dict) -> list:
    """The model after ``CREATE TABLE d.t (id int primary key, Note text, v int)``, then each of
    ``statements`` (on d.t), then a write of ``row`` into d.t: its ``unfit``."""
    ts = iter(range(1, 100))
    oracle = Oracle()
    events: list = [DdlChange("d", "t", "CREATE TABLE `d`.`t` (`id` int NOT NULL, `Note` text, `v` int, PRIMARY KEY (`id`))",
                              next(ts), AT, "CREATE")]
    events += [DdlChange("d", "t", sql, next(ts), AT, "ALTER") for sql in statements]
    events += [RowChange(Op.INSERT, "d", "t", None, row, ("id",), {}, next(ts), AT), Watermark(next(ts), AT)]
    oracle.add(events)
    oracle.cut([("t", 0)])
    return oracle.unfit


def test_a_row_fits_its_tables_columns_whatever_their_lettercase() -> None:
    """MySQL 8 manual, 11.2.3 Identifier Case Sensitivity: column names are not case-sensitive."""
    assert _unfit_after([], {"id": 1, "Note": "a", "v": 1}) == []
    assert _unfit_after([], {"ID": 1, "note": "a", "V": None}) == []


def test_a_row_lacking_a_column_its_table_has_is_unfit() -> None:
    """A binlog row image holds every column (binlog_row_image=FULL, the default): a row without
    one is a MINIMAL image or a change of before an ADD COLUMN re-sent after it."""
    assert _unfit_after([], {"id": 1, "Note": "a"}) == [(3, ("d", "t"))]  # CREATE at 1, row 2, W 3
    assert _unfit_after(["ALTER TABLE `d`.`t` ADD COLUMN `w` int DEFAULT 3"], {"id": 1, "Note": "a", "v": 1}) == [(4, ("d", "t"))]


@pytest.mark.parametrize("drop", ["DROP COLUMN `v`", "DROP v", "DROP COLUMN note", "DROP COLUMN v, DROP COLUMN Note"])
def test_drop_column_takes_the_column_from_the_model(drop: str) -> None:
    """15.1.9 ALTER TABLE ... DROP [COLUMN]: the column is gone, so a row still naming it is one
    MySQL never wrote (a re-send after the DDL). sqlglot keeps a DROP's columns in ``tables``:
    the model subtracted the Drop's own name, '', and never dropped anything."""
    gone = {c.strip("`,").casefold() for c in drop.split() if c.strip("`,").casefold() in ("v", "note")}
    kept = {c: 1 for c in ("id", "Note", "v") if c.casefold() not in gone}
    named = sorted(gone)[0]
    assert _unfit_after([f"ALTER TABLE `d`.`t` {drop}"], {**kept, named: 1}) == [(4, ("d", "t"))]  # CREATE at 1, ALTER 2, row 3, W 4
    assert _unfit_after([f"ALTER TABLE `d`.`t` {drop}"], kept) == []


def test_add_column_then_rows_naming_it_fit() -> None:
    assert _unfit_after(["ALTER TABLE `d`.`t` ADD COLUMN `w` int DEFAULT 3"], {"id": 1, "Note": None, "v": 1, "w": 2}) == []
    assert _unfit_after([], {"id": 1, "Note": None, "v": 1, "w": 2}) != []


# ---------------------------------------------------------------- the model test's acceptance of a hold

def _machine_with_unfit(unfit: list) -> types.SimpleNamespace:
    return types.SimpleNamespace(oracle=types.SimpleNamespace(unfit=unfit))


def test_a_hold_for_rows_the_model_flagged_is_accepted() -> None:
    from tests.spark.test_operations import PipelineMachine

    entry = {"database": "shop", "table": "typed", "held_at": 10, "error": "RowSchemaMismatch", "message": "..."}
    assert PipelineMachine._held_for_a_reason(_machine_with_unfit([(20, ("shop", "typed"))]), entry, 20)
    assert not PipelineMachine._held_for_a_reason(_machine_with_unfit([(20, ("shop", "other"))]), entry, 20)
    assert not PipelineMachine._held_for_a_reason(_machine_with_unfit([(10, ("shop", "typed"))]), entry, 20)
    assert not PipelineMachine._held_for_a_reason(_machine_with_unfit([(30, ("shop", "typed"))]), entry, 20)  # later


@pytest.mark.parametrize("error", ["KeyError", "CorruptChangeValue", "UnsupportedSchemaChange"])
def test_a_hold_for_another_reason_in_a_table_with_an_unfit_row_is_not_accepted(error: str) -> None:
    from tests.spark.test_operations import PipelineMachine

    entry = {"database": "shop", "table": "typed", "held_at": 10, "error": error, "message": "unrelated"}
    assert not PipelineMachine._held_for_a_reason(_machine_with_unfit([(20, ("shop", "typed"))]), entry, 20)


def test_create_table_if_not_exists_of_an_existing_table_keeps_its_columns() -> None:
    """MySQL 8 manual 15.1.20: with IF NOT EXISTS an existing table is left as it is (a note, no
    error): its columns stay, so a row naming them still fits."""
    assert _unfit_after(["CREATE TABLE IF NOT EXISTS `d`.`t` (`id` int NOT NULL, PRIMARY KEY (`id`))"],
                        {"id": 1, "Note": "x", "v": 2}) == []


def test_a_partitioned_create_table_gives_its_columns() -> None:
    """15.1.20: partition options come last and name no column; ``VALUES LESS THAN MAXVALUE`` (no
    parentheses, which sqlglot does not read) left the model without the columns, so a re-sent row
    lacking one went unflagged (canal, seed 52733, on Spark executors)."""
    oracle = Oracle()
    oracle.add([DdlChange("d", "p", "CREATE TABLE `d`.`p` (`id` int NOT NULL, `v` int, PRIMARY KEY (`id`)) PARTITION BY RANGE "
                          "(`id`) (PARTITION p0 VALUES LESS THAN (6), PARTITION p1 VALUES LESS THAN MAXVALUE)", 1, AT, "CREATE"),
                RowChange(Op.INSERT, "d", "p", None, {"id": 1}, ("id",), {}, 2, AT), Watermark(3, AT)])
    oracle.cut([("t", 0)])
    assert oracle.columns[("d", "p")] == frozenset({"id", "v"}) and oracle.unfit == [(3, ("d", "p"))]
