"""The placement framework: filter nodes, let one policy choose, explain with numbers.

A policy is a small plug-in (one module under ``policies/``) with two phases, as in the
Kubernetes scheduling framework: ``filter`` says why a node cannot host any worker of the job,
``choose`` picks a gang placement among the nodes that passed and returns its best candidate and
the runner-up. Policies register by name in one registry that rejects duplicates.
"""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import ClassVar

from ringleader.errors import UsageError
from ringleader.scheduler.gpuset import INF, bits, search_for
from ringleader.scheduler.network import level_index, most_free_under, tree_levels
from ringleader.scheduler.teams import gpu_type
from ringleader.scheduler.types import (
    HELD,
    UNUSABLE,
    Bottleneck,
    Candidate,
    ClusterState,
    Code,
    Decision,
    JobRequest,
    Metrics,
    NodeGroup,
    NodeState,
    Placement,
    WorkerSlot,
)
from ringleader.topology.cluster import SCHEDULE_LABEL, NodeSpec


class Policy(ABC):
    """One placement policy. Subclasses set ``name`` and implement ``choose``."""

    name: ClassVar[str]
    description: ClassVar[str]
    #: Which nodes serve this policy's jobs under the gpu-schedule label: jobs asked for with
    #: --gputopology go to topology-mode (or unlabelled) nodes, the others to default-mode ones.
    serves_topology_jobs: ClassVar[bool] = True

    def filter(self, node: NodeState, job: JobRequest) -> str | None:
        """Why ``node`` cannot host even one worker of ``job`` (None if it can)."""
        mode = node.spec.schedule_mode
        if job.topology_aware and mode == "default":
            return f"{SCHEDULE_LABEL}=default (serves only jobs without --gputopology)"
        if not job.topology_aware and mode == "topology":
            return f"{SCHEDULE_LABEL}=topology (serves only --gputopology jobs)"
        if job.gpu_types is not None and gpu_type(node) not in job.gpu_types:
            return f"its queue has no quota left for {gpu_type(node)} GPUs"
        if node.n_free < job.gpus_per_worker:
            return f"{node.n_free} free GPU(s) < {job.gpus_per_worker} per worker"
        return None

    @abstractmethod
    def choose(self, nodes: Sequence[NodeState], job: JobRequest) -> list[Candidate]:
        """Candidate placements for the whole gang on ``nodes`` (all passed filter), best
        first; at most two are needed (chosen and runner-up). Empty if the gang does not fit."""

    def choose_groups(self, groups: Sequence[NodeGroup], job: JobRequest) -> list[Candidate]:
        """Same as ``choose`` but over groups of equivalent nodes. Policies that can reason
        per group override this to stay fast on large clusters; the default expands them."""
        positions = sorted(p for g in groups for p in g.positions)
        nodes = groups[0].all_nodes if groups else ()
        return self.choose([nodes[p] for p in positions], job)


def _held_by(node: NodeState) -> str:
    """What holds a node's GPUs beyond running jobs, for a filter's reason: " (4 reserved for
    job big; 4 on a node no job may use now)"; "" when only jobs hold them."""
    reserved: dict[str, int] = {}
    unusable = 0
    for _, owner in node.allocated:
        if owner == UNUSABLE:
            unusable += 1
        elif owner.startswith(f"{HELD}:"):
            reserved[owner[len(HELD) + 1 :]] = reserved.get(owner[len(HELD) + 1 :], 0) + 1
    parts = [f"{n} reserved for job {job}" for job, n in sorted(reserved.items())]
    if unusable:
        parts.append(f"{unusable} unusable now (cordoned, or not allowed for this job)")
    return f" ({'; '.join(parts)})" if parts else ""


_REGISTRY: dict[str, Policy] = {}


def register(policy: Policy) -> Policy:
    if policy.name in _REGISTRY:
        raise ValueError(f"policy {policy.name!r} registered twice")
    _REGISTRY[policy.name] = policy
    return policy


def get_policy(name: str) -> Policy:
    if name not in _REGISTRY:
        raise UsageError(f"unknown policy {name!r}", f"use one of {', '.join(policy_names())}")
    return _REGISTRY[name]


def policy_names() -> list[str]:
    return sorted(_REGISTRY)


# -- metrics shared by every policy -------------------------------------------------------------


