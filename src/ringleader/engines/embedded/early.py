"""The early supervisor: in an idle folder (no spare waits, see ``spare``), a command whose job
fits starts the job's supervisor before it asks the container runtime and commits, so that the
job's ranks wait neither for an interpreter nor for a supervisor's imports (about 80 ms on a
2-core box).

    python -m ringleader.engines.embedded.early HOME

Its stdin pipe carries two lines from the command (JSON):
1. the job's name, as soon as the command has found that the job fits;
2. once the command has committed the job placed, claimed for this process and marked launched
   (``claim_for``, in the placing transaction: no process of the job exists before that), and
   written this process's first heartbeat: how to start the ranks (``rank_starts``) where the
   job needs no more than that (ranks on this host's own nodes, no mpirun, the image seen here
   by the command). The plan is written before any rank starts, so a holder lost before it
   leaves a job that is started again, never adopted (``plan_written``).

This module imports only what starting the ranks takes; it starts them, and only then imports
the supervisor, which takes them over (``Started``). A command that ends without the second
line (the job refused, or the command killed after its commit) leaves this process to look: a
job committed for it is its own to start and supervise; none, and it leaves.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

MYPY = False  # typing and pathlib are a fifth of this module's start-up; type checkers read MYPY as true
if MYPY:
    import sqlite3
    from pathlib import Path
    from typing import Any

    from ringleader.engines.embedded.store import NodeKind
    from ringleader.jobs.spec import JobSpec

EARLY_MODULE = "ringleader.engines.embedded.early"
EARLY_LOG = "early.log"  # in HOME/run: what an early supervisor says before it has a job
# How old the submit's sighting of a job's image on this host may be and still stand for the
# supervisor's own check there (about the same few-ms window as between that check and the ranks).
IMAGE_SEEN_FRESH_S = 10.0
MAX_NAME_LINE = 1 << 12


def job_name_ok(job: str) -> bool:
    return bool(job) and "/" not in job and job not in (".", "..") and not job.startswith("-")


def open_job_log(home: str | Path, job: str) -> int:
    """The job's supervisor log, opened for appending as a started supervisor's stdout."""
    run_dir = os.path.join(home, "run", job)
    os.makedirs(run_dir, mode=0o700, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW
    return os.open(os.path.join(run_dir, "supervisor.log"), flags, 0o600)


def become(log: int) -> None:
    """This process's stdout and stderr the job's log ``log``, its stdin /dev/null."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)


def write_private(path: str | Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)


def start_rank(argv: list[str], cwd: str | None, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """One rank wrapper, in its own session (a process group it leads, so stopping it reaches
    its program), with the job's own environment and folder."""
    return subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True, close_fds=True, cwd=cwd, env=env,
    )  # fmt: skip


class Started:
    """The ranks an early supervisor started before importing the supervisor: (instance, process,
    its start time, when) each, the start that failed (then no later one was tried), and whether a signal to stop
    came meanwhile."""

    def __init__(self) -> None:
        self.ranks: list[tuple[str, subprocess.Popen[bytes], int | None, float]] = []
        self.failed: tuple[str, OSError] | None = None
        self.interrupted = False

    def stop_on_signals(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, lambda _s, _f: setattr(self, "interrupted", True))

    def start(self, go: dict[str, Any]) -> None:
        from ringleader.runtime.procs import start_time

        try:
            os.makedirs(os.path.dirname(go["plan_path"]), mode=0o700, exist_ok=True)
            write_private(go["plan_path"], go["plan"])
        except OSError as exc:  # a full disk: the first rank cannot start, said as a supervisor says it
            self.failed = (go["ranks"][0][0], exc)
            return
        for instance, argv in go["ranks"]:
            if self.interrupted:  # the job is being deleted: the supervisor records it
                return
            try:
                popen = start_rank(argv, go["cwd"], go["env"])
            except OSError as exc:
                self.failed = (instance, exc)
                return
            # Read now: a rank that ends before the supervisor takes over is a zombie by then.
            self.ranks.append((instance, popen, start_time(popen.pid), time.time()))


