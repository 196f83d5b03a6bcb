"""States, the transition table and the state database's guards (version, corruption)."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest

from ringleader.engines.embedded import store
from ringleader.engines.embedded.engine import Runtime
from ringleader.errors import StateError
from ringleader.jobs.states import TRANSITIONS, InstanceStatus, JobStatus, can_move


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
    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(store.SCHEMA_VERSION),))
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


def test_a_version_1_database_keeps_its_nodes_after_the_upgrade(home: Path) -> None:
    """Version 1 stored each node's whole topology as JSON; version 2 stores each distinct
    topology once. An old database opens with the same nodes, labels and allocations."""
    from ringleader.jobs.codec import node_to_dict
    from ringleader.topology import NodeSpec, SshAddress, preset

    nodes = [NodeSpec("a", preset("dgx1v"), 25.0, (("rack", "r1"),), True, SshAddress("10.0.0.5", "ubuntu", 2222)),
             NodeSpec("b", preset("dgx1v"), 25.0, (), True),
             NodeSpec("c", preset("dgx-a100"), 100.0, (("gpu-schedule", "topology"),), True)]  # fmt: skip
    home.mkdir(parents=True)
    conn = sqlite3.connect(home / "state.db")
    for stmt in store.MIGRATIONS[1]:
        conn.execute(stmt)
    conn.executemany("INSERT INTO meta VALUES (?, ?)",
                     [("app", "ringleader"), ("schema_version", "1"), ("cluster", "old.yaml")])  # fmt: skip
    conn.executemany("INSERT INTO nodes VALUES (?, ?, ?)",
                     [(n.name, i, json.dumps(node_to_dict(n))) for i, n in enumerate(nodes)])  # fmt: skip
    conn.execute("INSERT INTO allocations VALUES ('c', 3, 'old-job')")
    # The job holding it, just placed (its supervisor not yet started): an allocation of a job
    # that does not exist would be freed when the state is opened.
    conn.execute("INSERT INTO jobs (name, status, priority, spec, created_at, started_at)"
                 " VALUES ('old-job', 'RUNNING', 0, '{}', ?, ?)", (time.time(), time.time()))  # fmt: skip
    conn.commit()
    conn.close()
    state = Runtime.open(home).nodes()
    assert [ns.spec for ns in state.nodes] == nodes
    assert state.nodes[0].spec.topology is state.nodes[1].spec.topology  # decoded once
    assert state.nodes[2].allocated == ((3, "old-job"),)
    conn = sqlite3.connect(home / "state.db")
    assert conn.execute("SELECT count(*) FROM topologies").fetchone()[0] == 2
    conn.close()


def test_replacing_nodes_drops_topologies_no_node_uses(rt: Runtime) -> None:
    from ringleader.topology import NodeSpec, preset

    with rt.db.write() as conn:
        store.replace_nodes(conn, [NodeSpec(f"n{i}", preset("dgx1v"), 25.0, (), True) for i in range(50)])
        store.replace_nodes(conn, [NodeSpec("m", preset("dgx-h100"), 25.0, (), True)])
        assert conn.execute("SELECT count(*) FROM topologies").fetchone()[0] == 1
        assert [s.topology for s in store.get_nodes(conn)] == [preset("dgx-h100")]
