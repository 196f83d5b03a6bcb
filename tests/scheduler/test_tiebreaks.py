"""Tie-breaks after the interconnect objective, splits across nodes and NVLink domains, on the
machines the issue tracker named."""

from __future__ import annotations

import pytest

from builders import job
from refdata import reference_file
from ringleader.scheduler import ClusterState, NodeState, place
from ringleader.topology import Link, NodeSpec, NodeTopology, parse_topo_text
from ringleader.topology.links import SELF


def topology(
    n: int, kind: object, *, numa: tuple[int, ...] = (), nics: dict[int, tuple[int, ...]] | None = None
) -> NodeTopology:
    """n GPUs where ``kind(i, j)`` names each pair's link; ``nics[k]`` the GPUs beside NIC k (PIX)."""
    links = tuple(tuple(SELF if i == j else Link.parse(kind(i, j)) for j in range(n)) for i in range(n))  # type: ignore[operator]
    nics = nics or {}
    nic_links = tuple(tuple(Link("PIX") if i in nics[k] else Link("SYS") for k in sorted(nics)) for i in range(n))
    return NodeTopology(links=links, numa=tuple(numa), nics=tuple(f"mlx5_{k}" for k in sorted(nics)),
                        nic_links=nic_links if nics else ())  # fmt: skip


def node(name: str, topo: NodeTopology, busy: tuple[int, ...] = (), domain: str = "", gbps: float = 25.0) -> NodeState:
    return NodeState(NodeSpec(name, topo, gbps, (), True, nvlink_domain=domain), tuple((g, "other") for g in busy))


def gpus(decision: object, name: str) -> set[int]:
    placement = decision.placement  # type: ignore[attr-defined]
    assert placement is not None
    return set(placement.gpus_on(name))


# -- one socket / NUMA node -------------------------------------------------------------------


def test_gpu0_busy_on_a_two_socket_all_sys_server_keeps_the_job_on_one_socket() -> None:
    # 8 PCIe GPUs, every pair SYS, GPUs 0-3 on NUMA 0 and 4-7 on NUMA 1 (the RTX 4090 server).
    topo = topology(8, lambda i, j: "SYS", numa=(0, 0, 0, 0, 1, 1, 1, 1))
    decision = place(ClusterState((node("p", topo, busy=(0,)),)), job(4))
    assert gpus(decision, "p") == {4, 5, 6, 7}
    assert decision.chosen is not None and decision.chosen.objective_dict()["-numa_nodes"] == -1


def test_same_on_the_real_rtx4090_output() -> None:
    topo = parse_topo_text(reference_file("pcie_8x_rtx4090_all_sys_2nics_tabs.txt").read_text())
    assert gpus(place(ClusterState((node("p", topo, busy=(0,)),)), job(4)), "p") == {4, 5, 6, 7}


def test_numa_lists_count_as_one_numa_node_when_equal() -> None:
    topo = NodeTopology(
        links=topology(4, lambda i, j: "NODE").links, numa_affinity=((0, 5), (0, 5), (1, 6), (1, 6)),
    )  # fmt: skip
    assert gpus(place(ClusterState((node("g", topo, busy=(0,)),)), job(2)), "g") == {2, 3}


# -- NIC affinity and rails, for gangs that span nodes -------------------------------------------


def test_spanning_gang_takes_the_gpus_beside_the_nic() -> None:
    # DGX-1V-like quad 0-3 (NV1/NV2) with one NIC beside GPUs 2 and 3; nodes with 3 free GPUs.
    topo = parse_topo_text(reference_file("v100_sxm2_8gpu_hybrid_cube_mesh_dlperf.txt").read_text())
    state = ClusterState((node("a", topo, busy=(1, 4, 5, 6, 7)), node("b", topo, busy=(1, 4, 5, 6, 7))))
    decision = place(state, job(4))
    assert decision.placement is not None and decision.placement.nodes == ("a", "b")
    assert gpus(decision, "a") == gpus(decision, "b") == {2, 3}  # 2+2 over NV2 pairs, both by the NIC
    # A job inside one node ignores NIC affinity: lowest ids among equals.
    assert gpus(place(ClusterState((node("a", topo, busy=(1, 4, 5, 6, 7)),)), job(2)), "a") == {0, 3}


