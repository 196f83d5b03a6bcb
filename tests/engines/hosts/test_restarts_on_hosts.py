"""Restarts on ssh hosts: a gang whose node loses its network (the emulated node's link taken
down) is stopped, the node that went silent cordoned at once with the reason, and the gang
restarts on the other node and resumes from its checkpoint."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from rankprograms import resuming_rank
from ringleader.engines.embedded.engine import Runtime
from ringleader.engines.embedded.hosts.netns import NS_IFACE, Names
from ringleader.jobs.states import JobStatus

pytestmark = pytest.mark.slow


def link(home: Path, node: str, state: str) -> None:
    namespace = Names.for_home(home).namespace(node)
    subprocess.run(["ip", "netns", "exec", namespace, "ip", "link", "set", NS_IFACE, state], check=True, timeout=30)


def test_a_gang_whose_node_loses_its_network_restarts_elsewhere_from_its_checkpoint(
    hosts: Runtime, h, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RINGLEADER_GRACE_S", "2")
    (tmp_path / "rank.py").write_text(resuming_rank(tmp_path))
    hosts.submit(h.job("train", ["python3", str(tmp_path / "rank.py")], workers=2, gpus=1, topology_aware=True,
                       max_restarts=3))  # fmt: skip
    h.wait_for(lambda: all((tmp_path / f"ckpt-{r}").exists() for r in range(2)), what="both ranks to checkpoint")
    [lost] = {i.node for i in hosts.get("train").instances if i.role == "worker"}  # one node holds the gang
    [other] = {ns.name for ns in hosts.nodes().nodes if ns.spec.address is not None} - {lost}
    link(hosts.home, lost, "down")
    try:
        done = hosts.wait("train", 180)
    finally:
        link(hosts.home, lost, "up")
    assert done.status is JobStatus.SUCCEEDED, (done.reason, [(e.kind, e.message) for e in done.events])
    restarting = [e.message for e in done.events if e.kind == "Restarting"]
    assert restarting and all(lost in message for message in restarting), restarting
    health = hosts.node_health([lost])[lost]
    # the engine heard nothing from the host: cordoned on that first failure, the restart elsewhere
    assert health.status == "Cordoned", health
    assert health.reason.startswith(f"blamed for 1 failure, the last of job train: host {lost} lost: silent for")
    assert {i.node for i in done.instances if i.role == "worker"} == {other}
    for rank in range(2):  # resumed from where the lost node's run had saved it
        step, node = (tmp_path / f"resumed-{rank}").read_text().split()
        assert int(step) > 0 and node == other
        count, torchrun_count, limit = (tmp_path / f"restarts-{rank}").read_text().split()
        assert int(count) > 0 and torchrun_count == count and limit == "3"  # torchrun's names on ssh hosts too
    hosts.uncordon_node(lost)
    assert hosts.node_health([lost])[lost].status != "Cordoned"
