"""Read models the API returns and the CLI renders: jobs, instances, events, submit results."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ringleader.jobs.codec import reservation_from_dict
from ringleader.jobs.spec import JobSpec
from ringleader.jobs.states import JobStatus
from ringleader.scheduler.teams import DEFAULT_QUEUE

if TYPE_CHECKING:
    from ringleader.scheduler import Decision

def rfc3339(ts: float | None) -> str | None:
    """A timestamp as JSON and YAML show it, like kubectl and arena: RFC 3339 in UTC
    ("2026-11-23T13:39:42.123456Z"); microseconds keep the order of close events."""
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


# The times a stored plan keeps on the engine's clock, in seconds since the epoch, by the part
# that holds them: JSON and YAML show them in RFC 3339, named without their "_s".
PLAN_TIMES = {"reservation": ("start_s", "end_s"), "now": ("start_s", "finish_s"), "wait": ("start_s", "finish_s"),
              "at_risk": ("now_finish_s", "wait_finish_s")}  # fmt: skip


def shown_plan(plan: dict[str, Any] | None) -> dict[str, Any] | None:
    """A stored plan (``Decision.as_dict``) as `-o json` shows it: a reservation's start
    and end, and a start rule's starts and finishes, in RFC 3339 as every other time."""
    if not plan:
        return plan
    out = dict(plan)
    if plan.get("reservation"):
        out["reservation"] = _in_rfc3339(plan["reservation"], PLAN_TIMES["reservation"])
    when = plan.get("when")
    if when:
        out["when"] = {**when, **{part: _in_rfc3339(when[part], PLAN_TIMES[part])
                                  for part in ("now", "wait", "at_risk") if when.get(part)}}  # fmt: skip
    return out


def _in_rfc3339(part: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    return {(k.removesuffix("_s") if k in keys else k): (rfc3339(v) if k in keys else v) for k, v in part.items()}


def reservation_line(job: str, stored: dict[str, Any], now: float | None = None) -> str:
    """A pending gang's stored reservation as a person reads it, its start counted from ``now``:
    "reserved GPUs 0-7 on node-a, expected start in ~14 min"."""
    reservation = reservation_from_dict(job, stored, time.time() if now is None else now)
    return reservation.describe() if reservation else ""


@dataclass(frozen=True)
class InstanceView:
    name: str
    role: str  # "launcher" or "worker"
    status: str
    exit_code: int | None
    node: str | None
    gpus: tuple[int, ...]
    gpu_requested: int
    is_chief: bool
    pid: int | None
    started_at: float | None
    ended_at: float | None

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "gpus": list(self.gpus), "started_at": rfc3339(self.started_at),
                "ended_at": rfc3339(self.ended_at)}  # fmt: skip


@dataclass(frozen=True)
class GpuUsage:
    """One GPU as NVML or `nvidia-smi --query-gpu` reads it now (arena's GPU(DutyCycle) and
    GPU_MEMORY): the share of the last sample period a kernel ran, and memory in MiB."""

    gpu: int  # the node's GPU index
    duty_cycle_pct: float
    memory_used_mib: float
    memory_total_mib: float

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


# Node statuses every engine answers with (arena's top node STATUS).
READY, NOT_READY, UNREACHABLE, DRAINED, CORDONED = "Ready", "NotReady", "Unreachable", "Drained", "Cordoned"


@dataclass(frozen=True)
class NodeHealth:
    """A node as its engine sees it now (arena's top node STATUS and UNHEALTHY): Ready, NotReady,
    Unreachable, Drained (Slurm) or Cordoned (Kubernetes), with the engine's own reason when not
    Ready; how many of its GPUs are unhealthy, None where that cannot be known."""

    node: str
    status: str
    reason: str = ""
    unhealthy_gpus: int | None = None
    checked: str = ""  # what the health figure comes from, e.g. "NVML"

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "reason": self.reason, "unhealthy_gpus": self.unhealthy_gpus,
                "health_from": self.checked}  # fmt: skip


@dataclass(frozen=True)
class EventView:
    at: float
    kind: str
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "at": rfc3339(self.at)}


