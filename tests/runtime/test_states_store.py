"""States, the transition table and the state database's guards (version, corruption)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from ringleader.errors import StateError
from ringleader.runtime import store
from ringleader.runtime.api import Runtime
from ringleader.runtime.states import TRANSITIONS, InstanceStatus, JobStatus, can_move


def test_every_state_has_a_docstring_and_terminal_states_have_no_exit() -> None:
    for status in JobStatus:
        assert status in TRANSITIONS
        assert status.is_terminal() == (not TRANSITIONS[status])
    assert can_move(JobStatus.PENDING, JobStatus.RUNNING)
    assert not can_move(JobStatus.SUCCEEDED, JobStatus.RUNNING)
    assert not can_move(JobStatus.RUNNING, JobStatus.PENDING)
    assert InstanceStatus.STOPPED.is_terminal() and not InstanceStatus.RUNNING.is_terminal()


def test_reads_do_not_create_the_database(home: Path) -> None:
    rt = Runtime.open(home)
    assert rt.list_jobs() == []
    assert [n.name for n in rt.nodes().nodes] == ["local"]
    assert not (home / "state.db").exists()


def test_illegal_transition_is_refused(rt: Runtime, h) -> None:
    rt.submit(h.spec("cpu", h.py("pass"), gpus=0))
    rt.wait("cpu", 60)
    with pytest.raises(StateError, match="not an allowed transition"), rt.db.write() as conn:
        store.update_job(conn, "cpu", status=JobStatus.RUNNING)


def test_newer_schema_is_refused_with_the_file_and_the_fix(rt: Runtime, h) -> None:
    rt.submit(h.spec("cpu", h.py("pass"), gpus=0))
    rt.wait("cpu", 60)
    db = rt.home / "state.db"
    conn = sqlite3.connect(db)
    conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    with pytest.raises(StateError) as err:
        Runtime.open(rt.home)
    assert str(db) in err.value.message and "newer" in err.value.message
    assert "upgrade ringleader" in err.value.fix
    conn = sqlite3.connect(db)  # so the fixture's cleanup can open it again
    conn.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()


@pytest.mark.parametrize("content", [b"this is not sqlite at all" * 100, b""])
def test_corrupted_database_is_refused(home: Path, content: bytes) -> None:
    home.mkdir(parents=True)
    (home / "state.db").write_bytes(content or b"SQLite format 3\x00" + b"\xff" * 200)
    with pytest.raises(StateError) as err:
        Runtime.open(home)
    assert str(home / "state.db") in err.value.message
    assert "mv " in err.value.fix


def test_foreign_sqlite_database_is_refused(home: Path) -> None:
    home.mkdir(parents=True)
    conn = sqlite3.connect(home / "state.db")
    conn.execute("CREATE TABLE other (x)")
    conn.commit()
    conn.close()
    with pytest.raises(StateError, match="not a ringleader database"):
        Runtime.open(home)
