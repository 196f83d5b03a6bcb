"""Alibaba ACK GPU topology-aware scheduling baseline: fewest nodes, then max bottleneck bandwidth.

As ACK documents its ``gputopology`` scheduling (``arena submit ... --gputopology``): the gang
goes on as few nodes as possible, and on each node to the GPU set whose slowest link (from the
node's bandwidth matrix) is fastest. Nothing else: no summed-bandwidth, best-fit or leftover
tie-breaks. Ties go to the first node in node order and the lowest GPU ids.

Several nodes: nodes are taken by the most worker slots first (first in node order among equals)
until the gang is placed; each node's share then gets its max-bottleneck set. Across nodes the
network caps the bottleneck whatever the GPUs, so the node choice has no bandwidth term.
"""

from __future__ import annotations

import functools
import heapq
import itertools
from collections.abc import Iterator, Sequence
from typing import overload

from ringleader.scheduler.framework import Policy, free_ids, make_candidate, register
from ringleader.scheduler.gpuset import INF, search_for
from ringleader.scheduler.types import Candidate, JobRequest, NodeGroup, NodeState
from ringleader.topology.node import NodeTopology

OBJECTIVE = ("-nodes", "bottleneck_gbs")
_TOPOLOGIES: dict[str, NodeTopology] = {}


def max_bottleneck_set(topology: NodeTopology, free: tuple[int, ...], k: int) -> tuple[tuple[int, ...], float]:
    """The lexicographically first k-subset of ``free`` with the highest slowest-pair GB/s."""
    _TOPOLOGIES.setdefault(topology.fingerprint, topology)
    return _best(topology.fingerprint, free, k)


@functools.lru_cache(maxsize=65536)
def _best(fingerprint: str, free: tuple[int, ...], k: int) -> tuple[tuple[int, ...], float]:
    topology = _TOPOLOGIES[fingerprint]
    if k <= 1:
        return free[:k], INF
    search = search_for(topology)
    mask = sum(1 << g for g in free)
    level = search.bottleneck_level(mask, k)
    bw = topology.bandwidth_gbs
    for combo in itertools.combinations(free, k):
        if all(bw[a][b] >= level for a, b in itertools.combinations(combo, 2)):
            return combo, level
    raise AssertionError("bottleneck_level promised a set")  # pragma: no cover


def _finite(x: float) -> float:
    return 1e9 if x == INF else x


_Group = tuple[tuple[int, ...], Sequence[NodeState]]  # node positions and the nodes there


class AckPolicy(Policy):
    name = "ack"
    description = "Alibaba ACK gputopology: fewest nodes, then max bottleneck link; lowest ids on ties"

    def choose(self, nodes: Sequence[NodeState], job: JobRequest) -> list[Candidate]:
        return self._choose([((i,), (ns,)) for i, ns in enumerate(nodes)], job)

    def choose_groups(self, groups: Sequence[NodeGroup], job: JobRequest) -> list[Candidate]:
        """Equivalent nodes place identically: one set search per group, members expanded only
        as far as the gang needs."""
        return self._choose([(g.positions, _Members(g)) for g in groups], job)

    def _choose(self, groups: list[_Group], job: JobRequest) -> list[Candidate]:
        if job.gpus_per_worker == 0:
            first = [ns for _, ns in itertools.islice(_in_order(groups), 2)]
            return [make_candidate([ns], job, [(ns.name, ())] * job.workers, (-1.0, 1e9), OBJECTIVE) for ns in first]
        return self._single(groups, job) or self._multi(groups, job)

    def _single(self, groups: list[_Group], job: JobRequest) -> list[Candidate]:
        need = job.total_gpus
        scored: list[tuple[float, int, NodeState, tuple[int, ...]]] = []
        for positions, members in groups:
            ns = members[0]
            if ns.n_free < need:
                continue
            gpus, level = max_bottleneck_set(ns.spec.topology, free_ids(ns), need)
            # The group's second node may be the runner-up.
            scored.extend((_finite(level), -positions[k], members[k], gpus) for k in range(min(2, len(positions))))
        scored.sort(key=lambda item: (item[0], item[1]), reverse=True)
        return [
            make_candidate([ns], job, _split(ns.name, gpus, job.gpus_per_worker), (-1.0, level), OBJECTIVE)
            for level, _, ns, gpus in scored[:2]
        ]

    def _multi(self, groups: list[_Group], job: JobRequest) -> list[Candidate]:
        g = job.gpus_per_worker
        by_slots: dict[int, list[_Group]] = {}
        for group in groups:
            cap = group[1][0].n_free // g
            if cap > 0:
                by_slots.setdefault(cap, []).append(group)
        remaining = job.workers
        slots: list[tuple[str, tuple[int, ...]]] = []
        bottleneck = INF
        used: list[NodeState] = []
        # Most worker slots first (fewest nodes); node order among equals.
        for cap in sorted(by_slots, reverse=True):
            for _, ns in _in_order(by_slots[cap]):
                take = min(cap, remaining)
                gpus, level = max_bottleneck_set(ns.spec.topology, free_ids(ns), take * g)
                slots.extend(_split(ns.name, gpus, g))
                bottleneck = min(bottleneck, level, ns.spec.network_gbs)
                used.append(ns)
                remaining -= take
                if remaining == 0:
                    objective = (-float(len(used)), _finite(bottleneck))
                    return [make_candidate(used, job, slots, objective, OBJECTIVE)]
        return []


def _in_order(groups: list[_Group]) -> Iterator[tuple[int, NodeState]]:
    """The groups' nodes merged into node order, lazily."""
    return heapq.merge(*(zip(positions, members, strict=False) for positions, members in groups), key=lambda x: x[0])


class _Members(Sequence[NodeState]):
    """A group's nodes, in node order, materialised on access."""

    def __init__(self, group: NodeGroup) -> None:
        self.group = group

    def __len__(self) -> int:
        return self.group.size

    @overload
    def __getitem__(self, i: int) -> NodeState: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[NodeState]: ...
    def __getitem__(self, i: int | slice) -> NodeState | Sequence[NodeState]:
        if isinstance(i, slice):
            return [self.group.all_nodes[p] for p in self.group.positions[i]]
        return self.group.all_nodes[self.group.positions[i]]


def _split(node: str, gpus: tuple[int, ...], per_worker: int) -> list[tuple[str, tuple[int, ...]]]:
    if per_worker <= 0:
        return [(node, ())]
    return [(node, gpus[i : i + per_worker]) for i in range(0, len(gpus), per_worker)]


register(AckPolicy())
