"""Team queues as users give and read them: the quota's spelling, the checks a queue must pass
before it is kept (the same on every engine that keeps queues), and the view `queue list` shows.
The rules themselves (quota, borrowing, reclaim, fair share) are ``scheduler/teams.py``'s."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ringleader import settings
from ringleader.errors import ConflictError, NotFoundError, UsageError
from ringleader.jobs.views import JobView
from ringleader.scheduler import BackfillConfig, JobRequest, Preemption, QueuedJob, queue_order
from ringleader.scheduler.cycle import DEFAULT_BACKFILL
from ringleader.scheduler.order import QueueOrder
from ringleader.scheduler.queue import ranked_priority
from ringleader.scheduler.reorder import DEFAULT_RESTART_S
from ringleader.scheduler.teams import ANY_TYPE, DEFAULT_QUEUE, MAX_GPUS, TeamQueue, Teams
from ringleader.topology.cluster import check_name

GPU_TYPE_RE = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")


def parse_quota(values: Sequence[str]) -> tuple[tuple[str, int], ...]:
    """``--gpus 8`` (every GPU type) or ``--gpus v100=8 --gpus a100=4`` (per type, the node's
    GPU model as `top node` shows it, in any case) -> sorted (type, GPUs) pairs."""
    quota: dict[str, int] = {}
    for value in values:
        key, sep, count = value.rpartition("=")
        key = key.strip().lower() if sep else ANY_TYPE
        if sep and not GPU_TYPE_RE.fullmatch(key):
            raise UsageError(f"--gpus {value!r}: {key!r} is not a GPU type", "give e.g. --gpus v100=8, or --gpus 8")
        try:
            gpus = int(count.strip())
        except ValueError:
            fix = "give e.g. --gpus 8 or --gpus v100=8"
            raise UsageError(f"--gpus {value!r} is not a number of GPUs", fix) from None
        if not 0 <= gpus <= MAX_GPUS:
            raise UsageError(f"--gpus {value!r} must be 0 to {MAX_GPUS}", "give the GPUs the queue may hold")
        if key in quota:
            what = "a quota for every GPU type" if key == ANY_TYPE else f"type {key}"
            raise UsageError(f"--gpus gives {what} twice", "give each GPU type once")
        quota[key] = gpus
    if ANY_TYPE in quota and len(quota) > 1:
        raise UsageError("--gpus N (every type) and --gpus TYPE=N (one type) are both given",
                         "give one quota for every type, or one per type")  # fmt: skip
    return tuple(sorted(quota.items()))


def check_queue(queue: TeamQueue, others: Iterable[TeamQueue], overwrite: bool = True) -> TeamQueue:
    """A queue as it may be kept beside ``others``: a DNS-1123 name that is not the default
    queue's, a quota, a finite positive weight, and a cohort whose queues all count their quota
    the same way (every type at once, or per type), so that what one lends the other can take;
    without ``overwrite``, a name none of them has."""
    others = tuple(others)
    check_name(queue.name, "queue")
    if queue.name == DEFAULT_QUEUE:
        raise UsageError(f"{DEFAULT_QUEUE!r} is the queue of jobs submitted without --queue, and has no quota",
                         "pick another name")  # fmt: skip
    if not queue.quota:
        raise UsageError("a queue needs a quota", "give --gpus N (every GPU type) or --gpus TYPE=N")
    if isinstance(queue.weight, bool) or not (math.isfinite(queue.weight) and 0 < queue.weight <= 1e6):
        raise UsageError(f"--weight must be above 0 (up to 1000000), got {queue.weight}", "give e.g. --weight 2")
    for namespace in queue.namespaces:
        check_name(namespace, "namespace")
    if queue.cohort is not None:
        check_name(queue.cohort, "cohort")
        pooled = queue.quota[0][0] == ANY_TYPE
        for other in others:
            if other.name != queue.name and other.cohort == queue.cohort and (other.quota[0][0] == ANY_TYPE) != pooled:
                raise UsageError(
                    f"queue {other.name} of cohort {queue.cohort} counts its quota "
                    + ("per GPU type" if pooled else "for every GPU type at once") + ", and this one does not",
                    "give the queues of one cohort the same kind of quota (--gpus N, or --gpus TYPE=N)",
                )
    if not overwrite and any(other.name == queue.name for other in others):
        raise ConflictError(f"queue {queue.name!r} already exists",
                            f"give --overwrite to change it, or `ringleader queue delete {queue.name}`")  # fmt: skip
    return queue


def check_deletable(name: str) -> None:
    """The default queue is not kept, so it cannot be deleted: it is where jobs without --queue go."""
    if name == DEFAULT_QUEUE:
        raise UsageError(f"{DEFAULT_QUEUE!r} is the queue of jobs submitted without --queue: it always exists and "
                         "cannot be deleted", "delete a queue made with `ringleader queue create`")  # fmt: skip


def check_queue_unused(name: str, active: Sequence[str], by_name: bool = True) -> None:
    """A queue is deleted only while no job waits or runs in it (``active``, in the order to name
    them; ``by_name``: named as `ringleader delete` takes them)."""
    if active:
        fix = f"delete them first (`ringleader delete {' '.join(active[:3])}`)" if by_name else "delete them first"
        raise ConflictError(f"queue {name!r} has {len(active)} waiting or running job(s), {active[0]} first", fix)


def queue_to_dict(queue: TeamQueue) -> dict[str, Any]:
    """A queue as the engines keep it (JSON): its quota as [[type, GPUs], ...], weight, cohort,
    and only where it names them the namespaces that may use it and its order (so a queue kept
    before either existed reads back the same)."""
    kept: dict[str, Any] = {"quota": [list(item) for item in queue.quota], "weight": queue.weight,
                            "cohort": queue.cohort}  # fmt: skip
    if queue.namespaces:
        kept["namespaces"] = list(queue.namespaces)
    if queue.order is not None:
        kept["order"] = queue.order.value
    return kept


def queue_from_json(name: str, text: str) -> TeamQueue:
    """``queue_from_dict`` of a queue kept as JSON text (a Kubernetes ConfigMap's value)."""
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    return queue_from_dict(name, data)


def queue_from_dict(name: str, data: Any) -> TeamQueue:
    """A kept queue read back; one that is not as ``queue_to_dict`` writes it, or that does not
    pass ``check_queue``, is a UsageError naming it."""
    try:
        order = QueueOrder(data["order"]) if data.get("order") is not None else None
        queue = TeamQueue(name, tuple((str(k), int(n)) for k, n in data["quota"]), float(data["weight"]),
                          data.get("cohort"), tuple(str(n) for n in data.get("namespaces") or ()), order)  # fmt: skip
    except (KeyError, TypeError, ValueError, AttributeError):
        raise UsageError(f"queue {name!r} is not kept as ringleader writes queues", "create it again with "
                         "`ringleader queue create --overwrite`") from None  # fmt: skip
    return check_queue(queue, ())


def queue_config(restart_s: float = DEFAULT_RESTART_S) -> BackfillConfig:
    """The queue's knobs as this cluster's administrator set them: the least a job runs after its
    (re)start before it may be stopped for queue order or fair share (RINGLEADER_PREEMPT_MIN_RUN_S,
    ``ReorderConfig.min_run_s``); the rest as shipped. Read for each pass, so a changed setting
    holds from the next one. A stop for order counts ``restart_s``, what a restart costs on this
    cluster, as a move does: measured where the engine measures its restarts, else the default."""
    min_run_s = settings.number("RINGLEADER_PREEMPT_MIN_RUN_S")
    reorder = replace(DEFAULT_BACKFILL.reorder, min_run_s=min_run_s, restart_s=restart_s)
    return replace(DEFAULT_BACKFILL, reorder=reorder)


def check_queue_exists(queues: Iterable[TeamQueue], name: str | None) -> None:
    """A job's --queue names a queue kept here or the default queue (None or its name: always
    there, as `queue list` shows it)."""
    if name not in (None, DEFAULT_QUEUE) and not any(q.name == name for q in queues):
        raise NotFoundError(f"queue {name!r} not found", f"create it (`ringleader queue create {name} --gpus N`) "
                            "or see `ringleader queue list`")  # fmt: skip


def preempted_by(job: JobRequest, preemption: Preemption) -> str:
    """How a victim's Preempted event names its preemptor ``job``, the same on every engine: who,
    why (a higher priority, its queue's quota taken back, its queue's order or fair share), and
    where it starts how fast."""
    who = f"job {job.name} (priority {job.priority}), which"
    if preemption.why is not None:  # for order or fair share (scheduler/reorder.py)
        who = f"job {job.name} (priority {job.priority}), {preemption.why}; it"
    elif preemption.reclaim:
        who = f"job {job.name} of queue {job.queue}, which takes back the quota this job's queue borrowed and"
    return f"by {who} starts on {preemption.placement.describe()} at {preemption.images_per_s:.0f} images/s"


@dataclass(frozen=True)
class Preempted:
    """A Preempted event (``preempted_by``'s words) read back: who preempted the job, in short
    why ("priority 10", "quota of queue q"), and the images/s its freed placement promised."""

    by: str
    why: str
    images_per_s: float | None


PREEMPTED_WORDS = re.compile(r"by job (?P<name>\S+) (?:\(priority (?P<priority>-?\d+)\)|of queue (?P<queue>\S+)),")


def read_preempted(message: str) -> Preempted | None:
    found = PREEMPTED_WORDS.match(message)
    if found is None:
        return None
    images = re.search(r" at (\d+) images/s", message)
    why = f"priority {found['priority']}" if found["priority"] else f"quota of queue {found['queue']}"
    reorder = re.match(r"(for order|fair share)", message[found.end() :].lstrip())
    if reorder is not None:
        why = reorder[1]
    return Preempted(found["name"], why, float(images[1]) if images else None)


@dataclass(frozen=True)
class QueueView:
    """A queue as `queue list` shows it: its settings, the GPUs its running jobs hold (per quota
    key), how many of them it borrows, its jobs, and its fair share."""

    name: str
    quota: tuple[tuple[str, int], ...]
    weight: float
    cohort: str | None
    order: QueueOrder = QueueOrder.FIFO  # how it orders its jobs (scheduler/order.py)
    held: dict[str, int] = field(default_factory=dict)
    borrowed: int = 0
    running: int = 0
    pending: int = 0
    fair_share: float = 1.0  # Slurm's factor 2^(-usage share / weight share): 1 used nothing
    usage_gpu_h: float = 0.0  # recent GPU-hours, decayed with the half-life

    @property
    def quota_text(self) -> str:
        return TeamQueue(self.name, self.quota).describe_quota()

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "quota": {k: n for k, n in self.quota}, "weight": self.weight, "cohort": self.cohort,
            "order": self.order.value, "held": dict(self.held), "borrowed": self.borrowed, "running": self.running,
            "pending": self.pending,
            "fair_share": round(self.fair_share, 4), "usage_gpu_h": round(self.usage_gpu_h, 4),
        }  # fmt: skip


