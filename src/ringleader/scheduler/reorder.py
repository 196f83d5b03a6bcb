"""Preemption for queue order and for fair share: the running gangs a waiting gang may stop
although their priority is not below its own, and whether stopping them pays.

Beside priority (``scheduler/preempt.py``) and a queue taking back the quota it lent
(``teams.reclaim``), two rules let a waiting gang stop running ones. Both stop only gangs that
said they resume (``--preemptible``), never a gang of higher priority, and never one that has run
less than ``ReorderConfig.min_run_s`` since it (re)started: a gang stopped for one of them runs
at least that long before either may stop it again, so two gangs cannot stop each other in turn.

- For order, in a queue ordered ``las`` or ``srtf`` (``scheduler/order.py``): a waiting gang may
  stop gangs of its own queue that the order ranks after it: in a higher level of attained GPU
  service (LAS, Tiresias' 2D-LAS: a job of a higher-priority level preempts those of lower ones),
  or with more predicted time left (SRTF). Only when it pays: the waiting gang would otherwise
  wait ``wait`` (until its first planned start), and each victim loses its stop's grace, the
  restart (``restart_s``) and the work since its last checkpoint (all of this run where it keeps
  none that the queue knows of), and waits while the gang runs. It stops them only when
  ``wait - grace > sum over victims of (its run + their loss)``, the exchange argument of SRTF
  with the restart counted. The gang's run is its predicted remaining time, for LAS (no
  estimate needed) at most until it reaches its level's threshold and may be stopped in turn,
  and at least ``min_run_s``, the least it keeps the GPUs once started.
- For fair share, Kueue's fairSharing preemption inside a cohort: a gang of a queue in a cohort
  may stop gangs of the cohort's other queues whose share (GPUs held per weight) is above its
  own queue's, whether it fits its queue's quota or must borrow (the caller checks that the
  quota the victims give back lets it start). Which, by Kueue's two strategies in Kueue's
  default order, the second only where the first finds no victims that give the gang its
  placement:
  ``LessThanOrEqualToFinalShare``, the victim's queue keeps at least the share the gang's queue
  has with the gang started (so the order of the two queues never flips and neither takes back);
  ``LessThanInitialShare``, the gang's queue with the gang is strictly below the victim's queue
  before the stop (needed where one gang holds most of its queue's GPUs: the first would never
  stop it). Cost is not weighed here: the share is owed, as Kueue owes it.

Pure: the caller gives the running gangs (with their queue, run start, attained service,
remaining time, checkpoint interval and grace), the teams and ``now``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from ringleader.scheduler.order import OrderConfig, OrderKey, QueueOrder, Service, las_level, order_key
from ringleader.scheduler.teams import DEFAULT_QUEUE, Teams, queue_of
from ringleader.scheduler.types import JobRequest, Preemption, RunningGang, approx_duration


class ShareRule(StrEnum):
    """Kueue's fair-sharing preemption strategies (its configuration's ``fairSharing.preemptionStrategies``)."""

    FINAL = "LessThanOrEqualToFinalShare"
    INITIAL = "LessThanInitialShare"


# What starting a stopped gang again costs beyond its grace (its ranks started, its checkpoint
# loaded) on a cluster where no restart was measured yet: a guess (BENCHMARKS.md measured 29 to
# 88 s on a loaded 2-core box); a move or a stop for order must gain more than it.
DEFAULT_RESTART_S = 30.0


@dataclass(frozen=True)
class ReorderConfig:
    """The knobs of preemption for order and fair share, set before any benchmark ran: a gang
    runs at least ``min_run_s`` (30 min) before it may be stopped for either; a restart costs
    ``restart_s`` (loading a checkpoint and starting the ranks again: what the cluster measured,
    as moves count it, ``DEFAULT_RESTART_S`` until it did) beside the grace and the work lost;
    fair share follows Kueue's default strategies."""

    for_order: bool = True
    for_fair_share: bool = True
    min_run_s: float = 1800.0
    restart_s: float = DEFAULT_RESTART_S
    share_rules: tuple[ShareRule, ...] = (ShareRule.FINAL, ShareRule.INITIAL)
    # for order, stop only where it pays (off: as Tiresias, whenever the order ranks it after)
    weighs_cost: bool = True

    def __post_init__(self) -> None:
        if not (self.min_run_s >= 0 and self.restart_s >= 0 and math.isfinite(self.min_run_s)):
            raise ValueError(f"need min_run_s >= 0 and restart_s >= 0, got {self.min_run_s}, {self.restart_s}")


DEFAULT_REORDER = ReorderConfig()
NO_REORDER = ReorderConfig(for_order=False, for_fair_share=False)


