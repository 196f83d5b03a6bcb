"""NVIDIA go-gpuallocator BestEffort baseline: Kubernetes node choice, NVIDIA's GPU choice per pod.

The published algorithm (NVIDIA/go-gpuallocator ``gpuallocator/besteffort_policy.go``), used by
the NVIDIA device plugin's GetPreferredAllocation:

* a GPU pair scores by its PCIe path, SYS 10, NODE 20, PHB 30, PXB 40, PIX 50, plus 100 per
  NVLink between them; a set scores the sum over its pairs;
* to allocate ``size`` GPUs it walks every partition of the node's available GPUs into sets of
  ``size`` (padded with empty slots when the count does not divide), keeps the first partition
  with the highest total score, and returns the highest-scoring set of that partition (first on
  ties). Padded sets are never returned (the Go code could in a corner case; its intent is not).

BestEffort has no notion of several nodes: it runs inside one node for one pod. So node choice is
the Kubernetes default's (the ``default`` policy, subclassed here: spread workers over the
least-allocated nodes) and
each worker (one pod of ``gpus_per_worker`` GPUs) gets its GPUs from BestEffort in worker order,
as the device plugin would serve the pods one by one. Workers of one GPU get the first free GPU,
exactly as BestEffort does for ``size == 1``.

``nvidia-smi topo -m`` prints NV# for an NVLinked pair and hides the PCIe path under it; the
score then uses the NUMA nodes when known (different: SYS 10, same: NODE 20), else 0.
Exact for nodes with up to ``EXACT_FREE`` free GPUs; above that the best single set by score
(lowest ids on ties) stands in for the partition walk, which grows factorially.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator, Sequence

from ringleader.scheduler.framework import free_ids, make_candidate, register
from ringleader.scheduler.policies.default import DefaultPolicy
from ringleader.scheduler.types import Candidate, JobRequest, NodeState
from ringleader.topology.node import NodeTopology

PCIE_SCORE = {"SYS": 10, "NODE": 20, "PHB": 30, "PXB": 40, "PIX": 50}
NVLINK_SCORE = 100
EXACT_FREE = 12

_Set = tuple[int | None, ...]


def pair_score(topology: NodeTopology, a: int, b: int) -> int:
    """go-gpuallocator's calculateGPUPairScore for GPUs ``a`` and ``b`` of ``topology``."""
    link = topology.links[a][b]
    if link.kind == "X":
        return 0
    if link.kind != "NV":
        return PCIE_SCORE[link.kind]
    numa = topology.numa
    base = 0
    if numa and numa[a] is not None and numa[b] is not None:
        base = PCIE_SCORE["NODE"] if numa[a] == numa[b] else PCIE_SCORE["SYS"]
    return base + NVLINK_SCORE * link.nvlinks


_SCORES: dict[str, tuple[tuple[int, ...], ...]] = {}


def _pair_scores(topology: NodeTopology) -> tuple[tuple[int, ...], ...]:
    found = _SCORES.get(topology.fingerprint)
    if found is None:
        n = topology.n_gpus
        found = tuple(tuple(pair_score(topology, a, b) for b in range(n)) for a in range(n))
        _SCORES[topology.fingerprint] = found
    return found


def set_score(scores: Sequence[Sequence[int]], gpus: _Set) -> int:
    """calculateGPUSetScore: summed pair scores; padding (None) scores 0."""
    return sum(scores[a][b] for a, b in itertools.combinations(gpus, 2) if a is not None and b is not None)


def _partitions(devices: _Set, size: int, padding: int) -> Iterator[list[_Set]]:
    """iterateGPUPartitions, in the Go code's order: the first set holds devices[0] and
    size-1 of the rest in lexicographic order; a set has no padding or all of it."""
    if size == len(devices):
        yield [devices]
        return
    first, rest = devices[0], devices[1:]
    for combo in itertools.combinations(rest, size - 1):
        chosen = (first, *combo)
        pads = chosen.count(None)
        if pads not in (0, padding):
            continue
        remaining = tuple(d for d in devices if d not in chosen)
        for tail in _partitions(remaining, size, padding):
            yield [chosen, *tail]


def allocate(topology: NodeTopology, free: tuple[int, ...], size: int) -> tuple[int, ...]:
    """BestEffort Allocate(available=free, required=[], size): the chosen GPU ids (sorted)."""
    if size <= 0 or len(free) < size:
        return ()
    if size == 1:
        return (free[0],)
    return _allocate(_pair_scores(topology), free, size)


@functools.lru_cache(maxsize=65536)
def _allocate(scores: tuple[tuple[int, ...], ...], free: tuple[int, ...], size: int) -> tuple[int, ...]:
    if len(free) > EXACT_FREE:
        best = max(itertools.combinations(free, size), key=lambda s: set_score(scores, s))
        return tuple(sorted(best))
    devices: _Set = free + (None,) * (-len(free) % size)
    padding = devices.count(None)
    best_partition: list[_Set] | None = None
    best_total = 0
    for partition in _partitions(devices, size, padding):
        if not any(None not in s for s in partition):
            continue
        total = sum(set_score(scores, s) for s in partition)
        if best_partition is None or total > best_total:
            best_partition, best_total = partition, total
    assert best_partition is not None
    real = [s for s in best_partition if None not in s]
    chosen = real[0]
    for s in real[1:]:
        if set_score(scores, s) > set_score(scores, chosen):
            chosen = s
    return tuple(sorted(g for g in chosen if g is not None))


class BestEffortPolicy(DefaultPolicy):
    name = "besteffort"
    description = (
        "NVIDIA go-gpuallocator BestEffort per pod (pair scores, best partition) on the "
        "Kubernetes default's node spread"
    )
    serves_topology_jobs = False

    def choose(self, nodes: Sequence[NodeState], job: JobRequest) -> list[Candidate]:
        spread = super().choose(nodes, job)
        if not spread:
            return []
        by_name = {ns.name: ns for ns in nodes}
        free = {name: free_ids(by_name[name]) for name in spread[0].placement.nodes}
        slots: list[tuple[str, tuple[int, ...]]] = []
        score = 0
        for slot in spread[0].placement.slots:
            topo = by_name[slot.node].spec.topology
            gpus = allocate(topo, free[slot.node], job.gpus_per_worker)
            free[slot.node] = tuple(g for g in free[slot.node] if g not in gpus)
            score += set_score(_pair_scores(topo), gpus)
            slots.append((slot.node, gpus))
        nodes_spread = float(len({n for n, _ in slots}))
        return [make_candidate(nodes, job, slots, (nodes_spread, float(score)), ("nodes_spread", "besteffort_score"))]


register(BestEffortPolicy())
