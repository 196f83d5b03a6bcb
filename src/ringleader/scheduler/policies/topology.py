"""ringleader's topology policy: fewest network islands, then the best-connected GPU sets.

Objective, compared in order (higher is better):
  1. ``-islands``: a gang on one node, or on nodes of one multi-node NVLink domain (GB200/GB300
     NVL72 trays sharing a clique id), keeps its allreduce off the network;
  2. ``bottleneck_gbs``: the slowest link the allreduce crosses (ACK's metric); NVLink counts
     matter (NV2 > NV1 > PIX > PXB > PHB > NODE > SYS, or a measured matrix), and across nodes
     the network (or the domain's NVLink fabric) caps it;
  3. ``-node_phase``: the longest in-node phase of a hierarchical allreduce across nodes
     (scheduler/split.py); inside one island it only restates the bottleneck;
  4. ``-nodes``: fewer nodes inside an island;
  5. ``sum_pair_gbs``: total bandwidth among the chosen GPUs (more parallel rings/trees);
  6. ``-numa_nodes``: the NUMA nodes (sockets) the chosen GPUs hang off, fewer is better;
  7. ``nic_near`` and 8. ``-rail_load``, for gangs that span nodes over the network: GPUs that
     share a PCIe switch with a NIC (PIX/PXB, GPUDirect RDMA), spread evenly over the NICs;
  9. ``-free_after``: best fit, so big holes stay for big jobs;
  10. ``leftover_score``: the GPUs left free stay well connected for the next job.
Single-node search is exact (gpuset.NodeSearch); the split across nodes is chosen by the same
ranking (split.best_split). Both work on groups of interchangeable nodes, never node by node.

On a cluster with a network tree (scheduler/network.py) three terms come first:
``-span_level`` (the lowest common switch: one node or one NVLink domain is below every
switch), ``-nodes_spanned`` and ``-switch_free_after`` (best fit at that switch's level); the
gang's workers are then ranked along the tree, so a ring crosses each uplink the fewest times.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace

from ringleader.scheduler.framework import Policy, fabric_gbs, make_candidate, register
from ringleader.scheduler.gpuset import INF, GpuSet, NodeSearch, search_for
from ringleader.scheduler.network import fullest_switch_first, level_index, lowest_fits, tree_levels
from ringleader.scheduler.split import Pool, Split, additive, best_split, fewest_nodes, node_phase
from ringleader.scheduler.types import Candidate, ClusterState, JobRequest, NodeGroup, NodeState, group_key

OBJECTIVE = (
    "-islands", "bottleneck_gbs", "-node_phase", "-nodes", "sum_pair_gbs", "-numa_nodes", "nic_near",
    "-rail_load", "-free_after", "leftover_score",
)  # fmt: skip
Order = Callable[[NodeGroup], Iterator[NodeState]]
TREE_OBJECTIVE = ("-span_level", "-nodes_spanned", "-switch_free_after", *OBJECTIVE)


def group_search(group: NodeGroup) -> NodeSearch:
    return search_for(group.first.spec.topology)


def _finite(x: float) -> float:
    return 1e9 if x == INF else x


def objective(
    islands: int, bottleneck: float, phase: float, nodes: int, parts: Sequence[tuple[float, ...]]
) -> tuple[float, ...]:
    """The objective tuple of a plan whose shares' additive parts are ``parts``."""
    summed = [sum(values) for values in zip(*parts, strict=True)]
    return (-float(islands), _finite(bottleneck), -phase, -float(nodes), *summed)


