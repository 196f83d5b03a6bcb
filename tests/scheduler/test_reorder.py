"""Preemption for queue order (las, srtf) and for fair share: a waiting gang stops running ones
its queue's order ranks after it, or gangs of queues above their share in its cohort; never a
non-preemptible gang, never one of higher priority, never one that ran less than the minimum run
time, and for order only when it pays counting the restart; and hypothesis properties over
random queues."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import ringleader.model  # noqa: F401  (installs the throughput model's estimator)
from ringleader.scheduler import ClusterState, Holding, JobRequest, Placement, Snapshot, Waiting, WorkerSlot, run_cycle
from ringleader.scheduler.order import NO_SERVICE, QueueOrder, Service, running_service
from ringleader.scheduler.queue import BackfillConfig
from ringleader.scheduler.reorder import ReorderConfig, ShareRule
from ringleader.scheduler.teams import ANY_TYPE, TeamQueue
from ringleader.scheduler.types import Decision
from ringleader.topology import NodeSpec, preset

NOW = 100_000.0
HOUR = 3600.0
LAS = BackfillConfig(order=QueueOrder.LAS)
SRTF = BackfillConfig(order=QueueOrder.SRTF)


def cluster(*gangs: tuple[str, str, tuple[int, ...]], nodes: int = 1) -> ClusterState:
    """(gang, node, GPU ids) per piece, on DGX-1V nodes n0, n1, ..."""
    state = ClusterState.empty([NodeSpec(f"n{i}", preset("dgx1v")) for i in range(nodes)])
    for gang, node, gpus in gangs:
        state = state.with_placement(Placement(gang, (WorkerSlot(0, node, gpus),)))
    return state


def job(name: str, gpus: int = 8, priority: int = 0, queue: str | None = None, **extra: object) -> JobRequest:
    return JobRequest(name, 1, gpus, topology_aware=True, model="vgg16", priority=priority, queue=queue, **extra)  # type: ignore[arg-type]


def running(name: str, ran_s: float = 2 * HOUR, gpus: int = 8, **extra: object) -> Holding:
    """A preemptible gang that started ``ran_s`` ago and attained all that service."""
    fields: dict[str, object] = {"preemptible": True, "started_s": NOW - ran_s, "attained_gpu_s": gpus * ran_s,
                                 "checkpoint_s": 600.0} | extra  # fmt: skip
    return Holding(name, **fields)  # type: ignore[arg-type]


def decide(state: ClusterState, holding: list[Holding], waiting: list[Waiting], config: BackfillConfig,
           queues: tuple[TeamQueue, ...] = ()) -> list[Decision]:  # fmt: skip
    return run_cycle(Snapshot(state, waiting, NOW, holding, queues, config=config)).decisions


def test_las_stops_the_gang_with_more_attained_service_for_a_new_one() -> None:
    state = cluster(("long", "n0", tuple(range(8))))
    decision = decide(state, [running("long")], [Waiting(job("short"), 1, NOW)], LAS)[0]
    assert decision.preemption is not None and decision.preemption.names == ("long",)
    assert decision.preemption.why is not None and decision.preemption.why.startswith("for order: queue default")
    assert "(for order: " in decision.reasons[0]


def test_fifo_stops_nobody_for_order() -> None:
    state = cluster(("long", "n0", tuple(range(8))))
    decision = decide(state, [running("long")], [Waiting(job("short"), 1, NOW)], BackfillConfig())[0]
    assert decision.preemption is None


def test_a_non_preemptible_gang_is_never_stopped_for_order() -> None:
    state = cluster(("long", "n0", tuple(range(8))))
    kept = running("long", preemptible=False)
    assert decide(state, [kept], [Waiting(job("short"), 1, NOW)], LAS)[0].preemption is None


def test_a_gang_of_higher_priority_is_never_stopped_for_order() -> None:
    state = cluster(("long", "n0", tuple(range(8))))
    above = running("long", priority=5)
    assert decide(state, [above], [Waiting(job("short"), 1, NOW)], LAS)[0].preemption is None


def test_a_gang_runs_the_minimum_run_time_before_it_may_be_stopped_for_order() -> None:
    state = cluster(("long", "n0", tuple(range(8))))
    fresh = running("long", ran_s=20 * 60, attained_gpu_s=10 * HOUR * 8)  # much service, 20 min into this run
    assert decide(state, [fresh], [Waiting(job("short"), 1, NOW)], LAS)[0].preemption is None
    shorter = BackfillConfig(order=QueueOrder.LAS, reorder=ReorderConfig(min_run_s=600.0))
    assert decide(state, [fresh], [Waiting(job("short"), 1, NOW)], shorter)[0].preemption is not None


def test_srtf_stops_a_long_job_for_a_short_one_only_when_it_pays() -> None:
    state = cluster(("long", "n0", tuple(range(8))))
    short = Waiting(job("short"), 1, NOW, service=Service(remaining_s=HOUR))
    paying = running("long", remaining_s=10 * HOUR, expected_end_s=NOW + 10 * HOUR)
    decision = decide(state, [paying], [short], SRTF)[0]
    assert decision.preemption is not None and decision.preemption.names == ("long",)
    # 1.1 h left: more than the short job's hour, but the victim's restart (1 min) and the 9 min
    # since its last checkpoint, with the hour it then waits, cost more than the 1.1 h saved
    close = running("long", ran_s=2 * HOUR + 9 * 60, remaining_s=1.1 * HOUR, expected_end_s=NOW + 1.1 * HOUR)
    assert decide(state, [close], [short], SRTF)[0].preemption is None


def test_srtf_never_stops_a_gang_with_less_time_left() -> None:
    state = cluster(("long", "n0", tuple(range(8))))
    waiting = Waiting(job("short"), 1, NOW, service=Service(remaining_s=5 * HOUR))
    less = running("long", remaining_s=4 * HOUR)
    assert decide(state, [less], [waiting], SRTF)[0].preemption is None


def test_srtf_stops_a_gang_long_past_its_expected_end_for_a_short_one() -> None:
    # due 5 h ago and still running: as the queue's free_at has it, it is taken to run as long
    # again, not to end this instant (which ranked it first, never to be stopped, pass after pass)
    state = cluster(("late", "n0", tuple(range(8))))
    left = running_service(8, NO_SERVICE, NOW - 8 * HOUR, NOW, NOW - 5 * HOUR)[2]
    late = running("late", ran_s=8 * HOUR, expected_end_s=NOW - 5 * HOUR, remaining_s=left)
    short = Waiting(job("short"), 1, NOW, service=Service(remaining_s=HOUR))
    decision = decide(state, [late], [short], SRTF)[0]
    assert decision.preemption is not None and decision.preemption.names == ("late",)


LAB = (TeamQueue("a", ((ANY_TYPE, 16),), 1.0, "lab"), TeamQueue("b", ((ANY_TYPE, 16),), 2.0, "lab"))


def test_a_queue_below_its_share_stops_a_gang_of_a_queue_above_its_own() -> None:
    state = cluster(("a1", "n0", tuple(range(8))), ("a2", "n1", tuple(range(8))), nodes=2)
    holding = [running("a1", queue="a"), running("a2", queue="a", ran_s=HOUR)]
    decision = decide(state, holding, [Waiting(job("b1", queue="b"), 1, NOW)], BackfillConfig(), LAB)[0]
    assert decision.preemption is not None and len(decision.preemption.names) == 1
    why = decision.preemption.why
    assert why is not None and why.startswith("fair share (LessThanOrEqualToFinalShare): queue a at 100% of")
    # a (weight 1) keeps 8 GPUs, 8 per weight; b (weight 2) gets 8, 4 per weight: the order holds


def test_fair_share_stops_nobody_when_the_queue_would_pass_the_other() -> None:
    # a holds 8 of 16 (8 per weight); b with 8 more would hold 16 (8 per weight): a does not
    # drop below b by the first rule, and b with the gang is not strictly below a by the second
    state = cluster(("a1", "n0", tuple(range(8))), ("b0", "n1", tuple(range(8))), nodes=2)
    holding = [running("a1", queue="a"), running("b0", queue="b", preemptible=False)]
    decision = decide(state, holding, [Waiting(job("b1", queue="b"), 1, NOW)], BackfillConfig(), LAB)[0]
    assert decision.preemption is None


def test_fair_share_spares_higher_priority_non_preemptible_and_fresh_gangs() -> None:
    state = cluster(("a1", "n0", tuple(range(8))), ("a2", "n1", tuple(range(8))), nodes=2)
    for one in ({"priority": 3}, {"preemptible": False}, {"ran_s": 60.0}):
        holding = [running("a1", queue="a", **one), running("a2", queue="a", **one)]  # type: ignore[arg-type]
        decision = decide(state, holding, [Waiting(job("b1", queue="b"), 1, NOW)], BackfillConfig(), LAB)[0]
        assert decision.preemption is None, one


def test_the_second_strategy_stops_the_one_gang_that_holds_a_queue_above_its_share() -> None:
    # a holds 16 GPUs in one gang: stopping it leaves a with 0 per weight, below b's 4 with its
    # gang (the first rule says no); b with its gang (4 per weight) is below a's 16 before (yes)
    state = cluster(("big", "n0", tuple(range(8))), ("big", "n1", tuple(range(8))), nodes=2)
    holding = [running("big", gpus=16, queue="a")]
    waiting = [Waiting(job("b1", queue="b"), 1, NOW)]
    decision = decide(state, holding, waiting, BackfillConfig(), LAB)[0]
    assert decision.preemption is not None and decision.preemption.names == ("big",)
    assert decision.preemption.why is not None and "LessThanInitialShare" in decision.preemption.why
    final_only = BackfillConfig(reorder=ReorderConfig(share_rules=(ShareRule.FINAL,)))
    assert decide(state, holding, waiting, final_only, LAB)[0].preemption is None


def test_a_gang_that_must_borrow_stops_a_queue_far_above_its_share() -> None:
    """b holds 2 of its quota of 8 and waits with an 8-GPU gang: it must borrow 2, and a, which
    borrowed 8 beyond its quota of 4, holds the GPUs. No quota of b's is lent out, so no reclaim;
    fair share (as Kueue's, whether the gang borrows or not) stops a's 8-GPU gang: b with its gang
    holds 5 per weight, below a's 12."""
    queues = (TeamQueue("a", ((ANY_TYPE, 4),), 1.0, "lab"), TeamQueue("b", ((ANY_TYPE, 8),), 2.0, "lab"),
              TeamQueue("c", ((ANY_TYPE, 4),), 1.0, "lab"))  # fmt: skip
    state = cluster(("a1", "n0", tuple(range(8))), ("a2", "n1", (0, 1, 2, 3)), ("b0", "n1", (4, 5)), nodes=2)
    holding = [running("a1", queue="a"), running("a2", gpus=4, queue="a"), running("b0", gpus=2, queue="b")]
    waiting = [Waiting(job("b1", queue="b", preemptible=True), 1, NOW)]
    decision = decide(state, holding, waiting, BackfillConfig(), queues)[0]
    assert decision.preemption is not None and decision.preemption.names == ("a1",)
    assert decision.preemption.why is not None and "LessThanInitialShare" in decision.preemption.why
    # a gang that may not borrow gains nothing from stopping another queue's gangs
    fixed = [Waiting(job("b1", queue="b", preemptible=False), 1, NOW)]
    assert decide(state, holding, fixed, BackfillConfig(), queues)[0].preemption is None


@st.composite
def queues_at_random(draw: st.DrawFn) -> tuple[ClusterState, list[Holding], list[Waiting], BackfillConfig]:
    """Two nodes of 8 GPUs filled by gangs of 2 or 4 GPUs, each of random queue, priority,
    preemptibility, run so far and time left; waiting gangs of random shape in random queues."""
    state = cluster(nodes=2)
    holding: list[Holding] = []
    for node in ("n0", "n1"):
        free = 0
        while free < 8:
            size = draw(st.sampled_from([2, 4]))
            name = f"r{len(holding)}"
            state = state.with_placement(Placement(name, (WorkerSlot(0, node, tuple(range(free, free + size))),)))
            free += size
            ran = draw(st.floats(0, 6 * HOUR))
            holding.append(Holding(name, draw(st.integers(0, 2)), draw(st.sampled_from("ab")), None, 30.0,
                                   draw(st.booleans()), NOW - ran, size * (ran + draw(st.floats(0, 10 * HOUR))),
                                   draw(st.floats(0, 10 * HOUR)), 600.0))  # fmt: skip
    waiting = [Waiting(job(f"w{i}", draw(st.sampled_from([1, 2, 4, 8])), draw(st.integers(0, 2)),
                           draw(st.sampled_from("ab"))), i, NOW - 60 * i,
                       service=Service(remaining_s=draw(st.floats(60, 10 * HOUR))))
               for i in range(draw(st.integers(1, 4)))]  # fmt: skip
    order = draw(st.sampled_from([QueueOrder.LAS, QueueOrder.SRTF]))
    return state, holding, waiting, BackfillConfig(order=order)


@settings(max_examples=60, deadline=None)
@given(queues_at_random(), st.booleans())
def test_no_preemption_for_order_or_fair_share_takes_a_gang_it_must_spare(
    drawn: tuple[ClusterState, list[Holding], list[Waiting], BackfillConfig], cohort: bool
) -> None:
    state, holding, waiting, config = drawn
    queues = (TeamQueue("a", ((ANY_TYPE, 16),), 1.0, "lab"), TeamQueue("b", ((ANY_TYPE, 16),), 2.0, "lab"))
    by_name = {h.name: h for h in holding}
    for decision in decide(state, holding, waiting, config, queues if cohort else ()):
        preemption = decision.preemption
        if preemption is None or preemption.why is None:
            continue
        for victim in preemption.names:
            gang = by_name[victim]
            assert gang.preemptible, victim  # never a gang that does not resume
            assert gang.priority <= decision.job.priority, victim  # never one of higher priority
            assert gang.started_s is not None and NOW - gang.started_s >= config.reorder.min_run_s  # no thrash
            if preemption.why.startswith("for order"):
                assert gang.queue == (decision.job.queue or "default")
