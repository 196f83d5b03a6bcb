"""Heartbeats and the lease: how a command or a standby agent tells a live agent from a stopped one.

The folder's agent (see ``agent``) beats: every HEARTBEAT_S it rewrites its beat file with its
pid, start time and the time on CLOCK_BOOTTIME (monotonic, shared by every process of this boot,
counting suspend; a change of the wall clock moves nothing). An agent whose last beat is older
than the lease (``RINGLEADER_LEASE_S``, default 10 s) is stuck (SIGSTOP, a frozen machine, a
deadlock): whoever finds it so kills it and takes its place.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from pathlib import Path

from ringleader import settings

HEARTBEAT_S = 1.0


def lease_seconds() -> float:
    """How long an agent may go without a beat before it is taken for stuck (RINGLEADER_LEASE_S,
    at least 3 heartbeats)."""
    return settings.number("RINGLEADER_LEASE_S")


def boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def clock_stamp() -> str:
    """Now, as "BOOT_ID@SECONDS" on CLOCK_BOOTTIME: comparable across processes of one boot."""
    return f"{boot_id()}@{time.clock_gettime(time.CLOCK_BOOTTIME):.3f}"


def seconds_since(stamp: str | None) -> float | None:
    """Seconds since ``stamp`` (a ``clock_stamp``); infinite if it was taken before a reboot,
    None if there is none or it is unreadable."""
    if not stamp or "@" not in stamp:
        return None
    boot, _, at = stamp.rpartition("@")
    try:
        then = float(at)
    except ValueError:
        return None
    if boot != boot_id():
        return float("inf")
    return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - then)


BEAT_BYTES = 128  # a beat padded to a fixed size: rewritten in place, it needs no new disk space


def _beat_record(pid: int, pid_start: int | None) -> bytes:
    return json.dumps({"pid": pid, "pid_start": pid_start, "at": clock_stamp()}).encode().ljust(BEAT_BYTES)


def write_beat_file(path: Path, pid: int, pid_start: int | None) -> int | None:
    """A new beat file, atomically and privately; returns a descriptor open on it for the next
    beats (``rewrite_beat``), or None where it could not be made (a full disk, a removed
    folder: the holder's pid still answers for it, and the next beat tries again)."""
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    except OSError:
        return None
    try:
        os.write(fd, _beat_record(pid, pid_start))
        os.replace(tmp, path)
    except OSError:
        os.close(fd)
        with contextlib.suppress(OSError):
            tmp.unlink()
        return None
    return fd


def rewrite_beat(fd: int, pid: int, pid_start: int | None) -> bool:
    """The next beat, over the last one's bytes: a disk that filled up since cannot stop it (a
    holder that could not beat for the lease would be taken for stuck and killed)."""
    try:
        return os.pwrite(fd, _beat_record(pid, pid_start), 0) == BEAT_BYTES
    except OSError:
        return False


def read_beat(path: Path) -> tuple[int, int | None, float | None] | None:
    """The holder a beat file names, (pid, start time, seconds since its last beat); None when
    there is none or it is unreadable."""
    try:
        beat = json.loads(path.read_text())
        pid, started = int(beat["pid"]), beat.get("pid_start")
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return pid, started, seconds_since(str(beat.get("at")))


class Heartbeat:
    """A thread that beats into ``path`` every HEARTBEAT_S while its process runs. A thread, so
    a process busy stopping ranks or waiting for the write lock still beats; SIGSTOP stops it
    with the rest of the process, which is what others must notice."""

    def __init__(self, path: Path, pid: int, pid_start: int | None) -> None:
        self.path = path
        self.pid, self.pid_start = pid, pid_start
        self._fd: int | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)

    def start(self) -> Heartbeat:
        self._fd = write_beat_file(self.path, self.pid, self.pid_start)  # at once: never a gap
        self._thread.start()
        return self

    def stop(self) -> None:
        self._done.set()

    def _run(self) -> None:
        while not self._done.wait(HEARTBEAT_S):
            if self._fd is None or not self._own_file() or not rewrite_beat(self._fd, self.pid, self.pid_start):
                if self._fd is not None:
                    os.close(self._fd)
                self._fd = write_beat_file(self.path, self.pid, self.pid_start)
        if self._fd is not None:
            os.close(self._fd)

    def _own_file(self) -> bool:
        """Whether the beat file is still the one this process writes: another that replaced it
        (a new agent after this one was taken for stuck) must not be named by beats into a file
        no longer there."""
        try:
            return self._fd is not None and os.fstat(self._fd).st_ino == os.stat(self.path).st_ino
        except OSError:
            return False
