"""DDL statements -> table changes, parsed with sqlglot's MySQL dialect.

Protocols that carry only SQL (Canal, Open protocol, DTS) need this; protocols that also
carry the schema after the change (Simple, Debezium, CloudCanal) get the same changes,
and the schema they carry fixes the exact column types (``spark.commit.plan.ddl_changes``).

The rule: a statement that changes a table's columns, key, name, rows or partitioning yields
the changes, in the order MySQL applies them; a statement that changes none of these (indexes,
constraints other than the primary key, comments, table options, partition maintenance that
keeps rows and bounds, statements about users, views...) yields ``[]``; anything in between raises
``DdlParseError`` naming the statement and the part not understood. Nothing that could
change columns is dropped silently.

How the statement is read:

- sqlglot's tokenizer splits the text (quotes, backticks, ``/* */``, ``#`` and ``--``
  comments), so upstream names are data whatever they contain. Comments the server executes
  -- MySQL's ``/*!50100 ... */``, TiDB's ``/*T![feature] ... */`` -- are read as their content,
  as the server does.
- ``ALTER TABLE`` is split into its comma-separated clauses and each clause is parsed by
  sqlglot on its own, so one clause sqlglot does not know (``RENAME AS``, ``ADD COLUMN
  (a INT, b INT)``, ``PARTITION BY``, TiDB options) cannot hide the others. Clauses sqlglot
  cannot parse are classified by their leading keywords: known no-ops, known data loss
  (below), or ``DdlParseError``.
- Column positions (``FIRST``, ``AFTER x`` on ADD / CHANGE / MODIFY) become ``MoveColumn``
  changes after the change they belong to; a plain ``ADD`` puts the column last among the
  upstream columns, as MySQL does.

Decisions:

- **Primary keys are followed.** ``ADD PRIMARY KEY``, ``DROP PRIMARY KEY``, a column-level
  ``PRIMARY KEY`` in ADD/MODIFY/CHANGE and ``DROP INDEX `PRIMARY``` become ``SetKeyColumns``
  (``()`` = no key: the whole row is the key). MySQL validated the new key upstream, so
  the rows already in the lake are unique by it. Dropping a key column removes it from the
  key (MySQL's rule), which the committer applies.
- Table-level primary keys are read from the tokens (``[CONSTRAINT [s]] PRIMARY KEY [USING
  t] (a(10) DESC, b) [index options]``), so TiDB's ``CLUSTERED`` / ``NONCLUSTERED`` (bare or
  in ``/*T![clustered_index] */``), prefix lengths and ASC / DESC give the key columns.
  Generated columns (``AS (expr) VIRTUAL | STORED``) are columns: row events carry their values.
- **Partitioning is followed** (``spark.tables.partitioning``; the clauses are read in
  ``spark.tables.ddl_partitions``): ``PARTITION BY`` in CREATE or ALTER TABLE is
  ``SetPartitioning`` (RANGE / LIST [COLUMNS] with their bounds, [LINEAR] HASH / KEY with
  their partitions, TiDB's INTERVAL without), ``REMOVE PARTITIONING`` ``SetPartitioning(None)``,
  ``ADD PARTITION (...)`` / ``ADD PARTITION PARTITIONS n``, ``COALESCE PARTITION n`` and
  ``REORGANIZE PARTITION ... INTO (...)`` change the partitions. ``TRUNCATE PARTITION`` and
  ``DROP PARTITION`` delete rows without row events, ``EXCHANGE PARTITION p WITH TABLE nt``
  (``ExchangePartition``, a change of both tables) swaps p's rows with nt's: the committer
  computes which rows the partition holds, or fails the table (``UnsupportedSchemaChange``)
  naming why it cannot tell which.
- **Statements that remove or bring rows without row events fail**: ``DISCARD / IMPORT
  TABLESPACE``, TiDB's ``FIRST PARTITION LESS THAN``, ``FLASHBACK TABLE`` / ``RECOVER TABLE``.
  The lake cannot know which rows changed; re-create the table from a snapshot instead.
- ``CREATE TABLE ... SELECT`` as written fails too: MySQL logs it so only in STATEMENT /
  MIXED binlog format, where its rows are no row events. In ROW format (every supported
  protocol reads row events) MySQL logs the ``CREATE TABLE`` it generated (``... START
  TRANSACTION`` since 8.0.21) and then insert row events, which are applied as usual
  (MySQL 8.0 manual 19.5.1.7). TiDB does not support the statement.
- ``CREATE TABLE x LIKE y`` is ``CreateTableLike(y)``: the committer copies y's columns,
  upstream types and key as they are in the lake when the statement applies.
- ``IF NOT EXISTS`` / ``IF EXISTS`` are kept on the changes whose effect they change
  (CREATE TABLE, ADD COLUMN); DROP COLUMN / DROP TABLE of a missing object is already a
  no-op in the committer.
- ``ADD COLUMN`` keeps its DEFAULT (``AddColumn.default``): MySQL gives it to every row the
  table holds, and ``spark.tables.ddl_defaults.existing_rows_value`` says which value that is once
  the column's exact type is known; ``ALTER COLUMN ... SET / DROP DEFAULT`` change no row and are no-ops.
- Temporary tables are never replicated (binlog and TiCDC skip them): no-ops.
- ``DROP {DATABASE | SCHEMA} [IF EXISTS] d`` is ``DropDatabase(d)``: the run's plans turn it
  into a ``DropTable`` of every table of d that exists when it applies (the lake's, and those
  created, renamed into d or written earlier in the run: ``spark.commit.plan.UpstreamTables``).
  ``CREATE DATABASE`` changes no table: ``[]``.
"""