# -- the command's side ---------------------------------------------------------------------------
class EarlySupervisor:
    """A supervisor started for a job before the job is placed, waiting on its stdin pipe."""

    def __init__(self, proc: subprocess.Popen[bytes], pid_start: int | None) -> None:
        self.proc, self.pid_start = proc, pid_start

    def claim_for(self, conn: sqlite3.Connection, job: str, now: float) -> None:
        """In the transaction placing ``job``: this process holds it, and it counts as launched
        (a lost holder's job is then adopted, never started twice)."""
        from ringleader.engines.embedded import store

        store.update_job(conn, job, supervisor_pid=self.proc.pid, supervisor_start=self.pid_start, launched_at=now)

    def start(self, home: Path, job: str, image_here_at: float | None, ranks: dict[str, Any] | None) -> bool:
        """After the commit: its first heartbeat, and how to start the ranks (``rank_starts``,
        None: the supervisor starts them). False when it cannot be told (it died): then it
        started nothing, and the caller releases the job (``release_claim``)."""
        from ringleader.engines.embedded.liveness import beat_path, write_beat_file

        assert self.proc.stdin is not None
        beat = beat_path(home, job)
        # Its folder: the commit removed a former job's. (Full disk: its pid alone answers for it.)
        with contextlib.suppress(OSError):
            os.makedirs(beat.parent, mode=0o700, exist_ok=True)
        fd = write_beat_file(beat, self.proc.pid, self.pid_start)
        if fd is not None:
            os.close(fd)
        try:
            go = {"image_here_at": image_here_at, **(ranks or {})}
            self.proc.stdin.write(json.dumps(go).encode() + b"\n")
            self.proc.stdin.close()
        except OSError:
            self.proc.kill()  # whatever it is doing, it must not start the job now
            self.proc.wait()
            return False
        return True

    def release(self) -> None:
        """No job for it: it reads the end of its stdin, finds no job committed for it, and leaves."""
        assert self.proc.stdin is not None
        with contextlib.suppress(OSError):
            self.proc.stdin.close()


def start_early(home: Path, job: str) -> EarlySupervisor | None:
    """A supervisor for ``job``, which this command is about to place, unless the folder's spare
    waits for it (then the spare takes it) or none can start now (then one is started after)."""
    from ringleader.engines.embedded.spare import listening, open_run_dir, socket_path
    from ringleader.runtime.plan import supervisor_env
    from ringleader.runtime.procs import start_time

    if os.path.exists(socket_path(home)) and listening(home):
        return None
    try:  # in the folder's own run/ (made by its first job), never through a link
        dir_fd = open_run_dir(home)
    except OSError:
        return None
    try:
        fd = os.open(EARLY_LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600, dir_fd=dir_fd)
    except OSError:
        return None
    finally:
        os.close(dir_fd)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", EARLY_MODULE, str(home)], stdin=subprocess.PIPE,
            stdout=fd, stderr=fd, start_new_session=True, close_fds=True, env=supervisor_env(),
        )  # fmt: skip
    except OSError:
        return None
    finally:
        os.close(fd)
    early = EarlySupervisor(proc, start_time(proc.pid))
    assert proc.stdin is not None
    try:
        proc.stdin.write(json.dumps({"job": job}).encode() + b"\n")
        proc.stdin.flush()
    except OSError:
        early.release()
        proc.wait()
        return None
    return early


