"""`ringleader kube scheduler`: a secondary scheduler for pods with ``schedulerName: ringleader``.

Informers list (in pages; pods that ended are left on the server) and watch nodes, pods and
PodGroups into the cache, resuming from the last resourceVersion and relisting after 410 Gone; a
watch silent past its timeout is a dead connection, and an informer that hears nothing (no
event, no bookmark, no watch ending on time) for too long makes /healthz fail. A cycle, run
only while this replica holds the Lease, takes every gang whose members are all there, decides
it in ONE ``decide()`` over the cache and assumes it at once; then posts one Binding per member,
which carries the member's GPU ids as annotations (one write per pod). A failed bind undoes the
gang: members already bound are deleted (their controller recreates them), the others are
forgotten, and the gang waits for the next cycle. A DRA gang (workers held by the
``ringleader.io/gang`` scheduling gate) is decided the same way, under the same queue, but pinned
instead of bound (``pinning.pin_gang``: claims allocated to the decided GPUs, pods pinned to their
nodes, then every gate removed; kube-scheduler binds). Waiting gangs' pods get PodScheduled=False
(Unschedulable) and a FailedScheduling Event, and their PodGroup's status and annotation say
why, with numbers, once per change of reason.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from typing import Any

from ringleader.clock import SYSTEM_CLOCK, Clock
from ringleader.engines.kubernetes import names
from ringleader.engines.kubernetes.cache import Cache, Gang
from ringleader.engines.kubernetes.client import DRA_KINDS, KINDS, Api, ApiError, Gone
from ringleader.engines.kubernetes.decide import (
    Assignment,
    Members,
    Outcome,
    gang_calibration,
    job_request,
    outside_queue,
)
from ringleader.engines.kubernetes.leader import LeaderElector, micro_time
from ringleader.engines.kubernetes.metrics import Metrics
from ringleader.engines.kubernetes.objects import PodInfo, wall_time
from ringleader.engines.kubernetes.pinning import DraApi, Pin, PinError, pin_gang
from ringleader.engines.kubernetes.restarts import PodFailure, blamed, runs_annotation
from ringleader.engines.kubernetes.usage import KEEP_EVERY_S, usage_data
from ringleader.inputs import InputError
from ringleader.jobs.failures import Failure, cordon_reason, cordoned_text, restart_number, restarting_text
from ringleader.jobs.moves import held_for_move, movable, moved_decision
from ringleader.jobs.queues import preempted_by, queue_config
from ringleader.model import MODEL_ESTIMATOR, calibrated_estimator
from ringleader.model.calibration import Calibration, calibration_from_dict
from ringleader.scheduler import BackfillConfig, Code, Holding, Placement, Reservation, Snapshot, WorkerSlot, run_cycle
from ringleader.scheduler.move import Movable, Move, restart_cost
from ringleader.scheduler.order import running_service, service_of_runs
from ringleader.scheduler.policies.throughput import Estimator

log = logging.getLogger("ringleader.kube.scheduler")
# A gang whose bind or pin failed waits this long before it is tried again, doubled on each
# failure in a row: kube-scheduler's podInitialBackoffSeconds and podMaxBackoffSeconds.
INITIAL_BACKOFF_S = 1.0
MAX_BACKOFF_S = 10.0
# The queues' usage not written (refused, the server unreachable): tried again this much later,
# not every cycle.
USAGE_RETRY_S = 30.0
RESULTS = {Code.SUCCESS: "scheduled", Code.UNSCHEDULABLE: "unschedulable", Code.UNRESOLVABLE: "unresolvable"}


def read_calibration(text: str) -> Calibration | str:
    """A calibration written on a gang's workers, read as `predict --calibration` reads a file;
    what is wrong with it, in words, where it cannot be read (a hand-written pod's)."""
    try:
        return calibration_from_dict(json.loads(text), origin=names.CALIBRATION_ANNOTATION)
    except (ValueError, InputError) as exc:
        return f"its calibration ({names.CALIBRATION_ANNOTATION}) is ignored: {str(exc).splitlines()[0]}"


def _created_s(gang: Gang) -> float | None:
    """When the gang was submitted (its oldest pending pod's creation): its age counts from there."""
    stamps = [t for t in (wall_time(p.created) for p in gang.pending) if t is not None]
    return min(stamps) if stamps else None


def _run_start(pods: Sequence[PodInfo]) -> float | None:
    """When a gang's run started: the first of its pods to start (None: none started yet)."""
    starts = [t for t in (wall_time(p.started) for p in pods) if t is not None]
    return min(starts) if starts else None


def _gang_end(pods: Sequence[PodInfo], now: float) -> float | None:
    """When a running gang's last pod ends (see ``Scheduler._holding``); None: one has no known end."""
    ends = []
    for pod in pods:
        if pod.deleting:
            ends.append(now + pod.grace_s)
            continue
        known = [d for d in (pod.deadline_s, pod.run_time_s) if d is not None]
        if not known:
            return None
        start = wall_time(pod.started) or now  # bound, not started yet: ends no sooner than that
        ends.append(start + min(known))
    return max(ends) if ends else None


class LostLease(Exception):
    """The Lease expired in the middle of a gang: stop writing."""


class Informer:
    """List once, then watch from the last resourceVersion; relist after 410 Gone."""

    def __init__(self, api: Api, kind: str, cache: Cache, lock: threading.Lock, metrics: Metrics,
                 changed: threading.Event, clock: Clock) -> None:  # fmt: skip
        self.api, self.kind, self.cache, self.lock, self.metrics = api, kind, cache, lock, metrics
        self.resource_version = ""
        self.changed = changed  # the scheduler's one wake-up, shared by every informer
        self.clock = clock
        self.heard = clock.monotonic()  # when the server last showed this informer is alive

    @property
    def synced(self) -> bool:
        return bool(self.resource_version)

    def sync(self, timeout: int) -> None:
        """One list (when there is no version to resume from) or one watch until the server
        ends it. Raises ApiError when the server fails; the caller backs off."""
        if not self.resource_version:
            items, listed = self.api.list(self.kind)
            with self.lock:
                self.cache.replace(self.kind, items)
            self.resource_version = listed
            self.heard = self.clock.monotonic()
            self.changed.set()
            return
        try:
            for event_type, obj in self.api.watch(self.kind, self.resource_version, timeout):
                self.heard = self.clock.monotonic()  # an event or a bookmark
                version = (obj.get("metadata") or {}).get("resourceVersion")
                if event_type != "BOOKMARK":
                    with self.lock:
                        self.cache.apply(self.kind, event_type, obj)
                    self.changed.set()
                if version:
                    self.resource_version = str(version)
            self.heard = self.clock.monotonic()  # the server ended the watch on time
        except Gone:
            log.info("watch %s: resourceVersion %s expired, relisting", self.kind, self.resource_version)
            self.resource_version = ""
            self.metrics.relists += 1


@dataclass(frozen=True)
class BindResult:
    gang: str
    ok: bool
    error: str = ""


class Scheduler:
    def __init__(self, api: Api, identity: str, namespace: str = names.SYSTEM_NAMESPACE, lease_seconds: int = 15,
                 events: bool = True, clock: Clock = SYSTEM_CLOCK,
                 writers: int = 1, backfill: BackfillConfig | None = None,
                 level_keys: Sequence[str] | None = None, hypernodes: bool = False,
                 dra: bool = False) -> None:  # fmt: skip
        self.api, self.identity, self.events = api, identity, events
        # Pinning DRA gangs (claims, ResourceSlices, a pod patch) on the same client.
        self.dra = api if isinstance(api, DraApi) else DraApi(api.api, api.timeout, api.watch_grace)
        # Gangs' Bindings go out on this many threads at once (each gang's in member order);
        # decisions never wait for them.
        self.writers = max(1, writers)
        # The network tree from these node labels (None: a known convention's), or from HyperNodes.
        self.cache = Cache(level_keys, hypernodes, clock)
        self.lock = threading.Lock()
        self.metrics = Metrics()
        # With DRA delivery (``dra``) the claims and slices too: devices allocated to any claim
        # are taken (claims.py).
        kinds = (*KINDS, *((names.HYPERNODE_PLURAL,) if hypernodes else ()), *(DRA_KINDS if dra else ()))
        # Set by any informer when the cache changed: the daemon's cycle waits on it.
        self.changed = threading.Event()
        self.informers = {kind: Informer(api, kind, self.cache, self.lock, self.metrics, self.changed, clock)
                          for kind in kinds}  # fmt: skip
        self.elector = LeaderElector(api, namespace, names.LEASE_NAME, identity, lease_seconds, clock)
        self.clock = clock
        self._backoff: dict[str, tuple[float, float]] = {}  # gang -> (tried again from, its last wait)
        self._told: dict[str, str] = {}  # gang -> the pending reason last reported
        self._decided_on: dict[str, Hashable] = {}  # waiting gang -> what it was last decided on
        # The shared queue's reservations and age (its defaults: 2 reservations, priority +100
        # over a day of waiting); the clock's wall time gives ages and expected ends (pods' own
        # times), its monotonic time backoffs, the Lease and informers' silence.
        self.backfill = backfill or queue_config()  # RINGLEADER_PREEMPT_MIN_RUN_S read at its start
        self._reservations: dict[str, Reservation] = {}  # gang -> the GPUs held for it
        self._reservations_moved = 0
        # Moves (jobs/moves.py): the cycle's planned moves, acted on after its decisions. Each gang
        # being moved holds its target while its pods stop and are made again: on its PodGroup
        # (names.MOVE_TARGET_ANNOTATION, read into ``cache.moving``), so a new leader holds it too;
        # the gangs whose hold ended this cycle (started there, or it could not be), cleared after it.
        self._planned_moves: tuple[Move, ...] = ()
        self._holds_ended: list[str] = []
        # a calibration as written on a gang's workers -> it read, or why it is ignored
        self._calibrations: dict[str, Calibration | str] = {}
        self._usage_missing_said = False  # the usage ConfigMap's absence said once in the log
        self._usage_retry_at = 0.0  # a failed write of the usage is tried again from then (monotonic)
        self._stop = threading.Event()
        # What the cycle reports (Events, PodScheduled=False, PodGroup status) goes out on these
        # threads once the cycle's Bindings are written, when ``reports_async`` (the daemon):
        # only the Bindings are on a gang's path to its start, as client-go's event recorder is
        # asynchronous for kube-scheduler. Off, each report is written before cycle() returns
        # (tests read them at once).
        self.reports_async = False
        self._reporter = ThreadPoolExecutor(max_workers=2, thread_name_prefix="report")
        self._reports: list[Future[None]] = []
        self._later: list[tuple[Callable[..., None], tuple[Any, ...]]] = []  # this cycle's, until its binds end
        # An informer that heard nothing from the server for this long is stalled (run() sets it
        # from its watch timeout: a live watch ends by then, or a bookmark or event came).
        self.stall_seconds = 300 + api.watch_grace + 60.0

    @property
    def synced(self) -> bool:
        return all(i.synced for i in self.informers.values())

    def health_problem(self) -> str:
        """What /healthz reports: "" when healthy, else why not."""
        if not self.synced:
            return "informers not synced"
        now = self.clock.monotonic()
        stalled = [f"{i.kind} ({now - i.heard:.0f} s)" for i in self.informers.values()
                   if now - i.heard > self.stall_seconds]  # fmt: skip
        return f"informers heard nothing from the API server for too long: {', '.join(stalled)}" if stalled else ""

    def sync(self, timeout: int = 1) -> None:
        """One list or watch round of every informer, the three at once (tests, benchmarks)."""
        with ThreadPoolExecutor(max_workers=len(self.informers), thread_name_prefix="sync") as pool:
            for done in [pool.submit(i.sync, timeout) for i in self.informers.values()]:
                done.result()

    # -- a cycle --------------------------------------------------------------------------------------
    def decide_all(self) -> list[Outcome]:
        """Decide every complete gang over the cache in one queue cycle (``scheduler/cycle.py``)
        and assume the placed ones (no API call). The first gangs that cannot start keep
        reservations across cycles; a gang decided on the same inputs as last cycle keeps its
        answer; later gangs start only where they delay no reservation."""
        with self.lock:
            outcomes, queued = self._outside_queue(self._ready_gangs())
            members = Members(self.cache)
            moved, queued = self._start_moved(queued, members)
            outcomes += moved
            snapshot = self._queue_snapshot(queued, members)
            started = time.perf_counter()
            cycle = run_cycle(snapshot)
            self._planned_moves = cycle.moves
            each = (time.perf_counter() - started) / max(len(cycle.nominated), 1)  # the cycle's time, shared
            outcomes += [self._with_calibration(members.outcome(one)) for one in cycle.nominated]
            for outcome in outcomes:
                self.metrics.decided(RESULTS[outcome.code], each)
            self._reservations_moved += cycle.moved
            self._reservations, self._decided_on = cycle.held, cycle.decided_on
            self.metrics.pending_gangs = cycle.unchanged + sum(1 for o in outcomes if not o.ok)
            self.metrics.reserved_gangs = len(self._reservations)
        return outcomes

    def _ready_gangs(self) -> list[Gang]:
        """The gangs whose members are all there and that are not backing off after a failed bind."""
        gangs = self.cache.gangs()
        for gone in set(self._backoff) - {g.key for g in gangs}:  # bound since, or deleted
            del self._backoff[gone]
        return [g for g in gangs if g.ready and not self._backing_off(g.key)]

    def _outside_queue(self, gangs: Sequence[Gang]) -> tuple[list[Outcome], list[Gang]]:
        """The gangs the queue does not decide (``decide.outside_queue``), decided, the placed ones
        assumed; and those the queue's cycle decides."""
        outcomes, queued = [], []
        for gang in gangs:
            outcome = outside_queue(self.cache, gang)
            if outcome is None:
                queued.append(gang)
                continue
            if outcome.ok:
                self.cache.assume_gang((a.pod, a.node, a.gpus) for a in outcome.assignments)
            outcomes.append(outcome)
        return outcomes, queued

    def _queue_snapshot(self, gangs: Sequence[Gang], members: Members) -> Snapshot:
        """The cache as the queue's cycle sees it: the gangs waiting, each with what Kubernetes
        adds (``Members``), the gangs holding GPUs, the team queues with their use, the
        reservations kept and what each gang was last decided on."""
        now = self.clock.now()
        waiting = [members.waiting(g, i, _created_s(g)) for i, g in enumerate(gangs)]
        weighs = any(w.job.prices_placements for w in waiting)
        estimate = self._estimator(gangs) if weighs else None  # the model, where a gang weighs its start
        teams = self.cache.team_queues(now) if self.cache.queues else None
        state = self.cache.state
        for target in self.cache.moving.values():  # held while the mover's pods stop and are made again
            state = held_for_move(state, target)
        return Snapshot(state, waiting, now, self._holding(now), teams=teams, cordoned=self._cordoned(),
                        config=self.backfill, estimate=estimate, held=self._reservations,
                        decided_on=self._decided_on, epoch=(self.cache.freed, self._reservations_moved))  # fmt: skip

    def _moved_away(self, gang: str) -> bool:
        """Whether a moved gang is still between its runs: each of its pods being deleted or not
        yet bound (none at all while its controller makes them again)."""
        return all(p.deleting or p.node is None for p in self.cache.pods.values() if p.gang_key == gang)

    def _cordoned(self) -> list[str]:
        """The nodes cordoned (`kubectl cordon`, `ringleader node cordon`: the unschedulable taint)."""
        return [name for name, info in self.cache.nodes.items()
                if any(t.key == names.UNSCHEDULABLE_TAINT for t in info.taints)]  # fmt: skip

    def _with_calibration(self, outcome: Outcome) -> Outcome:
        """A waiting gang's reason, with why its calibration is ignored where it is."""
        ignored = self._unread_calibration(outcome.gang)
        return replace(outcome, reason=f"{outcome.reason}; {ignored}") if ignored and not outcome.ok else outcome

    def _estimator(self, gangs: Sequence[Gang]) -> Estimator:
        """The model's images/s, each gang's placements priced with the calibration written on
        its workers where it has one its scheduler can read (``submit --calibration``)."""
        written = {g.key: text for g in gangs if (text := gang_calibration(g)) is not None}
        for gone in set(self._calibrations) - set(written.values()):
            del self._calibrations[gone]
        calibrations: dict[str, Calibration] = {}
        for key, text in written.items():
            read = self._calibrations.setdefault(text, read_calibration(text))
            if isinstance(read, Calibration):
                calibrations[key] = read
        return calibrated_estimator(calibrations) if calibrations else MODEL_ESTIMATOR

    def _unread_calibration(self, gang: Gang) -> str | None:
        """Why the gang's calibration is ignored, if it has one its scheduler could not read."""
        read = self._calibrations.get(gang_calibration(gang) or "")
        return None if read is None or isinstance(read, Calibration) else read

    def _holding(self, now: float) -> list[Holding]:
        """The gangs whose pods hold resources, as the queue sees them: their highest priority;
        preemptible when none of their pods is being deleted or marked non-preemptible, taking
        their longest grace to stop; and when they end, on the wall clock, where every pod has
        activeDeadlineSeconds (kubelet stops the pod that long after its start) or a run time
        (names.RUN_TIME_ANNOTATION: the run its user expects), whichever is sooner; a pod being
        deleted (preempted, rolled back) within its grace, its queue's quota given back. What
        preemption for order and fair share reads (``scheduler/reorder.py``): the team queue it
        counts in, its run's start, its GPU service and its time left (``_run_service``)."""
        gangs: dict[str, list[PodInfo]] = {}
        for pod in self.cache.pods.values():
            if pod.holds_resources:
                gangs.setdefault(pod.gang_key, []).append(pod)
        queues = self.cache.gang_queues(p for pods in gangs.values() for p in pods if p.ours)
        holding = []
        for key, pods in gangs.items():
            ours = [p for p in pods if p.ours]
            stopping = any(p.deleting for p in ours)
            preemptible = bool(ours) and not stopping and all(p.preemptible for p in ours)
            end = _gang_end(pods, now)
            move = self._movable(key, ours, now) if ours and not stopping else None
            holding.append(Holding(key, max((p.priority for p in ours), default=0),
                                   None if stopping else queues.get(key), end,
                                   max((p.grace_s for p in ours), default=0.0), preemptible,
                                   *self._run_service(key, pods, now, end), move=move))  # fmt: skip
        return holding

    def _movable(self, gang: str, pods: Sequence[PodInfo], now: float) -> Movable | None:
        """A running gang as a move weighs it (``jobs/moves.py``): the queue's view of its pods,
        its GPU workers where they run in rank order, its run's start and restarts so far; a
        restart priced with the default (restarts are not measured on Kubernetes)."""
        workers = sorted((p for p in pods if p.gpus), key=lambda p: p.rank)
        if not workers or any(p.node is None or len(p.gpu_ids) != p.gpus for p in workers):
            return None
        request = job_request(Gang(gang, len(pods), pending=list(pods), spec=self.cache.specs.get(gang)))
        placement = Placement(gang, tuple(WorkerSlot(i, p.node or "", p.gpu_ids) for i, p in enumerate(workers)))
        restarts = self.cache.restarts.get(gang, 0)
        return movable(request, placement, _run_start(pods), restarts, now, restart_cost(()))

    def _start_moved(self, gangs: Sequence[Gang], members: Members) -> tuple[list[Outcome], list[Gang]]:
        """Each moved gang whose pods were made again, started on the placement held for it if it
        is still free and its nodes have room (assumed, bound with the cycle's); the outcomes and
        the gangs the queue's cycle decides."""
        outcomes, queued = [], []
        for stale in [g for g in self.cache.moving if not self._moved_away(g)]:  # running (or ended) since:
            del self.cache.moving[stale]  # a hold left by a replica whose clearing failed
            self._holds_ended.append(stale)
        cordoned = self._cordoned()
        for gang in gangs:
            target = self.cache.moving.pop(gang.key, None)
            decision = None if target is None else moved_decision(job_request(gang), target, self.cache.state,
                                                                   cordoned)  # fmt: skip
            outcome = None if decision is None else members.start_on(gang, decision)
            if target is not None:  # started there, or it cannot be: held no longer, on any replica
                self._holds_ended.append(gang.key)
            if outcome is None:
                queued.append(gang)
            else:
                outcomes.append(outcome)
        return outcomes, queued

    def _run_service(self, gang: str, pods: Sequence[PodInfo], now: float,
                     end: float | None) -> tuple[float | None, float, float | None]:  # fmt: skip
        """When the gang's run started (its first pod to start: kubelet's startTime), the
        GPU-seconds of its runs so far (the ended ones its PodGroup keeps, names.RUNS_ANNOTATION,
        and this one's) and its time left (to its known end; None where unknown). A gang none of
        whose pods started yet has no run start: nothing stops it for order or fair share."""
        gpus = sum(p.gpus for p in pods)
        return running_service(gpus, service_of_runs(gpus, self.cache.runs.get(gang, ())), _run_start(pods), now, end)

    def cycle(self) -> list[BindResult]:
        """Decide, then write: Bindings for placed gangs, reasons for the rest. Nothing at all
        without the lease."""
        if not self.synced or not self.elector.leading:
            return []
        self._restart_failed()
        self._keep_usage()
        outcomes = self.decide_all()
        for outcome in outcomes:
            if outcome.preemption is not None:
                self._preempt(outcome)
            if not outcome.ok:
                self._report_pending(outcome)
        for move in self._planned_moves:
            self._move(move)
        ended, self._holds_ended = self._holds_ended, []
        for gang in ended:
            self._annotate_group(gang, {names.MOVE_TARGET_ANNOTATION: None}, "its move's hold not cleared")
        placed = [o for o in outcomes if o.ok]
        try:
            if self.writers == 1 or len(placed) < 2:
                return [self._bind(o) for o in placed]
            with ThreadPoolExecutor(max_workers=self.writers, thread_name_prefix="bind") as pool:
                return list(pool.map(self._bind, placed))
        finally:
            # Reports wait for the cycle's Bindings: they would only slow them down (the same
            # connections, the same server).
            with self.lock:
                later, self._later = self._later, []
                self._reports = [f for f in self._reports if not f.done()]
                self._reports += [self._reporter.submit(write, *args) for write, args in later]

    def _keep_usage(self) -> None:
        """With team queues, each queue's fair-share usage brought up to now in the cluster
        (usage.py) when a pod stopped holding GPUs since it was last kept, or it is KEEP_EVERY_S
        old: replaced at the resourceVersion last seen, read again and redone after a 409 (the
        other writer's ``as_of`` then bounds what is added), so no update is lost and no
        GPU-second counted twice. Not written, it is tried again USAGE_RETRY_S later."""
        for _ in range(3):
            with self.lock:
                if not self.cache.queues or self.clock.monotonic() < self._usage_retry_at:
                    return
                now = self.clock.now()
                config = self.cache.usage_config
                kept = self.cache.kept_usage
                due = bool(self.cache.ended) or any(now - k.as_of >= KEEP_EVERY_S for k in kept.values())
                if not (due or (not kept and self.cache.gpu_spans(now))):  # none kept yet: from the first run
                    return
                fresh = self.cache.usage_now(now)
            if config is None:
                if not self._usage_missing_said:
                    log.warning("fair-share usage not kept: the ConfigMap %s/%s is missing; apply `ringleader kube "
                                "manifests` again", names.SYSTEM_NAMESPACE, names.QUEUE_USAGE_CONFIG)  # fmt: skip
                    self._usage_missing_said = True
                return
            # its labels and annotations (kubectl's last-applied one) kept; the resourceVersion seen
            seen = config.get("metadata") or {}
            meta = {key: seen[key] for key in ("name", "namespace", "uid", "resourceVersion", "labels", "annotations")
                    if key in seen}  # fmt: skip
            try:
                self._check_lease()
                written = self.api.replace_config_map(names.SYSTEM_NAMESPACE, names.QUEUE_USAGE_CONFIG,
                                                      {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta,
                                                       "data": usage_data(fresh)})  # fmt: skip
            except ApiError as exc:
                if exc.status != 409:
                    self._usage_not_kept(exc)
                    return
                try:
                    written = self.api.config_map(names.SYSTEM_NAMESPACE, names.QUEUE_USAGE_CONFIG) or {}
                except ApiError as again:
                    self._usage_not_kept(again)
                    return
                with self.lock:
                    self.cache.apply_usage("MODIFIED" if written else "DELETED", written)
                continue
            except LostLease:
                return
            with self.lock:
                self.cache.apply_usage("MODIFIED", written)
            return

    def _usage_not_kept(self, exc: ApiError) -> None:
        log.warning("fair-share usage not kept: %s (trying again in %.0f s)", exc.message, USAGE_RETRY_S)
        self._usage_retry_at = self.clock.monotonic() + USAGE_RETRY_S

    def _bind(self, outcome: Outcome) -> BindResult:
        """One Binding per member; gated members (DRA workers) are pinned instead, the whole
        gang's at once, then ungated: kube-scheduler binds them where they are pinned."""
        gang, members = outcome.gang.key, outcome.assignments
        gated = [a for a in members if a.pod.gated]
        bound: list[Assignment] = []
        try:
            if gated:
                self._check_lease()
                pin_gang(self.dra, [Pin(a.pod.namespace, a.pod.name, a.node, a.gpus, self._annotations(a, outcome))
                                    for a in gated])  # fmt: skip
                for _ in gated:
                    self.metrics.bound(True)
            for a in members:
                if a.pod.gated:
                    continue
                self._check_lease()
                self.api.bind(a.pod.namespace, a.pod.name, a.pod.uid, a.node, self._annotations(a, outcome))
                bound.append(a)
                self.metrics.bound(True)
        except (ApiError, PinError, LostLease) as exc:
            why = exc.message if isinstance(exc, ApiError) else str(exc) or "lost the scheduler Lease"
            if not isinstance(exc, LostLease) and len(bound) < len(members):
                self.metrics.bound(False)
            self._roll_back(outcome, bound, why)
            self._back_off(gang)
            return BindResult(gang, False, why)
        with self.lock:
            self._backoff.pop(gang, None)
        self._told.pop(gang, None)
        self._report(self._report_bound, outcome)
        return BindResult(gang, True)

    def _back_off(self, gang: str) -> None:
        """A failed bind or pin: the gang waits before its next try, twice as long as last time."""
        with self.lock:
            last = self._backoff.get(gang, (0.0, 0.0))[1]
            wait_s = min(MAX_BACKOFF_S, last * 2) if last else INITIAL_BACKOFF_S
            self._backoff[gang] = (self.clock.monotonic() + wait_s, wait_s)

    def _backing_off(self, gang: str) -> bool:
        entry = self._backoff.get(gang)
        return entry is not None and self.clock.monotonic() < entry[0]

    def _preempt(self, outcome: Outcome) -> None:
        """Each victim gang's pods marked DisruptionTarget and deleted with their own grace, as
        kube-scheduler preempts (SIGTERM from kubelet, the grace, SIGKILL); their controller
        (mpi-operator) makes new pods, which wait in the queue again. The preemptor holds the
        GPUs they free as its reservation meanwhile."""
        assert outcome.preemption is not None
        victims = set(outcome.preemption.names)
        with self.lock:
            pods = [p for p in self.cache.pods.values() if p.gang_key in victims and p.holds_resources]
        why = (f"{preempted_by(job_request(outcome.gang), outcome.preemption)}: {names.SCHEDULER_NAME} deletes "
               "the gang's pods with their grace; mpi-operator makes them again, to run with the restart count "
               "raised")  # fmt: skip
        for victim in sorted(victims):  # counted first: the new pods are bound with the count raised
            self._count_preemption(victim, pods)
        self._disrupt(pods, "Preempted", why)

    def _move(self, move: Move) -> None:
        """A move as a preemption: the gang's pods marked DisruptionTarget with the move's numbers
        and deleted with their grace (its restart counted, using up none of --max-restarts); the
        target is held for it until the controller's new pods are whole (``_start_moved``)."""
        gang = move.job.name
        with self.lock:
            pods = [p for p in self.cache.pods.values() if p.gang_key == gang and p.holds_resources]
        if not pods or any(p.deleting for p in pods):
            return
        why = (f"{move.describe()}; {names.SCHEDULER_NAME} deletes the gang's pods with their grace; its controller "
               "makes them again, started there from its checkpoint")  # fmt: skip
        self._count_preemption(gang, pods, move.target)
        self._disrupt(pods, "Moved", why)

    def _disrupt(self, pods: Sequence[PodInfo], reason: str, why: str) -> None:
        """Each pod marked DisruptionTarget saying ``why`` and deleted with its own grace, as
        kube-scheduler preempts (kubelet: SIGTERM, the grace, SIGKILL); an Event ``reason``."""
        now = self._stamp()
        for pod in pods:
            try:
                self._check_lease()
                self.api.pod_disruption_target(pod.namespace, pod.name, why[:1024], now)
                self.api.delete_pod(pod.namespace, pod.name, pod.uid)
            except (ApiError, LostLease) as exc:
                said = exc.message if isinstance(exc, ApiError) else exc
                log.warning("pod %s: not %s: %s", pod.key, reason.lower(), said)
                continue
            with self.lock:
                self.cache.doomed(pod.key)
            self._report(self._event, pod, "Normal", reason, why)

    def _count_preemption(self, gang: str, pods: Sequence[PodInfo], moving_to: Placement | None = None) -> None:
        """A preempted gang's next run is a restart, as on every engine (RINGLEADER_RESTARTS), one
        that uses up none of its --max-restarts: both counts on its PodGroup, with the run it ends
        and, for a move, the target held for it (``moving_to``)."""
        with self.lock:
            restarts = self.cache.restarts.get(gang, 0) + 1
            preemptions = self.cache.preemptions.get(gang, 0) + 1
            self.cache.restarts[gang], self.cache.preemptions[gang] = restarts, preemptions
            runs = self._runs_ended(gang, pods)
            if moving_to is not None:
                self.cache.moving[gang] = moving_to
        notes = {names.RESTARTS_ANNOTATION: str(restarts), names.PREEMPTIONS_ANNOTATION: str(preemptions),
                 names.RUNS_ANNOTATION: runs}  # fmt: skip
        if moving_to is not None:
            notes[names.MOVE_TARGET_ANNOTATION] = json.dumps(moving_to.as_dict())
        self._annotate_group(gang, notes, "preemption not counted on its PodGroup")

    def _annotate_group(self, gang: str, notes: Mapping[str, str | None], failed: str) -> None:
        """``notes`` written on the gang's PodGroup (None: removed); a failure is logged as ``failed``."""
        namespace, _, name = gang.partition("/")
        try:
            self._check_lease()
            self.api.podgroup_annotate(namespace, name, notes)
        except (ApiError, LostLease) as exc:
            log.warning("gang %s: %s: %s", gang, failed, exc)

    # -- restarts (restarts.py) ------------------------------------------------------------------------
    def _restart_failed(self) -> None:
        """Each gang a member of which failed since the last cycle: the failure blamed, then, with
        restarts left, the count raised on its PodGroup and every pod of the gang deleted with its
        grace (mpi-operator makes them again; they wait in the queue as any gang)."""
        with self.lock:
            failures, self.cache.failures = self.cache.failures, []
        for failed in failures:
            gang, pod = failed.pod.gang_key, failed.pod
            with self.lock:
                current = self.cache.restarts.get(gang, 0)
                restarted = current - self.cache.preemptions.get(gang, 0)  # its restarts after failures
                members = [p for p in self.cache.pods.values() if p.gang_key == gang and not p.deleting]
                node = self.cache.nodes.get(pod.node or "")
            if failed.run < current:  # a member of a run restarted already: mpi-operator makes it again once gone
                self._delete_member(pod)
                continue
            failure = failed.failure(sorted({p.node for p in members if p.node} | {pod.node or ""}),
                                     node is None or node.ready)  # fmt: skip
            self._blame(failed, failure)
            restart = restart_number(restarted, failed.max_restarts)
            if restart is None:
                continue  # no restart left: the job fails as mpi-operator decides
            with self.lock:
                self.cache.restarts[gang] = current + 1
                runs = self._runs_ended(gang, [pod, *members])
            try:
                self._check_lease()
                self.api.podgroup_annotate(pod.namespace, pod.gang, {names.RESTARTS_ANNOTATION: str(current + 1),
                                                                     names.RUNS_ANNOTATION: runs})  # fmt: skip
            except (ApiError, LostLease) as exc:
                log.warning("gang %s: restart count not written: %s", gang, exc)
                continue
            said = restarting_text(f"{pod.name} failed: {failure.why}", restart, failed.max_restarts)
            self._event(pod, "Warning", "Restarting", f"{said}: every pod of the gang deleted, to be placed again")
            for member in [pod, *members]:  # the failed one too: it stays, Failed, until deleted
                self._delete_member(member)

    def _runs_ended(self, gang: str, pods: Sequence[PodInfo]) -> str:
        """The gang's runs with the one its ``pods`` end now (from the first of them to start),
        kept in the cache and as its PodGroup's annotation says them; called with the lock held."""
        runs = list(self.cache.runs.get(gang, ()))
        started = _run_start([p for p in pods if p.gang_key == gang])
        if started is not None:
            runs.append((started, max(self.clock.now(), started)))
        self.cache.runs[gang] = runs
        return runs_annotation(runs)

    def _delete_member(self, pod: PodInfo) -> None:
        """A member of a gang being restarted deleted with its grace (its controller makes it again)."""
        try:
            self.api.delete_pod(pod.namespace, pod.name, pod.uid)
        except ApiError as exc:
            log.warning("pod %s: not deleted for the restart: %s", pod.key, exc.message)
            return
        with self.lock:
            self.cache.doomed(pod.key)

    def _blame(self, failed: PodFailure, failure: Failure) -> None:
        """A node or network fault counted on the node (its annotation); the node is cordoned,
        with the reason, as ``cordon_reason`` says."""
        if not failure.node_fault or failure.node is None:
            return
        gang = failed.pod.gang_key
        try:
            node = self.api.get_node(failure.node)
            faults = blamed(node, gang, failed.run, failure.why)
            notes: dict[str, str | None] = {names.FAULTS_ANNOTATION: json.dumps(faults, sort_keys=True)}
            cordoned = bool((node.get("spec") or {}).get("unschedulable"))
            said = [(key.rpartition("#")[0], why) for key, why in faults.items()]
            reason = cordon_reason(said, failure, f"gang {gang}", cordoned, self._cordon_reasons())
            if reason is None:
                self.api.annotate_node(failure.node, notes)
                return
            self.api.cordon_node(failure.node, True, {**notes, names.CORDON_REASON_ANNOTATION: reason[:1024]})
        except ApiError as exc:
            log.warning("node %s: failure not recorded: %s", failure.node, exc.message)
            return
        self._event(failed.pod, "Warning", "NodeCordoned", cordoned_text(failure.node, reason))

    def _cordon_reasons(self) -> Iterator[str]:
        """Why each node ringleader cordoned is cordoned: read from the server only when iterated
        (where a cordon may follow)."""
        nodes, _ = self.api.list("nodes")
        for node in nodes:
            reason = ((node.get("metadata") or {}).get("annotations") or {}).get(names.CORDON_REASON_ANNOTATION)
            if reason:
                yield str(reason)

    def _report_bound(self, outcome: Outcome) -> None:
        for a in outcome.assignments:
            self._event(a.pod, "Normal", "Scheduled", f"Successfully assigned {a.pod.key} to {a.node}" +
                        (f" (GPUs {','.join(map(str, a.gpus))}; {outcome.summary})" if a.gpus else ""))  # fmt: skip
        self._podgroup(outcome, "Scheduled", "")

    def _report(self, write: Callable[..., None], *args: Any) -> None:
        if not self.reports_async:
            write(*args)
            return
        with self.lock:
            self._later.append((write, args))

    def flush_reports(self, timeout: float | None = None) -> None:
        """Wait until every report handed to the report threads is written."""
        with self.lock:
            pending = list(self._reports)
        wait(pending, timeout)

    def _roll_back(self, outcome: Outcome, bound: list[Assignment], why: str) -> None:
        log.warning("gang %s: bind failed (%s); undoing %d bound member(s)", outcome.gang.key, why, len(bound))
        for a in bound:
            try:
                self.api.delete_pod(a.pod.namespace, a.pod.name, a.pod.uid)
            except ApiError as exc:
                log.error("gang %s: could not delete %s: %s", outcome.gang.key, a.pod.key, exc.message)
        with self.lock:
            for a in outcome.assignments:
                if a in bound:
                    self.cache.doomed(a.pod.key)  # deleted: its controller makes a new pod
                else:
                    self.cache.forget(a.pod.key)
        self.metrics.rolled_back()
        reason = f"gang bind failed and was undone ({len(bound)} bound member(s) deleted): {why}"
        for a in outcome.assignments:
            self._report(self._event, a.pod, "Warning", "FailedScheduling", reason)

    def _check_lease(self) -> None:
        if not self.elector.leading:
            raise LostLease()

    def _annotations(self, a: Assignment, outcome: Outcome) -> Mapping[str, str]:
        # the run's restart count on every member: its programs read it (RINGLEADER_RESTARTS)
        notes = {names.DECISION_ANNOTATION: outcome.summary,
                 names.RESTARTS_ANNOTATION: str(self.cache.restarts.get(outcome.gang.key, 0))}  # fmt: skip
        if a.worker is not None:
            ids = ",".join(map(str, a.gpus))
            node = self.cache.nodes.get(a.node)
            uuids = node.gpu_uuids if node is not None else ()
            notes[names.GPU_IDS_ANNOTATION] = ids
            notes[names.GPU_DEVICES_ANNOTATION] = ",".join(uuids[g] for g in a.gpus) if uuids else ids
            notes[names.GPU_IDS_UID_ANNOTATION] = a.pod.uid
            notes[names.WORKER_INDEX_ANNOTATION] = str(a.worker)
        return notes

    def _report_pending(self, outcome: Outcome) -> None:
        gang = outcome.gang.key
        told = f"{outcome.reason_code}: {outcome.reason}"
        if self._told.get(gang) == told:
            return  # said already: one Event per change of reason, not one per cycle
        self._told[gang] = told
        self._report(self._write_pending, outcome)

    def _write_pending(self, outcome: Outcome) -> None:
        kind = "Unresolvable" if outcome.code is Code.UNRESOLVABLE else "Unschedulable"
        now = self._stamp()
        for pod in outcome.gang.pending:
            with self.lock:  # written late (reports run behind the cycle): not on a pod placed since
                current = self.cache.pods.get(pod.key)
                placed = current is None or not current.pending or pod.key in self.cache.assumed
            if placed:
                continue
            try:  # reason Unschedulable for both, as kube-scheduler writes it
                self.api.pod_unschedulable(pod.namespace, pod.name, f"{kind}: {outcome.reason}"[:1024], now)
            except ApiError as exc:
                log.warning("pod %s: PodScheduled condition not written: %s", pod.key, exc.message)
            self._event(pod, "Warning", "FailedScheduling", f"{kind}: {outcome.reason}")
        self._podgroup(outcome, "Pending", outcome.reason, outcome.reason_code)

    def _podgroup(self, outcome: Outcome, phase: str, reason: str, code: str = "") -> None:
        first = outcome.gang.pending[0] if outcome.gang.pending else None
        if first is None or not first.grouped:
            return
        try:
            status: dict[str, Any] = {"phase": phase}
            if phase == "Scheduled":
                status["scheduleStartTime"] = self._stamp()
            self.api.podgroup_status(first.namespace, first.gang, status)
            self.api.podgroup_annotate(first.namespace, first.gang, {names.PENDING_ANNOTATION: reason,
                                                                     names.PENDING_CODE_ANNOTATION: code})
        except ApiError as exc:
            log.warning("podgroup %s: status not written: %s", outcome.gang.key, exc.message)

    def _stamp(self) -> str:
        """Now, to the second, as Events and conditions carry it."""
        return micro_time(self.clock.now()).split(".")[0] + "Z"

    def _event(self, pod: PodInfo, kind: str, reason: str, message: str) -> None:
        if not self.events:
            return
        now = self._stamp()
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{pod.name}.{time.time_ns():x}", "namespace": pod.namespace},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": pod.name, "namespace": pod.namespace,
                               "uid": pod.uid},
            "reason": reason, "message": message[:1024], "type": kind, "count": 1,
            "firstTimestamp": now, "lastTimestamp": now,
            "source": {"component": names.SCHEDULER_NAME},
            "reportingComponent": names.SCHEDULER_NAME, "reportingInstance": self.identity,
        }  # fmt: skip
        try:
            self.api.create_event(pod.namespace, event)
        except ApiError as exc:
            log.warning("event on %s not written: %s", pod.key, exc.message)

    # -- the daemon -----------------------------------------------------------------------------------
    def run(self, watch_timeout: int = 300, retry_seconds: float = 2.0, stall_seconds: float | None = None) -> None:
        """Informer and lease threads, and the cycle in this thread, until ``stop()``. An
        informer that hears nothing for ``stall_seconds`` (default: the watch timeout, the
        client's grace past it, and twice the longest backoff) fails /healthz."""
        self.stall_seconds = stall_seconds or watch_timeout + self.api.watch_grace + 60.0
        for informer in self.informers.values():
            threading.Thread(target=self._informer_loop, args=(informer, watch_timeout), daemon=True,
                             name=f"informer-{informer.kind}").start()  # fmt: skip
        lease = threading.Thread(target=self._lease_loop, args=(retry_seconds,), daemon=True, name="lease")
        lease.start()
        self.reports_async = True
        try:
            while not self._stop.is_set():
                self.cycle()
                # Woken by any cache change; a periodic pass too, for gangs freed by the clock.
                self._wait_for_change(1.0)
        finally:
            self._stop.set()
            # A renewal in flight would take the lease back after it is given up.
            lease.join(30)
            self.flush_reports(30)
            self.elector.release()

    def _wait_for_change(self, seconds: float) -> None:
        """Until an informer changed the cache, ``stop()``, or ``seconds``. Cleared before the
        next cycle reads the cache: a change applied after the clear wakes the wait again, one
        applied before it is in what the cycle reads."""
        self.changed.wait(seconds)
        self.changed.clear()

    def _informer_loop(self, informer: Informer, timeout: int) -> None:
        backoff = 1.0
        while not self._stop.is_set():
            try:
                informer.sync(timeout)
                backoff = 1.0
            except ApiError as exc:
                log.warning("informer %s: %s (retrying in %.0f s)", informer.kind, exc.message, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)

    def _lease_loop(self, retry_seconds: float) -> None:
        while not self._stop.is_set():
            self.metrics.leader = int(self.elector.try_acquire_or_renew())
            self._stop.wait(retry_seconds)

    def stop(self) -> None:
        self._stop.set()
        self.changed.set()  # the cycle's wait ends now, not at its periodic pass
