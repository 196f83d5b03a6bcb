"""The queue's watchdog: one small process per state folder, alive only while a job is running.

Running supervisors reconcile each other every PEER_CHECK_S (see ``liveness``), but nobody
watches the LAST one: killed -9 or stopped, its job would hold its GPUs and the jobs waiting for
them would not start until someone typed a command. So every supervisor makes sure a watchdog
runs (``ensure_watchdog``, at its start and at each peer check), and an early supervisor forks
one while its command commits (``fork_watchdog``, see early): it reconciles every PEER_CHECK_S
and exits once no job is running. At most one runs per folder (an exclusive lock on
``run/watchdog.lock``); it beats like a supervisor, so a stopped watchdog is killed and replaced
by the next supervisor that looks. Nobody starts it by hand, and it never outlives the queue.

While it runs it also keeps a spare supervisor waiting (see ``spare``), so the next job placed
here starts without waiting for an interpreter and its imports; it reaps the spare once that
has become a job's supervisor and ended.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

from ringleader.engines.embedded.liveness import PEER_CHECK_S, Heartbeat, lease_seconds, read_beat
from ringleader.errors import RingleaderError
from ringleader.runtime.procs import alive, signal_proc, start_time

LOCK_NAME = "watchdog.lock"
MAX_SPARE_FAILURES = 3
BEAT_NAME = "watchdog.beat"


def _lock_path(home: Path) -> Path:
    return home / "run" / LOCK_NAME


def _open_lock(home: Path) -> int:
    (home / "run").mkdir(mode=0o700, parents=True, exist_ok=True)
    return os.open(_lock_path(home), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)


def _held(fd: int) -> bool:
    """Whether another process holds the lock (taking it here for a moment to find out)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    fcntl.flock(fd, fcntl.LOCK_UN)
    return False


def _stuck_watchdog(home: Path) -> tuple[int, int | None] | None:
    """(pid, start) of a watchdog that holds the lock but stopped beating for the lease."""
    beat = read_beat(home / "run" / BEAT_NAME)
    if beat is None:
        return None
    pid, started, silent = beat
    if silent is None or silent <= lease_seconds() or not alive(pid, started):
        return None
    return pid, started


def _none_running(home: Path) -> bool:
    """Whether the folder needs a watchdog started: none holds the lock, or the one holding it
    stopped beating (it is killed first). Cheap: one non-blocking lock attempt."""
    try:
        fd = _open_lock(home)
    except OSError:
        return False  # a full or vanished folder: the next check tries again
    try:
        if _held(fd):
            stuck = _stuck_watchdog(home)
            if stuck is None:
                return False
            signal_proc(stuck[0], stuck[1], signal.SIGKILL)  # its lock goes with it
            deadline = time.monotonic() + 2.0
            while _held(fd) and time.monotonic() < deadline:
                time.sleep(0.02)
    finally:
        os.close(fd)
    return True


def _open_log(home: Path) -> int:
    return os.open(home / "run" / "watchdog.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)


def ensure_watchdog(home: Path, env: dict[str, str] | None = None) -> bool:
    """Start the folder's watchdog unless one runs (a stopped one is killed first); True when
    one was started. Cheap enough for every peer check."""
    if not _none_running(home):
        return False
    log = _open_log(home)
    with os.fdopen(log, "ab") as out:
        subprocess.Popen(
            [sys.executable, "-m", "ringleader.engines.embedded.watchdog", str(home)],
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, close_fds=True, env=env,
        )  # fmt: skip
    return True


def fork_watchdog(home: Path) -> None:
    """Start the folder's watchdog as a copy of this process: no interpreter to start, and
    nothing more to import before its first check, so a job starting beside it gets the CPU.
    Only from the early supervisor waiting for its job (see early): a process of ringleader's
    own, with one thread and no state open. A copy that finds a watchdog running leaves."""
    if len(os.listdir("/proc/self/task")) != 1:
        return  # a thread's locks would stay taken in the copy
    if not _none_running(home):
        return
    try:
        log = _open_log(home)
    except OSError:
        return  # the job's supervisor starts one (ensure_watchdog)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        middle = os.fork()
    except OSError:
        os.close(log)
        return
    if middle:
        os.close(log)
        os.waitpid(middle, 0)
        return
    code = 1
    try:  # the middle process: in a session of its own, it leaves once the watchdog is forked (init reaps that)
        os.setsid()
        code = 0 if os.fork() else _as_forked_watchdog(home, log)
    finally:
        os._exit(code)


def _as_forked_watchdog(home: Path, log: int) -> int:
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # not the command's pipe, which the early supervisor reads
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    try:
        with open("/proc/self/comm", "w") as fh:  # what ps and top show: the command line is the early supervisor's
            fh.write("rl-watchdog")
    except OSError:
        pass
    try:
        return watch(home)
    except KeyboardInterrupt:
        return 0
    except BaseException:
        import traceback

        traceback.print_exc()
        return 1


def _log(message: str) -> None:
    with contextlib.suppress(OSError):  # a full disk: the line is lost, the watch goes on
        print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} watchdog {os.getpid()}: {message}", flush=True)


