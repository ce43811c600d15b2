"""SQL names of the query side: how a name the user typed matches a table, how a name is written
back into SQL, and SQL parsed in DuckDB's dialect. Imports no other query module."""

from __future__ import annotations

import logging

import sqlglot
from sqlglot import exp

from cdc_codecs import TidelakeError


class QueryError(TidelakeError):
    """The query is wrong: it does not parse, or names a table or column the view at W does not have."""


def same_name(name: str, ident: exp.Identifier) -> bool:
    """SQL name matching: a quoted identifier names exactly, an unquoted one ignores case."""
    return name == ident.name if ident.quoted else name.lower() == ident.name.lower()


def sql_name(name: str) -> str:
    return name if name.isidentifier() and name.islower() else '"' + name.replace('"', '""') + '"'


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def parsed(sql: str) -> list[exp.Expression] | None:
    """The statements of ``sql`` in DuckDB's dialect, or None if sqlglot cannot parse it; without
    sqlglot's "falling back to a Command" warning, which the callers handle."""
    sqlglot_log = logging.getLogger("sqlglot")
    level = sqlglot_log.level
    sqlglot_log.setLevel(logging.ERROR)
    try:
        return [s for s in sqlglot.parse(sql, dialect="duckdb") if s is not None]
    except sqlglot.errors.SqlglotError:
        return None
    finally:
        sqlglot_log.setLevel(level)
