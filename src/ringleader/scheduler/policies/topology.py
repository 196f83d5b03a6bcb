"""ringleader's topology policy: fewest nodes, then the best-connected GPU set on each.

Objective, compared in order (higher is better):
  1. ``-nodes``: a gang on one node keeps its allreduce off the network;
  2. ``bottleneck_gbs``: the slowest link the allreduce crosses (ACK's metric); NVLink counts
     matter (NV2 > NV1 > PIX > PXB > PHB > NODE > SYS, or a measured matrix), and across nodes
     the network caps it;
  3. ``sum_pair_gbs``: total bandwidth among the chosen GPUs (more parallel rings/trees);
  4. ``-free_after``: best fit, so big holes stay for big jobs;
  5. ``leftover_score``: the GPUs left free stay well connected for the next job.
Single-node search is exact (gpuset.NodeSearch); multi-node search walks the few distinct
bandwidth levels and the few distinct (topology, free mask) groups, never single nodes one by one.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property

from ringleader.scheduler.framework import Policy, make_candidate, register
from ringleader.scheduler.gpuset import INF, GpuSet, NodeSearch, search_for
from ringleader.scheduler.types import Candidate, ClusterState, GroupKey, JobRequest, NodeGroup, NodeState, group_key

OBJECTIVE = ("-nodes", "bottleneck_gbs", "sum_pair_gbs", "-free_after", "leftover_score")


def _search(group: NodeGroup) -> NodeSearch:
    return search_for(group.all_nodes[group.positions[0]].spec.topology)


def _network(group: NodeGroup) -> float:
    return group.first.spec.network_gbs


def _finite(x: float) -> float:
    return 1e9 if x == INF else x


class TopologyPolicy(Policy):
    name = "topology"
    description = "fewest nodes, then max bottleneck bandwidth, then max summed bandwidth, best fit"

    def choose(self, nodes: Sequence[NodeState], job: JobRequest) -> list[Candidate]:
        return self.choose_groups(ClusterState(tuple(nodes)).groups, job)

    def choose_groups(self, groups: Sequence[NodeGroup], job: JobRequest) -> list[Candidate]:
        if job.gpus_per_worker == 0:
            # CPU-only gang: all workers on the first node that serves it.
            firsts = list(itertools.islice(itertools.chain.from_iterable(g.members() for g in groups), 2))
            return [make_candidate([ns], job, [(ns.name, ())] * job.workers, (-1.0,), ("-nodes",)) for ns in firsts]
        single = self._single_node(groups, job)
        if single:
            return single
        return self._multi_node(groups, job)

    # -- one node -----------------------------------------------------------------------------
    def _single_node(self, groups: Sequence[NodeGroup], job: JobRequest) -> list[Candidate]:
        need = job.total_gpus
        scored: list[tuple[tuple[float, float, float, float, float], NodeGroup, GpuSet]] = []
        for group in groups:
            if group.free_mask.bit_count() < need:
                continue
            best = _search(group).best(group.free_mask, need)
            assert best is not None
            free_after = group.free_mask.bit_count() - need
            objective = (-1.0, _finite(best.bottleneck_gbs), best.sum_gbs, -float(free_after), best.leftover_score)
            scored.append((objective, group, best))
        if not scored:
            return []
        # Among equals the node declared first wins (groups come in node order; sort is stable).
        scored.sort(key=lambda item: item[0], reverse=True)
        picks: list[tuple[tuple[float, float, float, float, float], NodeState, NodeGroup, GpuSet]] = []
        objective, group, best = scored[0]
        members = group.members()
        picks.append((objective, next(members), group, best))
        second = next(members, None)
        if second is not None:
            picks.append((objective, second, group, best))
        elif len(scored) > 1:
            objective2, group2, best2 = scored[1]
            picks.append((objective2, group2.first, group2, best2))
        return [
            make_candidate(
                [ns], job, [(ns.name, gpus) for gpus in _search(grp).split(gset.mask, job.gpus_per_worker)],
                obj, OBJECTIVE,
            )
            for obj, ns, grp, gset in picks
        ]  # fmt: skip

    # -- several nodes --------------------------------------------------------------------------
    def _multi_node(self, groups: Sequence[NodeGroup], job: JobRequest) -> list[Candidate]:
        ranked_at: dict[float, list[tuple[int, NodeGroup]]] = {}

        histograms: dict[float, tuple[dict[int, int], dict[GroupKey, int]]] = {}
        by_fingerprint: dict[str, NodeSearch] = {}
        infos = []
        for g in groups:
            key = g.key
            search = by_fingerprint.get(key[0]) or by_fingerprint.setdefault(key[0], _search(g))
            infos.append((search, key[1], len(g.positions), key))

        def histogram(level: float) -> tuple[dict[int, int], dict[GroupKey, int]]:
            if level not in histograms:
                histograms[level] = _capacity_histogram(infos, job, level)
            return histograms[level]

        def count(level: float, exclude: _Exclusion) -> int | None:
            return _count_nodes(*histogram(level), job.workers, exclude)

        def ranked(level: float) -> list[tuple[int, NodeGroup]]:
            if level not in ranked_at:
                ranked_at[level] = _ranked(groups, histogram(level)[1])
            return ranked_at[level]

        searches = {info[0] for info in infos}
        levels = sorted({lv for search in searches for lv in search.levels} | {0.0}, reverse=True)
        best = self._plan(levels, ranked, count, job, exclude=NOTHING)
        if best is None:
            return []
        runner = self._plan(levels, ranked, count, job, exclude=_Exclusion(best[1][:1]))
        return [best[0]] if runner is None else [best[0], runner[0]]

    def _plan(
        self,
        levels: list[float],
        ranked: Callable[[float], list[tuple[int, NodeGroup]]],
        count: Callable[[float, _Exclusion], int | None],
        job: JobRequest,
        exclude: _Exclusion,
    ) -> tuple[Candidate, tuple[NodeState, ...]] | None:
        """Fewest nodes first; among plans with that many nodes, the highest bandwidth level at
        which every node's share is a clique (all its pairs at least that fast)."""
        fewest = count(0.0, exclude)
        if fewest is None:
            return None
        level = next(lv for lv in levels if count(lv, exclude) == fewest)
        picked = _pick(ranked(level), job.workers, exclude)
        g = job.gpus_per_worker
        slots: list[tuple[str, tuple[int, ...]]] = []
        chosen_nodes: list[NodeState] = []
        sum_gbs = leftover = 0.0
        bottleneck = INF
        free_after = 0
        for ns, grp, workers in picked:
            search = _search(grp)
            gset = search.best(grp.free_mask, workers * g)
            assert gset is not None
            slots.extend((ns.name, gpus) for gpus in search.split(gset.mask, g))
            chosen_nodes.append(ns)
            sum_gbs += gset.sum_gbs
            bottleneck = min(bottleneck, gset.bottleneck_gbs, _network(grp))
            free_after += grp.free_mask.bit_count() - workers * g
            leftover += gset.leftover_score
        objective = (-float(len(picked)), _finite(bottleneck), sum_gbs, -float(free_after), leftover)
        return make_candidate(chosen_nodes, job, slots, objective, OBJECTIVE), tuple(chosen_nodes)



