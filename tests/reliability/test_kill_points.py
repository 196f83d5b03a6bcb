"""kill -9 at every step of submit and delete (RINGLEADER_CRASH_AT): the state stays truthful —
no GPU held by a job without processes, no job lost, no process left, and the next commands
finish what was interrupted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ringleader.engines.embedded.engine import Runtime
from ringleader.engines.embedded.faults import POINTS
from waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
COMMAND_POINTS = [p for p in POINTS if p.startswith(("submit-", "delete-"))]


def cli(home: Path, *args: str, crash_at: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RINGLEADER_HOME": str(home), "RINGLEADER_GRACE_S": "1"}
    if crash_at:
        env["RINGLEADER_CRASH_AT"] = crash_at
    return subprocess.run([sys.executable, "-m", "ringleader.cli.main", *args], env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def processes_with(marker: str) -> list[str]:
    out = subprocess.run(["ps", "-ww", "-eo", "args="], capture_output=True, text=True).stdout
    return [ln for ln in out.splitlines() if marker in ln]


@pytest.mark.parametrize("point", COMMAND_POINTS)
def test_kill_at_each_step_leaves_state_truthful(tmp_path: Path, point: str) -> None:
    home = tmp_path / "home"
    assert cli(home, "cluster", "apply", "-f", str(REPO / "examples" / "seeds-cluster.yaml")).returncode == 0
    marker = f"killpoint-{point}-{os.getpid()}"
    program = [sys.executable, "-c", "import time; time.sleep(120)", marker]
    submit_crash = point if point.startswith("submit") else None
    done = cli(home, "submit", "mpi", "--name", "j", "--workers", "2", "--gpus", "1", "--", *program,
               crash_at=submit_crash)  # fmt: skip
    assert done.returncode == (-9 if submit_crash else 0), done.stderr
    # The job was committed: the next command's agent starts it, none is lost. Each look runs a
    # command (a process of its own): one a second, not back to back.
    wait_for(lambda: cli(home, "list").returncode == 0 and len(processes_with(marker)) >= 2,
             what="the job's ranks to run", every=1.0)  # fmt: skip
    if point.startswith("delete"):
        assert cli(home, "delete", "j", crash_at=point).returncode == -9
        # The stop was requested: the agent stops the ranks and forgets the job all the same.
        wait_for(lambda: not processes_with(marker), what="the ranks to be stopped")
        rt = Runtime.open(home)
        wait_for(lambda: "j" not in {j.name for j in rt.list_jobs()}, what="the job to be forgotten")
        assert rt.nodes().free_gpus == rt.nodes().total_gpus
        rt.close()
        # The name is free again, and a new job of that name does not inherit old logs.
        assert cli(home, "submit", "mpi", "--name", "j", "--", sys.executable, "-c", "print('fresh')").returncode == 0
        rt = Runtime.open(home)
        rt.wait("j", timeout=60)
        assert rt.logs("j").strip() == "fresh"
        rt.close()
    else:
        rt = Runtime.open(home)
        assert rt.get("j").status.value == "RUNNING"
        rt.close()
    assert cli(home, "delete", "j").returncode == 0
    wait_for(lambda: not processes_with(marker), what="no process left")
