"""Moves: a gang that runs degraded goes to its better placement at a checkpoint when it finishes
sooner counting the restart.

A gang started degraded (spread over nodes because its best placement was busy) would otherwise
stay degraded after that placement frees. A gang that resumes from its checkpoint (a preemptible
one: stopped with its grace, requeued, resumed, as a preemption does it) may instead be stopped
and started again on the better placement. That pays its grace (it writes its checkpoint), a
restart (start, load the checkpoint) and whatever it trained since its last checkpoint if it
does not write one when stopped; its host says what a restart costs it (``Movable.restart_s``):
the embedded engine the median of the cluster's recent restarts as it measured them, each from
the run's placement to its program's first line of output (``restart_cost``),
``reorder.DEFAULT_RESTART_S`` until it measured one (a stop for queue order counts the same).

The rule weighs the gang's own finish, as the start rule ``finish`` does (``types.WhenChoice``):
staying finishes at ``now + left * ideal / rate_here``, moving at ``now + grace + restart +
left * ideal / rate_there`` (``left``: seconds of its work left on its best placement, ``ideal``
that placement's images/s). With the model's likely ranges and a risk-averse gang, staying is
taken at the high end of its range and moving at the low end of the target's. It moves only when
moving still finishes sooner by ``MoveRule.margin_s`` and ``MoveRule.margin`` of its stay, never
twice within ``MoveRule.min_interval_s``, and only onto GPUs no waiting job takes: moves are
planned after every waiting job of the cycle was decided, on the GPUs left free and not reserved,
so a move never jumps the queue. Nothing here reads a clock; time is the pass's ``now``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ringleader.scheduler.framework import place
from ringleader.scheduler.policies.throughput import RangedEstimator
from ringleader.scheduler.queue import QueuePass
from ringleader.scheduler.reorder import DEFAULT_RESTART_S
from ringleader.scheduler.types import HELD, JobRequest, Placement, WorkerSlot, approx_duration, as_good


@dataclass(frozen=True)
class MoveRule:
    """How sure a move must be: it finishes sooner by at least ``margin_s`` and by ``margin``
    of the time staying would take, and a gang moves at most once per ``min_interval_s``."""

    margin_s: float = 60.0
    margin: float = 0.05
    min_interval_s: float = 1800.0

    def __post_init__(self) -> None:
        if not (self.margin_s >= 0 and 0 <= self.margin < 1 and self.min_interval_s >= 0):
            raise ValueError(f"need margin_s >= 0, 0 <= margin < 1 and min_interval_s >= 0, got {self}")


DEFAULT_MOVE_RULE = MoveRule()

# How many of a cluster's most recent restarts price the next: enough that one slow start moves
# the median little, few enough that a cluster that changed (an image now cached) is soon priced anew.
RESTART_WINDOW = 20


@dataclass(frozen=True)
class RestartCost:
    """What starting a stopped gang again costs beyond its grace on this cluster: ``seconds``,
    the median of its ``measured`` most recent restarts, or ``DEFAULT_RESTART_S`` while none
    was measured (``measured`` 0)."""

    seconds: float = DEFAULT_RESTART_S
    measured: int = 0

    @property
    def source(self) -> str:
        """Where ``seconds`` came from, in words for the Moved event."""
        if self.measured == 0:
            return "the default until this cluster has a measured restart"
        if self.measured == 1:
            return "this cluster's one measured restart, to its program's first output"
        return f"the median of this cluster's last {self.measured} restarts, each to its program's first output"


def restart_cost(recent_s: Sequence[float], window: int = RESTART_WINDOW) -> RestartCost:
    """The restart a move counts, from the cluster's measured restarts ``recent_s`` (seconds,
    oldest first): the median of the last ``window``, so that one start slowed by a busy machine
    moves it little; ``DEFAULT_RESTART_S`` while there is none."""
    if window < 1:
        raise ValueError(f"need a window of at least one restart, got {window}")
    last = recent_s[-window:]
    if not last:
        return RestartCost()
    return RestartCost(statistics.median(last), len(last))


@dataclass(frozen=True)
class Movable:
    """A running gang that may move, as its host sees it: its request and where it runs,
    ``left_s`` seconds of its work left on its best placement (``JobRequest.work_s``'s unit) when
    this run started, ``ran_s`` how long this run has trained since (a host that counts progress
    itself gives 0 and the work left now), ``restart_s`` what starting it again costs beyond its
    grace (start, resume from its checkpoint, work since its last checkpoint) and
    ``restart_source`` where that figure came from (``RestartCost.source``; "": not said), and
    when it last moved (None: never)."""

    job: JobRequest
    placement: Placement
    left_s: float
    restart_s: float
    moved_s: float | None = None
    ran_s: float = 0.0
    restart_source: str = ""


@dataclass(frozen=True)
class Move:
    """Stop ``job`` with its grace, requeue it and start it on ``target``: what was weighed.
    ``stay_*``/``move_*``: images/s and predicted finish each way (``*_risk``: the rates at the
    pessimistic ends of the likely ranges, which the finishes use; None without ranges).
    ``grace_s`` and ``restart_source``: the cost's parts as its host gave them (``Movable``)."""

    job: JobRequest
    source: Placement
    target: Placement
    now_s: float
    cost_s: float  # grace + restart
    stay_images_per_s: float
    move_images_per_s: float
    stay_finish_s: float
    move_finish_s: float
    stay_risk: float | None = None
    move_risk: float | None = None
    grace_s: float = 0.0
    restart_source: str = ""

    @property
    def gain_s(self) -> float:
        return self.stay_finish_s - self.move_finish_s

    def describe(self) -> str:
        """ "moves: finishes sooner by ~21 min counting a restart of ~2 min (2 s grace + 90 s, the
        median of this cluster's last 20 restarts, each to its program's first output): stay on
        ... at 202 images/s, finishes in ~45 min; move to ... at 910 images/s, finishes in ~24
        min" """
        restart = approx_duration(self.cost_s)
        if self.restart_source:
            restart += (f" ({self.grace_s:g} s grace + {self.cost_s - self.grace_s:.0f} s, "
                        f"{self.restart_source})")  # fmt: skip
        risk = ""
        if self.stay_risk is not None and self.move_risk is not None:
            risk = (f", even at the pessimistic end of the likely ranges ({self.move_risk:.0f} images/s "
                    f"there, {self.stay_risk:.0f} here)")  # fmt: skip
        nodes = len(self.target.nodes)
        where = f"{'node' if nodes == 1 else 'nodes'} {', '.join(self.target.nodes)}"
        stay_in = approx_duration(self.stay_finish_s - self.now_s)
        move_in = approx_duration(self.move_finish_s - self.now_s)
        return (f"moves: finishes sooner by {approx_duration(self.gain_s)} counting a restart of "
                f"{restart}{risk}: stay on {self.source.describe()} at "
                f"{self.stay_images_per_s:.0f} images/s, finishes in {stay_in}; move to {where} "
                f"({self.target.describe()}) at {self.move_images_per_s:.0f} images/s, "
                f"finishes in {move_in}")  # fmt: skip


def plan_moves(
    after: QueuePass,
    movable: Sequence[tuple[Movable, float]],
    policy: str | None = None,
    rule: MoveRule = DEFAULT_MOVE_RULE,
) -> tuple[Move, ...]:
    """The gangs to move, on ``after``: the pass once every waiting job was decided (its state
    holds the jobs it started, its reservations the GPUs waiting jobs hold). ``movable``: each
    gang that may move with its grace. Each move's target is held from the gangs weighed after
    it (by priority, then name); its old GPUs stay held until it has stopped."""
    if after.now is None:
        return ()
    moves: list[Move] = []
    state = after.state
    for gang, grace_s in sorted(movable, key=lambda m: (-m[0].job.priority, m[0].job.name)):
        move = _weigh(replace(after, state=state), gang, grace_s, policy, rule)
        if move is not None:
            moves.append(move)
            state = state.with_placement(_newly_held(move))
    return tuple(moves)


def _newly_held(move: Move) -> Placement:
    """The GPUs of ``move``'s target it does not hold already, held for it (its own stay its
    own until it has stopped)."""
    slots: list[WorkerSlot] = []
    for node in move.target.nodes:
        gpus = tuple(g for g in move.target.gpus_on(node) if g not in move.source.gpus_on(node))
        if gpus:
            slots.append(WorkerSlot(len(slots), node, gpus))
    return Placement(f"{HELD}:{move.job.name}", tuple(slots))


def _weigh(after: QueuePass, gang: Movable, grace_s: float, policy: str | None, rule: MoveRule) -> Move | None:
    """``gang``'s move where one finishes sooner by the rule's margins; None to stay."""
    now, job = after.now, gang.job
    assert now is not None
    if not job.preemptible:  # it never said it resumes from its checkpoint
        return None
    if gang.moved_s is not None and now - gang.moved_s < rule.min_interval_s:
        return None
    source = gang.placement
    ideal = after.ideal_rate(job, policy)
    if ideal is None or job.gpus_per_worker == 0:
        return None
    estimate = after.estimator()
    here = estimate(after.state.by_name, source, job)
    left_s = gang.left_s - gang.ran_s * here / ideal  # what it trained this run, at its predicted rate
    if as_good(here, ideal) or left_s <= 0:
        return None
    # on the GPUs left free and not reserved (a running gang's end is not its own: no backfill)
    unlimited = replace(job, time_limit_s=None)
    free = replace(after, state=after.state.without_job(job.name)).usable_state(unlimited)
    target = place(free, job, policy).placement
    if target is None:
        return None
    there = estimate(free.by_name, target, job)
    if as_good(here, there):
        return None
    stay_rate, move_rate, stay_risk, move_risk = here, there, None, None
    if isinstance(estimate, RangedEstimator) and job.risk != "neutral":
        stay_risk = stay_rate = estimate.likely(source, job, here)[1]
        move_risk = move_rate = estimate.likely(target, job, there)[0]
    cost = grace_s + gang.restart_s
    stay_finish = now + _run_s(left_s, ideal, stay_rate)
    move_finish = now + cost + _run_s(left_s, ideal, move_rate)
    needed = max(rule.margin_s, rule.margin * (stay_finish - now))
    if not stay_finish - move_finish > needed:
        return None
    # the finishes shown are the ones weighed: at the pessimistic ends where there are ranges
    return Move(job, source, target, now, cost, here, there, stay_finish, move_finish, stay_risk, move_risk,
                grace_s, gang.restart_source)  # fmt: skip


def _run_s(left_s: float, ideal: float, images_per_s: float) -> float:
    return math.inf if images_per_s <= 0 else left_s * ideal / images_per_s
