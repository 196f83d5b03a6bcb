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

from collections.abc import Sequence
from dataclasses import dataclass

from ringleader.scheduler.framework import Policy, make_candidate, register
from ringleader.scheduler.gpuset import INF, GpuSet, NodeSearch, search_for
from ringleader.scheduler.types import Candidate, JobRequest, NodeState

OBJECTIVE = ("-nodes", "bottleneck_gbs", "sum_pair_gbs", "-free_after", "leftover_score")


@dataclass
class _Group:
    """Nodes that place identically: same topology, same free GPUs, same network."""

    search: NodeSearch
    free_mask: int
    network_gbs: float
    members: list[NodeState]


def _groups(nodes: Sequence[NodeState]) -> list[_Group]:
    groups: dict[tuple[str, int, float], _Group] = {}
    for ns in nodes:
        topo = ns.spec.topology
        key = (topo.fingerprint, ns.free_mask, ns.spec.network_gbs)
        group = groups.get(key)
        if group is None:
            group = groups[key] = _Group(search_for(topo), ns.free_mask, ns.spec.network_gbs, [])
        group.members.append(ns)
    return list(groups.values())


def _finite(x: float) -> float:
    return 1e9 if x == INF else x


class TopologyPolicy(Policy):
    name = "topology"
    description = "fewest nodes, then max bottleneck bandwidth, then max summed bandwidth, best fit"

    def choose(self, nodes: Sequence[NodeState], job: JobRequest) -> list[Candidate]:
        if job.gpus_per_worker == 0:
            # CPU-only gang: all workers on the first node that serves it.
            return [
                make_candidate(nodes, job, [(ns.name, ())] * job.workers, (-1.0,), ("-nodes",))
                for ns in nodes[:2]
            ]
        groups = _groups(nodes)
        single = self._single_node(groups, job)
        if single:
            return single
        return self._multi_node(nodes, groups, job)

    # -- one node -----------------------------------------------------------------------------
    def _single_node(self, groups: list[_Group], job: JobRequest) -> list[Candidate]:
        need = job.total_gpus
        scored: list[tuple[tuple[float, float, float, float, float], _Group, GpuSet]] = []
        for group in groups:
            if group.free_mask.bit_count() < need:
                continue
            best = group.search.best(group.free_mask, need)
            assert best is not None
            free_after = group.free_mask.bit_count() - need
            objective = (-1.0, _finite(best.bottleneck_gbs), best.sum_gbs, -float(free_after), best.leftover_score)
            scored.append((objective, group, best))
        if not scored:
            return []
        # Stable sort keeps node order among equals (first declared node wins a tie).
        scored.sort(key=lambda item: (item[0], -item[1].members[0].spec.topology.n_gpus), reverse=True)
        picks: list[tuple[tuple[float, float, float, float, float], NodeState, _Group, GpuSet]] = []
        objective, group, best = scored[0]
        picks.append((objective, group.members[0], group, best))
        if len(group.members) > 1:
            picks.append((objective, group.members[1], group, best))
        elif len(scored) > 1:
            objective2, group2, best2 = scored[1]
            picks.append((objective2, group2.members[0], group2, best2))
        return [
            make_candidate(
                [ns], job, [(ns.name, gpus) for gpus in grp.search.split(gset.mask, job.gpus_per_worker)],
                obj, OBJECTIVE,
            )
            for obj, ns, grp, gset in picks
        ]  # fmt: skip

    # -- several nodes --------------------------------------------------------------------------
    def _multi_node(self, nodes: Sequence[NodeState], groups: list[_Group], job: JobRequest) -> list[Candidate]:
        best = self._plan(groups, job, exclude=frozenset())
        if best is None:
            return []
        candidates = [best]
        runner = self._plan(groups, job, exclude=frozenset({best.placement.nodes[0]}))
        if runner is not None:
            candidates.append(runner)
        return candidates

    def _plan(self, groups: list[_Group], job: JobRequest, exclude: frozenset[str]) -> Candidate | None:
        g = job.gpus_per_worker
        levels = sorted({lv for grp in groups for lv in grp.search.levels} | {0.0}, reverse=True)
        fewest = self._nodes_needed(groups, job, 0.0, exclude)
        if fewest is None:
            return None
        for level in levels:
            picked = self._pick(groups, job, level, exclude)
            if picked is None or len(picked) != fewest:
                continue
            slots: list[tuple[str, tuple[int, ...]]] = []
            chosen_nodes: list[NodeState] = []
            sum_gbs = 0.0
            bottleneck = INF
            free_after = 0
            leftover = 0.0
            for ns, grp, workers in picked:
                gset = grp.search.best(grp.free_mask, workers * g)
                assert gset is not None
                slots.extend((ns.name, gpus) for gpus in grp.search.split(gset.mask, g))
                chosen_nodes.append(ns)
                sum_gbs += gset.sum_gbs
                bottleneck = min(bottleneck, gset.bottleneck_gbs, grp.network_gbs)
                free_after += grp.free_mask.bit_count() - workers * g
                leftover += gset.leftover_score
            objective = (-float(len(picked)), _finite(bottleneck), sum_gbs, -float(free_after), leftover)
            return make_candidate(chosen_nodes, job, slots, objective, OBJECTIVE)
        return None

    @staticmethod
    def _capacity(grp: _Group, level: float, per_worker: int) -> int:
        gpus = grp.search.capacity(grp.free_mask, level) if level > 0 else grp.free_mask.bit_count()
        return gpus // per_worker

    def _ranked(self, groups: list[_Group], job: JobRequest, level: float) -> list[tuple[int, _Group]]:
        ranked = [(self._capacity(grp, level, job.gpus_per_worker), grp) for grp in groups]
        # Most workers first (fewest nodes); among equals the fullest node (best fit).
        ranked = [(c, grp) for c, grp in ranked if c > 0]
        ranked.sort(key=lambda cg: (-cg[0], cg[1].free_mask.bit_count()))
        return ranked

    def _pick(
        self, groups: list[_Group], job: JobRequest, level: float, exclude: frozenset[str]
    ) -> list[tuple[NodeState, _Group, int]] | None:
        """Nodes and workers per node at bandwidth ``level``: most capacity first."""
        remaining = job.workers
        picked: list[tuple[NodeState, _Group, int]] = []
        for cap, grp in self._ranked(groups, job, level):
            for ns in grp.members:
                if ns.name in exclude:
                    continue
                take = min(cap, remaining)
                picked.append((ns, grp, take))
                remaining -= take
                if remaining == 0:
                    return picked
        return None

    def _nodes_needed(self, groups: list[_Group], job: JobRequest, level: float, exclude: frozenset[str]) -> int | None:
        picked = self._pick(groups, job, level, exclude)
        return None if picked is None else len(picked)


register(TopologyPolicy())
