"""The network tree in the simulator: which switch uplinks running gangs cross, and how
fragmented each level is.

A gang whose nodes' lowest common switch is at level k crosses the uplinks of its nodes'
switches at every level below k. When it starts, it is priced with, per switch it crosses, the
number of gangs crossing that switch then (itself included): the model gives each its share of
the uplink (model.comm.uplink_cap). The price is kept for the job's run (a job is not re-priced
when others start or end: an approximation on the side of the start-time load).

Fragmentation of a level, sampled after every instant: the share of the free GPUs that sit
under a switch of that level which is not wholly free (a whole free rack or block is what the
next big gang needs; Volcano's hypernode bin-packing keeps them), and how many switches of
each level are wholly free.
"""

from __future__ import annotations

from collections.abc import Sequence

from ringleader.scheduler.types import Placement
from ringleader.topology.cluster import NodeSpec
from ringleader.topology.network import Level


class NetworkLoad:
    def __init__(self, specs: Sequence[NodeSpec]) -> None:
        self.levels: tuple[Level, ...] = next((s.network.levels for s in specs if s.network is not None), ())
        self.paths = {s.name: s.switches for s in specs if s.network is not None}
        self.crossing: dict[str, int] = {}
        self.capacity: list[dict[str, int]] = [{} for _ in self.levels]
        self.free: list[dict[str, int]] = [{} for _ in self.levels]
        for s in specs:
            for k, switch in enumerate(self.paths.get(s.name, ())):
                self.capacity[k][switch] = self.capacity[k].get(switch, 0) + s.topology.n_gpus
                self.free[k][switch] = self.free[k].get(switch, 0) + s.topology.n_gpus

    def span(self, placement: Placement) -> int:
        """The level of the lowest switch over all its nodes (-1: one node)."""
        nodes = placement.nodes
        if len(nodes) < 2:
            return -1
        paths = [self.paths.get(n) for n in nodes]
        if any(p is None for p in paths):
            return len(self.levels)
        return next((k for k in range(len(self.levels)) if len({p[k] for p in paths if p}) == 1), len(self.levels))

    def crossed(self, placement: Placement) -> set[str]:
        """The switches whose uplinks the gang's ring crosses."""
        span = self.span(placement)
        return {self.paths[n][k] for n in placement.nodes if n in self.paths for k in range(max(span, 0))}

    def start(self, placement: Placement) -> dict[str, int]:
        """Count the gang in; per switch it crosses, the gangs crossing it now (itself included)."""
        flows = {}
        for switch in self.crossed(placement):
            flows[switch] = self.crossing[switch] = self.crossing.get(switch, 0) + 1
        return flows

    def peek(self, placement: Placement) -> dict[str, int]:
        """What ``start`` would return, counting nothing in (to price a placement not taken)."""
        return {switch: self.crossing.get(switch, 0) + 1 for switch in self.crossed(placement)}

    def end(self, placement: Placement) -> None:
        for switch in self.crossed(placement):
            self.crossing[switch] -= 1

    def node_free_changed(self, node: str, delta: int) -> None:
        for k, switch in enumerate(self.paths.get(node, ())):
            self.free[k][switch] += delta

    def whole_free(self) -> tuple[int, ...]:
        """Per level: how many of its switches have every GPU under them free."""
        return tuple(sum(1 for s, f in free.items() if f == capacity[s])
                     for capacity, free in zip(self.capacity, self.free, strict=True))  # fmt: skip

    def fragmentation(self) -> tuple[float, ...]:
        """Per level: the share of free GPUs under switches that are not wholly free."""
        out = []
        for capacity, free in zip(self.capacity, self.free, strict=True):
            total = sum(free.values())
            whole = sum(f for s, f in free.items() if f == capacity[s])
            out.append(1 - whole / total if total else 0.0)
        return tuple(out)
