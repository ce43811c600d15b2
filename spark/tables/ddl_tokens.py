"""The tokens of a DDL statement, as sqlglot's MySQL tokenizer splits them: the words they spell,
parentheses and comma-separated lists, and the table and database names they hold.

Apart from the statements (``spark.tables.ddl``) and the PARTITION clauses
(``spark.tables.ddl_partitions``), which both read them: they know nothing of what a statement
means, only how its text is split.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import Token, TokenType

from spark.tables.ddl_changes import DdlParseError, TableRef

MYSQL = Dialect.get_or_raise("mysql")
_QUOTED = (TokenType.IDENTIFIER, TokenType.STRING)


def word_of(token: Token) -> str | None:
    """The keyword a token spells; None for quoted names and strings (`TABLE` is a name)."""
    return None if token.token_type in _QUOTED else " ".join(token.text.upper().split())


def words_of(tokens: Sequence[Token]) -> list[str | None]:
    """The words of ``tokens``: sqlglot reads `PARTITION BY`, `PRIMARY KEY`... as one token."""
    out: list[str | None] = []
    for t in tokens:
        w = word_of(t)
        out += [None] if w is None else w.split()
    return out


def text_of(sql: str, tokens: Sequence[Token]) -> str:
    return sql[tokens[0].start : tokens[-1].end + 1] if tokens else ""


def split_tokens(tokens: Sequence[Token], sep: TokenType) -> list[list[Token]]:
    """Split at ``sep`` outside parentheses; empty parts dropped."""
    parts: list[list[Token]] = [[]]
    depth = 0
    for t in tokens:
        if t.token_type == TokenType.L_PAREN:
            depth += 1
        elif t.token_type == TokenType.R_PAREN:
            depth -= 1
        elif t.token_type == sep and depth == 0:
            parts.append([])
            continue
        parts[-1].append(t)
    return [p for p in parts if p]


def closing_paren(tokens: Sequence[Token], open_at: int) -> int:
    depth = 0
    for i in range(open_at, len(tokens)):
        if tokens[i].token_type == TokenType.L_PAREN:
            depth += 1
        elif tokens[i].token_type == TokenType.R_PAREN:
            depth -= 1
            if depth == 0:
                return i
    return -1


def table_name_end(tokens: Sequence[Token], at: int) -> int:
    """Index just past a (possibly db-qualified) table name starting at ``at``."""
    if at + 2 < len(tokens) and tokens[at + 1].token_type == TokenType.DOT:
        return at + 3
    return at + 1


def table_ref(sql: str, name_text: str, default_db: str) -> TableRef:
    try:
        table = exp.to_table(name_text, dialect="mysql")
    except (ParseError, TokenError) as exc:
        raise DdlParseError(f"{sql!r}: cannot read the table name {name_text!r}: {exc}") from None
    if not table.name:
        raise DdlParseError(f"{sql!r}: no table name in {name_text!r}")
    return (table.db or default_db, table.name)


def skip_if_exists(tokens: Sequence[Token], at: int, negated: bool) -> tuple[int, bool]:
    """Skip ``IF [NOT] EXISTS`` at ``at``; returns the next index and whether it was there."""
    words = [word_of(t) for t in tokens[at : at + 3]]
    wanted = ["IF", "NOT", "EXISTS"] if negated else ["IF", "EXISTS"]
    if words[: len(wanted)] == wanted:
        return at + len(wanted), True
    return at, False


def database_name(sql: str, text: str, tokens: list[Token]) -> str:
    """``[IF EXISTS] name`` (DROP DATABASE)."""
    at, _ = skip_if_exists(tokens, 0, negated=False)
    if len(tokens) != at + 1 or not is_name(tokens[at]):
        raise DdlParseError(f"{text!r}: cannot read the database name {text_of(sql, tokens[at:])!r}")
    return tokens[at].text


def table_list(sql: str, text: str, tokens: list[Token], default_db: str) -> list[TableRef]:
    """``[IF EXISTS] a, db.b [RESTRICT | CASCADE]`` (DROP TABLE, TRUNCATE)."""
    at, _ = skip_if_exists(tokens, 0, negated=False)
    refs = []
    for part in split_tokens(tokens[at:], TokenType.COMMA):
        if word_of(part[-1]) in ("RESTRICT", "CASCADE"):
            part = part[:-1]
        if table_name_end(part, 0) != len(part):
            raise DdlParseError(f"{text!r}: cannot read the table name {text_of(sql, part)!r}")
        refs.append(table_ref(sql, text_of(sql, part), default_db))
    if not refs:
        raise DdlParseError(f"{text!r}: no table named")
    return refs


def is_name(token: Token) -> bool:
    """A quoted name, or a word that can be an unquoted one (MySQL: letters, digits, ``$``, ``_``)."""
    return token.token_type == TokenType.IDENTIFIER or bool(re.fullmatch(r"[\w$]+", token.text))