from __future__ import annotations

import dataclasses

import re
from collections.abc import Sequence

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import Token, TokenType

from cdc_codecs import ColumnType, TableSchema
from cdc_codecs.events import Column
from cdc_codecs.types import ColumnValueError, parse_mysql_type
from spark.tables.ddl_changes import (
    AddColumn,
    Change,
    ChangeColumnType,
    CreateTable,
    CreateTableLike,
    DdlParseError,
    DropColumn,
    DropDatabase,
    DropTable,
    ExchangePartition,
    MoveColumn,
    RenameColumn,
    RenameTable,
    SetKeyColumns,
    SetPartitioning,
    TableRef,
    TruncateTable,
)
from spark.tables.ddl_defaults import column_default
from spark.tables.ddl_partitions import (
    PARTITION_KEEPS_ROWS,
    continues_partition_list,
    exchange_clause,
    partition_by_at,
    partition_maintenance,
    partitioning_clause,
)
from spark.tables.ddl_tokens import (
    MYSQL,
    closing_paren,
    database_name,
    skip_if_exists,
    split_tokens,
    table_list,
    table_name_end,
    table_ref,
    text_of,
    word_of,
    words_of,
)

# Leading words of ALTER TABLE clauses that only change storage, options or partition
# layout (MySQL 8 table_options / partition_options, TiDB extensions). Consulted only for
# clauses sqlglot cannot parse itself.
_OPTION_WORDS = frozenset({
    "ALGORITHM", "AUTO_INCREMENT", "AUTOEXTEND_SIZE", "AVG_ROW_LENGTH", "CHARACTER", "CHARSET", "CHECKSUM",
    "COLLATE", "COMMENT", "COMPRESSION", "CONNECTION", "CONVERT", "DEFAULT", "DELAY_KEY_WRITE", "DISABLE", "ENABLE",
    "ENCRYPTION", "ENGINE", "ENGINE_ATTRIBUTE", "FORCE", "INSERT_METHOD", "KEY_BLOCK_SIZE", "LOCK", "MAX_ROWS",
    "MIN_ROWS", "ORDER", "PACK_KEYS", "PASSWORD", "ROW_FORMAT", "SECONDARY_ENGINE", "SECONDARY_ENGINE_ATTRIBUTE",
    "SECONDARY_LOAD", "SECONDARY_UNLOAD", "STATS_AUTO_RECALC", "STATS_PERSISTENT", "STATS_SAMPLE_PAGES",
    "TABLESPACE", "UNION", "WITH", "WITHOUT", "ATTRIBUTES", "AUTO_ID_CACHE", "AUTO_RANDOM_BASE", "CACHE", "COMPACT",
    "NOCACHE", "PLACEMENT", "PRE_SPLIT_REGIONS", "SET", "SHARD_ROW_ID_BITS", "STATS_BUCKETS", "STATS_COL_CHOICE",
    "STATS_COL_LIST", "STATS_OPTIONS", "STATS_SAMPLE_RATE", "STATS_TOPN", "TTL", "TTL_ENABLE", "TTL_JOB_INTERVAL",
    "REMOVE",  # TiDB's REMOVE TTL (REMOVE PARTITIONING is read before)
})
# Clauses that delete or bring rows without row events, whatever the lake knows.
_ROWS_WITHOUT_EVENTS = {
    ("FIRST", "PARTITION"): "drops the first partitions and their rows (TiDB interval partitioning)",
    ("DISCARD", None): "discards the table's tablespace and its rows",
    ("IMPORT", None): "imports rows from a tablespace file",
}
_NO_ROW_EVENTS = "without row events, so tidelake cannot tell which rows changed; re-create the table from a snapshot"
# Column attributes sqlglot does not know and that change no column type, with how many
# tokens follow them ("(" = an optional parenthesised list): TiDB's AUTO_RANDOM(5) and
# `PRIMARY KEY [NON]CLUSTERED`, MySQL 8's SRID 4326, STORAGE DISK, COLUMN_FORMAT FIXED, VISIBLE.
_UNKNOWN_ATTRIBUTES: dict[str, int | str] = {"AUTO_RANDOM": "(", "SRID": 1, "STORAGE": 1, "COLUMN_FORMAT": 1, "VISIBLE": 0,
                                              "CLUSTERED": 0, "NONCLUSTERED": 0}
_NO_OP_ELEMENTS = (exp.IndexColumnConstraint, exp.UniqueColumnConstraint, exp.ForeignKey, exp.CheckColumnConstraint, exp.Constraint)


def column_type_of(type_text: str) -> ColumnType:
    """A column type as written in a statement, read like the protocols' type strings."""
    try:
        ct = parse_mysql_type(type_text)
    except ColumnValueError as exc:
        raise DdlParseError(str(exc)) from None
    if ct.mysql_type == "binary" and ct.length is None:
        return dataclasses.replace(ct, length=1)  # BINARY is BINARY(1) in a statement (a message's bare `binary` is unknown)
    return ct


