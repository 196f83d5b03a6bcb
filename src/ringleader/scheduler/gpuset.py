"""The best-connected GPU set inside one node.

Works on bitmasks over a node's GPUs. Every result depends only on (topology, free mask, size,
whether the job spans nodes), so results are memoised per topology: a cluster of 10,000
identical nodes costs the search of the few distinct free masks it has.

Exact for nodes of up to ``EXACT_LIMIT`` GPUs; bigger nodes (up to MAX_GPUS_PER_NODE) use a
greedy grow-by-best-neighbour search. Every search is iterative (no recursion) and bounded.

A set is ranked by, in order: its slowest link (bottleneck), its summed pair bandwidth, the
NUMA nodes it spans (fewer is better), and, for jobs that span nodes, how many of its GPUs share
a PCIe switch with a NIC (PIX/PXB: GPUDirect RDMA) and how evenly they spread over the NICs
(rail-aligned); then how well the GPUs left free stay connected; then lowest GPU ids.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ringleader.topology.links import Link
from ringleader.topology.node import NodeTopology

EXACT_LIMIT = 16
KEPT_LIMIT = 16384  # entries per topology: a few hundred groups x gang shapes x thresholds
GREEDY_TIES = 2
INF = float("inf")
_NEAR_NIC = (Link("PIX").rank, Link("PXB").rank)


def bits(mask: int) -> tuple[int, ...]:
    return tuple(i for i in range(mask.bit_length()) if mask >> i & 1)


@dataclass(frozen=True)
class GpuSet:
    """A chosen set and its quality: higher ``bottleneck_gbs`` and ``sum_gbs`` are better;
    ``numa_nodes`` counts the NUMA nodes it spans; ``nic_near`` its GPUs beside a NIC and
    ``rail_load`` the most of its GPUs sharing one nearest NIC (both 0 for single-node jobs);
    ``leftover_score`` rates how well the GPUs left free are connected (higher is better)."""

    mask: int
    bottleneck_gbs: float
    sum_gbs: float
    leftover_score: float
    numa_nodes: int = 0
    nic_near: int = 0
    rail_load: int = 0

    @property
    def gpus(self) -> tuple[int, ...]:
        return bits(self.mask)

    def key(self) -> tuple[float, ...]:
        """The ranking inside a node, higher is better (see the module docstring)."""
        return (self.bottleneck_gbs, self.sum_gbs, -self.numa_nodes, self.nic_near, -self.rail_load,
                self.leftover_score, -self.mask)  # fmt: skip


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
        self.numa_group = topology.numa_groups
        self.nearest_nics: tuple[tuple[int, ...], ...]
        self.near_nic: tuple[bool, ...]
        self.nearest_nics, self.near_nic = _nic_affinity(topology)
        self._clique = functools.lru_cache(maxsize=65536)(self._max_clique)
        self._capacity: dict[float, dict[int, int]] = {}
        self._best = functools.lru_cache(maxsize=65536)(self._best_set)
        self._growths: dict[int, list[_Growth]] = {}
        self._at_least = functools.lru_cache(maxsize=65536)(self._best_at_least)
        # What the split search (split.py) derives per free mask, kept across decisions.
        self.kept: dict[object, Any] = {}

    def keep(self, key: object, value: Any) -> None:
        if len(self.kept) >= KEPT_LIMIT:  # bounded like the searches' caches; rebuilt as needed
            self.kept.clear()
        self.kept[key] = value

    # -- cliques: sets whose every pair has at least a given bandwidth ----------------------
    def max_clique(self, mask: int, level: float) -> int:
        """Size of the largest subset of ``mask`` whose every pair is >= level GB/s (exact up
        to EXACT_LIMIT GPUs; beyond, a greedy lower bound so the cost stays polynomial)."""
        return self._clique(mask, level)

    def _max_clique(self, mask: int, level: float) -> int:
        adj = self.adjacency[level]
        if self.n > EXACT_LIMIT:
            return _greedy_clique(mask, adj)
        best = 0
        stack = [(0, mask)]  # (size so far, candidates): branch and bound, no recursion
        while stack:
            size, cand = stack.pop()
            if cand == 0:
                best = max(best, size)
                continue
            if size + cand.bit_count() <= best:
                continue
            v = (cand & -cand).bit_length() - 1
            rest = cand & ~(1 << v)
            stack.append((size, rest))  # without v
            stack.append((size + 1, rest & adj[v]))  # with v (explored first)
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
    def best(self, free_mask: int, k: int, spans_nodes: bool = False) -> GpuSet | None:
        """The best k GPUs out of ``free_mask`` (ranked as the module docstring says); None if
        fewer than k are free. ``spans_nodes``: the job also runs on other nodes, so NIC
        affinity counts."""
        if k < 0 or free_mask.bit_count() < k:
            return None
        return self._best(free_mask, k, spans_nodes and bool(self.topology.nics))

    def _primary(self, chosen: int, spans_nodes: bool) -> GpuSet:
        """A set's quality without its leftover score (the costly part, computed on ties only)."""
        ids = bits(chosen)
        bw = self.bw
        bottleneck = INF
        total = 0.0
        for a, b in itertools.combinations(ids, 2):
            v = bw[a][b]
            total += v
            if v < bottleneck:
                bottleneck = v
        numa = len({self.numa_group[g] for g in ids}) if ids else 0
        near = load = 0
        if spans_nodes:
            near = sum(1 for g in ids if self.near_nic[g])
            load = _rail_load(ids, self.nearest_nics, len(self.topology.nics))
        return GpuSet(chosen, bottleneck, total, 0.0, numa, near, load)

    def _best_set(self, free_mask: int, k: int, spans_nodes: bool) -> GpuSet:
        if k == 0:
            return GpuSet(0, INF, 0.0, self.leftover_score(free_mask))
        candidates = self._greedy(free_mask, k, spans_nodes) if self.n > EXACT_LIMIT and k > 1 else (
            self._primary(chosen, spans_nodes) for chosen in self._exact_candidates(free_mask, k)
        )  # fmt: skip
        return self._top(candidates, free_mask, first=0)

    def best_at_least(self, free_mask: int, k: int, min_gbs: float, spans_nodes: bool = False) -> GpuSet | None:
        """Like ``best``, but among the k-sets whose bottleneck is at least ``min_gbs`` the one
        ranked best by the rest of the ranking (a node's share in a split whose bottleneck and
        in-node phase are already set by other nodes). Exact up to EXACT_LIMIT GPUs; beyond,
        the best set if it qualifies."""
        best = self.best(free_mask, k, spans_nodes)
        if best is None or best.bottleneck_gbs < min_gbs:
            return None
        if k <= 2 or self.n > EXACT_LIMIT:
            return best  # one pair, or the greedy search: nothing else to rank
        return self._at_least(free_mask, k, min_gbs, spans_nodes and bool(self.topology.nics))

    def _best_at_least(self, free_mask: int, k: int, min_gbs: float, spans_nodes: bool) -> GpuSet:
        level = min(lv for lv in self.levels if lv >= min_gbs)  # the loosest level that qualifies
        candidates = (self._primary(c, spans_nodes) for c in _cliques(free_mask, k, self.adjacency[level]))
        return self._top(candidates, free_mask, first=1)

    def _top(self, candidates: Iterator[GpuSet], free_mask: int, first: int) -> GpuSet:
        """The best candidate by ``GpuSet.key()[first:]``; leftover scores only for the ties."""
        top: list[GpuSet] = []
        top_key: tuple[float, ...] = ()
        for scored in candidates:
            key = scored.key()[first:-2]
            if not top or key > top_key:
                top, top_key = [scored], key
            elif key == top_key:
                top.append(scored)
        assert top  # callers make sure a qualifying set exists
        if self.n > EXACT_LIMIT:
            top = top[:GREEDY_TIES]  # big nodes: leftover (itself greedy there) breaks a bounded number of ties
        with_leftover = [
            GpuSet(s.mask, s.bottleneck_gbs, s.sum_gbs, self.leftover_score(free_mask & ~s.mask), s.numa_nodes,
                   s.nic_near, s.rail_load)
            for s in top
        ]  # fmt: skip
        return max(with_leftover, key=lambda s: s.key()[first:])

    def _exact_candidates(self, free_mask: int, k: int) -> Iterator[int]:
        level = self.bottleneck_level(free_mask, k)
        adj = self.adjacency[level] if k > 1 else tuple(free_mask for _ in range(self.n))
        return _cliques(free_mask, k, adj)

    def _greedy(self, free_mask: int, k: int, spans_nodes: bool) -> Iterator[GpuSet]:
        """For nodes beyond EXACT_LIMIT GPUs: the first k GPUs of each greedy growth order (see
        ``_Growth``), scored from the orders' running bottleneck and sum."""
        seen: set[int] = set()
        growths = self._growths.get(free_mask)
        if growths is None:
            if len(self._growths) > 4096:
                self._growths.clear()
            growths = self._growths[free_mask] = [
                _Growth(self, start, bits(free_mask)) for start in self._greedy_starts(bits(free_mask))
            ]
        for growth in growths:
            growth.extend(k)
            ids = growth.order[:k]
            chosen = growth.mask_after[k - 1]
            if chosen in seen:
                continue
            seen.add(chosen)
            numa = len({self.numa_group[g] for g in ids})
            near = load = 0
            if spans_nodes:
                near = sum(1 for g in ids if self.near_nic[g])
                load = _rail_load(tuple(sorted(ids)), self.nearest_nics, len(self.topology.nics))
            yield GpuSet(chosen, growth.weakest_after[k - 1], growth.summed_after[k - 1], 0.0, numa, near, load)

    def _next_gpu(self, weakest: dict[int, float], summed: dict[int, float], home: int) -> int:
        top = max(weakest.values())
        ties = [g for g, v in weakest.items() if v == top]
        if len(ties) > 1:
            most = max(summed[g] for g in ties)
            ties = [g for g in ties if summed[g] == most]
        if len(ties) > 1:
            ties = [g for g in ties if self.numa_group[g] == home] or ties
        return min(ties)

    def _greedy_starts(self, free: tuple[int, ...], per_numa: int = 2, best_connected: int = 2) -> list[int]:
        """Where the greedy search starts: the first free GPUs of each NUMA node and the GPUs
        best connected to the other free ones (a bounded number, whatever the node's size)."""
        firsts: dict[int, list[int]] = {}
        for g in free:
            firsts.setdefault(self.numa_group[g], [])
            if len(firsts[self.numa_group[g]]) < per_numa:
                firsts[self.numa_group[g]].append(g)
        free_mask = sum(1 << g for g in free)
        top = self.adjacency[self.levels[0]] if self.levels else (0,) * self.n
        connected = sorted(free, key=lambda g: (-(free_mask & top[g]).bit_count(), g))[:best_connected]
        return sorted({*connected, *(g for gs in firsts.values() for g in gs)})

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