def queue_views(
    kept: Sequence[TeamQueue], teams: Teams | None, counts: Mapping[str, Sequence[int]], usage: Mapping[str, float]
) -> list[QueueView]:
    """What `queue list` shows of every queue kept and of the default queue (last): ``teams`` the
    queues' pass (None while no queue was created), ``counts`` queue -> [running, pending] jobs,
    ``usage`` queue -> recent GPU-seconds."""
    views = []
    for queue in [*kept, TeamQueue(DEFAULT_QUEUE)]:
        running, pending = counts.get(queue.name, [0, 0])
        held = teams.use.get(queue.name, {}) if teams is not None else {}
        borrowed = sum(teams.borrowed(queue).values()) if teams is not None and queue.limited else 0
        share = teams.shares.get(queue.name, 1.0) if teams is not None else 1.0
        views.append(QueueView(queue.name, queue.quota, queue.weight, queue.cohort, queue.order or QueueOrder.FIFO,
                               dict(held), borrowed, running, pending, share,
                               usage.get(queue.name, 0.0) / 3600))  # fmt: skip
    return views


@dataclass(frozen=True)
class InLine:
    """A waiting job as `queue describe` shows it: its place in the line the queue's cycle
    decides jobs in (1: decided first; None: held, out of the line) and the priority it ranks
    with there (its own plus its age, as Slurm's sprio shows a job's; fair share orders the queues)."""

    place: int | None
    job: JobView
    effective_priority: float

    def to_dict(self) -> dict[str, Any]:
        return {"place": self.place, "name": self.job.name, "queue": self.job.queue, "priority": self.job.priority,
                "effective_priority": round(self.effective_priority, 2), "gpus": self.job.gpus_requested,
                "reason_code": self.job.reason_code, "reason": self.job.reason}  # fmt: skip