def parse_ddl(sql: str, default_db: str) -> list[tuple[TableRef, Change]]:
    """The table changes a DDL statement makes, in order; [] for statements that change no table.

    Args:
        sql: one statement (or several separated by ``;``), as the protocol carries it.
        default_db: the database unqualified table names belong to (the DDL event's schema).

    Raises:
        DdlParseError: a statement that could change a table's columns, key, name or rows
            and is not understood, or whose row changes cannot be replicated.
    """
    shown, sql = sql, _executed_comments(sql)
    try:
        tokens = MYSQL.tokenize(sql)
    except TokenError as exc:
        if _looks_like_table_ddl(sql):
            raise DdlParseError(f"cannot read {shown!r}: {exc}") from None
        return []
    out: list[tuple[TableRef, Change]] = []
    start = 0
    for i, t in enumerate(tokens + [None]):  # type: ignore[list-item]
        if t is None or t.token_type == TokenType.SEMICOLON:
            if i > start:
                end = t.start if t is not None else len(sql)
                out += _statement(sql, tokens[start:i], end, default_db, shown)
            start = i + 1
    return out


# The opening of a comment the server executes: MySQL's `/*!` [version], TiDB's `/*T!` [[feature]].
_EXECUTED_COMMENT = re.compile(r"/\*(?:!\d*|T!(?:\[[^\]]*\])?)")


def _executed_comments(sql: str) -> str:
    """``sql`` with the markers of comments the server executes blanked out, so their content is
    read as the server reads it: ``/*!50100 PARTITION BY ... */`` (mysqldump, pt-online-schema-change),
    ``/*T![clustered_index] CLUSTERED */``. Positions are kept (markers become spaces); quoted
    text and other comments are left alone. MySQL 8 and TiDB run every such comment they write."""
    out = list(sql)
    quote: str | None = None
    inside = False  # in an executed comment: its `*/` closes it
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if quote is not None:
            if c == "\\" and quote != "`":
                i += 2
                continue
            if c == quote:
                if sql.startswith(quote * 2, i):  # a doubled quote
                    i += 2
                    continue
                quote = None
            i += 1
        elif c in "'\"`":
            quote, i = c, i + 1
        elif c == "#" or (sql.startswith("--", i) and sql[i + 2 : i + 3] in ("", " ", "\t", "\n", "\r")):
            end = sql.find("\n", i)
            i = n if end < 0 else end
        elif inside and sql.startswith("*/", i):
            out[i] = out[i + 1] = " "
            inside, i = False, i + 2
        elif sql.startswith("/*", i):
            opening = _EXECUTED_COMMENT.match(sql, i)
            if opening is not None and not inside:
                out[i : opening.end()] = " " * (opening.end() - i)
                inside, i = True, opening.end()
            else:
                end = sql.find("*/", i + 2)
                i = n if end < 0 else end + 2
        else:
            i += 1
    return "".join(out)


def _looks_like_table_ddl(sql: str) -> bool:
    words = sql.upper().split()
    return len(words) >= 2 and words[0] in ("CREATE", "ALTER", "DROP", "TRUNCATE", "RENAME") and "TABLE" in words[1:4]


def _statement(sql: str, tokens: list[Token], end: int, default_db: str, shown: str) -> list[tuple[TableRef, Change]]:
    """One statement: ``tokens`` of ``sql``, whose text ends at ``end``; ``shown`` is ``sql`` as
    the protocol carried it (errors name the statement so)."""
    words = words_of(tokens[:4]) + [None] * 4
    text = shown[tokens[0].start : end].strip()
    first = words[0]
    if first == "ALTER" and words[1] == "TABLE":
        return _alter_table(sql, text, tokens, default_db)
    if first == "RENAME":
        # sqlglot's tokenizer keeps what follows RENAME as one raw string: read it again.
        rest = sql[tokens[0].end + 1 : end]
        try:
            rest_tokens = MYSQL.tokenize(rest)
        except TokenError as exc:
            raise DdlParseError(f"cannot read {text!r}: {exc}") from None
        if rest_tokens and word_of(rest_tokens[0]) in ("TABLE", "TABLES"):
            return _rename_tables(rest, text, rest_tokens[1:], default_db)
        return []  # RENAME USER
    if first == "CREATE":
        if words[1] == "TABLE":
            return _create_table(sql, text, tokens, default_db)
        return []  # TEMPORARY tables are not replicated; INDEX, DATABASE, VIEW, USER... change no table
    if first == "DROP":
        if words[1] in ("TABLE", "TABLES"):
            return [(ref, DropTable()) for ref in table_list(sql, text, tokens[2:], default_db)]
        if words[1] in ("DATABASE", "SCHEMA"):
            database = database_name(sql, text, tokens[2:])
            return [((database, ""), DropDatabase(database))]
        return []  # DROP TEMPORARY TABLE, INDEX, VIEW, USER...
    if first == "TRUNCATE":
        rest = tokens[2:] if words[1] == "TABLE" else tokens[1:]
        return [(ref, TruncateTable()) for ref in table_list(sql, text, rest, default_db)]
    if (first == "RECOVER" and words[1] == "TABLE") or (first == "FLASHBACK" and words[1] in ("TABLE", "DATABASE", "SCHEMA")):
        raise DdlParseError(f"{sql!r}: restores a dropped {words[1].lower()}'s rows {_NO_ROW_EVENTS}")  # type: ignore[union-attr]
    if first == "FLASHBACK":  # TiDB's FLASHBACK CLUSTER [TABLE ...] TO TIMESTAMP | TSO
        raise DdlParseError(f"{sql!r}: puts rows back as they were at a past time {_NO_ROW_EVENTS}")
    return []


