"""Stopping ranks on ssh hosts as everywhere else: one SIGTERM, the job's grace, then SIGKILL.

Open MPI's mpirun, asked to stop, signals its ranks only after 1 s and SIGKILLs them 1 s later;
ringleader turns the stop into a signal mpirun forwards to every rank wrapper on every host, so a
program that needs 3 s to write its checkpoint keeps it on a delete and at a time limit, whatever
line started it."""

from __future__ import annotations

from pathlib import Path

import pytest

from rankprograms import LAUNCHERS, STOPS, assert_checkpoints_kept, slow_checkpointing_program
from ringleader.engines.embedded.engine import Runtime

pytestmark = pytest.mark.slow


def users_line(kind: str, program: Path) -> list[str]:
    """One rank per host (two 4-GPU workers), as a user writes it for each launcher."""
    return {
        "plain": ["python3", str(program)],
        "mpirun": ["mpirun", "-np", "2", "python3", str(program)],
        "horovodrun": ["horovodrun", "-np", "2", "python3", str(program)],
        "torchrun": ["torchrun", "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-endpoint", "server1:29400",
                     str(program)],
    }[kind]


def training(rt: Runtime, job: str) -> bool:
    return all("training" in rt.logs(job, f"worker-{i}") for i in range(2))


@pytest.mark.parametrize(("kind", "stop"), [(k, s) for k in LAUNCHERS for s in STOPS])
def test_a_slow_checkpoint_is_kept_on_every_host(
    hosts: Runtime, h, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, stop: str
) -> None:
    program = slow_checkpointing_program(tmp_path, monkeypatch.setenv)
    # long enough for ssh and both ranks to start and set their SIGTERM handler on a busy machine
    limit = {"time_limit_s": 10.0} if stop == "time-limit" else {}
    name = f"slow-{kind}-{stop}"
    hosts.submit(h.job(name, users_line(kind, program), workers=2, gpus=4, **limit))
    monkeypatch.setenv("RINGLEADER_GRACE_S", "1")  # a later command's environment does not count
    if stop == "delete":
        h.wait_for(lambda: training(hosts, name), what="both ranks to train")
        hosts.delete([name])
    else:
        view = hosts.wait(name, 60)
        assert view.reason is not None and "SIGKILL after 6 s" in view.reason, view.reason
    assert_checkpoints_kept(tmp_path)
    assert hosts.nodes().free_gpus == hosts.nodes().total_gpus
