"""Placement on a cluster with a network tree: lowest common switch, fewest nodes, best fit per
level, required levels, rank order along the tree; checked against brute force on random trees."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from ringleader.scheduler import ClusterState, Code, JobRequest, NodeState, place
from ringleader.topology import Level, NetworkPlace, NodeSpec, preset

RACK_LEVELS = (Level("rack", oversubscription=4.0), Level("spine"))  # racks: 4:1 uplinks


def tree_cluster(
    racks: Sequence[Sequence[Sequence[int]]], spine_of: Sequence[int] | None = None, kind: str = "dgx-a100",
    levels: tuple[Level, ...] = RACK_LEVELS,
) -> ClusterState:  # fmt: skip
    """racks[r][i] = busy GPU ids of node i of rack r; rack r is under spine spine_of[r] (default 0)."""
    nodes = []
    for r, rack in enumerate(racks):
        spine = f"spine-{spine_of[r] if spine_of else 0}"
        for i, busy in enumerate(rack):
            switches = (f"rack-{r}", spine, "core")[: len(levels)]
            spec = NodeSpec(f"r{r}n{i}", preset(kind), 200.0, (), True, network=NetworkPlace(levels, switches))
            nodes.append(NodeState(spec, tuple((g, "other") for g in busy)))
    return ClusterState(tuple(nodes))


FULL = tuple(range(8))
HALF = (0, 1, 2, 3)


def gang(workers: int, gpus: int = 8, **kw: object) -> JobRequest:
    return JobRequest("g", workers, gpus, topology_aware=True, **kw)  # type: ignore[arg-type]


def test_a_gang_goes_into_the_one_rack_with_room_instead_of_four_racks() -> None:
    # Racks 0, 1 and 3 have one free node each; rack 2 has four. Node order would take one of each.
    racks = [[(), FULL, FULL, FULL], [(), FULL, FULL, FULL], [(), (), (), ()], [(), FULL, FULL, FULL]]
    decision = place(tree_cluster(racks), gang(4))
    assert decision.ok and decision.placement is not None
    assert set(decision.placement.nodes) == {"r2n0", "r2n1", "r2n2", "r2n3"}
    assert "under rack rack-2" in decision.chosen.metrics.bottleneck.where  # type: ignore[union-attr]
    flat = ClusterState(tuple(NodeState(ns.spec.__class__(ns.spec.name, ns.spec.topology, 200.0, (), True),
                                        ns.allocated) for ns in tree_cluster(racks).nodes))  # fmt: skip
    assert len({n[:2] for n in place(flat, gang(4)).placement.nodes}) > 1  # type: ignore[union-attr]


def test_best_fit_keeps_the_emptier_rack_whole() -> None:
    racks = [[(), (), (), ()], [(), (), FULL, FULL]]  # both hold 2 nodes; rack 1 is fuller
    decision = place(tree_cluster(racks), gang(2))
    assert set(decision.placement.nodes) == {"r1n0", "r1n1"}  # type: ignore[union-attr]
    assert decision.chosen.objective_dict()["-switch_free_after"] == 0  # type: ignore[union-attr]


def test_required_level_waits_and_the_reason_names_the_level_and_the_best_switch() -> None:
    racks = [[(), (), FULL], [(), FULL, FULL], [(), (), FULL]]
    state = tree_cluster(racks)
    spread = place(state, gang(3))
    assert spread.ok and spread.chosen is not None
    assert spread.chosen.metrics.bottleneck.gbs == 200.0 / 8 / 4  # 4:1 uplinks crossed
    assert "under spine spine-0 (4:1 uplinks)" in spread.chosen.metrics.bottleneck.where
    waiting = place(state, gang(3, topology_required="rack"))
    assert waiting.code is Code.UNSCHEDULABLE
    assert waiting.reasons == (
        "needs 3 worker(s) x 8 GPU(s) under one rack; most free under any rack: 2 worker slot(s) (rack-0)",
    )
    assert place(state, gang(4, topology_required="rack")).code is Code.UNRESOLVABLE  # racks have 3 nodes
    assert place(state, gang(2, topology_required="rack")).ok
    assert place(state, gang(2, topology_required="row")).code is Code.UNRESOLVABLE
    assert "no network level 'row' (levels: rack, spine)" in place(state, gang(2, topology_required="row")).reasons[0]
    unknown = place(state, gang(1, topology_preferred="row"))  # even a one-node gang: the name is wrong
    assert unknown.code is Code.UNRESOLVABLE and "no network level 'row'" in unknown.reasons[0]


def test_preferred_level_still_spreads_when_it_must() -> None:
    racks = [[(), (), FULL], [(), FULL, FULL]]
    assert place(tree_cluster(racks), gang(3, topology_preferred="rack")).ok


def test_ranks_follow_the_tree_so_the_ring_crosses_each_uplink_twice_at_most() -> None:
    # Two spines; the gang needs 6 nodes: both racks of spine 1 (node order interleaves them).
    racks = [[(), FULL, FULL], [(), (), ()], [(), (), FULL], [(), (), ()]]
    decision = place(tree_cluster(racks, spine_of=[0, 1, 0, 1], levels=(*RACK_LEVELS, Level("core"))), gang(6))
    nodes = [slot.node for slot in decision.placement.slots]  # type: ignore[union-attr]
    racks_in_rank_order = [n[:2] for n in nodes]
    assert sorted(set(racks_in_rank_order)) == ["r1", "r3"]
    changes = sum(1 for a, b in itertools.pairwise(racks_in_rank_order) if a != b)
    assert changes == 1


def test_one_node_beats_any_switch() -> None:
    decision = place(tree_cluster([[HALF, ()], [(), ()]]), gang(1, gpus=8))
    assert decision.placement.nodes == ("r0n1",)  # type: ignore[union-attr]


# -- brute force ------------------------------------------------------------------------------


@st.composite
def random_trees(draw: st.DrawFn) -> ClusterState:
    """2 levels (1-4 racks of 1-3 nodes) or 3 (1-2 spines of 1-3 racks of 1-2 nodes), nodes of 4
    GPUs with random busy GPUs: at most 12 nodes, so brute force stays quick."""
    three = draw(st.booleans())
    spines = draw(st.integers(1, 2)) if three else 1
    levels = (Level("rack"), Level("spine"), Level("core"))[: 3 if three else 2]
    nodes = []
    for s in range(spines):
        for r in range(draw(st.integers(1, 3 if three else 4))):
            for i in range(draw(st.integers(1, 2 if three else 3))):
                busy = draw(st.sets(st.integers(0, 3), max_size=4))
                path = (f"rack-{s}-{r}", f"spine-{s}", "core")[: len(levels)]
                spec = NodeSpec(f"s{s}r{r}n{i}", preset("pcie-4gpu-workstation"), 100.0, (), True,
                                network=NetworkPlace(levels, path))  # fmt: skip
                nodes.append(NodeState(spec, tuple((g, "x") for g in sorted(busy))))
    return ClusterState(tuple(nodes))


def brute_force(state: ClusterState, job: JobRequest) -> tuple[int, int, int] | None:
    """Over every set of nodes that can hold the gang (each node at least one worker): the
    least (span level, nodes, GPUs left free under the spanning switch on nodes that could serve
    the gang, i.e. with a worker's GPUs free); span -1 = one node."""
    levels = state.nodes[0].spec.network.levels  # type: ignore[union-attr]
    best = None
    for size in range(1, len(state.nodes) + 1):
        for subset in itertools.combinations(state.nodes, size):
            caps = [ns.n_free // job.gpus_per_worker for ns in subset]
            if min(caps) < 1 or sum(caps) < job.workers or size > job.workers:
                continue
            paths = [ns.spec.switches for ns in subset]
            if size == 1:
                key = (-1, 1, 0)
            else:
                span = next((k for k in range(len(levels)) if len({p[k] for p in paths}) == 1), len(levels))
                under = [ns for ns in state.nodes if ns.n_free >= job.gpus_per_worker
                         and (span == len(levels) or ns.spec.switches[span] == paths[0][span])]  # fmt: skip
                key = (span, size, sum(ns.n_free for ns in under) - job.total_gpus)
            if best is None or key < best:
                best = key
    return best


@settings(max_examples=300, deadline=None)
@given(random_trees(), st.integers(1, 8), st.integers(1, 4), st.sampled_from([None, "rack", "spine"]))
def test_placement_matches_brute_force_on_random_trees(
    state: ClusterState, workers: int, gpus: int, required: str | None
) -> None:
    job = gang(workers, gpus, topology_required=required)
    best = brute_force(state, job)
    if best is not None and required is not None:
        limit = [lv.name for lv in state.nodes[0].spec.network.levels].index(required)  # type: ignore[union-attr]
        if best[0] > limit:
            best = None
    decision = place(state, job)
    assert decision.ok == (best is not None), decision.reasons
    if best is None:
        return
    chosen = decision.chosen
    assert chosen is not None
    got = chosen.objective_dict()
    span = -int(got["-span_level"]) if chosen.metrics.nodes_used > 1 else -1
    key = (span, chosen.metrics.nodes_used, -int(got["-switch_free_after"]) if span >= 0 else 0)
    assert key == best


def test_a_one_node_gang_fills_a_partly_used_rack_and_keeps_whole_racks_whole() -> None:
    racks = [[(), (), ()], [FULL, (), ()], [(), (), ()]]  # rack-1 is partly used
    decision = place(tree_cluster(racks), gang(1))
    assert decision.placement.nodes == ("r1n1",)  # type: ignore[union-attr]
