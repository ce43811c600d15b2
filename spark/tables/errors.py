"""Errors of the executor-rewrite, driver-commit data plane."""

from __future__ import annotations

from cdc_codecs import TidelakeError


class CommitConflictError(TidelakeError):
    """The branch moved between planning and commit: another writer committed in between.

    The plan (which files to remove, what they held) is stale; the caller re-plans from the
    new head. Nothing was committed.
    """

    def __init__(self, table: str, branch: str, expected: int | None, found: int | None) -> None:
        self.table, self.branch, self.expected, self.found = table, branch, expected, found
        super().__init__(
            f"{table}: branch {branch!r} moved while the change was planned: expected snapshot {expected}, found {found}"
        )


class OverwriteRejected(TidelakeError):
    """pyiceberg refused the overwrite itself (e.g. a removed file is not live in the branch head)."""


class DeleteFilesPresent(TidelakeError):
    """The snapshot holds delete files (written by another engine); a file rewrite that ignores them
    would bring deleted rows back."""


class LayoutUnavailable(TidelakeError):
    """A table layout this installation cannot write (bucket transforms need pyiceberg-core)."""


class InternalsChanged(TidelakeError):
    """The installed pyiceberg no longer offers what spark/tables/internals.py needs."""
