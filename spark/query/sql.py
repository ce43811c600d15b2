"""``tidelake query``: DuckDB SQL over the tables of one consistent view (``spark.query.read``).

Every pipeline table is a view ``"<database>"."<table>"``; only the tables the SQL names are read,
each with only the columns it uses and the rows its simple WHERE conditions keep
(``plan_scans``); with ``changes_from``, each table's changes are relations too
(``spark.query.changes_sql``).
"""

from __future__ import annotations

from collections import Counter
from decimal import Decimal
from functools import reduce
from typing import Any

import pyarrow as pa
import sqlglot
from pyiceberg.expressions import (
    AlwaysTrue,
    And,
    BooleanExpression,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
    NotEqualTo,
    NotNull,
)
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.schema import Schema
from pyiceberg.types import BooleanType, DecimalType, IntegerType, LongType, NestedField, StringType
from sqlglot import exp
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.scope import traverse_scope

from cdc_codecs import TidelakeError
from spark.config import PipelineConfig

from spark.query.names import QueryError, parsed, quote_ident, same_name, sql_name
from spark.query.read import At, TableScan, View, open_view

class QueryFailed(TidelakeError):
    """A well-formed query failed while it ran (a failed cast, an overflow, ...)."""


# DuckDB's own schemas: a query may read them, and they are never pipeline tables.
_ENGINE_SCHEMAS = frozenset({"information_schema", "pg_catalog", "main", "temp", "system"})
_DYNAMIC_TABLE_FUNCTIONS = frozenset({"query", "query_table"})
_COMPARISONS: dict[type, tuple[type, type]] = {  # sqlglot node: (pyiceberg predicate, same with sides swapped)
    exp.EQ: (EqualTo, EqualTo), exp.NEQ: (NotEqualTo, NotEqualTo),
    exp.GT: (GreaterThan, LessThan), exp.GTE: (GreaterThanOrEqual, LessThanOrEqual),
    exp.LT: (LessThan, GreaterThan), exp.LTE: (LessThanOrEqual, GreaterThanOrEqual),
}


def _resolve(node: exp.Table, names: Any) -> tuple[str, str] | None:
    """The pipeline table a ``<database>.<table>`` reference names; None when it is not one."""
    db, table = node.args.get("db"), node.this
    if node.args.get("catalog") or not isinstance(db, exp.Identifier) or not isinstance(table, exp.Identifier):
        return None  # unqualified (a CTE, a file), a function, or three parts: DuckDB's to resolve
    found = [n for n in names if same_name(n[0], db) and same_name(n[1], table)]
    if len(found) > 1:
        found = [n for n in found if n == (db.name, table.name)] or found
    if len(found) > 1:
        raise QueryError(f"{node.sql('duckdb')} matches {', '.join(f'{a}.{b}' for a, b in sorted(found))}; "
                         "quote the name to pick one")
    if not found:
        if db.name.lower() in _ENGINE_SCHEMAS:
            return None
        known = ", ".join(f"{sql_name(a)}.{sql_name(b)}" for a, b in sorted(names)[:20])
        raise QueryError(f"unknown table {node.sql('duckdb')}; the tables at this watermark are: {known or 'none'}")
    return found[0]


def _literal(node: exp.Expression, column: NestedField) -> Any:
    """A SQL literal as a value of the column's Iceberg type, or None when DuckDB might compare it otherwise."""
    negative = isinstance(node, exp.Neg)
    if negative:
        node = node.this
    if isinstance(column.field_type, BooleanType) and isinstance(node, exp.Boolean) and not negative:
        return node.this
    if not isinstance(node, exp.Literal):
        return None
    text = ("-" if negative else "") + node.this
    if node.is_string:
        return text if isinstance(column.field_type, StringType) and not negative else None
    if isinstance(column.field_type, (IntegerType, LongType)) and text.lstrip("-").isdigit():
        return int(text)
    if isinstance(column.field_type, DecimalType):
        try:
            value = Decimal(text)
        except ArithmeticError:
            return None
        # Only a literal the column's scale holds exactly: DuckDB would otherwise widen, not round.
        exponent = value.as_tuple().exponent
        return value if isinstance(exponent, int) and -exponent <= column.field_type.scale else None
    return None


