"""Job and instance states, and the one table of allowed job transitions."""

from __future__ import annotations

import enum


class JobStatus(enum.Enum):
    """Lifecycle of a job. GPUs are allocated to a job exactly while it is RUNNING."""

    QUEUING = "QUEUING"
    """Recorded, not yet looked at by a scheduling pass (submit runs one in the same transaction,
    so this is seen only while a pass is deferred)."""

    PENDING = "PENDING"
    """Waiting for GPUs: the last scheduling pass could not place the whole gang; the reason,
    with numbers, is the job's latest event."""

    RUNNING = "RUNNING"
    """Placed: its GPUs are allocated; where it is in being started, watched or stopped is its
    ``Launch``."""

    SUCCEEDED = "SUCCEEDED"
    """Every instance exited with code 0; its GPUs are free."""

    FAILED = "FAILED"
    """An instance failed (the earliest failure is the root cause), its siblings were stopped,
    or its processes were lost; its GPUs are free."""

    def is_terminal(self) -> bool:
        return self in (JobStatus.SUCCEEDED, JobStatus.FAILED)


# The only moves a job may make; store.update_job refuses anything else. A queuing or pending
# job only ever moves to RUNNING (or PENDING again): `delete` removes it, it never "fails". A
# running job moves back to QUEUING only when a gang of higher priority preempted it.
TRANSITIONS: dict[JobStatus, frozenset[JobStatus]] = {
    JobStatus.QUEUING: frozenset({JobStatus.PENDING, JobStatus.RUNNING}),
    JobStatus.PENDING: frozenset({JobStatus.RUNNING}),
    # back to QUEUING: requeued once preempted and stopped (Launch.PREEMPTING)
    JobStatus.RUNNING: frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.QUEUING}),
    JobStatus.SUCCEEDED: frozenset(),
    JobStatus.FAILED: frozenset(),
}


def can_move(old: JobStatus, new: JobStatus) -> bool:
    return old == new or new in TRANSITIONS[old]


class Launch(enum.Enum):
    """Where a RUNNING job is between its placement and its end, as the engine that keeps time
    for it (the embedded engine's agent) records it: what a new agent does with a job the last
    one left follows from this alone."""

    PLACED = "placed"
    """GPUs allocated, no process started: the agent starts it."""

    STARTING = "starting"
    """An agent holds it and starts its ranks (it writes the job's plan before the first): with
    no plan written nothing was started, and it is started afresh; with one, it is adopted."""

    STARTED = "started"
    """Every rank was started and recorded: an agent that finds it watches what is alive."""

    STOPPING = "stopping"
    """A delete was requested: every rank gets SIGTERM, the grace, then SIGKILL, and the job is
    forgotten."""

    PREEMPTING = "preempting"
    """A gang of higher priority takes its GPUs: every rank gets SIGTERM, the grace, then
    SIGKILL, and the job is requeued (QUEUING, its restart count raised) to resume from its own
    checkpoint when it runs again."""


# The only moves of a running job's launch; store.update_job refuses anything else. A delete or a
# preemption may come at any point; an agent lost while starting leaves STARTING for the next one.
# A requeued job has no launch until it is placed again.
LAUNCH_TRANSITIONS: dict[Launch, frozenset[Launch]] = {
    Launch.PLACED: frozenset({Launch.STARTING, Launch.STOPPING, Launch.PREEMPTING}),
    Launch.STARTING: frozenset({Launch.STARTED, Launch.STOPPING, Launch.PREEMPTING}),
    Launch.STARTED: frozenset({Launch.STOPPING, Launch.PREEMPTING}),
    Launch.PREEMPTING: frozenset({Launch.STOPPING}),  # a delete while it stops: it is forgotten
    Launch.STOPPING: frozenset(),
}


def can_launch_move(old: Launch, new: Launch) -> bool:
    return old == new or new in LAUNCH_TRANSITIONS[old]


class InstanceStatus(enum.Enum):
    """One process of a job (the mpirun launcher or a worker)."""

    PENDING = "Pending"
    """Placed, process not started yet."""

    RUNNING = "Running"
    """Its process is alive."""

    SUCCEEDED = "Succeeded"
    """Exited with code 0."""

    FAILED = "Failed"
    """Exited with a non-zero code, or was lost."""

    STOPPED = "Stopped"
    """Stopped by ringleader because a sibling failed or the job was deleted."""

    def is_terminal(self) -> bool:
        return self not in (InstanceStatus.PENDING, InstanceStatus.RUNNING)
