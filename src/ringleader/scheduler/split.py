"""How a gang splits across nodes, chosen by the objective used inside a node.

A gang that needs m > 1 nodes runs a hierarchical allreduce: each node's share reduces over its
own links, the shares exchange over the inter-node link (the network, or the NVLink fabric of a
multi-node NVLink domain), then each node broadcasts. The split is therefore ranked by:

  1. ``bottleneck``: the slowest link anywhere (each share's slowest pair, the inter-node link);
  2. ``node_phase``: the longest in-node phase, (k-1)/k of the buffer over the share's
     bottleneck for a share of k GPUs, in s per GB (lower is better): a smaller share on a
     PCIe-bound node finishes sooner, so 3+2 beats 4+1 on two 4-GPU PCIe nodes;
  3. the sum over shares of the in-node ranking (summed pair bandwidth, NUMA nodes spanned, GPUs
     beside a NIC, rail load, GPUs left free, leftover connectivity), as ``gpuset`` ranks sets.

The search is exact: thresholds for 1 and 2 are found by feasibility scans over the few
distinct values; each node's share is then the set ranked best by 3 among those meeting both
thresholds (once another node sets the split's bottleneck, a share need not have its node's best
one: a pair of NV2 links plus a SYS hop can beat an NV1 triangle); then a small dynamic
programme over (nodes used, workers placed) picks the shares. Only the best ``m`` nodes for each
share size can be in an optimal split (any other is swapped for an unused one of them without
loss), so the programme sees a bounded candidate set; past ``DP_BUDGET`` steps (gangs over many
big nodes) it falls back to filling the best nodes fullest first.

What the search derives per node group (its shares, the shares loosened to a split's
thresholds, their additive values) depends only on the group's topology and free mask, the
link and the gang's shape, so it is kept on the topology's ``NodeSearch`` across decisions: a
scheduler's cluster changes a few groups per commit, and a fragmented cluster has a few hundred
groups to rank.
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from ringleader.scheduler.gpuset import INF, GpuSet, NodeSearch
from ringleader.scheduler.types import NodeGroup

DP_BUDGET = 20_000


def node_phase(gset: GpuSet) -> float:
    """Seconds per GB of the in-node phase of a hierarchical allreduce over this set."""
    k = gset.mask.bit_count()
    if k <= 1:
        return 0.0
    return (k - 1) / (k * gset.bottleneck_gbs)


def additive(gset: GpuSet, free_after: int) -> tuple[float, ...]:
    """The parts of a share's ranking that add up over the shares of a split."""
    return (gset.sum_gbs, -float(gset.numa_nodes), float(gset.nic_near), -float(gset.rail_load),
            -float(free_after), gset.leftover_score)  # fmt: skip


@dataclass(frozen=True)
class Pool:
    """Interchangeable nodes (one group): ``available`` of them may be used; ``link_gbs`` is
    their link to the other nodes of a split; ``spans_nodes`` whether NIC affinity counts."""

    group: NodeGroup
    search: NodeSearch
    link_gbs: float
    available: int
    spans_nodes: bool = True

    def capacity(self, per_worker: int) -> int:
        return self.group.free_mask.bit_count() // per_worker if per_worker else 0

    def share(self, workers: int, per_worker: int) -> GpuSet:
        found = self.search.best(self.group.free_mask, workers * per_worker, self.spans_nodes)
        assert found is not None
        return found


@dataclass(frozen=True)
class Split:
    """Workers per pool (pool index, workers on one node; a pool may appear several times)."""

    shares: tuple[tuple[int, int, GpuSet], ...]
    bottleneck_gbs: float
    node_phase: float


