"""Which nodes sit under each switch of the network tree, kept per cluster snapshot.

Per level and switch: how many of its nodes have each number of free GPUs (enough to rank the
switches for a gang without looking at a node), and its nodes as groups of interchangeable
nodes (the placement search's unit). Built once, then updated for the nodes a commit changes,
as ``ClusterState`` keeps its group index: a 10,000-node cluster has a few hundred racks and
a commit touches one.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from ringleader.topology.cluster import NodeSpec
from ringleader.topology.network import Level

K = TypeVar("K", bound=Hashable)



class NodeState(Protocol):
    """What the index reads of a node (``scheduler.types.NodeState``, which holds this index:
    named by its shape here, so the two modules do not import each other)."""

    @property
    def spec(self) -> NodeSpec: ...

    @property
    def name(self) -> str: ...

    @property
    def n_free(self) -> int: ...


N = TypeVar("N", bound=NodeState)

Counts = Mapping[int, int]  # free GPUs -> nodes with that many
Members = Mapping[Hashable, tuple[int, ...]]  # group key -> positions, sorted


@dataclass(frozen=True)
class SwitchIndex:
    levels: tuple[Level, ...]
    counts: tuple[Mapping[str, Counts], ...]  # per level: switch -> its nodes by free GPUs
    members: tuple[Mapping[str, Members], ...]  # per level: switch -> its nodes by group key

    @staticmethod
    def build(nodes: Sequence[N], key_of: Callable[[N], Hashable]) -> SwitchIndex:
        """The index of ``nodes``; without levels when none of them has a place in a network
        tree (kept all the same, so that a commit does not look for a tree again)."""
        levels = next((ns.spec.network.levels for ns in nodes if ns.spec.network is not None), ())
        counts: list[dict[str, dict[int, int]]] = [{} for _ in levels]
        members: list[dict[str, dict[Hashable, list[int]]]] = [{} for _ in levels]
        for pos, ns in enumerate(nodes):
            key, free = key_of(ns), ns.n_free
            for k, switch in enumerate(_path(ns, len(levels))):
                by_free = counts[k].setdefault(switch, {})
                by_free[free] = by_free.get(free, 0) + 1
                members[k].setdefault(switch, {}).setdefault(key, []).append(pos)
        return SwitchIndex(
            levels, tuple(counts),
            tuple({s: {key: tuple(p) for key, p in m.items()} for s, m in level.items()} for level in members),
        )  # fmt: skip

    def updated(
        self, changes: Iterable[tuple[int, N, N]], key_of: Callable[[N], Hashable]
    ) -> SwitchIndex:
        """The index after each (position, old, new) node change (copies only what changes)."""
        if not self.levels:
            return self
        counts = [dict(level) for level in self.counts]
        members = [dict(level) for level in self.members]
        for pos, old, new in changes:
            old_key, new_key = key_of(old), key_of(new)
            for k, switch in enumerate(_path(new, len(self.levels))):
                by_free = dict(counts[k][switch])
                by_free[old.n_free] -= 1
                if not by_free[old.n_free]:
                    del by_free[old.n_free]
                by_free[new.n_free] = by_free.get(new.n_free, 0) + 1
                counts[k][switch] = by_free
                if old_key != new_key:
                    groups = dict(members[k][switch])
                    move_position(groups, old_key, new_key, pos)
                    members[k][switch] = groups
        return SwitchIndex(self.levels, tuple(counts), tuple(members))


def _path(ns: NodeState, levels: int) -> tuple[str, ...]:
    """A node's switches; a node outside the tree has one of its own at every level."""
    return ns.spec.switches if len(ns.spec.switches) == levels else tuple(f"({ns.name})" for _ in range(levels))


def move_position(buckets: dict[K, tuple[int, ...]], old_key: K, new_key: K, pos: int) -> None:
    """Move node position ``pos`` from bucket ``old_key`` to ``new_key`` (buckets are sorted
    position tuples: bisect and slice, copies in C rather than per element); an emptied bucket
    is dropped."""
    bucket = buckets[old_key]
    at = bisect.bisect_left(bucket, pos)
    left = bucket[:at] + bucket[at + 1 :]
    if left:
        buckets[old_key] = left
    else:
        del buckets[old_key]
    bucket = buckets.get(new_key, ())
    at = bisect.bisect_left(bucket, pos)
    buckets[new_key] = (*bucket[:at], pos, *bucket[at:])
