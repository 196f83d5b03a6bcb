"""Kubernetes' part of the queue's cycle: every member's node and GPU ids, or why a gang waits.

The gangs are decided by the queue's cycle (``ringleader.scheduler.cycle``), the one every
engine runs: the same order, reservations, backfill, start rules, preemption and team queues.
What Kubernetes adds is said in each gang's entry of the cycle's snapshot (``Members``): nodes
its pods can never use (cordoned, untolerated taints, nodeSelector, not Ready) are masked for
it; CPU, memory and pod-count room is checked on the nodes a placement chose, and a node short
of it is masked and the gang placed again; members without GPUs (the MPI launcher) then go next
to the workers if they fit there, else the gang waits.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial

from ringleader.engines.kubernetes.cache import Cache, Gang, Usage
from ringleader.engines.kubernetes.objects import PodInfo, static_misfit
from ringleader.scheduler import (
    NO_RESERVATIONS,
    ClusterState,
    Code,
    Decision,
    JobRequest,
    Placement,
    Preemption,
    ReasonCode,
    Reservation,
    Snapshot,
    Waiting,
    run_cycle,
)
from ringleader.scheduler.cycle import Nominated
from ringleader.scheduler.order import service_of_runs
from ringleader.scheduler.types import DEFAULT_RISK


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
    reason_code: str = ""  # pending: why it waits, in one word (scheduler.types.ReasonCode)

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
        risk=workers[0].risk if workers else DEFAULT_RISK,
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


def decide(cache: Cache, gang: Gang) -> Outcome:
    """``gang`` alone over the cache as it is, no gang ahead of it: every pending member placed
    at once, or why it waits. Pure over the cache: nothing is assumed or written here."""
    outside = outside_queue(cache, gang)
    if outside is not None:
        return outside
    members = Members(cache, assume=False)
    cycle = run_cycle(Snapshot(cache.state, [members.waiting(gang, 0)], config=NO_RESERVATIONS))
    return members.outcome(cycle.nominated[0])


def outside_queue(cache: Cache, gang: Gang) -> Outcome | None:
    """The outcome of a gang the queue does not decide: one whose queue its namespace may not
    use, workers that ask for different GPU counts (never placed), or only members without GPUs
    (placed beside the gang's workers); None for a gang of GPU workers, which the queue's cycle
    decides."""
    if gang.refused is not None:
        return Outcome(gang, Code.UNSCHEDULABLE, reason=gang.refused)
    sizes = {p.gpus for p in _gpu_workers(gang)}
    if len(sizes) > 1:
        return Outcome(gang, Code.UNRESOLVABLE, reason=(
            f"workers ask for different GPU counts ({', '.join(map(str, sorted(sizes)))}); "
            "a gang's GPU workers must be alike"), reason_code=ReasonCode.NEVER_FITS.value)  # fmt: skip
    if sizes:
        return None
    plain = _fit_members(cache, gang, [])
    if isinstance(plain, str):
        return Outcome(gang, Code.UNSCHEDULABLE, reason=plain, reason_code=ReasonCode.RESOURCES.value)
    return Outcome(gang, Code.SUCCESS, tuple(plain), summary=f"{len(plain)} pod(s) placed")


class Members:
    """Kubernetes' part of the queue's cycle (``scheduler/cycle.py``): each gang's nodes its pods
    can never use (cordoned, untolerated taints, nodeSelector, not Ready), masked; its check of
    a placement beyond GPUs (CPU, memory and pod room on the nodes chosen, then its members
    without GPUs beside its workers); and, with ``assume``, each gang the check lets start
    assumed in the cache at once, so the next gang's check sees its pods (as kube-scheduler
    assumes a pod before its Binding)."""

    def __init__(self, cache: Cache, assume: bool = True) -> None:
        self.cache, self.assume = cache, assume
        self.gangs: dict[str, Gang] = {}
        self.assigned: dict[str, tuple[Assignment, ...]] = {}  # gang -> its members, where it starts

    def waiting(self, gang: Gang, seq: int, submit_s: float | None = None) -> Waiting:
        self.gangs[gang.key] = gang
        misfit = self.cache.misfits(_gpu_workers(gang)[0])
        masked = frozenset(self.cache.state.nodes[pos].name for pos in misfit)
        request = job_request(gang)
        runs = self.cache.runs.get(gang.key, ())  # its ended runs: the GPU service a queue's order reads
        return Waiting(request, seq, submit_s, masked, partial(self._check, gang), len(gang.pending),
                       hold=gang.held, service=service_of_runs(request.total_gpus, runs))  # fmt: skip

    def _check(self, gang: Gang, placement: Placement) -> Mapping[str, str] | str | ClusterState | None:
        pods = _gpu_workers(gang)
        lacking = {}
        for node, count in Counter(slot.node for slot in placement.slots).items():
            why = self.cache.room(self.cache.nodes[node], pods[0].cpu, pods[0].memory, count)
            if why is not None:
                lacking[node] = why
        if lacking:
            return lacking
        workers = [Assignment(pod, slot.node, slot.gpus, slot.index)
                   for slot, pod in zip(placement.slots, pods, strict=True)]  # fmt: skip
        plain = _fit_members(self.cache, gang, workers)
        if isinstance(plain, str):
            return plain
        self.assigned[gang.key] = (*workers, *plain)
        if not self.assume:
            return None
        self.cache.assume_gang((a.pod, a.node, a.gpus) for a in self.assigned[gang.key])
        return self.cache.state  # the gang committed there: the cycle takes it, not a second commit

    def start_on(self, gang: Gang, decision: Decision) -> Outcome | None:
        """``gang`` started where ``decision`` places it, outside the cycle (a moved gang, on the
        placement held for it), if its nodes have room: assumed, as a start in the cycle; None
        where they have not."""
        assert decision.placement is not None
        self.gangs[gang.key] = gang
        checked = self._check(gang, decision.placement)
        if checked is not None and not isinstance(checked, ClusterState):
            return None
        return Outcome(gang, Code.SUCCESS, self.assigned[gang.key], summary=decision.summary())

    def outcome(self, one: Nominated) -> Outcome:
        """The gang's outcome from its decision in the cycle."""
        decision, gang = one.decision, self.gangs[one.decision.job.name]
        if decision.ok:
            return Outcome(gang, Code.SUCCESS, self.assigned[gang.key], summary=decision.summary())
        code = decision.reason_code.value if decision.reason_code is not None else ""
        if one.refused is not None:
            return Outcome(gang, Code.UNSCHEDULABLE, reason=one.refused, reason_code=ReasonCode.RESOURCES.value)
        if decision.reason_code is ReasonCode.HELD:
            namespace, _, name = gang.key.partition("/")
            return Outcome(gang, decision.code, reason=held_reason(name, namespace), reason_code=code)
        pods = _gpu_workers(gang)
        positions = self.cache.state.positions
        short = {positions[node]: why for node, why in one.lacking.items()}
        reason = _gpu_reason(self.cache, decision.reasons, self.cache.misfits(pods[0]), short, len(pods))
        return Outcome(gang, decision.code, reason=reason, reservation=decision.reservation,
                       preemption=decision.preemption, reason_code=code)  # fmt: skip


