"""Queue order and one scheduling pass: priority first, then FIFO; gangs commit all or nothing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ringleader.scheduler.framework import place
from ringleader.scheduler.types import ClusterState, Decision, JobRequest


@dataclass(frozen=True)
class QueuedJob:
    job: JobRequest
    seq: int  # submit order (FIFO tie-break)


def queue_order(jobs: Sequence[QueuedJob]) -> list[QueuedJob]:
    return sorted(jobs, key=lambda q: (-q.job.priority, q.seq))


def schedule_queue(
    state: ClusterState, pending: Sequence[QueuedJob], policy: str | None = None
) -> tuple[ClusterState, list[Decision]]:
    """Try every pending job in queue order on a working copy of ``state``.

    A job that fits is committed to the copy before the next is tried, so two gangs never get
    the same GPU. A job that does not fit does not block smaller ones behind it (backfill);
    the caller persists the returned state only as a whole.
    """
    decisions = []
    for queued in queue_order(pending):
        decision = place(state, queued.job, policy)
        if decision.placement is not None:
            state = state.with_placement(decision.placement)
        decisions.append(decision)
    return state, decisions
