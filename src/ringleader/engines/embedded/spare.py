"""The spare supervisor, started before its job, so a job placed while others run need not wait
for an interpreter and its imports (about 80 ms on a 2-core box).

While jobs run, the folder's watchdog keeps one supervisor waiting with its modules imported,
listening on ``run/spare.sock``. A command that places a job hands it over (``hand_over``): it
sends the job; the spare opens the job's log and answers "ok"; the command, still within
ANSWER_S of its start, answers "go", and only then is the spare the job's supervisor. Anything
else (no spare, a busy or stopped one, a late answer, a refusal) and the command starts a
supervisor of its own, as without a spare, and the spare goes on waiting. The spare takes a job
only from a command of its own user (the socket's peer credentials) whose process context is its
own (``context``: interpreter, code, supervisor environment, umask, limits, signal masks,
capabilities, CPU and memory affinity, cgroup, namespaces, ids): a job's ranks inherit those from
their supervisor, so they are what a supervisor started by that command would have had. It serves
one job; the watchdog starts the next at its next check, and when the watchdog ends, the spare
reads the end of its stdin and leaves too. In an idle folder no watchdog runs, so there is no
spare: a command starts its job's supervisor early instead (see ``early``).

Nothing here is needed for correctness: without it every job starts as before. In the one case
where a command and a spare could disagree (the command sent "go" within its time and the spare,
stopped past its own, closed without reading it), the job waits for reconciliation's
LAUNCH_GRACE_S, as a job whose supervisor could not start does.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import select
import socket
import struct
import sys
import time
from pathlib import Path
from typing import Any

from ringleader.engines.embedded.early import become, job_name_ok, open_job_log
from ringleader.runtime.plan import supervisor_env

SOCKET_NAME = "spare.sock"  # in HOME/run (0700)
# `python -m ringleader.engines.embedded.supervisor HOME --spare`: a supervisor before its job.
SPARE_FLAG = "--spare"
SUPERVISOR_MODULE = "ringleader.engines.embedded.supervisor"
ANSWER_S = 0.5  # a command's whole exchange with the spare, before it starts a supervisor itself
GO_SLACK_S = 1.0  # how much longer than the command the spare waits for its "go"
MAX_REQUEST = 1 << 16
NOT_LISTENING = 3  # a spare's exit code when it cannot listen: the watchdog stops trying after a few
# What ranks inherit from their supervisor's starter, as /proc/self/status names it.
STATUS_KEYS = ("Umask", "NoNewPrivs", "Seccomp", "SigBlk", "SigIgn", "CapInh", "CapBnd", "CapAmb",
               "Cpus_allowed_list", "Mems_allowed_list")  # fmt: skip


def socket_path(home: Path) -> Path:
    return home / "run" / SOCKET_NAME


def _short(dir_fd: int) -> str:
    """The socket's address through an open folder: a socket's path is limited to 107 bytes,
    a state folder's is not."""
    return f"/proc/self/fd/{dir_fd}/{SOCKET_NAME}"


def open_run_dir(home: Path) -> int:
    return os.open(home / "run", os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)


def context() -> dict[str, Any]:
    """What a supervisor's processes inherit from whoever started it, beyond its environment,
    and the code it runs."""
    ns = {}
    for name in ("mnt", "net", "pid", "uts", "ipc", "user", "cgroup", "time"):
        with contextlib.suppress(OSError):
            ns[name] = os.readlink(f"/proc/self/ns/{name}")
    limits = {}
    for name in dir(resource):
        if name.startswith("RLIMIT_"):
            with contextlib.suppress(ValueError, OSError):
                limits[name] = list(resource.getrlimit(getattr(resource, name)))
    status = {}
    with contextlib.suppress(OSError), open("/proc/self/status") as fh:
        status = {k: v.strip() for k, _, v in (line.partition(":") for line in fh) if k in STATUS_KEYS}
    for name in ("cgroup", "oom_score_adj"):
        with contextlib.suppress(OSError), open(f"/proc/self/{name}") as fh:
            status[name] = fh.read()
    return {
        "python": sys.executable, "code": _code(), "env": supervisor_env(), "ids": [os.getuid(), os.geteuid(),
        os.getgid(), os.getegid(), sorted(os.getgroups())], "nice": os.getpriority(os.PRIO_PROCESS, 0),
        "ns": ns, "limits": limits, **status,
    }  # fmt: skip


def _code() -> list[int]:
    """ringleader's source as on disk (files, bytes, times): a spare started before an upgrade
    runs the old code and takes no job of the new."""
    package = Path(__file__).resolve().parents[2]
    count = size = newest = total = 0
    for folder, _, files in os.walk(package):
        for name in files:
            if name.endswith(".py"):
                st = os.stat(os.path.join(folder, name))
                count, size, total = count + 1, size + st.st_size, total + st.st_mtime_ns
                newest = max(newest, st.st_mtime_ns)
    return [count, size, newest, total]


