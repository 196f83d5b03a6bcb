"""Kubernetes-default baseline: each worker to the least-allocated node, first free GPU ids.

What users get without topology-aware scheduling (NodeResourcesLeastAllocated spreads pods; the
device plugin hands out the first free devices). Gang semantics still apply: all or none.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Sequence

from ringleader.scheduler.framework import Policy, free_ids, make_candidate, register
from ringleader.scheduler.types import Candidate, JobRequest, NodeGroup, NodeState


class DefaultPolicy(Policy):
    name = "default"
    description = "spread workers over the least-allocated nodes, first free GPU ids (Kubernetes default)"
    serves_topology_jobs = False

    def choose_groups(self, groups: Sequence[NodeGroup], job: JobRequest) -> list[Candidate]:
        """Only the ``workers`` least-allocated nodes can receive a worker (each one taken lowers
        its own rank), so only those are expanded out of their groups."""
        by_free: dict[int, list[NodeGroup]] = {}
        for group in groups:
            by_free.setdefault(group.free_mask.bit_count(), []).append(group)
        top: list[NodeState] = []
        for free in sorted(by_free, reverse=True):
            same = by_free[free]
            merged = heapq.merge(*(g.positions for g in same))
            nodes = same[0].all_nodes
            top.extend(nodes[p] for p in itertools.islice(merged, job.workers - len(top)))
            if len(top) >= job.workers:
                break
        return self.choose(top, job)

    def choose(self, nodes: Sequence[NodeState], job: JobRequest) -> list[Candidate]:
        g = job.gpus_per_worker
        free = {ns.name: list(free_ids(ns)) for ns in nodes}
        assigned = dict.fromkeys(free, 0)
        # Least allocated first: most free GPUs, then fewest workers of this job, then node order.
        heap = [(-len(free[ns.name]), 0, i, ns.name) for i, ns in enumerate(nodes)]
        heapq.heapify(heap)
        slots: list[tuple[str, tuple[int, ...]]] = []
        for _ in range(job.workers):
            while heap and len(free[heap[0][3]]) < g:
                heapq.heappop(heap)
            if not heap:
                return []
            _, _, order, name = heapq.heappop(heap)
            gpus, free[name] = tuple(free[name][:g]), free[name][g:]
            assigned[name] += 1
            slots.append((name, gpus))
            heapq.heappush(heap, (-len(free[name]), assigned[name], order, name))
        spread = len({n for n, _ in slots})
        return [make_candidate(nodes, job, slots, (float(spread),), ("nodes_spread",))]


register(DefaultPolicy())
