"""Discrete-event simulation of a job trace on a declared cluster, over the real scheduler.

Events are arrivals and completions; after all events of one instant (completions first) one
scheduling pass runs over the queue in the runtime's order (priority, then FIFO), each job placed
by ``ringleader.scheduler.place`` under the policy being compared and committed with
``ClusterState.with_placement``; a completion releases GPUs with ``ClusterState.without_placement``
(``without_job`` restricted to the job's nodes).
A job runs ``iterations x step time`` of its placement (a ``StepTimeFn``, memoised by shape).

The pass gives the same decisions as ``schedule_queue`` over the whole queue, but skips the
``place`` calls that cannot succeed, which is what makes 10,000 jobs on 1,000 nodes fast:

* a job whose gang cannot fit the free worker slots at all (sum over nodes of free // gpus <
  workers) is not tried: every policy needs that many slots (a necessary condition, exact);
* jobs wait in buckets of one shape (priority, workers, gpus); placement is a pure function of
  (state, shape), so when a bucket's head fails every job behind it fails too: the bucket is
  *blocked* until a completion frees GPUs. An arrival alone only adds a job, so the next pass
  tries just the buckets not blocked (a policy that fails on some free GPUs also fails on fewer);
* one ``ClusterState`` is carried through the run: its group index (equivalent nodes) is built
  once and updated by ``with_placement`` / ``without_placement`` for the touched nodes only;
* at most ``max_failures`` failed ``place`` calls per pass (default 32; counted in the stats).
Nodes are simulated unlabelled so every job runs under the compared policy.

With a ``BackfillConfig`` that reserves (or ages), a pass instead is the queue's cycle
(``scheduler/cycle.py``), the one every engine runs, with the simulator as its host, so the
simulated queue is the runtime's; it only skips jobs that cannot start by the free worker slots
once no reservation is left to give, and it ends at a preemption (the simulator stops the
victims at once) to run again on the GPUs they freed. A running job's expected end is its start plus the trace's
``time_limit_s`` (unknown without one); it actually ends after ``iterations x step time``.

With a ``start_rule`` (``types.StartRule``: now, best, finish) every job gets that rule and its
work: ``iterations x`` the step time of its best placement on the empty cluster. Running jobs'
expected ends are then their predicted ends (``iterations x`` the step time of their placement as
priced when they started, the time limit if sooner). The model is both the queue's predictor and
the simulated world, so predictions are exact but for two things: a placement is weighed with the
uplink load of the moment, and ``work_error`` misjudges every job's work by a seeded factor.

With team ``queues`` (``scheduler/teams.py``) every pass sees the queues' quotas, the GPUs each
queue's running gangs hold and the fair-share factors of their usage so far (decayed GPU-seconds
of every run); a gang within its queue's quota reclaims what others borrowed as a preemption
does (``PreemptionCost``, its default where none is given).

With ``moves`` every pass also weighs moving each gang that runs degraded to its better placement
(``scheduler/move.py``), as the engines' queue does: a moved gang keeps what it trained up to its
last checkpoint, pays its restart (``PreemptionCost``, its default where none is given) and runs
on at once where the move put it.

With ``failures`` (``NodeFailures``) each node fails at seeded random times (a Poisson process of
mean ``mtbf_s``) while jobs remain: every gang running on it is restarted from its last
checkpoint as a preempted one is (``--max-restarts``: the queue places it again), and the node's
GPUs are out of the cluster for ``repair_s``.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from ringleader.model.predict import likely_range
from ringleader.reference import reference
from ringleader.scheduler import (
    NO_RESERVATIONS,
    BackfillConfig,
    Candidate,
    ClusterState,
    Code,
    Decision,
    Holding,
    JobRequest,
    NodeState,
    Placement,
    Snapshot,
    Waiting,
    WorkerSlot,
    get_policy,
    place,
    run_cycle,
)
from ringleader.scheduler.cycle import DEFAULT_BACKFILL
from ringleader.scheduler.framework import placement_metrics
from ringleader.scheduler.move import Movable, Move
from ringleader.scheduler.order import QueueOrder, Service, running_service
from ringleader.scheduler.policies.throughput import Estimator
from ringleader.scheduler.teams import TeamQueue, decayed, queue_of, run_usage
from ringleader.scheduler.types import RISKS
from ringleader.sim.families import EstimateError
from ringleader.sim.network import NetworkLoad
from ringleader.sim.steptime import Memoised, StepTime, StepTimeFn
from ringleader.sim.trace import TraceJob
from ringleader.topology.cluster import NodeSpec

COMPLETION, ARRIVAL, NODE_DOWN, NODE_UP = 0, 1, 2, 3
DOWN = "node down"  # the owner of a failed node's GPUs while it is repaired
DEFAULT_MAX_FAILURES = 32
Z_90 = 1.2815515655446004  # the standard normal's 90th percentile

_Shape = tuple[int, int, int]  # (priority, workers, gpus per worker)


@dataclass(frozen=True)
class PreemptionCost:
    """Gang preemption in a simulation: a victim keeps what it trained up to its last checkpoint
    (every ``checkpoint_s`` of its run) and pays ``restart_s`` (loading it, starting again) when
    it runs again."""

    checkpoint_s: float = 600.0
    restart_s: float = 60.0

    def __post_init__(self) -> None:
        if not (self.checkpoint_s > 0 and self.restart_s >= 0):
            raise ValueError(f"need checkpoint_s > 0 and restart_s >= 0, got {self}")


@dataclass(frozen=True)
class NodeFailures:
    """Nodes that fail in a simulation: each fails after a seeded exponential time of mean
    ``mtbf_s`` (its mean time between failures), its gangs restarted from their last checkpoint
    (``cost``), and is back ``repair_s`` later."""

    mtbf_s: float
    repair_s: float = 3600.0
    cost: PreemptionCost = PreemptionCost()
    seed: int = 0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.mtbf_s) and self.mtbf_s > 0 and self.repair_s >= 0):
            raise ValueError(f"need mtbf_s > 0 and repair_s >= 0, got {self}")


@dataclass
class JobRecord:
    """What happened to one job."""

    job: TraceJob
    start_s: float | None = None
    finish_s: float | None = None
    placement: Placement | None = None
    step: StepTime | None = None
    nodes_used: int = 0
    bottleneck: str = ""
    fragmentation_after: float = 0.0
    rejected: str | None = None  # why the job can never run on this cluster
    span_level: int = -1  # the network level its nodes' lowest common switch is at (-1: one node)
    preempted: int = 0  # times it was stopped for a gang of higher priority and requeued
    moved: int = 0  # times it was moved to a better placement (scheduler/move.py)
    failed: int = 0  # times a node failed under it and it was restarted
    lost_s: float = 0.0  # seconds of its runs lost to preemption or failures (since its last checkpoint)
    restart_s: float = 0.0  # what its current (or next) run pays to start again from its checkpoint
    runs: list[tuple[float, float]] = field(default_factory=list)  # (start, end) of each run, a preempted one too

    @property
    def jct_s(self) -> float | None:
        return None if self.finish_s is None else self.finish_s - self.job.arrival_s

    @property
    def queue_s(self) -> float | None:
        return None if self.start_s is None else self.start_s - self.job.arrival_s

    def gpu_seconds(self, until: float = math.inf) -> float:
        """GPU-seconds its runs held (up to ``until``): a preempted job's wait in between is not counted."""
        return self.job.total_gpus * sum(max(min(end, until) - start, 0.0) for start, end in self.runs)

    @property
    def images(self) -> float:
        if self.step is None:
            return 0.0
        return self.job.iterations * self.step.step_time_s * self.step.images_per_s