class TopologyPolicy(Policy):
    name = "topology"
    description = "fewest network islands, max bottleneck bandwidth, then NUMA/NIC affinity, best fit"

    def choose(self, nodes: Sequence[NodeState], job: JobRequest) -> list[Candidate]:
        return self.choose_groups(ClusterState(tuple(nodes)).groups, job)

    def choose_groups(self, groups: Sequence[NodeGroup], job: JobRequest) -> list[Candidate]:
        if job.gpus_per_worker == 0:
            # CPU-only gang: all workers on the first node that serves it.
            firsts = list(itertools.islice(itertools.chain.from_iterable(g.members() for g in groups), 2))
            return [make_candidate([ns], job, [(ns.name, ())] * job.workers, (-1.0,), ("-islands",)) for ns in firsts]
        levels = tree_levels(groups)
        if levels or job.topology_required is not None or job.topology_preferred is not None:
            return self._in_tree(groups, job, len(levels), level_index(levels, job.topology_required))
        found = self._single_node(groups, job)
        for domain in sorted({g.key[4] for g in groups} - {""}):
            members = [g for g in groups if g.key[4] == domain]
            found.extend(self._across_nodes(members, job, one_island=True))
        if len(found) < 2:  # no fit in one island, or a runner-up is still wanted
            found.extend(self._across_nodes(groups, job, one_island=False))
        found.sort(key=lambda c: c.objective, reverse=True)  # stable: node order breaks ties
        return found[:2]

    def _in_tree(
        self, groups: Sequence[NodeGroup], job: JobRequest, levels: int, required: int | None
    ) -> list[Candidate]:
        """One node or one NVLink domain first (below every switch), then the lowest common switch."""
        names = tree_levels(groups)
        if any(name is not None and level_index(names, name) is None
               for name in (job.topology_required, job.topology_preferred)):  # fmt: skip
            return []  # a level the cluster does not have: the pending reason says so
        found = [_with_prefix(c, (1.0, 0.0, 0.0)) for c in self._single_node(groups, job, fullest_switch_first)]
        for domain in sorted({g.key[4] for g in groups} - {""}):
            members = [g for g in groups if g.key[4] == domain]
            found.extend(_with_prefix(c, (1.0, 0.0, 0.0)) for c in self._across_nodes(members, job, one_island=True))
        highest = levels if required is None else required
        if len(found) < 2:
            for fit in lowest_fits(groups, job, highest):
                # The nodes span exactly fit.level: had a lower switch held them, that level would have fit.
                for c in self._across_nodes(fit.groups, job, one_island=False, tree=True):
                    found.append(_with_prefix(c, (-float(fit.level), -float(fit.nodes), -float(fit.free_after))))
                if len(found) >= 2:
                    break
        found.sort(key=lambda c: c.objective, reverse=True)  # stable: node order breaks ties
        return found[:2]

    # -- one node -----------------------------------------------------------------------------
    def _single_node(
        self, groups: Sequence[NodeGroup], job: JobRequest, order: Order | None = None
    ) -> list[Candidate]:
        """The best one-node plans; ``order`` gives the best group's nodes in the order to take
        them (default: cluster order)."""
        need = job.total_gpus
        searches: dict[str, NodeSearch] = {}
        scored: list[tuple[tuple[float, ...], NodeGroup, GpuSet]] = []  # the best two, best first
        for group in groups:
            free = group.free_mask.bit_count()
            if free < need:
                continue
            search = searches.get(group.key[0]) or searches.setdefault(group.key[0], group_search(group))
            best = search.best(group.free_mask, need)
            assert best is not None
            obj: tuple[float, ...] = (
                -1.0, _finite(best.bottleneck_gbs), -node_phase(best), -1.0, best.sum_gbs, -float(best.numa_nodes),
                0.0, 0.0, -float(free - need), best.leftover_score,
            )  # fmt: skip
            if len(scored) < 2 or obj > scored[1][0]:  # ties keep the earlier group (node order)
                scored.append((obj, group, best))
                scored.sort(key=lambda item: item[0], reverse=True)
                del scored[2:]
        if not scored:
            return []
        picks: list[tuple[tuple[float, ...], NodeState, NodeGroup, GpuSet]] = []
        obj, group, best = scored[0]
        members = order(group) if order is not None else group.members()
        picks.append((obj, next(members), group, best))
        second = next(members, None)
        if second is not None:
            picks.append((obj, second, group, best))
        elif len(scored) > 1:
            obj2, group2, best2 = scored[1]
            picks.append((obj2, group2.first, group2, best2))
        out = []
        for o, ns, grp, gset in picks:
            slots = [(ns.name, gpus) for gpus in group_search(grp).split(gset.mask, job.gpus_per_worker)]
            out.append(make_candidate([ns], job, slots, o, OBJECTIVE))
        return out

    # -- several nodes --------------------------------------------------------------------------
    def _across_nodes(
        self, groups: Sequence[NodeGroup], job: JobRequest, one_island: bool, tree: bool = False
    ) -> list[Candidate]:
        planned = self._split(groups, job, one_island, None)
        if planned is None:
            return []
        pools, split = planned
        best, first = self._materialize(pools, split, job, one_island, None, tree)
        # The runner-up is the best plan without the plan's first node. When that node's group has
        # another node the split does not use, the same split on that node is such a plan, and
        # none can be better (it is the best over all nodes): no second search.
        group_of_first = next(i for i, _, _ in split.shares)
        if pools[group_of_first].available > sum(1 for i, _, _ in split.shares if i == group_of_first):
            return [best, self._materialize(pools, split, job, one_island, first, tree)[0]]
        runner = self._split(groups, job, one_island, first)
        if runner is None:
            return [best]
        return [best, self._materialize(*runner, job, one_island, first, tree)[0]]

    def _split(
        self, groups: Sequence[NodeGroup], job: JobRequest, one_island: bool, excluded: NodeState | None
    ) -> tuple[list[Pool], Split] | None:
        """The pools and best split over two or more nodes (None: it needs one node or does not
        fit). ``excluded``: a node the split may not use (to find a runner-up)."""
        skipped = group_key(excluded) if excluded is not None else None
        pools = []
        for g in groups:
            skip = 1 if g.key == skipped else 0
            if g.size - skip > 0:
                link = fabric_gbs(g.first) if one_island else g.first.spec.network_gbs
                pools.append(Pool(g, group_search(g), link, g.size - skip, spans_nodes=not one_island))
        nodes = fewest_nodes(pools, job.workers, job.gpus_per_worker)
        if nodes is None or nodes < 2:
            return None  # no fit, or one node (the single-node search covers it)
        return pools, best_split(pools, job.workers, job.gpus_per_worker, nodes, one_island)

    def _materialize(
        self, pools: Sequence[Pool], split: Split, job: JobRequest, one_island: bool, excluded: NodeState | None,
        tree: bool = False,
    ) -> tuple[Candidate, NodeState]:
        """The plan of ``split``: each share on the next unused node of its pool (never
        ``excluded``), and the plan's first node. ``tree``: ranks follow the network tree (nodes
        sharing a switch get consecutive ranks, so a ring crosses each uplink the fewest times)."""
        taken: dict[int, int] = {}
        slots: list[tuple[str, tuple[int, ...]]] = []
        chosen: list[NodeState] = []
        parts = []
        for i, workers, gset in split.shares:
            pool = pools[i]
            members = (ns for ns in pool.group.members() if excluded is None or ns.name != excluded.name)
            ns = next(itertools.islice(members, taken.get(i, 0), None))
            taken[i] = taken.get(i, 0) + 1
            chosen.append(ns)
            slots.extend((ns.name, gpus) for gpus in pool.search.split(gset.mask, job.gpus_per_worker))
            parts.append(additive(gset, pool.group.free_mask.bit_count() - workers * job.gpus_per_worker))
        if tree:
            path = {ns.name: ns.spec.switches[::-1] for ns in chosen}
            slots.sort(key=lambda slot: path[slot[0]])  # stable: a node's workers stay in order
        if one_island:  # one NVLink fabric: the whole gang is one ring at the bottleneck
            k = job.total_gpus
            obj = objective(1, split.bottleneck_gbs, (k - 1) / (k * split.bottleneck_gbs), len(chosen), parts)
        else:
            obj = objective(len(chosen), split.bottleneck_gbs, split.node_phase, len(chosen), parts)
        return make_candidate(chosen, job, slots, obj, OBJECTIVE), chosen[0]


def _with_prefix(candidate: Candidate, prefix: tuple[float, float, float]) -> Candidate:
    return replace(candidate, objective=(*prefix, *candidate.objective), objective_names=TREE_OBJECTIVE)


register(TopologyPolicy())
