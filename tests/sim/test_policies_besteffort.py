"""BestEffort (NVIDIA go-gpuallocator) on declarative scenarios: nodes + jobs + expected binding."""

from __future__ import annotations

import pytest

from builders import preset_cluster
from ringleader.scheduler import ClusterState, JobRequest, place
from ringleader.scheduler.policies.besteffort import allocate, pair_score
from ringleader.topology import preset

DGX1V = preset("dgx1v")




def binding(state: ClusterState, workers: int, gpus: int) -> list[tuple[str, tuple[int, ...]]]:
    decision = place(state, JobRequest("j", workers, gpus), "besteffort")
    assert decision.placement is not None, decision.reasons
    return [(s.node, s.gpus) for s in decision.placement.slots]


def test_pair_scores_follow_go_gpuallocator() -> None:
    # NV2 inside a socket: 2 x 100 + NODE 20; NV2 across sockets: 200 + SYS 10; no NVLink: SYS 10.
    assert pair_score(DGX1V, 0, 3) == 220
    assert pair_score(DGX1V, 0, 4) == 210
    assert pair_score(DGX1V, 0, 1) == 120
    assert pair_score(DGX1V, 0, 5) == 10
    pcie = preset("pcie-8gpu-2socket")
    assert [pair_score(pcie, 0, j) for j in (1, 2, 4)] == [50, 20, 10]


SCENARIOS = [
    # (name, nodes, (workers, gpus), expected binding)
    ("pair prefers NV2", [("a", "dgx1v", ())], (1, 2), [("a", (0, 3))]),
    ("triple maximises summed score", [("a", "dgx1v", ())], (1, 3), [("a", (0, 2, 3))]),
    ("quad is a whole NVLink quad", [("a", "dgx1v", ())], (1, 4), [("a", (0, 1, 2, 3))]),
    ("one GPU per worker: first free ids", [("a", "dgx1v", ())], (2, 1), [("a", (0,)), ("a", (1,))]),
    ("pair avoids a busy NV2 partner", [("a", "dgx1v", (3,))], (1, 2), [("a", (1, 2))]),
    ("PCIe pair under one switch", [("a", "pcie-8gpu-2socket", (0,))], (1, 2), [("a", (2, 3))]),
    (
        "nodes spread like default, GPUs by BestEffort",
        [("a", "dgx1v", ()), ("b", "dgx1v", ())],
        (2, 2),
        [("a", (0, 3)), ("b", (0, 3))],
    ),
]


@pytest.mark.parametrize(("name", "nodes", "shape", "expected"), SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_scenarios(name: str, nodes: list, shape: tuple[int, int], expected: list) -> None:
    del name
    assert binding(preset_cluster(*nodes), *shape) == expected


def test_partition_walk_beats_greedy_single_set() -> None:
    # Free 0,1,2,3,4,5: the best single pair is an NV2 pair; the chosen one comes from the best
    # partition into pairs, and is one of that partition's highest-scoring pairs.
    free = (0, 1, 2, 3, 4, 5)
    chosen = allocate(DGX1V, free, 2)
    assert len(chosen) == 2
    assert pair_score(DGX1V, *chosen) == 220


def test_unplaceable_and_cross_node_gang() -> None:
    state = preset_cluster(("a", "dgx1v", (0, 1, 2, 3, 4, 5)), ("b", "dgx1v", (0, 1, 2, 3, 4, 5)))
    assert not place(state, JobRequest("j", 1, 4), "besteffort").ok
    assert binding(state, 2, 2) == [("a", (6, 7)), ("b", (6, 7))]
