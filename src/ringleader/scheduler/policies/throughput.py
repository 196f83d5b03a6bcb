"""The throughput objective: fewest nodes, then the highest predicted images/s, then the
best-connected free GPUs left behind.

Objective, compared in order (higher is better):
  1. ``-nodes``: a gang on one node keeps its allreduce off the network;
  2. ``images_per_s``: the job's predicted throughput on the placement (an ``Estimator``),
     rounded to ``TOLERANCE`` (0.5%): closer predictions are a tie, the model is not that exact;
  3. ``-free_after``: best fit, so whole nodes stay free for big gangs;
  4. ``leftover_score``: the GPUs left free on the node stay well connected for the next job.
Best fit comes before the leftover score (as in the topology policy): a gang that takes a fresh
node where a partly used one serves it as fast leaves fewer whole nodes, and on a 64-node trace
that pushed 16-GPU gangs over the network (a variant with leftover first: 11.7% of the jobs
multi-node instead of 10.5%, 4% fewer images/s).

The scheduler does not import the throughput model (docs/architecture.md: it imports only
topology, errors and reference), so the estimate is a plug-in: an ``Estimator`` maps (node
states, placement, job) to images/s. ``ringleader.model`` installs its own when imported
(``install_estimator``); a ``ThroughputPolicy(estimator)`` can be built with any other. Without
one, the estimate is the placement's bottleneck bandwidth, which ranks like the topology policy.

Candidates: on one node every k-subset of a node group's free GPUs (up to ``MAX_SUBSETS``, else
the topology search's best set), once per group of equivalent nodes; across nodes the topology
policy's plans (best and runner-up) that use the fewest nodes.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import ClassVar, Protocol, runtime_checkable

from ringleader.scheduler.framework import Policy, make_candidate, placement_metrics, register
from ringleader.scheduler.gpuset import EXACT_LIMIT, bits, search_for
from ringleader.scheduler.policies.topology import TopologyPolicy
from ringleader.scheduler.types import Candidate, ClusterState, JobRequest, NodeGroup, NodeState, Placement, WorkerSlot

OBJECTIVE = ("-nodes", "images_per_s", "-free_after", "leftover_score")
MAX_SUBSETS = 512
TOLERANCE = 0.005


def rounded(images_per_s: float) -> float:
    """images/s on a grid of TOLERANCE steps (relative), so near-equal predictions tie."""
    if images_per_s <= 0:
        return 0.0
    step = math.log1p(TOLERANCE)
    return float(round(math.exp(round(math.log(images_per_s) / step) * step), 1))


Estimator = Callable[[Mapping[str, NodeState], Placement, JobRequest], float]


@runtime_checkable
class RangedEstimator(Protocol):
    """An estimator that also says how far to trust it: the images/s a placement likely gives at
    its low and high ends (the model's held-out range). The start rule ``finish`` waits only
    where waiting wins at the pessimistic end."""

    def __call__(self, nodes: Mapping[str, NodeState], placement: Placement, job: JobRequest) -> float: ...

    def likely(self, placement: Placement, job: JobRequest, images_per_s: float) -> tuple[float, float]:
        """The low and high ends around ``images_per_s``, this estimator's figure for ``job`` on
        ``placement``."""
        ...


def bandwidth_estimate(nodes: Mapping[str, NodeState], placement: Placement, job: JobRequest) -> float:
    """The fallback estimate: the slowest link's GB/s (a single GPU: no link to wait for)."""
    del job
    gbs = placement_metrics(nodes, placement).bottleneck.gbs
    return 1e9 if gbs == 0.0 or math.isinf(gbs) else gbs


class ThroughputPolicy(Policy):
    name = "throughput"
    description = "fewest nodes, then highest predicted images/s, then best-connected leftover"
    #: The estimator of instances built without one; ``install_estimator`` sets it.
    installed: ClassVar[Estimator | None] = None

    def __init__(self, estimator: Estimator | None = None) -> None:
        self._own = estimator
        self._memo: dict[tuple[object, ...], float] = {}

    @property
    def estimator(self) -> Estimator:
        return self._own or current_estimator()

    def choose(self, nodes: Sequence[NodeState], job: JobRequest) -> list[Candidate]:
        return self.choose_groups(ClusterState(tuple(nodes)).groups, job)

    def choose_groups(self, groups: Sequence[NodeGroup], job: JobRequest) -> list[Candidate]:
        if job.gpus_per_worker == 0:
            return TopologyPolicy().choose_groups(groups, job)
        single = self._single_node(groups, job)
        if single:
            return single
        return self._multi_node(groups, job)

    def _estimate(self, ns: NodeState, mask: int, job: JobRequest) -> float:
        """images/s of the job on GPUs ``mask`` of ``ns``. An estimator must depend only on the
        node's shape (topology, GPU model, network, NICs) and the GPUs chosen, not on the node's
        name or its other GPUs (jobs run alone on their GPUs, as in the model): the estimate is
        memoised on exactly that, which keeps a 64-node trace within a few times the topology
        policy's time."""
        spec = ns.spec
        key = (id(self.estimator), spec.topology.fingerprint, spec.topology.gpu_model, spec.topology.nics,
               spec.network_gbps, mask, job.gpus_per_worker, job.model)  # fmt: skip
        found = self._memo.get(key)
        if found is None:
            search = search_for(spec.topology)
            slots = tuple(WorkerSlot(i, ns.name, g) for i, g in enumerate(search.split(mask, job.gpus_per_worker)))
            found = self._memo[key] = float(self.estimator({ns.name: ns}, Placement(job.name, slots), job))
        return found

    # -- one node -----------------------------------------------------------------------------
    def _single_node(self, groups: Sequence[NodeGroup], job: JobRequest) -> list[Candidate]:
        need = job.total_gpus
        scored: list[tuple[tuple[float, float, float, float], int, NodeGroup, int]] = []
        for order, group in enumerate(groups):
            free = group.free_mask
            if free.bit_count() < need:
                continue
            search = search_for(group.first.spec.topology)
            masks = _subsets(free, need) if search.n <= EXACT_LIMIT else None
            if masks is None:
                best = search.best(free, need)
                assert best is not None
                masks = [best.mask]
            for mask in masks:
                objective = (
                    -1.0, rounded(self._estimate(group.first, mask, job)), -float(free.bit_count() - need),
                    search.leftover_score(free & ~mask),
                )  # fmt: skip
                scored.append((objective, order, group, mask))
        if not scored:
            return []
        # best objective first; among equals the group declared first, then the lowest GPU ids
        scored.sort(key=lambda item: (tuple(-x for x in item[0]), item[1], item[3]))
        objective, _, group, mask = scored[0]
        members = group.members()
        picks = [(objective, next(members), mask)]
        second = next(members, None)
        if second is not None:
            picks.append((objective, second, mask))
        else:
            other = next((s for s in scored[1:] if s[2] is not group), scored[1] if len(scored) > 1 else None)
            if other is not None:
                picks.append((other[0], other[2].first, other[3]))
        return [
            make_candidate(
                [ns], job, [(ns.name, g) for g in search_for(ns.spec.topology).split(m, job.gpus_per_worker)],
                obj, OBJECTIVE,
            )
            for obj, ns, m in picks
        ]  # fmt: skip

    # -- several nodes --------------------------------------------------------------------------
    def _multi_node(self, groups: Sequence[NodeGroup], job: JobRequest) -> list[Candidate]:
        plans = TopologyPolicy().choose_groups(groups, job)
        if not plans:
            return []
        fewest = min(c.metrics.nodes_used for c in plans)
        lookup = {ns.name: ns for g in groups for ns in g.members() if ns.name in _names(plans)}
        ranked = []
        for c in plans:
            if c.metrics.nodes_used != fewest:
                continue
            used = {n: lookup[n] for n in c.placement.nodes}
            rate = rounded(float(self.estimator(used, c.placement, job)))
            leftover = sum(
                search_for(used[n].spec.topology).leftover_score(
                    used[n].free_mask & ~sum(1 << g for g in c.placement.gpus_on(n)))
                for n in c.placement.nodes
            )  # fmt: skip
            free_after = sum(used[n].n_free - len(c.placement.gpus_on(n)) for n in c.placement.nodes)
            ranked.append(((-float(fewest), rate, -float(free_after), leftover), c))
        ranked.sort(key=lambda item: tuple(-x for x in item[0]))
        slots = [[(s.node, s.gpus) for s in c.placement.slots] for _, c in ranked]
        return [
            make_candidate([lookup[n] for n in c.placement.nodes], job, sl, obj, OBJECTIVE)
            for (obj, c), sl in zip(ranked, slots, strict=True)
        ]


def _names(cands: Sequence[Candidate]) -> set[str]:
    return {n for c in cands for n in c.placement.nodes}


def _subsets(free: int, k: int) -> list[int] | None:
    """Every k-subset of ``free`` as a mask, or None when there are more than MAX_SUBSETS."""
    ids = bits(free)
    if math.comb(len(ids), k) > MAX_SUBSETS:
        return None
    return [sum(1 << g for g in combo) for combo in itertools.combinations(ids, k)]


def current_estimator() -> Estimator:
    """The estimator the model installed, else the bandwidth fallback."""
    return ThroughputPolicy.installed or bandwidth_estimate


def install_estimator(estimator: Estimator | None) -> None:
    """Plug an estimator into the registered ``throughput`` policy (None: the bandwidth fallback)."""
    ThroughputPolicy.installed = estimator


register(ThroughputPolicy())