def line_of(
    views: Sequence[QueueView], waiting: Sequence[JobView], now: float, config: BackfillConfig = DEFAULT_BACKFILL
) -> list[InLine]:
    """Every waiting job in ``queue_order``, the order the cycle decides them in (quota first,
    then effective priority, then submit order), over the queues as ``views`` show them now;
    held jobs last, without a place."""
    kept = {v.name: TeamQueue(v.name, v.quota, v.weight, v.cohort) for v in views}
    use = {f"\x00held by {v.name}": (v.name, dict(v.held)) for v in views if v.held}  # what each queue holds
    teams = Teams(kept, use, {v.name: v.fair_share for v in views})
    by_submit = sorted(waiting, key=lambda j: j.created_at)
    queued = [QueuedJob(j.spec.request(), seq, j.created_at) for seq, j in enumerate(by_submit)]
    views_of = {q.job.name: j for q, j in zip(queued, by_submit, strict=True)}
    in_line = [q for q in queued if not views_of[q.job.name].spec.hold]
    teams = teams.with_waiting(q.job for q in in_line)
    line = [InLine(place, views_of[q.job.name], ranked_priority(q, now, config, teams)[1])
            for place, q in enumerate(queue_order(in_line, now, config, teams), start=1)]  # fmt: skip
    held = [InLine(None, views_of[q.job.name], ranked_priority(q, now, config, teams)[1])
            for q in queued if views_of[q.job.name].spec.hold]  # fmt: skip
    return line + held
