"""Stages 4 and 5 from the driver: every table's plan committed, in rounds, one table's failure holding that table.

A round advances every unfinished plan to its next data step (schema changes staged, catalog
I/O, side by side in threads), then the executors rewrite all of those tables in one job
(``Fold.rewrite``), and the plans go on with their files to the next data step or their commit.
Most runs take one round: a Spark job per run, not per table. Plans that rename or copy a table
(or exchange a partition with one) read or make another plan's table: they commit one by one, in
plan order.

The run's DDL that move state between tables (``links``) tie those tables' fates: a table held
(``spark.commit.isolation``) holds every table a DDL of the run links to it, to a fixpoint.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from cdc_codecs import DdlChange
from spark.commit.isolation import ISOLATE, RunIsolation, statement_tables, table_error
from spark.commit.plan import LINKING, SchemaStep, TablePlan, ddl_changes, linked_tables
from spark.commit.table import RunContext, TableCommitter
from spark.write.plane import FillRequest, Fold, RewriteRequest
from spark.write.rewrite import FileRewrite

# Plans advanced side by side between rewrite rounds: what a plan does between two rewrites is
# catalog I/O (loading, creating, committing tables), so threads overlap it.
COMMIT_THREADS = 4

Links = list[tuple[DdlChange, set[tuple[str, str]]]]


def ddl_links(ddls: list[DdlChange], isolation: RunIsolation) -> tuple[Links, list[DdlChange]]:
    """The tables each of the run's DDL moves state between (a rename's old and new name, a copy
    and its source, an exchange's two tables), and the DDL that parse. A DDL that does not parse
    isolates the tables it names."""
    linked: Links = []
    parsed = []
    for e in ddls:
        try:
            changes = ddl_changes(e)
        except Exception as exc:  # DdlParseError, or any other failure of this statement's parse
            refs = statement_tables(e)
            if not refs or not table_error(exc):
                raise  # which table it is about is unknown: nothing to hold back
            isolation.isolate(refs, exc, e)
            continue
        parsed.append(e)
        isolation.follow(e, changes)
        for ref, change in changes:
            if refs := linked_tables(ref, change):
                linked.append((e, refs))
    involve(linked, isolation)
    return linked, parsed


def involve(linked: Links, isolation: RunIsolation) -> None:
    """A DDL of the run that moves state from or into an isolated table isolates the other table too
    (to a fixpoint): neither can be applied from or into a state the run does not know."""
    changed = True
    while changed:
        changed = False
        for e, refs in linked:
            out = sorted(r for r in refs if isolation.out(r, e))
            if out and len(out) < len(refs):
                isolation.involve(refs, out[0], e)
                changed = True


def _cause(plan: TablePlan, exc: BaseException) -> DdlChange | None:
    """The plan's DDL a commit error names (UnsupportedSchemaChange quotes its statement)."""
    return next((s.ddl for s in plan.steps if isinstance(s, SchemaStep) and repr(s.ddl.sql) in str(exc)), None)


