"""Every RINGLEADER_* setting in one place: its type, range, default and what it does.

The CLI checks them all before any command runs (``check_all``): a value out of its range, of
the wrong type, ``inf`` or ``nan`` is one line naming the variable and what it accepts (exit 2),
never a traceback from deep inside the command, and never silently replaced by the default.
Readers use the accessors (``number``, ``integer``, ``text``), which check the same way, so the
Python API refuses the same values. Variables ringleader sets for ranks (RINGLEADER_JOB,
RINGLEADER_INSTANCE, ...) are outputs, not settings, and are not read here.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from ringleader.errors import UsageError

ENGINE_NAMES = ("embedded", "kubernetes", "slurm")  # engines.ENGINES must list the same (a test checks)
CRASH_POINTS = ("submit-committed", "delete-requested")
PATH_MAX = 4096


@dataclass(frozen=True)
class Setting:
    """One variable. ``kind`` is "number" (a finite float), "integer", or "text"; numbers are
    within [low, high]; text matches ``pattern`` (a full match) when one is given, or is one of
    ``choices``. An unset or empty variable means ``default`` (None: the reader's own default,
    said in ``doc``)."""

    name: str
    kind: str
    doc: str
    default: float | int | str | None = None
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()
    pattern: str = ""
    accepts: str = ""  # what the error says it accepts, when a pattern says it poorly

    def describe(self) -> str:
        """What the variable accepts, in words."""
        if self.choices:
            return "one of " + ", ".join(self.choices)
        if self.kind == "number":
            return f"a number of seconds from {self.low:g} to {self.high:g}"
        if self.kind == "integer":
            return f"a whole number from {self.low:g} to {self.high:g}"
        return self.accepts or "text"


SETTINGS: dict[str, Setting] = {
    s.name: s
    for s in (
        Setting("RINGLEADER_HOME", "text", "the embedded engine's state folder (default ~/.ringleader)",
                pattern=rf"[^\n]{{1,{PATH_MAX}}}", accepts=f"a folder path of at most {PATH_MAX} characters"),
        Setting("RINGLEADER_ENGINE", "text", "the engine job commands use (default: `ringleader engine use`'s, "
                "else embedded)", choices=ENGINE_NAMES),
        Setting("RINGLEADER_LOCK_TIMEOUT_S", "number", "how long a write waits for the state's lock",
                default=30.0, low=0.1, high=86400.0),
        Setting("RINGLEADER_GRACE_S", "number", "how long a job's processes get between SIGTERM and SIGKILL when it "
                "is stopped; read at submit and kept with the job",
                default=5.0, low=0.0, high=3600.0),
        Setting("RINGLEADER_PREEMPT_MIN_RUN_S", "number", "the least a job runs after its (re)start before the "
                "queue may stop it for queue order or fair share (Slurm's PreemptExemptTime); read by each pass of "
                "the queue", default=1800.0, low=1.0, high=7 * 86400.0),
        Setting("RINGLEADER_LEASE_S", "number", "how long the state folder's agent may go without a heartbeat "
                "before a command or its standby takes it for stuck, kills it and replaces it", default=10.0,
                low=3.0, high=86400.0),
        Setting("RINGLEADER_MAX_PROCS", "integer", "the most processes one embedded job may run on this host "
                "(default max(64, 8 x CPU cores))", low=1, high=1_000_000),
        Setting("RINGLEADER_DEBUG", "text", "1: show a traceback instead of the one-line error", default="0",
                choices=("0", "1")),
        Setting("RINGLEADER_CRASH_AT", "text", "testing hook: kill the command at this point (see "
                "engines/embedded/faults.py)", choices=CRASH_POINTS),
        Setting("RINGLEADER_SLURM_PARTITION", "text", "the Slurm partition jobs run in (default: Slurm's)",
                pattern=r"[A-Za-z0-9_.-]{1,256}", accepts="a Slurm partition name (letters, digits, _ . -)"),
        Setting("RINGLEADER_SLURM_CLUSTER", "text", "ringleader's cluster file for the Slurm cluster "
                "(default <home>/slurm/cluster.yaml)", pattern=rf"[^\n]{{1,{PATH_MAX}}}",
                accepts=f"a file path of at most {PATH_MAX} characters"),
        Setting("RINGLEADER_KUBE_CONTEXT", "text", "the kubeconfig context (default: the current one)",
                pattern=r"[^\s]{1,253}", accepts="a kubeconfig context name (no spaces, at most 253 characters)"),
        Setting("RINGLEADER_KUBE_SERVER", "text", "an API server URL to use directly (`kubectl proxy`)",
                pattern=r"https?://[^\s]{1,2040}", accepts="an http:// or https:// URL"),
        Setting("RINGLEADER_KUBE_NAMESPACE", "text", "the namespace of jobs (default: the context's, else default)",
                pattern=r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?",
                accepts="a namespace name (DNS-1123 label: a-z, 0-9 and -, at most 63 characters)"),
        Setting("RINGLEADER_BENCH_CORRUPT", "text", "testing hook: rank RANK plants one wrong value at INDEX in "
                "`bench allreduce`", pattern=r"[0-9]{1,9}(:[0-9]{1,12})?", accepts="RANK or RANK:INDEX"),
    )
}  # fmt: skip


def _raw(name: str, environ: Mapping[str, str] | None) -> str:
    if name not in SETTINGS:  # a reader naming a variable this table does not: a bug, not input
        raise KeyError(f"{name} is not a ringleader setting")
    return (os.environ if environ is None else environ).get(name, "")


def _refuse(setting: Setting, value: str, why: str = "") -> UsageError:
    shown = value if len(value) <= 60 else value[:57] + "..."
    return UsageError(
        f"{setting.name}={shown!r} is not valid{f' ({why})' if why else ''}: it takes {setting.describe()}",
        f"set {setting.name} to {setting.describe()}, or unset it for the default",
    )


def number(name: str, environ: Mapping[str, str] | None = None) -> float:
    """A finite number within the setting's range, or its default."""
    setting, value = SETTINGS[name], _raw(name, environ)
    if not value:
        assert isinstance(setting.default, float)
        return setting.default
    try:
        parsed = float(value)
    except ValueError:
        raise _refuse(setting, value, "not a number") from None
    assert setting.low is not None and setting.high is not None
    if not math.isfinite(parsed) or not setting.low <= parsed <= setting.high:
        raise _refuse(setting, value, "out of range")
    return parsed


