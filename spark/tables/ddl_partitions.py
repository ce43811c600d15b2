"""The PARTITION clauses of CREATE and ALTER TABLE: ``PARTITION BY`` (the partitioning and its
bounds, ``spark.tables.partitioning``), the partition maintenance of ALTER TABLE (``ADD``, ``DROP``,
``TRUNCATE``, ``COALESCE``, ``REORGANIZE PARTITION``) and ``EXCHANGE PARTITION ... WITH TABLE``.

Apart from the statement parser (``spark.tables.ddl``, which says which clause is one of these and
what the statement's changes are): MySQL's and TiDB's partition grammar is a language of its own
(methods, bounds, value lists, partition counts).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from sqlglot.tokens import Token, TokenType

from spark.tables.ddl_changes import (
    AddPartitions,
    Change,
    CoalescePartitions,
    DdlParseError,
    DropPartitions,
    ExchangePartition,
    ReorganizePartitions,
    TableRef,
    TruncatePartitions,
)
from spark.tables.ddl_tokens import (
    closing_paren,
    is_name,
    split_tokens,
    table_name_end,
    table_ref,
    text_of,
    word_of,
    words_of,
)
from spark.tables.partitioning import MAXVALUE, NULL, Literal, PartitionDef, Partitioning

# Partition maintenance that keeps every row and every bound: `<word> PARTITION ...` (LAST: TiDB's
# INTERVAL partitioning, whose partitions are not listed).
PARTITION_KEEPS_ROWS = frozenset({
    "ANALYZE", "CHECK", "LAST", "OPTIMIZE", "REBUILD", "REPAIR",
})
# Partition maintenance whose clause lists partition names: `DROP PARTITION p0, p1` is one clause.
_PARTITION_LISTS = PARTITION_KEEPS_ROWS | {"DROP", "TRUNCATE", "REORGANIZE", "DISCARD", "IMPORT"}


def continues_partition_list(previous: list[Token], clause: list[Token]) -> bool:
    """Whether ``clause`` (after a comma) goes on naming the partitions of ``previous``:
    ``DROP PARTITION p0, p1``, ``REORGANIZE PARTITION p0, p1 INTO (...)``."""
    words = words_of(previous[:2])
    return (words[:1] != [None] and words[0] in _PARTITION_LISTS and words[1:2] == ["PARTITION"]
            and "INTO" not in words_of(previous) and is_name(clause[0])
            and (len(clause) == 1 or word_of(clause[1]) in ("INTO", "TABLESPACE")))


def partition_maintenance(sql: str, text: str, clause: list[Token]) -> list[Change]:
    """``ADD PARTITION (...)``, ``DROP PARTITION names``, ``TRUNCATE PARTITION names | ALL``,
    ``REORGANIZE PARTITION [names INTO (...)]`` (MySQL 15.1.9.1 ALTER TABLE Partition Operations)."""
    verb = words_of(clause[:1])[0]
    rest = clause[1:] if len(words_of(clause[:1])) == 2 else clause[2:]  # `ADD PARTITION` may be one token
    where = text_of(sql, clause)
    if verb == "ADD":
        if rest and rest[0].token_type == TokenType.L_PAREN and closing_paren(rest, 0) == len(rest) - 1:
            return [AddPartitions(_partition_defs(sql, text, rest[1:-1]))]
        count = _partitions_count(rest)
        if count is None:
            raise DdlParseError(f"{text!r}: cannot read the partitions added in {where!r}")
        return [AddPartitions((), count)]  # ADD PARTITION PARTITIONS n: HASH / KEY, rows move between partitions
    if verb == "COALESCE":
        if len(rest) != 1 or not rest[0].text.isdigit():
            raise DdlParseError(f"{text!r}: cannot read the number of partitions in {where!r}")
        return [CoalescePartitions(int(rest[0].text))]
    into = next((i for i, t in enumerate(rest) if word_of(t) == "INTO"), len(rest))
    names = rest[:into]
    if not all(is_name(t) for t in names) or (verb != "REORGANIZE" and not names):
        raise DdlParseError(f"{text!r}: cannot read the partition names in {where!r}")
    listed = tuple(t.text for t in names)
    if verb == "TRUNCATE":
        return [TruncatePartitions(None if [n.upper() for n in listed] == ["ALL"] else listed)]
    if verb == "DROP":
        return [DropPartitions(listed)]
    if not listed:
        return []  # REORGANIZE PARTITION (HASH / KEY): rows stay
    defs = rest[into + 1 :]
    if not defs or defs[0].token_type != TokenType.L_PAREN or closing_paren(defs, 0) != len(defs) - 1:
        raise DdlParseError(f"{text!r}: cannot read the new partitions in {where!r}")
    return [ReorganizePartitions(listed, _partition_defs(sql, text, defs[1:-1]))]


def exchange_clause(sql: str, text: str, clause: list[Token], ref: TableRef) -> ExchangePartition:
    """``EXCHANGE PARTITION p WITH TABLE nt [{WITH | WITHOUT} VALIDATION]`` (MySQL 26.3.3)."""
    words = words_of(clause) + [None] * 4
    where = text_of(sql, clause)
    if len(clause) < 5 or not is_name(clause[2]) or words[3:5] != ["WITH", "TABLE"]:
        raise DdlParseError(f"{text!r}: cannot read the partition and table in {where!r}")
    end = table_name_end(clause, 5)
    tail = words[end:len(clause)]
    if end > len(clause) or tail not in ([], ["WITH", "VALIDATION"], ["WITHOUT", "VALIDATION"]):
        raise DdlParseError(f"{text!r}: cannot read the table in {where!r}")
    return ExchangePartition(ref, clause[2].text, table_ref(sql, text_of(sql, clause[5:end]), ref[0]), tail[:1] != ["WITHOUT"])


def partition_by_at(tokens: Sequence[Token]) -> int | None:
    """Where ``PARTITION BY`` starts outside parentheses."""
    depth = 0
    for i, t in enumerate(tokens):
        if t.token_type == TokenType.L_PAREN:
            depth += 1
        elif t.token_type == TokenType.R_PAREN:
            depth -= 1
        elif depth == 0 and words_of(tokens[i : i + 2])[:2] == ["PARTITION", "BY"]:
            return i
    return None


def partitioning_clause(sql: str, text: str, tokens: Sequence[Token]) -> Partitioning:
    """``PARTITION BY {[LINEAR] HASH (expr) | [LINEAR] KEY [ALGORITHM = n] (cols) | {RANGE | LIST}
    {(expr) | COLUMNS (cols)}} [PARTITIONS n] [SUBPARTITION BY ...] [(partition_definition, ...)]``,
    and TiDB's ``INTERVAL (...)`` (MySQL 15.1.20 partition_options)."""
    where = text_of(sql, tokens)
    at = 1 if words_of(tokens[:1])[:2] == ["PARTITION", "BY"] else 2
    linear = word_of(tokens[at]) == "LINEAR"
    if linear:
        at += 1
    method = word_of(tokens[at]) if at < len(tokens) else None
    if method not in ("HASH", "KEY", "RANGE", "LIST"):
        raise DdlParseError(f"{text!r}: cannot read the partitioning method in {where!r}")
    at += 1
    if method == "KEY" and at < len(tokens) and word_of(tokens[at]) == "ALGORITHM":
        at += 3  # ALGORITHM = 1 | 2
    columns_listed = method == "KEY"
    if method in ("RANGE", "LIST") and at < len(tokens) and word_of(tokens[at]) == "COLUMNS":
        columns_listed, at = True, at + 1
    close = closing_paren(tokens, at) if at < len(tokens) and tokens[at].token_type == TokenType.L_PAREN else -1
    if close < 0:
        raise DdlParseError(f"{text!r}: cannot read the partitioning expression in {where!r}")
    inner = tokens[at + 1 : close]
    if columns_listed:
        parts = split_tokens(inner, TokenType.COMMA)
        if not all(len(p) == 1 and is_name(p[0]) for p in parts):
            raise DdlParseError(f"{text!r}: cannot read the partitioning columns in {where!r}")
        columns = tuple(p[0].text for p in parts)
    else:
        columns = (inner[0].text,) if len(inner) == 1 and is_name(inner[0]) else ()
    function = None
    if (len(inner) == 4 and word_of(inner[0]) in ("YEAR", "TO_DAYS") and inner[1].token_type == TokenType.L_PAREN
            and is_name(inner[2]) and inner[3].token_type == TokenType.R_PAREN):
        columns, function = (inner[2].text,), word_of(inner[0])
    partitions = None
    rest = tokens[close + 1 :]
    group = next((i for i, t in enumerate(rest) if t.token_type == TokenType.L_PAREN and words_of(rest[i + 1 : i + 2]) == ["PARTITION"]), None)
    if method in ("RANGE", "LIST") and "INTERVAL" not in words_of(rest):
        if group is None:
            raise DdlParseError(f"{text!r}: {method} partitioning without partition definitions in {where!r}")
        partitions = _partition_defs(sql, text, rest[group + 1 : closing_paren(rest, group)])
    elif method in ("HASH", "KEY"):
        # Named by the statement, or PARTITIONS n (default 1) named p0 ... (MySQL 15.1.20 partition_options).
        count = _partitions_count(rest[:group])
        partitions = (_partition_defs(sql, text, rest[group + 1 : closing_paren(rest, group)]) if group is not None
                      else tuple(PartitionDef(f"p{i}") for i in range(count if count is not None else 1)))
    return Partitioning(method, text_of(sql, inner), columns, partitions, function, linear)


