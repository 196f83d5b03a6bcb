"""Processes by (pid, start time), so a reused PID is never mistaken for ours; stopping them."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable

from ringleader import settings

__all__ = ["alive", "find_by_args", "grace_seconds", "signal_proc", "start_time", "stop_all"]


def start_time(pid: int) -> int | None:
    """The rank wrapper's reader of a process's start time (imported when first needed: the
    wrapper module loads subprocess, signal and threading, which commands that only read skip)."""
    from ringleader.runtime.rank import start_time as read

    return read(pid)


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


def stop_all(procs: Iterable[tuple[int, int | None]], grace_s: float) -> None:
    """SIGTERM every process, wait up to ``grace_s`` for them to go, then SIGKILL the rest, and
    every descendant of theirs found before the first signal (one that left the process group
    with setsid too: the rank wrapper is a subreaper, so its program's orphans stay its own)."""
    import signal  # here, not at the top: commands that only read start quicker

    from ringleader.runtime.rank import descendants

    targets = [(pid, st) for pid, st in procs if st is not None and alive(pid, st)]
    targets += [d for d in descendants(*(pid for pid, _ in targets)) if d not in targets]
    for pid, st in targets:
        signal_proc(pid, st, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(alive(p, s) for p, s in targets):
        time.sleep(0.05)
    for pid, st in targets:
        signal_proc(pid, st, signal.SIGKILL)


def find_by_args(*needles: str) -> list[tuple[int, int]]:
    """(pid, start time) of every process whose argv holds all of ``needles`` as arguments."""
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
                found.append((int(entry), started))
    return found


def grace_seconds() -> float:
    """How long stopped processes get between SIGTERM and SIGKILL (RINGLEADER_GRACE_S)."""
    return settings.number("RINGLEADER_GRACE_S")
