"""A real Slurm for the engine's tests: slurmctld and two slurmd (node-a, node-b), each node in
its own network and UTS namespace, four fake GPUs each (an NVLink quad, as GPUs 0-3 of a DGX-1V),
one GRES type per GPU. One cluster per test module; root only, skipped elsewhere. A module that
needs Slurm's accounting (slurmdbd on a private MariaDB: accounts, QOS, fair share) overrides
``slurm_box`` with ``running_box(accounting=True)``."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from engines.slurm.helpers import Outside, node_gpus_used
from ringleader.engines.slurm import SlurmEngine, sandboxdb
from ringleader.engines.slurm.sandbox import Sandbox, missing
from ringleader.topology import NodeTopology, preset
from waiting import wait_for

NODES = ("node-a", "node-b")


def quad() -> NodeTopology:
    """GPUs 0-3 of the DGX-1V hybrid cube mesh: NV2 on 0-3, 1-2, 2-3; NV1 on 0-1, 0-2, 1-3."""
    full = preset("dgx1v")
    return NodeTopology(links=tuple(row[:4] for row in full.links[:4]), gpu_model="V100")


def running_box(accounting: bool = False) -> Iterator[Sandbox]:
    """A sandbox of NODES with SLURM_CONF pointing at it while it runs."""
    why = missing() or (sandboxdb.missing() if accounting else None)
    if why:
        pytest.skip(f"real-Slurm tests: {why}")
    root = Path(tempfile.mkdtemp(prefix="rl-slurm-"))  # short: Slurm's socket paths live under it
    box = Sandbox.start(root, {name: quad() for name in NODES}, accounting=accounting)
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("SLURM_CONF", str(box.conf))
            yield box
    finally:
        box.stop()
        shutil.rmtree(root, ignore_errors=True)


# Module scope: one cluster for a real-Slurm module, stopped before the rest of the suite runs.
@pytest.fixture(scope="module")
def slurm_box() -> Iterator[Sandbox]:
    yield from running_box()


@pytest.fixture
def outside(slurm_box: Sandbox, tmp_path: Path) -> Iterator[Outside]:
    jobs = Outside(tmp_path)
    yield jobs
    jobs.cleanup()
    wait_for(lambda: not node_gpus_used(), what="GPUs freed after the test")


@pytest.fixture
def engine(slurm_box: Sandbox, outside: Outside, tmp_path: Path) -> Iterator[SlurmEngine]:
    eng = SlurmEngine(tmp_path / "rl-home")
    yield eng
    live = [v.name for v in eng.list_jobs() if not v.status.is_terminal()]
    if live:
        eng.delete(live)
