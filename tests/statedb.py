"""Reading a ringleader state database in tests: to prove that refused commands change nothing."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from ringleader.engines.embedded import store
from ringleader.engines.embedded.engine import Runtime


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
    """The (pid, start time) recorded for a job's supervisor."""
    with rt.db.read() as conn:
        row = store.job_row(conn, job)
        assert row is not None
        return row["supervisor_pid"], row["supervisor_start"]
