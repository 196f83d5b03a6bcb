"""Processes by (pid, start time), so a reused PID is never mistaken for ours; stopping them."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterable

from ringleader import settings
from ringleader.runtime.rank import descendants, start_time

__all__ = ["alive", "find_by_args", "grace_seconds", "signal_proc", "start_time", "stop_all", "terminate"]


def alive(pid: int | None, started: int | None) -> bool:
    """True if ``pid`` runs and is the same process that started at ``started``."""
    if not pid:
        return False
    now = start_time(pid)
    return now is not None and (started is None or now == started)


def signal_proc(pid: int, started: int | None, sig: int) -> None:
    """Send ``sig`` to the process (and to its process group when it leads one); never to a
    process whose start time is unknown (its pid may have been reused by anyone)."""
    if started is None or not alive(pid, started):
        return
    try:
        if os.getpgid(pid) == pid and pid != os.getpgrp():
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop_all(
    procs: Iterable[tuple[int, int | None]], grace_s: float, settled: Callable[[], bool] | None = None,
    told: Iterable[tuple[int, int | None]] | None = None,
) -> None:
    """Stop processes the way training programs expect (as Slurm, mpirun and torchrun do):
    SIGTERM once, up to ``grace_s`` seconds to checkpoint and exit, then SIGKILL to whatever is
    left, every descendant found before the first signal or at the end of the grace included (one
    that left the process group with setsid too: the rank wrapper is a subreaper, so its program's
    orphans stay its own).

    SIGTERM goes to ``told`` (default: the listed processes no other listed one is an ancestor
    of): the rank wrappers and launchers, never a wrapper's program. A rank wrapper passes the first stop
    it gets to its program and drops any later one, so each program gets SIGTERM exactly once (a
    second would interrupt its handler while it writes a checkpoint) even when its stop also
    comes through mpirun. The supervisor tells a local rank under mpirun directly too: an mpirun
    that is aborting (a rank failed) forwards nothing and signals its ranks only after its own
    kill timeout. ``grace_s`` <= 0 is
    SIGKILL at once (`delete --now`). ``settled``: the grace ends early once it says so (every
    rank of an mpirun job ended: mpirun itself would sit out its own kill timeout)."""
    listed = list(dict.fromkeys((pid, st) for pid, st in procs if st is not None and alive(pid, st)))
    below = descendants(*(pid for pid, _ in listed))
    targets = listed + [d for d in below if d not in listed]
    if grace_s > 0:
        below_pids = {pid for pid, _ in below}
        for pid, st in [p for p in listed if p[0] not in below_pids] if told is None else dict.fromkeys(told):
            terminate(pid, st)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(alive(p, s) for p, s in targets):
            if settled is not None and settled():
                break
            time.sleep(0.05)
        # Found again: what a program started during its grace (its orphans are a live wrapper's).
        targets += [d for d in descendants(*(pid for pid, _ in listed)) if d not in targets]
    for pid, st in targets:
        signal_proc(pid, st, signal.SIGKILL)


def terminate(pid: int, started: int | None) -> None:
    """SIGTERM to this one process (never its group: see stop_all), if it is still the same."""
    if started is None or not alive(pid, started):
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGTERM)


def find_by_args(*needles: str) -> list[tuple[int, int]]:
    """(pid, start time) of every process whose argv holds all of ``needles`` as arguments."""
    return [(pid, started) for pid, started, _ in processes_with_args(*needles)]


def processes_with_args(*needles: str) -> list[tuple[int, int, list[str]]]:
    """(pid, start time, argv) of every process whose argv holds all of ``needles``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                args = fh.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if all(n in args for n in needles):
            started = start_time(int(entry))
            if started is not None:
                found.append((int(entry), started, args))
    return found


def grace_seconds() -> float:
    """How long stopped processes get between SIGTERM and SIGKILL (RINGLEADER_GRACE_S, default
    5 s; raise it for programs whose checkpoint takes longer: Slurm's KillWait defaults to 30 s)."""
    return settings.number("RINGLEADER_GRACE_S")
