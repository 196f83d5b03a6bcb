"""The model prices a gang across racks by its share of the narrowest uplink it crosses."""

from __future__ import annotations

from ringleader.model.comm import allreduce_cost
from ringleader.scheduler import ClusterState, NodeState, Placement, WorkerSlot
from ringleader.topology import Level, NetworkPlace, NodeSpec, preset

LEVELS = (Level("rack", oversubscription=4.0), Level("spine"))


def racks(per_rack: int = 2, count: int = 2) -> ClusterState:
    specs = [NodeSpec(f"r{r}n{i}", preset("dgx-a100"), 100.0, (), True,
                      network=NetworkPlace(LEVELS, (f"rack-{r}", "spine")))
             for r in range(count) for i in range(per_rack)]  # fmt: skip
    return ClusterState(tuple(NodeState(s) for s in specs))


def across(*nodes: str) -> Placement:
    return Placement("g", tuple(WorkerSlot(i, n, tuple(range(8))) for i, n in enumerate(nodes)))


def network_gbs(state: ClusterState, placement: Placement, **kw: object) -> float:
    cost = allreduce_cost(state.by_name, placement, 1e8, fabric="infiniband", **kw)  # type: ignore[arg-type]
    assert cost.bottleneck is not None
    return cost.bottleneck.gbs


def test_a_gang_across_racks_gets_its_share_of_the_oversubscribed_uplink() -> None:
    state = racks()
    inside, spread = network_gbs(state, across("r0n0", "r0n1")), network_gbs(state, across("r0n0", "r1n0"))
    assert spread == inside / 2  # two nodes' NICs over a 4:1 uplink: half a NIC for the one ring flow
    crowded = network_gbs(state, across("r0n0", "r1n0"), uplink_flows={"rack-0": 2, "rack-1": 2})
    assert crowded == inside / 4
    cost = allreduce_cost(state.by_name, across("r0n0", "r1n0"), 1e8, fabric="infiniband")
    assert cost.bottleneck is not None and "rack rack-0 uplink 4:1 over 2 node(s)" in cost.bottleneck.where


def test_big_racks_hide_the_oversubscription_from_one_gang() -> None:
    state = racks(per_rack=8)  # 8 nodes' NICs over 4:1: twice a NIC up, for one flow
    assert network_gbs(state, across("r0n0", "r1n0")) == network_gbs(state, across("r0n0", "r0n1"))
