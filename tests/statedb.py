"""Reading a ringleader state database in tests: to prove that refused commands change nothing."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import time
from pathlib import Path

from ringleader.engines.embedded import store
from ringleader.engines.embedded.engine import Runtime
from ringleader.runtime.procs import find_by_args


def dump_db(home: Path) -> list[str]:
    """Every row of the state database (empty list if it does not exist)."""
    db = home / "state.db"
    if not db.exists():
        return []
    conn = sqlite3.connect(db)
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


def supervisor_of(rt: Runtime, job: str) -> tuple[int, int]:
    """The (pid, start time) of the agent recorded as holding a job."""
    with rt.db.read() as conn:
        row = store.job_row(conn, job)
        assert row is not None
        return row["supervisor_pid"], row["supervisor_start"]


def agent_pids(home: Path) -> list[int]:
    """The folder's agent processes (serving or standby), by their command line."""
    return [pid for pid, _ in find_by_args("ringleader.engines.embedded.agent", str(home))]


def kill_agents(home: Path) -> None:
    """SIGKILL every agent of the folder, serving and standby, until none is left (an agent
    killed second may have started a standby meanwhile)."""
    quiet_since = time.monotonic()
    while time.monotonic() - quiet_since < 0.5:
        pids = agent_pids(home)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if pids:
            quiet_since = time.monotonic()
        time.sleep(0.05)
