"""The folder's agent as commands see it (see ``agent``): its lock, its wake-up FIFO, its beat,
and starting it. Light on purpose: every command that opens the state looks here.

    wake(home)      after a commit: wake the agent, or start one (killing one that is stuck)
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from ringleader.engines.embedded.liveness import lease_seconds, read_beat, write_beat_file
from ringleader.runtime.plan import supervisor_env
from ringleader.runtime.procs import alive, signal_proc, start_time
from ringleader.statefolder import remove_entry

AGENT_MODULE = "ringleader.engines.embedded.agent"
LOCK, STANDBY_LOCK = "agent.lock", "agent.standby.lock"
BEAT, STANDBY_BEAT = "agent.beat", "agent.standby.beat"
WAKE, LOG = "agent.wake", "agent.log"
KILL_WAIT_S = 2.0


def open_run_dir(home: Path) -> int:
    """The state folder's ``run/``, never through a link put in its place."""
    return os.open(home / "run", os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)


def open_in_run(home: Path, name: str, flags: int) -> int:
    """A file of ``run/`` opened without following a link at any step below the state folder.
    One ringleader makes (``flags`` with O_CREAT) is made afresh where something else took its
    name (a link, a folder, a FIFO): run/ is ringleader's own, and a log or lock that cannot be
    opened would stop the folder's agent, and with it the queue."""
    run = open_run_dir(home)
    try:
        if flags & os.O_CREAT:
            with contextlib.suppress(FileNotFoundError):
                if not stat.S_ISREG(os.lstat(name, dir_fd=run).st_mode):
                    remove_entry(run, name)
        return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=run)
    finally:
        os.close(run)


def open_lock(home: Path, name: str) -> int:
    return open_in_run(home, name, os.O_RDWR | os.O_CREAT)


def try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def kill_if_stuck(home: Path, beat_name: str, lock: int) -> bool:
    """Whether ``lock`` is now this process's, after killing a holder whose beat is older than
    the lease (a stopped process takes SIGKILL too; the lock goes with it)."""
    beat = read_beat(home / "run" / beat_name)
    if beat is None:
        return False
    pid, started, silent = beat
    # Never the caller itself: an agent that was the standby may still be named by a standby
    # beat that a full disk kept its successor from rewriting.
    if pid == os.getpid() or silent is None or silent <= lease_seconds() or not alive(pid, started):
        return False
    log_line(home, f"pid {pid} stopped beating {silent:.0f} s ago (lease {lease_seconds():g} s): killed and replaced")
    signal_proc(pid, started, signal.SIGKILL)
    deadline = time.monotonic() + KILL_WAIT_S
    while time.monotonic() < deadline:
        if try_lock(lock):
            return True
        time.sleep(0.02)
    return False


def wake(home: Path, needed: Callable[[], bool] | None = None) -> str | None:
    """After a commit: wake the folder's agent, or start one when none holds the lock (one that
    stopped beating is killed first); with ``needed``, start one only if it says there is work.
    Returns why none could start (no processes left, a full disk), None otherwise."""
    try:
        lock = open_lock(home, LOCK)
    except OSError as exc:
        return exc.strerror or str(exc)
    try:
        if not try_lock(lock) and not kill_if_stuck(home, BEAT, lock):
            _poke(home)
            return None
        if needed is not None and not needed():
            return None
        return start(home, lock)
    finally:
        os.close(lock)  # a started agent holds the lock through its own copy


def _poke(home: Path) -> None:
    """One byte into the agent's FIFO; nothing when it has none open yet (then it reads the
    state after opening it) or when bytes already wait there."""
    with contextlib.suppress(OSError):
        fd = open_in_run(home, WAKE, os.O_WRONLY | os.O_NONBLOCK)
        try:
            if stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.write(fd, b"\n")
        finally:
            os.close(fd)


def start(home: Path, lock: int | None) -> str | None:
    """An agent, detached, in a minimal environment (see supervisor_env); given ``lock`` (held)
    it serves at once, without it it is a standby."""
    try:
        log = open_in_run(home, LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    except OSError as exc:
        return exc.strerror or str(exc)
    args = ["--lock-fd", str(lock)] if lock is not None else ["--standby"]
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", AGENT_MODULE, str(home), *args], stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True, pass_fds=() if lock is None else (lock,),
            cwd="/", env=supervisor_env(),
        )  # fmt: skip
    except OSError as exc:
        return exc.strerror or str(exc)
    finally:
        os.close(log)
    # Its first beat, written for it: one stopped before it could beat itself is then found
    # stuck after the lease like any other (a full disk: its lock alone answers for it).
    beat = write_beat_file(home / "run" / (BEAT if lock is not None else STANDBY_BEAT), proc.pid,
                           start_time(proc.pid))  # fmt: skip
    if beat is not None:
        os.close(beat)
    return None


def log_entry(message: str) -> str:
    """A line of ``run/agent.log`` as every process that writes there words it."""
    return f"{time.strftime('%Y-%m-%dT%H:%M:%S')} pid {os.getpid()}: {message}"


def log_line(home: Path, message: str) -> None:
    """A line in ``run/agent.log`` from a process whose stdout is elsewhere (lost on a full disk)."""
    with contextlib.suppress(OSError):
        fd = open_in_run(home, LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            os.write(fd, (log_entry(message) + "\n").encode())
        finally:
            os.close(fd)