# -- RENAME TABLE


def _rename_tables(sql: str, text: str, tokens: list[Token], default_db: str) -> list[tuple[TableRef, Change]]:
    out: list[tuple[TableRef, Change]] = []
    for pair in split_tokens(tokens, TokenType.COMMA):
        to = [i for i, t in enumerate(pair) if word_of(t) == "TO"]
        if len(to) != 1 or to[0] == 0 or to[0] == len(pair) - 1:
            raise DdlParseError(f"{text!r}: cannot read the RENAME TABLE clause {text_of(sql, pair)!r}")
        old = table_ref(sql, text_of(sql, pair[: to[0]]), default_db)
        new = table_ref(sql, text_of(sql, pair[to[0] + 1 :]), default_db)
        out.append((old, RenameTable(*new)))
    return out


# -- CREATE TABLE


def _create_table(sql: str, text: str, tokens: list[Token], default_db: str) -> list[tuple[TableRef, Change]]:
    at, if_not_exists = skip_if_exists(tokens, 2, negated=True)
    end = table_name_end(tokens, at)
    if end > len(tokens):
        raise DdlParseError(f"{text!r}: no table name")
    ref = table_ref(sql, text_of(sql, tokens[at:end]), default_db)
    rest = tokens[end:]
    like = _like_source(rest)
    if like is not None:
        return [(ref, CreateTableLike(ref, table_ref(sql, text_of(sql, like), default_db), if_not_exists))]
    if not rest or rest[0].token_type != TokenType.L_PAREN or words_of(rest[1:2])[:1] in (["SELECT"], ["WITH"], ["TABLE"], ["VALUES"]):
        raise DdlParseError(f"{text!r}: {_CREATE_SELECT}")
    close = closing_paren(rest, 0)
    if close < 0:
        raise DdlParseError(f"{text!r}: unbalanced parentheses")
    # What follows the column list is table options and partition options (their VALUES LESS
    # THAN / VALUES IN are inside parentheses), unless a query follows them.
    if _query_follows(rest[close + 1 :]):
        raise DdlParseError(f"{text!r}: {_CREATE_SELECT}")
    elements = split_tokens(rest[1:close], TokenType.COMMA)
    keys: tuple[str, ...] = ()
    columns_and_indexes = []
    for e in elements:
        table_key = _table_primary_key(sql, text, e)
        if table_key is None:
            columns_and_indexes.append(e)
        else:
            keys = table_key
    # Indexes and constraints other than the primary key change no column: sqlglot sees the columns
    # only (it knows neither TiDB's GLOBAL indexes nor its VECTOR / COLUMNAR indexes).
    elements = [e for e in columns_and_indexes if not _is_index_or_constraint(e)]
    # Column types are read from the text (see _type_span); sqlglot sees a placeholder type.
    spans = [None if words_of(e[:1])[0] in _ELEMENT_WORDS else _type_span(e, 1) for e in elements]
    types = [text_of(sql, e[span[0] : span[1]]) for e, span in zip(elements, spans) if span is not None]
    body = ", ".join(_sqlglot_text(sql, e, span) for e, span in zip(elements, spans))
    try:
        statement = sqlglot.parse_one(f"CREATE TABLE _t ({body})", read="mysql")
    except (ParseError, TokenError) as exc:
        raise DdlParseError(f"{text!r}: cannot parse the column list: {exc}") from None
    if not isinstance(statement, exp.Create) or not isinstance(statement.this, exp.Schema):
        raise DdlParseError(f"{text!r}: cannot parse the column list")
    columns: list[Column] = []
    coldefs = [e for e in statement.this.expressions if isinstance(e, exp.ColumnDef)]
    if len(coldefs) != len(types):
        raise DdlParseError(f"{text!r}: cannot tell the columns apart in the column list")
    column_types = dict(zip(map(id, coldefs), types))
    for e in statement.this.expressions:
        if isinstance(e, exp.ColumnDef):
            columns.append(_column(text, e, column_types[id(e)]))
            if _has_primary_key(e):
                keys = (e.name,)
        elif not isinstance(e, _NO_OP_ELEMENTS):
            raise DdlParseError(f"{text!r}: cannot tell what {e.sql(dialect='mysql')!r} does to the table")
    if not columns:
        raise DdlParseError(f"{text!r}: CREATE TABLE without columns")
    # MySQL's column names ignore case: PRIMARY KEY (id) over a column `ID` keys it, by its own name.
    names = {c.name.casefold(): c.name for c in columns}
    if any(k.casefold() not in names for k in keys):
        raise DdlParseError(f"{text!r}: the primary key {list(keys)} names a column the table does not have")
    keys = tuple(names[k.casefold()] for k in keys)
    out: list[tuple[TableRef, Change]] = [(ref, CreateTable(TableSchema(ref[0], ref[1], tuple(columns), keys), if_not_exists))]
    partition_by = partition_by_at(rest[close + 1 :])
    if partition_by is not None:
        out.append((ref, SetPartitioning(partitioning_clause(sql, text, rest[close + 1 + partition_by :]))))
    return out