def _partitions_count(tokens: Sequence[Token]) -> int | None:
    """``n`` of ``PARTITIONS n`` outside parentheses (not ``SUBPARTITIONS n``); None without."""
    words = words_of(tokens)
    at = next((i for i, w in enumerate(words) if w == "PARTITIONS"), None)
    if at is None or at + 1 >= len(tokens) or not tokens[at + 1].text.isdigit():
        return None
    return int(tokens[at + 1].text)


def _partition_defs(sql: str, text: str, tokens: Sequence[Token]) -> tuple[PartitionDef, ...]:
    """``PARTITION name [VALUES {LESS THAN {(values) | MAXVALUE} | IN (values)} | DEFAULT] [options]
    [(subpartitions)], ...``"""
    out = []
    for part in split_tokens(tokens, TokenType.COMMA):
        if words_of(part[:1]) != ["PARTITION"] or len(part) < 2 or not is_name(part[1]):
            raise DdlParseError(f"{text!r}: cannot read the partition definition {text_of(sql, part)!r}")
        name, words = part[1].text, words_of(part[2:5])
        if words[:3] == ["VALUES", "LESS", "THAN"]:
            bound = part[5:6] if word_of(part[5]) == "MAXVALUE" else _paren_items(sql, text, part, 5)[0]
            out.append(PartitionDef(name, less_than=tuple(_literal(sql, b) for b in split_tokens(bound, TokenType.COMMA))))
        elif words[:2] == ["VALUES", "IN"]:
            values = []
            for item in split_tokens(_paren_items(sql, text, part, 4)[0], TokenType.COMMA):
                is_tuple = item[0].token_type == TokenType.L_PAREN and closing_paren(item, 0) == len(item) - 1
                values.append(tuple(_literal(sql, v) for v in split_tokens(item[1:-1], TokenType.COMMA)) if is_tuple else (_literal(sql, item),))
            if [v for v in values if v == (("default",),)]:
                out.append(PartitionDef(name, default=True))
            else:
                out.append(PartitionDef(name, values_in=tuple(values)))
        elif words[:1] == ["DEFAULT"]:  # TiDB's ``PARTITION p DEFAULT``, the same as ``VALUES IN (DEFAULT)``
            out.append(PartitionDef(name, default=True))
        else:
            out.append(PartitionDef(name))  # HASH / KEY: named, no bounds
    return tuple(out)