def placement_metrics(nodes: Mapping[str, NodeState], placement: Placement) -> Metrics:
    """Bottleneck link, summed pair bandwidth and stranded share of the used nodes.

    ``nodes`` maps at least the placement's node names to their state (``ClusterState.by_name``).
    """
    bottleneck = Bottleneck("none", INF, "")
    total = 0.0
    stranded = free_after = 0
    for node_name in placement.nodes:
        ns = nodes[node_name]
        topo = ns.spec.topology
        gpus = placement.gpus_on(node_name)
        for a, b in itertools.combinations(gpus, 2):
            v = topo.bandwidth_gbs[a][b]
            total += v
            if v < bottleneck.gbs:
                bottleneck = Bottleneck(str(topo.links[a][b]), v, f"{node_name} GPU{a}-GPU{b}")
        left = ns.free_mask & ~sum(1 << g for g in gpus)
        free_after += left.bit_count()
        if left:
            # GPUs that cannot join even a pair over better than the slowest link are stranded.
            search = search_for(topo)
            stranded += left.bit_count() - (search.capacity(left, search.levels[0]) if search.levels else 0)
    used = placement.nodes
    if len(used) > 1:
        specs = [nodes[n].spec for n in used]
        domain = specs[0].nvlink_domain
        if domain and all(s.nvlink_domain == domain for s in specs):
            fabric = min(fabric_gbs(nodes[n]) for n in used)
            if fabric <= bottleneck.gbs:  # equal: name the fabric the gang crosses
                bottleneck = Bottleneck("nvlink-domain", fabric, f"{' <-> '.join(used)} in NVLink domain {domain}")
        else:
            slowest = min(specs, key=lambda s: s.network_gbs)
            share, under = network_share(specs)
            if slowest.network_gbs / share < bottleneck.gbs:
                where = f"{' <-> '.join(used)} over {slowest.network_gbps:g} Gb/s{under}"
                bottleneck = Bottleneck("network", slowest.network_gbs / share, where)
    if bottleneck.gbs == INF:
        bottleneck = Bottleneck("none", 0.0, "")
    frag = stranded / free_after if free_after else 0.0
    return Metrics(len(used), bottleneck, total, frag)


def network_share(specs: Sequence[NodeSpec]) -> tuple[float, str]:
    """How oversubscribed the links between these nodes are (the worst level below their lowest
    common switch: a gang across racks shares its leaves' uplinks), and " under leaf rack-2" or
    " across spines (4:1)" to name where; (1.0, "") on a cluster without a network tree."""
    places = [s.network for s in specs]
    if any(p is None for p in places):
        return 1.0, ""
    paths = [p.switches for p in places if p is not None]
    levels = places[0].levels if places[0] is not None else ()
    span = next((k for k in range(len(levels)) if len({p[k] for p in paths}) == 1), len(levels))
    ratio = max((lv.oversubscription for lv in levels[:span]), default=1.0)
    if span < len(levels):
        where = f" under {levels[span].name} {paths[0][span]}"
    else:
        where = f" across {levels[-1].name}s" if levels else ""
    return ratio, where + (f" ({ratio:g}:1 uplinks)" if ratio > 1 else "")


def fabric_gbs(ns: NodeState) -> float:
    """What a node of a multi-node NVLink domain reaches the domain's other nodes at: its
    fastest NVLink (the trays of one NVL72 sit on the same NVSwitches), else its network."""
    topo = ns.spec.topology
    nvlink = [topo.bandwidth_gbs[i][j] for i in range(topo.n_gpus) for j in range(topo.n_gpus)
              if i != j and topo.links[i][j].is_nvlink]  # fmt: skip
    return max(nvlink) if nvlink else ns.spec.network_gbs


def make_candidate(
    nodes: Sequence[NodeState],
    job: JobRequest,
    slots: Sequence[tuple[str, tuple[int, ...]]],
    objective: tuple[float, ...],
    objective_names: tuple[str, ...],
) -> Candidate:
    # Workers numbered node by node (nodes in the order the policy first used them), as torchrun,
    # Slurm and mpirun's by-slot mapping number ranks: neighbouring ranks share a node, so a ring
    # crosses the network once per node, not once per rank.
    first_use = {n: i for i, (n, _) in reversed(list(enumerate(slots)))}
    node_major = sorted(slots, key=lambda slot: first_use[slot[0]])
    placement = Placement(job.name, tuple(WorkerSlot(i, n, g) for i, (n, g) in enumerate(node_major)))
    used = {n for n, _ in slots}
    lookup = {ns.name: ns for ns in nodes if ns.name in used}
    return Candidate(placement, placement_metrics(lookup, placement), objective, objective_names)


# -- the entry point ----------------------------------------------------------------------------


def place(state: ClusterState, job: JobRequest, policy: str | None = None) -> Decision:
    """Decide where the whole gang ``job`` goes on ``state``. Pure: no I/O, no clock."""
    chosen_policy = get_policy(policy or job.policy_name)
    if job.workers < 1 or job.gpus_per_worker < 0:
        return Decision(job, chosen_policy.name, Code.UNRESOLVABLE, reasons=("workers must be >= 1 and gpus >= 0",))
    unknown_level = missing_level(state, job)
    if unknown_level is not None:  # a level the cluster lacks can never be kept to (nor preferred)
        return Decision(job, chosen_policy.name, Code.UNRESOLVABLE, reasons=(unknown_level,))
    filtered: list[tuple[NodeGroup, str]] = []
    eligible: list[NodeGroup] = []
    for group in state.groups:  # a filter sees only what makes nodes equivalent: once per group
        reason = chosen_policy.filter(group.first, job)
        if reason is None:
            eligible.append(group)
        else:
            filtered.append((group, reason))
    node_reasons = NodeReasons(filtered)
    candidates = chosen_policy.choose_groups(eligible, job) if eligible else []
    if candidates:
        return Decision(
            job, chosen_policy.name, Code.SUCCESS, candidates[0],
            candidates[1] if len(candidates) > 1 else None,
            reasons=_why_chosen(candidates), node_reasons=node_reasons,
            candidates_considered=sum(g.size for g in eligible),
        )  # fmt: skip
    code = Code.UNRESOLVABLE if unresolvable(state, job, chosen_policy) else Code.UNSCHEDULABLE
    return Decision(
        job, chosen_policy.name, code, reasons=(pending_reason(state, job, chosen_policy),),
        node_reasons=node_reasons, candidates_considered=sum(g.size for g in eligible),
    )  # fmt: skip


