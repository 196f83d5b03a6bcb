"""The placement engine: pure functions from (cluster state, job) to a placement and its reasons.

    from ringleader.scheduler import ClusterState, JobRequest, place
    decision = place(state, JobRequest("vgg", workers=4, gpus_per_worker=1, topology_aware=True))

No I/O, no clock, no globals beyond memoised pure searches: the CLI, the runtime, the simulator
and a Kubernetes scheduler extender all call the same functions.
"""

from ringleader.scheduler import policies  # noqa: F401  (the built-in policies register themselves)
from ringleader.scheduler.cycle import Cycle, Holding, Snapshot, Waiting, run_cycle, schedule_queue
from ringleader.scheduler.framework import (
    Policy,
    get_policy,
    place,
    placement_metrics,
    policy_names,
    register,
    unresolvable,
)
from ringleader.scheduler.queue import (
    NO_RESERVATIONS,
    BackfillConfig,
    QueuedJob,
    QueuePass,
    effective_priority,
    queue_order,
)
from ringleader.scheduler.types import (
    Bottleneck,
    Candidate,
    ClusterState,
    Code,
    Decision,
    JobRequest,
    Metrics,
    NodeState,
    Placement,
    Preemption,
    ReasonCode,
    Reservation,
    RunningGang,
    WorkerSlot,
    Workload,
)

__all__ = [
    "NO_RESERVATIONS",
    "BackfillConfig",
    "Bottleneck",
    "Candidate",
    "ClusterState",
    "Code",
    "Cycle",
    "Decision",
    "Holding",
    "JobRequest",
    "Metrics",
    "NodeState",
    "Placement",
    "Policy",
    "Preemption",
    "QueuePass",
    "QueuedJob",
    "ReasonCode",
    "Reservation",
    "RunningGang",
    "Snapshot",
    "Waiting",
    "WorkerSlot",
    "Workload",
    "effective_priority",
    "get_policy",
    "place",
    "placement_metrics",
    "policy_names",
    "queue_order",
    "register",
    "run_cycle",
    "schedule_queue",
    "unresolvable",
]