@dataclass(frozen=True)
class _Exclusion:
    """Nodes a plan may not use (the best plan's first node, to find a runner-up)."""

    nodes: tuple[NodeState, ...] = ()

    @property
    def names(self) -> frozenset[str]:
        return frozenset(ns.name for ns in self.nodes)

    @cached_property
    def per_group(self) -> dict[GroupKey, int]:
        counts: dict[GroupKey, int] = {}
        for ns in self.nodes:
            counts[group_key(ns)] = counts.get(group_key(ns), 0) + 1
        return counts


NOTHING = _Exclusion()


def _ranked(groups: Sequence[NodeGroup], cap_of: dict[GroupKey, int]) -> list[tuple[int, NodeGroup]]:
    """Groups by workers each node can take (``cap_of``, from the level's histogram): most
    first (fewest nodes), then the fullest node (best fit), then node order."""
    keyed = [(-cap_of[g.key], g.key[1].bit_count(), order, g) for order, g in enumerate(groups) if cap_of[g.key] > 0]
    keyed.sort(key=lambda item: item[:3])
    return [(-neg_cap, grp) for neg_cap, _, _, grp in keyed]


def _capacity_histogram(
    groups: Sequence[tuple[NodeSearch, int, int, GroupKey]], job: JobRequest, level: float
) -> tuple[dict[int, int], dict[GroupKey, int]]:
    """Nodes per worker capacity at ``level``, and each group's capacity. ``groups`` holds
    (search, free mask, size, key) per group; capacities are small integers, so no sort."""
    nodes_with: dict[int, int] = {}
    cap_of: dict[GroupKey, int] = {}
    per_worker = job.gpus_per_worker
    tables: dict[NodeSearch, dict[int, int]] = {}
    for search, free, size, key in groups:
        if level > 0:
            table = tables.get(search)
            if table is None:
                table = tables[search] = search.capacity_table(level)
            gpus = table.get(free)
            if gpus is None:
                gpus = search.capacity(free, level)
        else:
            gpus = free.bit_count()
        cap = cap_of[key] = gpus // per_worker
        if cap:
            nodes_with[cap] = nodes_with.get(cap, 0) + size
    return nodes_with, cap_of


def _count_nodes(
    nodes_with: dict[int, int], cap_of: dict[GroupKey, int], workers: int, exclude: _Exclusion
) -> int | None:
    """How many nodes the gang needs, most capacity first (None: it does not fit)."""
    available = dict(nodes_with)
    for key, n in exclude.per_group.items():
        cap = cap_of.get(key, 0)
        if cap:
            available[cap] -= n
    nodes = 0
    remaining = workers
    for cap in sorted(available, reverse=True):
        take = min(available[cap], -(-remaining // cap))
        nodes += take
        remaining -= take * cap
        if remaining <= 0:
            return nodes
    return None


def _pick(
    ranked: list[tuple[int, NodeGroup]], workers: int, exclude: _Exclusion
) -> list[tuple[NodeState, NodeGroup, int]]:
    """The nodes and workers per node of the plan ``_count_nodes`` counted."""
    remaining = workers
    picked: list[tuple[NodeState, NodeGroup, int]] = []
    names = exclude.names
    for cap, grp in ranked:
        for ns in grp.members():
            if ns.name in names:
                continue
            take = min(cap, remaining)
            picked.append((ns, grp, take))
            remaining -= take
            if remaining == 0:
                return picked
    raise AssertionError("_pick called on a plan that does not fit")


register(TopologyPolicy())