def _predicate(cond: exp.Expression, column_field: Any) -> tuple[tuple[str, str], BooleanExpression] | None:
    """A WHERE conjunct as a pyiceberg predicate on one table, when it is one column against literals.

    Every predicate made here rejects NULLs, as SQL's comparisons do: reading only the rows that pass
    it cannot change a query whose WHERE holds it, even on the NULL side of an outer join.
    """
    if type(cond) in _COMPARISONS:
        left, right = cond.this, cond.expression
        op, swapped = _COMPARISONS[type(cond)]
        if isinstance(right, exp.Column):
            left, right, op = right, left, swapped
        hit = column_field(left)
        value = _literal(right, hit[1]) if hit else None
        return (hit[0], op(hit[1].name, value)) if hit and value is not None else None
    if isinstance(cond, exp.In) and not cond.args.get("query") and not cond.args.get("unnest"):
        hit = column_field(cond.this)
        values = [_literal(v, hit[1]) for v in cond.expressions] if hit else [None]
        return (hit[0], In(hit[1].name, values)) if hit and values and None not in values else None
    if isinstance(cond, exp.Between):
        hit = column_field(cond.this)
        low, high = (_literal(cond.args["low"], hit[1]), _literal(cond.args["high"], hit[1])) if hit else (None, None)
        if hit and low is not None and high is not None:
            return hit[0], And(GreaterThanOrEqual(hit[1].name, low), LessThanOrEqual(hit[1].name, high))
        return None
    if isinstance(cond, exp.Not) and isinstance(cond.this, exp.Is) and isinstance(cond.this.expression, exp.Null):
        hit = column_field(cond.this.this)
        return (hit[0], NotNull(hit[1].name)) if hit else None
    return None


def plan_scans(sql: str, schemas: dict[tuple[str, str], Schema]) -> dict[tuple[str, str], TableScan] | None:
    """The tables ``sql`` reads, each with the columns it uses and the WHERE conjuncts it can skip rows by.

    Tables are ``<database>.<table>`` references (quoted: exact; unquoted: any case). What sqlglot
    cannot analyse is read whole; DuckDB runs the SQL as written either way, so a scan only ever
    narrows what is read. Returns None when sqlglot cannot parse the SQL (then every table is read).

    Raises:
        QueryError: a ``<database>.<table>`` the view does not have, or one that matches two tables.
    """
    statements = parsed(sql)
    if statements is None:
        return None
    if len(statements) != 1 or isinstance(statements[0], exp.Command):
        return None  # a statement sqlglot keeps as text: its tables are unknown
    ast = statements[0]
    if any(f.name.lower() in _DYNAMIC_TABLE_FUNCTIONS for f in ast.find_all(exp.Anonymous)):
        return None  # query_table('db.t') names tables in strings
    refs = [(node, name) for node in ast.find_all(exp.Table) if (name := _resolve(node, schemas)) is not None]
    names = sorted({name for _, name in refs})
    whole = {name: TableScan() for name in names}
    uses = Counter(name for _, name in refs)
    # Analyse a copy whose references are stand-in names, so sqlglot resolves columns as DuckDB would,
    # however the upstream names are spelt (DuckDB matches identifiers without case; so does sqlglot's dialect).
    stand_in = {name: f"__tidelake_{i}" for i, name in enumerate(names)}
    by_stand_in = {v: k for k, v in stand_in.items()}
    if not isinstance(ast, exp.Query):
        return whole  # DESCRIBE, SUMMARIZE, PIVOT ...: read as a whole what they name
    for node, name in refs:
        node.set("alias", node.args.get("alias") or exp.TableAlias(this=node.this.copy()))
        node.set("this", exp.to_identifier(stand_in[name]))
        node.set("db", None)
    try:
        ast = qualify(ast, dialect="duckdb", schema={stand_in[n]: {f.name: "VARCHAR" for f in schemas[n].fields} for n in names})
        scopes = traverse_scope(ast)
    except (sqlglot.errors.SqlglotError, KeyError, ValueError):
        return whole
    if any(True for _ in ast.find_all(exp.Columns)) or any(not isinstance(s.parent, exp.Count) for s in ast.find_all(exp.Star)):
        return whole  # COLUMNS(...) or a star sqlglot could not expand: every column may be read
    fields = {name: {f.name.lower(): f for f in schemas[name].fields} for name in names}
    used: dict[tuple[str, str], set[str]] = {name: set() for name in names}
    filters: dict[tuple[str, str], list[BooleanExpression]] = {name: [] for name in names}
    for scope in scopes:
        def column_field(node: exp.Expression, scope: Any = scope) -> tuple[tuple[str, str], NestedField] | None:
            if not isinstance(node, exp.Column):
                return None
            source = scope.sources.get(node.table)
            name = by_stand_in.get(source.name) if isinstance(source, exp.Table) else None
            column = fields[name].get(node.name.lower()) if name else None
            return (name, column) if name and column and "." not in column.name else None  # pyiceberg reads dots as paths
        for column in scope.columns:
            source = scope.sources.get(column.table)
            if isinstance(source, exp.Table) and source.name in by_stand_in:
                used[by_stand_in[source.name]].add(column.name.lower())
        where = scope.expression.args.get("where") if isinstance(scope.expression, exp.Select) else None
        if where is None:
            continue
        for cond in (where.this.flatten() if isinstance(where.this, exp.And) else [where.this]):
            hit = _predicate(cond, column_field)
            if hit and uses[hit[0]] == 1:  # a table read twice (a self join) needs all rows the others need
                filters[hit[0]].append(hit[1])
    out = {}
    for name in names:
        columns = tuple(f.name for f in schemas[name].fields if f.name.lower() in used[name])
        out[name] = TableScan(columns, reduce(And, filters[name]) if filters[name] else AlwaysTrue())
    return out