@dataclass(frozen=True)
class JobView:
    """One job as `get` shows it; ``placement`` is the scheduler's decision (JSON form)."""

    name: str
    status: JobStatus
    priority: int
    trainer: str
    created_at: float
    started_at: float | None
    ended_at: float | None
    spec: JobSpec
    reason: str | None = None
    placement: dict[str, Any] | None = None
    instances: tuple[InstanceView, ...] = ()
    events: tuple[EventView, ...] = ()
    has_instances: bool = True  # False when listed without them (list_jobs)
    restarts: int = 0  # times it was preempted and requeued
    namespace: str | None = None  # the Kubernetes namespace it is in; None on engines without them
    # why it waits, in one word (scheduler.types.ReasonCode: squeue's REASON); None unless pending
    reason_code: str | None = None
    # Where what runs beside it answers, by name: ("TensorBoard", "http://10.0.0.5:31234") (--tensorboard).
    endpoints: tuple[tuple[str, str], ...] = ()

    @property
    def queue(self) -> str:
        """The team queue it is in (`submit --queue`; "default" without one)."""
        return self.spec.queue or DEFAULT_QUEUE

    @property
    def duration(self) -> float | None:
        """Running time so far (or in all, once ended); None before it starts."""
        if self.started_at is None:
            return None
        return (self.ended_at or time.time()) - self.started_at

    @property
    def age(self) -> float:
        """Time since the job was created (kubectl's and arena's AGE), whatever its state."""
        return time.time() - self.created_at

    @property
    def summary(self) -> str | None:
        """The scheduler's one-line decision: policy, nodes and GPU ids, bottleneck."""
        return (self.placement or {}).get("summary")

    @property
    def bottleneck(self) -> str | None:
        chosen = (self.placement or {}).get("chosen")
        return chosen["bottleneck"] if chosen else None

    @property
    def nodes(self) -> list[str]:
        chosen = (self.placement or {}).get("chosen")
        return list(chosen["nodes"]) if chosen else []

    @property
    def gpus_requested(self) -> int:
        return self.spec.workers * self.spec.gpus_per_worker

    @property
    def gpus_allocated(self) -> int:
        """GPUs held now: the placement's while RUNNING (read from the decision, no instances)."""
        chosen = (self.placement or {}).get("chosen")
        if self.status is not JobStatus.RUNNING or not chosen:
            return 0
        return sum(len(w["gpus"]) for w in chosen["workers"])

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, **({"namespace": self.namespace} if self.namespace else {}),
            "status": self.status.value, "priority": self.priority,
            "trainer": self.trainer, "created_at": rfc3339(self.created_at),
            "started_at": rfc3339(self.started_at), "ended_at": rfc3339(self.ended_at),
            "duration_s": self.duration, "reason": self.reason, "reason_code": self.reason_code,
            "queue": self.queue, "restarts": self.restarts,
            "workers": self.spec.workers, "gpus_per_worker": self.spec.gpus_per_worker,
            "topology_aware": self.spec.topology_aware, "command": self.spec.command,
            "image": self.spec.image, "model": self.spec.model,
            **({"container": asdict(self.spec.container)} if self.spec.container.given() else {}),
            "request": self.spec.shown().to_dict(),  # the whole spec, as every engine keeps it
            "bottleneck": self.bottleneck, "placement": shown_plan(self.placement),
            "gpus_requested": self.gpus_requested, "gpus_allocated": self.gpus_allocated,
            **({"instances": [i.to_dict() for i in self.instances]} if self.has_instances else {}),
            "events": [e.to_dict() for e in self.events],
            **({"endpoints": dict(self.endpoints)} if self.endpoints else {}),
        }  # fmt: skip


@dataclass(frozen=True)
class SubmitResult:
    """The decision for a submitted job, its plan in JSON form, and (unless a dry run) the job."""

    decision: Decision
    plan: dict[str, Any]
    dry_run: bool
    job: JobView | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"dry_run": self.dry_run, "plan": shown_plan(self.plan), **self.extra}
        if self.job is not None:
            out["job"] = self.job.to_dict()
        return out


