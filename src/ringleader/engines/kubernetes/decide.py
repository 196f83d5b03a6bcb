"""One decision per gang over the cache: every member's node and GPU ids, or why it waits.

The GPU workers go through the same pure ``place()`` as every other engine. What Kubernetes
adds is applied around it, without a copy of the cluster per gang: nodes the pods can never use
(cordoned, untolerated taints, nodeSelector, not Ready) have their free GPUs masked as taken in
the snapshot handed to ``place()`` (a few incremental updates); CPU, memory and pod-count room is
checked on the nodes ``place()`` chose, and a node short of it is masked and the gang placed
again. Members without GPUs (the MPI launcher) then go next to the workers if they fit there.

Given the cycle's ``QueuePass``, the decision is the shared queue's (``ringleader.scheduler.queue``,
the same policy as the embedded and Slurm queues): a gang may start only where it delays no
reservation of a gang ahead of it (backfill when its pods' activeDeadlineSeconds ends before the
reservation starts), and a gang that cannot start gets a reservation while fewer than the depth
exist.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from ringleader.engines.kubernetes.cache import Cache, Gang, Usage
from ringleader.engines.kubernetes.objects import PodInfo, static_misfit
from ringleader.scheduler import (
    ClusterState,
    Code,
    Decision,
    JobRequest,
    Placement,
    Preemption,
    QueuePass,
    Reservation,
    WorkerSlot,
    place,
)
from ringleader.scheduler.queue import UNUSABLE as MASK
from ringleader.scheduler.queue import enough_worker_slots  # the owner of GPUs masked out of one decision

MAX_REPLACEMENTS = 4  # nodes short of CPU/memory masked before the gang is called pending


@dataclass(frozen=True)
class Assignment:
    pod: PodInfo
    node: str
    gpus: tuple[int, ...]
    worker: int | None  # index among the gang's GPU workers (rank order), None for others


@dataclass(frozen=True)
class Outcome:
    """A gang's decision: ``assignments`` for every pending member, or ``reason`` (with numbers)
    and ``code`` (Unschedulable: may fit later; UnschedulableAndUnresolvable: never)."""

    gang: Gang
    code: Code
    assignments: tuple[Assignment, ...] = ()
    reason: str = ""
    summary: str = ""
    reservation: Reservation | None = None  # pending: the GPUs held for it until it can start
    preemption: Preemption | None = None  # pending: the gangs it stops to start on their GPUs

    @property
    def ok(self) -> bool:
        return self.code is Code.SUCCESS


def job_request(gang: Gang) -> JobRequest:
    """The gang as the shared queue sees it: its GPU workers, its highest pod priority, a time
    limit when every member has activeDeadlineSeconds (kubelet stops the pod then), and its
    queue and preemption as the gang's spec says (its workers', for a gang submit did not make)."""
    workers = _gpu_workers(gang)
    spec = gang.spec
    may_preempt = spec.preempt if spec is not None else bool(workers) and workers[0].may_preempt
    preemptible = spec.preemptible if spec is not None else not workers or workers[0].preemptible
    limits = [p.deadline_s for p in gang.pending if p.deadline_s]
    return JobRequest(
        gang.key, len(workers), workers[0].gpus if workers else 0,
        topology_aware=bool(workers) and workers[0].topology_aware,
        priority=max((p.priority for p in gang.pending), default=0),
        time_limit_s=max(limits) if limits and len(limits) == len(gang.pending) else None,
        topology_required=workers[0].topology_required if workers else None,
        topology_preferred=workers[0].topology_preferred if workers else None,
        start_rule=workers[0].start_rule if workers else "now",
        work_s=workers[0].run_time_s if workers else None, max_wait_s=workers[0].max_wait_s if workers else None,
        risk=workers[0].risk if workers else "averse",
        may_preempt=may_preempt, queue=gang.queue if gang.refused is None else None, preemptible=preemptible,
        model=workers[0].model if workers else None,
        workload=workers[0].workload if workers else None,
    )  # fmt: skip


def gang_calibration(gang: Gang) -> str | None:
    """The calibration written on the gang's workers (names.CALIBRATION_ANNOTATION), unread."""
    workers = _gpu_workers(gang)
    return workers[0].calibration if workers else None


