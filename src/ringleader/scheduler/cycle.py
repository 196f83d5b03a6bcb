"""One queue cycle for every engine: a snapshot of the queue's world in, decisions out.

Every engine (the embedded one, Slurm, the Kubernetes scheduler) and the simulator run the same
cycle, as Kueue's scheduler does (heads, snapshot, nominate, iterate, requeue): the engine reads
its world into a ``Snapshot`` (the jobs waiting, the gangs holding GPUs with their queue, grace
and expected end, the team queues with their usage, the cordoned nodes, ``now``), ``run_cycle``
decides every waiting job in ``queue_order`` through ``QueuePass.decide`` and returns the
decisions as values, and the engine acts on them through its own few verbs: start a gang where
its decision places it, pend one with its reason and reservation, stop a victim with its grace
and requeue it. Nothing here reads a clock or does I/O; time is the snapshot's ``now``.

What one engine needs beyond the others is said in the snapshot, not in a copy of the loop:
- nodes a job may never use (Kubernetes: taints, node selectors, nodes not Ready) as
  ``Waiting.masked``; a host's check of a placement beyond GPUs (CPU, memory and pod room) as
  ``Waiting.check``: the nodes it refuses are masked and the job placed again;
- a host that runs cycles often keeps each waiting job's reservation and what it was last
  decided on (``Snapshot.held``, ``Snapshot.decided_on``): a job decided on the same inputs
  keeps its answer without being decided again;
- a host that stops victims at once (the simulator) ends the cycle at the first preemption
  (``stop_at_preemption``) and runs it again on the GPUs they freed.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

from ringleader.scheduler.framework import get_policy, place
from ringleader.scheduler.move import Movable, Move, plan_moves
from ringleader.scheduler.policies.throughput import Estimator
from ringleader.scheduler.queue import (
    UNUSABLE,
    BackfillConfig,
    QueuedJob,
    QueuePass,
    behind_in_line,
    enough_worker_slots,
    queue_order,
)
from ringleader.scheduler.teams import TeamQueue, Teams
from ringleader.scheduler.types import (
    ClusterState,
    Code,
    Decision,
    JobRequest,
    Placement,
    ReasonCode,
    Reservation,
    RunningGang,
    WorkerSlot,
)

# A host's check of a placement beyond its GPUs (Kubernetes: CPU, memory and pod room on its
# nodes, and room for the gang's members without GPUs): None when it fits; else the nodes that
# lack room (node -> why: masked, and the job placed again) or, as text, why it cannot start.
# A fit is final: the job starts on that placement in this cycle, so a host may assume it there
# and then (Kubernetes counts the gang's pods on its nodes before the next gang's check); a host
# whose state is the snapshot's (no cordons masked in it) and that assumed the job there returns
# its state after that, which the pass takes instead of committing the placement a second time.
HostCheck = Callable[[Placement], "Mapping[str, str] | str | ClusterState | None"]
# Nodes a host check may refuse before the job is called pending.
MAX_REPLACEMENTS = 4
# The queue's defaults: 2 reservations, priority +100 over a day of waiting.
DEFAULT_BACKFILL = BackfillConfig()


@dataclass(frozen=True)
class Waiting(QueuedJob):
    """A job waiting in the queue (its submit order ``seq`` and time ``submit_s``), with what
    its host adds: nodes it may never use now, and its check of a placement beyond GPUs."""

    masked: frozenset[str] = frozenset()
    check: HostCheck | None = field(default=None, compare=False)
    version: Hashable = None  # what the host knows changed about the job (Kubernetes: its pods)
    hold: bool = False  # held by its user (`ringleader hold`): it stays pending until released


@dataclass(frozen=True)
class Holding:
    """A gang that holds GPUs: running, being stopped, or (Slurm) submitted for its exact GPUs."""

    name: str
    priority: int = 0
    queue: str | None = None  # the team queue whose quota it holds (None: none, or given back)
    expected_end_s: float | None = None  # when its GPUs free, on the snapshot's clock (None: unknown)
    grace_s: float = 0.0  # how long it takes to stop: SIGTERM, then SIGKILL
    preemptible: bool = False  # a gang of higher priority may stop it (not when being stopped)
    # What preemption for order and fair share reads (``scheduler/reorder.py``; None: unknown):
    # when this run started, the GPU-seconds it attained (this run's too), its predicted time
    # left, how often it checkpoints.
    started_s: float | None = None
    attained_gpu_s: float = 0.0
    remaining_s: float | None = None
    checkpoint_s: float | None = None
    move: Movable | None = None  # where its host moves gangs (scheduler/move.py): its work left


@dataclass(frozen=True)
class Snapshot:
    """The queue's world as one engine sees it at ``now``."""

    state: ClusterState
    waiting: Sequence[Waiting]
    now: float | None = None
    holding: Sequence[Holding] = ()
    queues: Sequence[TeamQueue] = ()  # the team queues (none: one queue, no quota)
    usage: Mapping[str, float] = field(default_factory=dict)  # queue -> decayed GPU-seconds used
    teams: Teams | None = None  # the team queues counted already (instead of queues and usage)
    cordoned: Iterable[str] = ()  # nodes no job is placed on (a mapping names each one's reason)
    config: BackfillConfig = DEFAULT_BACKFILL
    estimate: Estimator | None = field(default=None, compare=False)  # None: the installed one
    policy: str | None = None
    explain: bool = True  # pending decisions carry their reasons (the simulator needs none)
    stop_at_preemption: bool = False
    # images/s of each gang shape's best placement, shared by the cycles that pass it on
    ideal: dict[tuple[object, ...], float | None] = field(default_factory=dict, compare=False, repr=False)
    # Across cycles (a host that keeps them): each waiting job's reservation, what it was last
    # decided on, and ``epoch``, the host's count of changes that may free room (None: every job
    # is decided every cycle).
    held: Mapping[str, Reservation] = field(default_factory=dict)
    decided_on: Mapping[str, Hashable] = field(default_factory=dict)
    epoch: Hashable = None


