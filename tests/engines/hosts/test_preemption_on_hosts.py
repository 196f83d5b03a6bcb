"""Gang preemption on ssh hosts: the victim's ranks on every host get one SIGTERM (through
mpirun), write their checkpoint within the grace, and the job is requeued and runs again; the
preemptor starts on the host the victim freed."""

from __future__ import annotations

from pathlib import Path

import pytest

from rankprograms import checkpointing_rank
from ringleader.engines.embedded.engine import Runtime
from ringleader.jobs.states import JobStatus

pytestmark = pytest.mark.slow


def training(rt: Runtime, job: str, ranks: int) -> bool:
    return all("training" in rt.logs(job, f"worker-{i}") for i in range(ranks))


def test_a_priority_gang_preempts_a_whole_gang_on_ssh_hosts(
    hosts: Runtime, h, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RINGLEADER_GRACE_S", "5")
    folders = {name: tmp_path / name for name in ("low-a", "low-b")}
    for name, folder in folders.items():
        folder.mkdir()
        (folder / "rank.py").write_text(checkpointing_rank(folder))
        hosts.submit(h.job(name, ["python3", str(folder / "rank.py")], workers=4, gpus=1, topology_aware=True))
    for name in folders:
        h.wait_for(lambda name=name: training(hosts, name, 4), what=f"{name}'s ranks to train")
    node_of_a = {i.node for i in hosts.get("low-a").instances if i.role == "worker"}
    result = hosts.submit(h.job("urgent", ["sleep", "2"], workers=2, gpus=1, topology_aware=True, priority=10,
                                preempt=True))  # fmt: skip
    assert result.decision.preemption is not None and result.decision.preemption.names == ("low-a",)
    h.wait_for(lambda: any(e.kind == "Requeued" for e in hosts.get("low-a").events), what="low-a requeued")
    for rank in range(4):  # every rank, on its host, kept its checkpoint with one SIGTERM
        assert (folders["low-a"] / f"ckpt-{rank}").read_text() == "step 42"
        assert (folders["low-a"] / f"ckpt-{rank}.terms").read_text() == "1"
    assert not (folders["low-b"] / "ckpt-0").exists()
    done = hosts.wait("urgent", 60)
    assert done.status is JobStatus.SUCCEEDED
    assert {i.node for i in done.instances if i.role == "worker"} == node_of_a
    h.wait_for(lambda: hosts.get("low-a").status is JobStatus.RUNNING, what="low-a to run again")
    assert hosts.get("low-a").restarts == 1
    hosts.delete(["low-a", "low-b"])
