"""Stopping ranks on ssh hosts as everywhere else: one SIGTERM, the job's grace, then SIGKILL.

Open MPI's mpirun, asked to stop, signals its ranks only after 1 s and SIGKILLs them 1 s later;
ringleader turns the stop into a signal mpirun forwards to every rank wrapper on every host, so a
program that needs 3 s to write its checkpoint keeps it on a delete and at a time limit, whatever
line started it."""

from __future__ import annotations

from pathlib import Path

import pytest

from rankprograms import checkpointing_rank
from ringleader.engines.embedded.engine import Runtime

pytestmark = pytest.mark.slow

SLOW_WRITE_S, GRACE_S = 3.0, "6"


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


@pytest.mark.parametrize("stop", ["delete", "time-limit"])
@pytest.mark.parametrize("kind", ["plain", "mpirun", "horovodrun", "torchrun"])
def test_a_slow_checkpoint_is_kept_on_every_host(
    hosts: Runtime, h, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, stop: str
) -> None:
    monkeypatch.setenv("RINGLEADER_GRACE_S", GRACE_S)  # at submit: the job keeps it
    program = tmp_path / "rank.py"
    program.write_text(checkpointing_rank(tmp_path, write_s=SLOW_WRITE_S))
    limit = {"time_limit_s": 4.0} if stop == "time-limit" else {}
    name = f"slow-{kind}-{stop}"
    hosts.submit(h.job(name, users_line(kind, program), workers=2, gpus=4, **limit))
    monkeypatch.setenv("RINGLEADER_GRACE_S", "1")  # a later command's environment does not count
    if stop == "delete":
        h.wait_for(lambda: training(hosts, name), 60, "both ranks to train")
        hosts.delete([name])
    else:
        view = hosts.wait(name, 60)
        assert view.reason is not None and "SIGKILL after 6 s" in view.reason, view.reason
    for rank in ("0", "1"):
        assert (tmp_path / f"ckpt-{rank}").read_text() == "step 42", f"rank {rank} lost its checkpoint"
        assert (tmp_path / f"ckpt-{rank}.terms").read_text() == "1"  # SIGTERM exactly once
    assert hosts.nodes().free_gpus == hosts.nodes().total_gpus
