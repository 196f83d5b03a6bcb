"""Exact search for the best-connected GPU set inside one node.

Works on bitmasks over a node's GPUs. Every result depends only on (topology, free mask, size), so
results are memoised per topology: a cluster of 10,000 identical nodes costs the search of the few
distinct free masks it has. Exact for nodes of up to ``EXACT_LIMIT`` GPUs; bigger nodes use a
greedy grow-by-best-neighbour search (bounded, never an enumeration of all subsets).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator
from dataclasses import dataclass

from ringleader.topology.node import NodeTopology

EXACT_LIMIT = 16
INF = float("inf")


def bits(mask: int) -> tuple[int, ...]:
    return tuple(i for i in range(mask.bit_length()) if mask >> i & 1)


@dataclass(frozen=True)
class GpuSet:
    """A chosen set and its quality: higher ``bottleneck_gbs`` and ``sum_gbs`` are better;
    ``leftover_score`` rates how well the GPUs left free are connected (higher is better)."""

    mask: int
    bottleneck_gbs: float
    sum_gbs: float
    leftover_score: float

    @property
    def gpus(self) -> tuple[int, ...]:
        return bits(self.mask)


class NodeSearch:
    """Memoised searches over one topology (one instance per distinct fingerprint)."""

    def __init__(self, topology: NodeTopology) -> None:
        self.topology = topology
        n = topology.n_gpus
        self.n = n
        bw = topology.bandwidth_gbs
        self.bw = bw
        # Distinct pair bandwidths, best first: the only thresholds a bottleneck can take.
        self.levels: tuple[float, ...] = tuple(
            sorted({bw[i][j] for i in range(n) for j in range(n) if i != j}, reverse=True)
        )
        # adjacency[level][i]: GPUs joined to i by a link of at least that bandwidth.
        self.adjacency: dict[float, tuple[int, ...]] = {
            level: tuple(
                sum(1 << j for j in range(n) if j != i and bw[i][j] >= level) for i in range(n)
            )
            for level in self.levels
        }
        self._clique = functools.lru_cache(maxsize=65536)(self._max_clique)
        self._capacity: dict[float, dict[int, int]] = {}
        self._best = functools.lru_cache(maxsize=65536)(self._best_set)

    # -- cliques: sets whose every pair has at least a given bandwidth ----------------------
    def max_clique(self, mask: int, level: float) -> int:
        """Size of the largest subset of ``mask`` whose every pair is >= level GB/s."""
        return self._clique(mask, level)

    def _max_clique(self, mask: int, level: float) -> int:
        adj = self.adjacency[level]
        best = 0

        def grow(size: int, cand: int) -> None:
            nonlocal best
            if cand == 0:
                best = max(best, size)
                return
            while cand:
                if size + cand.bit_count() <= best:
                    return
                v = (cand & -cand).bit_length() - 1
                cand &= ~(1 << v)
                grow(size + 1, cand & adj[v])

        grow(0, mask)
        return best

    def capacity(self, mask: int, level: float) -> int:
        """How many GPUs of ``mask`` can be taken with a bottleneck of at least ``level``
        (any level, also one this topology does not have)."""
        table = self.capacity_table(level)
        found = table.get(mask)
        if found is None:
            found = table[mask] = self._compute_capacity(mask, level)
        return found

    def capacity_table(self, level: float) -> dict[int, int]:
        """The memo of ``capacity`` at one level (mask -> GPUs); callers that scan many groups
        read it directly and fill misses with ``capacity``."""
        table = self._capacity.get(level)
        if table is None:
            table = self._capacity[level] = {}
        return table

    def _compute_capacity(self, mask: int, level: float) -> int:
        own = [lv for lv in self.levels if lv >= level]
        if mask.bit_count() <= 1:
            return mask.bit_count()
        if not own:
            return 1  # no pair is that fast: one GPU alone has no bottleneck
        return self.max_clique(mask, own[-1])

    def bottleneck_level(self, mask: int, k: int) -> float:
        """Best achievable bottleneck for k GPUs out of ``mask`` (INF for k <= 1)."""
        if k <= 1:
            return INF
        for level in self.levels:
            if self.max_clique(mask, level) >= k:
                return level
        return 0.0

    def leftover_score(self, mask: int) -> float:
        """How useful the free GPUs ``mask`` stay for the next job: the largest well-connected
        group at each bandwidth level, summed (a whole NVLinked quad beats two stray GPUs)."""
        if mask == 0:
            return 0.0
        return float(sum(self.max_clique(mask, level) for level in self.levels))

    # -- the best k-set ---------------------------------------------------------------------
    def best(self, free_mask: int, k: int) -> GpuSet | None:
        """The best k GPUs out of ``free_mask``: max bottleneck, then max summed pair bandwidth,
        then the best-connected leftover, then lowest ids. None if fewer than k are free."""
        if k < 0 or free_mask.bit_count() < k:
            return None
        return self._best(free_mask, k)

    def _score(self, chosen: int, free_mask: int) -> GpuSet:
        ids = bits(chosen)
        bw = self.bw
        bottleneck = INF
        total = 0.0
        for a, b in itertools.combinations(ids, 2):
            v = bw[a][b]
            total += v
            bottleneck = min(bottleneck, v)
        return GpuSet(chosen, bottleneck, total, self.leftover_score(free_mask & ~chosen))

    @staticmethod
    def _key(s: GpuSet) -> tuple[float, float, float, int]:
        return (s.bottleneck_gbs, s.sum_gbs, s.leftover_score, -s.mask)

    def _best_set(self, free_mask: int, k: int) -> GpuSet:
        if k == 0:
            return GpuSet(0, INF, 0.0, self.leftover_score(free_mask))
        if self.n > EXACT_LIMIT:
            return self._greedy(free_mask, k)
        level = self.bottleneck_level(free_mask, k)
        adj = self.adjacency[level] if k > 1 else tuple(free_mask for _ in range(self.n))
        best: GpuSet | None = None
        for chosen in self._cliques(free_mask, k, adj):
            scored = self._score(chosen, free_mask)
            if best is None or self._key(scored) > self._key(best):
                best = scored
        assert best is not None  # bottleneck_level guarantees a clique of size k exists
        return best

    @staticmethod
    def _cliques(free_mask: int, k: int, adj: tuple[int, ...]) -> Iterator[int]:
        """Every k-subset of ``free_mask`` whose pairs are all adjacent."""

        def walk(chosen: int, cand: int, need: int) -> Iterator[int]:
            if need == 0:
                yield chosen
                return
            while cand and cand.bit_count() >= need:
                v = (cand & -cand).bit_length() - 1
                cand &= ~(1 << v)
                yield from walk(chosen | 1 << v, cand & adj[v], need - 1)

        yield from walk(0, free_mask, k)

    def _greedy(self, free_mask: int, k: int) -> GpuSet:
        """For nodes beyond EXACT_LIMIT GPUs: from each start GPU, grow by the GPU whose weakest
        link to the set is strongest (ties: larger summed bandwidth). O(n^3), never exponential."""
        best: GpuSet | None = None
        bw = self.bw
        free = bits(free_mask)
        for start in free:
            chosen = [start]
            while len(chosen) < k:
                rest = [g for g in free if g not in chosen]
                nxt = max(rest, key=lambda g: (min(bw[g][c] for c in chosen), sum(bw[g][c] for c in chosen), -g))
                chosen.append(nxt)
            scored = self._score(sum(1 << g for g in chosen), free_mask)
            if best is None or self._key(scored) > self._key(best):
                best = scored
        assert best is not None
        return best

    def split(self, mask: int, per_worker: int) -> tuple[tuple[int, ...], ...]:
        """Split a chosen set into workers of ``per_worker`` GPUs, each best connected inside."""
        if per_worker <= 1:
            return tuple((g,) for g in bits(mask))
        groups = []
        remaining = mask
        while remaining:
            part = self.best(remaining, per_worker)
            assert part is not None
            groups.append(part.gpus)
            remaining &= ~part.mask
        return tuple(groups)


_SEARCHES: dict[str, NodeSearch] = {}


def search_for(topology: NodeTopology) -> NodeSearch:
    """The memoised search of a topology. The cache is keyed by the topology's content, so it
    cannot leak between different topologies and is safe to share (results are pure)."""
    found = _SEARCHES.get(topology.fingerprint)
    if found is None:
        found = _SEARCHES[topology.fingerprint] = NodeSearch(topology)
    return found
