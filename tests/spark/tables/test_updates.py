"""spark.tables.updates: every DDL change the parser yields has exactly one place that stages it."""

from __future__ import annotations

import dataclasses
import inspect

from spark.tables import ddl_changes, updates

# Changes the committer handles itself: they touch the catalog (create, rename) or expand to others (DROP DATABASE).
COMMITTER_CHANGES = {ddl_changes.CreateTable, ddl_changes.CreateTableLike, ddl_changes.RenameTable,
                     ddl_changes.DropDatabase, ddl_changes.ExchangePartition}
# Values inside changes, not changes.
NOT_CHANGES = {ddl_changes.DefaultLiteral, ddl_changes.DefaultNow, ddl_changes.DefaultUnknown}


def test_every_parsed_change_but_the_committers_has_an_update() -> None:
    changes = {c for _, c in inspect.getmembers(ddl_changes, inspect.isclass)
               if dataclasses.is_dataclass(c) and c.__module__ == ddl_changes.__name__} - NOT_CHANGES
    assert changes - COMMITTER_CHANGES == set(updates._STAGERS), "a DDL change kind without (or with a stale) update"


def test_a_change_without_an_update_is_a_typed_error_naming_the_table_and_statement() -> None:
    class Table:
        properties = {"tidelake.upstream.database": "shop", "tidelake.upstream.table": "orders"}

    update = updates.SchemaUpdate(Table(), None, "ALTER TABLE orders FROBNICATE", 7, 0)  # type: ignore[arg-type]
    try:
        updates.stage(object(), update)
    except updates.UnsupportedSchemaChange as exc:
        assert "shop.orders: 'ALTER TABLE orders FROBNICATE'" in str(exc) and "has no Iceberg update for object" in str(exc)
    else:
        raise AssertionError("no error")