@dataclass(frozen=True)
class Nominated:
    """One job's decision in the cycle: ``lacking`` the nodes its host check refused (masked
    before the decision), ``refused`` the check's reason where the job could not start at all."""

    waiting: Waiting
    decision: Decision
    lacking: Mapping[str, str] = field(default_factory=dict)
    refused: str | None = None

    @property
    def ok(self) -> bool:
        return self.decision.ok


@dataclass(frozen=True)
class Cycle:
    """What a cycle decided, in queue order, and what it hands to the next one."""

    nominated: tuple[Nominated, ...]
    state: ClusterState  # the snapshot's state with every started job committed
    held: dict[str, Reservation]  # waiting job -> its reservation
    decided_on: dict[str, Hashable]  # pending job -> what it was decided on
    unchanged: int = 0  # jobs that kept last cycle's answer
    moved: int = 0  # reservations moved or dropped (GPUs held before are free again)
    moves: tuple[Move, ...] = ()  # running gangs to stop and start on their better placement

    @property
    def decisions(self) -> list[Decision]:
        return [n.decision for n in self.nominated]


def teams_of(snapshot: Snapshot) -> Teams | None:
    """The team queues with the GPUs each holding gang holds and their fair-share factors from
    the snapshot's usage; None without queues."""
    if snapshot.teams is not None or not snapshot.queues:
        return snapshot.teams
    gang_queue = {h.name: h.queue for h in snapshot.holding if h.queue is not None}
    return Teams.of(snapshot.queues, snapshot.state, gang_queue, snapshot.usage)


