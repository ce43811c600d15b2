"""spark.tables.updates: every DDL change the parser yields has exactly one place that stages it."""

from __future__ import annotations

import dataclasses
import inspect

from spark.tables import ddl, updates

# Changes the committer handles itself: they touch the catalog (create, rename) or expand to others (DROP DATABASE).
COMMITTER_CHANGES = {ddl.CreateTable, ddl.CreateTableLike, ddl.RenameTable, ddl.DropDatabase, ddl.ExchangePartition}
# Values inside changes, not changes.
NOT_CHANGES = {ddl.DefaultLiteral, ddl.DefaultNow, ddl.DefaultUnknown}


def test_every_parsed_change_but_the_committers_has_an_update() -> None:
    changes = {c for _, c in inspect.getmembers(ddl, inspect.isclass)
               if dataclasses.is_dataclass(c) and c.__module__ == ddl.__name__} - NOT_CHANGES
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
