"""Allreduce time on a placement: ring and tree alpha-beta costs on the slowest hop.

Hops of a data-parallel job's allreduce:
  * inside a node, the GPUs of the job form a ring. Its bandwidth is the best Hamiltonian ring's
    slowest link (NV2 > NV1 > PIX > ... > SYS, or a measured matrix), or, when every GPU of the
    set is NVLinked into a ring, the NVLink bandwidth each GPU has to the others of the set
    (NCCL runs several rings/channels over all NVLinks; min over GPUs of the summed links);
  * across nodes, the network: the node's Gb/s x the network efficiency, divided by the number
    of ring flows that share one NIC in the same direction (1 when the ring visits each node's
    GPUs together, as NCCL orders it; k when ranks alternate between nodes and the library
    follows rank order, as gloo and MPI rings do).
Ring: T = 2(n-1) a + 2(n-1)/n S/B; tree: T = 2 ceil(log2 n) a + 2 S/B, with B the slowest
hop's GB/s and a the largest per-step latency among the hops (docs/model.md).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ringleader.errors import UsageError
from ringleader.model.calibration import Calibration
from ringleader.reference import reference
from ringleader.scheduler.types import NodeState, Placement
from ringleader.topology.links import Link, latency_us
from ringleader.topology.node import NodeTopology

ALGORITHMS = ("auto", "ring", "tree")
RING_ORDERS = ("nodes", "ranks")
RANK_ORDER_BACKENDS = ("gloo", "mpi")
_EXACT_RING_LIMIT = 10


@dataclass(frozen=True)
class Hop:
    """One kind of edge the allreduce crosses, with its effective per-flow GB/s."""

    kind: str  # "NV1", "NVLink-agg", "SYS", "network", "local", ...
    gbs: float
    latency_us: float
    where: str


@dataclass(frozen=True)
class AllreduceCost:
    algorithm: str  # "ring" | "tree" | "none"
    time_s: float
    n_ranks: int
    nbytes: float
    bottleneck: Hop | None  # the slowest hop (None for one rank)
    latency_us: float  # the per-step latency used

    def as_dict(self) -> dict[str, object]:
        b = self.bottleneck
        return {
            "algorithm": self.algorithm,
            "time_s": round(self.time_s, 6),
            "ranks": self.n_ranks,
            "bytes": int(self.nbytes),
            "bottleneck": b.kind if b else "none",
            "bottleneck_gbs": round(b.gbs, 4) if b else None,
            "bottleneck_where": b.where if b else "",
            "latency_us": round(self.latency_us, 3),
        }


def network_efficiency() -> float:
    return float(reference()["model"].get("network_efficiency", 1.0))


def net_latency_us() -> float:
    return float(reference()["links"]["net_latency_us"])


# -- rings inside one node ----------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def best_ring_gbs(bw: tuple[tuple[float, ...], ...]) -> float:
    """Max over Hamiltonian cycles of the slowest edge, for a small dense GB/s matrix (0 = no
    edge). Two GPUs: their link. Exact up to 10 GPUs; beyond, the slowest pair (a lower bound)."""
    k = len(bw)
    if k < 2:
        return math.inf
    if k == 2:
        return bw[0][1]
    values = sorted({bw[i][j] for i in range(k) for j in range(k) if i != j}, reverse=True)
    if len(values) == 1:
        return values[0]
    if k > _EXACT_RING_LIMIT:
        return values[-1]
    for level in values:
        if level > 0 and _has_cycle(bw, level):
            return level
    return 0.0


def _has_cycle(bw: tuple[tuple[float, ...], ...], level: float) -> bool:
    k = len(bw)
    adj = [[j for j in range(k) if j != i and bw[i][j] >= level] for i in range(k)]
    if any(len(a) < 2 for a in adj):
        return False

    def walk(node: int, seen: int, depth: int) -> bool:
        if depth == k:
            return 0 in adj[node]
        return any(not seen >> nxt & 1 and walk(nxt, seen | 1 << nxt, depth + 1) for nxt in adj[node])

    return walk(0, 1, 1)


def _pair_gbs(topo: NodeTopology, a: int, b: int, cal: Calibration | None, backend: str | None) -> float:
    fit = cal.link(str(topo.links[a][b]), backend) if cal else None
    return fit.gbs if fit else topo.bandwidth_gbs[a][b]


def intra_node_hop(
    ns: NodeState, gpus: Sequence[int], cal: Calibration | None = None, backend: str | None = None
) -> Hop | None:
    """The ring hop inside one node for the job's GPUs there (None for fewer than two)."""
    if len(gpus) < 2:
        return None
    topo = ns.spec.topology
    name = ns.name
    if cal is not None:
        whole = cal.link("local", backend) if ns.spec.emulated else cal.link("intra", backend)
        if whole is not None:
            return Hop("local" if ns.spec.emulated else "intra", whole.gbs, whole.latency_us, name)
    ids = tuple(sorted(gpus))
    bw = tuple(tuple(0.0 if a == b else _pair_gbs(topo, a, b, cal, backend) for b in ids) for a in ids)
    ring = best_ring_gbs(bw)
    pairs = list(itertools.combinations(ids, 2))
    at_ring = [p for p in pairs if bw[ids.index(p[0])][ids.index(p[1])] == ring]
    a0, b0 = (at_ring or [min(pairs, key=lambda p: bw[ids.index(p[0])][ids.index(p[1])])])[0]
    kind = str(topo.links[a0][b0])
    nv = tuple(tuple(bw[i][j] if topo.links[a][b].is_nvlink else 0.0 for j, b in enumerate(ids))
               for i, a in enumerate(ids))  # fmt: skip
    if best_ring_gbs(nv) > 0:
        aggregate = min(sum(row) for row in nv)
        if aggregate > ring:
            ring, kind = aggregate, f"NVLink x{round(aggregate / _per_link(cal, backend), 1):g}"
    lat = max(_latency(topo.links[a][b], cal, backend) for a, b in itertools.combinations(ids, 2))
    return Hop(kind, ring, lat, f"{name} GPU{','.join(map(str, ids))}")


