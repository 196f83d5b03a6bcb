"""`state export` is consistent while others write; `state import` restores it after the state
was lost, and refuses what it cannot restore."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from ringleader.engines.embedded.engine import JobSpec, Runtime
from statedb import kill_agents

REPO = Path(__file__).resolve().parents[2]


def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RINGLEADER_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "ringleader.cli.main", *args], env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip


@pytest.mark.slow
def test_export_under_concurrent_writers_then_import_after_the_state_is_lost(tmp_path: Path) -> None:
    home = tmp_path / "home"
    rt = Runtime.open(home)
    rt.apply_cluster(REPO / "examples" / "seeds-cluster.yaml")
    stop = threading.Event()

    def label_forever() -> None:  # a writer that never rests while we export
        i = 0
        other = Runtime.open(home)
        while not stop.is_set():
            other.label_node("cn-shanghai-173", "round", str(i), overwrite=True)
            i += 1
        other.close()

    writer = threading.Thread(target=label_forever)
    writer.start()
    try:
        for i in range(3):
            rt.submit(JobSpec(f"done-{i}", 1, 1, [sys.executable, "-c", "pass"]))
        for i in range(3):
            rt.wait(f"done-{i}", timeout=60)
        backup = tmp_path / "backup.db"
        done = cli(home, "state", "export", str(backup))
    finally:
        stop.set()
        writer.join()
    assert done.returncode == 0, done.stderr
    assert oct(backup.stat().st_mode & 0o777) == "0o600"
    kill_agents(home)  # nothing may write the file back (the agent leaves a second after the jobs end)
    (home / "state.db").write_bytes(b"")  # lost
    assert cli(home, "list").returncode == 2
    restored = cli(home, "state", "import", str(backup))
    assert restored.returncode == 0, restored.stderr
    listed = cli(home, "list")
    assert listed.returncode == 0 and all(f"done-{i}" in listed.stdout for i in range(3))
    assert "cn-shanghai-173" in cli(home, "top", "node").stdout


def test_import_refuses_a_file_that_is_not_a_state_and_changes_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert cli(home, "cluster", "apply", "-f", str(REPO / "examples" / "seeds-cluster.yaml")).returncode == 0
    before = (home / "state.db").read_bytes()
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"junk" * 1000)
    done = cli(home, "state", "import", str(junk))
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "not a ringleader state" in done.stderr
    assert (home / "state.db").read_bytes() == before


def test_import_refused_while_a_job_runs(tmp_path: Path) -> None:
    home = tmp_path / "home"
    rt = Runtime.open(home)
    rt.apply_cluster(REPO / "examples" / "seeds-cluster.yaml")
    backup = tmp_path / "b.db"
    assert cli(home, "state", "export", str(backup)).returncode == 0
    rt.submit(JobSpec("long", 1, 1, [sys.executable, "-c", "import time; time.sleep(60)"]))
    try:
        done = cli(home, "state", "import", str(backup))
        assert done.returncode == 1 and "running" in done.stderr  # a clash with existing state, as kubectl
    finally:
        rt.delete(["long"])
