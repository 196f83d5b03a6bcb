"""The simulator with a network tree: gangs priced by the uplinks they share, fragmentation per level."""

from __future__ import annotations

from ringleader.sim.engine import simulate
from ringleader.sim.steptime import Memoised, model_step_time
from ringleader.sim.summary import summarise
from ringleader.sim.trace import TraceJob
from ringleader.topology import Level, NetworkPlace, NodeSpec, preset

LEVELS = (Level("rack", oversubscription=4.0), Level("spine"))


def specs() -> list[NodeSpec]:
    """2 racks of 2 nodes of 8 GPUs, racks 4:1 oversubscribed."""
    return [NodeSpec(f"r{r}n{i}", preset("dgx-a100"), 200.0, (), True,
                     network=NetworkPlace(LEVELS, (f"rack-{r}", "spine")))
            for r in range(2) for i in range(2)]  # fmt: skip


def jobs() -> list[TraceJob]:
    return [
        TraceJob("hold", 0.0, 1, 8, "resnet50", 64, 50_000),
        TraceJob("pair", 1.0, 2, 8, "vgg16", 64, 2_000),  # two whole nodes: one rack has them both
    ]


def test_network_aware_placement_keeps_the_pair_in_a_rack_and_runs_faster() -> None:
    step = Memoised(model_step_time())
    aware = simulate(specs(), jobs(), "topology", step, network_aware=True)
    hidden = simulate(specs(), jobs(), "topology", step, network_aware=False)
    pair_aware = next(r for r in aware.records if r.job.name == "pair")
    pair_hidden = next(r for r in hidden.records if r.job.name == "pair")
    assert pair_aware.span_level == 0 and pair_hidden.span_level == 1
    assert pair_aware.jct_s is not None and pair_hidden.jct_s is not None
    assert pair_aware.jct_s < pair_hidden.jct_s  # the 4:1 uplink halves its ring's bandwidth
    # Per level (rack, spine), the share of free GPUs under switches not wholly free: once both
    # run, the 8 free GPUs sit in rack-0, which "hold" half uses.
    assert all(len(f) == 2 for f in aware.timeline.level_fragmentation)
    assert aware.timeline.level_fragmentation[1] == (1.0, 1.0)
    summary, blind = summarise(aware), summarise(hidden)
    assert summary["cross_leaf_share"] == 0.0 and blind["cross_leaf_share"] == 1.0
    assert len(summary["level_fragmentation"]) == 2
    assert aware.timeline.level_whole_free[1] == (0, 0)  # both racks in use
