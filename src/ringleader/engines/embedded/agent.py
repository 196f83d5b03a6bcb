"""The folder's agent: the one resident loop per state folder, where the embedded engine keeps time.

    python -m ringleader.engines.embedded.agent HOME [--standby]

Commands only commit intent (a job placed, a delete requested) and wake the agent (``wake``).
The agent holds ``run/agent.lock`` (an exclusive flock) while it serves: every running job gets
a thread of it (``supervisor.Supervisor``) that starts the job's ranks as the agent's children,
watches them, enforces the time limit, stops and forgets a deleted job (SIGTERM, the grace,
SIGKILL), records every end and runs the queue's pass after it. A new agent adopts what the last
one left (rank state files, pids with start times). It leaves when no job runs.

Liveness: the agent beats (``run/agent.beat``, see ``liveness``). While jobs run it keeps one
standby: a second agent process waiting for the lock (``run/agent.standby.lock`` keeps it one),
which takes over the moment the agent dies (kill -9), and kills it first when it stopped beating
for the lease (SIGSTOP, a deadlock). Every command makes the same check when it wakes the agent,
so a folder whose standby was lost too recovers at the next command.

Commands wake it through the FIFO ``run/agent.wake`` (``agentctl``); the agent also reads the
state every TICK_S, so a lost wake delays a job by a tick at most. A command that finds no agent
takes the lock itself and hands it to the agent it starts (an inherited descriptor), so racing
commands start one agent, not one each.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import signal
import sqlite3
import stat
import sys
import threading
import time
import traceback
from pathlib import Path

from ringleader.clock import SYSTEM_CLOCK, Clock
from ringleader.engines.embedded import store
from ringleader.engines.embedded.agentctl import (
    BEAT,
    LOCK,
    STANDBY_BEAT,
    STANDBY_LOCK,
    WAKE,
    kill_if_stuck,
    log_entry,
    open_in_run,
    open_lock,
    open_run_dir,
    start,
    try_lock,
)  # fmt: skip
from ringleader.engines.embedded.lifecycle import finish_job, schedule_pass, waits_over
from ringleader.engines.embedded.liveness import Heartbeat
from ringleader.engines.embedded.supervisor import Supervisor, job_processes
from ringleader.errors import RingleaderError
from ringleader.jobs.states import JobStatus
from ringleader.runtime.procs import grace_seconds, start_time, stop_all

TICK_S = 1.0  # how often the agent reads the state when nothing wakes it
IDLE_EXIT_S = 1.0  # how long an agent with no running job waits for one before it leaves
TAKE_OVER_POLL_S = 0.25  # how often a standby tries the lock
RETRY_S = 2.0  # before a job whose thread failed gets another (times the failures so far)
MAX_FAILURES = 3  # threads of one job that raised: then the job is failed, its processes stopped


def _log(message: str) -> None:
    """A line of the agent's log: its stdout, which whoever started it pointed at run/agent.log."""
    with contextlib.suppress(OSError):  # a full disk: the line is lost, the loop goes on
        print(log_entry(message), flush=True)