def run_cycle(snapshot: Snapshot) -> Cycle:
    """Decide every waiting job in queue order on a working copy of the snapshot's state.

    A job that starts is committed to the copy before the next is tried, so two gangs never get
    the same GPU; a job that preempts holds the GPUs its victims free, and they are no victims
    for the jobs after it. The caller acts on the returned decisions as a whole."""
    current = _opening(snapshot)
    nominated: list[Nominated] = [_on_hold(snapshot, w) for w in snapshot.waiting if w.hold]
    held: dict[str, Reservation] = {}
    decided_on: dict[str, Hashable] = {}
    unchanged = 0
    moved = sum(1 for name in snapshot.held if name not in current.waiting)  # reservations of jobs no longer waiting
    order = queue_order(list(current.waiting.values()), snapshot.now, snapshot.config, current.teams)
    current = replace(current, behind=behind_in_line(order))  # what a degraded start would delay

    def sieve(index: int) -> list[QueuedJob] | None:
        """Once the reservations are all given, the jobs from ``index`` on that may still start."""
        if len(current.reservations) < snapshot.config.reservation_depth:
            return None
        return _may_still_start(order[index:], current)

    sieving = not snapshot.explain and snapshot.epoch is None
    for entry in _in_turn(order, sieve) if sieving else order:
        assert isinstance(entry, Waiting)
        name, kept = entry.job.name, snapshot.held.get(entry.job.name)
        inputs = _inputs(snapshot, entry, current, moved)
        if inputs is not None and snapshot.decided_on.get(name) == inputs:  # last cycle's answer stands
            unchanged += 1
            reservation = kept if len(current.reservations) < snapshot.config.reservation_depth else None
            if reservation is not None:
                current = replace(current, reservations=(*current.reservations, reservation))
        elif _hopeless(snapshot, current, entry.job):
            continue
        else:
            one, current = _nominate(current, entry, snapshot)
            one = _cordoned(snapshot, current, one)
            nominated.append(one)
            reservation = one.decision.reservation
            inputs = None if one.ok else inputs
        moved += kept is not None and (reservation is None or reservation.placement != kept.placement)
        if reservation is not None:
            held[name] = reservation
        if inputs is not None:
            decided_on[name] = inputs
        if snapshot.stop_at_preemption and nominated and nominated[-1].decision.preemption is not None:
            return Cycle(tuple(nominated), current.state, held, decided_on, unchanged, moved)
    movable = [(h.move, h.grace_s) for h in snapshot.holding if h.move is not None]
    moves = plan_moves(current, movable, snapshot.policy) if movable else ()
    return Cycle(tuple(nominated), current.state, held, decided_on, unchanged, moved, moves)


def _opening(snapshot: Snapshot) -> QueuePass:
    """The pass before the first job: the cordoned nodes masked, the holding gangs' ends, those
    that may be preempted (the longest grace among them: how long a preemption takes), the team
    queues with the waiting jobs in them."""
    waiting = {w.job.name: w for w in in_line(snapshot.waiting)}
    teams = teams_of(snapshot)
    if teams is not None:
        teams = teams.with_waiting(w.job for w in waiting.values())
    victims = [h for h in snapshot.holding if h.preemptible]
    ends = {h.name: h.expected_end_s for h in snapshot.holding if h.expected_end_s is not None}
    return QueuePass(
        without_nodes(snapshot.state, snapshot.cordoned), snapshot.now, ends, snapshot.config,
        estimate=snapshot.estimate, ideal=snapshot.ideal,
        running={h.name: _gang(h) for h in victims},
        preempt_delay_s=max((h.grace_s for h in victims), default=0.0), teams=teams,
        waiting=waiting,
    )  # fmt: skip


def _gang(holding: Holding) -> RunningGang:
    """A preemptible holding gang as preemption sees it."""
    return RunningGang(holding.name, holding.priority, True, holding.queue, holding.started_s,
                       holding.attained_gpu_s, holding.remaining_s, holding.checkpoint_s, holding.grace_s)  # fmt: skip


def in_line(waiting: Sequence[Waiting]) -> list[Waiting]:
    """The waiting jobs the queue decides: all but those held (a hold is a queue rule, the same
    on every engine: a held job keeps its place but is never started nor reserved for)."""
    return [w for w in waiting if not w.hold]


def _on_hold(snapshot: Snapshot, entry: Waiting) -> Nominated:
    return Nominated(entry, on_hold(entry.job, get_policy(snapshot.policy or entry.job.policy_name).name))


def on_hold(job: JobRequest, policy: str) -> Decision:
    """A held job's decision: it waits, reason Held, whatever the cluster has free."""
    why = f"held: it is not started until `ringleader release {job.name}`"
    return Decision(job, policy, Code.UNSCHEDULABLE, reasons=(why,), reason_code=ReasonCode.HELD)


