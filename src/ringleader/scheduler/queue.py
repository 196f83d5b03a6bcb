"""Queue order and one scheduling pass: gangs commit all or nothing, with Slurm-style backfill.

Order is effective priority (base priority plus an age term), then submit order. The first
``reservation_depth`` gangs in that order that cannot start get a *reservation*: the GPUs
``place`` would give them on the cluster as it will be once running jobs end in order of their
expected ends. A job behind them may start only where it delays no reservation: on GPUs no
reservation holds, or on reserved GPUs when its own time limit ends before the reservation's
start (backfill). Times are inputs (``now``, running jobs' expected ends, submit times): the
scheduler reads no clock.

A running job without a known end is planned as running until every job with a known end has
ended; a gang that only fits once such a job ends gets a reservation with an unknown start, and
its GPUs that are free now are still held, so a stream of small jobs cannot take them.

A gang's start rule (``types.StartRule``) may make it wait although it fits the free GPUs: rule
``finish`` waits when a placement freeing later finishes its work sooner, rule ``best`` waits for
one as fast as its best (``weigh_start``). A gang that fits now but waits holds the later
placement as a reservation whatever the reservation depth: a wait nobody holds for would be undone
by the next gang that fits.

Rule ``finish`` counts the jobs behind the gang, not only its own finish (``types.QueueCost``):
the sum of completion times is what a queue's mean JCT measures, and a degraded gang changes more
of them than its own. Starting now gains the gang G seconds (the later start's finish minus the
start now's); it holds its g GPUs H seconds longer than the later placement would (its run now
minus its run there). Under load the jobs waiting behind it start as the work ahead of them drains
from the cluster's C GPUs, so each of the M jobs behind it in queue order starts about g * H / C
later: it starts now only when G >= M * g * H / C. The reference study's case, 4 VGG16 workers
spread 2 + 2 at ~200 images/s instead of ~990 on one node, an hour's work: H is ~4 h, so on
2 x DGX-1V (C = 16) each job behind waits ~1 h more, and a gang that would finish 10 min sooner
spread waits for the node when one job waits behind it. The form is the drain rate of a busy
queue, not a plan of who takes which GPU: it needs no second placement per waiting job, and it
over-counts where the jobs behind would start on other GPUs anyway (it leans to waiting, and
the later start is held as a reservation, so nothing else loses the GPUs it waits for). With
nobody behind (M = 0) the rule is the one that weighed its own finish only. The later start
it weighs is the one of least finish plus that delay (``QueuePass.queue_score``), found among the
starts that could score below starting now: one that finishes the gang itself later than now
may still finish the queue sooner, on a faster placement.

A gang that would wait may instead preempt running gangs of lower priority (``plan_preemption``,
``scheduler/preempt.py``): the decision names its victims, and it holds the GPUs they free as
its reservation until they have stopped.

With team queues (``scheduler/teams.py``) a gang starts only within its queue's quota and what
it may borrow from its cohort; a gang over quota pends with the queue's numbers and holds
nothing. A gang within its queue's own quota may reclaim: stop gangs of queues that borrow, as a
preemption. Between queues, fair share orders the jobs (``teams.fair_merge``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import NamedTuple

from ringleader.scheduler.framework import get_policy, place
from ringleader.scheduler.gpuset import bits
from ringleader.scheduler.order import (
    DEFAULT_ORDERS,
    NO_SERVICE,
    OrderConfig,
    QueueOrder,
    Service,
    expected_free,
    order_key,
)
from ringleader.scheduler.policies.throughput import Estimator, RangedEstimator, current_estimator
from ringleader.scheduler.preempt import gpus_held, plan_preemption
from ringleader.scheduler.reorder import DEFAULT_REORDER, ReorderConfig, candidates, job_run_s, may_reorder, pays
from ringleader.scheduler.teams import QuotaCheck, Teams, fair_merge, gpu_type, queue_of
from ringleader.scheduler.types import (
    HELD,
    UNUSABLE,
    AtRisk,
    ClusterState,
    Code,
    Decision,
    JobRequest,
    NodeState,
    Option,
    Placement,
    Preemption,
    QueueCost,
    ReasonCode,
    Reservation,
    RunningGang,
    StartRule,
    WhenChoice,
    WorkerSlot,
    approx_duration,
    as_good,
    finish_of,
)

# Later starts a start rule looks at per decision (each costs a ``place`` on the future cluster).
MAX_OPTIONS = 16


@dataclass(frozen=True)
class QueuedJob:
    job: JobRequest
    seq: int  # submit order (FIFO tie-break)
    submit_s: float | None = None  # submit time on the caller's clock; None: no age
    # what orders beyond FIFO read (attained service, remaining time); by keyword, so the
    # positional fields of a host's subclass (cycle.Waiting) keep their places
    service: Service = field(default=NO_SERVICE, kw_only=True)


@dataclass(frozen=True)
class BackfillConfig:
    """How far reservations reach and how fast waiting raises priority.

    Age follows Slurm's multifactor age factor: a job that has waited ``wait`` seconds ranks
    with ``priority + age_weight * min(wait, max_age_s) / max_age_s``, so a gang that waits long
    enough overtakes any stream of jobs up to ``age_weight`` priority points above it.
    """

    reservation_depth: int = 2  # how many gangs that cannot start get a reservation
    age_weight: float = 100.0
    max_age_s: float = 24 * 3600.0
    # The order of a queue that names none (``scheduler/order.py``), and the orders' knobs.
    order: QueueOrder = QueueOrder.FIFO
    orders: OrderConfig = DEFAULT_ORDERS
    # Preemption for order and for fair share (``scheduler/reorder.py``).
    reorder: ReorderConfig = DEFAULT_REORDER

    def __post_init__(self) -> None:
        if self.reservation_depth < 0:
            raise ValueError(f"reservation_depth must be >= 0, got {self.reservation_depth}")
        if self.age_weight < 0 or not self.max_age_s > 0:
            raise ValueError(f"need age_weight >= 0 and max_age_s > 0, got {self.age_weight}, {self.max_age_s}")


# The queue before reservations: no reservation, no age; any job that fits starts.
NO_RESERVATIONS = BackfillConfig(reservation_depth=0, age_weight=0.0)


def effective_priority(queued: QueuedJob, now: float | None, config: BackfillConfig) -> float:
    """Priority, plus the age term."""
    return aged_priority(now, config)(queued)


def aged_priority(now: float | None, config: BackfillConfig) -> Callable[[QueuedJob], float]:
    """``effective_priority`` at ``now`` as a function of the job alone: the clock and weights
    read once for a whole queue (FIFO sorts every waiting job by it at every pass)."""
    weight, cap = config.age_weight, config.max_age_s
    if now is None or weight == 0:
        return lambda queued: float(queued.job.priority)

    def aged(queued: QueuedJob) -> float:
        if queued.submit_s is None:
            return float(queued.job.priority)
        wait = now - queued.submit_s  # kept within [0, cap] by comparisons: min and max are calls
        if wait < 0.0:
            wait = 0.0
        elif wait > cap:
            wait = cap
        return queued.job.priority + weight * wait / cap

    return aged


def queue_order(
    jobs: Sequence[QueuedJob],
    now: float | None = None,
    config: BackfillConfig = BackfillConfig(),
    teams: Teams | None = None,
) -> list[QueuedJob]:
    """Effective priority, then each queue's order (``scheduler/order.py``; FIFO: submit order).
    With team queues, each queue's jobs in that order, merged by fair share (``teams.fair_merge``,
    Kueue's fair sharing): gangs that fit their queue's own quota first, then those that would
    borrow, the one whose queue would borrow least per weight first (a gang whose quota was taken
    back never borrows it again before the gang it was taken back for); among them the head of
    the queue holding the fewest GPUs per weight."""

    def key(queued: QueuedJob) -> tuple[float, float, int, float, int]:
        order, ranked = ranked_priority(queued, now, config, teams)
        borrow = teams.borrow_share(queued.job) if teams is not None else 0.0
        # FIFO's key reads no service: not building one for every waiting job at every pass
        service = queued.service if order is QueueOrder.FIFO else order_service(queued)
        return (borrow, *order_key(order, ranked, service, now, config.orders), queued.seq)

    if teams is None and config.order is QueueOrder.FIFO:  # ``key``'s order, less what one FIFO queue never reads
        aged = aged_priority(now, config)
        return sorted(jobs, key=lambda q: (-aged(q), q.seq))
    if teams is None:
        return sorted(jobs, key=key)
    keys = {id(q): key(q) for q in jobs}
    by_queue: dict[str, list[QueuedJob]] = {}
    for queued in sorted(jobs, key=lambda q: keys[id(q)]):
        by_queue.setdefault(queue_of(queued.job), []).append(queued)
    return fair_merge(by_queue, teams, lambda q: q.job.total_gpus, lambda q: keys[id(q)][0],
                      lambda q: (keys[id(q)][1], keys[id(q)][-1]), config.reorder.for_fair_share)  # fmt: skip


def ranked_priority(
    queued: QueuedJob, now: float | None, config: BackfillConfig, teams: Teams | None = None
) -> tuple[QueueOrder, float]:
    """The order of ``queued``'s queue and the priority it ranks with there (`queue describe`'s
    effective priority): FIFO ranks with age; the other orders keep the old from starving by
    their own rule."""
    order = config.order
    if teams is not None:
        team = teams.queues.get(queue_of(queued.job))
        order = team.order if team is not None and team.order is not None else order
    return order, effective_priority(queued, now if order is QueueOrder.FIFO else None, config)


def order_service(queued: QueuedJob) -> Service:
    """The job's service, with its remaining time predicted from its work or its time limit
    where its host said none, and its time in the queue counted from its submit."""
    service = queued.service
    remaining, since = service.remaining_s, service.queued_since_s
    if remaining is None:
        job = queued.job
        remaining = job.work_s if job.work_s is not None else job.time_limit_s
    if since is None:
        since = queued.submit_s
    if remaining == service.remaining_s and since == service.queued_since_s:
        return service
    # built directly, not by dataclasses.replace: the queue asks this of every waiting job in
    # every pass, and replace's generic copy was a third of a simulated pass's time
    return Service(service.attained_gpu_s, since, service.last_run_s, remaining)


@dataclass(frozen=True)
class QueuePass:
    """The state of one scheduling pass: the cluster with the jobs started so far, the expected
    ends of running jobs, and the reservations made so far. ``decide`` tries one job and returns
    its decision and the next state; jobs must be decided in ``queue_order``.
    """

    state: ClusterState
    now: float | None = None
    expected_ends: Mapping[str, float] = field(default_factory=dict)  # running job -> end
    config: BackfillConfig = BackfillConfig()
    reservations: tuple[Reservation, ...] = ()
    # images/s of a placement (None: the estimator the model installs, else link bandwidth)
    estimate: Estimator | None = field(default=None, compare=False)
    # gang shape -> images/s on its best placement; shared by the passes that copy this one
    ideal: dict[tuple[object, ...], float | None] = field(default_factory=dict, compare=False, repr=False)
    # Running gangs that may be preempted, by name (those not named never are; a gang already
    # being stopped is left out, with its stop's end as its expected end), and how long a
    # victim takes to stop (its grace: SIGTERM, then SIGKILL).
    running: Mapping[str, RunningGang] = field(default_factory=dict)
    preempt_delay_s: float = 0.0
    # Team queues, their quotas and the GPUs they hold (None: one queue, no quota).
    teams: Teams | None = None
    # The waiting jobs by name: preemption for order compares what the orders know of one
    # (``order_service``, asked only of the job being decided) with the running gangs'
    # (``scheduler/reorder.py``).
    waiting: Mapping[str, QueuedJob] = field(default_factory=dict)
    # Waiting job -> how many jobs with GPUs wait behind it in queue order (``behind_in_line``):
    # what a degraded start delays (``QueueCost``); a job not named has nobody behind it.
    behind: Mapping[str, int] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if self.now is None and self.expected_ends:
            raise ValueError("expected_ends need now (the same clock)")

    @cached_property
    def lowest_running_priority(self) -> int | None:
        """The lowest priority among the gangs that may be preempted (None: there are none):
        asked of every waiting job that cannot fit, so kept once per pass."""
        return min((g.priority for g in self.running.values()), default=None)

    def end_of(self, job: JobRequest) -> float | None:
        """When ``job`` would end if it started now (None: no time limit or no clock)."""
        if self.now is None or job.time_limit_s is None:
            return None
        return self.now + job.time_limit_s

    def blocking(self, job: JobRequest) -> tuple[Reservation, ...]:
        """Reservations ``job`` must leave alone: all but those that start after it would end."""
        return tuple(r for r, blocks in zip(self.reservations, self._blocks(job), strict=True) if blocks)

    def _blocks(self, job: JobRequest) -> tuple[bool, ...]:
        """For each reservation, whether ``job`` must leave it alone (``blocking``)."""
        end = self.end_of(job)
        return tuple(end is None or r.start_s is None or end > r.start_s for r in self.reservations)

    def usable_state(self, job: JobRequest) -> ClusterState:
        """``state`` with the GPUs that ``job`` may not take marked as held (kept per set of
        reservations: a busy pass asks it of every waiting job, and most leave all alone)."""
        if not self.reservations:
            return self.state
        key = self._blocks(job)
        usable = self._usable.get(key)
        if usable is None:
            usable = self.state
            for reservation in self.blocking(job):
                free_part = _free_part(usable, reservation.placement)
                if free_part is not None:
                    usable = usable.with_placement(free_part)
            self._usable[key] = usable
        return usable

    @cached_property
    def _usable(self) -> dict[tuple[bool, ...], ClusterState]:
        return {}

    def decide(
        self, job: JobRequest, policy: str | None = None, explain: bool = True, submit_s: float | None = None,
        commit: bool = True,
    ) -> tuple[Decision, QueuePass]:
        """Start ``job`` if it fits without delaying a reservation, unless its start rule finds
        a later start on better GPUs (``weigh_start``); else pend it, with a reservation while
        fewer than ``reservation_depth`` exist. Without ``explain`` a pending decision carries
        only its code and reservation (the simulator needs no reasons). ``submit_s``: when the
        job was submitted (its longest wait counts from then; None: from now). Without
        ``commit`` a job that starts is left to the caller to commit (``started``)."""
        over_quota, job = self._quota_limits(job)
        if over_quota is not None:
            reclaim = self._reclaim(job, policy, over_quota)
            # at the head of the queue: stopping its own queue's gangs frees its quota; where its
            # quota is lent out and the reclaim found too few borrowers, or where it must borrow
            # and the cohort has too little idle quota to lend, fair share may stop more
            head = len(self.reservations) < self.config.reservation_depth
            if reclaim is None and not over_quota.over_maximum and head:
                reclaim = self.plan_reorder(job, policy, self.usable_state(job), same_queue=not over_quota.shortfall)
            if reclaim is not None:
                decision, after = self._preempts(job, policy, reclaim, None)
                return replace(decision, reasons=(over_quota.reason or "", *decision.reasons)), after
            return self._over_quota(job, policy, over_quota), self
        usable = self.usable_state(job)
        fits_now: Decision | None = None
        borrows: str | None = None
        if enough_worker_slots(usable, job):
            decision = place(usable, job, policy)
            if decision.placement is not None and self.teams is not None:
                check = self.teams.check(job, self.teams.demand_of(job, usable, decision.placement))
                if not check.ok:  # the GPUs it got span types its quota cannot take together
                    return self._over_quota(job, policy, check), self
                borrows = check.reason
            if decision.placement is not None:
                fits_now = decision
        # A gang that fits no free GPUs weighs its later starts only while it may still get a
        # reservation, as any gang that waits (the simulator skips such gangs then).
        may_reserve = len(self.reservations) < self.config.reservation_depth
        when = self.weigh_start(job, policy, fits_now, submit_s) if fits_now is not None or may_reserve else None
        if fits_now is not None and (when is None or when.starts_now):
            placement = fits_now.placement
            assert placement is not None
            if when is not None:
                fits_now = replace(fits_now, reasons=(*fits_now.reasons, when.describe()), when=when)
            if borrows is not None:
                fits_now = replace(fits_now, borrows=borrows)
            return fits_now, (self.started(job, placement) if commit else self)
        preemption = self.plan_preemption(job, policy, when, usable)
        if preemption is None and fits_now is None and may_reserve:  # the queue's head only: see plan_reorder
            preemption = self.plan_reorder(job, policy, usable)
        if preemption is not None:
            return self._preempts(job, policy, preemption, when)
        if when is not None:  # it waits for a better placement than the free GPUs give
            return self._waits_for_better(job, policy, when)
        policy_name = get_policy(policy or job.policy_name).name
        now_decision = place(self.state, job, policy) if explain else None
        if now_decision is not None and now_decision.code is Code.UNRESOLVABLE:
            if job.gpu_types is None:
                return replace(now_decision, reason_code=ReasonCode.NEVER_FITS), self
            now_decision = replace(now_decision, code=Code.UNSCHEDULABLE)  # on the types its quota leaves
        reservation = None
        if len(self.reservations) < self.config.reservation_depth:
            reservation = self.plan_reservation(job, policy)
        after = self._holding(job, reservation)
        if now_decision is None:
            return Decision(job, policy_name, Code.UNSCHEDULABLE, reservation=reservation,
                            reason_code=ReasonCode.RESOURCES), after  # fmt: skip
        lines = [reservation.describe()] if reservation else []
        use = self.teams.describe_use(job) if self.teams is not None else None
        if use is not None:
            lines.append(use)
        if now_decision.ok:  # it fits the free GPUs: only reservations stop it
            lines.append(self._waits_for(job, now_decision.placement))
            blocked = place(usable, job, policy)
            decision = replace(blocked, reasons=tuple(lines), reservation=reservation, reason_code=ReasonCode.RESERVED)
        else:
            decision = replace(now_decision, reasons=(*lines, *now_decision.reasons), reservation=reservation,
                               reason_code=self._short_of(job, reservation))  # fmt: skip
        return decision, after

    def _short_of(self, job: JobRequest, reservation: Reservation | None) -> ReasonCode:
        """Why a gang that fits no free GPUs waits: GPUs enough but not in its shape (Topology),
        else too few, with a reservation (Resources) or behind the gangs that hold them (Priority)."""
        if enough_worker_slots(self.state, job):
            return ReasonCode.TOPOLOGY
        ahead = self.config.reservation_depth and len(self.reservations) >= self.config.reservation_depth
        return ReasonCode.PRIORITY if reservation is None and ahead else ReasonCode.RESOURCES

    def started(self, job: JobRequest, placement: Placement, state: ClusterState | None = None) -> QueuePass:
        """The pass once ``job`` started on ``placement``: its GPUs taken (``state``: the pass's
        state with it committed, where the caller committed it already), its end expected, its
        queue's use raised."""
        end = self.end_of(job)
        ends = {**self.expected_ends, job.name: end} if end is not None else self.expected_ends
        teams = self.teams.with_started(job, self.state, placement) if self.teams is not None else None
        after = state if state is not None else self.state.with_placement(placement)
        return replace(self, state=after, expected_ends=ends, teams=teams)

    # -- team queues (scheduler/teams.py) --------------------------------------------------------
    def _quota_limits(self, job: JobRequest) -> tuple[QuotaCheck | None, JobRequest]:
        """Why ``job`` is over its queue's quota on every GPU type (None: it is not; the check
        with the smallest reclaim first), and the job limited to the GPU types its quota leaves it."""
        teams = self.teams
        queue = teams.queue(job) if teams is not None else None
        if teams is None or queue is None or job.gpus_per_worker == 0:
            return None, job
        types = {gpu_type(g.first) for g in self.state.groups if g.first.spec.topology.n_gpus}
        refused: dict[str, QuotaCheck] = {}
        for name in sorted(types):
            check = teams.check(job, {queue.key_of(name): job.total_gpus})
            if not check.ok:
                refused[name] = check
        if refused and len(refused) == len(types):
            # a type it has quota for says more than "its quota of 0"; then the smallest reclaim
            def rank(item: tuple[str, QuotaCheck]) -> tuple[bool, bool, bool, int]:
                check = item[1]
                no_quota = queue.nominal(queue.key_of(item[0])) == 0
                return no_quota, check.over_maximum, not check.shortfall, check.shortfall

            return min(refused.items(), key=rank)[1], job
        return None, (replace(job, gpu_types=frozenset(types - set(refused))) if refused else job)

    def _reclaim(self, job: JobRequest, policy: str | None, check: QuotaCheck) -> Preemption | None:
        """For a gang within its queue's own quota that its cohort lent out: the borrowing
        gangs to stop to take it back, and where the gang starts once they have stopped."""
        if not check.shortfall or self.teams is None:
            return None
        victims = self.teams.reclaim(job, check.shortfall, self.running)
        if not victims:
            return None
        freed = self.usable_state(job)
        held = gpus_held(freed)
        for victim in victims:
            freed = freed.without_job(victim.name)
        placement = place(freed, job, policy).placement
        if placement is None:  # its GPUs are taken by gangs that lend nothing: it waits for them
            return None
        rate = self.estimator()(freed.by_name, placement, job)
        return Preemption(victims, placement, rate, {v.name: tuple(held[v.name]) for v in victims}, reclaim=True)

    def _over_quota(self, job: JobRequest, policy: str | None, check: QuotaCheck) -> Decision:
        """A gang its queue's quota stops pends with the queue's numbers and holds no GPUs:
        it could not start on them. One that asks for more than its queue may ever hold stays
        pending, said so with the maximum (as Kueue keeps such a workload, "request > maximum
        capacity"): a quota may be raised under it."""
        assert check.reason is not None
        code = ReasonCode.OVER_MAXIMUM if check.over_maximum else ReasonCode.QUOTA_EXCEEDED
        return Decision(job, get_policy(policy or job.policy_name).name, Code.UNSCHEDULABLE, reasons=(check.reason,),
                        reason_code=code)  # fmt: skip

    def _waits_for(self, job: JobRequest, wanted: Placement | None) -> str:
        """Which reservations hold the GPUs ``job`` would take, and why it may not use them."""
        blocking = self.blocking(job)
        wanted_gpus = {(s.node, g) for s in wanted.slots for g in s.gpus} if wanted else set()
        named = [r for r in blocking if wanted_gpus & _gpu_set(r.placement)] or list(blocking)
        names = ", ".join(f"job {r.job}" for r in named)
        starts = [r.starts_in_s for r in named if r.starts_in_s is not None]
        if len(starts) < len(named) or self.now is None:
            why = "the reservation's start is unknown (a job holding its GPUs has no time limit)"
        else:  # the fix: a limit that ends before the first reservation starts lets it backfill
            soonest = approx_duration(min(starts))
            fix = f"a --time-limit under {soonest} would let it start now on them (backfill)"
            why = (f"it has no time limit, so it could still run when they start; {fix}" if job.time_limit_s is None
                   else f"its time limit ends after the reservation starts (in {soonest}); {fix}")  # fmt: skip
        return f"waits for reservation of {names}: {why}"

    def plan_reservation(self, job: JobRequest, policy: str | None = None) -> Reservation | None:
        """The GPUs ``job`` would take at the first expected end after which it fits.

        None for a gang that cannot fit beside the earlier reservations, or never fits.
        """
        for start, placement in self.future_options(job, policy):
            return self._reservation(job, placement, start)
        return None

    def free_at(self, gang: str) -> float:
        """When running ``gang``'s GPUs are expected to free (inf: unknown; ``expected_free``:
        once its expected end has passed, as far past now as it has overrun so far)."""
        return expected_free(self.expected_ends.get(gang, math.inf), self.now)

    def future_options(
        self, job: JobRequest, policy: str | None = None, fewer_nodes: bool = False
    ) -> Iterator[tuple[float | None, Placement]]:
        """Where ``job`` would go at each expected end after which it fits, earliest first.

        Running jobs release their GPUs at their expected ends, earliest first; reservations
        made before this one hold theirs until their own end (from now: simple and never late).
        Jobs without a known end release last, all at once: that last option's start is None
        (unknown). A gang that fits only on GPUs an earlier reservation holds for good gets no
        option (it could not start before that one ends, whenever that is).

        ``fewer_nodes`` (the start rule's walk): while the gang fits only on more nodes than it
        needs on the empty cluster, only the ends after which it fits on fewer nodes than at the
        last option. Where many small jobs end one GPU at a time, every end is another spread
        option as slow as the one before, and ``MAX_OPTIONS`` of them would be spent before the
        end that frees a whole node. Once it fits on as few nodes as it can, every end again:
        later ones may give it better GPUs inside a node, or nodes under one switch.
        """
        if job.gpus_per_worker == 0:
            return  # a CPU-only gang fits whenever a node serves it
        planner = _FuturePlanner(self._timeline, job.gpus_per_worker)
        least = math.inf  # the fewest nodes it could fit on at the options so far
        fewest = planner.nodes_needed(job.workers, empty=True) if fewer_nodes else math.inf
        for end in planner.ends():
            if planner.release_until(end) >= job.workers:
                if least > fewest:
                    spans = planner.nodes_needed(job.workers)
                    if spans >= least:
                        continue
                    least = spans
                found = planner.try_place(job, policy)
                if found is not None:
                    yield (end if self.now is None else max(end, self.now)), found
        if planner.release_running() >= job.workers and (least <= fewest or planner.nodes_needed(job.workers) < least):
            found = planner.try_place(job, policy)
            if found is not None:
                yield None, found

    @cached_property
    def _timeline(self) -> _Timeline:
        """Each node's holds, the running gangs' and the reservations': the start of every walk
        of later starts this pass makes (the start rule's and the reservation's of one gang
        alike)."""
        free_at: dict[str, float] = {}  # a gang over several nodes is looked up once
        holds: list[list[_Hold]] = []
        for ns in self.state.nodes:
            per_node = []
            for owner, mask in ns.owners.items():
                end = free_at.get(owner)
                if end is None:
                    end = free_at[owner] = self.free_at(owner)
                per_node.append(_Hold(end, mask, owner == UNUSABLE))
            holds.append(per_node)
        for reservation in self.reservations:
            end = math.inf if reservation.end_s is None else reservation.end_s
            for node in reservation.placement.nodes:
                mask = sum(1 << g for g in reservation.placement.gpus_on(node))
                holds[self.state.positions[node]].append(_Hold(end, mask, True))
        return _Timeline(self.state, holds)

    # -- when it starts (types.StartRule) -------------------------------------------------------
    def weigh_start(
        self, job: JobRequest, policy: str | None, fits_now: Decision | None, submit_s: float | None = None
    ) -> WhenChoice | None:
        """Weigh starting now on the free GPUs (``fits_now``, None if the gang fits none)
        against waiting for better ones, by the job's start rule. None when there is nothing to
        weigh: rule ``now``, no clock, a CPU-only gang, the best placement free now, rule
        ``finish`` without a known amount of work, or the longest wait over."""
        rule = StartRule(job.start_rule)
        if rule is StartRule.NOW or self.now is None or job.gpus_per_worker == 0:
            return None
        work = job.work_s if job.work_s is not None else job.time_limit_s
        if rule is StartRule.FINISH and work is None:
            return None
        deadline = math.inf
        if job.max_wait_s is not None:
            deadline = (self.now if submit_s is None else submit_s) + job.max_wait_s
            if deadline <= self.now:
                return None  # waited its longest: it starts as rule "now" would
        ideal = self.ideal_rate(job, policy)
        if ideal is None:
            return None
        estimate = self.estimator()
        nodes = self.state.by_name
        now_option = None
        if fits_now is not None and fits_now.placement is not None:
            rate = estimate(nodes, fits_now.placement, job)
            if as_good(rate, ideal):
                return None
            now_option = Option(fits_now.placement, self.now, rate, finish_of(self.now, work, ideal, rate))
        wait = self._best_wait(job, policy, rule, ideal, work, deadline, now_option)
        if wait is None and now_option is not None and rule is StartRule.FINISH:
            wait = self._first_wait(job, policy, ideal, work, deadline)  # shown beside now's finish: both weighed
        if now_option is None and wait is None:
            return None  # no start to weigh: it pends as any gang that does not fit
        at_risk = None
        neutral = job.risk == "neutral"
        if (rule is StartRule.FINISH and now_option is not None and wait is not None and work is not None
                and isinstance(estimate, RangedEstimator) and not neutral):  # fmt: skip
            now_high = estimate.likely(now_option.placement, job, now_option.images_per_s)[1]
            wait_low = estimate.likely(wait.placement, job, wait.images_per_s)[0]
            at_risk = AtRisk(now_high, wait_low, finish_of(self.now, work, ideal, now_high) or math.inf,
                             finish_of(wait.start_s, work, ideal, wait_low) or math.inf)  # fmt: skip
        # "best" never starts on a placement slower than its best; "finish" starts now unless a
        # later start finishes sooner, the gang and the jobs behind it counted (``QueueCost``), at
        # the pessimistic end of the estimator's ranges if it has them and the job is risk averse
        queue = None
        if rule is StartRule.FINISH and now_option is not None and wait is not None:
            queue = self._queue_cost(job, now_option, wait, at_risk)
        starts_now = (now_option is not None and rule is StartRule.FINISH
                      and (wait is None or queue is None or queue.net_gain_now_s >= 0))  # fmt: skip
        return WhenChoice(rule, self.now, ideal, now_option, wait, starts_now, at_risk, neutral, queue)

    def _queue_cost(self, job: JobRequest, now_option: Option, wait: Option, at_risk: AtRisk | None) -> QueueCost:
        """What starting ``job`` now rather than at ``wait`` gains it and costs the jobs behind it.
        Its gain is the better of the predicted one and, where weighed, the one at the pessimistic
        end of the ranges (as rule ``finish`` weighed them before it counted the queue)."""
        gain = _finish(wait) - _finish(now_option)
        if at_risk is not None:
            gain = max(gain, at_risk.wait_finish_s - at_risk.now_finish_s)
        extra = (_finish(now_option) - now_option.start_s) - (_finish(wait) - wait.start_s)
        if not math.isfinite(extra):
            extra = 0.0  # a placement predicted to train at 0 images/s: its own finish decides
        return QueueCost(self.behind.get(job.name, 0), job.total_gpus, self.usable_gpus, extra,
                         0.0 if math.isnan(gain) else gain)  # fmt: skip

    @cached_property
    def usable_gpus(self) -> int:
        """The cluster's GPUs less those out of use (``UNUSABLE``): what drains the queue."""
        unusable = sum(ns.owners.get(UNUSABLE, 0).bit_count() for ns in self.state.nodes)
        return self.state.total_gpus - unusable

    def hold_price(self, job: JobRequest) -> float:
        """Seconds of delay to the jobs behind ``job`` per second one of its starts runs
        (``QueueCost``'s ``waiting * gpus / cluster_gpus``; 0 with nobody behind)."""
        behind = self.behind.get(job.name, 0)
        return behind * job.total_gpus / self.usable_gpus if behind and self.usable_gpus else 0.0

    def queue_score(self, job: JobRequest, option: Option) -> float:
        """What rule ``finish`` minimises over a gang's starts: its own finish plus the delay its
        run puts on the jobs behind it. Two starts' scores differ by exactly
        ``QueueCost.net_gain_now_s``."""
        finish, price = _finish(option), self.hold_price(job)
        return finish + price * (finish - option.start_s) if price else finish

    def _best_wait(
        self,
        job: JobRequest,
        policy: str | None,
        rule: StartRule,
        ideal: float,
        work: float | None,
        deadline: float,
        now_option: Option | None,
    ) -> Option | None:
        """The later start the rule weighs: for ``best`` the first as fast as the best placement,
        for ``finish`` the one of the lowest ``queue_score`` (its finish, the jobs behind it
        counted). Each option looked at costs a ``place`` on the future cluster, so the walk stops
        once no later start can score lower (it would need to run less than ``work``) or after
        ``MAX_OPTIONS``. The bound counts the queue too: a start that finishes the gang itself
        later than now may still finish the queue sooner, on a faster placement."""
        estimate = self.estimator()
        nodes = self.state.by_name
        best: Option | None = None
        best_score = math.inf
        price = self.hold_price(job) if rule is StartRule.FINISH else 0.0
        bound = math.inf
        if now_option is not None:
            bound = self.queue_score(job, now_option) if rule is StartRule.FINISH else _finish(now_option)
        for count, (start, placement) in enumerate(self.future_options(job, policy, rule is StartRule.FINISH)):
            if start is None or start > deadline or count >= MAX_OPTIONS:
                break
            if work is not None and start + work * (1 + price) >= bound:
                break
            rate = estimate(nodes, placement, job)
            option = Option(placement, start, rate, finish_of(start, work, ideal, rate))
            if rule is StartRule.BEST:
                if as_good(rate, ideal):
                    return option
                continue
            score = self.queue_score(job, option)
            if best is None or score < best_score:
                best, best_score = option, score
                bound = min(bound, score)
            if as_good(rate, ideal):
                break
        return best

    def _first_wait(
        self, job: JobRequest, policy: str | None, ideal: float, work: float | None, deadline: float
    ) -> Option | None:
        """The first later start with a known time before ``deadline``: what a gang that starts
        now because no later start finishes sooner gives up (``_best_wait`` stops before it)."""
        for start, placement in self.future_options(job, policy):
            if start is None or start > deadline:
                return None
            rate = self.estimator()(self.state.by_name, placement, job)
            return Option(placement, start, rate, finish_of(start, work, ideal, rate))
        return None

    def ideal_rate(self, job: JobRequest, policy: str | None = None) -> float | None:
        """images/s of ``job`` on the placement ``place`` gives it on the empty cluster (only
        unusable GPUs held); None if it fits nowhere. Memoised per gang shape in ``ideal``."""
        key = (job.workers, job.gpus_per_worker, job.model, job.topology_aware, job.topology_required,
               job.topology_preferred, policy)  # fmt: skip
        if key not in self.ideal:
            empty = ClusterState(tuple(
                replace(ns, allocated=tuple(a for a in ns.allocated if a[1] == UNUSABLE)) for ns in self.state.nodes
            ))  # fmt: skip
            placement = place(empty, job, policy).placement
            self.ideal[key] = None if placement is None else self.estimator()(empty.by_name, placement, job)
        return self.ideal[key]

    def estimator(self) -> Estimator:
        return self.estimate or current_estimator()

    # -- preemption (scheduler/preempt.py) -------------------------------------------------------
    def plan_preemption(
        self, job: JobRequest, policy: str | None, when: WhenChoice | None, usable: ClusterState
    ) -> Preemption | None:
        """The gangs to stop so that ``job``, which would wait, starts on a placement as fast as
        its best; None when no running gang of lower priority may be preempted, or when such a
        placement frees by itself within the time victims take to stop (``preempt_delay_s``)."""
        if not job.may_preempt:
            return None
        eligible = {name: g for name, g in self.running.items() if g.preemptible and g.priority < job.priority}
        if not eligible:
            return None
        ideal = self.ideal_rate(job, policy)
        if ideal is None:
            return None
        soon = math.inf if self.now is None else self.now + self.preempt_delay_s
        if self._best_wait(job, policy, StartRule.BEST, ideal, None, soon, None) is not None:
            return None  # a placement as good frees as soon as victims would stop: nobody is preempted
        estimate = self.estimator()
        spared = frozenset().union(*(_gpu_set(r.placement) for r in self.blocking(job)))
        return plan_preemption(usable, job, eligible, ideal, lambda state, p: estimate(state.by_name, p, job),
                               policy, spared)  # fmt: skip

    def order_of(self, job: JobRequest) -> QueueOrder:
        """The order of ``job``'s queue (its team queue's, else the queue config's)."""
        team = self.teams.queues.get(queue_of(job)) if self.teams is not None else None
        return team.order if team is not None and team.order is not None else self.config.order

    def may_reorder(self, job: JobRequest) -> bool:
        """Whether preemption for order or fair share could stop a gang for ``job`` (cheap)."""
        return may_reorder(job, self.order_of(job), self.running, self.teams, self.config.reorder)

    def plan_reorder(
        self, job: JobRequest, policy: str | None, usable: ClusterState, same_queue: bool = False
    ) -> Preemption | None:
        """The gangs to stop for ``job``'s place in its queue's order or its queue's fair share
        (``scheduler/reorder.py``), each rule tried in turn, and where it starts then; None
        where no rule finds victims that give it a placement as fast as its best (or, for
        order, where stopping them does not pay). Only the gangs a reservation is still left
        for try it (``reservation_depth``, the head of the queue): a gang behind them would
        start after them anyway, and each try costs a search."""
        if self.now is None or job.gpus_per_worker == 0 or not self.may_reorder(job):
            return None
        order, config = self.order_of(job), self.config.reorder
        queued = self.waiting.get(job.name)
        service = order_service(queued) if queued is not None else NO_SERVICE
        found = candidates(job, order, service, self.running, self.teams, self.now, self.config.orders, config)
        ideal = self.ideal_rate(job, policy) if found else None
        if ideal is None:
            return None
        estimate = self.estimator()
        spared = frozenset().union(*(_gpu_set(r.placement) for r in self.blocking(job)))
        if same_queue and not job.preemptible:  # over its quota and may not borrow: only its own queue's gangs
            found = [rule for rule in found if rule.rule == "order"]
        for rule in found:
            preemption = plan_preemption(usable, job, rule.victims, ideal,
                                         lambda state, p: estimate(state.by_name, p, job), policy, spared,
                                         rule.prefer)  # fmt: skip
            if preemption is None or not rule.accepts(preemption.victims) or not self._quota_after(job, preemption):
                continue
            if rule.weighs_cost:
                first = next(self.future_options(job, policy), None)
                wait = math.inf if first is None or first[0] is None else first[0] - self.now
                run = job_run_s(job, order, service, self.now, self.config.orders, config)
                if not pays(run, wait, preemption.victims, self.now, config):
                    continue
            return replace(preemption, why=rule.why(preemption))
        return None

    def _quota_after(self, job: JobRequest, preemption: Preemption) -> bool:
        """Whether ``job`` fits its queue's quota on ``preemption``'s placement once its victims
        have given theirs back."""
        if self.teams is None or self.teams.queue(job) is None:
            return True
        teams = self.teams.without(preemption.names)
        return teams.check(job, teams.demand_of(job, self.state, preemption.placement)).ok

    def _preempts(
        self, job: JobRequest, policy: str | None, preemption: Preemption, when: WhenChoice | None
    ) -> tuple[Decision, QueuePass]:
        """Pend ``job`` until its victims have stopped, holding the GPUs they free for it; they
        are no victims for the gangs decided after it in this pass."""
        policy_name = get_policy(policy or job.policy_name).name
        start = None if self.now is None else self.now + self.preempt_delay_s
        reservation = self._reservation(job, preemption.placement, start)
        lines = [preemption.describe(), *([when.describe()] if when else []), reservation.describe()]
        decision = Decision(job, policy_name, Code.UNSCHEDULABLE, reasons=tuple(lines), reservation=reservation,
                            when=when, preemption=preemption, reason_code=ReasonCode.PREEMPTING)  # fmt: skip
        running = {name: g for name, g in self.running.items() if name not in preemption.names}
        after = self._holding(job, reservation)
        teams = after.teams.without(preemption.names) if after.teams is not None else None
        return decision, replace(after, running=running, teams=teams)

    def _holding(self, job: JobRequest, reservation: Reservation | None) -> QueuePass:
        """The pass with ``reservation`` held for ``job``, and its GPUs counted against its
        queue's quota for the rest of the pass (Kueue reserves a workload's quota before its
        pods run): no gang decided after it borrows the quota it waits for."""
        if reservation is None:
            return self
        teams = self.teams
        if teams is not None and teams.queue(job) is not None:
            teams = teams.with_started(job, self.state, reservation.placement)
        return replace(self, reservations=(*self.reservations, reservation), teams=teams)

    def _waits_for_better(self, job: JobRequest, policy: str | None, when: WhenChoice) -> tuple[Decision, QueuePass]:
        """Pend ``job`` for the later start ``when`` chose. Its GPUs are reserved whatever the
        reservation depth: a wait nobody holds for would be undone by the next gang that fits."""
        policy_name = get_policy(policy or job.policy_name).name
        reservation = None
        if when.wait is not None:
            reservation = self._reservation(job, when.wait.placement, when.wait.start_s)
        lines = [when.describe()] + ([reservation.describe()] if reservation else [])
        decision = Decision(job, policy_name, Code.UNSCHEDULABLE, reasons=tuple(lines), reservation=reservation,
                            when=when, reason_code=ReasonCode.BETTER_PLACEMENT)  # fmt: skip
        after = self._holding(job, reservation)
        return decision, after

    def _reservation(self, job: JobRequest, placement: Placement, start: float | None) -> Reservation:
        starts_in = None if start is None or self.now is None else start - self.now
        end = None if start is None or job.time_limit_s is None else start + job.time_limit_s
        return Reservation(placement, start, starts_in, end)