def _one_line(exc: Exception) -> str:
    """DuckDB's message up to its source excerpt, on one line."""
    lines = []
    for line in str(exc).splitlines():
        if not line.strip() or line.startswith("LINE "):
            break
        lines.append(line.strip())
    return " ".join(lines)


def run_query(config: PipelineConfig, sql: str, at: At = "latest", *, metadata: bool = False,
              changes_from: At | None = None, before_images: bool = True) -> tuple[int, pa.Table]:
    """Run DuckDB SQL over the tables it names, at one consistent W: (W, result).

    Each pipeline table is a view ``"<database>"."<table>"`` (a database named like one of DuckDB's
    catalogs or system schemas under a stand-in schema the SQL is rewritten to, ``_duckdb_schemas``); only the tables the SQL names are
    read, each with only the columns it uses and the rows its simple WHERE conditions keep
    (``plan_scans``). With ``metadata``, ``_tidelake_commit_ts`` and ``_tidelake_op`` are columns too
    (named with more leading underscores in a table whose upstream columns have those names: ``schema_map``).
    With ``changes_from`` (a W or time before ``at``), each table's changes since it are the relation
    ``changes."<database>"."<table>"`` too (``spark.query.changes_sql``); with ``before_images=False``
    those are after images and deleted keys only (``read_changes``).

    Raises:
        QueryError: the SQL does not parse, or names an unknown table or column (nothing is read then).
        QueryFailed: DuckDB failed while running it.
        NoSuchWatermark: nothing is published at ``at``.
    """
    import duckdb

    con = duckdb.connect()
    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryError(_one_line(exc)) from exc
    if len(statements) != 1:
        raise QueryError(f"give one SQL statement; found {len(statements)}")
    view = open_view(config, at)
    _require_no_isolated(sql, view)
    schemas = {name: view.schema(name, metadata=metadata) for name in view.tables}
    plan = plan_scans(sql, schemas)
    if plan is None:
        plan = {name: TableScan() for name in view.tables}
    folded = Counter((db.lower(), table.lower()) for db, table in plan)
    if any(n > 1 for n in folded.values()):
        clash = sorted(f"{db}.{table}" for db, table in plan if folded[(db.lower(), table.lower())] > 1)
        raise QueryError(f"{' and '.join(clash)} differ only in case, which DuckDB cannot tell apart in one query")
    # Every table is a view, so information_schema and DESCRIBE list them all; until the query is
    # bound each is empty, and only the tables it names are then read.
    order = sorted(plan) + sorted(set(view.tables) - set(plan))  # a named table wins a case clash
    stand_ins = {name: f"__tidelake_{i}" for i, name in enumerate(order)}
    if changes_from is not None:  # before the schemas: a database named "changes" gets a stand-in
        from spark.query.changes_sql import attach_changes

        attach_changes(con, config, sql, changes_from, view, before_images)
    catalog, schema_of = _duckdb_schemas(con, {db for db, _ in view.tables})
    sql = _with_duckdb_schemas(sql, schemas, schema_of)

    def view_name(name: tuple[str, str]) -> str:
        return f"{quote_ident(catalog)}.{quote_ident(schema_of[name[0]])}.{quote_ident(name[1])}"

    for name, stand_in in stand_ins.items():
        con.register(stand_in, schema_to_pyarrow(schemas[name]).empty_table())
        con.execute(f"CREATE SCHEMA IF NOT EXISTS {quote_ident(catalog)}.{quote_ident(schema_of[name[0]])}")
        try:
            con.execute(f"CREATE VIEW {view_name(name)} AS SELECT * FROM {stand_in}")
        except duckdb.CatalogException:
            if name in plan:
                raise QueryError(f"{name[0]}.{name[1]} has the name of another table but for case, "
                                 "which DuckDB cannot tell apart") from None
    try:
        if statements[0].type == duckdb.StatementType.SELECT:
            con.execute(f"EXPLAIN {sql}")  # binds tables, columns and types: a wrong query reads nothing
    except duckdb.Error as exc:
        raise QueryError(_one_line(exc)) from exc
    for name in plan:  # the same view names over the rows read (their columns narrowed to what the query uses)
        con.register(f"{stand_ins[name]}_rows", view.scan(name, plan[name], metadata=metadata))
        con.execute(f"CREATE OR REPLACE VIEW {view_name(name)} AS SELECT * FROM {stand_ins[name]}_rows")
    try:
        result = con.sql(sql)
        return view.watermark, result.to_arrow_table() if result is not None else pa.table({})
    except (duckdb.ParserException, duckdb.BinderException, duckdb.CatalogException) as exc:
        raise QueryError(_one_line(exc)) from exc
    except duckdb.Error as exc:
        raise QueryFailed(_one_line(exc)) from exc