class _Growth:
    """From one start GPU, the free GPUs in the order a greedy growth adds them (the GPU whose
    weakest link to the set is strongest; ties: larger summed bandwidth, same NUMA node as the
    start, lower id), with the set's bottleneck and summed bandwidth after each step. The first
    k of the order is the greedy k-set, so one growth, extended on demand, serves every k: O(n)
    per step with running min/sum maps, never exponential."""

    def __init__(self, search: NodeSearch, start: int, free: tuple[int, ...]) -> None:
        self.search = search
        self.order, self.weakest_after, self.summed_after, self.mask_after = [start], [INF], [0.0], [1 << start]
        self.weakest = {g: search.bw[g][start] for g in free if g != start}
        self.summed = dict(self.weakest)
        self.home = search.numa_group[start]

    def extend(self, length: int) -> None:
        bw = self.search.bw
        weakest, summed = self.weakest, self.summed
        while weakest and len(self.order) < length:
            nxt = self.search._next_gpu(weakest, summed, self.home)
            self.order.append(nxt)
            self.weakest_after.append(min(self.weakest_after[-1], weakest[nxt]))
            self.summed_after.append(self.summed_after[-1] + summed[nxt])
            self.mask_after.append(self.mask_after[-1] | 1 << nxt)
            del weakest[nxt], summed[nxt]
            for g in weakest:
                v = bw[g][nxt]
                summed[g] += v
                if v < weakest[g]:
                    weakest[g] = v


