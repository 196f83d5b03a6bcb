"""Reading a ringleader state database in tests: to prove that refused commands change nothing."""

from __future__ import annotations

import sqlite3
from pathlib import Path


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
