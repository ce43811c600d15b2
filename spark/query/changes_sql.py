"""``tidelake query --changes-from W1 [--at W2] "SQL"``: each table's changes as DuckDB relations.

Beside every table at W2 (``"<database>"."<table>"``, as ``spark.query.read`` exposes them), the
changes ``read_changes(W1, W2)`` gives for a table are the relation ``changes."<database>"."<table>"``
(its ``_change_type``, ``_commit_ts`` and the row's columns), so an incremental model is one
statement::

    SELECT o.id, o.total FROM changes.shop.orders o WHERE o._change_type IN ('insert', 'update_after')

``changes`` is a catalog of its own: a database upstream named ``changes`` stays readable as
``changes.t`` (two parts name a database's table), read through a stand-in schema as for any
database named like one of DuckDB's catalogs (``spark.query.sql``). Only the tables the SQL names
under ``changes`` have their changes read (every table's when sqlglot cannot parse it). Names
are matched as tables are: quoted exactly, unquoted in any case.
"""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from spark.query import read as query
from spark.query.names import QueryError, parsed, quote_ident, same_name, sql_name
from spark.config import PipelineConfig
from spark.archive.storage import open_storage

CATALOG = "changes"
TableRef = tuple[str, str]


def named_tables(sql: str, names: set[TableRef]) -> set[TableRef] | None:
    """The tables ``sql`` names as ``changes.<database>.<table>``; None when sqlglot cannot parse it.

    Raises:
        QueryError: such a name is none of ``names``."""
    statements = parsed(sql)
    if statements is None:
        return None
    out = set()
    for ast in statements:
        for node in ast.find_all(exp.Table):
            catalog, db, table = node.args.get("catalog"), node.args.get("db"), node.this
            if not (isinstance(catalog, exp.Identifier) and isinstance(db, exp.Identifier) and isinstance(table, exp.Identifier)):
                continue
            if not same_name(CATALOG, catalog):
                continue
            found = {n for n in names if same_name(n[0], db) and same_name(n[1], table)}
            if not found:
                known = ", ".join(f"{sql_name(a)}.{sql_name(b)}" for a, b in sorted(names)[:20])
                raise QueryError(f"unknown table {node.sql('duckdb')}: changes.<database>.<table> names a table "
                                       f"of the pipeline at either watermark: {known or 'none'}")
            out |= found
    return out


def attach_changes(con: Any, config: PipelineConfig, sql: str, changes_from: query.At, view: query.View,
                   before_images: bool = True) -> int:
    """Attach catalog ``changes`` to ``con`` with a view per table the SQL reads the changes of,
    between ``changes_from`` and the view's W. Returns the from W."""
    from spark.query.changes import read_changes, resolve

    storage = open_storage(config.storage)
    w1 = resolve(config, changes_from, storage, start=True)
    before = query.view_at(config, w1, storage=storage)
    names = {*before.tables, *before.isolated, *view.tables, *view.isolated}
    wanted = named_tables(sql, names)
    con.execute(f"ATTACH ':memory:' AS {quote_ident(CATALOG)}")
    if wanted == set():
        return w1
    changes = read_changes(config, w1, view.watermark, wanted, storage=storage, before_images=before_images)
    import duckdb

    for i, ((db, table), rows) in enumerate(sorted(changes.items())):
        schema = f"{quote_ident(CATALOG)}.{quote_ident(db)}"
        con.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        con.register(f"__tidelake_changes_{i}", rows)
        try:
            con.execute(f"CREATE VIEW {schema}.{quote_ident(table)} AS SELECT * FROM __tidelake_changes_{i}")
        except duckdb.CatalogException:
            raise QueryError(f"the changes of {db}.{table} have the name of another table's but for case, "
                                   "which DuckDB cannot tell apart; name one of them") from None
    return w1