def _cordoned(snapshot: Snapshot, current: QueuePass, one: Nominated) -> Nominated:
    """A gang short of GPUs that would fit were the cordoned nodes back says so (Cordoned),
    and each cordoned node is named with its cordon's reason instead of "0 free GPU(s)"."""
    decision = one.decision
    cordons = snapshot.cordoned
    short = (ReasonCode.RESOURCES, ReasonCode.PRIORITY, ReasonCode.TOPOLOGY)
    if not cordons or not snapshot.explain or decision.ok or decision.reason_code not in short:
        return one
    why = cordons if isinstance(cordons, Mapping) else dict.fromkeys(cordons, "")
    nodes = {n: f"cordoned{f' ({text})' if text else ''}" for n, text in why.items() if n in current.state.positions}
    reasons = {**decision.node_reasons, **nodes}
    uncordoned = without_nodes(current.state.without_job(UNUSABLE), set(one.waiting.masked) - set(why))
    if not place(uncordoned, decision.job, snapshot.policy).ok:
        return replace(one, decision=replace(decision, node_reasons=reasons))
    named = ", ".join(f"{n} ({why[n]})" if why[n] else n for n in sorted(nodes))
    line = (f"it would fit on cordoned node(s) {named}: it starts once they are uncordoned "
            "(`ringleader node uncordon NODE`) or GPUs free elsewhere")  # fmt: skip
    cordoned = replace(decision, reasons=(line, *decision.reasons), node_reasons=reasons,
                       reason_code=ReasonCode.CORDONED)  # fmt: skip
    return replace(one, decision=cordoned)