def _gpu_workers(gang: Gang) -> list[PodInfo]:
    """The gang's pending GPU workers in rank order: the first carries what was written on the
    worker template (start rule, queue, model, calibration)."""
    return sorted((p for p in gang.pending if p.gpus), key=lambda p: p.rank)


def placement_of(outcome: Outcome) -> Placement:
    """The GPU workers of a placed gang as the shared queue's Placement (rank order)."""
    slots = sorted((WorkerSlot(a.worker, a.node, a.gpus) for a in outcome.assignments if a.worker is not None),
                   key=lambda s: s.index)  # fmt: skip
    return Placement(outcome.gang.key, tuple(slots))


def decide(cache: Cache, gang: Gang, queue: QueuePass | None = None, submit_s: float | None = None) -> Outcome:
    """Place every pending member of ``gang`` at once, or none; with ``queue``, only where no
    reservation of a gang ahead of it is delayed and its start rule does not wait (``submit_s``:
    when it was created, for its longest wait). Pure over the cache: nothing is assumed or
    written here."""
    if gang.refused is not None:
        return Outcome(gang, Code.UNSCHEDULABLE, reason=gang.refused)
    gpu_pods = _gpu_workers(gang)
    other_pods = sorted((p for p in gang.pending if not p.gpus), key=lambda p: p.name)
    sizes = {p.gpus for p in gpu_pods}
    if len(sizes) > 1:
        return Outcome(gang, Code.UNRESOLVABLE, reason=(
            f"workers ask for different GPU counts ({', '.join(map(str, sorted(sizes)))}); "
            "a gang's GPU workers must be alike"))  # fmt: skip
    assignments: list[Assignment] = []
    summary = ""
    taken: dict[str, Usage] = {}  # what this gang's members take per node, for the room checks
    if gpu_pods:
        placed = _place_workers(cache, gang, gpu_pods, queue, submit_s)
        if isinstance(placed, Outcome):
            return placed
        placement, summary = placed
        for slot, pod in zip(placement.slots, gpu_pods, strict=True):
            assignments.append(Assignment(pod, slot.node, slot.gpus, slot.index))
            _add(taken, slot.node, pod)
    # beside the gang's workers: those placed now, or (a launcher made once they were Ready) before
    preferred = list(dict.fromkeys([*(a.node for a in assignments), *gang.nodes]))
    for pod in other_pods:
        node = _fit_plain(cache, pod, preferred, taken)
        if node is None:
            return Outcome(gang, Code.UNSCHEDULABLE, reason=_plain_reason(cache, pod, len(gang.pending)))
        assignments.append(Assignment(pod, node, (), None))
        _add(taken, node, pod)
    return Outcome(gang, Code.SUCCESS, tuple(assignments), summary=summary or f"{len(assignments)} pod(s) placed")


def _add(taken: dict[str, Usage], node: str, pod: PodInfo) -> None:
    usage = taken.setdefault(node, Usage())
    usage.cpu += pod.cpu
    usage.memory += pod.memory
    usage.pods += 1