# MySQL logs CREATE TABLE ... SELECT as written only in STATEMENT / MIXED binlog format; in ROW
# format (which every supported protocol needs) it logs the CREATE TABLE it made from the result
# -- `CREATE TABLE t (...) START TRANSACTION` since 8.0.21 -- then the rows as insert row events,
# which are applied like any. TiDB does not support the statement (MySQL compatibility, #4754).
_CREATE_SELECT = ("CREATE TABLE ... SELECT as written reaches the log only with binlog_format STATEMENT or MIXED, where "
                  "its rows are no row events, so tidelake cannot see them (with binlog_format=ROW, MySQL logs the CREATE "
                  "TABLE it generated and the rows as row events, which tidelake applies); re-create the table from a snapshot")
_QUERY_WORDS = frozenset({"SELECT", "WITH", "TABLE", "VALUES"})


def _query_follows(tail: Sequence[Token]) -> bool:
    """Whether the text after a CREATE TABLE's column list holds a query (``[IGNORE | REPLACE]
    [AS] SELECT ...``, ``(SELECT ...)``, ``TABLE t``, ``VALUES ROW(...)``) rather than only
    table options and partition options."""
    depth = 0
    for i, t in enumerate(tail):
        if t.token_type == TokenType.L_PAREN:
            if depth == 0 and words_of(tail[i + 1 : i + 2])[:1] in (["SELECT"], ["WITH"]):
                return True
            depth += 1
        elif t.token_type == TokenType.R_PAREN:
            depth -= 1
        elif depth == 0 and word_of(t) in _QUERY_WORDS:
            return True
    return False


# Index options that may follow a primary key's key parts: MySQL 8's index_option and TiDB's
# CLUSTERED / NONCLUSTERED (bare or in `/*T![clustered_index] ... */`) and GLOBAL / LOCAL.
_INDEX_OPTION_WORDS = frozenset({
    "KEY_BLOCK_SIZE", "USING", "BTREE", "HASH", "RTREE", "WITH", "PARSER", "COMMENT", "VISIBLE", "INVISIBLE",
    "ENGINE_ATTRIBUTE", "SECONDARY_ENGINE_ATTRIBUTE", "CLUSTERED", "NONCLUSTERED", "GLOBAL", "LOCAL",
})


def _table_primary_key(sql: str, text: str, element: Sequence[Token]) -> tuple[str, ...] | None:
    """The key columns of ``[CONSTRAINT [symbol]] PRIMARY KEY [name] [USING type] (key_part, ...)
    [index_option ...]`` (a CREATE TABLE element, or what follows ADD); None for other elements.

    Read from the tokens: sqlglot knows neither TiDB's CLUSTERED / NONCLUSTERED nor ASC / DESC
    in a key part."""
    open_at = next((i for i, t in enumerate(element) if t.token_type == TokenType.L_PAREN), len(element))
    head = words_of(element[:open_at])
    at = 0
    if head[:1] == ["CONSTRAINT"]:
        at = 1 if head[1:3] == ["PRIMARY", "KEY"] else 2
    if head[at : at + 2] != ["PRIMARY", "KEY"]:
        return None
    where = text_of(sql, element)
    close = closing_paren(element, open_at) if open_at < len(element) else -1
    if close < 0:
        raise DdlParseError(f"{text!r}: no key parts in {where!r}")
    names = []
    for part in split_tokens(element[open_at + 1 : close], TokenType.COMMA):
        # key_part: col_name [(length)] [ASC | DESC]; MySQL refuses a functional (expr) part in a primary key
        end = 1
        if len(part) > 1 and part[1].token_type == TokenType.L_PAREN:
            end = closing_paren(part, 1) + 1
        if end > len(part) or end <= 0 or part[0].token_type == TokenType.L_PAREN or words_of(part[end:]) not in ([], ["ASC"], ["DESC"]):
            raise DdlParseError(f"{text!r}: cannot read the key part {text_of(sql, part)!r} of {where!r}")
        names.append(part[0].text)
    if not names:
        raise DdlParseError(f"{text!r}: no key parts in {where!r}")
    options = element[close + 1 :]
    i = 0
    while i < len(options):
        word = word_of(options[i])
        if options[i].token_type in (TokenType.STRING, TokenType.NUMBER, TokenType.EQ) or word in _INDEX_OPTION_WORDS:
            i += 2 if word == "PARSER" else 1  # WITH PARSER <name>
            continue
        raise DdlParseError(f"{text!r}: cannot tell what {text_of(sql, options[i:])!r} does to the primary key {where!r}")
    return tuple(names)


def _like_source(rest: list[Token]) -> list[Token] | None:
    """The source table's tokens of ``LIKE src`` or ``(LIKE src)``."""
    if rest and word_of(rest[0]) == "LIKE":
        return rest[1:]
    if len(rest) > 2 and rest[0].token_type == TokenType.L_PAREN and word_of(rest[1]) == "LIKE" and rest[-1].token_type == TokenType.R_PAREN:
        return rest[2:-1]
    return None