def _paren_items(sql: str, text: str, part: Sequence[Token], at: int) -> tuple[Sequence[Token], int]:
    """The tokens inside the parentheses opening at ``part[at]``, and the index past them."""
    close = closing_paren(part, at) if at < len(part) and part[at].token_type == TokenType.L_PAREN else -1
    if close < 0:
        raise DdlParseError(f"{text!r}: cannot read the values of {text_of(sql, part)!r}")
    return part[at + 1 : close], close + 1


def _literal(sql: str, tokens: Sequence[Token]) -> Literal:
    """A partition bound or list value: an integer, a string, NULL, MAXVALUE, DEFAULT, or an
    expression kept as text (not computed)."""
    words = words_of(tokens)
    if len(tokens) == 1 and words[0] in ("MAXVALUE", "NULL", "DEFAULT"):
        return MAXVALUE if words[0] == "MAXVALUE" else NULL if words[0] == "NULL" else ("default",)
    if len(tokens) == 1 and tokens[0].token_type == TokenType.STRING:
        return ("str", tokens[0].text)
    number = "".join(t.text for t in tokens)
    if re.fullmatch(r"[-+]?\d+", number) and all(t.token_type in (TokenType.NUMBER, TokenType.DASH, TokenType.PLUS) for t in tokens):
        return ("int", number)
    return ("expr", text_of(sql, tokens))
