"""Gang preemption: the fewest, lowest-priority whole gangs whose GPUs give a waiting gang a
placement as fast as its best; never a gang of its priority or above, never a non-preemptible one,
never for a placement it would not take; and a hypothesis property over random clusters."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import ringleader.model  # noqa: F401  (installs the throughput model's estimator)
from ringleader.scheduler import (
    ClusterState,
    JobRequest,
    Placement,
    QueuedJob,
    QueuePass,
    RunningGang,
    WorkerSlot,
    schedule_queue,
)
from ringleader.scheduler.policies.throughput import current_estimator
from ringleader.scheduler.types import as_good
from ringleader.topology import NodeSpec, preset

NOW = 1000.0


def running(*gangs: tuple[str, str, tuple[int, ...]], nodes: int = 2) -> ClusterState:
    """(gang, node, GPU ids) per piece, on ``nodes`` DGX-1V nodes n0, n1, ..."""
    state = ClusterState.empty([NodeSpec(f"n{i}", preset("dgx1v")) for i in range(nodes)])
    for gang, node, gpus in gangs:
        state = state.with_placement(Placement(gang, (WorkerSlot(0, node, gpus),)))
    return state


def urgent(workers: int, gpus: int = 1, priority: int = 10) -> JobRequest:
    return JobRequest("urgent", workers, gpus, topology_aware=True, priority=priority, model="vgg16", may_preempt=True)


def decide(state: ClusterState, job: JobRequest, gangs: dict[str, RunningGang], **extra: object):  # type: ignore[no-untyped-def]
    _, decisions = schedule_queue(state, [QueuedJob(job, 0, NOW)], now=NOW, running=gangs, **extra)  # type: ignore[arg-type]
    return decisions[0]


def test_one_victim_frees_an_nvlink_quad() -> None:
    state = running(("a", "n0", (0, 1, 2, 3)), ("b", "n0", (4, 5, 6, 7)), ("c", "n1", tuple(range(8))))
    gangs = {n: RunningGang(n, 0) for n in "abc"}
    decision = decide(state, urgent(4), gangs)
    assert not decision.ok and decision.preemption is not None
    assert decision.preemption.names == ("a",)
    assert decision.preemption.placement.gpus_on("n0") == (0, 1, 2, 3)
    assert decision.reservation is not None and decision.reservation.start_s == NOW
    assert decision.reasons[0].startswith("preempts job a (priority 0, GPUs 0-3 on n0): then starts on n0[4w: GPU")


def test_the_fewest_victims_then_the_lowest_priority() -> None:
    ones = [(f"one-{g}", "n0", (g,)) for g in range(8)]
    state = running(*ones, ("big", "n1", tuple(range(8))))
    gangs = {name: RunningGang(name, 0) for name, _, _ in ones} | {"big": RunningGang("big", 0)}
    assert decide(state, urgent(8), gangs).preemption.names == ("big",)  # type: ignore[union-attr]
    # two whole-node gangs: the one of lower priority goes
    state = running(("p3", "n0", tuple(range(8))), ("p1", "n1", tuple(range(8))))
    preemption = decide(state, urgent(8), {"p3": RunningGang("p3", 3), "p1": RunningGang("p1", 1)}).preemption
    assert preemption is not None and preemption.names == ("p1",)


def test_never_its_priority_or_above_and_never_a_non_preemptible_gang() -> None:
    state = running(("a", "n0", tuple(range(8))), ("b", "n1", tuple(range(8))))
    assert decide(state, urgent(8, priority=5), {"a": RunningGang("a", 5), "b": RunningGang("b", 7)}).preemption is None
    gangs = {"a": RunningGang("a", 0, preemptible=False), "b": RunningGang("b", 9)}
    assert decide(state, urgent(8, priority=5), gangs).preemption is None
    # gangs the engine does not name (already stopping, or not its own) are never victims
    assert decide(state, urgent(8), {}).preemption is None
    # and a gang that does not ask to preempt (preemptionPolicy Never) waits
    never = JobRequest("urgent", 8, 1, topology_aware=True, priority=10)
    assert decide(state, never, {"a": RunningGang("a", 0), "b": RunningGang("b", 0)}).preemption is None


def test_no_preemption_when_the_gpus_free_as_soon_as_a_victim_would_stop() -> None:
    state = running(("a", "n0", tuple(range(8))), ("b", "n1", tuple(range(8))))
    gangs = {"a": RunningGang("a", 0), "b": RunningGang("b", 0)}
    soon = decide(state, urgent(8), gangs, preempt_delay_s=30.0, expected_ends={"a": NOW + 20})
    assert soon.preemption is None and soon.reservation is not None and soon.reservation.start_s == NOW + 20
    later = decide(state, urgent(8), gangs, preempt_delay_s=30.0, expected_ends={"a": NOW + 600})
    assert later.preemption is not None and later.reservation.start_s == NOW + 30  # type: ignore[union-attr]


def test_a_victim_is_taken_once_per_pass() -> None:
    state = running(("a", "n0", tuple(range(8))), ("b", "n1", tuple(range(8))))
    gangs = {"a": RunningGang("a", 0), "b": RunningGang("b", 0)}
    first = JobRequest("first", 8, 1, topology_aware=True, priority=10, may_preempt=True)
    second = JobRequest("second", 8, 1, topology_aware=True, priority=9, may_preempt=True)
    _, decisions = schedule_queue(state, [QueuedJob(first, 0, NOW), QueuedJob(second, 1, NOW)], now=NOW,
                                  running=gangs)  # fmt: skip
    taken = [d.preemption.names for d in decisions if d.preemption]
    assert sorted(taken) == [("a",), ("b",)]


# -- the property ------------------------------------------------------------------------------


@st.composite
def busy_clusters(draw: st.DrawFn) -> tuple[ClusterState, dict[str, RunningGang]]:
    n_nodes = draw(st.integers(1, 3))
    state = ClusterState.empty([NodeSpec(f"n{i}", preset("dgx1v")) for i in range(n_nodes)])
    gangs: dict[str, RunningGang] = {}
    for i in range(draw(st.integers(0, 10))):
        size = draw(st.sampled_from([1, 2, 4, 8]))
        nodes = draw(st.lists(st.integers(0, n_nodes - 1), min_size=1, max_size=2, unique=True))
        slots = []
        for node in nodes:
            free = list(state.node(f"n{node}").free_gpus)
            if len(free) >= size:
                slots.append(WorkerSlot(len(slots), f"n{node}", tuple(free[:size])))
        if slots:
            name = f"g{i}"
            state = state.with_placement(Placement(name, tuple(slots)))
            gangs[name] = RunningGang(name, draw(st.integers(0, 3)), draw(st.booleans()))
    return state, gangs


@settings(max_examples=200, deadline=None)
@given(busy_clusters(), st.sampled_from([(1, 4), (4, 1), (2, 4), (8, 1), (3, 8)]), st.integers(0, 4))
def test_preemption_takes_whole_lower_gangs_and_the_gang_then_fits_well(
    cluster_gangs: tuple[ClusterState, dict[str, RunningGang]], shape: tuple[int, int], priority: int
) -> None:
    state, gangs = cluster_gangs
    job = JobRequest("p", shape[0], shape[1], topology_aware=True, priority=priority, model="vgg16", may_preempt=True)
    queue = QueuePass(state, NOW, {}, running=gangs)
    decision, after = queue.decide(job)
    preemption = decision.preemption
    if preemption is None:
        return
    assert not decision.ok and after.state == state  # nothing starts while victims stop
    for victim in preemption.victims:
        assert gangs[victim.name] == victim and victim.preemptible and victim.priority < job.priority
    freed = state
    for name in preemption.names:
        freed = freed.without_job(name)
    assert all(owner not in preemption.names for ns in freed.nodes for _, owner in ns.allocated)  # whole gangs
    freed.with_placement(preemption.placement)  # the gang fits there: never a partial start
    ideal = queue.ideal_rate(job)
    rate = current_estimator()(freed.by_name, preemption.placement, job)
    assert ideal is not None and as_good(rate, ideal)
    # no victim was needed for nothing: without any one of them there is no such placement
    for spared in preemption.names:
        fewer = state
        for name in preemption.names:
            if name != spared:
                fewer = fewer.without_job(name)
        placed = QueuePass(fewer, NOW, {}).decide(job)[0]
        assert placed.placement is None or not as_good(current_estimator()(fewer.by_name, placed.placement, job), ideal)
    assert set(after.running) == set(gangs) - set(preemption.names)
