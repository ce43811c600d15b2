"""One table never stops the others: tables held back at their last good W (``on_table_error``).

A run that cannot apply one table's changes -- a DDL tidelake cannot parse or Iceberg cannot
express (``DdlParseError``, ``UnsupportedSchemaChange``), a value that does not fit its column
(``UnsupportedValue``), any failure inside that table's DDL, rewrite, write or commit -- either
fails as a whole (``on_table_error = "fail"``) or, under ``"isolate"``, leaves that table out of
the run and goes on with the others:

- the table is *held* at the run's previous watermark W_prev, its last good W: none of its
  changes of the run is committed, it is not tagged at this W or any later one;
- ``<pipeline>/isolated.json`` records it (the error's type and message, the DDL and where it
  came from, the W it is held at, the interval that isolated it); every later published
  record lists it under ``isolated`` (``spark.commit.published``), and reading it at such a W fails
  with ``spark.query.read.IsolatedTable`` naming the held W;
- every later run tries it again from its held W (``spark.commit.apply`` walks forward from the
  archive as for a table behind): a version of tidelake that handles it, or ``tidelake
  repair``, replays it to the pipeline's W, and the published records of the Ws it missed
  then name it. Its changes stay in the archive meanwhile: retention keeps its held W and
  the segments a replay from it reads (``spark.maintain``).

A DDL of a run that involves an isolated table (renames it, renames onto it, copies it with
``CREATE TABLE ... LIKE``, exchanges a partition with it) isolates every table it names: a table
cannot be applied from or into one whose state is unknown. Errors that are not about one table
(the lease, storage, the catalog, an undecodable message under ``on_bad_message = "fail"``)
still fail the run.

A held table holds only itself, not its name. Renamed away or dropped while held (``RENAME TABLE
a TO c``: c is held with it; ``Isolated.renamed`` says where a went), its old name is free: a
later ``CREATE TABLE a`` (or a rename onto a) is a new table, applied and published as any other --
unless what a rename moves onto a is held itself (gh-ost's cut-over of a held table): a is held with it.
The held table's changes since its held W then reach its new name only through statements a
replay finds under the old one, which now names another table: c *stays* held
(``Isolated.stays`` says why; ``tidelake repair`` lists it) until the pipeline is rebuilt under a
new name over the same archive (README, Repairing history); a dropped one's Ws between its held
W and the drop keep it listed as isolated. A table held where it was not published under its
name -- created or renamed there in the run that isolated it -- is reported as such
(``Isolated.new_name``, ``held_phrase``), not as readable at the W before.

Whose an error is, is told by where it arises (``table_error``): whatever a table's own work
raises is that table's, whatever its class -- tidelake's typed errors and any other (a
``KeyError`` of a bug, a library's own error) -- but the failures of a service the run uses
(storage, the catalog, the lease, Spark itself: ``SERVICE_ERRORS``) and the run's own
interruptions (``the_runs``): those fail the run wherever they arise, and the next run retries.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

import sys

import orjson
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.errors import ParseError, TokenError

from cdc_codecs import DdlChange, TidelakeError
from spark.archive import layout
from spark.commit.plan import SchemaStep, TablePlan
from spark.core.keys import Order, change_order
from spark.tables.ddl_changes import Change, CreateTable, CreateTableLike, DropTable, RenameTable
from spark.archive import records
from spark.archive.records import CorruptArchiveFile
from spark.decode.effect import CorruptChangeValue
from spark.tables.updates import RowSchemaMismatch, UnsupportedSchemaChange
from spark.tables.ddl_changes import DdlParseError
from spark.tables.properties import HELD_AT, HELD_REASON
from spark.tables.schema_map import UnsupportedValue
from spark.tables import internals
from spark.archive.storage import Storage, StorageError
from spark.archive.lease import LeaseHeldError, LeaseLostError
from spark.tables.errors import CommitConflictError

FAIL, ISOLATE = "fail", "isolate"
DROPPED_AWAY = "(dropped)"  # Isolated.renamed of a table dropped while held
POLICIES = (FAIL, ISOLATE)
TableRef = tuple[str, str]

# The errors tidelake raises for what it cannot apply of one table's changes (any other error
# arising in a table's work is that table's too: ``table_error``).
TABLE_ERRORS: tuple[type[Exception], ...] = (DdlParseError, UnsupportedSchemaChange, UnsupportedValue)


def _service_errors() -> tuple[type[BaseException], ...]:
    """The failures of the services a run uses, not of a table's changes: storage and the network
    (``OSError``: pyarrow's and fsspec's file systems, ``requests``, sockets, timeouts), the
    catalog (its database, its REST server), the lease, a writer beside the run, the driver's
    memory, Spark's gateway; and an archive whose bytes are damaged (every table's source)."""
    errors: list[type[BaseException]] = [OSError, MemoryError, StorageError, LeaseHeldError, LeaseLostError,
                                         CommitConflictError, CorruptArchiveFile, CorruptChangeValue]
    try:
        from sqlalchemy import exc as sql

        errors += [sql.OperationalError, sql.InterfaceError, sql.DisconnectionError, sql.TimeoutError]
    except ImportError:  # pragma: no cover - the SQL catalog's dependency
        pass
    from pyiceberg import exceptions as ice

    errors += [ice.ServerError, ice.ServiceUnavailableError, ice.UnauthorizedError, ice.ForbiddenError,
               ice.AuthorizationExpiredError, ice.TooManyRequestsError, ice.OAuthError, ice.CommitStateUnknownException,
               ice.CommitFailedException, ice.SignError, ice.WaitingForLockException]
    try:
        from py4j.protocol import Py4JNetworkError

        errors.append(Py4JNetworkError)
    except ImportError:  # pragma: no cover - without pyspark
        pass
    return tuple(errors)


SERVICE_ERRORS = _service_errors()
_THE_RUNS = "_tidelake_the_runs"  # set on an exception the run raised itself (``the_runs``)
_TRACEBACK = "Traceback (most recent call last):"


def the_runs(hook: Callable[..., None]) -> Callable[..., None]:
    """``hook`` (a fault injection point, the lease check), whose exceptions are the run's, never
    a table's: raised inside a table's commit, they still stop the run."""
    def call(*args: Any) -> None:
        try:
            hook(*args)
        except Exception as exc:
            setattr(exc, _THE_RUNS, True)
            raise

    return call


def table_error(exc: BaseException) -> bool:
    """Whether ``exc``, raised inside one table's DDL, rewrite, write or commit, is that table's.

    Told by where it arose, not by its class: any exception there is the table's, but a
    service's (``SERVICE_ERRORS``) and the run's own (``the_runs``). On Spark an executor's
    error reaches the driver as a Py4J/PySpark error carrying the Python traceback: the class its
    last exception line names decides the same way; a Spark error without one (an executor
    lost, the context stopped) is Spark's, a service's."""
    if getattr(exc, _THE_RUNS, False) or isinstance(exc, SERVICE_ERRORS):
        return False
    if not type(exc).__module__.startswith(("py4j", "pyspark")):
        return True
    raised = executor_error(exc)
    if raised is None:
        return False
    cls = _known_class(raised[0])
    return cls is None or not issubclass(cls, SERVICE_ERRORS)


def executor_error(exc: BaseException) -> tuple[str, str] | None:
    """(class name as Python printed it, first line of the message) of the exception a Python task
    raised, out of the Spark error the driver got; None if it carries no Python traceback. The
    last traceback is the one raised (chained ones come first)."""
    text = str(exc)
    at = text.rfind(_TRACEBACK)
    if at < 0:
        return None
    for line in text[at + len(_TRACEBACK):].splitlines():
        if line and not line[0].isspace():  # frames and their source lines are indented
            name, _, message = line.partition(": ")
            return name.strip(), message.strip()
    return None


def executor_tidelake_error(exc: BaseException) -> str | None:
    """The line of a tidelake error (``TidelakeError``: a damaged or missing archive file, a value it
    refuses) that a Spark task raised, out of the Spark error the driver got: what a job prints
    for it, as for the same error raised in the driver; None for anything else."""
    if not type(exc).__module__.startswith(("py4j", "pyspark")):
        return None
    raised = executor_error(exc)
    cls = _known_class(raised[0]) if raised else None
    return raised[1] if cls is not None and issubclass(cls, TidelakeError) and raised[1] else None


def _known_class(name: str) -> type | None:
    """The exception class a traceback names, among modules already imported (a name from an error
    text never imports anything); None if unknown."""
    module, _, cls = name.rpartition(".")
    found = getattr(sys.modules.get(module or "builtins"), cls, None)
    return found if isinstance(found, type) and issubclass(found, BaseException) else None


def _error_name(exc: BaseException) -> str:
    raised = executor_error(exc) if type(exc).__module__.startswith(("py4j", "pyspark")) else None
    return raised[0].rpartition(".")[2] if raised else type(exc).__name__


def _error_message(exc: BaseException) -> str:
    raised = executor_error(exc) if type(exc).__module__.startswith(("py4j", "pyspark")) else None
    if raised:
        return raised[1]  # the Python error's own line out of an executor's traceback
    return str(exc) or repr(exc)


@dataclass(frozen=True)
class Isolated:
    """A table held at its last good W, and why."""

    database: str
    table: str
    held_at: int  # the last W the table is consistent at: not tagged at any later W
    since: str  # the interval whose run isolated it
    error: str  # the error's type: DdlParseError, UnsupportedSchemaChange, UnsupportedValue
    message: str
    ddl: str | None = None  # the statement that caused it, when a DDL did
    commit_ts: int | None = None
    position: str | None = None  # topic/partition@offset of that DDL
    involved: str | None = None  # "db.table": isolated because a DDL involves that isolated table
    # True: the table took its name after held_at (created or renamed there): not published under it at any W yet.
    new_name: bool | None = None
    # "db.table": renamed there while held, or DROPPED_AWAY: dropped while held (its name is free from then on)
    renamed: str | None = None
    stays: str | None = None  # why no replay can bring it back: it stays held (see the module's docstring)

    @property
    def ref(self) -> TableRef:
        return (self.database, self.table)

    @property
    def retryable(self) -> bool:
        """Whether a run tries it again from its held W (a version that handles it catches it up)."""
        return self.stays is None

    @property
    def name(self) -> str:
        return f"{self.database}.{self.table}"

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @staticmethod
    def from_dict(doc: Mapping[str, Any]) -> Isolated:
        """An entry as ``to_dict`` wrote it (checked as ``records.Isolated``); fields of a newer version are left out."""
        return Isolated(**{k: v for k, v in doc.items() if k in _ISOLATED_FIELDS})

    def reason(self) -> str:
        """One line: what failed, on which statement."""
        where = f" on {self.ddl!r} (commitTs {self.commit_ts}, {self.position})" if self.ddl else ""
        return f"{self.error}{where}: {self.message}"


def release_hint(entry: Mapping[str, Any]) -> str:
    """How an operator releases a table held for ``entry`` (an ``Isolated.to_dict``, as the
    published record and ``isolated.json`` keep it): what tidelake cannot apply stays in the
    archive, so the table is released by a version that applies it, which replays it from its held
    W -- never by skipping the change (a held table never serves a wrong row)."""
    held = entry.get("held_at", 0)
    replay = f"its next run (or `tidelake repair`) replays the table from W {held} to the pipeline's W"
    if entry.get("involved"):
        return f"released with {entry['involved']}, whose state this table's DDL moves: release that one"
    if entry.get("error") == UnsupportedValue.__name__:
        return (f"a value the column cannot take: if the column's type is wrong in tidelake (the README's type mapping), "
                f"a version that types it right releases it: {replay}. If upstream's own column cannot hold the value "
                "either (a DDL edited by hand), correct it upstream and re-create the table there, under a new name")
    if entry.get("error") == RowSchemaMismatch.__name__:
        return (f"rows name columns the table does not have: if a schema change is missing from the stream, a "
                f"version that follows it releases it ({replay}); a change re-sent after its table was made again "
                "(a protocol without commitTs) stays in the archive: re-create the table upstream under a new name. "
                "Rows naming a column the run renamed away and added again, without its new name, are of before or "
                f"after that DDL, which a clock derived from binlog time cannot tell: a version that tells releases "
                f"it ({replay}), or re-create the table upstream under a new name")
    return f"a tidelake version that applies the statement releases it: {replay}"


def held_phrase(entry: Mapping[str, Any]) -> str:
    """How reports say where a held table (an ``Isolated``'s dict) is readable: at its held W, or
    nowhere yet under this name."""
    held = entry["held_at"]
    if entry.get("new_name"):
        return f"held, not published under this name at any W yet (it took the name after W {held}, in interval {entry['since']})"
    return f"held at W {held}" if held else "held before its first W"


_ISOLATED_FIELDS = frozenset(f.name for f in fields(Isolated))


class CorruptIsolatedTables(CorruptArchiveFile):
    """``isolated.json`` is not the list tidelake writes."""


def statement_table(ddl: DdlChange) -> TableRef | None:
    """The table a DDL statement tidelake could not parse is about: the protocol's, or the first one
    the statement names (``ALTER / CREATE / DROP / TRUNCATE / RENAME TABLE [IF [NOT] EXISTS] name``);
    None when neither says."""
    if ddl.table:
        return (ddl.database, ddl.table)
    try:
        tokens = Dialect.get_or_raise("mysql").tokenize(ddl.sql)
        words = [t.text.upper() for t in tokens]
        at = words.index("TABLE") + 1 if "TABLE" in words[:4] else 1 if words[:1] == ["TRUNCATE"] else len(tokens)
        while at < len(tokens) and words[at] in ("IF", "NOT", "EXISTS"):
            at += 1
        end = at + 3 if at + 2 < len(tokens) and words[at + 1] == "." else at + 1
        if end > len(tokens):
            return None
        table = exp.to_table(ddl.sql[tokens[at].start:tokens[end - 1].end + 1], dialect="mysql")
    except (ParseError, TokenError, ValueError):
        return None
    return (table.db or ddl.database, table.name) if table.name else None


def published_names(storage: Storage, pipeline: str, watermark: int) -> set[TableRef]:
    """The names W's published record lists, published or isolated (none for W = 0)."""
    from spark.commit.published import read_published

    doc = read_published(storage, pipeline, watermark) if watermark else None
    return {(t["database"], t["table"]) for t in [*(doc or {}).get("tables", []), *(doc or {}).get("isolated", [])]}


def statement_tables(ddl: DdlChange) -> set[TableRef]:
    """Every table a statement tidelake could not parse moves state of, as far as its words tell:
    ``statement_table``'s, and for ``EXCHANGE PARTITION ... WITH TABLE nt`` nt too (held with it,
    never published with rows the statement moved); empty when no table can be told."""
    first = statement_table(ddl)
    out = {first} if first is not None else set()
    try:
        tokens = Dialect.get_or_raise("mysql").tokenize(ddl.sql)
    except (TokenError, ValueError):
        return out
    words = [t.text.upper() for t in tokens]
    at = next((i + 2 for i in range(len(words) - 1) if words[i:i + 2] == ["WITH", "TABLE"] and "EXCHANGE" in words[:i]), None)
    if at is not None and at < len(tokens):
        end = at + 3 if at + 2 < len(tokens) and words[at + 1] == "." else at + 1
        try:
            other = exp.to_table(ddl.sql[tokens[at].start:tokens[end - 1].end + 1], dialect="mysql")
        except (ParseError, TokenError, ValueError):
            return out
        if other.name:
            out.add((other.db or ddl.database, other.name))
    return out


def isolated_path(pipeline: str) -> str:
    return f"{layout.pipeline_root(pipeline)}/isolated.json"


def read_isolated(storage: Storage, pipeline: str) -> dict[TableRef, Isolated]:
    """The pipeline's isolated tables now (written by runs under the pipeline's lease)."""
    path = isolated_path(pipeline)
    if not storage.exists(path):
        return {}
    doc = records.read_record(storage.read(path), records.IsolatedTables, f"{storage.url}/{path}", "list of isolated tables",
                              CorruptIsolatedTables)
    entries = [Isolated.from_dict(e) for e in doc["tables"]]
    return {e.ref: e for e in entries}


def write_isolated(storage: Storage, pipeline: str, entries: Mapping[TableRef, Isolated]) -> None:
    doc = {"tables": [entries[ref].to_dict() for ref in sorted(entries)]}
    storage.write(isolated_path(pipeline), orjson.dumps(doc, option=orjson.OPT_INDENT_2))


def held_watermarks(storage: Storage, pipeline: str) -> set[int]:
    """The Ws isolated tables are held at: retention keeps them (and what a replay from them reads)."""
    return {e.held_at for e in read_isolated(storage, pipeline).values()}


class RunIsolation:
    """Which tables one interval's run leaves out.

    ``before``: the pipeline's isolated tables as the run starts. One held at the run's W_prev
    is *retried* (this interval is the next one it needs) if the run moves W at all; one held
    earlier is left out (it waits for its own earlier interval, which the walk replays first);
    one held at or after W is not isolated in this (replayed, earlier) interval. Errors of the
    run add tables.
    """

    def __init__(self, policy: str, before: Mapping[TableRef, Isolated], w_prev: int, w: int, interval: str,
                 shown: Callable[[], set[TableRef]] | None = None) -> None:
        """``shown``: the names published (or listed as isolated) at W_prev, read when a table is first
        held (``Isolated.new_name``); None: not known, nothing marked."""
        self.policy = policy
        self.before = dict(before)
        self.w_prev = w_prev
        self.interval = interval
        self._shown = shown
        self._shown_names: set[TableRef] | None = None
        # A run that does not move W applies nothing: it cannot tell whether a retried table goes through.
        self.retried = {ref for ref, e in before.items() if e.held_at == w_prev and w > w_prev and e.retryable}
        self.held = {ref: e for ref, e in before.items() if e.held_at <= w_prev and ref not in self.retried}
        self.new: dict[TableRef, Isolated] = {}
        # Held tables renamed away whose name a new table took in this run: the entry, and the order of
        # the statement after which the name is the new table's (None: from the run's start).
        self.gone: dict[TableRef, tuple[Isolated, Order | None]] = {}
        self._renamed: dict[TableRef, tuple[Order, TableRef]] = {}  # held tables the run renamed away

    def out(self, ref: TableRef, since: DdlChange | TablePlan | None = None) -> bool:
        """Whether the table under ``ref`` is held -- at statement (or plan start) ``since`` if given:
        a name a held table left is another table's once a new one took it."""
        if ref in self.gone:
            released = self.gone[ref][1]
            if isinstance(since, TablePlan):  # the held table's plan is the one that ends leaving the name
                last = since.steps[-1] if since.steps else None
                if (released is not None and isinstance(last, SchemaStep) and isinstance(last.changes[-1], RenameTable)
                        and change_order(last.ddl) <= released):  # type: ignore[arg-type, operator]
                    return True
            elif since is None or (released is not None and change_order(since) <= released):  # type: ignore[arg-type, operator]
                return True  # the held table, before it left the name
        return ref in self.held or ref in self.new

    def at_w(self) -> dict[TableRef, Isolated]:
        """The tables isolated at this run's W."""
        return {**self.held, **self.new}

    def follow(self, ddl: DdlChange, changes: Iterable[tuple[TableRef, Change]]) -> None:
        """Follow the run's statement ``ddl`` (in commit order): a held table renamed away, then a new
        table under its old name (CREATE, LIKE, a rename onto it) -- the name is free from there."""
        at = change_order(ddl)  # type: ignore[arg-type]
        for ref, change in changes:
            if isinstance(change, (RenameTable, DropTable)) and self.out(ref, ddl):
                target = (change.database, change.table) if isinstance(change, RenameTable) else None
                self._renamed[ref] = (at, target)
                entry = self.held.get(ref) or self.new.get(ref)
                if entry is not None:  # later runs know its name is free: a new table may take it
                    (self.held if ref in self.held else self.new)[ref] = dataclasses.replace(
                        entry, renamed=f"{target[0]}.{target[1]}" if target else DROPPED_AWAY)
            made = (change.database, change.table) if isinstance(change, RenameTable) else ref
            if isinstance(change, (CreateTable, CreateTableLike, RenameTable)) and made not in self.gone:
                entry = self.held.get(made) or self.new.get(made)
                renamed_before = made in self._renamed or (entry is not None and entry.renamed)
                if entry is not None and renamed_before:
                    self._release(made, entry, self._renamed[made][0] if made in self._renamed else None)
                    if isinstance(change, RenameTable) and self.out(ref, ddl):
                        # The table taking the freed name is held itself (gh-ost's cut-over of a held table:
                        # RENAME t TO _t_del, _t_gho TO t): the name is held with it. Its catalog entry is
                        # still the old held table's (a held table's renames are not applied), which the
                        # link rule cannot see past: it reads the name as the old table's at this statement.
                        self.new[made] = self._involved(made, ref, ddl)

    def _release(self, ref: TableRef, entry: Isolated, at: Order | None) -> None:
        self.held.pop(ref, None)
        self.new.pop(ref, None)
        went = entry.renamed or "?"
        left = "was dropped" if went == DROPPED_AWAY else f"was renamed to {went}"
        why = (f"{entry.name} {left} while held, and {entry.name} names a new table since: a replay by "
               f"name cannot reach {entry.name}'s statements since W {entry.held_at}; rebuild the pipeline under a new "
               "name over the same archive (README, Repairing history)")
        self.gone[ref] = (dataclasses.replace(entry, renamed=went, stays=why), at)
        for table_ref, e in [*self.held.items(), *self.new.items()]:  # what it went on as stays held too
            if e.involved == entry.name and e.stays is None:
                stays = dataclasses.replace(e, stays=why)
                (self.held if table_ref in self.held else self.new)[table_ref] = stays

    def _left(self, ref: TableRef) -> str | None:
        """Where a retried table that is held again went later (``Isolated.renamed``): a replay of an
        earlier interval does not meet that statement again, and later runs need to know."""
        prior = self.before.get(ref)
        return prior.renamed if prior is not None and ref in self.retried else None

    def _new_name(self, ref: TableRef) -> bool | None:
        if self._shown is None:
            return None
        if self._shown_names is None:
            self._shown_names = self._shown()
        return True if ref not in self._shown_names else None

    def isolate(self, refs: Iterable[TableRef], exc: BaseException, ddl: DdlChange | None = None) -> None:
        """Hold ``refs`` at W_prev for ``exc`` (re-raised under ``on_table_error = "fail"``)."""
        if self.policy != ISOLATE:
            raise exc
        position = f"{ddl.position.topic}/{ddl.position.partition}@{ddl.position.offset}" if ddl is not None else None
        for ref in sorted(refs):
            # Without a statement it is a plan's error: a plan of the held table never runs, so it is the new one's.
            if not (self.out(ref, ddl) if ddl is not None else ref in self.held or ref in self.new):
                self.new[ref] = Isolated(ref[0], ref[1], self.w_prev, self.interval, _error_name(exc), _error_message(exc),
                                         ddl.sql if ddl is not None else None, ddl.commit_ts if ddl is not None else None,
                                         position, new_name=self._new_name(ref), renamed=self._left(ref))

    def involve(self, refs: Iterable[TableRef], cause: TableRef, ddl: DdlChange) -> None:
        """Hold ``refs``: ``ddl`` involves ``cause``, an isolated table."""
        for ref in sorted(refs):
            if not self.out(ref, ddl):
                self.new[ref] = self._involved(ref, cause, ddl)

    def _involved(self, ref: TableRef, cause: TableRef, ddl: DdlChange) -> Isolated:
        first = self.new.get(cause) or self.held.get(cause) or self.gone[cause][0]
        position = f"{ddl.position.topic}/{ddl.position.partition}@{ddl.position.offset}"
        return Isolated(ref[0], ref[1], self.w_prev, self.interval, first.error,
                        f"involves {first.name}, isolated: {first.message}", ddl.sql, ddl.commit_ts,
                        position, involved=first.name, new_name=self._new_name(ref), stays=first.stays,
                        renamed=self._left(ref))

    def after(self) -> dict[TableRef, Isolated]:
        """The pipeline's isolated tables once this run is published: the retried ones that went
        through are gone (they are behind now, and the walk brings them on), and so are held tables
        whose name a new table took (what they went on as stays held)."""
        kept = {ref: e for ref, e in self.before.items() if ref not in self.retried and ref not in self.gone}
        kept.update({ref: e for ref, e in self.held.items() if ref in kept})  # marked renamed or staying in this run
        return {**kept, **self.new}


def mark_held(table: Any, entry: Isolated | None) -> None:
    """Say on the table's own metadata that its ``main`` is held (``entry``) or goes on again (None):
    other engines read ``main``, not tidelake's published records. Properties only: no snapshot."""
    if entry is None and HELD_AT not in table.properties:
        return
    with internals.transaction(table) as tx:
        if entry is None:
            tx.remove_properties(HELD_AT, HELD_REASON)
        else:
            tx.set_properties({HELD_AT: str(entry.held_at), HELD_REASON: entry.reason()})

