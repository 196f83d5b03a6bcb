"""The one interface between ringleader's commands and where a job's ranks run.

Every engine — the embedded one (SQLite state on this machine; ranks on this host or on ssh
hosts), Slurm, Kubernetes — answers the same calls with the same read models, so `submit`,
`get`, `list`, `logs`, `delete` and `top` render identically whatever runs the job. Placement is
always the pure ``ringleader.scheduler.place()`` over the engine's own cluster snapshot.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ringleader.jobs.spec import JobSpec
from ringleader.jobs.states import JobStatus
from ringleader.jobs.support import Support
from ringleader.jobs.views import GpuUsage, JobView, NodeHealth, SubmitResult

if TYPE_CHECKING:  # the scheduler is imported by the calls that place: listing jobs does not need it
    from ringleader.jobs.queues import QueueView
    from ringleader.scheduler import ClusterState
    from ringleader.scheduler.teams import TeamQueue

# The namespace `list -A` asks an engine with namespaces for: all of them (no namespace has this name).
ALL_NAMESPACES = "*"


class NodeReads(Protocol):
    """The cluster as the engine sees it: its nodes, their health and their GPUs' use."""

    def nodes(self) -> ClusterState:
        """The cluster as the engine sees it now: nodes, topologies and GPUs in use (by any
        job, including jobs started outside ringleader)."""
        ...

    def node_health(self, names: Sequence[str] | None = None) -> dict[str, NodeHealth]:
        """Each node's status now (Ready, NotReady, Unreachable, Drained, Cordoned, with the
        engine's reason) and how many of its GPUs are unhealthy (None where that cannot be
        known), from the engine's own truth; only ``names`` when given."""
        ...

    def gpu_usage(self, name: str) -> dict[str, tuple[GpuUsage, ...] | None]:
        """Each instance's GPUs now (duty cycle, memory), None where they cannot be read."""
        ...


class JobReads(Protocol):
    """Jobs as the shared read models."""

    def get(self, name: str) -> JobView: ...

    def list_jobs(self, statuses: Sequence[JobStatus] | None = None, with_instances: bool = False) -> list[JobView]: ...

    def wait(self, name: str, timeout: float | None = None) -> JobView: ...

    def prediction(self, job: JobView) -> dict[str, Any] | None: ...


class JobLogs(Protocol):
    """Each instance's log."""

    def logs(
        self, name: str, instance: str | None = None, tail: int | None = None, timestamps: bool = False
    ) -> str: ...

    def follow(
        self, name: str, instance: str | None = None, tail: int | None = None, timestamps: bool = False
    ) -> Iterator[str]:
        """The log so far, then new lines as they come, until the job ends."""
        ...


@runtime_checkable
class Engine(NodeReads, JobReads, JobLogs, Protocol):
    """Start a placed gang and stop it, behind the reads every engine answers. Errors a user can
    act on are ``ringleader.errors``; a submit goes through ``jobs.submit.submit_job`` (the
    embedded and Slurm engines) over the engine's own verbs."""

    notes: list[str]  # one-line notes for the user, printed after a successful command
    supports: Support  # what it does beyond jobs; anything else is refused before it is tried

    def submit(self, spec: JobSpec, dry_run: bool = False) -> SubmitResult:
        """Place the gang with ``place()`` and start all of it, or queue it whole; with
        ``dry_run`` only show the decision."""
        ...

    def delete(self, names: Sequence[str], now: bool = False) -> list[str]:
        """Stop every rank of each job on every host, free its GPUs, forget it: SIGTERM, a grace
        period to checkpoint and exit, then SIGKILL; ``now``: SIGKILL at once."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class TeamQueues(Protocol):
    """Team queues (scheduler/teams.py), which every engine keeps."""

    def create_queue(self, queue: TeamQueue, overwrite: bool = False) -> None:
        """Keep ``queue`` (replace one of its name with ``overwrite``) and run the queue's pass."""
        ...

    def delete_queue(self, name: str) -> None:
        """Forget a queue that no waiting or running job is in."""
        ...

    def queues(self) -> list[QueueView]:
        """Every queue as `queue list` shows it, the default queue last."""
        ...


@runtime_checkable
class NodeCordons(Protocol):
    """Nodes kept out of placement, by hand or once blamed for failures (every engine's)."""

    def cordon_node(self, node: str, reason: str) -> None: ...

    def uncordon_node(self, node: str) -> None:
        """End a cordon, forget the faults blamed on ``node``, and run the queue's pass."""
        ...


@runtime_checkable
class PreviousLogs(Protocol):
    """`logs --previous` (``Support.previous_logs``): what an instance wrote in the job's run
    before its last requeue."""

    def previous_logs(
        self, name: str, instance: str | None = None, tail: int | None = None, timestamps: bool = False
    ) -> str: ...


@runtime_checkable
class WaitingJobs(Protocol):
    """Changes to a job that waits (``jobs/pending.py``'s rules), each followed by the queue's pass."""

    def hold(self, name: str) -> None:
        """Keep a waiting job from starting (reason Held) until ``release``."""
        ...

    def release(self, name: str) -> None: ...

    def set_priority(self, name: str, priority: int) -> None:
        """A waiting job's new priority: its place in line follows."""
        ...