class NodeReasons(Mapping[str, str]):
    """node name -> why the filter rejected it, expanded from groups only when read (a decision
    on a 10,000-node cluster should not build 10,000 strings nobody looks at)."""

    def __init__(self, filtered: Sequence[tuple[NodeGroup, str]]) -> None:
        self._filtered = filtered
        self._expanded: dict[str, str] | None = None

    def _all(self) -> dict[str, str]:
        if self._expanded is None:
            # what holds the GPUs differs between a group's nodes (their free GPUs are the same)
            self._expanded = {ns.name: reason + (_held_by(ns) if reason.endswith(" per worker") else "")
                              for group, reason in self._filtered for ns in group.members()}  # fmt: skip
        return self._expanded

    def __getitem__(self, name: str) -> str:
        return self._all()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return sum(group.size for group, _ in self._filtered)


def _why_chosen(candidates: Sequence[Candidate]) -> tuple[str, ...]:
    best = candidates[0]
    lines = [f"objective {best.objective_dict()}"]
    if len(candidates) > 1:
        runner = candidates[1]
        diff = next(
            (name for name, a, b in zip(best.objective_names, best.objective, runner.objective, strict=True) if a != b),
            None,
        )
        lines.append(
            f"runner-up {runner.placement.describe()} lost on {diff}" if diff else
            f"runner-up {runner.placement.describe()} tied; first in node order kept"
        )
    return tuple(lines)


def unresolvable(state: ClusterState, job: JobRequest, policy: Policy) -> bool:
    """True if the job could not be placed even with every GPU of the cluster free."""
    empty = state.all_free()
    eligible = [g for g in empty.groups if policy.filter(g.first, job) is None]
    return not eligible or not policy.choose_groups(eligible, job)


def pending_reason(state: ClusterState, job: JobRequest, policy: Policy) -> str:
    """One line with numbers: what the gang needs and the most any node or the cluster offers."""
    if job.topology_required is not None or job.topology_preferred is not None:
        return required_level_reason(state, job, policy)
    need = f"needs {job.workers} worker(s) x {job.gpus_per_worker} GPU(s)"
    kind = "nodes serving --gputopology jobs" if job.topology_aware else "nodes serving non-topology jobs"
    serving = [ns for ns in state.nodes if policy.filter(ns, JobRequest(job.name, 1, 0, job.topology_aware)) is None]
    if not serving:
        return f"{need}; no {kind} exist (label one with `ringleader node label`)"
    most = max(serving, key=lambda ns: ns.n_free)
    slots = sum(ns.n_free // job.gpus_per_worker for ns in serving) if job.gpus_per_worker else job.workers
    # A node is named only when it has a free GPU to offer.
    where = f" ({most.name})" if most.n_free else ""
    return (
        f"{need} = {job.total_gpus} GPUs on {kind}; most free on any such node: "
        f"{most.n_free}{where}; worker slots free over {len(serving)} such node(s): {slots}"
    )


NO_SUCH_LEVEL = "the cluster has no network level"


def missing_level(state: ClusterState, job: JobRequest) -> str | None:
    """Why the network level the job names is not the cluster's, or None."""
    if job.topology_required is None and job.topology_preferred is None:
        return None
    levels = tree_levels(state.groups)
    for name in (job.topology_required, job.topology_preferred):
        if name is not None and level_index(levels, name) is None:
            have = ", ".join(lv.name for lv in levels) or "none (the cluster declares no network tree)"
            return f"{NO_SUCH_LEVEL} {name!r} (levels: {have})"
    return None


def required_level_reason(state: ClusterState, job: JobRequest, policy: Policy) -> str:
    """ "needs 4 workers x 8 GPUs under one leaf; most free under any leaf: 3 worker slots (leaf-2)"."""
    serving = [g for g in state.groups if policy.filter(g.first, replace(job, gpus_per_worker=0)) is None]
    missing = missing_level(state, job)
    if missing is not None:
        return missing
    levels = tree_levels(state.groups)
    if job.topology_required is None:  # preferred only: the gang does not fit at all
        return pending_reason(state, replace(job, topology_preferred=None), policy)
    level = level_index(levels, job.topology_required)
    assert level is not None
    need = f"needs {job.workers} worker(s) x {job.gpus_per_worker} GPU(s) under one {job.topology_required}"
    slots, switch = most_free_under(serving, job, level)
    where = f" ({switch})" if slots else ""
    return f"{need}; most free under any {job.topology_required}: {slots} worker slot(s){where}"


def free_ids(ns: NodeState) -> tuple[int, ...]:
    return bits(ns.free_mask)
