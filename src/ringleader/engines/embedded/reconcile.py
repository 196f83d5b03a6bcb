"""Crash recovery, run at the start of every command and by every supervisor when its job
ends: no GPU stays allocated to a dead process.

For each RUNNING job whose supervisor is gone (checked by pid and start time, so a reused PID is
not mistaken for it): if any of its processes still lives, a new supervisor adopts the job;
if none does, the job is finished here, with exit codes from the rank wrapper's state files.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from ringleader.engines.embedded import store
from ringleader.jobs.states import InstanceStatus, JobStatus
from ringleader.runtime.plan import instance_targets, read_state, state_path
from ringleader.runtime.procs import alive

# A job placed this recently may still be waiting for its supervisor to start and claim it.
LAUNCH_GRACE_S = 30.0


def _orphaned(row: sqlite3.Row, now: float) -> bool:
    pid = row["supervisor_pid"]
    if pid is None:
        return now - float(row["started_at"] or now) > LAUNCH_GRACE_S
    return not alive(pid, row["supervisor_start"])


def _live(home: Path, conn: sqlite3.Connection, job: str) -> bool:
    return any(
        alive(pid, started)
        for inst in store.instances(conn, job)
        for pid, started in instance_targets(home, job, inst["name"], inst["pid"], inst["pid_start"])
    )


def _close_instances(home: Path, conn: sqlite3.Connection, job: str, now: float) -> tuple[bool, str]:
    """Record what the state files say; (every instance succeeded, the first failure)."""
    ok, first = True, ""
    for inst in store.instances(conn, job):
        if InstanceStatus(inst["status"]).is_terminal():
            ok = ok and inst["status"] == InstanceStatus.SUCCEEDED.value
            continue
        st = read_state(state_path(home, job, inst["name"])) or {}
        code = st.get("exit_code")
        status = InstanceStatus.SUCCEEDED if code == 0 else InstanceStatus.FAILED
        store.update_instance(conn, job, inst["name"], status=status.value, exit_code=code,
                              ended_at=st.get("ended_at", now))  # fmt: skip
        if code != 0:
            ok = False
            first = first or f"{inst['name']} exit code {'unknown' if code is None else code}"
    return ok, first


def reconcile(db: store.Store) -> list[str]:
    """Fix up RUNNING jobs whose supervisor died; returns the jobs that were adopted or finished."""
    now = time.time()
    with db.read() as conn:
        suspects = [r["name"] for r in store.job_rows(conn, [JobStatus.RUNNING]) if _orphaned(r, now)]
    if not suspects:
        return []
    from ringleader.engines.embedded.lifecycle import finish_job, schedule_pass, spawn_supervisors  # the scheduler

    adopt, placed = [], []
    with db.write() as conn:
        now = time.time()  # taken under the lock: the wait for it may be long
        for name in suspects:
            row = store.job_row(conn, name)
            if row is None or row["status"] != JobStatus.RUNNING.value or not _orphaned(row, now):
                continue  # another command got here first
            if row["launched_at"] is None or _live(db.home, conn, name):
                adopt.append(name)
                continue
            ok, first = _close_instances(db.home, conn, name, now)
            who = f"supervisor pid {row['supervisor_pid']}" if row["supervisor_pid"] else "its supervisor"
            if ok:
                finish_job(conn, name, JobStatus.SUCCEEDED, f"{who} was lost after every instance succeeded", now)
            else:
                reason = f"{who} died and the job's processes are gone" + (f"; first failure: {first}" if first else "")
                finish_job(conn, name, JobStatus.FAILED, reason, now)
        if len(adopt) < len(suspects):
            placed = schedule_pass(conn, now)
    spawn_supervisors(db.home, [*adopt, *placed])
    return suspects
