"""`ringleader state export|import`: a consistent copy of the state database, and its restore.

Export uses SQLite's online backup, so it is a consistent snapshot even while other commands and
the agent write. Import checks the copy (a ringleader database of a schema this version reads,
passing SQLite's integrity check) and replaces the state only while no job is RUNNING (a running
job's agent and processes belong to the state they were started from).
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from ringleader.engines.embedded import store
from ringleader.errors import ConflictError, StateError, UsageError
from ringleader.jobs.states import JobStatus
from ringleader.statefolder import check_reachable, make_private_home


def export_state(home: Path, target: Path) -> int:
    """Write a consistent copy of ``home``'s state to ``target`` (0600); returns its size."""
    check_reachable(home)  # another user's folder: one line naming its owner
    source = home / store.DB_NAME
    if not source.exists():
        raise UsageError(f"there is no state to export in {home}", "run a command that creates it first")
    if os.path.lexists(target):
        raise UsageError(f"{target} already exists", "give a new file name")
    db, _ = store.Store.open(home, create=False)
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        db.close()
        raise UsageError(f"cannot write {target}: {exc.strerror}", "give a writable path") from None
    os.close(fd)
    out = sqlite3.connect(target)
    try:
        db.conn.backup(out)
    except sqlite3.OperationalError as exc:  # a full disk: no half-written copy left to restore from
        out.close()
        target.unlink(missing_ok=True)
        raise StateError(f"cannot write {target}: {exc}", "free some space there, or give a path elsewhere") from None
    finally:
        out.close()
        db.close()
    return target.stat().st_size


def check_backup(path: Path) -> None:
    """One line when ``path`` is not a state database this ringleader can restore."""
    if not os.path.isfile(path) or os.path.getsize(path) == 0:  # neither raises where it may not look
        raise UsageError(f"{path} is not a file with a saved state", "give a file written by `ringleader state export`")
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            version = store._version(conn, path)
            problems = [r[0] for r in conn.execute("PRAGMA integrity_check").fetchall()]
        finally:
            conn.close()
    except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path} is not a ringleader state database ({store.sqlite_problem(exc)})",
                         "give an exported state") from None  # fmt: skip
    except StateError as exc:
        raise UsageError(exc.message, "give a file written by `ringleader state export`") from None
    if not 1 <= version <= store.SCHEMA_VERSION:  # older ones are upgraded when next opened
        raise UsageError(f"{path} has schema version {version}, this ringleader reads up to {store.SCHEMA_VERSION}",
                         "restore it with the ringleader version that exported it")  # fmt: skip
    if problems != ["ok"]:
        raise UsageError(f"{path} fails SQLite's integrity check: {problems[0]}", "restore another copy")


def import_state(home: Path, source: Path) -> None:
    """Replace ``home``'s state with the checked copy ``source``."""
    check_backup(source)
    check_reachable(home)
    current = home / store.DB_NAME
    if current.exists() and current.stat().st_size > 0:
        try:
            db, _ = store.Store.open(home, create=False)
        except StateError:
            db = None  # a damaged state: exactly what import is for
        if db is not None:
            with db.read() as conn:
                running = [r["name"] for r in store.job_rows(conn, [JobStatus.RUNNING])]
            db.close()
            if running:
                raise ConflictError(
                    f"job(s) {', '.join(running)} are running on the current state",
                    "wait for them or delete them, then import",
                )
    make_private_home(home)
    tmp = home / f".import-{os.getpid()}.db"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.close(fd)
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True)
    dst = sqlite3.connect(tmp)
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()
    for suffix in ("-wal", "-shm"):
        Path(str(current) + suffix).unlink(missing_ok=True)
    os.replace(tmp, current)