def integer(name: str, environ: Mapping[str, str] | None = None) -> int | None:
    """A whole number within the setting's range; None when unset (the reader's default)."""
    setting, value = SETTINGS[name], _raw(name, environ)
    if not value:
        return None
    if not re.fullmatch(r"[+-]?[0-9]{1,30}", value.strip()):
        raise _refuse(setting, value, "not a whole number")
    parsed = int(value)
    assert setting.low is not None and setting.high is not None
    if not setting.low <= parsed <= setting.high:
        raise _refuse(setting, value, "out of range")
    return parsed


def text(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The setting's text as given (one of its choices, or matching its pattern); its default
    (None unless the table gives one) when unset or empty."""
    setting, value = SETTINGS[name], _raw(name, environ)
    if not value:
        return setting.default if isinstance(setting.default, str) else None
    if setting.choices and value not in setting.choices:
        raise _refuse(setting, value)
    if setting.pattern and not re.fullmatch(setting.pattern, value):
        raise _refuse(setting, value)
    return value


def debug() -> bool:
    """RINGLEADER_DEBUG=1. Never raises: the error handler itself asks."""
    return os.environ.get("RINGLEADER_DEBUG") == "1"


def check_all(environ: Mapping[str, str] | None = None) -> None:
    """Every setting that is set, checked: the first bad one is the UsageError."""
    for setting in SETTINGS.values():
        {"number": number, "integer": integer, "text": text}[setting.kind](setting.name, environ)