@dataclass(frozen=True)
class Candidates:
    """Gangs one rule lets a waiting gang stop: ``rule`` "order" or a fair-share strategy,
    ``victims`` by name, ``prefer`` which to take
    first (smallest key), ``accepts`` whether a chosen set keeps the rule as a whole, ``pays``
    whether its cost is weighed (order only), ``why`` the words for the victims' events."""

    rule: str
    victims: Mapping[str, RunningGang]
    prefer: Callable[[RunningGang], tuple[float, ...]]
    accepts: Callable[[tuple[RunningGang, ...]], bool]
    weighs_cost: bool
    why: Callable[[Preemption], str]


def settled(gang: RunningGang, now: float, config: ReorderConfig) -> bool:
    """Whether ``gang`` may be stopped for order or fair share: preemptible, and running for at
    least ``min_run_s`` since its run started (a run of unknown start never is)."""
    return gang.preemptible and gang.started_s is not None and now - gang.started_s >= config.min_run_s


def restart_cost_s(gang: RunningGang, now: float, config: ReorderConfig) -> float:
    """What stopping ``gang`` now costs it: its grace, the restart and the work since its last
    checkpoint (its whole run where its checkpoints are unknown)."""
    run = max(now - gang.started_s, 0.0) if gang.started_s is not None else 0.0
    lost = run % gang.checkpoint_s if gang.checkpoint_s else run
    return gang.grace_s + config.restart_s + lost


def job_run_s(job: JobRequest, order: QueueOrder, service: Service, now: float, orders: OrderConfig,
              config: ReorderConfig) -> float:  # fmt: skip
    """How long the waiting gang would hold the victims' GPUs before they could run again: its
    predicted remaining time; for LAS at most until its attained service reaches its level's
    threshold (then it ranks with them); at least ``min_run_s`` (nobody may stop it before)."""
    remaining = service.remaining_s if service.remaining_s is not None else math.inf
    if order is QueueOrder.LAS and job.total_gpus:
        thresholds = orders.las_thresholds
        level = las_level(service, now, orders)
        if level < len(thresholds):
            remaining = min(remaining, max(thresholds[level] - service.attained_gpu_s, 0.0) / job.total_gpus)
    return max(remaining, config.min_run_s)


def pays(run_s: float, wait_s: float, victims: tuple[RunningGang, ...], now: float, config: ReorderConfig) -> bool:
    """Whether stopping ``victims`` for a gang that would otherwise wait ``wait_s`` and then
    runs ``run_s`` lowers the sum of their completion times: its gain (the wait less the stop)
    above their loss (each waits its run, and pays its restart cost)."""
    stop = max((v.grace_s for v in victims), default=0.0)
    loss = sum(run_s + restart_cost_s(v, now, config) for v in victims)
    return wait_s - stop > loss


def gang_key(order: QueueOrder, gang: RunningGang, now: float, orders: OrderConfig) -> OrderKey:
    """Where a running gang would rank in its queue's order (it is not waiting: no promotion)."""
    service = Service(gang.attained_gpu_s, None, 0.0, gang.remaining_s)
    return order_key(order, float(gang.priority), service, now, orders)


def for_order(job: JobRequest, order: QueueOrder, service: Service, running: Mapping[str, RunningGang], now: float,
              orders: OrderConfig, config: ReorderConfig) -> Candidates | None:  # fmt: skip
    """The gangs of ``job``'s queue that its order ranks after it (None for FIFO, or off)."""
    if order is QueueOrder.FIFO or not config.for_order:
        return None
    key = order_key(order, float(job.priority), service, now, orders)
    queue = queue_of(job)
    victims = {name: g for name, g in running.items()
               if (g.queue or DEFAULT_QUEUE) == queue and g.priority <= job.priority and settled(g, now, config)
               and gang_key(order, g, now, orders) > key}  # fmt: skip
    if not victims:
        return None

    def prefer(g: RunningGang) -> tuple[float, ...]:  # the most service, or the most time left, first
        if order is QueueOrder.LAS:
            return (g.priority, -g.attained_gpu_s)
        return (g.priority, -(g.remaining_s if g.remaining_s is not None else math.inf))

    if order is QueueOrder.LAS:
        mine = f"attained {service.attained_gpu_s / 3600:.1f} GPU-h (level {las_level(service, now, orders)})"
    else:
        mine = f"{approx_duration(service.remaining_s)} left" if service.remaining_s is not None else "waited long"

    def why(preemption: Preemption) -> str:
        return (f"for order: queue {queue} is ordered {order.value} and job {job.name} has {mine}, ranked before "
                f"this job; stopping it pays (counting its restart)")  # fmt: skip

    return Candidates("order", victims, prefer, lambda chosen: True, config.weighs_cost, why)