def watch(home: Path) -> int:
    """Reconcile every PEER_CHECK_S while a job runs; 0 once none does (or another watchdog
    holds the folder)."""
    fd = _open_lock(home)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0
    me, me_start = os.getpid(), start_time(os.getpid())
    Heartbeat(home, "watchdog", me, me_start, path=home / "run" / BEAT_NAME).start()
    spares = Spares(home)
    try:
        return _watch(home, spares)
    finally:
        spares.close()


def _watch(home: Path, spares: Spares) -> int:
    import sqlite3

    from ringleader.engines.embedded import store
    from ringleader.engines.embedded.reconcile import reconcile
    from ringleader.jobs.states import JobStatus

    while True:
        spares.wait(PEER_CHECK_S)
        if not (home / store.DB_NAME).exists():
            return 0  # the folder was removed under us: nothing left to watch
        try:
            # Opened for each check, never held between them (an open connection would keep
            # SQLite from removing its write-ahead log when the last command closes the state),
            # and without touching the disk reserve, which is the user's commands' to use.
            db, _ = store.Store.open(home, create=False, reserve=False)
            try:
                adopted_or_finished = reconcile(db)
                with db.read() as conn:
                    running = store.job_rows(conn, [JobStatus.RUNNING])
            finally:
                db.close()
        except (RingleaderError, sqlite3.OperationalError, OSError) as exc:
            if not (store.busy(exc) or store.disk_full(exc)):
                # A state no command can open either (a link in its place, damage): nothing to
                # watch until a user mends it, and the next supervisor starts a watchdog again.
                _log(f"stopped: {exc}")
                return 1
            _log(f"check skipped: {exc}")  # busy or full: the next check tries again
            continue
        if adopted_or_finished:
            _log(f"reconciled {', '.join(adopted_or_finished)}")
        if not running:
            return 0  # a pending job with nothing running is placed by the command that queues it
        spares.keep_one()


def _stopped(pid: int) -> bool:
    """Stopped (SIGSTOP, or a debugger's)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rpartition(")")[2].split()[0] in ("T", "t")
    except (OSError, IndexError):
        return False


class Spares:
    """The watchdog's spare supervisor, and the ones it started that became jobs' supervisors
    (its children: reaped as soon as they end, so none lingers as a zombie that looks alive)."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.spare: subprocess.Popen[bytes] | None = None
        self.used: dict[int, subprocess.Popen[bytes]] = {}  # pidfd -> a former spare
        self.failed = 0  # spares in a row that ended without taking a job

    def keep_one(self) -> None:
        """A spare waiting, unless one is (started here; a failed start is tried at the next
        check, up to MAX_SPARE_FAILURES in a row: then jobs start their own supervisors)."""
        if self.failed >= MAX_SPARE_FAILURES:
            return
        if self.spare is not None:
            if _stopped(self.spare.pid):  # each command would wait for its answer in vain
                self.spare.kill()  # its pipe then reports no reader: reaped, and replaced next check
            return
        from ringleader.engines.embedded.spare import SPARE_FLAG, SUPERVISOR_MODULE

        try:
            self.spare = subprocess.Popen(
                [sys.executable, "-m", SUPERVISOR_MODULE, str(self.home), SPARE_FLAG],
                stdin=subprocess.PIPE, stdout=sys.stdout, stderr=subprocess.STDOUT, cwd="/",
                start_new_session=True, close_fds=True,
            )  # fmt: skip
        except OSError as exc:
            _log(f"no spare supervisor: {exc}")

    def wait(self, seconds: float) -> None:
        """Sleep ``seconds``, meanwhile noticing the spare taken (its end of the pipe closed) and
        reaping former spares that ended."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            waiting = select.poll()
            if self.spare is not None and self.spare.stdin is not None:
                waiting.register(self.spare.stdin.fileno(), select.POLLERR)
            for fd in self.used:
                waiting.register(fd, select.POLLIN)
            for fd, _ in waiting.poll(left * 1000):
                self._changed(fd)

    def _changed(self, fd: int) -> None:
        if fd in self.used:  # a former spare ended
            self.used.pop(fd).wait()
            os.close(fd)
            return
        spare, self.spare = self.spare, None  # taken, or ended
        assert spare is not None and spare.stdin is not None
        with contextlib.suppress(OSError):
            spare.stdin.close()
        if spare.poll() is not None and spare.returncode != 0:  # ended without a job
            self.failed += 1
            if self.failed == MAX_SPARE_FAILURES:
                _log(f"no more spare supervisors: {self.failed} in a row ended without a job (see above)")
            return
        self.failed = 0
        try:
            pidfd = os.pidfd_open(spare.pid)
        except OSError:  # already reaped, or no pidfds (then it is reaped when this watchdog ends)
            spare.poll()
            return
        self.used[pidfd] = spare

    def close(self) -> None:
        """The spare reads the end of its stdin and leaves; former spares are jobs' supervisors."""
        if self.spare is not None and self.spare.stdin is not None:
            with contextlib.suppress(OSError):
                self.spare.stdin.close()
        for fd in self.used:
            os.close(fd)


def main(argv: list[str]) -> int:
    with contextlib.suppress(KeyboardInterrupt):
        return watch(Path(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
