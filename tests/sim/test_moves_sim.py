"""Moves in the simulator: a gang started spread over two nodes moves to one node once a gang
there ends, and finishes sooner than the same trace run without moves; a gang moved resumes
from its last checkpoint."""

from __future__ import annotations

from ringleader.scheduler.move import DEFAULT_MOVE_RULE
from ringleader.sim import PreemptionCost, TraceJob, model_step_time, simulate
from ringleader.topology import NodeSpec, preset

COST = PreemptionCost(checkpoint_s=300.0, restart_s=60.0)


def two_nodes() -> list[NodeSpec]:
    """The reference study's 2 x DGX-1V at 25 Gb/s."""
    return [NodeSpec(f"v100-{i}", preset("dgx1v"), 25.0) for i in range(2)]


def trace(iterations: int = 40_000) -> list[TraceJob]:
    """Two six-GPU gangs take six GPUs of each node; VGG16 on four GPUs starts spread 2 + 2; the
    first gang ends long before it."""
    return [
        TraceJob("short", 0.0, 6, 1, "resnet50", 64, 2_000),
        TraceJob("long", 0.0, 6, 1, "resnet50", 64, 200_000),
        TraceJob("vgg", 1.0, 4, 1, "vgg16", 64, iterations),
    ]


def run(moves: bool, iterations: int = 40_000):  # type: ignore[no-untyped-def]
    return simulate(two_nodes(), trace(iterations), "topology", model_step_time(), preemption=COST, moves=moves)


def test_a_spread_gang_moves_to_one_node_and_finishes_sooner() -> None:
    stay, move = (run(False), run(True))
    by_name = [{r.job.name: r for r in sim.records} for sim in (stay, move)]
    stayed, moved = by_name[0]["vgg"], by_name[1]["vgg"]
    assert stayed.moved == 0 and stayed.nodes_used == 2
    assert moved.moved == 1 and moved.nodes_used == 1  # its last run: on one node
    short_end = by_name[1]["short"].finish_s
    assert short_end is not None and len(moved.runs) == 2 and moved.runs[1][0] >= short_end
    assert moved.finish_s is not None and stayed.finish_s is not None and moved.finish_s < stayed.finish_s
    assert moved.lost_s < COST.checkpoint_s  # it resumed from its last checkpoint
    assert by_name[1]["long"].moved == 0  # nothing better for it: it runs on one node already


def test_a_gang_nearly_done_when_room_frees_stays_spread() -> None:
    """300 steps spread end about a minute after the room on one node frees: moving would not pay."""
    stay = {r.job.name: r for r in run(False, 300).records}
    assert stay["short"].finish_s is not None and stay["vgg"].finish_s is not None
    assert stay["vgg"].finish_s - stay["short"].finish_s < 2 * COST.restart_s + DEFAULT_MOVE_RULE.margin_s
    moved = {r.job.name: r for r in run(True, 300).records}
    assert moved["vgg"].moved == 0 and moved["vgg"].finish_s == stay["vgg"].finish_s