def fewest_nodes(pools: Sequence[Pool], workers: int, per_worker: int) -> int | None:
    """Nodes a gang needs at least (most capacity first); None if it does not fit."""
    caps = sorted(((p.capacity(per_worker), p.available) for p in pools), reverse=True)
    nodes, remaining = 0, workers
    for cap, count in caps:
        if cap <= 0:
            break
        take = min(count, -(-remaining // cap))
        nodes += take
        remaining -= take * cap
        if remaining <= 0:
            return nodes
    return None


Row = dict[int, tuple[GpuSet, float, float]]  # workers on a node -> (share, its bottleneck, its phase)


def best_split(pools: Sequence[Pool], workers: int, per_worker: int, nodes: int, one_island: bool = False) -> Split:
    """The best split of ``workers`` over exactly ``nodes`` nodes of ``pools`` (which must fit:
    see ``fewest_nodes``). ``one_island``: the nodes share one NVLink fabric, so the in-node
    phase is not a separate step (the gang is one ring at the bottleneck)."""
    cap_all = max(p.capacity(per_worker) for p in pools)
    w_lo = max(1, workers - (nodes - 1) * cap_all)
    w_hi = workers - (nodes - 1)
    keys = [RowKey(p.group.free_mask, per_worker, p.link_gbs, one_island, p.spans_nodes, w_lo, w_hi) for p in pools]
    table = [_row(p, key) for p, key in zip(pools, keys, strict=True)]
    # Per pool, its shares largest first as (workers, bottleneck, phase), and how many such nodes.
    largest_first = [(_descending(p, key), p.available) for p, key in zip(pools, keys, strict=True)]

    def feasible(level: float, phase: float) -> bool:
        """Can `nodes` nodes take every worker with shares meeting both thresholds? (Each pool's
        largest such share: shares only get slower as they grow.)"""
        nodes_with_cap = [0] * (w_hi + 1)  # nodes whose largest share meeting both has w workers
        for shares, available in largest_first:
            for w, b, ph in shares:
                if b >= level and ph <= phase:
                    nodes_with_cap[w] += available
                    break
        used = total = 0
        for cap in range(w_hi, 0, -1):  # the largest caps first
            if nodes_with_cap[cap]:
                take = min(nodes_with_cap[cap], nodes - used)
                used, total = used + take, total + take * cap
                if used == nodes:
                    break
        return used == nodes and total >= workers

    def allowed(level: float, phase: float) -> list[list[int]]:
        return [[w for w, (_, b, ph) in row.items() if b >= level and ph <= phase] for row in table]

    levels = sorted({b for row in table for _, b, _ in row.values()}, reverse=True)
    for level in levels[_first(levels, lambda lv: feasible(lv, INF)) :]:
        phases = sorted({ph for row in table for _, b, ph in row.values() if b >= level})
        for phase in phases[_first(phases, functools.partial(feasible, level)) :]:
            ok = allowed(level, phase)
            loose, values = _loosened(pools, keys, table, ok, level, phase, per_worker)
            shares = _choose(pools, loose, values, ok, workers, per_worker, nodes)
            if shares is not None:  # None: the caps fit but no exact sum (a non-monotone greedy share)
                return Split(tuple(shares), level, phase)
    raise AssertionError("best_split called on a gang that does not fit")


def _first(values: list[float], ok: Callable[[float], bool]) -> int:
    """Index of the first value that is ``ok`` when ok is monotone (False...False True...True)."""
    lo, hi = 0, len(values)
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(values[mid]):
            hi = mid
        else:
            lo = mid + 1
    return lo


class RowKey(NamedTuple):
    """All that a pool's row depends on (its topology is the search the row is kept on)."""

    free_mask: int
    per_worker: int
    link_gbs: float
    one_island: bool
    spans_nodes: bool
    w_lo: int
    w_hi: int


def _row(pool: Pool, key: RowKey) -> Row:
    """A pool's shares of w_lo..w_hi workers, each with its bottleneck and in-node phase. It
    depends only on ``key``, so it is kept on the topology's search and shared by every decision:
    a cluster's groups change a few at a time. Rows are never changed once made."""
    row = pool.search.kept.get(("row", key))
    if row is None:
        row = {}
        for w in range(key.w_lo, min(pool.capacity(key.per_worker), key.w_hi) + 1):
            gset = pool.share(w, key.per_worker)
            row[w] = (gset, min(gset.bottleneck_gbs, key.link_gbs), 0.0 if key.one_island else node_phase(gset))
        pool.search.keep(("row", key), row)
    return row


def _descending(pool: Pool, key: RowKey) -> tuple[tuple[int, float, float], ...]:
    """The pool's row (kept) as (workers, bottleneck, phase), largest share first."""
    found = pool.search.kept.get(("desc", key))
    if found is None:
        found = tuple((w, b, ph) for w, (_, b, ph) in reversed(_row(pool, key).items()))
        pool.search.keep(("desc", key), found)
    return found


def _loosened(
    pools: Sequence[Pool], keys: list[RowKey], table: list[Row], ok: list[list[int]],
    level: float, phase: float, per_worker: int,
) -> tuple[list[Row], list[dict[int, tuple[float, ...]]]]:  # fmt: skip
    """Each allowed share re-chosen as the best set that still meets the split's bottleneck and
    phase (its own best bottleneck no longer counts once another node sets the split's); and,
    per pool, a dict that ``_choose`` fills with the shares' additive values. Both are kept
    like the rows (they depend on the row and the two thresholds only)."""
    rows: list[Row] = []
    values: list[dict[int, tuple[float, ...]]] = []
    for pool, key, row, ws in zip(pools, keys, table, ok, strict=True):
        kept = pool.search.kept.get(("loose", key, level, phase))
        if kept is None:
            new = dict(row)
            for w in ws:
                k = w * per_worker
                # The bandwidth that keeps this share's phase within the split's (less a rounding hair).
                need = max(level, (k - 1) / (k * phase) * (1 - 1e-9) if phase > 0 and k > 1 else 0.0)
                found = pool.search.best_at_least(pool.group.free_mask, k, need, pool.spans_nodes)
                if found is not None:
                    new[w] = (found, row[w][1], row[w][2])
            kept = (new, {})
            pool.search.keep(("loose", key, level, phase), kept)
        rows.append(kept[0])
        values.append(kept[1])
    return rows, values


def _choose(
    pools: Sequence[Pool], table: list[Row], values: list[dict[int, tuple[float, ...]]], ok: list[list[int]],
    workers: int, per_worker: int, nodes: int,
) -> list[tuple[int, int, GpuSet]] | None:  # fmt: skip
    def value(i: int, w: int) -> tuple[float, ...]:
        found = values[i].get(w)
        if found is None:
            gset = table[i][w][0]
            found = values[i][w] = additive(gset, pools[i].group.free_mask.bit_count() - w * per_worker)
        return found

    # Candidates: for each share size, the best `nodes` nodes (pool order breaks ties).
    chosen: dict[int, int] = {}
    for w in sorted({w for ws in ok for w in ws}):
        able = (i for i, ws in enumerate(ok) if w in ws)
        ranked = heapq.nlargest(nodes, able, key=lambda i: (value(i, w), -i))
        left = nodes
        for i in ranked:
            take = min(left, pools[i].available)
            chosen[i] = max(chosen.get(i, 0), take)
            left -= take
            if left == 0:
                break
    candidates = [i for i in sorted(chosen) for _ in range(chosen[i])]
    steps = len(candidates) * nodes * workers * max((len(ws) for ws in ok), default=1)
    if steps > DP_BUDGET:
        return _fill(pools, table, ok, workers, nodes)
    # dp[(nodes used, workers placed)] = (summed value, shares), candidates in pool order.
    dp: dict[tuple[int, int], tuple[tuple[float, ...], tuple[tuple[int, int], ...]]] = {(0, 0): ((0.0,) * 6, ())}
    for i in candidates:
        for (j, c), (v, picks) in sorted(dp.items(), reverse=True):
            if j == nodes:
                continue
            for w in ok[i]:
                if c + w > workers - (nodes - j - 1):
                    break
                nv = tuple(a + b for a, b in zip(v, value(i, w), strict=True))
                key = (j + 1, c + w)
                if key not in dp or nv > dp[key][0]:
                    dp[key] = (nv, (*picks, (i, w)))
    if (nodes, workers) not in dp:
        return None
    _, picks = dp[(nodes, workers)]
    return [(i, w, table[i][w][0]) for i, w in picks]


def _fill(
    pools: Sequence[Pool], table: list[Row], ok: list[list[int]],
    workers: int, nodes: int,
) -> list[tuple[int, int, GpuSet]] | None:  # fmt: skip
    """Beyond the budget: the largest allowed shares first, keeping one worker per node left."""
    order = sorted(range(len(pools)), key=lambda i: (max(ok[i], default=0), -i), reverse=True)
    out: list[tuple[int, int, GpuSet]] = []
    remaining = workers
    for i in order:
        for _ in range(pools[i].available):
            left_nodes = nodes - len(out) - 1
            fits = [w for w in ok[i] if w <= remaining - left_nodes]
            if not fits or len(out) == nodes:
                break
            w = max(fits)
            out.append((i, w, table[i][w][0]))
            remaining -= w
    return out if remaining == 0 and len(out) == nodes else None