def _inputs(snapshot: Snapshot, entry: Waiting, current: QueuePass, moved: int) -> Hashable:
    """What a waiting job is decided on, where its host keeps answers across cycles (None where
    it does not): the host's epoch, the job's version, the reservations moved so far, the
    minute (ages, expected starts), its queues' use, when the holding gangs are expected to end
    (a gang running early or late moves every later start a start rule weighs) and how many
    jobs wait behind it (what a degraded start of it would delay)."""
    if snapshot.epoch is None:
        return None
    use = repr(sorted(current.teams.use.items())) if current.teams is not None else ""
    minute = None if snapshot.now is None else int(snapshot.now // 60)
    ends = tuple(sorted(current.expected_ends.items()))
    return (snapshot.epoch, entry.version, moved, minute, use, ends, current.behind.get(entry.job.name, 0))


def _hopeless(snapshot: Snapshot, current: QueuePass, job: JobRequest) -> bool:
    """Where no reasons are wanted: a job that cannot fit the free GPUs the reservations leave
    it, when no reservation is left to give and it can stop nobody, is left waiting without a
    decision (it would change nothing; at a busy pass most of a long queue is such jobs)."""
    if snapshot.explain or len(current.reservations) < snapshot.config.reservation_depth:
        return False
    lowest = current.lowest_running_priority
    may_preempt = lowest is not None and job.priority > lowest
    reclaims = current.teams is not None and current.teams.queue(job) is not None
    return not may_preempt and not reclaims and not enough_worker_slots(current.usable_state(job), job)


def _in_turn(order: Sequence[QueuedJob], sieve: Callable[[int], list[QueuedJob] | None]) -> Iterator[QueuedJob]:
    """``order``, each job in turn until ``sieve`` of the next one's index gives a shorter rest."""
    for index, entry in enumerate(order):
        yield entry
        rest = sieve(index + 1)
        if rest is not None:
            yield from rest
            return


def _may_still_start(rest: Sequence[QueuedJob], current: QueuePass) -> list[QueuedJob]:
    """Of ``rest``, those ``_hopeless`` may not dismiss, in order. A job that cannot fit the free
    GPUs now cannot fit what the reservations leave it later in the pass: a pass's state only
    fills (a preempting gang holds what its victims free), and its lowest preemptible priority
    only rises. One quick look at each job of a long queue, instead of ``_hopeless``'s look at
    the reservations for each (most of a busy simulated pass)."""
    lowest, teams, slots = current.lowest_running_priority, current.teams, current.state.worker_slots
    return [
        entry for entry in rest
        if not entry.job.gpus_per_worker or slots(entry.job.gpus_per_worker) >= entry.job.workers
        or (lowest is not None and entry.job.priority > lowest)
        or (teams is not None and teams.queue(entry.job) is not None)
    ]  # fmt: skip


def _nominate(current: QueuePass, entry: Waiting, snapshot: Snapshot) -> tuple[Nominated, QueuePass]:
    """``entry``'s decision and the pass after it: on the state with its masked nodes, placed
    again while its host check refuses nodes of the placement."""
    policy, explain = snapshot.policy, snapshot.explain
    if not entry.masked and entry.check is None:
        decision, after = current.decide(entry.job, policy, explain, entry.submit_s)
        return Nominated(entry, decision), after
    masked = set(entry.masked)
    lacking: dict[str, str] = {}
    for _ in range(MAX_REPLACEMENTS + 1):
        trial = replace(current, state=without_nodes(current.state, masked)) if masked else current
        decision, after = trial.decide(entry.job, policy, explain, entry.submit_s, commit=False)
        placement = decision.placement
        if placement is None or not decision.ok:
            if decision.code is Code.UNRESOLVABLE and entry.masked:
                decision = replace(decision, code=Code.UNSCHEDULABLE)  # masked nodes may come back
            return Nominated(entry, decision, lacking), replace(after, state=current.state)
        refused = entry.check(placement) if entry.check is not None else None
        if refused is None or isinstance(refused, ClusterState):  # committed to the pass without its masks
            return Nominated(entry, decision, lacking), current.started(entry.job, placement, refused)
        if isinstance(refused, str):
            pending = Decision(entry.job, decision.policy, Code.UNSCHEDULABLE, reasons=(refused,))
            return Nominated(entry, pending, lacking, refused), current
        lacking.update(refused)
        masked |= set(refused)
    pending = Decision(entry.job, decision.policy, Code.UNSCHEDULABLE)
    return Nominated(entry, pending, lacking), current


def without_nodes(state: ClusterState, nodes: Iterable[str]) -> ClusterState:
    """``state`` with every free GPU of ``nodes`` held (``UNUSABLE``): no job is placed there,
    and no plan counts on them ever coming free; what runs there runs on."""
    slots: list[WorkerSlot] = []
    for name in nodes:
        pos = state.positions.get(name)
        if pos is not None and state.nodes[pos].n_free:
            slots.append(WorkerSlot(len(slots), name, state.nodes[pos].free_gpus))
    return state.with_placement(Placement(UNUSABLE, tuple(slots))) if slots else state


def schedule_queue(
    state: ClusterState,
    pending: Sequence[QueuedJob],
    policy: str | None = None,
    *,
    now: float | None = None,
    expected_ends: Mapping[str, float] | None = None,
    config: BackfillConfig = DEFAULT_BACKFILL,
    estimate: Estimator | None = None,
    running: Mapping[str, RunningGang] | None = None,
    preempt_delay_s: float = 0.0,
    teams: Teams | None = None,
) -> tuple[ClusterState, list[Decision]]:
    """``run_cycle`` with its inputs given one by one: every pending job decided in queue order;
    the state with the started ones committed, and every decision. ``expected_ends``: running
    job -> when it ends, on ``now``'s clock; ``running``: the gangs that may be preempted, each
    ``preempt_delay_s`` to stop; ``teams``: the team queues with their use."""
    ends = dict(expected_ends or {})
    victims = dict(running or {})
    holding = [Holding(name, g.priority, g.queue, ends.get(name), preempt_delay_s, g.preemptible, g.started_s,
                       g.attained_gpu_s, g.remaining_s, g.checkpoint_s) for name, g in victims.items()]  # fmt: skip
    holding += [Holding(name, expected_end_s=end) for name, end in ends.items() if name not in victims]
    waiting = [Waiting(q.job, q.seq, q.submit_s) for q in pending]
    snapshot = Snapshot(state, waiting, now, holding, config=config, estimate=estimate, policy=policy, teams=teams)
    cycle = run_cycle(snapshot)
    return cycle.state, cycle.decisions

