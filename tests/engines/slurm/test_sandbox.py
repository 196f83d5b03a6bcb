"""The Slurm sandbox the real-Slurm tests and `make demo` run on, and its accounting (slurmdbd on a
private MariaDB): stopped, it leaves nothing behind."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from ringleader.engines.slurm import sandboxdb
from ringleader.engines.slurm.sandbox import Sandbox, missing
from ringleader.topology import preset
from waiting import wait_for

pytestmark = pytest.mark.slow


def test_stopping_the_sandbox_ends_the_steps_its_slurmd_left_running(tmp_path: Path) -> None:
    """A slurmstepd outlives its slurmd by design (a step survives a slurmd restart): a job still
    running when the sandbox stops must not stay behind, holding the node's namespace."""
    why = missing()
    if why:
        pytest.skip(f"real-Slurm tests: {why}")
    root = Path(tempfile.mkdtemp(prefix="rl-slurm-"))
    try:
        box = Sandbox.start(root, {"solo": preset("dgx1v")})
        marker = tmp_path / "running"
        script = tmp_path / "job.sh"
        script.write_text(f"#!/bin/sh\necho $$ > {marker}\nexec sleep 600\n")
        script.chmod(0o755)
        subprocess.run(["sbatch", "--output=/dev/null", f"--chdir={tmp_path}", str(script)], env=box.env(),
                       check=True, capture_output=True)  # fmt: skip
        wait_for(lambda: marker.exists() and marker.read_text().strip(), what="the batch job to start")
        namespace = box.namespaces[0]
        left = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True).stdout.split()
        assert len(left) >= 3  # slurmd, the job's slurmstepd and its shell
        box.stop()

        def alive() -> list[str]:
            return [pid for pid in left if os.path.exists(f"/proc/{pid}")]

        wait_for(lambda: not alive(), what=lambda: f"the node's processes to end, still alive: {alive()}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_the_sandboxs_accounting_keeps_accounts_and_stopped_leaves_no_daemon() -> None:
    """slurmdbd on the sandbox's own MariaDB (a socket in its folder, no network): the cluster is
    registered and accounts can be added; stopped, neither MariaDB nor slurmdbd runs on."""
    why = missing() or sandboxdb.missing()
    if why:
        pytest.skip(f"real-Slurm tests: {why}")
    root = Path(tempfile.mkdtemp(prefix="rl-slurm-"))
    try:
        db = sandboxdb.AccountingDb.start(root / "db", root / "etc", "ringleader")
        pids = [proc.pid for proc in db.procs]
        env = {**os.environ, "SLURM_CONF": str(root / "etc" / "slurm.conf")}

        def sacctmgr(*args: str) -> str:
            return subprocess.run(["sacctmgr", *args], env=env, check=True, capture_output=True, text=True).stdout

        try:
            sacctmgr("-i", "add", "account", "physics")
            assert sacctmgr("-n", "-P", "show", "account", "physics", "format=Account") == "physics\n"
            assert sacctmgr("-n", "-P", "show", "cluster", "format=Cluster") == "ringleader\n"
        finally:
            db.stop()
        assert [pid for pid in pids if os.path.exists(f"/proc/{pid}")] == []
        assert not db.socket.exists()
    finally:
        shutil.rmtree(root, ignore_errors=True)
