"""A spare supervisor: started by the folder's watchdog while jobs run, its modules imported, it
waits to become the supervisor of the next job a command places here.

Starting a supervisor costs an interpreter and its imports (about 80 ms on a 2-core box), and
every job's ranks wait for it. A command that places a job hands it to the spare instead
(``hand_over``): one request on the spare's socket, answered "ok" once the job's log is open and
the spare is committed to it. Any other outcome (no spare, a busy or stopped one, no answer
within ANSWER_S) and the command starts a supervisor of its own, as it would without one; two
claimants are harmless, the claim lets one through. The spare takes a job only from a command
whose process context is its own (``context``: interpreter, supervisor environment, umask,
limits, cgroup, namespaces, ids): a job's ranks inherit those from their supervisor, so they are
what a supervisor started by that command would have had.

A spare serves one job. The watchdog notices (its end of the spare's stdin pipe reports no
reader) and starts the next at its next check; when the watchdog ends, the spare reads the end
of its stdin and leaves too.

In an idle folder there is no spare: a command whose job fits starts its supervisor early
(``EarlySupervisor``), before it asks the container runtime and commits, and tells it the job
placed through its stdin pipe once committed (or closes the pipe: the process leaves). The
supervisor's start then overlaps the command's own work.

Nothing here is needed for correctness: without them every job starts as before.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import select
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ringleader.runtime.plan import supervisor_env

SOCKET_NAME = "spare.sock"  # in HOME/run (0700)
# `python -m ringleader.engines.embedded.supervisor HOME FLAG`: a supervisor before its job.
SPARE_FLAG, EARLY_FLAG = "--spare", "--early"
SUPERVISOR_MODULE = "ringleader.engines.embedded.supervisor"
ANSWER_S = 0.5  # how long a command waits for the spare's answer before starting its own supervisor
MAX_REQUEST = 1 << 16


def socket_path(home: Path) -> Path:
    return home / "run" / SOCKET_NAME


def _short(dir_fd: int) -> str:
    """The socket's address through an open folder: a socket's path is limited to 107 bytes,
    a state folder's is not."""
    return f"/proc/self/fd/{dir_fd}/{SOCKET_NAME}"


def _open_run_dir(home: Path) -> int:
    return os.open(home / "run", os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)


def context() -> dict[str, Any]:
    """What a supervisor's processes inherit from whoever started it, beyond its environment."""
    ns = {}
    for name in ("mnt", "net", "pid", "uts", "ipc", "user", "cgroup"):
        with contextlib.suppress(OSError):
            ns[name] = os.readlink(f"/proc/self/ns/{name}")
    limits = {}
    for name in dir(resource):
        if name.startswith("RLIMIT_"):
            with contextlib.suppress(ValueError, OSError):
                limits[name] = list(resource.getrlimit(getattr(resource, name)))
    status = {}
    with contextlib.suppress(OSError), open("/proc/self/status") as fh:
        status = {k: v.strip() for k, _, v in (line.partition(":") for line in fh) if k in ("Umask", "NoNewPrivs")}
    with contextlib.suppress(OSError), open("/proc/self/cgroup") as fh:
        status["cgroup"] = fh.read()
    return {
        "python": sys.executable, "env": supervisor_env(), "ids": [os.getuid(), os.geteuid(), os.getgid(),
        os.getegid(), sorted(os.getgroups())], "nice": os.getpriority(os.PRIO_PROCESS, 0), "ns": ns,
        "limits": limits, **status,
    }  # fmt: skip


def hand_over(home: Path, job: str, image_here_at: float | None) -> bool:
    """Give ``job`` to the folder's spare supervisor; True once it has taken it."""
    if not os.path.exists(socket_path(home)):
        return False
    request = {"job": job, "image_here_at": image_here_at, "context": context(), "sent": time.monotonic()}
    data = json.dumps(request).encode() + b"\n"
    try:
        dir_fd = _open_run_dir(home)
    except OSError:
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC) as conn:
            conn.settimeout(ANSWER_S)
            conn.connect(_short(dir_fd))
            conn.sendall(data)
            return conn.recv(16) == b"ok\n"
    except OSError:  # none listening, refused, reset, or no answer in time (socket.timeout)
        return False
    finally:
        os.close(dir_fd)