def _per_link(cal: Calibration | None, backend: str | None) -> float:
    fit = cal.link("NV1", backend) if cal else None
    return fit.gbs if fit else float(reference()["links"]["nvlink_per_link_gbs"])


def _latency(link: Link, cal: Calibration | None, backend: str | None) -> float:
    fit = cal.link(str(link), backend) if cal else None
    return fit.latency_us if fit is not None else latency_us(link)


# -- the network --------------------------------------------------------------------------------


def nic_flows(placement: Placement, ring_order: str) -> int:
    """Ring flows that leave one node through its NIC in one direction (the busiest node)."""
    nodes = placement.nodes
    if len(nodes) < 2:
        return 0
    if ring_order == "nodes":
        return 1
    ranks = [s.node for s in placement.slots for _ in (s.gpus or (0,))]
    out = dict.fromkeys(nodes, 0)
    for i, node in enumerate(ranks):
        if ranks[(i + 1) % len(ranks)] != node:
            out[node] += 1
    return max(out.values())


def network_hop(
    nodes: Mapping[str, NodeState], placement: Placement, ring_order: str,
    cal: Calibration | None = None, backend: str | None = None, efficiency: float | None = None,
) -> Hop | None:  # fmt: skip
    used = placement.nodes
    if len(used) < 2:
        return None
    flows = nic_flows(placement, ring_order)
    fit = cal.link("network", backend) if cal else None
    if fit is not None:
        gbs, lat, what = fit.gbs, fit.latency_us, "calibrated"
    else:
        slowest = min((nodes[n].spec for n in used), key=lambda s: s.network_gbs)
        eff = network_efficiency() if efficiency is None else efficiency
        gbs, lat, what = slowest.network_gbs * eff, net_latency_us(), f"{slowest.network_gbps:g} Gb/s x {eff:.3g}"
    where = f"{' <-> '.join(used)} ({what}, {flows} flow(s) per NIC)"
    return Hop("network", gbs / flows, lat, where)


