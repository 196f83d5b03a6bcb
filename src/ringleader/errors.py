"""The one errors module: every failure a user can act on carries the problem and the fix.

The CLI prints ``error: <message>. To fix: <fix>`` on one line and exits with the error's
``exit_code``, as kubectl does: 2 for a usage error (bad input, nothing changed), 1 for a runtime
error (a named job or node that does not exist, a clash with existing state, a failed run). A
traceback is shown only when RINGLEADER_DEBUG=1.
"""

from __future__ import annotations


class RingleaderError(Exception):
    """Base class. ``fix`` says what the user should do; ``exit_code`` is what the CLI returns."""

    exit_code = 1

    def __init__(self, message: str, fix: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix

    def one_line(self) -> str:
        text = f"{self.message}. To fix: {self.fix}" if self.fix else self.message
        # Messages may quote what went wrong (a YAML parser's report, a name): never more than a line.
        return " ".join(text.split())


class UsageError(RingleaderError):
    """Bad input from the user: nothing was changed. Exit code 2 like click's own usage errors."""

    exit_code = 2


class NotFoundError(RingleaderError):
    """A named job, node or instance does not exist (a runtime error: exit 1, as kubectl's
    "not found")."""


class ConflictError(RingleaderError):
    """The request clashes with existing state (a duplicate job name, say): exit 1, as
    kubectl's "already exists"."""


class UnschedulableError(UsageError):
    """The job could never run on the declared cluster, however long it waited."""


class TopologyError(UsageError):
    """A topology text, matrix or preset is malformed or unknown."""


class StateError(RingleaderError):
    """The state database is corrupted or from a newer ringleader."""

    exit_code = 2


class DependencyError(UsageError):
    """A tool or package the command needs (mpirun, mpi4py, torch, CUDA) is missing."""


class BusyError(RingleaderError):
    """Another process held the state's write lock for longer than the lock timeout."""


class DiskFullError(RingleaderError):
    """No space is left where the state lives (exit code 1): free some and retry."""
