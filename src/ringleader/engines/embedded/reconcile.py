"""Crash recovery, run at the start of every command, every PEER_CHECK_S by every running
supervisor, and by every supervisor when its job ends: no GPU stays allocated to a dead process.

For each RUNNING job whose supervisor is gone (checked by pid and start time, so a reused PID is
not mistaken for it) or stuck (alive, but no heartbeat for the lease: SIGSTOP, a deadlock; it is
killed first): if any of its processes still lives, a new supervisor adopts the job, and if the
lost one never wrote the job's plan (no rank can have started), a new supervisor starts it; else
the job is finished here, with exit codes and end times from the rank wrapper's state files.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ringleader.engines.embedded import store
from ringleader.engines.embedded.liveness import lease_seconds, seconds_since, stale_for
from ringleader.jobs.states import InstanceStatus, JobStatus
from ringleader.runtime.plan import instance_targets, plan_written, read_state, state_path
from ringleader.runtime.procs import alive, signal_proc

if TYPE_CHECKING:
    from ringleader.topology import NodeSpec

# A job placed this recently may still be waiting for its supervisor to start and claim it.
LAUNCH_GRACE_S = 30.0
STUCK_KILL_WAIT_S = 2.0


def _orphaned(home: Path, row: sqlite3.Row, now: float) -> bool:
    """No live supervisor holds the job: none ever claimed it within LAUNCH_GRACE_S of its
    placement (counted on the boot-time clock), or its holder died, or it is stuck."""
    pid = row["supervisor_pid"]
    if pid is None:
        since = seconds_since(row["placed_clock"])
        if since is None:  # placed by a version that did not record it: the wall clock
            since = now - float(row["started_at"] or now)
        return since > LAUNCH_GRACE_S
    return not alive(pid, row["supervisor_start"]) or _stuck(home, row)


def _stuck(home: Path, row: sqlite3.Row) -> bool:
    silent = stale_for(home, row["name"], row["supervisor_pid"], row["supervisor_start"])
    return silent is not None and silent > lease_seconds()


def _kill_stuck(home: Path, row: sqlite3.Row) -> str:
    """SIGKILL a holder that stopped beating (a stopped process takes SIGKILL too), so that it
    can never wake up and act on a job another supervisor has taken; returns what happened."""
    import signal

    pid, started = row["supervisor_pid"], row["supervisor_start"]
    silent = stale_for(home, row["name"], pid, started) or 0.0
    signal_proc(pid, started, signal.SIGKILL)
    deadline = time.monotonic() + STUCK_KILL_WAIT_S
    while alive(pid, started) and time.monotonic() < deadline:
        time.sleep(0.02)
    return f"supervisor pid {pid} stopped answering (no heartbeat for {silent:.0f} s) and was killed"


def _live(home: Path, conn: sqlite3.Connection, job: str) -> bool:
    return any(
        alive(pid, started)
        for inst in store.instances(conn, job)
        for pid, started in instance_targets(home, job, inst["name"], inst["pid"], inst["pid_start"])
    )


def _close_instances(home: Path, conn: sqlite3.Connection, job: str, now: float) -> tuple[bool, str, float | None]:
    """Record what the state files say; (every instance succeeded, the first failure, when the
    last instance ended: the job's true end, None if a state file does not tell)."""
    ok, first, ends = True, "", []
    for inst in store.instances(conn, job):
        if InstanceStatus(inst["status"]).is_terminal():
            ok = ok and inst["status"] == InstanceStatus.SUCCEEDED.value
            ends.append(inst["ended_at"])
            continue
        st = read_state(state_path(home, job, inst["name"])) or {}
        code = st.get("exit_code")
        status = InstanceStatus.SUCCEEDED if code == 0 else InstanceStatus.FAILED
        ended = st.get("ended_at")
        ends.append(ended)
        store.update_instance(conn, job, inst["name"], status=status.value, exit_code=code,
                              ended_at=now if ended is None else ended)  # fmt: skip
        if code != 0:
            ok = False
            first = first or f"{inst['name']} exit code {'unknown' if code is None else code}"
    known = [float(e) for e in ends if e is not None]
    return ok, first, (max(known) if known and len(known) == len(ends) else None)


def reconcile(db: store.Store) -> list[str]:
    """Fix up RUNNING jobs whose supervisor died or is stuck; returns the jobs adopted or finished."""
    now = time.time()
    with db.read() as conn:
        suspects = [r["name"] for r in store.job_rows(conn, [JobStatus.RUNNING]) if _orphaned(db.home, r, now)]
    if not suspects:
        return []
    from ringleader.engines.embedded.containers import placed_nodes
    from ringleader.engines.embedded.lifecycle import finish_job, schedule_pass, spawn_supervisors  # the scheduler

    adopt, placed, finished = [], [], []
    with db.write() as conn:
        now = time.time()  # taken under the lock: the wait for it may be long
        for name in suspects:
            row = store.job_row(conn, name)
            if row is None or row["status"] != JobStatus.RUNNING.value or not _orphaned(db.home, row, now):
                continue  # another command got here first
            killed = _kill_stuck(db.home, row) if row["supervisor_pid"] and _stuck(db.home, row) else ""
            if killed:
                store.add_event(conn, name, "SupervisorStuck", killed, now)
            if row["launched_at"] is None or not plan_written(db.home, name) or _live(db.home, conn, name):
                adopt.append(name)  # (never launched: its new supervisor starts it)
                continue
            ok, first, ended = _close_instances(db.home, conn, name, now)
            finished.append((row["spec"], placed_nodes(conn, name, row["placement"])))
            who = f"supervisor pid {row['supervisor_pid']}" if row["supervisor_pid"] else "its supervisor"
            if ok:
                reason = f"{who} was lost after every instance succeeded"
                finish_job(conn, name, JobStatus.SUCCEEDED, reason, now, ended_at=ended)
            else:
                reason = f"{who} died and the job's processes are gone" + (f"; first failure: {first}" if first else "")
                finish_job(conn, name, JobStatus.FAILED, reason, now, ended_at=ended)
        if len(adopt) < len(suspects):
            placed = schedule_pass(conn, now)
    _remove_containers(db.home, finished)
    spawn_supervisors(db.home, [*adopt, *placed])
    return suspects


def _remove_containers(home: Path, finished: list[tuple[str, list[NodeSpec]]]) -> None:
    """What the lost supervisor would have removed: the container records its ranks left."""
    import json

    from ringleader.engines.embedded.containers import remove_containers
    from ringleader.jobs.spec import JobSpec

    for text, nodes in finished:
        spec = JobSpec.from_dict(json.loads(text))
        if spec.image:
            remove_containers(home, spec, nodes)
