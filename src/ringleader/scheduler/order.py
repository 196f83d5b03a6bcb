"""Queue order within a priority: first in first out, least attained GPU service, or shortest
predicted remaining time, chosen per team queue.

- ``fifo``: effective priority (priority and age: ``queue.effective_priority``), then submit
  order. The default.
- ``las``: least attained service, Tiresias' discretized 2D-LAS (Gu et al., NSDI'19): a job's
  attained GPU service (GPU-seconds it ran, a preempted run's too) puts it in one of a few
  levels by ``OrderConfig.las_thresholds``; lower levels go first, first in first out
  within one. A job that has waited ``starve_limit_s`` since it last ran (or was submitted)
  is promoted to the first level, and one that has waited ``promote_knob`` times its last
  run's length too (Tiresias' STARVELIMIT knob), so no stream of new jobs starves it. It needs
  no estimate of run time.
- ``srtf``: shortest predicted remaining time first (the job's ``remaining_s``, else its
  predicted work, else its time limit; jobs without any go last), with a bound: a job that has
  waited ``max_passed_over_s`` since it last entered the queue goes before every job that has
  not, first in first out among them, so none is passed over longer than that.

The job's priority ranks before the order in all three: an order never lets a job of lower
priority pass one of higher in its queue. Between queues, fair share merges the queues' orders
(``teams.fair_merge``). What the orders read (attained
service, when a job last entered the queue, the predicted remaining time) are fields of the
queued job: the host says them, nothing here reads a clock.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from ringleader.reference import reference


class QueueOrder(StrEnum):
    """How a queue orders the jobs of one priority."""

    FIFO = "fifo"  # submit order (with age and fair share)
    LAS = "las"  # least attained GPU service first, in levels, promoted after a long wait
    SRTF = "srtf"  # shortest predicted remaining time first, none passed over beyond a bound


@dataclass(frozen=True)
class OrderConfig:
    """The orders' knobs. LAS's thresholds are Tiresias' simulator's (reference.toml
    ``[queue_orders]``: 3,250, 7,200 and 18,000 GPU-seconds); the starve limits and the pass-over
    bound are ringleader's choices, set before any benchmark ran."""

    # None: Tiresias' (``tiresias_thresholds``), read when a job is first ranked by them, not at
    # import: a process that ranks none (the agent starting a job) does not parse reference.toml.
    las_thresholds_gpu_s: tuple[float, ...] | None = None
    starve_limit_s: float | None = 4 * 3600.0  # promoted to the first level after this wait (None: never)
    promote_knob: float | None = None  # promoted after this many times its last run (Tiresias; None: never)
    max_passed_over_s: float = 4 * 3600.0  # srtf: waited this long, it goes before all that have not

    def __post_init__(self) -> None:
        steps = self.las_thresholds_gpu_s or ()
        if any(not (t > 0 and math.isfinite(t)) for t in steps) or list(steps) != sorted(steps):
            raise ValueError(f"LAS thresholds must be positive and ascending, got {steps}")
        if not self.max_passed_over_s > 0:
            raise ValueError(f"max_passed_over_s must be > 0, got {self.max_passed_over_s}")

    @property
    def las_thresholds(self) -> tuple[float, ...]:
        return self.las_thresholds_gpu_s if self.las_thresholds_gpu_s is not None else tiresias_thresholds()


@dataclass(frozen=True)
class Service:
    """What the orders know of a queued job beyond its priority and submit order."""

    attained_gpu_s: float = 0.0  # GPU-seconds its runs held so far (a preempted run's too)
    queued_since_s: float | None = None  # when it last entered the queue (None: its submit time)
    last_run_s: float = 0.0  # how long its last run lasted (0: it never ran)
    remaining_s: float | None = None  # predicted seconds of work left (None: unknown)


def tiresias_thresholds() -> tuple[float, ...]:
    """Tiresias' LAS thresholds in GPU-seconds (reference.toml ``[queue_orders]``)."""
    return tuple(float(t) for t in reference()["queue_orders"]["las_thresholds_gpu_s"])