def wait_for_job(home: Path) -> tuple[str, float | None] | None:
    """As the spare: wait for a job handed over and take it: (job, image_here_at), with this
    process's stdout and stderr the job's supervisor log and its stdin /dev/null; None once the
    watchdog is gone (end of file on stdin)."""
    mine = context()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        dir_fd = _open_run_dir(home)
    except OSError as exc:
        print(f"spare supervisor {os.getpid()}: not started: {exc}", flush=True)
        return None
    address = _short(dir_fd)
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(address)  # a spare's that is gone: one spare per folder (the watchdog's)
        listener.bind(address)
        listener.listen(8)
    except OSError as exc:  # a full disk: the watchdog tries again at its next check
        print(f"spare supervisor {os.getpid()}: not started: {exc}", flush=True)
        listener.close()
        os.close(dir_fd)
        return None
    try:
        while True:
            ready, _, _ = select.select([listener, sys.stdin.fileno()], [], [])
            if listener in ready:
                taken = _take(listener, home, mine)
                if taken is not None:
                    return taken
            elif not os.read(sys.stdin.fileno(), 1):
                return None  # the watchdog left
    finally:
        listener.close()  # before the answer's reader returns: a second command is refused at once
        with contextlib.suppress(OSError):
            os.unlink(address)
        os.close(dir_fd)


def _take(listener: socket.socket, home: Path, mine: dict[str, Any]) -> tuple[str, float | None] | None:
    conn, _ = listener.accept()
    with conn:
        conn.settimeout(ANSWER_S)
        try:
            data = b""
            while not data.endswith(b"\n") and len(data) < MAX_REQUEST:
                chunk = conn.recv(MAX_REQUEST)
                if not chunk:
                    return None
                data += chunk
            request = json.loads(data)
            job, seen = str(request["job"]), request.get("image_here_at")
            # A request its command stopped waiting for (this spare was stopped meanwhile) is
            # refused: that command started a supervisor of its own.
            late = time.monotonic() - float(request["sent"]) > ANSWER_S
            if late or request.get("context") != mine or not _job_name(job):
                conn.sendall(b"no\n")
                return None
            log = open_job_log(home, job)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            with contextlib.suppress(OSError):
                conn.sendall(b"no\n")
            print(f"spare supervisor {os.getpid()}: a hand-over failed: {exc}", flush=True)
            return None
        _become(log)  # the watchdog's pipe closed here: it starts the next spare
        # Not heard: the command gave up waiting and started a supervisor; the claim lets one through.
        with contextlib.suppress(OSError):
            conn.sendall(b"ok\n")
        return job, float(seen) if isinstance(seen, (int, float)) else None


def _job_name(job: str) -> bool:
    return bool(job) and "/" not in job and job not in (".", "..") and not job.startswith("-")


def open_job_log(home: Path, job: str) -> int:
    """The job's supervisor log, opened for appending as a started supervisor's stdout."""
    run_dir = home / "run" / job
    run_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    return os.open(run_dir / "supervisor.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)


def _become(log: int) -> None:
    """This process's stdout and stderr the job's log ``log``, its stdin /dev/null."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)


class EarlySupervisor:
    """A supervisor started before its job is placed, waiting on its stdin pipe."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc

    def start(self, home: Path, job: str, image_here_at: float | None) -> bool:
        """Make it ``job``'s supervisor; False (and it leaves) where that could not be said."""
        assert self.proc.stdin is not None
        try:
            os.close(open_job_log(home, job))  # a full disk is found here, as spawning would find it
            self.proc.stdin.write(json.dumps({"job": job, "image_here_at": image_here_at}).encode() + b"\n")
            self.proc.stdin.close()
        except OSError:
            self.release()
            return False
        return True

    def release(self) -> None:
        """No job for it: it reads the end of its stdin and leaves."""
        assert self.proc.stdin is not None
        with contextlib.suppress(OSError):
            self.proc.stdin.close()


def start_early(home: Path) -> EarlySupervisor | None:
    """A supervisor for the job this command is about to place, unless the folder's spare waits
    for it (then the spare takes it) or none can start now (then one is started after)."""
    if os.path.exists(socket_path(home)):
        return None
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", SUPERVISOR_MODULE, str(home), EARLY_FLAG], stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True,
            env=supervisor_env(),
        )  # fmt: skip
    except OSError:
        return None
    return EarlySupervisor(proc)


def wait_for_placed(home: Path) -> tuple[str, float | None] | None:
    """As an early supervisor: the job its command placed, (job, image_here_at), with this
    process's output the job's log; None when the command placed none (end of file)."""
    line = sys.stdin.buffer.readline(MAX_REQUEST)
    try:
        request = json.loads(line)
        job, seen = str(request["job"]), request.get("image_here_at")
        if not _job_name(job):
            return None
        _become(open_job_log(home, job))
    except (OSError, ValueError, KeyError, TypeError):
        return None  # the command closed its pipe: no job (or a log that cannot be opened)
    return job, float(seen) if isinstance(seen, (int, float)) else None