def _require_no_isolated(sql: str, view: View) -> None:
    """Raises ``IsolatedTable`` when ``sql`` names a table isolated at the view's W."""
    if not view.isolated:
        return
    try:
        nodes = list(sqlglot.parse_one(sql, dialect="duckdb").find_all(exp.Table))
    except sqlglot.errors.SqlglotError:
        return  # DuckDB reports it
    for node in nodes:
        db, table = node.args.get("db"), node.this
        if isinstance(db, exp.Identifier) and isinstance(table, exp.Identifier) and not node.args.get("catalog"):
            if any(same_name(n[0], db) and same_name(n[1], table) for n in view.tables):
                continue  # a readable table (another differing only in case may be isolated)
            for name in view.isolated:
                if same_name(name[0], db) and same_name(name[1], table):
                    view.require_readable(name)


def _fresh(name: str, taken: set[str]) -> str:
    """``name``, or ``name_<n>``: the first that none of ``taken`` (lowercase) is, as DuckDB compares names."""
    candidate, n = name, 0
    while candidate.lower() in taken:
        n += 1
        candidate = f"{name}_{n}"
    taken.add(candidate.lower())
    return candidate


def _duckdb_schemas(con: Any, databases: set[str]) -> tuple[str, dict[str, str]]:
    """The catalog the views live in (the connection's only one of its own), and each upstream database's schema in it.

    A database is the schema of its own name, so ``"db"."t"`` reads it -- except a name DuckDB
    resolves elsewhere or refuses as a schema: its other catalogs (``system``, ``temp``) and the
    system catalog's schemas (``information_schema``, ``pg_catalog``). Such a database gets a
    stand-in schema (``_system``, ...) that ``_with_duckdb_schemas`` puts into the query in its
    place; only ``information_schema`` and ``DESCRIBE`` show the stand-in.
    """
    taken = {db.lower() for db in databases}
    default = con.sql("SELECT current_database()").fetchone()[0]
    catalog = _fresh("tidelake", taken)  # no upstream database's name: "<catalog>"."t" is never ambiguous
    con.execute(f"ATTACH ':memory:' AS {quote_ident(catalog)}")
    con.execute(f"USE {quote_ident(catalog)}")
    con.execute(f"DETACH {quote_ident(default)}")  # a database named "memory" is then a schema like any other
    elsewhere = {r[0].lower() for r in con.sql("SELECT database_name FROM duckdb_databases() UNION ALL "
                                                "SELECT schema_name FROM duckdb_schemas() WHERE database_name = 'system'").fetchall()}
    elsewhere -= {catalog.lower(), "main"}  # main: the schema DuckDB looks in first, this catalog's own
    return catalog, {db: _fresh(f"_{db}", taken) if db.lower() in elsewhere else db for db in sorted(databases)}


def _with_duckdb_schemas(sql: str, schemas: dict[tuple[str, str], Schema], schema_of: dict[str, str]) -> str:
    """``sql`` with the database part of each reference to a table whose database has a stand-in schema
    (``_duckdb_schemas``) replaced by the stand-in: table references and columns qualified by
    database and table. Only those identifiers change, in place; the rest of the text is the user's.
    SQL that sqlglot cannot parse is left as it is (DuckDB then names the ambiguity)."""
    moved = {name for name in schemas if schema_of[name[0]] != name[0]}
    if not moved:
        return sql
    statements = parsed(sql)
    if statements is None:
        return sql
    edits: list[tuple[exp.Identifier, str]] = []
    for ast in statements:
        for node in ast.find_all(exp.Table):
            name = _resolve(node, schemas)
            if name in moved:
                edits.append((node.args["db"], schema_of[name[0]]))  # type: ignore[index]
        for column in ast.find_all(exp.Column):
            db, table = column.args.get("db"), column.args.get("table")
            if column.args.get("catalog") or not isinstance(db, exp.Identifier) or not isinstance(table, exp.Identifier):
                continue
            found = [n for n in moved if same_name(n[0], db) and same_name(n[1], table)]
            if len(found) == 1:
                edits.append((db, schema_of[found[0][0]]))
    if any("start" not in ident.meta or "end" not in ident.meta for ident, _ in edits):
        return sql
    for ident, schema in sorted(edits, key=lambda e: e[0].meta["start"], reverse=True):
        sql = sql[: ident.meta["start"]] + quote_ident(schema) + sql[ident.meta["end"] + 1:]
    return sql