def commit_plans(committer: TableCommitter, plans: list[TablePlan], run: RunContext, fold: Fold,
                 step: Callable[[str], None], progress: Callable[[str, int, int], None],
                 isolation: RunIsolation, links: Links, replay: bool = False) -> None:
    """Every table's plan, committed in rounds (see the module's docstring).

    A plan that fails with one table's error (``spark.commit.isolation.table_error``) isolates its table
    and those a DDL of the run links to it (or fails the run, as ``on_table_error`` says); its
    transaction is not committed, and the other plans go on.

    ``replay``: W is published already and ``plans`` are only those of tables behind it (brought
    from an isolated table's held W): the run that published W committed the others and stamped
    them, and those stamps say nothing about these plans."""

    def isolate(plan: TablePlan, exc: BaseException) -> None:
        isolation.isolate({plan.ref}, exc, _cause(plan, exc))
        involve(links, isolation)

    progress("commit", 0, len(plans))
    # Plans that rename or copy tables: a later plan's failure may isolate a table committed before it
    # (``involve``), which must then carry no tag of W, so their tables are tagged after all commits.
    linked = any(isinstance(c, LINKING) for p in plans for s in p.steps
                 if isinstance(s, SchemaStep) for c in s.changes)
    if linked or len(plans) < 2:
        # A retry skips what its earlier attempt committed: a plan's table may have been renamed
        # since, and another table given its name (commit.TableCommitter.resume_from).
        resume = committer.resume_from(run) if linked and not replay else -1
        for i, plan in enumerate(plans):
            if plan.sequence >= resume:
                if not isolation.out(plan.ref, plan):
                    try:
                        committer.commit_plan(plan, run, fold, tag=not linked)
                    except Exception as exc:
                        if not table_error(exc):
                            raise
                        isolate(plan, exc)
                step(f"committed:{i}")
            progress("commit", i + 1, len(plans))
        return
    # No plan renames or copies a table, so no later plan's failure can isolate a table committed
    # before it: each commit tags its table wm_<W> as well (commit.table._stage_tag).
    steps = {i: committer.commit_steps(plan, run, fold, tag=True) for i, plan in enumerate(plans)
             if not isolation.out(plan.ref, plan)}
    sent: dict[int, list[FileRewrite] | None] = dict.fromkeys(steps)
    done = len(plans) - len(steps)
    failed: dict[int, BaseException] = {}

    def advance(i: int) -> RewriteRequest | FillRequest | None:
        """Plan ``i`` up to its next data step's request; None once it is committed (or failed)."""
        try:
            return steps[i].send(sent[i])
        except StopIteration:
            step(f"committed:{i}")
            return None
        except Exception as exc:
            if not table_error(exc):
                raise
            failed[i] = exc
            return None

    with ThreadPoolExecutor(max_workers=COMMIT_THREADS, thread_name_prefix="tidelake-commit") as pool:
        while sent:
            requests = {}
            # The first failure stops the run; plans already advancing finish their step.
            for i, request in zip(list(sent), pool.map(advance, list(sent))):
                if request is None:
                    done += 1
                    progress("commit", done, len(plans))
                else:
                    requests[i] = request
            for i in sorted(failed):
                isolate(plans[i], failed.pop(i))
            try:
                rewrites = fold.rewrite(list(requests.values())) if requests else []
            except Exception as exc:
                if not table_error(exc) or isolation.policy != ISOLATE:
                    raise
                rewrites = _rewrite_each(fold, requests, lambda i, e: isolate(plans[i], e))
                for i in [i for i, r in zip(requests, rewrites) if r is None]:
                    steps[i].close()  # its transaction is never committed
                    done += 1
                    progress("commit", done, len(plans))
            sent = {i: r for i, r in zip(requests, rewrites) if r is not None}


class TimedRewrites:
    """``fold`` whose ``rewrite`` calls add their seconds to ``stages["rewrite"]``: the part of
    "commit and tag" the executors spend rewriting files (the rest is the driver's catalog work)."""

    def __init__(self, fold: Fold, stages: dict[str, float]) -> None:
        self._fold, self._stages = fold, stages
        stages.setdefault("rewrite", 0.0)

    def rewrite(self, requests: Any) -> list[list[FileRewrite]]:
        started = time.perf_counter()
        try:
            return self._fold.rewrite(requests)
        finally:
            self._stages["rewrite"] += time.perf_counter() - started

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fold, name)


def _rewrite_each(fold: Fold, requests: dict[int, RewriteRequest],
                  isolate: Callable[[int, BaseException], None]) -> list[list[FileRewrite] | None]:
    """A round's rewrites one request at a time, after the round failed on one table's values:
    each request that fails alone isolates its plan (None in its place)."""
    out: list[list[FileRewrite] | None] = []
    for i, request in requests.items():
        try:
            out.append(fold.rewrite([request])[0])
        except Exception as exc:
            if not table_error(exc):
                raise
            isolate(i, exc)
            out.append(None)
    return out
