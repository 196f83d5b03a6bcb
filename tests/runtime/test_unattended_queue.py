"""An unattended queue: nobody types a command, yet a supervisor killed -9 or stopped (SIGSTOP)
is noticed by its peers (or, for the last one running, by the queue's watchdog), its job
reconciled and the next pending job started within a stated bound; a supervisor outlasts a busy
write lock. Nothing here calls Runtime.open or wait (both
reconcile): only reads of the state."""

from __future__ import annotations

import os
import signal
import sqlite3
import time
from pathlib import Path

import pytest

from ringleader.engines.embedded.engine import Runtime
from ringleader.engines.embedded.liveness import PEER_CHECK_S
from ringleader.jobs.states import JobStatus
from ringleader.runtime.procs import alive
from statedb import supervisor_of

LEASE_S = 3.0


def until(check, timeout: float, what: str) -> float:  # type: ignore[no-untyped-def]
    """Seconds until ``check()`` held (polled every 50 ms); fails after ``timeout``."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if check():
            return time.monotonic() - started
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")



def status(rt: Runtime, job: str) -> JobStatus:
    return rt.get(job).status  # a plain read: no reconcile, no supervisor started


def three_jobs(rt: Runtime, h, tmp_path: Path) -> tuple[Path, Path]:  # type: ignore[no-untyped-def]
    """On one 4-GPU node: `peer` (1 GPU, its supervisor the only watcher left), `victim` (3 GPUs)
    and `next` (3 GPUs, pending behind victim). Returns the files that release their ranks."""
    peer_release, victim_release = tmp_path / "peer-release", tmp_path / "victim-release"
    rt.submit(h.spec("peer", h.py(h.waiting_rank(peer_release)), workers=1))
    rt.submit(h.spec("victim", h.py(h.waiting_rank(victim_release)), workers=3))
    rt.submit(h.spec("next", h.py("print('next ran')"), workers=3))
    h.wait_for(lambda: all("up" in rt.logs("victim", i.name) for i in rt.get("victim").instances),
               what="victim's ranks to start")  # fmt: skip
    assert status(rt, "next") is JobStatus.PENDING
    return peer_release, victim_release


@pytest.mark.slow
def test_killed_supervisor_is_reconciled_by_a_peer_and_the_next_job_starts_with_no_command(
    small: Runtime, h, tmp_path: Path
) -> None:
    peer_release, victim_release = three_jobs(small, h, tmp_path)
    pid, started = supervisor_of(small, "victim")
    os.kill(pid, signal.SIGKILL)
    until(lambda: not alive(pid, started), 10, "the supervisor to die")
    victim_release.touch()  # its ranks end while no supervisor watches them
    took = until(lambda: status(small, "next") is not JobStatus.PENDING, 30, "the next job to start")
    victim = small.get("victim")
    assert victim.status is JobStatus.SUCCEEDED
    assert victim.reason is not None and f"supervisor pid {pid} was lost" in victim.reason
    # Its true end is the ranks' own (from their state files), not when the peer noticed.
    assert victim.ended_at == max(i.ended_at or 0 for i in victim.instances)
    print(f"\nkill -9 of a supervisor: next job placed {took:.2f} s after the ranks were released")
    assert took < PEER_CHECK_S + 3.0  # one peer check, plus a loaded 2-core box's slack
    peer_release.touch()
    until(lambda: status(small, "next").is_terminal() and status(small, "peer").is_terminal(), 30, "the rest")
    assert status(small, "next") is JobStatus.SUCCEEDED


def stop_until_replaced(rt: Runtime, job: str) -> tuple[int, int, float]:
    """SIGSTOP the job's supervisor; (its pid, start time, seconds until another took the job)."""
    pid, started = supervisor_of(rt, job)
    os.kill(pid, signal.SIGSTOP)
    try:
        took = until(lambda: supervisor_of(rt, job)[0] != pid, 30, "a new supervisor to take the job")
    finally:
        if alive(pid, started):
            os.kill(pid, signal.SIGCONT)
    return pid, started, took


def last_job(rt: Runtime, h, tmp_path: Path) -> Path:  # type: ignore[no-untyped-def]
    """`victim` holds all 4 GPUs, so its supervisor is the only one; `next` waits behind it."""
    victim_release = tmp_path / "victim-release"
    rt.submit(h.spec("victim", h.py(h.waiting_rank(victim_release)), workers=4))
    rt.submit(h.spec("next", h.py("print('next ran')"), workers=4))
    h.wait_for(lambda: all("up" in rt.logs("victim", i.name) for i in rt.get("victim").instances),
               what="victim's ranks to start")  # fmt: skip
    assert status(rt, "next") is JobStatus.PENDING
    return victim_release


