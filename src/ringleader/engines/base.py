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
    from ringleader.scheduler import ClusterState


@runtime_checkable
class Engine(Protocol):
    """Start a placed gang, report its instances' states and exit codes, stream their logs,
    stop it; read a cluster snapshot. Errors a user can act on are ``ringleader.errors``."""

    notes: list[str]  # one-line notes for the user, printed after a successful command
    supports: Support  # what it does beyond jobs; anything else is refused before it is tried

    def nodes(self) -> ClusterState:
        """The cluster as the engine sees it now: nodes, topologies and GPUs in use (by any
        job, including jobs started outside ringleader)."""
        ...

    def node_health(self, names: Sequence[str] | None = None) -> dict[str, NodeHealth]:
        """Each node's status now (Ready, NotReady, Unreachable, Drained, Cordoned, with the
        engine's reason) and how many of its GPUs are unhealthy (None where that cannot be
        known), from the engine's own truth; only ``names`` when given."""
        ...

    def submit(self, spec: JobSpec, dry_run: bool = False) -> SubmitResult:
        """``prepare_submit`` first (the same checks, rewrites and notes on every engine), then
        place the gang with ``place()`` and start all of it, or queue it whole; with ``dry_run``
        only show the decision."""
        ...

    def get(self, name: str) -> JobView: ...

    def list_jobs(self, statuses: Sequence[JobStatus] | None = None, with_instances: bool = False) -> list[JobView]: ...

    def logs(
        self, name: str, instance: str | None = None, tail: int | None = None, timestamps: bool = False
    ) -> str: ...

    def follow(
        self, name: str, instance: str | None = None, tail: int | None = None, timestamps: bool = False
    ) -> Iterator[str]:
        """The log so far, then new lines as they come, until the job ends."""
        ...

    def delete(self, names: Sequence[str], now: bool = False) -> list[str]:
        """Stop every rank of each job on every host, free its GPUs, forget it: SIGTERM, a grace
        period to checkpoint and exit, then SIGKILL; ``now``: SIGKILL at once."""
        ...

    def wait(self, name: str, timeout: float | None = None) -> JobView: ...

    def prediction(self, name: str) -> dict[str, Any] | None: ...

    def gpu_usage(self, name: str) -> dict[str, tuple[GpuUsage, ...] | None]:
        """Each instance's GPUs now (duty cycle, memory), None where they cannot be read."""
        ...

    def close(self) -> None: ...
