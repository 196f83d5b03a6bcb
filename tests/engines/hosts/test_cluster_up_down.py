"""`cluster up` / `cluster down` on real namespaces: everything made is removed, also after the
command that made it was killed -9 half-way, and `down` is idempotent."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from ringleader.engines.embedded.hosts.netns import HOSTS_FILE, Names
from waiting import wait_for

pytestmark = pytest.mark.slow

CLUSTER = "nodes:\n" + "".join(f"  - name: n{i}\n    preset: pcie-4gpu-workstation\n" for i in range(3))


def leftovers(home: Path) -> list[str]:
    """Kernel objects, processes and hosts lines of this home's emulated cluster still present."""
    names = Names.for_home(home)
    found = [ln for ln in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.splitlines()
             if ln.startswith(f"rl-{names.tag}-")]  # fmt: skip
    if subprocess.run(["ip", "link", "show", names.bridge], capture_output=True).returncode == 0:
        found.append(f"bridge {names.bridge}")
    ps = subprocess.run(["ps", "-ww", "-eo", "args="], capture_output=True, text=True).stdout
    found += [ln for ln in ps.splitlines() if str(home / "emulation") in ln]
    found += [ln for ln in HOSTS_FILE.read_text().splitlines() if f"cluster {names.tag}" in ln]
    return found


def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RINGLEADER_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "ringleader.cli.main", *args], env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip


@pytest.fixture
def spec(tmp_path: Path, hosts_tools: None) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(CLUSTER)
    return path


@pytest.mark.parametrize("delay", [0.4, 0.9, 1.6])
def test_down_after_up_was_killed_midway_leaves_nothing(tmp_path: Path, spec: Path, delay: float) -> None:
    home = tmp_path / f"home-{delay}"
    env = {**os.environ, "RINGLEADER_HOME": str(home)}
    up = subprocess.Popen([sys.executable, "-m", "ringleader.cli.main", "cluster", "up", "-f", str(spec)], env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    time.sleep(delay)
    up.send_signal(signal.SIGKILL)
    up.wait()
    first, second = cli(home, "cluster", "down"), cli(home, "cluster", "down")
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert second.stdout.strip() == "cluster down: nothing to remove"
    assert leftovers(home) == []


def test_up_then_down_removes_every_object(tmp_path: Path, spec: Path) -> None:
    home = tmp_path / "home"
    up = cli(home, "cluster", "up", "-f", str(spec))
    assert up.returncode == 0, up.stderr
    assert len(leftovers(home)) >= 3 + 1 + 3  # namespaces, bridge, sshds (+ hosts lines)
    again = cli(home, "cluster", "up", "-f", str(spec))
    assert again.returncode == 1 and again.stderr.count("\n") == 1 and "already up" in again.stderr
    down = cli(home, "cluster", "down")
    assert down.returncode == 0 and "removed" in down.stdout
    assert leftovers(home) == []
    assert not (home / "emulation" / "id_ed25519").exists()
    assert not (home / "emulation" / "authorized_keys").exists()
    # the hosts are gone from the declared cluster too: the next job runs here, not on a dead host
    assert "NAME" in cli(home, "top", "node").stdout and "n0" not in cli(home, "top", "node").stdout
    submitted = cli(home, "submit", "mpi", "--name", "after", "--", "true")
    assert submitted.returncode == 0 and "on local" in submitted.stdout, submitted.stdout + submitted.stderr


def test_top_node_shows_an_emulated_node_whose_sshd_stopped_unreachable(tmp_path: Path, spec: Path) -> None:
    """Each emulated node is logged in to as the launcher does: Ready while its namespace's sshd
    answers, Unreachable with ssh's error once it is gone, the other nodes still Ready."""
    import json

    home = tmp_path / "home"
    assert cli(home, "cluster", "up", "-f", str(spec)).returncode == 0
    try:
        shown = {n["name"]: n for n in json.loads(cli(home, "top", "node", "-o", "json").stdout)}
        assert {n: v["status"] for n, v in shown.items()} == {"local": "Ready", "n0": "Ready", "n1": "Ready",
                                                              "n2": "Ready"}  # fmt: skip
        assert shown["n1"]["unhealthy_gpus"] is None  # its GPUs are virtual
        pids = subprocess.run(["ip", "netns", "pids", Names.for_home(home).namespace("n1")], capture_output=True,
                              text=True, check=True).stdout.split()  # fmt: skip
        assert pids  # the node's sshd, started by `cluster up` above
        for pid in pids:
            os.kill(int(pid), signal.SIGTERM)

        def left_in_n1() -> list[str]:
            return subprocess.run(["ip", "netns", "pids", Names.for_home(home).namespace("n1")], capture_output=True,
                                  text=True).stdout.split()  # fmt: skip

        wait_for(lambda: not left_in_n1(), what=lambda: f"n1's sshd to end, still running: {left_in_n1()}")
        table = cli(home, "top", "node").stdout
        rows = {ln.split()[0]: ln.split() for ln in table.splitlines()[1:5]}
        assert rows["n1"][2] == "Unreachable" and rows["n0"][2] == rows["n2"][2] == "Ready", table
        detail = cli(home, "top", "node", "-d", "n1").stdout
        assert "Status:         Unreachable" in detail and "Reason:         ssh to " in detail, detail
    finally:
        assert cli(home, "cluster", "down").returncode == 0
    assert leftovers(home) == []


def test_up_without_root_is_one_line_and_changes_nothing(spec: Path) -> None:
    # Outside pytest's private temporary folders, so that user nobody can read the cluster file.
    where = Path(tempfile.mkdtemp(prefix="ringleader-nonroot-"))
    where.chmod(0o755)
    home = where / "home"
    spec = Path(shutil.copy(spec, where / "cluster.yaml"))
    spec.chmod(0o644)
    as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
    env = {**os.environ, "RINGLEADER_HOME": str(home)}
    # A checkout in a folder only root may enter (root's home, 0700): nobody cannot start its Python.
    reach = subprocess.run([*as_nobody, sys.executable, "-c", "import ringleader.cli.main"], env=env,
                           capture_output=True, text=True, timeout=60)  # fmt: skip
    if reach.returncode != 0:
        shutil.rmtree(where)
        pytest.skip(f"user nobody cannot run this checkout's Python ({sys.executable}): its folder is private")
    done = subprocess.run([*as_nobody, sys.executable, "-m", "ringleader.cli.main", "cluster", "up", "-f", str(spec)],
                          env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 2, done.stderr
    expected = "error: `cluster up` needs root (network namespaces, bridges, tc). To fix: run it as root"
    assert done.stderr.strip() == expected
    assert not home.exists()
    shutil.rmtree(where)