def _cliques(free_mask: int, k: int, adj: tuple[int, ...]) -> Iterator[int]:
    """Every k-subset of ``free_mask`` whose pairs are all adjacent (iterative depth-first)."""
    stack = [(0, free_mask, k)]
    while stack:
        chosen, cand, need = stack.pop()
        if need == 0:
            yield chosen
            continue
        # Push in reverse so lower GPU ids are explored first.
        pushes = []
        while cand and cand.bit_count() >= need:
            v = (cand & -cand).bit_length() - 1
            cand &= ~(1 << v)
            pushes.append((chosen | 1 << v, cand & adj[v], need - 1))
        stack.extend(reversed(pushes))


def _greedy_clique(mask: int, adj: tuple[int, ...]) -> int:
    """A large clique: GPUs taken most-connected first when joined to all taken so far (a lower
    bound of the maximum, O(n) bit operations)."""
    chosen = size = 0
    for g in sorted(bits(mask), key=lambda g: -(mask & adj[g]).bit_count()):
        if chosen & ~adj[g] == 0:
            chosen |= 1 << g
            size += 1
    return size


def _nic_affinity(topology: NodeTopology) -> tuple[tuple[tuple[int, ...], ...], tuple[bool, ...]]:
    """Per GPU: the NICs it is closest to, and whether one of them shares its PCIe switch."""
    nearest: list[tuple[int, ...]] = []
    near: list[bool] = []
    for row in topology.nic_links:
        if not row:
            nearest.append(())
            near.append(False)
            continue
        best = max(link.rank for link in row)
        nearest.append(tuple(k for k, link in enumerate(row) if link.rank == best))
        near.append(best in _NEAR_NIC)
    if not topology.nic_links:
        nearest = [()] * topology.n_gpus
        near = [False] * topology.n_gpus
    return tuple(nearest), tuple(near)


def _rail_load(ids: tuple[int, ...], nearest: tuple[tuple[int, ...], ...], n_nics: int) -> int:
    """The most GPUs of a set that share one NIC when each takes its least-loaded nearest NIC
    (NCCL gives each GPU its closest NIC; an even spread keeps every rail busy)."""
    load = [0] * n_nics
    for g in ids:
        if nearest[g]:
            nic = min(nearest[g], key=lambda k: load[k])
            load[nic] += 1
    return max(load, default=0)


_SEARCHES: dict[str, NodeSearch] = {}


def search_for(topology: NodeTopology) -> NodeSearch:
    """The memoised search of a topology. The cache is keyed by the topology's content, so it
    cannot leak between different topologies and is safe to share (results are pure)."""
    found = _SEARCHES.get(topology.fingerprint)
    if found is None:
        found = _SEARCHES[topology.fingerprint] = NodeSearch(topology)
    return found