@dataclass
class Timeline:
    """Piecewise-constant cluster state after each instant with events."""

    times: list[float] = field(default_factory=list)
    busy_gpus: list[int] = field(default_factory=list)
    queued: list[int] = field(default_factory=list)
    stranded_share: list[float | None] = field(default_factory=list)  # None: no queue or no free GPU
    head_blocked: list[bool] = field(default_factory=list)  # enough free GPUs, head still waits
    level_fragmentation: list[tuple[float, ...]] = field(default_factory=list)  # per network level (sim/network.py)
    level_whole_free: list[tuple[int, ...]] = field(default_factory=list)  # wholly free switches per level


@dataclass
class SimStats:
    events: int = 0
    passes: int = 0
    place_calls: int = 0
    failed_places: int = 0
    capped_passes: int = 0
    step_time_misses: int = 0


@dataclass
class SimRun:
    policy: str
    total_gpus: int
    records: list[JobRecord]
    timeline: Timeline
    stats: SimStats
    label: str = ""  # its name in tables and plots when not the policy's ("topology/finish")
    node_failures: int | None = None  # nodes that failed (None: failures were not simulated)
    moves: bool = False  # gangs were moved to better placements (``JobRecord.moved``)

    @property
    def name(self) -> str:
        return self.label or self.policy


