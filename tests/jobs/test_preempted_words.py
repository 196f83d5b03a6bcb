"""A victim's Preempted event is read back (`list -o wide`) as what was written: who, why, and
the images/s its freed placement promised, for a priority preemption and a quota reclaim."""

from __future__ import annotations

import ringleader.model  # noqa: F401  (installs the throughput model's estimator)
from ringleader.jobs.queues import Preempted, preempted_by, read_preempted
from ringleader.scheduler import ClusterState, JobRequest, Placement, QueuedJob, RunningGang, WorkerSlot, schedule_queue
from ringleader.scheduler.order import QueueOrder
from ringleader.scheduler.queue import BackfillConfig
from ringleader.scheduler.teams import ANY_TYPE, TeamQueue, Teams
from ringleader.topology import NodeSpec, preset

NOW = 1000.0


def holding(*gangs: tuple[str, str]) -> ClusterState:
    state = ClusterState.empty([NodeSpec(f"n{i}", preset("dgx1v")) for i in range(2)])
    for gang, node in gangs:
        state = state.with_placement(Placement(gang, (WorkerSlot(0, node, tuple(range(8))),)))
    return state


def test_a_priority_preemption_reads_back() -> None:
    job = JobRequest("urgent-1", 4, 1, topology_aware=True, priority=10, model="vgg16", may_preempt=True)
    state = holding(("a", "n0"), ("b", "n1"))
    _, (decision,) = schedule_queue(state, [QueuedJob(job, 0, NOW)], now=NOW,
                                    running={"a": RunningGang("a", 0), "b": RunningGang("b", 3)})  # fmt: skip
    assert decision.preemption is not None
    message = preempted_by(decision.job, decision.preemption) + ": SIGTERM, then SIGKILL after 30 s; then requeued"
    assert read_preempted(message) == Preempted("urgent-1", "priority 10", round(decision.preemption.images_per_s))


def test_a_reclaim_reads_back() -> None:
    queues = (TeamQueue("a", ((ANY_TYPE, 8),), cohort="lab"), TeamQueue("b", ((ANY_TYPE, 8),), cohort="lab"))
    state = holding(("b1", "n0"), ("b2", "n1"))
    teams = Teams.of(queues, state, {"b1": "b", "b2": "b"})
    job = JobRequest("a1", 1, 4, topology_aware=True, model="vgg16", queue="a")
    _, (decision,) = schedule_queue(state, [QueuedJob(job, 0, NOW)], now=NOW, teams=teams,
                                    running={"b1": RunningGang("b1", 50), "b2": RunningGang("b2", 50)})  # fmt: skip
    assert decision.preemption is not None and decision.preemption.reclaim
    read = read_preempted(preempted_by(decision.job, decision.preemption))
    assert read is not None and (read.by, read.why) == ("a1", "quota of queue a")


def test_a_preemption_for_order_reads_back_as_one() -> None:
    job = JobRequest("short", 1, 8, topology_aware=True, model="vgg16")
    state = holding(("long", "n0"), ("kept", "n1"))  # kept: not preemptible, so not named below
    gang = RunningGang("long", 0, queue="default", started_s=NOW - 7200, attained_gpu_s=8 * 7200.0)
    config = BackfillConfig(order=QueueOrder.LAS)
    _, decisions = schedule_queue(state, [QueuedJob(job, 0, NOW)], now=NOW, running={"long": gang}, config=config)
    assert decisions[0].preemption is not None
    read = read_preempted(preempted_by(job, decisions[0].preemption))
    assert read is not None and (read.by, read.why) == ("short", "for order")


def test_other_words_read_as_no_preemption() -> None:
    assert read_preempted("preempted; requeued (restart 1)") is None
