"""ACK gputopology baseline on declarative scenarios: fewest nodes, then max bottleneck link."""

from __future__ import annotations

import pytest

from builders import preset_cluster
from ringleader.scheduler import ClusterState, JobRequest, place


def binding(state: ClusterState, workers: int, gpus: int, policy: str = "ack") -> list[tuple[str, tuple[int, ...]]]:
    decision = place(state, JobRequest("j", workers, gpus), policy)
    assert decision.placement is not None, decision.reasons
    return [(s.node, s.gpus) for s in decision.placement.slots]


SCENARIOS = [
    ("pair: NV2 at lowest ids", [("a", "dgx1v", ())], (1, 2), [("a", (0, 3))]),
    # No NV2 triangle exists; the bottleneck is NV1 and the lowest ids win (no summed-bandwidth
    # tie-break, unlike the topology policy).
    ("triple: lowest ids at NV1", [("a", "dgx1v", ())], (1, 3), [("a", (0, 1, 2))]),
    (
        "four single-GPU workers on one quad",
        [("a", "dgx1v", ())],
        (4, 1),
        [("a", (0,)), ("a", (1,)), ("a", (2,)), ("a", (3,))],
    ),
    (
        "best bottleneck node wins over first node",
        [("a", "dgx1v", (0, 1, 4, 5)), ("b", "dgx1v", (4, 5, 6, 7))],
        (1, 4),
        [("b", (0, 1, 2, 3))],
    ),
    (
        "ties go to the first node, no best fit",
        [("a", "dgx1v", ()), ("b", "dgx1v", (4, 5, 6, 7))],
        (1, 4),
        [("a", (0, 1, 2, 3))],
    ),
    (
        "fewest nodes: the emptiest node first",
        [("a", "dgx1v", (0, 1, 2, 3, 4, 5)), ("b", "dgx1v", (0,)), ("c", "dgx1v", (0, 1, 2, 3))],
        (10, 1),
        [("b", (g,)) for g in range(1, 8)] + [("c", (4,)), ("c", (5,)), ("c", (6,))],
    ),
]


@pytest.mark.parametrize(("name", "nodes", "shape", "expected"), SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_scenarios(name: str, nodes: list, shape: tuple[int, int], expected: list) -> None:
    del name
    assert binding(preset_cluster(*nodes), *shape) == expected


def test_ack_differs_from_topology_on_triples() -> None:
    state = preset_cluster(("a", "dgx1v", ()))
    assert binding(state, 1, 3) != binding(state, 1, 3, policy="topology")


def test_bottleneck_reported() -> None:
    decision = place(preset_cluster(("a", "dgx1v", ())), JobRequest("j", 1, 3), "ack")
    assert decision.chosen is not None
    assert decision.chosen.metrics.bottleneck.kind == "NV1"
    assert decision.chosen.objective_dict() == {"-nodes": -1.0, "bottleneck_gbs": 25.0}


@pytest.mark.parametrize("seed", range(5))
def test_grouped_choice_equals_per_node_choice(seed: int) -> None:
    """choose_groups (what place() calls) must pick what choose over single nodes picks."""
    import random

    from ringleader.scheduler import get_policy

    rng = random.Random(seed)
    busy = [tuple(sorted(rng.sample(range(8), rng.choice([0, 0, 2, 4, 6, 8])))) for _ in range(12)]
    state = preset_cluster(*((f"n{i}", "dgx1v", b) for i, b in enumerate(busy)))
    policy = get_policy("ack")
    for workers, gpus in [(1, 1), (1, 2), (3, 1), (1, 4), (2, 4), (12, 1), (3, 8)]:
        job = JobRequest("j", workers, gpus)
        grouped = place(state, job, "ack")
        nodes = [ns for ns in state.nodes if policy.filter(ns, job) is None]
        direct = policy.choose(nodes, job)
        assert (grouped.placement, grouped.ok) == ((direct[0].placement, True) if direct else (None, False))
