"""A real emulated cluster for the ssh-host tests: two nodes, each a network namespace with its own
sshd and hostname, joined by a bridge with tc-shaped links (`ringleader cluster up`).

Root only (namespaces, bridges, tc); skipped with the reason elsewhere. One cluster for the whole
module: bringing it up costs about 3 s, every job then runs over real ssh and real mpirun.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ringleader.engines.embedded.engine import JobSpec, Runtime
from waiting import wait_for

REPO = Path(__file__).resolve().parents[3]
TWO_NODES = """nodes:
  - name: node-a
    preset: pcie-4gpu-workstation
    network_gbps: 10
  - name: node-b
    preset: pcie-4gpu-workstation
    network_gbps: 10
"""


def missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root: network namespaces, a bridge, tc and sshd per node"
    for tool in ("ip", "tc", "ssh", "ssh-keygen", "/usr/sbin/sshd", "mpirun"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (make setup installs openssh-server, iproute2, openmpi-bin)"
    return None


@pytest.fixture
def hosts_tools() -> None:
    """Skips (with the reason) where namespaces, sshd or mpirun cannot be had."""
    reason = missing()
    if reason:
        pytest.skip(reason)


@pytest.fixture(scope="module")
def hosts_home(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The module's cluster: ``TWO_NODES``, or the one its module names as ``CLUSTER`` (its links
    scaled by the module's ``SCALE``, 0.02 unless it names one)."""
    reason = missing()
    if reason:
        pytest.skip(reason)
    home = tmp_path_factory.mktemp("hosts") / "rl-home"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RINGLEADER_HOME", str(home))
        mp.setenv("RINGLEADER_GRACE_S", "2")
        # As a user with the virtual env activated: `python3` on the hosts is the env's (same paths).
        mp.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', os.defpath)}")
        spec = home.parent / "cluster.yaml"
        spec.write_text(getattr(request.module, "CLUSTER", TWO_NODES))
        rt = Runtime.open(home)
        try:
            rt.cluster_up(spec, scale=getattr(request.module, "SCALE", 0.02))
        finally:
            rt.close()
        yield home
        rt = Runtime.open(home)
        live = [j.name for j in rt.list_jobs() if not j.status.is_terminal()]
        if live:
            rt.delete(live)
        rt.cluster_down()
        rt.close()


@pytest.fixture
def hosts(hosts_home: Path) -> Iterator[Runtime]:
    rt = Runtime.open(hosts_home)
    yield rt
    rt.close()


def py(code: str) -> list[str]:
    """A Python snippet run by `python3` as the hosts resolve it (the venv's, through PATH)."""
    return ["python3", "-c", code]


def job(name: str, command: list[str], workers: int = 4, gpus: int = 1, **kw: object) -> JobSpec:
    return JobSpec(name=name, workers=workers, gpus_per_worker=gpus, command=command, workdir=str(REPO), **kw)


def processes_with(marker: str) -> list[str]:
    """Command lines of live processes (in any namespace: they share this PID namespace) that
    carry ``marker``."""
    out = subprocess.run(["ps", "-ww", "-eo", "pid=,args="], capture_output=True, text=True).stdout
    return [ln for ln in out.splitlines() if marker in ln and "ps -eo" not in ln]


class Helpers:
    py = staticmethod(py)
    job = staticmethod(job)
    wait_for = staticmethod(wait_for)
    processes_with = staticmethod(processes_with)
    PY = sys.executable
    REPO = REPO


@pytest.fixture
def h() -> type[Helpers]:
    return Helpers
