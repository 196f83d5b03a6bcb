"""Placement over the network tree (ringleader.topology.network): which switch a gang goes under.

A gang that cannot fit one node goes under the lowest common switch that can hold it: the
levels are tried nearest the nodes first, and at the first level where some switch holds the
gang, the switches are ranked by the fewest nodes the gang needs under them, then by the fewest
GPUs they keep free once it is placed (best fit: whole racks and blocks stay free for the next
big gang, as Volcano's hypernode bin-packing keeps them). Inside that switch the in-node
objective of the policy decides as it does on a cluster without a tree.

A job's ``topology_required`` level is the highest it may span (it waits rather than spread);
``topology_preferred`` only changes the explanation when it cannot be met. What is counted
per switch is kept on the snapshot (scheduler/switches.py) and updated by each commit.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from ringleader.scheduler.switches import SwitchIndex
from ringleader.scheduler.types import JobRequest, NodeGroup, NodeState
from ringleader.topology.network import Level

ABOVE_TOP = "(no common switch)"


def tree_levels(groups: Sequence[NodeGroup]) -> tuple[Level, ...]:
    """The levels of the cluster's tree, () when its nodes have none."""
    index = switch_index(groups)
    return index.levels if index is not None else ()


def switch_index(groups: Sequence[NodeGroup]) -> SwitchIndex | None:
    state = groups[0].state if groups else None
    return state.switch_index if state is not None else None


@dataclass(frozen=True)
class SwitchFit:
    """A switch at ``level`` (len(levels): the whole cluster) whose groups can hold a gang."""

    level: int
    switch: str
    groups: tuple[NodeGroup, ...]
    nodes: int  # the fewest nodes the gang needs under it
    free_after: int  # GPUs still free under it, on nodes that could serve the gang, once it is placed


def fewest_nodes(groups: Sequence[NodeGroup], workers: int, per_worker: int) -> int | None:
    """Nodes a gang needs at least among ``groups`` (most capacity first); None if it does not fit."""
    counts: dict[int, int] = {}
    for g in groups:
        free = g.free_mask.bit_count()
        counts[free] = counts.get(free, 0) + g.size
    return _fewest(counts, workers, per_worker)


def _fewest(counts: Mapping[int, int], workers: int, per_worker: int) -> int | None:
    nodes, remaining = 0, workers
    for free in sorted(counts, reverse=True):
        cap = free // per_worker
        if cap <= 0:
            break
        take = min(counts[free], -(-remaining // cap))
        nodes += take
        remaining -= take * cap
        if remaining <= 0:
            return nodes
    return None


def _usable_free(counts: Mapping[int, int], per_worker: int) -> int:
    return sum(free * n for free, n in counts.items() if free >= per_worker)


def lowest_fits(groups: Sequence[NodeGroup], job: JobRequest, highest: int) -> list[SwitchFit]:
    """The switches of the lowest level (at most ``highest``; the number of levels means the
    whole cluster) where the gang fits on two or more of ``groups``' nodes, the best two first
    (fewest nodes, then fewest GPUs left free under the switch, then cluster order).

    The switches are ranked from the index's free-GPU counts when the filter kept every node
    that has a worker's GPUs free (then the counts are exactly the eligible nodes'); otherwise
    from the eligible groups under each switch."""
    index = switch_index(groups)
    if index is None or not index.levels:
        return []
    levels, per_worker = len(index.levels), job.gpus_per_worker
    eligible = {g.key for g in groups}
    capable = sum(_usable_count(c, per_worker) for c in index.counts[-1].values())
    exact = capable == sum(g.size for g in groups)
    for level in range(0, min(highest, levels) + 1):
        if level == levels:
            need = fewest_nodes(groups, job.workers, per_worker)
            if need is None or need < 2:
                return []
            free = sum(g.free_mask.bit_count() * g.size for g in groups)
            return [SwitchFit(level, ABOVE_TOP, tuple(groups), need, free - job.total_gpus)]
        needs = []
        for switch, counts in index.counts[level].items():
            if not exact:
                counts = _counts(under(groups, level, switch, eligible))
            need = _fewest(counts, job.workers, per_worker)
            if need is not None and need >= 2:
                needs.append((need, switch, counts))
        if needs:
            fewest = min(n for n, _, _ in needs)  # the free GPUs only matter among those
            fits = [(n, _usable_free(c, per_worker) - job.total_gpus, sw) for n, sw, c in needs if n == fewest]
            fits.sort(key=lambda f: (f[0], f[1]))  # stable: cluster order breaks ties
            return [SwitchFit(level, sw, under(groups, level, sw, eligible), need, free) for need, free, sw in fits[:2]]
    return []


def _usable_count(counts: Mapping[int, int], per_worker: int) -> int:
    return sum(n for free, n in counts.items() if free >= per_worker)


def _counts(groups: Sequence[NodeGroup]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for g in groups:
        counts[g.free_mask.bit_count()] = counts.get(g.free_mask.bit_count(), 0) + g.size
    return counts


def under(
    groups: Sequence[NodeGroup], level: int, switch: str, eligible: AbstractSet[Hashable] | None = None
) -> tuple[NodeGroup, ...]:
    """The eligible groups' nodes under ``switch``, as groups (in cluster order)."""
    index = switch_index(groups)
    assert index is not None
    state = groups[0].state
    keys = eligible if eligible is not None else {g.key for g in groups}
    found = [NodeGroup(key, positions, groups[0].all_nodes, state)  # type: ignore[arg-type]
             for key, positions in index.members[level].get(switch, {}).items() if key in keys]  # fmt: skip
    return tuple(sorted(found, key=lambda g: g.positions[0]))


def level_index(levels: Sequence[Level], name: str | None) -> int | None:
    """The index of level ``name`` (None: no such level, or no name)."""
    names = [lv.name for lv in levels]
    return names.index(name) if name in names else None


def most_free_under(groups: Sequence[NodeGroup], job: JobRequest, level: int) -> tuple[int, str]:
    """The most worker slots free under any switch of ``level``, and that switch."""
    index = switch_index(groups)
    best = (0, "")
    if index is None or not index.levels:
        return best
    eligible = {g.key for g in groups}
    for switch in index.members[level]:
        members = under(groups, level, switch, eligible)
        slots = sum((g.free_mask.bit_count() // job.gpus_per_worker) * g.size for g in members) \
            if job.gpus_per_worker else job.workers  # fmt: skip
        if slots > best[0]:
            best = (slots, switch)
    return best


def fullest_switch_first(group: NodeGroup) -> Iterator[NodeState]:
    """The group's nodes (interchangeable inside a node), those under the leaf with the fewest
    free GPUs first, then by the fewest free under its parent, and so on: a one-node gang
    fills a partly used rack and leaves whole ones whole."""
    index = switch_index([group])
    if index is None or not index.levels:
        yield from group.members()
        return
    leaves = index.members[0]
    nodes = group.all_nodes
    here = [(sw, m[group.key]) for sw, m in leaves.items() if group.key in m]

    def fill(item: tuple[str, tuple[int, ...]]) -> tuple[int, ...]:
        path = nodes[item[1][0]].spec.switches
        return tuple(sum(f * n for f, n in index.counts[k][path[k]].items()) for k in range(len(path)))

    for _, positions in sorted(here, key=fill):  # stable: cluster order among equals
        for pos in positions:
            yield nodes[pos]