NO_SERVICE = Service()  # a job that never ran, in the queue since its submit, of unknown length
DEFAULT_ORDERS = OrderConfig()


def service_of_runs(gpus: int, runs: Iterable[tuple[float, float]]) -> Service:
    """What the orders know of a queued job from the runs it ended ((start, end) pairs, on one
    clock, as every engine records them): the GPU-seconds they held, when the last one ended (it
    entered the queue again then) and how long it lasted. ``NO_SERVICE`` for a job that never
    ran; its remaining time is left to the queue (its predicted work or time limit)."""
    ended = sorted((float(start), float(end)) for start, end in runs if end > start)
    if not ended:
        return NO_SERVICE
    attained = sum(gpus * (end - start) for start, end in ended)
    start, end = ended[-1]
    return Service(attained, end, end - start)


def expected_free(end: float, now: float | None) -> float:
    """When a gang expected to end at ``end`` is expected to free its GPUs, seen at ``now``: at
    ``end``, or once that has passed and it still runs, as far past now as it has overrun so far:
    the lifetime rule of Harchol-Balter and Downey (SIGMETRICS 1996: a process that has run t runs
    another t with probability one half), applied to the overrun. Taken as freeing this instant
    instead, a late gang looked about to free at every pass: a job waited for it "~0 s" pass
    after pass, and SRTF ranked it first, never to be stopped."""
    if now is not None and end < now:
        return 2 * now - end
    return end


def running_service(
    gpus: int, ended: Service, started: float | None, now: float, end: float | None
) -> tuple[float | None, float, float | None]:
    """What preemption for order and fair share reads of a gang that holds GPUs (``Holding``'s
    started_s, attained_gpu_s, remaining_s): when its run started, the GPU-seconds of all its
    runs (the ended ones, ``ended``, and this one so far) and its time left to its expected
    ``end`` (None: unknown), as long as it has overrun once past it (``expected_free``). A gang
    whose run has not started has none: nothing stops it for order or fair share. Its
    checkpoints are its own: the queue assumes none."""
    if started is None:
        return None, 0.0, None
    attained = ended.attained_gpu_s + gpus * max(now - started, 0.0)
    return started, attained, None if end is None else expected_free(end, now) - now


def las_level(service: Service, now: float | None, config: OrderConfig) -> int:
    """The LAS level of a job: how many thresholds its attained GPU service reached, 0 once it
    has waited past a starve limit since it last entered the queue."""
    if now is not None and service.queued_since_s is not None and service.attained_gpu_s > 0:
        waited = now - service.queued_since_s
        if config.starve_limit_s is not None and waited >= config.starve_limit_s:
            return 0
        if (
            config.promote_knob is not None
            and service.last_run_s > 0
            and waited >= config.promote_knob * service.last_run_s
        ):
            return 0
    return sum(1 for t in config.las_thresholds if service.attained_gpu_s >= t)


def passed_over_too_long(service: Service, now: float | None, config: OrderConfig) -> bool:
    """Whether a job has waited ``max_passed_over_s`` since it last entered the queue."""
    if now is None or service.queued_since_s is None:
        return False
    return now - service.queued_since_s >= config.max_passed_over_s


OrderKey = tuple[float, int, float]


def order_key(order: QueueOrder, ranked: float, service: Service, now: float | None, config: OrderConfig) -> OrderKey:
    """The sort key of a job within its queue order, before its submit order: ``ranked`` is its
    priority as the order weighs it (with age for FIFO, without for the others, whose own rule
    keeps the old from starving)."""
    if order is QueueOrder.LAS:
        return (-ranked, las_level(service, now, config), 0.0)
    if order is QueueOrder.SRTF:
        if passed_over_too_long(service, now, config):
            return (-ranked, 0, 0.0)
        remaining = service.remaining_s if service.remaining_s is not None else math.inf
        return (-ranked, 1, remaining)
    return (-ranked, 0, 0.0)