def test_spanning_gang_spreads_over_the_rails() -> None:
    # 8 GPUs under one PCIe switch (all PIX), four NICs each beside a GPU pair; GPUs 5 and 7 busy.
    topo = topology(8, lambda i, j: "PIX", nics={k: (2 * k, 2 * k + 1) for k in range(4)})
    state = ClusterState((node("a", topo, busy=(5, 7)), node("b", topo, busy=(5, 7))))
    decision = place(state, job(8))
    assert gpus(decision, "a") == gpus(decision, "b") == {0, 2, 4, 6}  # one GPU per NIC, not {0,1,2,3}
    assert decision.chosen is not None and decision.chosen.objective_dict()["-rail_load"] == -2


# -- the split across nodes ------------------------------------------------------------------


def a100_pcie_bridged() -> NodeTopology:
    """4 x A100 PCIe with NVLink bridges on pairs (0,1) and (2,3) (NV12), NODE between pairs."""
    return topology(4, lambda i, j: "NV12" if i // 2 == j // 2 else "NODE")


def test_five_gpus_on_two_bridged_a100_pcie_nodes_split_three_and_two() -> None:
    state = ClusterState((node("a", a100_pcie_bridged()), node("b", a100_pcie_bridged())))
    decision = place(state, job(5))
    assert decision.placement is not None
    shares = sorted(len(decision.placement.gpus_on(n)) for n in decision.placement.nodes)
    assert shares == [2, 3]
    two = next(n for n in decision.placement.nodes if len(decision.placement.gpus_on(n)) == 2)
    assert gpus(decision, two) in ({0, 1}, {2, 3})  # the 2-share is a bridged pair
    assert decision.chosen is not None and decision.chosen.metrics.bottleneck.kind == "network"


# -- multi-node NVLink domains ---------------------------------------------------------------


def nvl_tray() -> NodeTopology:
    return topology(4, lambda i, j: "NV18")


def test_a_gang_that_fits_in_one_nvlink_domain_stays_there() -> None:
    # Four trays of one NVL72 domain with 3 free GPUs each, and two 8-GPU nodes outside it:
    # 12 GPUs fit on 2 nodes outside, but the 4 trays are one NVLink fabric.
    outside = topology(8, lambda i, j: "NV18")
    trays = [node(f"tray-{i}", nvl_tray(), busy=(3,), domain="nvl72-a") for i in range(4)]
    state = ClusterState((node("big-0", outside), node("big-1", outside), *trays))
    decision = place(state, job(12))
    assert decision.placement is not None
    assert decision.placement.nodes == ("tray-0", "tray-1", "tray-2", "tray-3")
    assert decision.chosen is not None and decision.chosen.metrics.bottleneck.kind == "nvlink-domain"
    assert decision.runner_up is not None and decision.runner_up.objective_dict()["-islands"] == -2


def test_a_gang_too_big_for_any_domain_crosses_the_network() -> None:
    trays = [node(f"t{d}-{i}", nvl_tray(), domain=f"d{d}") for d in range(2) for i in range(2)]
    decision = place(ClusterState(tuple(trays)), job(12))
    assert decision.placement is not None and len(decision.placement.nodes) == 3
    assert decision.chosen is not None and decision.chosen.metrics.bottleneck.kind == "network"


def test_one_tray_is_preferred_to_two_in_the_same_domain() -> None:
    trays = [node(f"t{i}", nvl_tray(), domain="d") for i in range(3)]
    decision = place(ClusterState(tuple(trays)), job(4))
    assert decision.placement is not None and decision.placement.nodes == ("t0",)


@pytest.mark.parametrize("n", [17, 64])
def test_big_nodes_place_without_recursion_and_keep_numa(n: int) -> None:
    topo = topology(n, lambda i, j: "NV18", numa=tuple(0 if i < n // 2 else 1 for i in range(n)))
    decision = place(ClusterState((node("big", topo, busy=(0,)),)), job(n // 2))
    assert gpus(decision, "big") <= set(range(n // 2, n))  # all on the socket GPU0 leaves whole


def test_the_allreduce_model_sends_a_domain_gang_over_nvlink_not_the_network() -> None:
    from ringleader.model.comm import placement_hops

    state = ClusterState(tuple(node(f"t{i}", nvl_tray(), domain="d") for i in range(3)))
    decision = place(state, job(8))
    assert decision.placement is not None and len(decision.placement.nodes) == 2
    kinds = [hop.kind for hop in placement_hops(state.by_name, decision.placement)]
    assert "nvlink-domain" in kinds and "network" not in kinds