def rank_starts(
    home: Path, spec: JobSpec, placement_data: dict[str, Any], kinds: dict[str, NodeKind], image_here_at: float | None
) -> dict[str, Any] | None:
    """How an early supervisor starts the job's ranks itself, before its imports: the plan, its
    file, and each rank's wrapper line, with the job's folder and environment; None where the job
    needs more (ranks on ssh hosts, an mpirun line, an image not seen here within
    IMAGE_SEEN_FRESH_S): the supervisor then starts them."""
    from ringleader.jobs.commandline import is_mpirun
    from ringleader.runtime.plan import StoredPlacement, build_plan, job_env, plan_path, worker_lines

    placement = StoredPlacement.from_dict(placement_data)
    image_here = image_here_at is not None and 0.0 <= time.time() - image_here_at <= IMAGE_SEEN_FRESH_S
    if any(kinds[n].remote for n in placement.nodes) or is_mpirun(spec.command) or (spec.image and not image_here):
        return None
    plan = build_plan(spec.name, placement, kinds, spec.env, home)
    pfile = plan_path(home, spec.name)
    ranks = worker_lines(spec.name, spec.command, placement, pfile)
    return {"plan_path": str(pfile), "plan": json.dumps(plan, indent=1), "ranks": ranks,
            "cwd": spec.workdir, "env": job_env(spec.submit_env)}  # fmt: skip


# -- the early supervisor --------------------------------------------------------------------------
def _read_line(limit: int = -1) -> dict[str, Any] | None:
    line = sys.stdin.buffer.readline(limit)
    try:
        message = json.loads(line)
    except ValueError:
        return None  # the end of the pipe: the command ended
    return message if isinstance(message, dict) else None


def _committed_for_me(home: str, job: str) -> bool:
    """Whether the command that started this process committed ``job`` for it before it ended
    (False, said in the log, where the state cannot be read: reconciliation then starts one)."""
    import sqlite3
    from pathlib import Path

    from ringleader.engines.embedded import store
    from ringleader.errors import RingleaderError
    from ringleader.runtime.procs import start_time

    try:
        db, _ = store.Store.open(Path(home), create=False, reserve=False)
        try:
            with db.read() as conn:
                row = store.job_row(conn, job)
        finally:
            db.close()
    except (RingleaderError, sqlite3.Error, OSError) as exc:
        print(f"early supervisor {os.getpid()}: job {job}: {exc}", flush=True)
        return False
    me = os.getpid()
    return row is not None and store.held_by(row, me, start_time(me))


def main(argv: list[str]) -> int:
    home = argv[0]
    named = _read_line(MAX_NAME_LINE)
    job = named.get("job") if named else None
    if not isinstance(job, str) or not job_name_ok(job):
        return 0  # the command placed nothing after all
    # While the command asks the runtime and commits: the watchdog the job's supervisor would
    # otherwise start beside its ranks (see watchdog).
    from pathlib import Path

    from ringleader.engines.embedded.watchdog import fork_watchdog

    fork_watchdog(Path(home))
    go = _read_line()
    if go is None:
        if not _committed_for_me(home, job):
            return 0
        go = {}
    try:
        log = open_job_log(home, job)
    except OSError as exc:  # the job is placed and this is its supervisor: it runs, unlogged
        print(f"supervisor {os.getpid()}: job {job}: no log ({exc})", flush=True)
        log = os.open(os.devnull, os.O_WRONLY)
    become(log)
    print(f"supervisor {os.getpid()}: started early by the command that placed job {job}", flush=True)
    started = None
    if go.get("ranks"):
        started = Started()
        started.stop_on_signals()
        started.start(go)
        print(f"supervisor {os.getpid()}: started {len(started.ranks)} rank(s) before its imports", flush=True)
        from ringleader.engines.embedded.faults import crash_point  # as the supervisor's imports begin

        crash_point("early-started")  # killed here: the ranks run on, and a supervisor adopts them
    from ringleader.engines.embedded.supervisor import Supervisor

    seen = go.get("image_here_at")
    seen = float(seen) if isinstance(seen, (int, float)) else None
    return Supervisor(Path(home), job, image_here_at=seen, started=started).run()


if __name__ == "__main__":
    # Run as a script, this module is __main__: the supervisor's import of it finds this one,
    # not a second copy (its Started is this one's).
    sys.modules.setdefault(EARLY_MODULE, sys.modules[__name__])
    sys.exit(main(sys.argv[1:]))
