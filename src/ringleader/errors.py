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


# The packages only an extra installs (pyproject.toml's optional-dependencies), by the name they
# are imported as: their name on PyPI and the extra that brings them, so that a command run in a
# base install says what to install.
EXTRAS = {"matplotlib": ("matplotlib", "sim"), "numpy": ("numpy", "sim"), "PIL": ("Pillow", "bench"),
          "torch": ("torch", "bench"), "mpi4py": ("mpi4py", "bench"), "kubernetes": ("kubernetes", "kube"),
          "pynvml": ("nvidia-ml-py", "nvml")}  # fmt: skip


def missing_extra(exc: ModuleNotFoundError) -> DependencyError | None:
    """The one line for a package an extra installs that is not installed here (None for any
    other missing module: that is a broken install, not a choice of extras)."""
    found = EXTRAS.get((exc.name or "").partition(".")[0])
    if found is None:
        return None
    package, extra = found
    return DependencyError(f"this command needs {package}, which is not installed",
                           f"pip install 'ringleader[{extra}]'")  # fmt: skip
