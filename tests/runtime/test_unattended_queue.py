"""An unattended queue: nobody types a command, yet the folder's agent killed -9 or stopped
(SIGSTOP) is replaced by its standby, its jobs adopted and the next pending job started, in that
order and never before the lease ran out; the agent outlasts a busy write lock. Nothing here calls
Runtime.open or wait (both look after the agent): only reads of the state. How soon it all
happens is printed, not asserted: a loaded machine decides that."""

from __future__ import annotations

import os
import signal
import sqlite3
import time
from pathlib import Path

import pytest

from ringleader.engines.embedded.engine import Runtime
from ringleader.engines.embedded.liveness import HEARTBEAT_S
from ringleader.jobs.states import JobStatus
from ringleader.runtime.procs import alive
from statedb import agent_pids, supervisor_of
from waiting import wait_for

LEASE_S = 3.0


def status(rt: Runtime, job: str) -> JobStatus:
    return rt.get(job).status  # a plain read: no agent started


def three_jobs(rt: Runtime, h, tmp_path: Path) -> tuple[Path, Path]:  # type: ignore[no-untyped-def]
    """On one 4-GPU node: `peer` (1 GPU), `victim` (3 GPUs) and `next` (3 GPUs, pending behind
    victim); the agent's standby waiting. Returns the files that release their ranks."""
    peer_release, victim_release = tmp_path / "peer-release", tmp_path / "victim-release"
    rt.submit(h.spec("peer", h.py(h.waiting_rank(peer_release)), workers=1))
    rt.submit(h.spec("victim", h.py(h.waiting_rank(victim_release)), workers=3))
    rt.submit(h.spec("next", h.py("print('next ran')"), workers=3))
    h.wait_for(lambda: all("up" in rt.logs("victim", i.name) for i in rt.get("victim").instances),
               what="victim's ranks to start")  # fmt: skip
    assert status(rt, "next") is JobStatus.PENDING
    h.wait_for(lambda: len(agent_pids(rt.home)) == 2, what="the agent's standby")
    return peer_release, victim_release


@pytest.mark.slow
def test_killed_agent_is_replaced_by_its_standby_and_the_next_job_starts_with_no_command(
    small: Runtime, h, tmp_path: Path
) -> None:
    peer_release, victim_release = three_jobs(small, h, tmp_path)
    pid, started = supervisor_of(small, "victim")
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not alive(pid, started), what="the agent to die")
    victim_release.touch()  # its ranks end while the standby takes over
    released = time.monotonic()
    wait_for(lambda: status(small, "next") is not JobStatus.PENDING, what="the next job to start")
    took = time.monotonic() - released
    victim = small.get("victim")
    assert victim.status is JobStatus.SUCCEEDED
    adopted = [e.message for e in victim.events if e.kind == "Adopted"]
    assert len(adopted) == 1 and f"its agent pid {pid} was lost" in adopted[0]
    # Its true end is the ranks' own (from their state files), not when the new agent noticed.
    assert victim.ended_at == max(i.ended_at or 0 for i in victim.instances)
    started_next = small.get("next").started_at
    assert started_next is not None and victim.ended_at is not None and started_next >= victim.ended_at
    print(f"\nkill -9 of the agent: next job placed {took:.2f} s after the ranks were released")
    peer_release.touch()
    wait_for(lambda: status(small, "next").is_terminal() and status(small, "peer").is_terminal(), what="the rest")
    assert status(small, "next") is JobStatus.SUCCEEDED
    # The agent leaves with the last running job, and its standby with it: nothing is left behind.
    wait_for(lambda: not agent_pids(small.home), what="the agent and its standby to leave")


@pytest.mark.slow
def test_stopped_agent_is_replaced_within_the_lease_and_the_queue_goes_on(
    small: Runtime, h, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RINGLEADER_LEASE_S", str(LEASE_S))  # agents inherit RINGLEADER_* settings
    peer_release, victim_release = three_jobs(small, h, tmp_path)
    pid, started = supervisor_of(small, "victim")
    os.kill(pid, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        wait_for(lambda: supervisor_of(small, "victim")[0] != pid, what="a new agent to hold the job")
    finally:
        if alive(pid, started):
            os.kill(pid, signal.SIGCONT)
    took = time.monotonic() - stopped
    print(f"\nSIGSTOP of the agent: replaced {took:.2f} s later (lease {LEASE_S:g} s)")
    # Its last beat came at most a beat before the stop: a replacement before its lease ran out
    # would take a job from a live agent (a lower bound holds however loaded the machine is).
    assert took >= LEASE_S - HEARTBEAT_S
    assert not alive(pid, started)  # killed, so it can never wake up and act on a job
    assert "Adopted" in {e.kind for e in small.get("victim").events}
    assert status(small, "victim") is JobStatus.RUNNING  # its ranks kept training meanwhile
    victim_release.touch()
    wait_for(lambda: status(small, "next") is not JobStatus.PENDING, what="the next job to start")
    assert status(small, "victim") is JobStatus.SUCCEEDED
    peer_release.touch()
    wait_for(lambda: status(small, "peer").is_terminal(), what="the peer to end")


@pytest.mark.slow
def test_agent_outlasts_a_write_lock_held_longer_than_the_lock_timeout(
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
        time.sleep(2.0)  # four lock timeouts: the agent's writes are refused meanwhile
        assert status(small, "patient") is JobStatus.RUNNING
        pid, started = supervisor_of(small, "patient")
        assert alive(pid, started)  # waiting, not dead of a BusyError
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    wait_for(lambda: status(small, "patient").is_terminal(), what="the job to be recorded")
    view = small.get("patient")
    assert view.status is JobStatus.SUCCEEDED and view.reason is None  # recorded by its own agent
    for log in (small.home / "run" / "patient" / "supervisor.log", small.home / "run" / "agent.log"):
        assert not log.exists() or "Traceback" not in log.read_text()