def _is_index_or_constraint(tokens: Sequence[Token]) -> bool:
    """``{INDEX | KEY | UNIQUE | FULLTEXT | SPATIAL | FOREIGN | CHECK} ...``, ``CONSTRAINT [s]
    {UNIQUE | FOREIGN | CHECK} ...``, TiDB's ``{VECTOR | COLUMNAR} INDEX ...`` (the primary key
    is read apart): a column's name in these words is quoted, so it cannot start with them."""
    words = words_of(tokens[:3])
    if words[:1] == ["CONSTRAINT"]:
        words = words[1:] if words[1:2] in (["UNIQUE"], ["FOREIGN"], ["CHECK"]) else words[2:]
    return words[:1] in (["INDEX"], ["KEY"], ["UNIQUE"], ["FULLTEXT"], ["SPATIAL"], ["FOREIGN"], ["CHECK"]) or (
        words[:1] in (["VECTOR"], ["COLUMNAR"]) and words[1:2] in (["INDEX"], ["KEY"]))


# Words that start a CREATE TABLE element that is not a column.
_ELEMENT_WORDS = frozenset({
    "CONSTRAINT", "PRIMARY", "FOREIGN", "KEY", "INDEX", "UNIQUE", "FULLTEXT", "SPATIAL", "CHECK", "LIKE",
})
# Types MySQL spells in two words that sqlglot's tokenizer keeps apart.
_TWO_WORD_TYPES = frozenset({("LONG", "VARCHAR"), ("LONG", "VARBINARY"), ("NATIONAL", "VARCHAR"), ("NATIONAL", "CHAR"),
                             ("NATIONAL", "CHARACTER"), ("CHAR", "VARYING")})


def _type_span(tokens: Sequence[Token], at: int) -> tuple[int, int]:
    """Token range of the data type starting at ``at``: ``INT(11) UNSIGNED ZEROFILL``,
    ``ENUM('a','b')``, ``DOUBLE PRECISION``, ``POINT``... (MySQL's data_type, up to the attributes).

    The type is read from the statement's own text by ``parse_mysql_type``, the parser of
    the protocols' type strings, rather than from sqlglot's rendering of it, which turns
    REAL into FLOAT and does not know the spatial types.
    """
    if at >= len(tokens) or word_of(tokens[at]) is None:
        raise DdlParseError(f"no data type at {tokens[at - 1].text!r}" if at else "no data type")
    end = at + 1
    if end < len(tokens) and (word_of(tokens[at]), word_of(tokens[end])) in _TWO_WORD_TYPES:
        end += 1
    if end < len(tokens) and tokens[end].token_type == TokenType.L_PAREN:
        end = closing_paren(tokens, end) + 1
    while end < len(tokens) and word_of(tokens[end]) in ("UNSIGNED", "SIGNED", "ZEROFILL"):
        end += 1
    return at, end


def _sqlglot_text(sql: str, tokens: Sequence[Token], type_span: tuple[int, int] | None) -> str:
    """The text of ``tokens`` for sqlglot: the data type in ``type_span`` replaced by TEXT (any
    type will do: the real one is read from the text), attributes sqlglot does not know
    (``AUTO_RANDOM(5)``, ``SRID 0``) left out."""
    pieces: list[str] = []
    i = 0
    while i < len(tokens):
        if type_span is not None and i == type_span[0]:
            pieces.append("TEXT")
            i = type_span[1]
            continue
        follows = _UNKNOWN_ATTRIBUTES.get(word_of(tokens[i]) or "")
        if follows is not None and type_span is not None and i >= type_span[1]:  # in a column definition
            i += 1
            if follows == "(" and i < len(tokens) and tokens[i].token_type == TokenType.L_PAREN:
                i = closing_paren(tokens, i) + 1
            elif isinstance(follows, int):
                i += follows
            continue
        pieces.append(text_of(sql, tokens[i : i + 1]))
        i += 1
    return " ".join(pieces)


def _column(text: str, coldef: exp.ColumnDef, type_text: str) -> Column:
    nullable = not any(
        isinstance(c.kind, (exp.NotNullColumnConstraint, exp.PrimaryKeyColumnConstraint)) and not c.kind.args.get("allow_null")
        for c in coldef.constraints
    )
    try:
        column_type = column_type_of(type_text)
    except DdlParseError as exc:
        raise DdlParseError(f"{text!r}: column {coldef.name!r}: {exc}") from None
    return Column(coldef.name, column_type, nullable)


def _has_primary_key(coldef: exp.ColumnDef) -> bool:
    return any(isinstance(c.kind, exp.PrimaryKeyColumnConstraint) for c in coldef.constraints)


def _position(name: str, coldef: exp.ColumnDef) -> list[Change]:
    position = coldef.args.get("position")
    if position is None:
        return []
    where = str(position.args.get("position") or "").upper()
    if where == "FIRST":
        return [MoveColumn(name, None)]
    if where == "AFTER" and position.this is not None:
        return [MoveColumn(name, position.this.name)]
    raise DdlParseError(f"cannot read the column position {position.sql(dialect='mysql')!r}")


# -- ALTER TABLE


