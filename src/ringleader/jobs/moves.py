"""A running job as a move weighs it (``scheduler/move.py``), and the start on the placement a
move chose: the same on every engine that moves gangs. An engine stops the mover as it stops a
preempted gang (SIGTERM, its grace, SIGKILL), holds the move's target for it meanwhile, and once
it has stopped starts it there (``moved_decision``) if the target is still free; else it waits
in the queue as any requeued job."""

from __future__ import annotations

from collections.abc import Collection

from ringleader.jobs.spec import JobSpec
from ringleader.scheduler import ClusterState, Code, Decision, JobRequest, Placement, WorkerSlot, get_policy
from ringleader.scheduler.framework import Candidate, placement_metrics
from ringleader.scheduler.move import Movable, RestartCost

# Owner of the GPUs held for a gang while it stops to move there ("moving:JOB"); the embedded
# engine's meta key for the placement a stopping gang starts on again.
MOVING = "moving:"


def may_move(spec: JobSpec) -> bool:
    """Whether a running job may be moved to a better placement: it resumes from its checkpoint
    (``--preemptible``, the default) and its work is known (``--run-time`` or ``--steps``)."""
    return spec.preemptible and spec.run_time_s is not None


def movable(request: JobRequest, placement: Placement | None, started_s: float | None, restarts: int, now: float,
            restart: RestartCost) -> Movable | None:  # fmt: skip
    """A running job as a move weighs it (``request``: as the queue sees it, ``may_move``'s
    conditions included): its work, what it ran of it since its start, where it runs, and
    ``restart``, what a restart costs on this cluster. Its progress is known from its start only,
    so a job requeued once (preempted, restarted or moved) is not moved again."""
    if not request.preemptible or request.work_s is None or restarts or started_s is None or placement is None:
        return None
    return Movable(request, placement, request.work_s, restart.seconds, ran_s=max(now - started_s, 0.0),
                   restart_source=restart.source)  # fmt: skip


def held_for_move(state: ClusterState, target: Placement) -> ClusterState:
    """``state`` with the GPUs of ``target`` that are free held for the gang moving there."""
    slots: list[WorkerSlot] = []
    for node in target.nodes:
        if node in state.positions:
            free = state.node(node).free_mask
            gpus = tuple(g for g in target.gpus_on(node) if free >> g & 1)
            if gpus:
                slots.append(WorkerSlot(len(slots), node, gpus))
    return state.with_placement(Placement(f"{MOVING}{target.job}", tuple(slots))) if slots else state


def moved_decision(request: JobRequest, target: Placement, state: ClusterState,
                   cordoned: Collection[str]) -> Decision | None:  # fmt: skip
    """The stopped mover's start on ``target``, the placement its move was weighed on; None when
    a node of it is gone or cordoned, or a GPU of it taken (``state``: the cluster without the
    hold for it)."""
    if any(n not in state.positions or n in cordoned or any(
            not state.node(n).free_mask >> g & 1 for g in target.gpus_on(n)) for n in target.nodes):  # fmt: skip
        return None
    chosen = Candidate(target, placement_metrics(state.by_name, target), (), ())
    return Decision(request, get_policy(request.policy_name).name, Code.SUCCESS, chosen=chosen)
