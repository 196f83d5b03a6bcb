"""Inputs and outputs of the placement engine: small immutable values, no I/O.

A ``ClusterState`` snapshot and a ``JobRequest`` go in; a ``Decision`` comes out. "Does not fit"
is a value (``Code.UNSCHEDULABLE`` / ``Code.UNRESOLVABLE`` with reasons), never an exception.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from ringleader.scheduler.switches import SwitchIndex, move_position
from ringleader.topology.cluster import NodeSpec

HELD = "reserved"  # owner name of reserved GPUs in the working states a pass builds ("reserved:JOB")
# Owner of GPUs an engine masks out of a decision (a cordoned node, an untolerated taint): no
# job may take them, and no plan counts on them ever coming free.
UNUSABLE = "\x00unusable"
# How a start rule "finish" weighs predictions with likely ranges (JobRequest.risk, --risk).
RISKS = ("averse", "neutral")
# The risk a job takes unless it says: "neutral". In the simulator, with jobs' true rates off the
# model's by its held-out errors and users' biased run-time estimates, "averse" started degraded
# as "now" does where waiting paid most (Helios-shaped load 1.0: mean JCT 7.94 h, "neutral" 6.50,
# always waiting 6.39) and gained at most 2.1% where it did better (BENCHMARKS.md, "The default risk").
DEFAULT_RISK = "neutral"


@dataclass(frozen=True)
class Workload:
    """How a job trains, as far as its throughput goes: images per GPU per micro-batch, the
    precision, and micro-batches per optimizer step (gradient accumulation: one allreduce a step)."""

    batch_size: int = 64
    precision: str = "fp32"
    accumulation: int = 1


@dataclass(frozen=True)
class JobRequest:
    """A gang: ``workers`` workers of ``gpus_per_worker`` GPUs each, placed all at once or not."""

    name: str
    workers: int
    gpus_per_worker: int
    topology_aware: bool = False
    priority: int = 0
    model: str | None = None  # optional hint (e.g. "vgg16") for throughput predictions
    # Wall-clock limit in seconds: once the job starts, the queue plans with start + limit as
    # its end, and a job with a limit may backfill onto GPUs reserved from after that end.
    time_limit_s: float | None = None
    # Network levels (names from the cluster's tree): the gang waits rather than spread past
    # ``topology_required``'s switch; ``topology_preferred`` is spread past only when it must.
    topology_required: str | None = None
    topology_preferred: str | None = None
    # When it starts (StartRule, below): "now" on whatever free GPUs fit it, "best" only on a
    # placement as fast as its best, "finish" whichever finishes first. ``work_s``: seconds of
    # training on its best placement (None: the time limit stands in, as in Slurm's backfill);
    # ``max_wait_s``: the longest it waits for a better placement, counted from its submit; then
    # it starts as "now" would (Slurm's --switches=N@max-time in spirit).
    start_rule: str = "now"
    work_s: float | None = None
    max_wait_s: float | None = None
    # How "finish" weighs predictions that come with likely ranges (RISKS): "averse" waits only
    # where waiting wins at the pessimistic end of both; "neutral" takes the predictions as they are.
    risk: str = DEFAULT_RISK
    # Whether it may stop running gangs of lower priority to start (scheduler/preempt.py), and
    # whether it may be stopped (a gang that may not never borrows another queue's quota).
    may_preempt: bool = False
    preemptible: bool = True
    # The team queue it counts against (scheduler/teams.py; None: the default queue), and the
    # GPU types (lower case) its queue's quota leaves it this pass (None: any; as Kueue's flavor
    # assignment adds a node selector).
    queue: str | None = None
    gpu_types: frozenset[str] | None = None
    # How its model trains (the batch, precision and gradient accumulation its job names), where
    # the queue prices its placements (None: the estimator's batch 64 in fp32).
    workload: Workload | None = None

    def __post_init__(self) -> None:
        if self.risk not in RISKS:
            raise ValueError(f"risk {self.risk!r} is not one of {', '.join(RISKS)}")

    @property
    def total_gpus(self) -> int:
        return self.workers * self.gpus_per_worker

    @property
    def prices_placements(self) -> bool:
        """Whether deciding it needs each placement's predicted speed: it weighs its start, or
        may preempt (the model is loaded only for such a queue)."""
        return self.start_rule != "now" or self.may_preempt

    @property
    def policy_name(self) -> str:
        network = self.topology_required is not None or self.topology_preferred is not None
        return "topology" if self.topology_aware or network else "default"


@dataclass(frozen=True)
class NodeState:
    """A node and which of its GPUs are allocated (to which job)."""

    spec: NodeSpec
    allocated: tuple[tuple[int, str], ...] = ()  # (gpu id, job name), sorted by gpu id

    @property
    def name(self) -> str:
        return self.spec.name

    @cached_property
    def used_mask(self) -> int:
        mask = 0
        for gpu, _ in self.allocated:
            mask |= 1 << gpu
        return mask

    @cached_property
    def free_mask(self) -> int:
        return self.spec.topology.all_mask & ~self.used_mask

    @cached_property
    def owners(self) -> Mapping[str, int]:
        """Each holder of GPUs here -> the mask of its GPUs: the queue's walk of later starts
        reads every node's holders for every gang it weighs, and most nodes are unchanged
        from one pass to the next."""
        masks: dict[str, int] = {}
        for gpu, owner in self.allocated:
            masks[owner] = masks.get(owner, 0) | 1 << gpu
        return masks

    @property
    def free_gpus(self) -> tuple[int, ...]:
        return tuple(i for i in range(self.spec.topology.n_gpus) if self.free_mask >> i & 1)

    @cached_property
    def n_free(self) -> int:
        return self.free_mask.bit_count()

    def owner(self, gpu: int) -> str | None:
        return dict(self.allocated).get(gpu)


@dataclass(frozen=True)
class WorkerSlot:
    """Where worker ``index`` runs: a node and its GPU ids, in the order local ranks use them."""

    index: int
    node: str
    gpus: tuple[int, ...]


@dataclass(frozen=True)
class Placement:
    job: str
    slots: tuple[WorkerSlot, ...]

    @cached_property
    def _on_node(self) -> dict[str, tuple[tuple[int, ...], int]]:
        """Each node's GPUs and workers, in the slots' order: read once per placement (a model
        fit prices one placement of 128 nodes thousands of times, node by node)."""
        gpus: dict[str, list[int]] = {}
        workers: dict[str, int] = {}
        for slot in self.slots:
            gpus.setdefault(slot.node, []).extend(slot.gpus)
            workers[slot.node] = workers.get(slot.node, 0) + 1
        return {node: (tuple(ids), workers[node]) for node, ids in gpus.items()}

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(self._on_node)

    def gpus_on(self, node: str) -> tuple[int, ...]:
        return self._on_node.get(node, ((), 0))[0]

    def describe(self) -> str:
        parts = []
        for node, (gpus, workers) in self._on_node.items():
            parts.append(f"{node}[{workers}w: GPU {','.join(map(str, gpus)) or '-'}]")
        return " + ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        """Its JSON form, as stored with a decision (``jobs.codec.placement_from_dict`` reads it)."""
        return {
            "nodes": list(self.nodes),
            "workers": [{"index": s.index, "node": s.node, "gpus": list(s.gpus)} for s in self.slots],
            "describe": self.describe(),
        }


GroupKey = tuple[str, int, float, tuple[tuple[str, str], ...], str]


def group_key(ns: NodeState) -> GroupKey:
    """Nodes with equal keys are interchangeable for placement inside a node: same topology,
    free GPUs, network, labels and NVLink domain. Filters and searches run once per group, not
    per node. (Where nodes sit in the network tree is the SwitchIndex's: a group spans switches.)"""
    spec = ns.spec
    return (spec.topology.fingerprint, ns.free_mask, spec.network_gbps, spec.labels, spec.nvlink_domain)


@dataclass(frozen=True)
class NodeGroup:
    """Equivalent nodes (see ``group_key``), in cluster order; members are materialised lazily
    because a group on a 10,000-node cluster can hold thousands of nodes."""

    key: GroupKey
    positions: tuple[int, ...]
    all_nodes: tuple[NodeState, ...] = field(repr=False, compare=False)
    state: ClusterState | None = field(default=None, repr=False, compare=False)  # the snapshot it is of

    @property
    def first(self) -> NodeState:
        return self.all_nodes[self.positions[0]]

    @property
    def size(self) -> int:
        return len(self.positions)

    def members(self) -> Iterator[NodeState]:
        return (self.all_nodes[i] for i in self.positions)

    @property
    def free_mask(self) -> int:
        return self.key[1]


class _ByName(Mapping[str, NodeState]):
    def __init__(self, nodes: tuple[NodeState, ...], positions: Mapping[str, int]) -> None:
        self._nodes, self._positions = nodes, positions

    def __getitem__(self, name: str) -> NodeState:
        return self._nodes[self._positions[name]]

    def __iter__(self) -> Iterator[str]:
        return iter(self._positions)

    def __len__(self) -> int:
        return len(self._positions)


@dataclass(frozen=True)
class ClusterState:
    """A frozen snapshot of every node and its allocations.

    The group index is derived data: built on first use, then carried to the states that
    ``with_placement``/``without_placement`` return and updated there for the changed nodes
    only, as a scheduler's snapshot is maintained incrementally.
    """

    nodes: tuple[NodeState, ...]
    carried_index: Mapping[GroupKey, tuple[int, ...]] | None = field(default=None, compare=False, repr=False)
    carried_positions: Mapping[str, int] | None = field(default=None, compare=False, repr=False)
    carried_switches: SwitchIndex | None = field(default=None, compare=False, repr=False)

    @staticmethod
    def empty(specs: Iterable[NodeSpec]) -> ClusterState:
        return ClusterState(tuple(NodeState(s) for s in specs))

    @cached_property
    def positions(self) -> Mapping[str, int]:
        if self.carried_positions is not None:
            return self.carried_positions
        return {n.name: i for i, n in enumerate(self.nodes)}

    @cached_property
    def by_name(self) -> Mapping[str, NodeState]:
        return _ByName(self.nodes, self.positions)

    def node(self, name: str) -> NodeState:
        return self.nodes[self.positions[name]]

    @cached_property
    def index(self) -> Mapping[GroupKey, tuple[int, ...]]:
        if self.carried_index is not None:
            return self.carried_index
        built: dict[GroupKey, list[int]] = {}
        for i, ns in enumerate(self.nodes):
            built.setdefault(group_key(ns), []).append(i)
        return {k: tuple(v) for k, v in built.items()}

    @cached_property
    def groups(self) -> list[NodeGroup]:
        """Groups of equivalent nodes, ordered by their first node's position."""
        items = sorted(self.index.items(), key=lambda kv: kv[1][0])
        return [NodeGroup(key, positions, self.nodes, self) for key, positions in items]

    def worker_slots(self, gpus_per_worker: int) -> int:
        """How many workers of ``gpus_per_worker`` GPUs the free GPUs hold, node by node (a
        gang needs at least its workers' worth whatever the policy). Kept per width: a pass asks
        it of every waiting job, and a busy queue's jobs come in a few shapes."""
        slots = self._worker_slots.get(gpus_per_worker)
        if slots is None:
            slots = sum(group.size * (group.free_mask.bit_count() // gpus_per_worker) for group in self.groups)
            self._worker_slots[gpus_per_worker] = slots
        return slots

    @cached_property
    def _worker_slots(self) -> dict[int, int]:
        return {}

    @cached_property
    def switch_index(self) -> SwitchIndex:
        """Nodes per switch of the network tree (no levels without one); built on first use,
        then carried from commit to commit like the group index."""
        if self.carried_switches is not None:
            return self.carried_switches
        return SwitchIndex.build(self.nodes, group_key)

    def _replaced(self, changed: Mapping[int, NodeState]) -> ClusterState:
        nodes = list(self.nodes)
        switches = None
        if self.carried_switches is not None or "switch_index" in self.__dict__:
            switches = self.switch_index.updated(((pos, nodes[pos], new) for pos, new in changed.items()), group_key)
        index: dict[GroupKey, tuple[int, ...]] | None = None
        if self.carried_index is not None or "index" in self.__dict__:  # maintain a built index
            index = dict(self.index)
        for pos, new in changed.items():
            old = nodes[pos]
            nodes[pos] = new
            if index is None:
                continue
            old_key, new_key = group_key(old), group_key(new)
            if old_key == new_key:
                continue
            move_position(index, old_key, new_key, pos)
        return ClusterState(tuple(nodes), index, self.positions, switches)

    def all_free(self) -> ClusterState:
        """The same nodes with every GPU free (the cluster a gang's best placement is found on)."""
        return ClusterState(tuple(NodeState(ns.spec) for ns in self.nodes))

    def with_nodes(self, changed: Mapping[int, NodeState]) -> ClusterState:
        """The state with the nodes at these positions replaced (same specs, other allocations);
        the group and switch indexes are carried and updated for those nodes only."""
        return self._replaced(changed) if changed else self

    def with_placement(self, placement: Placement) -> ClusterState:
        """The state after committing ``placement`` (raises if a GPU is already taken)."""
        added: dict[str, list[int]] = {}
        for slot in placement.slots:
            added.setdefault(slot.node, []).extend(slot.gpus)
        changed: dict[int, NodeState] = {}
        for name, gpus in added.items():
            if not gpus:
                continue
            pos = self.positions[name]
            ns = self.nodes[pos]
            clash = {g for g, _ in ns.allocated}.intersection(gpus)
            if clash or len(set(gpus)) != len(gpus):
                raise ValueError(f"GPU {sorted(clash or gpus)} on {name} already allocated")
            changed[pos] = replace(ns, allocated=tuple(sorted([*ns.allocated, *((g, placement.job) for g in gpus)])))
        return self._replaced(changed)

    def without_placement(self, placement: Placement) -> ClusterState:
        """The state after ``placement``'s job ends (only its nodes are touched)."""
        return self._release(placement.job, placement.nodes)

    def without_job(self, job: str) -> ClusterState:
        """The state after ``job`` ends, wherever it held GPUs (scans every node)."""
        return self._release(job, [ns.name for ns in self.nodes if any(a[1] == job for a in ns.allocated)])

    def _release(self, job: str, node_names: Iterable[str]) -> ClusterState:
        changed: dict[int, NodeState] = {}
        for name in node_names:
            pos = self.positions[name]
            ns = self.nodes[pos]
            kept = tuple(a for a in ns.allocated if a[1] != job)
            if kept != ns.allocated:
                changed[pos] = replace(ns, allocated=kept)
        return self._replaced(changed) if changed else self

    @property
    def total_gpus(self) -> int:
        return sum(n.spec.topology.n_gpus for n in self.nodes)

    @property
    def free_gpus(self) -> int:
        return sum(n.n_free for n in self.nodes)


class Code(enum.Enum):
    """Outcome of a placement attempt (the shape of a Kubernetes framework Status)."""

    SUCCESS = "Success"
    UNSCHEDULABLE = "Unschedulable"  # does not fit now; may fit when other jobs end
    UNRESOLVABLE = "UnschedulableAndUnresolvable"  # can never fit on this cluster


class ReasonCode(enum.StrEnum):
    """Why a gang waits, in one word, as squeue's REASON column and Kueue's condition reasons
    say it (`list` shows it; the prose is the decision's ``reasons``). docs/queues.md lists them."""

    HELD = "Held"  # held by its user (squeue: JobHeldUser) until `release`
    CORDONED = "Cordoned"  # it would fit, but on nodes cordoned now
    RESERVED = "Reserved"  # it fits the free GPUs, but they are reserved for gangs ahead of it
    QUOTA_EXCEEDED = "QuotaExceeded"  # its queue's quota (and what it may borrow) is in use
    OVER_MAXIMUM = "OverMaximum"  # more GPUs than its queue may ever hold: it never starts there
    RESOURCES = "Resources"  # not enough free GPUs now; it holds a reservation or will get one
    PRIORITY = "Priority"  # not enough free GPUs, and gangs ahead of it hold the reservations
    TOPOLOGY = "Topology"  # enough free GPUs, but not in the shape it asks for
    PREEMPTING = "Preempting"  # gangs it preempts (or whose borrowed quota it takes back) are stopping
    BETTER_PLACEMENT = "WaitingForBetterPlacement"  # its start rule waits for faster GPUs
    NEVER_FITS = "NeverFits"  # the cluster as declared can never hold it


@dataclass(frozen=True)
class Bottleneck:
    """The slowest link a job's allreduce crosses."""

    kind: str  # "NV2", "SYS", ..., "network", or "none" (single GPU)
    gbs: float
    where: str  # "node-a GPU1-GPU2" or "node-a <-> node-b"

    def describe(self) -> str:
        if self.kind == "none":
            return "no GPU-to-GPU traffic (at most one GPU)"
        return f"{self.kind} {self.gbs:g} GB/s ({self.where})"


@dataclass(frozen=True)
class Metrics:
    """Numbers that describe a placement, whichever policy chose it."""

    nodes_used: int
    bottleneck: Bottleneck
    sum_pair_gbs: float  # summed GB/s over GPU pairs inside each node
    fragmentation_after: float  # share of the used nodes' free GPUs left stranded, 0..1

    def as_dict(self) -> dict[str, object]:
        return {
            "nodes_used": self.nodes_used,
            "bottleneck_link": self.bottleneck.kind,
            "bottleneck_gbs": self.bottleneck.gbs,
            "bottleneck_where": self.bottleneck.where,
            "sum_pair_gbs": round(self.sum_pair_gbs, 3),
            "fragmentation_after": round(self.fragmentation_after, 4),
        }


@dataclass(frozen=True)
class Candidate:
    """A placement a policy considered, with its metrics and the policy's objective value."""

    placement: Placement
    metrics: Metrics
    objective: tuple[float, ...]
    objective_names: tuple[str, ...]

    def objective_dict(self) -> dict[str, float]:
        return dict(zip(self.objective_names, self.objective, strict=True))

    def as_dict(self) -> dict[str, Any]:
        return {**self.placement.as_dict(), "objective": self.objective_dict(), "metrics": self.metrics.as_dict(),
                "bottleneck": self.metrics.bottleneck.describe()}  # fmt: skip


def gpu_ranges(gpus: Iterable[int]) -> str:
    """GPU ids as runs: (0, 1, 2, 3, 6) -> "0-3,6"."""
    runs: list[list[int]] = []
    for gpu in sorted(gpus):
        if runs and gpu == runs[-1][-1] + 1:
            runs[-1].append(gpu)
        else:
            runs.append([gpu])
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


@dataclass(frozen=True)
class Reservation:
    """GPUs a pending gang will take when they free, held against lower-priority jobs.

    Times are on the caller's clock (the scheduler reads none): ``start_s`` is when the last
    job holding these GPUs is expected to end, ``None`` when one of them has no known end.
    """

    placement: Placement
    start_s: float | None
    starts_in_s: float | None  # start_s - now
    end_s: float | None  # start_s + the gang's time limit; None: no known end

    @property
    def job(self) -> str:
        return self.placement.job

    def gpus(self) -> str:
        """ "GPUs 0-7 on node-a, 0-3 on node-b"."""
        return "GPUs " + ", ".join(f"{gpu_ranges(self.placement.gpus_on(n))} on {n}" for n in self.placement.nodes)

    def describe(self) -> str:
        if self.starts_in_s is None:
            return f"reserved {self.gpus()}, expected start unknown (a job holding them has no time limit)"
        return f"reserved {self.gpus()}, expected start in {approx_duration(self.starts_in_s)}"

    def as_dict(self) -> dict[str, Any]:
        """Its JSON form; times on the engine's wall clock (``start_s`` None: unknown), the start
        counted from the read (``jobs.codec.reservation_from_dict``)."""
        return {**self.placement.as_dict(), "start_s": self.start_s, "end_s": self.end_s, "gpus": self.gpus()}


def approx_duration(seconds: float) -> str:
    """ "~40 s", "~14 min", "~2.5 h" (what a person reads in a pending reason)."""
    if seconds < 90:
        return f"~{max(seconds, 0):.0f} s"
    if seconds < 90 * 60:
        return f"~{seconds / 60:.0f} min"
    return f"~{seconds / 3600:.1f} h"


# -- when a gang starts ---------------------------------------------------------------------------
# A gang whose best placement is busy can start now on the best placement the free GPUs give
# (degraded: spread over nodes or across switches) or wait until a better one frees. Which finishes
# sooner follows from the job's work (seconds of training on its best placement), each placement's
# predicted speed (images/s from the throughput estimator) and when GPUs free (the expected ends
# reservations use): a placement at r images/s runs the work in work_s * ideal / r seconds, ideal
# being the rate of the job's best placement on an empty cluster. QueuePass.decide weighs them.

#: Placements within this share of the best one's rate count as the best (the model is not
#: more exact than that; the throughput policy's 0.5% grid is finer, for ranking only).
AS_GOOD = 0.02


class StartRule(enum.Enum):
    NOW = "now"
    BEST = "best"
    FINISH = "finish"


START_RULES = tuple(rule.value for rule in StartRule)


@dataclass(frozen=True)
class Option:
    """Start ``placement`` at ``start_s`` (the caller's clock), training at ``images_per_s``;
    ``finish_s`` None when the job's work is unknown (the ``best`` rule needs none)."""

    placement: Placement
    start_s: float
    images_per_s: float
    finish_s: float | None

    def describe(self, now: float) -> str:
        when = "now" if self.start_s <= now else f"in {approx_duration(self.start_s - now)}"
        finish = "" if self.finish_s is None else f", finishes in {approx_duration(self.finish_s - now)}"
        return f"start {when} on {self.placement.describe()} at {self.images_per_s:.0f} images/s{finish}"

    def as_dict(self) -> dict[str, Any]:
        return {**self.placement.as_dict(), "placement": self.placement.describe(), "start_s": self.start_s,
                "images_per_s": round(self.images_per_s, 1), "finish_s": self.finish_s}  # fmt: skip


@dataclass(frozen=True)
class AtRisk:
    """The weighing at the pessimistic end of the estimator's likely ranges: starting now at the
    high end of its placement's range, waiting at the low end of its own. ``finish`` waits only
    when waiting wins there too."""

    now_images_per_s: float
    wait_images_per_s: float
    now_finish_s: float
    wait_finish_s: float


@dataclass(frozen=True)
class QueueCost:
    """What a degraded start costs the jobs queued behind the gang (rule ``finish``).

    A gang of ``gpus`` GPUs that starts now on a placement slower than the later one holds its
    GPUs ``extra_hold_s`` longer (its run now minus its run on the later placement; negative
    when the later one is the slower). The jobs waiting behind it start once the work ahead of
    them has drained from the cluster's ``cluster_gpus`` GPUs, so each of the ``waiting`` jobs
    behind it starts about ``gpus * extra_hold_s / cluster_gpus`` later: the queue's completion
    times rise by ``delay_s`` in all. ``finish`` starts now only when its own finish gains at
    least that much (``gain_now_s``: the later start's finish minus the start now's, at the end
    of the likely ranges that favours starting now most where the job is risk averse)."""

    waiting: int
    gpus: int
    cluster_gpus: int
    extra_hold_s: float
    gain_now_s: float

    @property
    def delay_each_s(self) -> float:
        return self.gpus * self.extra_hold_s / self.cluster_gpus if self.cluster_gpus else 0.0

    @property
    def delay_s(self) -> float:
        return self.waiting * self.delay_each_s

    @property
    def net_gain_now_s(self) -> float:
        """How much sooner the gang and the jobs behind it finish, summed, if it starts now."""
        return self.gain_now_s - self.delay_s

    def describe(self) -> str:
        """ "the queue finishes sooner by ~50 min: starting now holds 4 GPUs ~45 min longer from 3
        waiting job(s) (~11 min later each, on 16 GPUs), more than the ~10 min it gains" """
        return (f"the queue finishes sooner by {approx_duration(-self.net_gain_now_s)}: starting now holds "
                f"{self.gpus} GPUs {approx_duration(self.extra_hold_s)} longer from {self.waiting} waiting job(s) "
                f"({approx_duration(self.delay_each_s)} later each, on {self.cluster_gpus} GPUs), more than the "
                f"{approx_duration(self.gain_now_s)} it gains")  # fmt: skip


@dataclass(frozen=True)
class WhenChoice:
    """What a start rule weighed and chose: ``now`` (the free placement, None when the gang fits
    no free GPUs), ``wait`` (the later option weighed against it, None when none was known) and
    whether the gang starts now."""

    rule: StartRule
    now_s: float
    ideal_images_per_s: float
    now: Option | None
    wait: Option | None
    starts_now: bool
    at_risk: AtRisk | None = None  # where the estimator gives ranges (the model's) and both were weighed
    risk_neutral: bool = False  # the job's risk is "neutral": "finish" does not weigh the ranges
    queue: QueueCost | None = None  # "finish": what starting now costs the jobs waiting behind it

    def describe(self) -> str:
        """ "starts now: start now on ... finishes in ~2 h; start in ~10 min on ... finishes in ~45 min" """
        parts = [o.describe(self.now_s) for o in (self.now, self.wait) if o is not None]
        if self.starts_now:
            verdict = "starts now" if self.wait is None else "starts now: it finishes sooner"
        elif self.rule is StartRule.BEST:
            verdict = "waits for a placement as fast as its best"
        else:
            verdict = "waits: it finishes sooner"
        if self.rule is StartRule.FINISH and self.now is not None and self.wait is not None and self._for_queue():
            assert self.queue is not None
            verdict = f"waits: {self.queue.describe()}"
        elif self.rule is StartRule.FINISH and self.now is not None and self.wait is not None:
            assert self.now.finish_s is not None and self.wait.finish_s is not None
            gain = abs(self.now.finish_s - self.wait.finish_s)
            risk = self.at_risk
            if risk is not None and self.starts_now and self.wait.finish_s < self.now.finish_s:
                verdict = "starts now"
                verdict += (f": waiting finishes sooner by {approx_duration(gain)} as predicted, but not if the "
                            f"later placement runs at the low end of its likely range ({risk.wait_images_per_s:.0f} "
                            f"images/s) and this one at the high end ({risk.now_images_per_s:.0f})")  # fmt: skip
            else:
                verdict += f" (by {approx_duration(gain)})"
                queue = self.queue
                if self.starts_now and queue is not None and queue.waiting and queue.delay_s > 0:
                    delay = approx_duration(queue.delay_s)
                    verdict += f", more than the {delay} it delays {queue.waiting} waiting job(s)"
                if self.risk_neutral and not self.starts_now:
                    verdict += ", taking the predictions as they are (risk neutral)"
                if risk is not None and not self.starts_now:
                    verdict += (f", even at the pessimistic end of the likely ranges ({risk.wait_images_per_s:.0f} "
                                f"images/s later, {risk.now_images_per_s:.0f} now)")  # fmt: skip
        return f"{verdict}: " + "; ".join(parts) if parts else verdict

    def as_dict(self) -> dict[str, Any]:
        """Both starts with their predicted finishes (the caller's clock), what it chose, and the
        line that says so."""
        risk = self.at_risk
        at_risk = None if risk is None else {
            "now_images_per_s": round(risk.now_images_per_s, 1), "wait_images_per_s": round(risk.wait_images_per_s, 1),
            "now_finish_s": risk.now_finish_s, "wait_finish_s": risk.wait_finish_s,
        }  # fmt: skip
        return {"rule": self.rule.value, "best_images_per_s": round(self.ideal_images_per_s, 1),
                "now": self.now.as_dict() if self.now else None, "wait": self.wait.as_dict() if self.wait else None,
                "starts_now": self.starts_now, "at_risk": at_risk, "says": self.describe()}  # fmt: skip


    def _for_queue(self) -> bool:
        """It waits for the jobs behind it: its own finish alone would have started it now."""
        return not self.starts_now and self.queue is not None and self.queue.gain_now_s >= 0


def finish_of(start_s: float, work_s: float | None, ideal: float, images_per_s: float) -> float | None:
    """When ``work_s`` seconds of training at ``ideal`` images/s end at ``images_per_s``."""
    if work_s is None:
        return None
    if images_per_s <= 0:
        return float("inf")
    return start_s + work_s * ideal / images_per_s


def as_good(images_per_s: float, ideal: float) -> bool:
    return images_per_s >= ideal * (1.0 - AS_GOOD)


# -- gang preemption (scheduler/preempt.py) -----------------------------------------------------


@dataclass(frozen=True)
class RunningGang:
    """A running gang as preemption sees it: beyond its priority, what preemption for queue
    order and for fair share reads (``scheduler/reorder.py``): its queue, when its run started,
    the GPU-seconds it attained (this run's so far included), its predicted remaining time, how
    often it checkpoints and how long it takes to stop. None where its host does not know."""

    name: str
    priority: int
    preemptible: bool = True
    queue: str | None = None
    started_s: float | None = None
    attained_gpu_s: float = 0.0
    remaining_s: float | None = None
    checkpoint_s: float | None = None  # None: a stop loses all of this run (it keeps no checkpoint we know of)
    grace_s: float = 0.0


@dataclass(frozen=True)
class Preemption:
    """Stop ``victims`` (whole gangs), then start the gang on ``placement``."""

    victims: tuple[RunningGang, ...]
    placement: Placement
    images_per_s: float
    freed: Mapping[str, tuple[tuple[str, tuple[int, ...]], ...]]  # victim -> (node, GPU ids) it held
    reclaim: bool = False  # the victims' queues borrow the quota of the gang's queue (scheduler/teams.py)
    # why, where it is not the gang's priority: "for order: ..." or "fair share: ..." (scheduler/reorder.py)
    why: str | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(v.name for v in self.victims)

    def describe(self) -> str:
        """ "preempts job a (priority 0, GPUs 0-3 on n1): then starts on n1[4w: ...] at 910 images/s" """
        held = [
            f"job {v.name} (priority {v.priority}, GPUs "
            + ", ".join(f"{gpu_ranges(gpus)} on {node}" for node, gpus in self.freed[v.name])
            + ")"
            for v in self.victims
        ]
        verb = "reclaims its queue's quota from" if self.reclaim else "preempts"
        why = f" ({self.why})" if self.why else ""
        return (f"{verb} {', '.join(held)}{why}: then starts on {self.placement.describe()} "
                f"at {self.images_per_s:.0f} images/s")  # fmt: skip

    def as_dict(self) -> dict[str, Any]:
        """The gangs it stops, the GPUs each held, and where the gang then starts."""
        return {"victims": list(self.names),
                "freed": {name: [{"node": node, "gpus": list(gpus)} for node, gpus in held]
                          for name, held in self.freed.items()},
                "then": {**self.placement.as_dict(), "placement": self.placement.describe()},
                "images_per_s": round(self.images_per_s, 1), "says": self.describe()}  # fmt: skip


@dataclass(frozen=True)
class Decision:
    """What the engine decided for one job, with everything needed to explain it."""

    job: JobRequest
    policy: str
    code: Code
    chosen: Candidate | None = None
    runner_up: Candidate | None = None
    reasons: tuple[str, ...] = ()  # why not (pending) or why this one (success)
    node_reasons: Mapping[str, str] = field(default_factory=dict)  # node -> why it was filtered
    candidates_considered: int = 0
    reservation: Reservation | None = None  # pending only: the GPUs held for it and when
    when: WhenChoice | None = None  # the start rule's weighing, where it weighed a later start
    preemption: Preemption | None = None  # pending only: the gangs it stops to start on their GPUs
    borrows: str | None = None  # started only: what it borrows of its cohort's idle quota (scheduler/teams.py)
    reason_code: ReasonCode | None = None  # pending only: why it waits, in one word

    @property
    def placement(self) -> Placement | None:
        return self.chosen.placement if self.chosen else None

    @property
    def ok(self) -> bool:
        return self.code is Code.SUCCESS

    @property
    def predicted_run_s(self) -> float | None:
        """How long a gang this decision starts is predicted to run: its work on the placement
        it got, as the start rule weighed it (its work as given where nothing was weighed)."""
        if not self.ok:
            return None
        when = self.when
        if when is not None and when.starts_now and when.now is not None and when.now.finish_s is not None:
            return when.now.finish_s - when.now.start_s
        return self.job.work_s

    def summary(self) -> str:
        if self.chosen is None:
            return "; ".join(self.reasons)
        m = self.chosen.metrics
        weighed = f"; {self.when.describe()}" if self.when is not None else ""
        borrows = f"; {self.borrows}" if self.borrows is not None else ""
        return (
            f"{self.policy}: {self.chosen.placement.describe()}; {m.nodes_used} node(s), "
            f"bottleneck {m.bottleneck.describe()}{weighed}{borrows}"
        )

    def as_dict(self) -> dict[str, Any]:
        """Everything a plan shows, as stored and printed by -o json: nodes, GPU ids per worker,
        objective, bottleneck, runner-up, or the pending reason and why each node was filtered out."""
        job = self.job
        request = {"workers": job.workers, "gpus_per_worker": job.gpus_per_worker, "topology_aware": job.topology_aware,
                   "priority": job.priority, "model": job.model, "time_limit_s": job.time_limit_s,
                   "start": job.start_rule, "run_time_s": job.work_s, "max_wait_s": job.max_wait_s, "risk": job.risk}
        return {
            "job": job.name, "request": request, "policy": self.policy, "code": self.code.value,
            "summary": self.summary(),
            "chosen": self.chosen.as_dict() if self.chosen else None,
            "runner_up": self.runner_up.as_dict() if self.runner_up else None,
            "reasons": list(self.reasons), "node_reasons": dict(self.node_reasons),
            "candidates_considered": self.candidates_considered,
            "reservation": self.reservation.as_dict() if self.reservation else None,
            "when": self.when.as_dict() if self.when else None,
            "preemption": self.preemption.as_dict() if self.preemption else None,
            "borrows": self.borrows, "reason_code": None if self.reason_code is None else self.reason_code.value,
            "predicted_run_s": self.predicted_run_s,
        }  # fmt: skip