def _alter_table(sql: str, text: str, tokens: list[Token], default_db: str) -> list[tuple[TableRef, Change]]:
    end = table_name_end(tokens, 2)
    if end > len(tokens):
        raise DdlParseError(f"{text!r}: no table name")
    ref = table_ref(sql, text_of(sql, tokens[2:end]), default_db)
    clauses: list[list[Token]] = []
    for clause in split_tokens(tokens[end:], TokenType.COMMA):
        if clauses and continues_partition_list(clauses[-1], clause):
            clauses[-1] = clauses[-1] + clause  # `DROP PARTITION p0, p1`: the names of one clause
        else:
            clauses.append(clause)
    changes: list[Change] = []
    for clause in clauses:
        changes += _alter_clause(sql, text, clause, ref)
    # MySQL changes the columns first, then builds the indexes (a new primary key may name a
    # column added by a later clause), and renames the table last; the changes of the
    # statement all name the table by its old name.
    changes.sort(key=lambda c: 2 if isinstance(c, RenameTable) else 1 if isinstance(c, SetKeyColumns) else 0)
    # EXCHANGE PARTITION changes the other table too; MySQL allows it as the statement's only clause.
    if len(changes) > 1 and any(isinstance(c, ExchangePartition) for c in changes):
        raise DdlParseError(f"{text!r}: EXCHANGE PARTITION with other clauses, which MySQL refuses: the stream "
                            "cannot hold it as written")
    return [(ref, c) for c in changes] + [(c.table, c) for c in changes if isinstance(c, ExchangePartition)]


def _alter_clause(sql: str, text: str, clause: list[Token], ref: TableRef) -> list[Change]:
    """The changes of one ALTER TABLE clause (tokens of the statement between commas)."""
    words = words_of(clause[:5]) + [None] * 5
    # partition_options may follow the last clause without a comma: they change no rows.
    if words[:2] == ["PARTITION", "BY"]:
        return [SetPartitioning(partitioning_clause(sql, text, clause))]
    if words[:2] == ["REMOVE", "PARTITIONING"]:
        return [SetPartitioning(None)]
    for i in range(1, len(clause)):
        if words_of(clause[i : i + 2])[:2] in (["PARTITION", "BY"], ["REMOVE", "PARTITIONING"]):
            return _alter_clause(sql, text, clause[:i], ref) + _alter_clause(sql, text, clause[i:], ref)
    for (first, second), what in _ROWS_WITHOUT_EVENTS.items():
        if words[0] == first and (second is None or words[1] == second):
            raise DdlParseError(f"{text!r}: {text_of(sql, clause)!r} {what} {_NO_ROW_EVENTS}")
    if words[0] == "ALTER" and words[1] in ("CHECK", "CONSTRAINT"):
        return []  # ALTER {CHECK | CONSTRAINT} c [NOT] ENFORCED (MySQL 8.0.16)
    if words[1] == "PARTITION" and words[0] in ("ADD", "DROP", "TRUNCATE", "REORGANIZE", "COALESCE"):
        return partition_maintenance(sql, text, clause)
    if words[:2] == ["EXCHANGE", "PARTITION"]:
        return [exchange_clause(sql, text, clause, ref)]
    if words[0] == "PARTITION" or (words[0] in PARTITION_KEEPS_ROWS and words[1] == "PARTITION"):
        return []
    if words[0] == "ADD":
        keys = _table_primary_key(sql, text, clause[1:])
        if keys is not None:
            return [SetKeyColumns(keys)]
        if _is_index_or_constraint(clause[1:]):
            return []
        group = _add_group(clause)
        if group is not None:
            return _group_changes(sql, text, clause, group, ref)
    if words[0] == "RENAME" and words[1] not in ("COLUMN", "INDEX", "KEY"):
        at = 2 if words[1] in ("TO", "AS") else 1
        target = clause[at:]
        if not target or table_name_end(target, 0) != len(target):
            raise DdlParseError(f"{text!r}: cannot read the new table name in {text_of(sql, clause)!r}")
        return [RenameTable(*table_ref(sql, text_of(sql, target), ref[0]))]
    clause_text = text_of(sql, clause)
    type_at = _column_type_at(clause)
    try:
        span = _type_span(clause, type_at) if type_at is not None else None
    except DdlParseError as exc:
        raise DdlParseError(f"{text!r}: {clause_text!r}: {exc}") from None
    type_text = text_of(sql, clause[span[0] : span[1]]) if span is not None else None
    try:
        parsed = sqlglot.parse_one(f"ALTER TABLE _t {_sqlglot_text(sql, clause, span)}", read="mysql")
    except (ParseError, TokenError):
        parsed = None
    if not isinstance(parsed, exp.Alter):  # sqlglot fell back to a raw Command, or failed
        if words[0] in _OPTION_WORDS:
            return []
        raise DdlParseError(f"{text!r}: cannot tell what {clause_text!r} does to the table")
    out: list[Change] = []
    for action in parsed.args.get("actions") or []:
        out += _alter_action(text, clause_text, action, type_text)
    # parsed.args["options"] holds table options (ENGINE=, COMMENT=...): no change.
    return out