def listening(home: Path) -> bool:
    """Whether a spare listens (a socket left by a killed one refuses the connection)."""
    return _exchange(home, None) is not None


def hand_over(home: Path, job: str, image_here_at: float | None) -> bool:
    """Give ``job`` to the folder's spare supervisor; True once it has taken it."""
    if not os.path.exists(socket_path(home)):
        return False
    return bool(_exchange(home, (job, image_here_at)))


def _exchange(home: Path, job: tuple[str, float | None] | None) -> bool | None:
    """None: no spare listens; else, with a job, whether the spare took it (without one, True)."""
    deadline = time.monotonic() + ANSWER_S
    try:
        dir_fd = open_run_dir(home)
    except OSError:
        return None
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC) as conn:
            conn.settimeout(ANSWER_S)
            conn.connect(_short(dir_fd))
            if job is None:
                return True
            request = {"job": job[0], "image_here_at": job[1], "context": context(), "deadline": deadline}
            _send(conn, json.dumps(request).encode() + b"\n", deadline)
            conn.settimeout(max(0.0, deadline - time.monotonic()))
            if conn.recv(16) != b"ok\n" or time.monotonic() > deadline:
                return False  # refused, or too late: the spare reads no "go" and goes on waiting
            _send(conn, b"go\n", deadline + GO_SLACK_S)
            return True
    except OSError:  # none listening, refused, reset, or no answer in time (socket.timeout)
        return None if job is None else False
    finally:
        os.close(dir_fd)


def _send(conn: socket.socket, data: bytes, deadline: float) -> None:
    conn.settimeout(max(0.0, deadline - time.monotonic()))
    conn.sendall(data)


def wait_for_job(home: Path) -> tuple[str, float | None] | None:
    """As the spare: wait for a job handed over and take it: (job, image_here_at), with this
    process's stdout and stderr the job's supervisor log and its stdin /dev/null; None once the
    watchdog is gone (end of file on stdin). OSError when it cannot listen."""
    mine = context()
    dir_fd = open_run_dir(home)
    address = _short(dir_fd)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    mine_ino = None
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(address)  # a spare's that is gone: one spare per folder (the watchdog's)
        listener.bind(address)
        listener.listen(8)
        mine_ino = os.stat(address).st_ino
        while True:
            ready, _, _ = select.select([listener, sys.stdin.fileno()], [], [])
            if listener in ready:
                taken = _take(listener, home, mine)
                if taken is not None:
                    return taken
            elif not os.read(sys.stdin.fileno(), 1):
                return None  # the watchdog left
    finally:
        listener.close()  # a second command is refused at once
        with contextlib.suppress(OSError):
            if mine_ino is not None and os.stat(address).st_ino == mine_ino:  # not a newer spare's
                os.unlink(address)
        os.close(dir_fd)


def _take(listener: socket.socket, home: Path, mine: dict[str, Any]) -> tuple[str, float | None] | None:
    conn, _ = listener.accept()
    with conn:
        conn.settimeout(ANSWER_S)
        try:
            _, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
            data = b""
            while uid == os.getuid() and not data.endswith(b"\n") and len(data) < MAX_REQUEST:
                chunk = conn.recv(MAX_REQUEST)
                if not chunk:
                    return None  # a command only asking whether a spare listens
                data += chunk
            request = json.loads(data) if uid == os.getuid() else {}
            job, seen, deadline = str(request.get("job")), request.get("image_here_at"), request.get("deadline")
            # A request its command no longer waits for (this spare was stopped meanwhile) is
            # refused: that command started a supervisor of its own.
            if not isinstance(deadline, (int, float)) or time.monotonic() > deadline:
                conn.sendall(b"no\n")
                return None
            if request.get("context") != mine or not job_name_ok(job):
                conn.sendall(b"no\n")
                return None
            log = open_job_log(home, job)
            conn.sendall(b"ok\n")
            conn.settimeout(max(0.05, deadline + GO_SLACK_S - time.monotonic()))
            if conn.recv(3) != b"go\n":
                os.close(log)  # the command gave up: it starts a supervisor itself
                return None
        except (OSError, ValueError, TypeError, struct.error) as exc:
            print(f"spare supervisor {os.getpid()}: a hand-over failed: {exc}", flush=True)
            return None
    become(log)  # the watchdog's pipe closed here: it starts the next spare
    print(f"supervisor {os.getpid()}: started as the folder's spare, took job {job}", flush=True)
    return job, float(seen) if isinstance(seen, (int, float)) else None


