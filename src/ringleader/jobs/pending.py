"""What may change of a job that waits, the same on every engine: hold it, release it, change
its priority (Slurm's `scontrol hold`, `scontrol release`, `scontrol update Priority=`). Each
engine keeps the changed spec its own way; the queue's cycle reads ``JobSpec.hold`` and the
priority as for any job."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from ringleader.errors import ConflictError
from ringleader.jobs.spec import JobSpec
from ringleader.jobs.states import JobStatus

WAITING = (JobStatus.QUEUING, JobStatus.PENDING)


@dataclass(frozen=True)
class PendingChange:
    """A waiting job's spec changed, and the event that says so (kind, message)."""

    spec: JobSpec
    kind: str
    message: str


def hold(spec: JobSpec, status: JobStatus) -> PendingChange:
    stop = f"a job that started runs on; stop it with `ringleader delete {spec.name}`"
    _check_waiting(spec.name, status, "held", stop)
    if spec.hold:
        raise ConflictError(f"job {spec.name!r} is already held", f"release it with `ringleader release {spec.name}`")
    return PendingChange(replace(spec, hold=True), "Held",
                         f"held by its user: it is not started until `ringleader release {spec.name}`")  # fmt: skip


def release(spec: JobSpec, status: JobStatus) -> PendingChange:
    _check_waiting(spec.name, status, "released", "only a held job is released")
    if not spec.hold:
        raise ConflictError(f"job {spec.name!r} is not held", "see its REASON in `ringleader list`")
    return PendingChange(replace(spec, hold=False), "Released", "released by its user: back in the queue's line")


def set_priority(spec: JobSpec, status: JobStatus, priority: int) -> PendingChange:
    _check_waiting(spec.name, status, "given another priority",
                   "a running job keeps the priority it started with; delete it and submit it again")  # fmt: skip
    changed = replace(spec, priority=priority).validate()
    return PendingChange(changed, "PriorityChanged", f"priority {spec.priority} -> {priority}")


def _check_waiting(name: str, status: JobStatus, what: str, fix: str) -> None:
    if status not in WAITING:
        raise ConflictError(f"job {name!r} is {status.value}: only a job that waits can be {what}", fix)


Change = Callable[[JobSpec, JobStatus], PendingChange]


class SpecChanges:
    """``hold``, ``release`` and ``set_priority`` by the rules above, for an engine that keeps a
    waiting job's whole spec: it says only how one job's spec is changed and the queue's pass
    run after (``change_waiting``)."""

    def change_waiting(self, name: str, change: Change) -> None:
        raise NotImplementedError

    def hold(self, name: str) -> None:
        self.change_waiting(name, hold)

    def release(self, name: str) -> None:
        self.change_waiting(name, release)

    def set_priority(self, name: str, priority: int) -> None:
        self.change_waiting(name, lambda spec, status: set_priority(spec, status, priority))