def _column_type_at(clause: list[Token]) -> int | None:
    """Where the data type starts in ``ADD [COLUMN] [IF NOT EXISTS] c type``, ``MODIFY [COLUMN] c
    type`` and ``CHANGE [COLUMN] old new type``; None for clauses that define no column."""
    words = [word_of(t) for t in clause] + [None]
    if words[0] not in ("ADD", "MODIFY", "CHANGE"):
        return None
    at = 2 if words[1] == "COLUMN" else 1
    at, _ = skip_if_exists(clause, at, negated=words[0] == "ADD")
    if words[0] == "ADD":
        if at >= len(clause) or clause[at].token_type == TokenType.L_PAREN:
            return None
        if words[at] is not None and words[at].split()[0] in _ELEMENT_WORDS | {"PARTITION"}:
            return None  # ADD INDEX / PRIMARY KEY / CONSTRAINT / PARTITION
    return at + (2 if words[0] == "CHANGE" else 1)


def _add_group(clause: list[Token]) -> list[list[Token]] | None:
    """The items of ``ADD [COLUMN] [IF NOT EXISTS] (a INT, b INT, INDEX (a))``; None for other ADDs."""
    at = 2 if len(clause) > 1 and word_of(clause[1]) == "COLUMN" else 1
    at, _ = skip_if_exists(clause, at, negated=True)
    if at >= len(clause) or clause[at].token_type != TokenType.L_PAREN or closing_paren(clause, at) != len(clause) - 1:
        return None
    return split_tokens(clause[at + 1 : -1], TokenType.COMMA)


def _group_changes(sql: str, text: str, clause: list[Token], group: list[list[Token]], ref: TableRef) -> list[Change]:
    """``ADD (a INT, b INT)`` is ``ADD a INT, ADD b INT`` (MySQL's table_element_list)."""
    if_not_exists = any(word_of(t) == "EXISTS" for t in clause[:5])
    out: list[Change] = []
    for item in group:
        prefix = "ADD IF NOT EXISTS " if if_not_exists and words_of(item[:1])[0] not in _INDEX_WORDS else "ADD "
        item_sql = prefix + text_of(sql, item)
        out += _alter_clause(item_sql, text, MYSQL.tokenize(item_sql), ref)
    return out


_INDEX_WORDS = frozenset({
    "INDEX", "KEY", "UNIQUE", "FULLTEXT", "SPATIAL", "PRIMARY", "CONSTRAINT", "FOREIGN", "CHECK",
})


def _alter_action(text: str, clause: str, action: exp.Expression, type_text: str | None) -> list[Change]:
    if isinstance(action, (exp.ColumnDef, exp.ModifyColumn)) and type_text is None:
        raise DdlParseError(f"{text!r}: cannot find the data type in {clause!r}")
    if isinstance(action, exp.ColumnDef):
        column = _column(text, action, type_text)  # type: ignore[arg-type]
        out: list[Change] = [AddColumn(column, bool(action.args.get("exists")), column_default(action, type_text))]  # type: ignore[arg-type]
        out += _position(column.name, action)
        if _has_primary_key(action):
            out.append(SetKeyColumns((column.name,)))
        return out
    if isinstance(action, exp.ModifyColumn):
        coldef = action.this
        old = action.args.get("rename_from")
        out = []
        if old is not None and old.name != coldef.name:
            out.append(RenameColumn(old.name, coldef.name))
        out.append(ChangeColumnType(coldef.name, _column(text, coldef, type_text).type))  # type: ignore[arg-type]
        out += _position(coldef.name, coldef)
        if _has_primary_key(coldef):
            out.append(SetKeyColumns((coldef.name,)))
        return out
    if isinstance(action, exp.RenameColumn):
        return [RenameColumn(action.this.name, action.args["to"].name)]
    if isinstance(action, exp.Drop):
        kind = str(action.args.get("kind") or "").upper()
        names = [t.name for t in action.args.get("tables") or []]
        if kind == "COLUMN":
            return [DropColumn(n) for n in names]
        if kind in ("INDEX", "KEY", "CONSTRAINT") and any(n.upper() == "PRIMARY" for n in names):
            return [SetKeyColumns(())]  # the primary key's index is named PRIMARY
        if kind in ("INDEX", "KEY", "CONSTRAINT", "CHECK", "FOREIGN KEY"):
            return []
        raise DdlParseError(f"{text!r}: cannot tell what {clause!r} drops")
    if isinstance(action, exp.DropPrimaryKey):
        return [SetKeyColumns(())]
    if isinstance(action, exp.AddConstraint):  # ADD PRIMARY KEY is read before sqlglot
        if not all(isinstance(e, _NO_OP_ELEMENTS) and not e.find(exp.PrimaryKey) for e in action.expressions):
            raise DdlParseError(f"{text!r}: cannot tell what {clause!r} adds")
        return []
    if isinstance(action, exp.AlterRename):
        raise DdlParseError(f"{text!r}: cannot read {clause!r}")  # RENAME [TO|AS] is read before sqlglot
    if isinstance(action, exp.AlterColumn):
        if action.args.get("dtype") is not None:
            raise DdlParseError(f"{text!r}: {clause!r} is not MySQL (change a column's type with MODIFY)")
        return []  # SET/DROP DEFAULT, SET VISIBLE/INVISIBLE
    if isinstance(action, (exp.AlterIndex, exp.RenameIndex, exp.ForceProperty)):
        return []
    raise DdlParseError(f"{text!r}: cannot tell what {clause!r} does to the table")