class Simulation:
    """One policy on one cluster and trace. ``run()`` returns a ``SimRun``."""

    def __init__(
        self,
        specs: list[NodeSpec],
        jobs: list[TraceJob],
        policy: str,
        step_time: StepTimeFn | Memoised,
        max_failures: int = DEFAULT_MAX_FAILURES,
        backfill: BackfillConfig = DEFAULT_BACKFILL,
        network_aware: bool = True,
        start_rule: str | None = None,
        work_error: float = 0.0,
        seed: int = 0,
        preemption: PreemptionCost | None = None,
        queues: tuple[TeamQueue, ...] = (),
        failures: NodeFailures | None = None,
        estimate_error: EstimateError | None = None,
        risk: str | None = None,
        prediction_error: bool = False,
        moves: bool = False,
    ) -> None:
        self.policy = get_policy(policy).name  # unknown names fail here, listing the known ones
        self.specs = [s.with_labels({}) for s in specs]
        # The network tree prices every run; ``network_aware`` says whether placement sees it.
        self.network = NetworkLoad(self.specs)
        self.priced = {s.name: NodeState(s) for s in self.specs} if self.network.levels else {}
        placed = self.specs if network_aware else [replace(s, network=None) for s in self.specs]
        self.state = ClusterState.empty(placed)
        _ = self.state.index  # built once, then carried and updated by with/without_placement
        self.free = [ns.n_free for ns in self.state.nodes]
        self.total_gpus = sum(self.free)
        self.hist = [0] * (max(self.free, default=0) + 1)  # nodes per free-GPU count
        for f in self.free:
            self.hist[f] += 1
        self.step_time = step_time if isinstance(step_time, Memoised) else Memoised(step_time)
        self.max_failures = max_failures
        if preemption is not None:  # the queue prices a stop with the restart it costs here, as
            # an engine prices it with the restarts it measured (``jobs.queues.queue_config``)
            backfill = replace(backfill, reorder=replace(backfill.reorder, restart_s=preemption.restart_s))
        self.backfill = backfill
        self.start_rule = start_rule
        if not work_error >= 0:
            raise ValueError(f"work_error must be >= 0, got {work_error}")
        self.work_error = work_error
        self.estimate_error = estimate_error or EstimateError("uniform", work_error)
        if risk is not None and risk not in RISKS:
            raise ValueError(f"risk {risk!r} is not one of {', '.join(RISKS)}")
        self.risk = risk
        self.prediction_error = prediction_error
        self.moves = moves
        self.moved_at: dict[str, float] = {}  # gang -> when it last moved
        # what orders beyond FIFO read: GPU-seconds each job ran, its last run's length, when
        # it last entered the queue (scheduler/order.py)
        self.ordered = backfill.order is not QueueOrder.FIFO or any(q.order not in (None, QueueOrder.FIFO)
                                                                    for q in queues)  # fmt: skip
        self.attained: dict[str, float] = {}
        self.last_run: dict[str, float] = {}
        self.seed = seed
        self.preemption = preemption
        self.stop_cost = preemption or PreemptionCost()  # what a stop loses: a preemption's, a move's
        self.queues = queues
        self.failures = failures
        self.random = random.Random(f"failures:{failures.seed}") if failures is not None else None
        self.down: dict[str, Placement] = {}  # failed node -> its GPUs held while it is repaired
        self.node_failures = 0
        self.usage: dict[str, tuple[float, float]] = {}  # queue -> (ended runs' decayed GPU-s, as of)
        self.holding: dict[str, Holding] = {}  # running jobs as the queue sees them at their start
        self.left: dict[str, int] = {}  # iterations left to a job that was preempted
        self.run_of: dict[str, tuple[int, float]] = {}  # running job -> (its completion event, run start)
        self.order_of: dict[str, int] = {}  # arrival order (its place in FIFO), kept when requeued
        self.work: dict[tuple[int, int, str, int, int, str], float] = {}  # shape -> s per iteration, best placement
        self.ideal: dict[tuple[object, ...], float | None] = {}  # QueuePass's memo, kept across passes
        self.queued: dict[str, Waiting] = {}  # waiting jobs as the queue sees them
        self.expected_ends: dict[str, float] = {}  # running jobs with a time limit
        self.jobs = sorted(jobs, key=lambda j: j.arrival_s)
        self.records = {j.name: JobRecord(j) for j in self.jobs}
        self.buckets: dict[_Shape, deque[tuple[int, TraceJob]]] = {}
        self.blocked: set[_Shape] = set()
        self.events: list[tuple[float, int, int, str]] = []
        self.seq = itertools.count()
        self.busy = 0
        self.stats = SimStats()
        self.timeline = Timeline()

    # -- never fitting ---------------------------------------------------------------------------
    def _reject_never_fitting(self) -> None:
        empty = self.state
        verdict: dict[tuple[int, int], str | None] = {}
        for job in self.jobs:
            key = (job.workers, job.gpus)
            if key not in verdict:
                decision = place(empty, JobRequest(job.name, job.workers, job.gpus), self.policy)
                verdict[key] = None if decision.ok else "; ".join(decision.reasons) or decision.code.value
            reason = verdict[key]
            if reason is not None:
                self.records[job.name].rejected = f"never fits this cluster: {reason}"

    # -- the loop --------------------------------------------------------------------------------
    def run(self) -> SimRun:
        misses0 = self.step_time.misses  # the cache may be shared
        self._reject_never_fitting()
        for order, job in enumerate(self.jobs):
            if self.records[job.name].rejected is None:
                heapq.heappush(self.events, (job.arrival_s, ARRIVAL, order, job.name))
        self.unfinished = sum(1 for r in self.records.values() if r.rejected is None)
        for spec in self.specs if self.failures is not None else ():
            self._next_failure(spec.name, 0.0)
        while self.events:
            now = self.events[0][0]
            while self.events and self.events[0][0] == now:
                _, kind, order, name = heapq.heappop(self.events)
                self.stats.events += 1
                if kind == COMPLETION:
                    if self.run_of.get(name, (None,))[0] == order:  # else: a run preemption ended
                        self._complete(name, now)
                elif kind == ARRIVAL:
                    self.order_of[name] = order
                    self._enqueue(self.records[name].job, now)
                elif kind == NODE_DOWN:
                    self._node_down(name, now)
                else:
                    self._node_up(name, now)
            if (self.backfill == NO_RESERVATIONS and self.start_rule is None and self.preemption is None
                    and not self.queues and not self.moves):  # fmt: skip
                self._pass(now)
            else:
                self._reserving_pass(now)
            self._sample(now)
        self.stats.step_time_misses = self.step_time.misses - misses0
        records = [self.records[j.name] for j in self.jobs]
        return SimRun(self.policy, self.total_gpus, records, self.timeline, self.stats,
                      node_failures=self.node_failures if self.failures is not None else None,
                      moves=self.moves)  # fmt: skip

    def _enqueue(self, job: TraceJob, now: float) -> None:
        order = self.order_of[job.name]
        self.buckets.setdefault((job.priority, job.workers, job.gpus), deque()).append((order, job))
        service = Service()
        if self.ordered:
            left = self.left.get(job.name, job.iterations)
            remaining = left * self._best_step_s(job) * self._misjudged(job)
            service = Service(self.attained.get(job.name, 0.0), now, self.last_run.get(job.name, 0.0), remaining)
        self.queued[job.name] = Waiting(self._request(job), order, job.arrival_s, service=service)

    # -- preemption and failures ------------------------------------------------------------------
    def _evict(self, name: str, now: float, failed: bool = False) -> None:
        """Stop ``name`` for a gang of higher priority (or, ``failed``, a node that failed under
        it): it keeps what it trained up to its last checkpoint and goes back to the queue in its
        old place, to pay its restart when it runs again."""
        cost = self.failures.cost if failed and self.failures is not None else self.stop_cost
        record = self.records[name]
        self._stop(name, now, cost)
        if failed:
            record.failed += 1
        else:
            record.preempted += 1
        self._enqueue(record.job, now)

    def _stop(self, name: str, now: float, cost: PreemptionCost) -> None:
        """End ``name``'s run at ``now``, keeping what it trained up to its last checkpoint; its
        next run pays ``cost``'s restart."""
        record = self.records[name]
        assert record.placement is not None and record.step is not None
        started = self._end_run(name, now)
        assert started is not None
        trained = max(now - started - record.restart_s, 0.0)
        kept = math.floor(trained / cost.checkpoint_s) * cost.checkpoint_s
        done = min(int(kept / record.step.step_time_s), self.left.get(name, record.job.iterations))
        self.left[name] = self.left.get(name, record.job.iterations) - done
        record.lost_s += trained - done * record.step.step_time_s
        record.restart_s = cost.restart_s
        self._release(name, record.placement)

    # -- moves (scheduler/move.py) ------------------------------------------------------------------
    def _movable(self, name: str, now: float) -> Movable:
        """Running gang ``name`` as a move weighs it: the work it has left as the queue sees it
        (what it trained so far counted, its work misjudged as at its submit), and a restart
        that costs what a stop now loses since its last checkpoint besides the restart itself."""
        record, cost = self.records[name], self.stop_cost
        assert record.placement is not None and record.step is not None
        trained = max(now - self.run_of[name][1] - record.restart_s, 0.0)
        left = max(self.left.get(name, record.job.iterations) - trained / record.step.step_time_s, 0.0)
        left_s = left * self._best_step_s(record.job) * self._misjudged(record.job)
        restart_s = cost.restart_s + trained % cost.checkpoint_s
        return Movable(self._request(record.job), record.placement, left_s, restart_s, self.moved_at.get(name))

    def _move(self, move: Move, now: float) -> None:
        """Stop the gang and start it at once where ``move`` puts it (the simulator's stop takes
        no time: the target it was planned on is still free)."""
        name = move.job.name
        self._stop(name, now, self.stop_cost)
        self.records[name].moved += 1
        self.moved_at[name] = now
        metrics = placement_metrics(self.state.by_name, move.target)
        chosen = Candidate(move.target, metrics, (), ())
        self._start(self.records[name].job, Decision(move.job, self.policy, Code.SUCCESS, chosen=chosen), now)

    def _next_failure(self, node: str, now: float) -> None:
        """The node's next failure, while jobs remain (a failure with none left never comes)."""
        assert self.failures is not None and self.random is not None
        if self.unfinished:
            heapq.heappush(self.events, (now + self.random.expovariate(1 / self.failures.mtbf_s), NODE_DOWN,
                                         next(self.seq), node))  # fmt: skip

    def _node_down(self, node: str, now: float) -> None:
        """Every gang on ``node`` restarted from its checkpoint; its GPUs out until repaired."""
        assert self.failures is not None
        if not self.unfinished:
            return
        self.node_failures += 1
        for name in [n for n in self.run_of if node in self._placement(n).nodes]:
            self._evict(name, now, failed=True)
        gpus = self.state.node(node).free_gpus
        held = Placement(f"{DOWN} {node}", (WorkerSlot(0, node, tuple(gpus)),))
        self.down[node] = held
        self._commit(self.state.with_placement(held), held)
        heapq.heappush(self.events, (now + self.failures.repair_s, NODE_UP, next(self.seq), node))

    def _placement(self, name: str) -> Placement:
        """Where running job ``name`` runs."""
        placement = self.records[name].placement
        assert placement is not None  # set when it started
        return placement

    def _node_up(self, node: str, now: float) -> None:
        held = self.down.pop(node)
        self._commit(self.state.without_placement(held), held)
        self.blocked.clear()
        self._next_failure(node, now)

    # -- start rules ------------------------------------------------------------------------------
    def _request(self, job: TraceJob) -> JobRequest:
        request = replace(request_of(job), may_preempt=self.preemption is not None)
        if self.risk is not None:
            request = replace(request, risk=self.risk)
        if self.start_rule is None:
            return request
        work = job.iterations * self._best_step_s(job) * self._misjudged(job)
        return replace(request, start_rule=self.start_rule, work_s=work)

    def _true_step(self, job: TraceJob, step: StepTime, nodes: int) -> StepTime:
        """The step ``job`` really runs at where predictions are wrong (``prediction_error``):
        the model's, off by a seeded error e (predicted / measured - 1) drawn so that its 10th
        and 90th percentiles are the model's held-out ones for that many nodes (reference.toml
        [intervals]; log(1 + e) normal); the prediction itself where they are not."""
        if not self.prediction_error:
            return step
        low, high = reference()["intervals"]["one_node" if nodes == 1 else "several_nodes"]
        mid, spread = (math.log1p(low) + math.log1p(high)) / 2, (math.log1p(high) - math.log1p(low)) / (2 * Z_90)
        z = random.Random(f"{self.seed}:rate:{job.name}").gauss(0.0, 1.0)
        off = math.exp(mid + spread * z)  # measured = predicted / (1 + e): each step takes (1 + e) times
        return replace(step, step_time_s=step.step_time_s * off, images_per_s=step.images_per_s / off)

    def _misjudged(self, job: TraceJob) -> float:
        """How far off the queue's idea of ``job``'s work is: a seeded factor of the estimate
        error model (``sim/families.py``; by default log-uniform in [1/(1+E), 1+E] for
        ``work_error`` E, 1 without error)."""
        return self.estimate_error.factor(self.seed, job.name)

    def _best_step_s(self, job: TraceJob) -> float:
        """The step time of ``job`` on its best placement: the one ``place`` gives on the empty cluster."""
        key = (job.workers, job.gpus, job.model, job.batch_size, job.accumulation, job.precision)
        if key not in self.work:
            empty = self.state.all_free()
            placement = place(empty, request_of(job), self.policy).placement
            assert placement is not None  # jobs that never fit were rejected before any arrival
            nodes = {n: empty.node(n) for n in placement.nodes}
            if self.network.levels:  # alone on the network: its own uplinks, nobody else's
                step = self.step_time(self.priced, placement, job, dict.fromkeys(self.network.crossed(placement), 1))
            else:
                step = self.step_time(nodes, placement, job)
            self.work[key] = step.step_time_s
        return self.work[key]

    def _images_per_s(self, nodes: Mapping[str, NodeState], placement: Placement, request: JobRequest) -> float:
        """The start rules' estimator: the simulator's own step-time model, with the uplink load
        of the gangs running now where there is a network tree."""
        job = self.records[request.name].job
        if self.network.levels:
            return self.step_time(self.priced, placement, job, self.network.peek(placement)).images_per_s
        return self.step_time(nodes, placement, job).images_per_s

    @property
    def _estimator(self) -> Estimator:
        """The queue's estimator: the simulator's step-time model, with the model's likely ranges
        where a risk is set (``--risk``), as the engines' queue has them."""
        return _Ranged(self._images_per_s) if self.risk is not None else self._images_per_s

    def _slots(self, gpus: int) -> int:
        return sum(count * (f // gpus) for f, count in enumerate(self.hist) if count and f >= gpus)

    def _head(self) -> tuple[_Shape, TraceJob] | None:
        best: tuple[_Shape, TraceJob] | None = None
        best_order: tuple[int, int] | None = None
        for shape, queue in self.buckets.items():
            order = (-shape[0], queue[0][0])
            if best_order is None or order < best_order:
                best, best_order = (shape, queue[0][1]), order
        return best

    def _pass(self, now: float) -> None:
        self.stats.passes += 1
        failures = 0
        while True:
            pick: _Shape | None = None
            pick_order: tuple[int, int] | None = None
            for shape, queue in self.buckets.items():
                if shape in self.blocked:
                    continue
                if self._slots(shape[2]) < shape[1]:
                    self.blocked.add(shape)
                    continue
                order = (-shape[0], queue[0][0])
                if pick_order is None or order < pick_order:
                    pick, pick_order = shape, order
            if pick is None:
                return
            job = self.buckets[pick][0][1]
            if self._try(job, now):
                self.buckets[pick].popleft()
                if not self.buckets[pick]:
                    del self.buckets[pick]
                continue
            self.blocked.add(pick)
            failures += 1
            if failures >= self.max_failures:
                self.stats.capped_passes += 1
                return

    def _reserving_pass(self, now: float) -> None:
        """One pass of the shared queue; after a preemption, the victims are stopped and the
        pass runs again on the GPUs they freed (the simulator stops a victim at once)."""
        for _ in range(len(self.records) + 1):  # each pass that preempts stops at least one gang
            if not self._one_reserving_pass(now):
                return
        self.stats.capped_passes += 1  # a bound, not a path: no queue should preempt this often

    def _one_reserving_pass(self, now: float) -> bool:
        """The queue's cycle (``scheduler/cycle.py``) over the simulated cluster, acted on; True
        when it preempted (the victims stop at once: the cycle ends there, to run again)."""
        self.stats.passes += 1
        cycle = run_cycle(self._snapshot(now))
        self.stats.place_calls += len(cycle.nominated)
        for decision in cycle.decisions:
            if decision.preemption is not None:
                for victim in decision.preemption.names:
                    self._evict(victim, now)
                return True
            if decision.chosen is None:
                self.stats.failed_places += 1
                continue
            job = self.records[decision.job.name].job
            self.buckets[(job.priority, job.workers, job.gpus)].remove((self.queued[job.name].seq, job))
            if not self.buckets[(job.priority, job.workers, job.gpus)]:
                del self.buckets[(job.priority, job.workers, job.gpus)]
            self._start(job, decision, now)
        for move in cycle.moves:
            self._move(move, now)
        return False

    def _snapshot(self, now: float) -> Snapshot:
        """The simulated queue at ``now``: the running gangs (preemptible where gangs may preempt
        or reclaim), the team queues with the decayed GPU-seconds of every run so far."""
        holding = [self._holding(held, now) for held in self.holding.values()]
        usage = {name: decayed(total, as_of, now) for name, (total, as_of) in self.usage.items()}
        for name, (_, started) in self.run_of.items() if self.queues else ():  # usage is the queues'
            job = self.records[name].job
            usage[queue_of(job)] = usage.get(queue_of(job), 0.0) + run_usage(job.total_gpus, started, now, now)
        if self.moves:
            holding = [replace(h, move=self._movable(h.name, now)) for h in holding]
        return Snapshot(self.state, list(self.queued.values()), now, holding, self.queues, usage,
                        config=self.backfill, estimate=self._estimator, policy=self.policy, explain=False,
                        stop_at_preemption=True, ideal=self.ideal)  # fmt: skip

    def _holding(self, held: Holding, now: float) -> Holding:
        """A running gang as the queue sees it at ``now``: ``held`` (as at its start), and where
        it is preemptible (gangs may preempt or reclaim) the GPU-seconds it attained and its
        predicted time left (its work at its best placement's rate, misjudged as the queue
        misjudges it; once overrun, as the engines count it: ``order.running_service``). Those
        are read only of a gang that may be stopped: the others are as at their start."""
        if not held.preemptible:
            return held
        name, started = held.name, held.started_s
        assert started is not None
        job = self.records[name].job
        end = None
        if self.ordered:
            work = self.left.get(name, job.iterations) * self._best_step_s(job) * self._misjudged(job)
            end = started + work + self.records[name].restart_s
        ended = Service(self.attained.get(name, 0.0))
        _, attained, remaining = running_service(job.total_gpus, ended, started, now, end)
        return Holding(name, held.priority, held.queue, held.expected_end_s, preemptible=True, started_s=started,
                       attained_gpu_s=attained, remaining_s=remaining, checkpoint_s=held.checkpoint_s)  # fmt: skip

    def _end_run(self, name: str, now: float) -> float | None:
        """End ``name``'s run at ``now`` (completed or preempted): kept in its record and, with
        queues, in its queue's usage; returns when the run started (None: it was not running)."""
        run = self.run_of.pop(name, None)
        if run is None:
            return None
        record, started = self.records[name], run[1]
        record.runs.append((started, now))
        self.attained[name] = self.attained.get(name, 0.0) + record.job.total_gpus * (now - started)
        self.last_run[name] = now - started
        if self.queues:
            queue = queue_of(record.job)
            total, as_of = self.usage.get(queue, (0.0, now))
            gpu_s = run_usage(record.job.total_gpus, started, now, now)
            self.usage[queue] = (decayed(total, as_of, now) + gpu_s, now)
        return started

    def _try(self, job: TraceJob, now: float) -> bool:
        self.stats.place_calls += 1
        decision = place(self.state, request_of(job), self.policy)
        if decision.chosen is None:
            self.stats.failed_places += 1
            return False
        self._start(job, decision, now)
        return True

    def _start(self, job: TraceJob, decision: Decision, now: float) -> None:
        """Start ``job`` where ``decision`` put it."""
        assert decision.chosen is not None
        placement = decision.chosen.placement
        if self.network.levels:
            step = self.step_time(self.priced, placement, job, self.network.start(placement))
        else:
            step = self.step_time({name: self.state.node(name) for name in placement.nodes}, placement, job)
        step = self._true_step(job, step, len(placement.nodes))
        self._commit(self.state.with_placement(placement), placement)
        self.queued.pop(job.name, None)
        record = self.records[job.name]
        iterations = self.left.get(job.name, job.iterations)
        run_s = iterations * step.step_time_s + record.restart_s
        ends = [now + job.time_limit_s] if job.time_limit_s is not None else []
        if self.start_rule is not None:  # the end the queue predicts (the run may differ: see above)
            ends.append(now + run_s * self._misjudged(job))
        if ends:
            self.expected_ends[job.name] = min(ends)
        if record.start_s is None:  # a requeued job keeps its first start (its queueing ended then)
            record.start_s = now
        record.placement, record.step = placement, step
        metrics = decision.chosen.metrics
        record.nodes_used = metrics.nodes_used
        record.bottleneck = metrics.bottleneck.describe()  # submit's and predict's words
        record.fragmentation_after = metrics.fragmentation_after
        record.span_level = self.network.span(placement)
        self.busy += job.total_gpus
        run = next(self.seq)
        self.run_of[job.name] = (run, now)
        self.holding[job.name] = Holding(job.name, job.priority, queue_of(job), self.expected_ends.get(job.name),
                                         preemptible=self.preemption is not None or bool(self.queues),
                                         started_s=now, checkpoint_s=self.stop_cost.checkpoint_s)  # fmt: skip
        heapq.heappush(self.events, (now + run_s, COMPLETION, run, job.name))

    def _commit(self, state: ClusterState, placement: Placement) -> None:
        # Touch the index so the next with/without_placement carries it (it updates only an
        # index already built; two commits in a row would otherwise drop it and rebuild O(nodes)).
        _ = state.index
        self.state = state
        for name in placement.nodes:
            i = state.positions[name]
            old, new = self.free[i], state.nodes[i].n_free
            self.hist[old] -= 1
            self.hist[new] += 1
            self.free[i] = new
            self.network.node_free_changed(name, new - old)

    def _complete(self, name: str, now: float) -> None:
        record = self.records[name]
        assert record.placement is not None
        record.finish_s = now
        self.unfinished -= 1
        self._end_run(name, now)
        self._release(name, record.placement)

    def _release(self, name: str, placement: Placement) -> None:
        self.expected_ends.pop(name, None)
        self.holding.pop(name, None)
        self._commit(self.state.without_placement(placement), placement)
        self.network.end(placement)
        self.busy -= self.records[name].job.total_gpus
        self.blocked.clear()

    def _sample(self, now: float) -> None:
        tl = self.timeline
        tl.times.append(now)
        tl.busy_gpus.append(self.busy)
        if self.network.levels:
            tl.level_fragmentation.append(self.network.fragmentation())
            tl.level_whole_free.append(self.network.whole_free())
        head = self._head()
        free = self.total_gpus - self.busy
        tl.queued.append(sum(len(q) for q in self.buckets.values()))
        if head is None or free == 0:
            tl.stranded_share.append(None)
            tl.head_blocked.append(False)
            return
        g = head[1].gpus
        stranded = sum(count * (f % g) for f, count in enumerate(self.hist) if count)
        tl.stranded_share.append(stranded / free)
        tl.head_blocked.append(free >= head[1].total_gpus)


def simulate(
    specs: list[NodeSpec],
    jobs: list[TraceJob],
    policy: str,
    step_time: StepTimeFn | Memoised,
    max_failures: int = DEFAULT_MAX_FAILURES,
    backfill: BackfillConfig = DEFAULT_BACKFILL,
    network_aware: bool = True,
    start_rule: str | None = None,
    work_error: float = 0.0,
    seed: int = 0,
    preemption: PreemptionCost | None = None,
    queues: tuple[TeamQueue, ...] = (),
    failures: NodeFailures | None = None,
    estimate_error: EstimateError | None = None,
    risk: str | None = None,
    prediction_error: bool = False,
    moves: bool = False,
) -> SimRun:
    """Simulate ``jobs`` on ``specs`` under ``policy``; ``backfill`` picks the queue discipline
    (default: the engines' queue, reservations and age; ``NO_RESERVATIONS``: any job that fits
    starts, the faster queue before reservations); ``network_aware``
    False hides the network tree from placement (it still prices the runs); ``start_rule``
    gives every job that rule and its work (see the module's docstring), misjudged by a seeded
    factor up to ``work_error`` (0.5: the queue sees between 1/1.5 and 1.5 times the truth);
    with ``preemption`` a gang of higher priority may stop running ones (``PreemptionCost``);
    ``queues`` are the team queues the trace's jobs name (quotas, cohorts, fair-share weights);
    with ``failures`` nodes fail and their gangs restart (``NodeFailures``); ``estimate_error``
    replaces ``work_error`` by another model of users' estimates (``sim/families.py``); ``risk``
    gives every job that risk and the queue the model's likely ranges, as the engines' queue has
    them (None: a plain estimator); with ``prediction_error`` each job really runs at a rate off
    the model's by a seeded draw from its held-out errors; with ``moves`` a gang running degraded
    moves to its better placement where it finishes sooner counting the restart."""
    return Simulation(specs, jobs, policy, step_time, max_failures, backfill, network_aware, start_rule,
                      work_error, seed, preemption, queues, failures, estimate_error, risk,
                      prediction_error, moves).run()  # fmt: skip


@dataclass(frozen=True)
class _Ranged:
    """An estimator with the model's likely ranges (``model.predict.likely_range``), as
    ``ModelEstimator`` gives the engines' queue for a job without a calibration."""

    estimate: Estimator

    def __call__(self, nodes: Mapping[str, NodeState], placement: Placement, job: JobRequest) -> float:
        return self.estimate(nodes, placement, job)

    def likely(self, placement: Placement, job: JobRequest, images_per_s: float) -> tuple[float, float]:
        del job
        return likely_range(images_per_s, len(placement.nodes))


def request_of(job: TraceJob) -> JobRequest:
    return JobRequest(job.name, job.workers, job.gpus, priority=job.priority, model=job.model,
                      time_limit_s=job.time_limit_s, queue=job.queue)  # fmt: skip