def queue_share(teams: Teams, name: str, less: int = 0) -> float:
    """GPUs queue ``name`` holds (less ``less``) per weight; infinite for a weight of 0."""
    queue = teams.queues.get(name)
    weight = queue.weight if queue is not None else 1.0
    held = sum(teams.use.get(name, {}).values()) - less
    return held / weight if weight > 0 else math.inf


def for_fair_share(job: JobRequest, teams: Teams | None, running: Mapping[str, RunningGang], now: float,
                   config: ReorderConfig, rule: ShareRule) -> Candidates | None:  # fmt: skip
    """The gangs of ``job``'s cohort's other queues that ``rule`` lets it stop (None: no cohort,
    or fair-share preemption off)."""
    queue = teams.queue(job) if teams is not None else None
    if teams is None or queue is None or queue.cohort is None or not config.for_fair_share:
        return None
    members = {q.name for q in teams.cohort(queue)} - {queue.name}
    mine = queue_share(teams, queue.name, -job.total_gpus)  # with the gang started

    def gpus(gang: RunningGang) -> int:
        return sum(teams.gangs[gang.name][1].values())

    def keeps(owner: str, stopped: int) -> bool:
        if rule is ShareRule.FINAL:
            return queue_share(teams, owner, stopped) >= mine
        return mine < queue_share(teams, owner)

    def may_stop(name: str, gang: RunningGang) -> bool:
        owner = teams.gangs.get(name, ("", {}))[0]
        return (owner in members and gang.priority <= job.priority and settled(gang, now, config)
                and keeps(owner, gpus(gang)))  # fmt: skip

    victims = {name: gang for name, gang in running.items() if may_stop(name, gang)}
    if not victims:
        return None

    def accepts(chosen: tuple[RunningGang, ...]) -> bool:
        stopped: dict[str, int] = {}
        for gang in chosen:
            owner = teams.gangs[gang.name][0]
            stopped[owner] = stopped.get(owner, 0) + gpus(gang)
        return all(keeps(owner, count) for owner, count in stopped.items())

    def why(preemption: Preemption) -> str:
        cohort = [q for q in teams.cohort(queue)]
        held = sum(sum(teams.use.get(q.name, {}).values()) for q in cohort) or 1
        weights = sum(q.weight for q in cohort) or 1.0
        owners = sorted({teams.gangs[v.name][0] for v in preemption.victims})
        parts = [f"queue {o} at {100 * sum(teams.use.get(o, {}).values()) / held:.0f}% of the GPUs cohort "
                 f"{queue.cohort} holds, above its {100 * teams.queues[o].weight / weights:.0f}% share" for o in owners]
        return (f"fair share ({rule.value}): " + "; ".join(parts) + f"; queue {queue.name} at "
                f"{100 * sum(teams.use.get(queue.name, {}).values()) / held:.0f}% of its "
                f"{100 * queue.weight / weights:.0f}%")  # fmt: skip

    def prefer(g: RunningGang) -> tuple[float, ...]:  # the queue furthest above its share first
        return (g.priority, -queue_share(teams, teams.gangs[g.name][0]))

    return Candidates(rule.value, victims, prefer, accepts, False, why)


def candidates(
    job: JobRequest,
    order: QueueOrder,
    service: Service,
    running: Mapping[str, RunningGang],
    teams: Teams | None,
    now: float,
    orders: OrderConfig,
    config: ReorderConfig,
) -> list[Candidates]:
    """Each rule's victims for ``job``, in the order they are tried: order, then fair share by
    each strategy in turn (the next only where the one before gives no placement)."""
    found = [for_order(job, order, service, running, now, orders, config)]
    found += [for_fair_share(job, teams, running, now, config, rule) for rule in config.share_rules]
    return [c for c in found if c is not None]


def may_reorder(job: JobRequest, order: QueueOrder, running: Mapping[str, RunningGang], teams: Teams | None,
                config: ReorderConfig) -> bool:  # fmt: skip
    """Cheap: whether any rule here could stop a gang for ``job`` (a gang in its queue ordered
    las or srtf, or a cohort for its queue)."""
    if not running:
        return False
    if config.for_order and order is not QueueOrder.FIFO:
        queue = queue_of(job)
        if any((g.queue or DEFAULT_QUEUE) == queue for g in running.values()):
            return True
    team = teams.queue(job) if teams is not None else None
    return config.for_fair_share and team is not None and team.cohort is not None