class Agent:
    """Serves the folder while it holds ``lock``, on ``clock``'s time."""

    def __init__(self, home: Path, lock: int, clock: Clock = SYSTEM_CLOCK) -> None:
        self.home, self.lock = home, lock
        self.clock = clock  # its own and every job supervisor's
        self.me, self.me_start = os.getpid(), start_time(os.getpid())
        self.jobs: dict[str, tuple[threading.Thread, Supervisor | None]] = {}
        self.failed_at: dict[str, tuple[float, int]] = {}  # a job whose thread raised: when, how often
        self.leaving = False
        self.wake_fd = -1
        self.standby_checked_at = 0.0
        self.waits_checked_at = self.clock.monotonic()  # the first look a tick after it starts serving
        # At once: the beat file must name the holder of the lock from its first moment.
        Heartbeat(self.home / "run" / BEAT, self.me, self.me_start).start()

    def serve(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._leave_on_signal)
        self.wake_fd = self._open_wake()
        idle_since: float | None = None
        while not self.leaving:
            jobs = self._running_jobs()
            if jobs is None:
                return 1
            self._supervise(jobs)
            self._decide_again_if_a_wait_is_over()
            if jobs or any(t.is_alive() for t, _ in self.jobs.values()):
                idle_since = None
                self._keep_standby()
            elif idle_since is None:
                idle_since = self.clock.monotonic()
            elif self.clock.monotonic() - idle_since >= IDLE_EXIT_S and self._may_leave():
                return 0
            self._wait(TICK_S)
        # Signalled: the ranks run on, and the standby (or the next command's agent) adopts them.
        _log("signalled: leaving; the next agent adopts the running jobs")
        return 0

    def _leave_on_signal(self, _sig: int, _frame: object) -> None:
        self.leaving = True

    def _open_wake(self) -> int:
        """The FIFO commands wake it through, read and written here (so it never reads an end)."""
        with contextlib.suppress(FileExistsError):
            run = open_run_dir(self.home)
            try:
                os.mkfifo(WAKE, 0o600, dir_fd=run)
            finally:
                os.close(run)
        fd = open_in_run(self.home, WAKE, os.O_RDWR | os.O_NONBLOCK)
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(f"{self.home / 'run' / WAKE} is not a FIFO")
        return fd

    def _wait(self, seconds: float) -> None:
        """Until a command or a job's thread wakes it, or ``seconds``; every thread is poked (a
        delete may have come)."""
        waiting = select.poll()
        waiting.register(self.wake_fd, select.POLLIN)
        if waiting.poll(seconds * 1000):
            with contextlib.suppress(OSError):
                while os.read(self.wake_fd, 4096):
                    pass
            for _, sup in self.jobs.values():
                if sup is not None:
                    sup.poke()

    def _self_wake(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self.wake_fd, b"\n")

    def _running_jobs(self) -> list[str] | None:
        """The RUNNING jobs now; [] for a busy or full state (the next tick reads again), None
        for one no command can open either (a link in its place, damage: said in the log)."""
        if not (self.home / store.DB_NAME).exists():
            return []  # the folder was removed under it: nothing left to serve
        try:
            # Opened for each look, never held between them (an open connection keeps SQLite from
            # removing its write-ahead log, which then grows with every command's write), and
            # without touching the disk reserve, which is the user's commands' to use.
            db, _ = store.Store.open(self.home, create=False, reserve=False)
            try:
                with db.read() as conn:
                    return [r["name"] for r in store.job_rows(conn, [JobStatus.RUNNING])]
            finally:
                db.close()
        except (RingleaderError, sqlite3.OperationalError, OSError) as exc:
            if store.busy(exc) or store.disk_full(exc):
                _log(f"check skipped: {exc}")
                return [name for name, (t, _) in self.jobs.items() if t.is_alive()]
            _log(f"stopped: {exc}")
            return None

    def _supervise(self, jobs: list[str]) -> None:
        """A thread for each running job that has none (placed, or left by the last agent)."""
        for name, (thread, _) in list(self.jobs.items()):
            if not thread.is_alive():
                del self.jobs[name]
        for name in jobs:
            at, failures = self.failed_at.get(name, (0.0, 0))
            if name in self.jobs or (failures and self.clock.monotonic() - at < min(60.0, RETRY_S * failures)):
                continue
            thread = threading.Thread(target=self._job, args=(name,), name=f"job-{name}", daemon=True)
            self.jobs[name] = (thread, None)
            thread.start()

    def _job(self, name: str) -> None:
        try:
            sup = Supervisor(self.home, name, (self.me, self.me_start), placed=self._self_wake, clock=self.clock)
            self.jobs[name] = (self.jobs[name][0], sup)
            sup.run()
        except Exception as exc:  # said in the log; the job gets another thread, or is failed
            failures = self.failed_at.get(name, (0.0, 0))[1] + 1
            self.failed_at[name] = (self.clock.monotonic(), failures)
            _log(f"job {name}: {type(exc).__name__}: {exc}\n{traceback.format_exc()}")
            if failures >= MAX_FAILURES:
                self._give_up(name, f"{type(exc).__name__}: {exc}")
        finally:
            self._self_wake()

    def _give_up(self, name: str, why: str) -> None:
        """A job its threads could not supervise (a damaged row, a bug): its processes stopped,
        then the job FAILED with the reason and its GPUs given to the queue, rather than held
        by a job nobody watches. A state that cannot record even that is left to the next try."""
        try:
            db, _ = store.Store.open(self.home, create=False)
            try:
                with db.read() as conn:
                    insts = [(i["name"], i["pid"], i["pid_start"]) for i in store.instances(conn, name)]
                stop_all(job_processes(self.home, name, insts), grace_seconds())
                with db.write() as conn:
                    row = store.job_row(conn, name)
                    if row is not None and row["status"] == JobStatus.RUNNING.value:
                        reason = f"the agent could not supervise it ({why}); its processes were stopped"
                        now = self.clock.now()
                        finish_job(conn, name, JobStatus.FAILED, reason, now)
                        schedule_pass(conn, now)
            finally:
                db.close()
        except (RingleaderError, sqlite3.Error, OSError) as exc:
            _log(f"job {name}: not failed either: {exc}")

    def _decide_again_if_a_wait_is_over(self) -> None:
        """The queue's pass once a job waiting for better GPUs reaches its longest wait: no end
        of a job prompts it then. Read once a tick (not on every wake: a job's start wakes the
        agent several times); a busy or full state waits for the next."""
        if self.clock.monotonic() - self.waits_checked_at < TICK_S:
            return
        self.waits_checked_at = self.clock.monotonic()
        try:
            db, _ = store.Store.open(self.home, create=False, reserve=False)
            try:
                with db.read() as conn:
                    if not waits_over(conn, self.clock.now()):
                        return
                with db.write() as conn:
                    placed = schedule_pass(conn, self.clock.now())
            finally:
                db.close()
        except (RingleaderError, sqlite3.Error, OSError) as exc:
            _log(f"pass skipped: {exc}")
            return
        if placed:
            self._self_wake()

    def _keep_standby(self) -> None:
        """One standby while jobs run: started when none holds the standby lock (one that stopped
        beating is killed first); checked once a tick."""
        if self.clock.monotonic() - self.standby_checked_at < TICK_S:
            return
        self.standby_checked_at = self.clock.monotonic()
        try:
            lock = open_lock(self.home, STANDBY_LOCK)
        except OSError:
            return
        try:
            free = try_lock(lock) or kill_if_stuck(self.home, STANDBY_BEAT, lock)
            if free:
                fcntl.flock(lock, fcntl.LOCK_UN)  # the standby takes it itself
        finally:
            os.close(lock)
        if free and (why := start(self.home, None)) is not None:
            _log(f"no standby: {why}")

    def _may_leave(self) -> bool:
        """No job runs: let go of the lock, then look once more. A command that committed a job
        before that look saw the lock held and woke this agent, so the look finds the job; one
        that commits after finds the lock free and starts an agent itself."""
        fcntl.flock(self.lock, fcntl.LOCK_UN)
        if not self._running_jobs():
            return True
        return not try_lock(self.lock)  # taken meanwhile: that agent serves