@pytest.mark.slow
def test_the_last_supervisor_killed_is_noticed_by_the_watchdog_and_the_queue_goes_on(
    small: Runtime, h, tmp_path: Path
) -> None:
    victim_release = last_job(small, h, tmp_path)
    pid, started = supervisor_of(small, "victim")
    os.kill(pid, signal.SIGKILL)
    until(lambda: not alive(pid, started), 10, "the supervisor to die")
    victim_release.touch()  # its ranks end while no supervisor of any job runs
    took = until(lambda: status(small, "next") is not JobStatus.PENDING, 30, "the next job to start")
    print(f"\nkill -9 of the last supervisor: next job placed {took:.2f} s after the ranks were released")
    assert took < PEER_CHECK_S + 3.0
    victim = small.get("victim")
    assert victim.status is JobStatus.SUCCEEDED and f"supervisor pid {pid} was lost" in (victim.reason or "")
    until(lambda: status(small, "next").is_terminal(), 30, "the next job to end")
    assert status(small, "next") is JobStatus.SUCCEEDED
    # The watchdog leaves with the last running job: nothing is left behind.
    until(lambda: not watchdog_running(small.home), PEER_CHECK_S + 5.0, "the watchdog to exit")


@pytest.mark.slow
def test_the_last_supervisor_stopped_is_replaced_by_the_watchdog_within_the_lease(
    small: Runtime, h, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RINGLEADER_LEASE_S", str(LEASE_S))
    victim_release = last_job(small, h, tmp_path)
    pid, started, took = stop_until_replaced(small, "victim")
    assert LEASE_S <= took < LEASE_S + PEER_CHECK_S + 3.0
    assert not alive(pid, started)
    victim_release.touch()
    until(lambda: status(small, "next").is_terminal(), 30, "the next job to end")
    assert status(small, "victim") is JobStatus.SUCCEEDED and status(small, "next") is JobStatus.SUCCEEDED


def watchdog_running(home: Path) -> bool:
    import fcntl

    fd = os.open(home / "run" / "watchdog.lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


@pytest.mark.slow
def test_stopped_supervisor_is_replaced_within_the_lease_and_the_queue_goes_on(
    small: Runtime, h, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RINGLEADER_LEASE_S", str(LEASE_S))  # supervisors inherit RINGLEADER_* settings
    peer_release, victim_release = three_jobs(small, h, tmp_path)
    pid, started, took = stop_until_replaced(small, "victim")
    print(f"\nSIGSTOP of a supervisor: replaced {took:.2f} s later (lease {LEASE_S:g} s)")
    assert LEASE_S <= took < LEASE_S + PEER_CHECK_S + 3.0
    assert not alive(pid, started)  # killed, so it can never wake up and act on the job
    events = {e.kind: e.message for e in small.get("victim").events}
    assert "stopped answering" in events["SupervisorStuck"] and "Adopted" in events
    assert status(small, "victim") is JobStatus.RUNNING  # its ranks kept training meanwhile
    victim_release.touch()
    until(lambda: status(small, "next") is not JobStatus.PENDING, 30, "the next job to start")
    assert status(small, "victim") is JobStatus.SUCCEEDED
    peer_release.touch()
    until(lambda: status(small, "peer").is_terminal(), 30, "the peer to end")


@pytest.mark.slow
def test_supervisor_outlasts_a_write_lock_held_longer_than_the_lock_timeout(
    small: Runtime, h, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RINGLEADER_LOCK_TIMEOUT_S", "0.5")
    release = tmp_path / "release"
    small.submit(h.spec("patient", h.py(h.waiting_rank(release)), workers=1))
    h.wait_for(lambda: "up" in small.logs("patient"), what="the rank to start")
    holder = sqlite3.connect(small.home / "state.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    try:
        release.touch()
        time.sleep(2.0)  # four lock timeouts: the supervisor's writes are refused meanwhile
        assert status(small, "patient") is JobStatus.RUNNING
        pid, started = supervisor_of(small, "patient")
        assert alive(pid, started)  # waiting, not dead of a BusyError
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    until(lambda: status(small, "patient").is_terminal(), 20, "the job to be recorded")
    view = small.get("patient")
    assert view.status is JobStatus.SUCCEEDED and view.reason is None  # recorded by its own supervisor
    assert "Traceback" not in (small.home / "run" / "patient" / "supervisor.log").read_text()


def test_the_watchdog_leaves_a_state_no_command_can_open(small: Runtime, tmp_path: Path) -> None:
    """A state folder refused to every command (here a link in place of its logs folder) has
    nothing to watch: the watchdog says why in its log and exits, instead of living for ever."""
    import shutil
    import subprocess
    import sys

    logs = small.home / "logs"
    shutil.rmtree(logs, ignore_errors=True)
    logs.symlink_to(tmp_path)
    try:
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "ringleader.engines.embedded.watchdog", str(small.home)],
                              capture_output=True, text=True, timeout=30)  # fmt: skip
        took = time.monotonic() - started
    finally:
        logs.unlink()
    assert done.returncode == 1 and "stopped:" in done.stdout and "symbolic link" in done.stdout, done
    assert took < PEER_CHECK_S + 10