def held_reason(name: str, namespace: str) -> str:
    """Why a held gang waits, naming the job as its user names it: name and namespace."""
    return f"held: it is not started until `ringleader release {name} -n {namespace}`"


def _fit_members(cache: Cache, gang: Gang, workers: Sequence[Assignment]) -> list[Assignment] | str:
    """The members without GPUs beside the gang's ``workers`` (those placed now, or, for a
    launcher made once they were Ready, those placed before), or why one fits nowhere."""
    taken: dict[str, Usage] = {}  # what this gang's members take per node, for the room checks
    for a in workers:
        _add(taken, a.node, a.pod)
    preferred = list(dict.fromkeys([*(a.node for a in workers), *gang.nodes]))
    placed = []
    for pod in sorted((p for p in gang.pending if not p.gpus), key=lambda p: p.name):
        node = _fit_plain(cache, pod, preferred, taken)
        if node is None:
            return _plain_reason(cache, pod, len(gang.pending))
        placed.append(Assignment(pod, node, (), None))
        _add(taken, node, pod)
    return placed


def _add(taken: dict[str, Usage], node: str, pod: PodInfo) -> None:
    usage = taken.setdefault(node, Usage())
    usage.cpu += pod.cpu
    usage.memory += pod.memory
    usage.pods += 1


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