def standby(home: Path, clock: Clock = SYSTEM_CLOCK) -> int:
    """Wait for the lock; kill a holder that stopped beating; then serve."""
    mine = open_lock(home, STANDBY_LOCK)
    if not try_lock(mine):
        return 0  # the folder has its standby
    beat = Heartbeat(home / "run" / STANDBY_BEAT, os.getpid(), start_time(os.getpid())).start()
    lock = open_lock(home, LOCK)
    checked_at = 0.0
    while not try_lock(lock):
        if clock.monotonic() - checked_at >= TICK_S:
            checked_at = clock.monotonic()
            if kill_if_stuck(home, BEAT, lock):
                break
            if not (home / store.DB_NAME).exists():
                return 0
        time.sleep(TAKE_OVER_POLL_S)
    serving = Agent(home, lock, clock)
    beat.stop()
    os.close(mine)  # the next standby may start
    _log("took over the folder")
    return serving.serve()


def main(argv: list[str]) -> int:
    home = Path(argv[0])
    try:
        if argv[1:2] == ["--lock-fd"]:
            _log("serving, started by a command")
            return Agent(home, int(argv[2])).serve()
        return standby(home)
    except KeyboardInterrupt:
        return 0
    except OSError as exc:  # no run/ folder, a link in its place: nothing it may serve
        _log(f"stopped: {exc}")
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