# -- alpha-beta costs ---------------------------------------------------------------------------


def ring_time_s(n: int, nbytes: float, gbs: float, lat_us: float) -> float:
    """Ring allreduce: 2(n-1) steps, each rank sends 2(n-1)/n of the buffer."""
    if n < 2:
        return 0.0
    return 2 * (n - 1) * lat_us * 1e-6 + 2 * (n - 1) / n * nbytes / (gbs * 1e9)


def tree_time_s(n: int, nbytes: float, gbs: float, lat_us: float) -> float:
    """Binary-tree reduce then broadcast: 2 ceil(log2 n) steps, the whole buffer crosses each."""
    if n < 2:
        return 0.0
    return 2 * math.ceil(math.log2(n)) * lat_us * 1e-6 + 2 * nbytes / (gbs * 1e9)


def placement_hops(
    nodes: Mapping[str, NodeState], placement: Placement, *, backend: str | None = None,
    ring_order: str | None = None, calibration: Calibration | None = None,
    network_efficiency: float | None = None,
) -> list[Hop]:  # fmt: skip
    order = ring_order or ("ranks" if backend in RANK_ORDER_BACKENDS else "nodes")
    if order not in RING_ORDERS:
        raise UsageError(f"unknown ring order {order!r}", f"use one of {', '.join(RING_ORDERS)}")
    missing = [n for n in placement.nodes if n not in nodes]
    if missing:
        raise UsageError(f"placement names unknown node {missing[0]!r}", f"use one of {', '.join(nodes)}")
    hops = []
    for name in placement.nodes:
        hop = intra_node_hop(nodes[name], placement.gpus_on(name), calibration, backend)
        if hop is not None:
            hops.append(hop)
    net = network_hop(nodes, placement, order, calibration, backend, network_efficiency)
    if net is not None:
        hops.append(net)
    return hops


def n_ranks(placement: Placement) -> int:
    """Data-parallel ranks: one per GPU (one per worker for CPU-only workers)."""
    return sum(max(1, len(s.gpus)) for s in placement.slots)


def allreduce_cost(
    nodes: Mapping[str, NodeState], placement: Placement, nbytes: float, *,
    algorithm: str = "auto", backend: str | None = None, ring_order: str | None = None,
    calibration: Calibration | None = None, network_efficiency: float | None = None,
) -> AllreduceCost:  # fmt: skip
    """Allreduce of ``nbytes`` over every rank of ``placement`` (see the module docstring)."""
    if algorithm not in ALGORITHMS:
        raise UsageError(f"unknown allreduce algorithm {algorithm!r}", f"use one of {', '.join(ALGORITHMS)}")
    n = n_ranks(placement)
    hops = placement_hops(nodes, placement, backend=backend, ring_order=ring_order,
                          calibration=calibration, network_efficiency=network_efficiency)  # fmt: skip
    if n < 2 or not hops:
        return AllreduceCost("none", 0.0, n, nbytes, None, 0.0)
    slow = min(hops, key=lambda h: h.gbs)
    lat = max(h.latency_us for h in hops)
    costs = {"ring": ring_time_s(n, nbytes, slow.gbs, lat), "tree": tree_time_s(n, nbytes, slow.gbs, lat)}
    algo = min(costs, key=lambda a: costs[a]) if algorithm == "auto" else algorithm
    return AllreduceCost(algo, costs[algo], n, nbytes, slow, lat)


def allreduce_time_s(
    nodes: Mapping[str, NodeState], placement: Placement, nbytes: float, *,
    algorithm: str = "auto", backend: str | None = None, ring_order: str | None = None,
    calibration: Calibration | None = None, network_efficiency: float | None = None,
) -> float:  # fmt: skip
    """Seconds for one allreduce of ``nbytes`` on ``placement``: a pure function of the cluster
    snapshot, usable as a placement policy's objective (lower is better)."""
    return allreduce_cost(
        nodes, placement, nbytes, algorithm=algorithm, backend=backend, ring_order=ring_order,
        calibration=calibration, network_efficiency=network_efficiency,
    ).time_s  # fmt: skip