def _place_workers(cache: Cache, gang: Gang, pods: Sequence[PodInfo], queue: QueuePass | None,
                   submit_s: float | None = None) -> tuple[Placement, str] | Outcome:  # fmt: skip
    first = pods[0]
    state = cache.state
    misfit = cache.misfits(first)
    masked = _masked(state, misfit)
    job = job_request(gang)
    short: dict[int, str] = {}
    for _ in range(MAX_REPLACEMENTS + 1):
        decision = place(masked, job) if queue is None else _queue_decision(replace(queue, state=masked), job, submit_s)
        if decision.placement is None or not decision.ok:
            code = decision.code
            if code is Code.UNRESOLVABLE and misfit:
                code = Code.UNSCHEDULABLE  # masked nodes may come back (uncordon, taint removed)
            return Outcome(gang, code, reason=_gpu_reason(cache, decision.reasons, misfit, short, len(pods)),
                           reservation=decision.reservation, preemption=decision.preemption)  # fmt: skip
        per_node = Counter(slot.node for slot in decision.placement.slots)
        lacking: dict[int, str] = {}
        for node, count in per_node.items():
            why = cache.room(cache.nodes[node], first.cpu, first.memory, count)
            if why is not None:
                lacking[state.positions[node]] = why
        if not lacking:
            return decision.placement, decision.summary()
        short.update(lacking)
        masked = _masked(masked, lacking)
    return Outcome(gang, Code.UNSCHEDULABLE, reason=_gpu_reason(cache, (), misfit, short, len(pods)))


def _queue_decision(queue: QueuePass, job: JobRequest, submit_s: float | None = None) -> Decision:
    """``queue.decide(job)``'s decision. For a gang that starts on whatever fits (start rule
    "now") its first step (place on the GPUs no reservation ahead holds) is taken here, so a gang
    that starts costs one ``place()`` and no copy of the state with it committed (the cache
    assumes it instead)."""
    if job.start_rule == "now":
        usable = queue.usable_state(job)
        if enough_worker_slots(usable, job):
            decision = place(usable, job)
            if decision.placement is not None:
                return decision
    return queue.decide(job, submit_s=submit_s)[0]


def _masked(state: ClusterState, positions: Iterable[int]) -> ClusterState:
    """``state`` with every free GPU of the nodes at ``positions`` marked taken."""
    slots: list[WorkerSlot] = []
    for pos in positions:
        ns = state.nodes[pos]
        if ns.n_free:
            slots.append(WorkerSlot(len(slots), ns.name, ns.free_gpus))
    return state.with_placement(Placement(MASK, tuple(slots))) if slots else state


def _counts(reasons: Mapping[int, str] | Counter[str]) -> str:
    tally = reasons if isinstance(reasons, Counter) else Counter(reasons.values())
    return ", ".join(f"{n} node(s) {why}" for why, n in tally.most_common())


def _gpu_reason(cache: Cache, reasons: Sequence[str], misfit: Mapping[int, str], short: Mapping[int, str],
                pods: int) -> str:  # fmt: skip
    total = len(cache.nodes)
    parts = [f"0/{total} nodes can take the gang's {pods} GPU worker(s) together"]
    if reasons:
        parts.append("; ".join(reasons))
    excluded = _counts(misfit)
    if excluded:
        parts.append(f"not usable: {excluded}")
    if short:
        parts.append(f"GPUs fit but room lacked: {_counts(short)}")
    return "; ".join(parts)


def _fit_plain(cache: Cache, pod: PodInfo, preferred: Sequence[str], taken: dict[str, Usage]) -> str | None:
    """A node for a member without GPUs: one of the gang's workers' nodes if it fits there,
    else the first node in cache order that does."""
    for name in [*preferred, *(n for n in cache.nodes if n not in preferred)]:
        info = cache.nodes[name]
        if static_misfit(info, pod) is not None:
            continue
        used, extra = cache.usage(name), taken.get(name) or Usage()
        if used.pods + extra.pods + 1 > info.pods:
            continue
        if pod.cpu and used.cpu + extra.cpu + pod.cpu > info.cpu:
            continue
        if pod.memory and used.memory + extra.memory + pod.memory > info.memory:
            continue
        return name
    return None


def _plain_reason(cache: Cache, pod: PodInfo, pods: int) -> str:
    why: Counter[str] = Counter()
    for info in cache.nodes.values():
        reason = static_misfit(info, pod) or cache.room(info, pod.cpu, pod.memory) or "full with this gang's pods"
        why[reason] += 1
    return f"0/{len(cache.nodes)} nodes can take pod {pod.name} of a {pods}-pod gang: {_counts(why)}"
