"""Queues that several teams share: nominal GPU quotas, borrowing inside a cohort, fair share.

The shape is Kueue's ClusterQueue and cohort, the order Slurm's fair-share factor:

- A queue has a nominal quota of GPUs, for all GPU types at once (``*``) or per GPU type (the
  node's GPU model, as ``top node`` shows it). A queue without quota is unlimited: it neither
  borrows nor lends (the ``default`` queue of jobs submitted without ``--queue`` is one).
- A gang starts only within its queue's quota plus what it may borrow: the quota that the other
  queues of its cohort leave idle (nominal minus the GPUs their running gangs hold). A gang that
  cannot be stopped (``--non-preemptible``) never borrows, so a lender always gets its quota back.
- A gang that fits its queue's nominal quota may reclaim: stop gangs of the cohort's queues that
  hold more than their own quota (whole gangs, whatever their priority), as a gang with
  ``--preempt`` stops gangs of lower priority.
- Between queues, order follows each queue's fair-share factor ``F = 2^(-U/S)`` (Slurm's
  classic formula): U is the queue's share of the cluster's recent GPU-seconds (decayed with a
  half-life, Slurm's PriorityDecayHalfLife), S its weight's share of all weights. The queue
  that used least of what its weight entitles it to goes first, before priority and age, which
  order the jobs of one queue (``fair_merge``; docs/queues.md says why).

Pure: the caller gives the queues, the GPUs each queue's running gangs hold and their recent
usage; no clock is read. Where usage is kept as one decayed number per queue, updated from the
GPU spans of its gangs (``KeptUsage``, ``usage_at``: the Kubernetes scheduler's), each span is
counted from the queue's last update only, so rewriting it never counts a second twice.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol, TypeVar

from ringleader.scheduler.order import QueueOrder
from ringleader.scheduler.types import ClusterState, JobRequest, NodeState, Placement, RunningGang

ANY_TYPE = "*"  # a quota for every GPU type at once
DEFAULT_QUEUE = "default"  # the queue of jobs submitted without one: no quota, weight 1
# Slurm's PriorityDecayHalfLife default: usage a week old counts half.
DECAY_HALF_LIFE_S = 7 * 24 * 3600.0
MAX_GPUS = 1 << 24  # the most a quota may name: far beyond any cluster, small for the arithmetic
T = TypeVar("T")


@dataclass(frozen=True)
class TeamQueue:
    """A team's queue: ``quota`` is (GPU type or ``*``, nominal GPUs) pairs with the types in
    lower case (empty: unlimited); ``weight`` its fair-share weight; ``cohort`` the queues it
    borrows from and lends to (None: none); ``namespaces`` the Kubernetes namespaces whose jobs
    may use it (empty: every one; as Kueue's LocalQueues tie a ClusterQueue to namespaces);
    ``order`` how it orders its jobs."""

    name: str
    quota: tuple[tuple[str, int], ...] = ()
    weight: float = 1.0
    cohort: str | None = None
    namespaces: tuple[str, ...] = ()
    order: QueueOrder | None = None  # how it orders its jobs (None: the queue config's default)

    def admits(self, namespace: str) -> bool:
        return not self.namespaces or namespace in self.namespaces

    @property
    def limited(self) -> bool:
        return bool(self.quota)

    def key_of(self, gpu_type: str) -> str:
        """The quota the GPUs of ``gpu_type`` count against: their type's, else ``*``'s, else
        their own type's nominal of 0 (the queue may only borrow them)."""
        wanted = gpu_type.lower()
        keys = dict(self.quota)
        if wanted in keys:
            return wanted
        return ANY_TYPE if ANY_TYPE in keys else wanted

    def nominal(self, key: str) -> int:
        return dict(self.quota).get(key, 0)

    def describe_quota(self) -> str:
        """ "8 GPUs", "v100=8, a100=4", "unlimited" """
        if not self.quota:
            return "unlimited"
        if len(self.quota) == 1 and self.quota[0][0] == ANY_TYPE:
            return f"{self.quota[0][1]} GPUs"
        return ", ".join(f"{key}={n}" for key, n in self.quota)


def gpu_type(node: NodeState) -> str:
    return node.spec.topology.gpu_model.lower() or "gpu"


class InQueue(Protocol):
    """Anything submitted to a team queue: a job request, a trace's job."""

    @property
    def queue(self) -> str | None: ...


def queue_of(job: InQueue) -> str:
    return job.queue or DEFAULT_QUEUE


@dataclass(frozen=True)
class QuotaCheck:
    """Whether a gang's GPUs fit its queue: ``ok``; ``borrowed`` GPUs over its quota after it
    starts (taken from the cohort's idle quota); ``shortfall`` GPUs of its own quota that the
    cohort lent out and a reclaim must take back first; ``reason`` why not, or what it borrows."""

    ok: bool
    borrowed: int = 0
    shortfall: int = 0
    reason: str | None = None
    # more than the queue may ever hold (Kueue's "request > maximum capacity"): it never starts there
    over_maximum: bool = False


GangUse = tuple[str, Mapping[str, int]]  # a running gang's queue and its GPUs per quota key


@dataclass(frozen=True)
class Teams:
    """The queues of one scheduling pass and the GPUs their running gangs hold, per quota key.

    ``gangs`` holds each running gang's queue and GPUs (those started earlier in the pass too,
    ``with_started``); gangs being stopped are left out: their quota is back (Kueue releases a
    preempted workload's quota at once) though their GPUs free only once they have stopped."""

    queues: Mapping[str, TeamQueue]
    gangs: Mapping[str, GangUse] = field(default_factory=dict)
    shares: Mapping[str, float] = field(default_factory=dict)  # queue -> fair-share factor in (0, 1]
    # queue -> the GPU counts of its gangs not decided yet in this pass, smallest first
    # (``with_waiting``): quota a queue's own waiting gangs could start on is not idle, so it is
    # not lent
    waiting: Mapping[str, tuple[int, ...]] = field(default_factory=dict)

    @staticmethod
    def of(
        queues: Iterable[TeamQueue],
        state: ClusterState,
        gang_queue: Mapping[str, str],
        usage: Mapping[str, float] | None = None,
    ) -> Teams:
        """The queues with the GPUs each holds in ``state`` (owners named in ``gang_queue``;
        others, such as reserved, unusable or stopping gangs' GPUs, count for no queue) and
        fair-share factors from ``usage`` (queue -> recent GPU-seconds)."""
        by_name = {DEFAULT_QUEUE: TeamQueue(DEFAULT_QUEUE)} | {q.name: q for q in queues}
        gangs: dict[str, tuple[str, dict[str, int]]] = {}
        for ns in state.nodes:
            for _, owner in ns.allocated:
                name = gang_queue.get(owner)
                if name is None:
                    continue
                queue = by_name.get(name) or TeamQueue(name)
                per_key = gangs.setdefault(owner, (name, {}))[1]
                key = queue.key_of(gpu_type(ns))
                per_key[key] = per_key.get(key, 0) + 1
        return Teams(by_name, gangs, fair_share(by_name.values(), usage or {}))

    def queue(self, job: JobRequest) -> TeamQueue | None:
        """The limited queue ``job`` counts against (None: unlimited, or not a queue known here)."""
        queue = self.queues.get(queue_of(job))
        return queue if queue is not None and queue.limited else None

    @cached_property
    def use(self) -> dict[str, dict[str, int]]:
        """Queue -> quota key -> GPUs its running gangs hold."""
        out: dict[str, dict[str, int]] = {}
        for name, per_key in self.gangs.values():
            totals = out.setdefault(name, {})
            for key, count in per_key.items():
                totals[key] = totals.get(key, 0) + count
        return out

    def held(self, queue: str, key: str) -> int:
        return self.use.get(queue, {}).get(key, 0)

    def borrowed(self, queue: TeamQueue) -> dict[str, int]:
        """GPUs ``queue`` holds over its quota, per key (those it borrows)."""
        out = {}
        for key, count in self.use.get(queue.name, {}).items():
            over = count - queue.nominal(key)
            if over > 0:
                out[key] = over
        return out

    def cohort(self, queue: TeamQueue) -> list[TeamQueue]:
        """The limited queues that share quota with ``queue`` (itself included)."""
        if queue.cohort is None:
            return [queue]
        return [q for q in self.queues.values() if q.cohort == queue.cohort and q.limited]

    def room(self, queue: TeamQueue, key: str) -> int:
        """The cohort's quota under ``key`` that no queue of it holds."""
        members = self.cohort(queue)
        return sum(q.nominal(key) for q in members) - sum(self.held(q.name, key) for q in members)

    def promised(self, queue: TeamQueue, key: str) -> int:
        """The unheld quota under ``key`` of the other queues of ``queue``'s cohort that their
        own waiting gangs keep: not idle, so not lent (else a lender's gang, once it has
        reclaimed its quota, could lose it again to the gang it stopped). A queue keeps what its
        gangs that fit it could start on now, smallest first; a queue below its weight's share of
        the GPUs the cohort holds keeps it also for its gangs bigger than that, which start once
        its own running gangs end. A queue at or above its share lends that part: else, where
        every queue waits with a gang bigger than its unheld quota, each would keep its quota
        from the others' and the GPUs would stand idle until gangs end."""
        members = self.cohort(queue)
        weights = sum(q.weight for q in members)
        cohort_held = sum(self.held(q.name, key) for q in members)
        kept = 0
        for other in members:
            if other.name == queue.name:
                continue
            held = self.held(other.name, key)
            idle = max(other.nominal(key) - held, 0)
            sizes = self.waiting.get(other.name, ())
            behind = weights > 0 and held * weights < other.weight * cohort_held
            kept += min(sum(sizes), idle) if behind else self._startable(sizes, idle)
        return kept

    @staticmethod
    def _startable(sizes: Sequence[int], idle: int) -> int:
        """The GPUs of the gangs of ``sizes`` (smallest first) that start on ``idle`` GPUs."""
        used = 0
        for size in sizes:
            if used + size > idle:
                break
            used += size
        return used

    def with_waiting(self, jobs: Iterable[JobRequest]) -> Teams:
        """The same teams with ``jobs`` (the pass's pending gangs) waiting in their queues; a gang
        bigger than its queue's quota could only borrow, so it keeps none of it from others."""
        waiting: dict[str, list[int]] = {}
        for job in jobs:
            queue = self.queue(job)
            if queue is not None and 0 < job.total_gpus <= max(n for _, n in queue.quota):
                waiting.setdefault(queue.name, []).append(job.total_gpus)
        return Teams(self.queues, self.gangs, self.shares, {name: tuple(sorted(s)) for name, s in waiting.items()})

    def demand_of(self, job: JobRequest, state: ClusterState, placement: Placement) -> dict[str, int]:
        """The GPUs of ``placement`` per quota key of ``job``'s queue."""
        queue = self.queues.get(queue_of(job)) or TeamQueue(queue_of(job))
        out: dict[str, int] = {}
        for slot in placement.slots:
            key = queue.key_of(gpu_type(state.node(slot.node)))
            out[key] = out.get(key, 0) + len(slot.gpus)
        return out

    def check(self, job: JobRequest, demand: Mapping[str, int]) -> QuotaCheck:
        """Whether ``demand`` (quota key -> GPUs) fits ``job``'s queue: within its own quota as
        long as the cohort has not lent it out (else a reclaim's ``shortfall``), beyond it only
        for a preemptible gang and only from the cohort's quota no queue holds."""
        queue = self.queue(job)
        if queue is None:
            return QuotaCheck(True)
        borrowed = shortfall = 0
        for key, count in demand.items():
            most = self.maximum(job, queue, key)
            if count > most:
                return QuotaCheck(False, reason=self._over_maximum(job, queue, key, count, most), over_maximum=True)
            held, nominal, room = self.held(queue.name, key), queue.nominal(key), self.room(queue, key)
            over = held + count - nominal
            if over <= 0:
                shortfall = max(shortfall, count - room)
                continue
            own_idle = max(nominal - held, 0)
            lendable = max(room - own_idle - self.promised(queue, key), 0)
            if not job.preemptible or count - own_idle > lendable:  # a borrower reclaims nothing
                return QuotaCheck(False, reason=self._full(job, queue, key, count, lendable))
            borrowed += min(over, count)
        if shortfall > 0:
            return QuotaCheck(False, shortfall=shortfall, reason=self._lent(queue, shortfall))
        reason = None
        if borrowed:
            reason = (f"queue {queue.name} borrows {borrowed} GPU(s) of cohort {queue.cohort}'s idle quota "
                      "(reclaimed when their queues need them)")  # fmt: skip
        return QuotaCheck(True, borrowed, reason=reason)

    def maximum(self, job: JobRequest, queue: TeamQueue, key: str) -> int:
        """The most GPUs under ``key`` that ``job`` could ever hold in ``queue``: its nominal
        quota, plus the other cohort queues' nominal quota where ``job`` may borrow (Kueue's
        maximum capacity: nominal plus what the cohort can lend)."""
        if not job.preemptible:
            return queue.nominal(key)
        return sum(q.nominal(key) for q in self.cohort(queue))

    def _over_maximum(self, job: JobRequest, queue: TeamQueue, key: str, count: int, most: int) -> str:
        gpus = "GPUs" if key == ANY_TYPE else f"{key} GPUs"
        if job.preemptible and queue.cohort is not None:
            why = f"its quota of {queue.nominal(key)} and all cohort {queue.cohort} could lend"
        elif queue.cohort is not None:
            why = f"its quota of {queue.nominal(key)}: a --non-preemptible job does not borrow"
        else:
            why = f"its quota of {queue.nominal(key)}, in no cohort to borrow from"
        return (f"the job asks for {count} {gpus} and queue {queue.name} can never hold more than {most} ({why}): "
                f"it never starts there; delete it and submit it with at most {most} GPUs or to another queue, or "
                f"raise the quota (`ringleader queue create {queue.name} --gpus N --overwrite`)")

    def borrow_share(self, job: JobRequest) -> float:
        """GPUs over its queue's quota per weight that ``job`` would leave its queue holding
        (the least over any key of it); 0 for a gang that fits its queue's quota."""
        queue = self.queue(job)
        if queue is None:
            return 0.0
        over = min(self.held(queue.name, key) + job.total_gpus - nominal for key, nominal in queue.quota)
        return max(over, 0) / queue.weight

    def reclaim(self, job: JobRequest, shortfall: int, may_stop: Mapping[str, RunningGang]) -> tuple[RunningGang, ...]:
        """Whole gangs of queues in ``job``'s cohort that hold more than their quota, to stop
        until ``shortfall`` GPUs of ``job``'s own quota are back: lowest priority first, then the
        biggest, and only while their queue still borrows (Kueue's reclaim within a cohort).
        Only a gang within its queue's quota reclaims (a borrower that stopped borrowers could
        be stopped back: preemptions without end). Empty when stopping all of them would not
        be enough."""
        queue = self.queue(job)
        if queue is None:
            return ()
        over = {q.name: sum(self.borrowed(q).values()) for q in self.cohort(queue) if q.name != queue.name}
        candidates = sorted(
            (g for name, g in may_stop.items() if g.preemptible and self.gangs.get(name, ("", {}))[0] in over),
            key=lambda g: (g.priority, -sum(self.gangs[g.name][1].values()), g.name),
        )
        chosen: list[RunningGang] = []
        back = 0
        for gang in candidates:
            owner, per_key = self.gangs[gang.name]
            gpus = sum(per_key.values())
            if over[owner] <= 0:
                continue
            chosen.append(gang)
            over[owner] -= gpus
            back += gpus
            if back >= shortfall:
                return tuple(chosen)
        return ()

    def _lent(self, queue: TeamQueue, shortfall: int) -> str:
        over = {q.name: sum(self.borrowed(q).values()) for q in self.cohort(queue)}
        lenders = ", ".join(f"{name} ({count})" for name, count in over.items() if count)
        return (f"queue {queue.name} is within its quota of {queue.describe_quota()}, but cohort {queue.cohort} has "
                f"lent {shortfall} of them to queues over quota: {lenders or 'none'}")  # fmt: skip

    def _full(self, job: JobRequest, queue: TeamQueue, key: str, count: int, lendable: int) -> str:
        text = self._holds(queue, [key])
        if not job.preemptible:
            return f"{text}; it needs {count} more, and a --non-preemptible job does not borrow"
        if queue.cohort is None:
            return f"{text}; it needs {count} more and the queue is in no cohort to borrow from"
        return f"{text}; it needs {count} more, and cohort {queue.cohort} has {lendable} idle to lend"

    def describe_use(self, job: JobRequest) -> str | None:
        """ "queue team-a holds 6 of its quota of 8 GPUs (2 borrowed)" for a pending reason."""
        queue = self.queue(job)
        return None if queue is None else self._holds(queue, [key for key, _ in queue.quota])

    def _holds(self, queue: TeamQueue, keys: Sequence[str]) -> str:
        """ "queue team-a holds 6 of its quota of 8 GPUs (2 borrowed)", for ``keys``."""
        parts = [f"{self.held(queue.name, key)} of its quota of {queue.nominal(key)} "
                 + ("GPUs" if key == ANY_TYPE else f"{key} GPUs") for key in keys]  # fmt: skip
        lent = sum(self.borrowed(queue).values())
        return f"queue {queue.name} holds " + ", ".join(parts) + (f" ({lent} borrowed)" if lent else "")

    def with_started(self, job: JobRequest, state: ClusterState, placement: Placement) -> Teams:
        """The use after ``job`` starts on ``placement``."""
        gangs = {**self.gangs, job.name: (queue_of(job), self.demand_of(job, state, placement))}
        waiting = dict(self.waiting)
        sizes = list(waiting.get(queue_of(job), ()))
        if job.total_gpus in sizes:  # decided: no longer waiting
            sizes.remove(job.total_gpus)
            waiting[queue_of(job)] = tuple(sizes)
        return Teams(self.queues, gangs, self.shares, waiting)

    def without(self, gangs: Iterable[str]) -> Teams:
        """The use once ``gangs`` are stopped: their quota is back at once."""
        gone = set(gangs)
        return Teams(self.queues, {g: u for g, u in self.gangs.items() if g not in gone}, self.shares, self.waiting)


def fair_merge(
    queued: Mapping[str, Sequence[T]],
    teams: Teams,
    gpus_of: Callable[[T], int],
    borrow_of: Callable[[T], float],
    tie_of: Callable[[T], tuple[float, ...]],
    held_first: bool = False,
) -> list[T]:
    """The waiting jobs of every queue in one order, each queue's jobs in their own order
    (``queued``: queue -> its jobs, in its order): next is always the head of one queue, as
    Kueue's scheduler picks among its ClusterQueues' heads. A gang within its queue's quota goes
    before one that would borrow (``borrow_of``: GPUs over quota per weight it would leave its
    queue holding); then the queue with the highest fair-share factor (``shares``: Slurm's
    ``2^(-U/S)``, it used least of its weight's share recently); then, between queues of equal
    factor (none used anything yet), the one holding the fewest GPUs per weight, counting the
    gangs ordered before it in this cycle as held; then ``tie_of`` (priority, submit order).

    Priority and age order the jobs of one queue, never one queue's jobs before another's: as
    much age or priority as the factor weighs would let a queue's old jobs pass a queue that is
    behind its share, and the weights would not be delivered.

    ``held_first`` (where gangs may be stopped for fair share, ``scheduler/reorder.py``): before
    the factor, a queue of a cohort that holds more GPUs per weight than its cohort's queues
    together goes after those that hold less. Preemption for fair share reads the GPUs held
    now; the factor, usage over days. Where the two disagree, a queue behind on usage took back
    by the order the GPUs that a queue behind on holdings had stopped its gangs to get, and the
    two stopped each other's gangs in turn."""
    holds = {name: float(sum(teams.use.get(name, {}).values())) for name in queued}
    cohorts: dict[str, list[str]] = {}
    for queue in teams.queues.values():
        if held_first and queue.cohort is not None and queue.limited:
            cohorts.setdefault(queue.cohort, []).append(queue.name)
    cohort_of = {name: teams.queues[name].cohort for members in cohorts.values() for name in members}

    def weight_of(name: str) -> float:
        queue = teams.queues.get(name)
        return queue.weight if queue is not None and queue.weight > 0 else 1.0

    weight = {name: weight_of(name) for name in {*queued, *cohort_of}}
    cohort_weight = {cohort: sum(weight[m] for m in members) for cohort, members in cohorts.items()}
    share = {name: teams.shares.get(name, 1.0) for name in queued}

    def held_of(name: str) -> float:
        return holds[name] if name in holds else float(sum(teams.use.get(name, {}).values()))

    def above(name: str) -> float:
        cohort = cohort_of.get(name)
        if cohort is None:
            return 0.0
        return float(held_of(name) * cohort_weight[cohort] > weight[name] * sum(held_of(m) for m in cohorts[cohort]))

    # a queue's place moves with every queue's holdings (``above``): the heads are compared
    # afresh at each step, a few queues' heads; what a head says of itself (borrow, tie) is
    # read once, when it becomes its queue's head
    def head(name: str, index: int) -> tuple[int, float, tuple[float, ...]]:
        job = queued[name][index]
        return index, borrow_of(job), tie_of(job)

    at = {name: head(name, 0) for name, jobs in queued.items() if jobs}
    out: list[T] = []
    while at:
        _, name = min(((borrow, above(n), -share[n], holds[n] / weight[n], *tie), n)
                      for n, (_, borrow, tie) in at.items())  # fmt: skip
        index = at[name][0]
        job = queued[name][index]
        out.append(job)
        holds[name] += gpus_of(job)
        if index + 1 < len(queued[name]):
            at[name] = head(name, index + 1)
        else:
            del at[name]
    return out


def fair_share(queues: Iterable[TeamQueue], usage: Mapping[str, float]) -> dict[str, float]:
    """Slurm's fair-share factor per queue, ``2^(-U/S)``: U its share of all recent usage, S its
    weight's share of all weights (queues of weight 0 get 0). 1 for every queue while nothing
    has been used."""
    queues = list(queues)
    total_weight = sum(q.weight for q in queues)
    total_use = sum(max(usage.get(q.name, 0.0), 0.0) for q in queues)
    out = {}
    for queue in queues:
        if queue.weight <= 0 or total_weight <= 0:
            out[queue.name] = 0.0
        elif total_use <= 0:
            out[queue.name] = 1.0
        else:
            used = max(usage.get(queue.name, 0.0), 0.0) / total_use
            out[queue.name] = 2.0 ** (-used / (queue.weight / total_weight))
    return out


def decayed(gpu_s: float, since_s: float, now: float, half_life_s: float = DECAY_HALF_LIFE_S) -> float:
    """``gpu_s`` GPU-seconds counted at ``since_s``, as they count at ``now``."""
    return gpu_s * 2.0 ** (-max(now - since_s, 0.0) / half_life_s)


def run_usage(gpus: int, start_s: float, end_s: float, now: float, half_life_s: float = DECAY_HALF_LIFE_S) -> float:
    """The decayed GPU-seconds at ``now`` of ``gpus`` GPUs held from ``start_s`` to ``end_s``:
    each second counts ``2^(-age/half_life)``, integrated exactly."""
    end_s = min(end_s, now)
    if end_s <= start_s:
        return 0.0
    rate = math.log(2.0) / half_life_s
    return gpus * math.exp(-rate * (now - end_s)) * -math.expm1(-rate * (end_s - start_s)) / rate


@dataclass(frozen=True)
class KeptUsage:
    """A queue's usage as kept: ``gpu_s`` GPU-seconds decayed to ``as_of``, which counts the
    queue's runs up to ``as_of`` and nothing after it."""

    gpu_s: float
    as_of: float


@dataclass(frozen=True)
class GpuSpan:
    """``gpus`` GPUs of ``queue`` held from ``start_s`` to ``end_s`` (now, for one still held)."""

    queue: str
    gpus: int
    start_s: float
    end_s: float


def usage_at(kept: Mapping[str, KeptUsage], spans: Iterable[GpuSpan], now: float,
             half_life_s: float = DECAY_HALF_LIFE_S) -> dict[str, KeptUsage]:  # fmt: skip
    """Each queue's usage as of ``now``: what was kept, decayed to ``now``, plus each span's part
    after its queue's ``as_of`` (the part before was counted when that was kept; a queue kept
    nowhere counts its spans whole). Kept again, it covers everything up to ``now``: a span
    seen again later adds only what follows. ``as_of`` never moves back (a clock behind the
    last writer's counts nothing until it passes it)."""
    out = {q: KeptUsage(decayed(k.gpu_s, k.as_of, now, half_life_s), max(k.as_of, now)) for q, k in kept.items()}
    for span in spans:
        since = kept[span.queue].as_of if span.queue in kept else span.start_s
        added = run_usage(span.gpus, max(span.start_s, since), span.end_s, now, half_life_s)
        before = out.get(span.queue, KeptUsage(0.0, now))
        out[span.queue] = KeptUsage(before.gpu_s + added, before.as_of)
    return out