class _Hold(NamedTuple):
    """GPUs of one node held until ``end`` (inf: no known end), by a running job or a reservation
    (a tuple: the walk of later starts builds one per holder of every node for each gang it weighs)."""

    end: float
    mask: int
    reservation: bool


class _Timeline:
    """A pass's cluster as its holds expire, before any: each node's holds and the GPUs they
    hold, the nodes whose holds differ from their allocations (reservations), and the holds
    with a known end, by end (each is dropped once, when its end is reached). Read only: each
    walk copies what it changes."""

    def __init__(self, base: ClusterState, holds: Sequence[Sequence[_Hold]]) -> None:
        self.base = base
        self.holds = [tuple(h) for h in holds]
        self.held = [_union(h) for h in self.holds]
        self.changed = {pos: _held_node(ns, self.held[pos]) for pos, ns in enumerate(base.nodes)
                        if self.held[pos] != ns.used_mask}  # fmt: skip
        self.ending = sorted((h.end, pos) for pos, per_node in enumerate(self.holds) for h in per_node
                             if h.end != math.inf)  # fmt: skip


def _held_node(ns: NodeState, held: int) -> NodeState:
    return replace(ns, allocated=tuple((g, HELD) for g in bits(held)))


class _FuturePlanner:
    """Free GPU masks per node as holds expire; counts worker slots incrementally so ``place``
    runs only once the gang can fit (the slot count is necessary for every policy). The future
    cluster is ``base`` with the changed nodes replaced, so it carries ``base``'s group and
    switch indexes instead of building them again for every expected end."""

    def __init__(self, timeline: _Timeline, gpus: int) -> None:
        self.base = timeline.base
        self.holds = list(timeline.holds)
        self.gpus = gpus
        self.held = list(timeline.held)
        self.slots = sum(self._node_slots(pos) for pos in range(len(self.base.nodes)))
        self.changed = dict(timeline.changed)
        self.ending = timeline.ending
        self.next_end = 0

    def ends(self) -> Iterator[float]:
        """The known ends of the holds, each once, earliest first."""
        last = None
        for end, _ in self.ending:
            if end != last:
                last = end
                yield end

    def _node_slots(self, pos: int) -> int:
        free = self.base.nodes[pos].spec.topology.all_mask & ~self.held[pos]
        return free.bit_count() // self.gpus

    def _note(self, pos: int) -> None:
        ns = self.base.nodes[pos]
        if self.held[pos] == ns.used_mask:
            self.changed.pop(pos, None)
        else:
            self.changed[pos] = _held_node(ns, self.held[pos])

    def _drop(self, positions: set[int], ended: Callable[[_Hold], bool]) -> None:
        for pos in positions:
            kept = tuple(h for h in self.holds[pos] if not ended(h))
            if len(kept) != len(self.holds[pos]):
                before = self._node_slots(pos)
                self.holds[pos] = kept
                self.held[pos] = _union(kept)
                self.slots += self._node_slots(pos) - before
                self._note(pos)

    def nodes_needed(self, workers: int, empty: bool = False) -> int:
        """The fewest nodes whose free worker slots (all their slots: ``empty``) hold ``workers``
        (the nodes with the most slots first)."""
        nodes = self.base.nodes
        slots = sorted((ns.spec.topology.all_mask.bit_count() // self.gpus for ns in nodes) if empty
                       else (self._node_slots(pos) for pos in range(len(nodes))), reverse=True)  # fmt: skip
        total = 0
        for count, free in enumerate(slots, 1):
            total += free
            if total >= workers:
                return count
        return len(slots) + 1

    def release_until(self, t: float) -> int:
        """Drop the holds that end by ``t``; returns the worker slots free then."""
        touched: set[int] = set()
        while self.next_end < len(self.ending) and self.ending[self.next_end][0] <= t:
            touched.add(self.ending[self.next_end][1])
            self.next_end += 1
        self._drop(touched, lambda hold: hold.end <= t)
        return self.slots

    def release_running(self) -> int:
        """Drop every running job's hold (those without a known end too); reservations stay."""
        self._drop(set(range(len(self.holds))), lambda hold: not hold.reservation)
        return self.slots

    def try_place(self, job: JobRequest, policy: str | None) -> Placement | None:
        return place(self.base.with_nodes(self.changed), job, policy).placement


def _union(holds: Sequence[_Hold]) -> int:
    mask = 0
    for hold in holds:
        mask |= hold.mask
    return mask


def behind_in_line(ordered: Sequence[QueuedJob]) -> dict[str, int]:
    """Each job of a queue in order -> how many jobs with GPUs wait behind it."""
    behind: dict[str, int] = {}
    count = 0
    for queued in reversed(ordered):
        job = queued.job
        behind[job.name] = count
        if job.gpus_per_worker and job.workers:  # total_gpus > 0, without its property's call per job
            count += 1
    return behind


def _finish(option: Option) -> float:
    return math.inf if option.finish_s is None else option.finish_s


def _gpu_set(placement: Placement) -> set[tuple[str, int]]:
    return {(s.node, g) for s in placement.slots for g in s.gpus}


def _free_part(state: ClusterState, placement: Placement) -> Placement | None:
    """The GPUs of ``placement`` free in ``state``, as a placement owned by the reservation."""
    slots: list[WorkerSlot] = []
    for node in placement.nodes:
        free = state.node(node).free_mask
        gpus = tuple(g for g in placement.gpus_on(node) if free >> g & 1)
        if gpus:
            slots.append(WorkerSlot(len(slots), node, gpus))
    return Placement(f"{HELD}:{placement.job}", tuple(slots)) if slots else None


def enough_worker_slots(state: ClusterState, job: JobRequest) -> bool:
    """Necessary for any placement: sum over nodes of free // gpus_per_worker >= workers."""
    return job.gpus_per_worker == 0 or state.worker_slots(job.gpus_per_worker) >= job.workers
