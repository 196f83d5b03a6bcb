"""Allreduce time on a placement: ring, tree and hierarchical alpha-beta costs.

Hops of a data-parallel job's allreduce:
  * inside a node, the GPUs of the job form a ring. Its bandwidth is the best Hamiltonian ring's
    slowest link (NV2 > NV1 > PIX > ... > SYS, or a measured matrix), or, when every GPU of the
    set is NVLinked into a ring, the NVLink bandwidth each GPU has to the others of the set
    (NCCL runs several rings/channels over all NVLinks; min over GPUs of the summed links),
    never more than the GPU's own NVLink bandwidth. On an NVSwitch node (every pair shows the
    same NV# count, more links than one GPU has to spare for each peer) each GPU gets its
    NV# x 25 GB/s through the switch, whatever the set;
  * across nodes, the network: per NIC Gb/s x the fabric's efficiency x the NICs near the job's
    GPUs, divided by the number of ring flows that share them in one direction (1 when the ring
    visits each node's GPUs together, as NCCL orders it; k when ranks alternate between nodes
    and the library follows rank order, as gloo and MPI rings do), and never more than the flow's
    share of the narrowest switch uplink it crosses on a cluster with a network tree
    (``uplink_cap``: d nodes' NICs over the level's oversubscription, split among the gangs
    crossing it);
Ring: T = 2(n-1) a + 2(n-1)/n S/B; tree: T = 2 ceil(log2 n) a + 2 S/B, with B the slowest
hop's GB/s and a the largest per-step latency among the hops. Hierarchical (NCCL only: inside
each node, then across): T = 2(k-1)/k S/B_intra + 2(m-1)/m S/B_net plus their latencies, for k
GPUs on the busiest node and m nodes (docs/model.md).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from ringleader.errors import UsageError
from ringleader.model.calibration import Calibration, LinkFit
from ringleader.model.tables import gpu_specs, normalize_gpu_type
from ringleader.reference import reference
from ringleader.scheduler.framework import fabric_gbs
from ringleader.scheduler.types import NodeState, Placement
from ringleader.topology.links import Link, latency_us
from ringleader.topology.node import NodeTopology

ALGORITHMS = ("auto", "ring", "tree", "hierarchical")
FABRICS = ("tcp", "roce", "infiniband", "efa")
RING_ORDERS = ("nodes", "ranks")
RANK_ORDER_BACKENDS = ("gloo", "mpi")
_EXACT_RING_LIMIT = 10
# No calibrated links: every hop priced from the topology and the published tables. A calibrated
# prediction reads its calibration's link table once (``Calibration.links_for``, resolved with the
# job's other pricing inputs in ``predict.Pricing``) and hands the hops that table.
PUBLISHED: Mapping[str, LinkFit] = MappingProxyType({})


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


def network_efficiency(fabric: str = "tcp") -> float:
    """Share of the line rate NCCL's inter-node hop gets on ``fabric`` (reference.toml [fabrics])."""
    return float(reference()["fabrics"][check_fabric(fabric)])


def check_fabric(fabric: str) -> str:
    name = fabric.strip().lower().replace("-", "").replace("_", "")
    name = {"ib": "infiniband", "ethernet": "tcp", "socket": "tcp"}.get(name, name)
    if name not in FABRICS:
        raise UsageError(f"unknown fabric {fabric!r}", f"use one of {', '.join(FABRICS)}")
    return name


def fabric_of(topo: NodeTopology) -> str:
    """The fabric a node's NIC names suggest: mlx5_* InfiniBand, efa* EFA, else TCP."""
    names = [n.lower() for n in topo.nics]
    if any(n.startswith("efa") or "efa" in n.split("_") for n in names):
        return "efa"
    if any(n.startswith("mlx") for n in names):
        return "infiniband"
    return "tcp"


_NEAR = ("PIX", "PXB", "PHB")


def nics_near(topo: NodeTopology, gpus: Sequence[int]) -> int:
    """Network adapters NCCL would use for these GPUs: those behind the same PCIe switch or
    host bridge as one of them (PIX/PXB/PHB), at most one per GPU (NCCL gives each GPU its
    nearest NIC; a storage or second port beside it adds nothing); at least one."""
    if not topo.nics or not topo.nic_links:
        return 1
    near = {k for g in gpus for k, link in enumerate(topo.nic_links[g]) if str(link) in _NEAR}
    return max(1, min(len(near), len(gpus)))


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


def _pair_gbs(topo: NodeTopology, a: int, b: int, links: Mapping[str, LinkFit]) -> float:
    fit = links.get(str(topo.links[a][b]))
    return fit.gbs if fit else topo.bandwidth_gbs[a][b]


def intra_node_hop(ns: NodeState, gpus: Sequence[int], links: Mapping[str, LinkFit] = PUBLISHED) -> Hop | None:
    """The ring hop inside one node for the job's GPUs there (None for fewer than two);
    ``links``: the calibrated fits by hop kind (``Calibration.links_for``)."""
    if len(gpus) < 2:
        return None
    topo = ns.spec.topology
    name = ns.name
    whole_kind = "local" if ns.spec.emulated else "intra"
    whole = links.get(whole_kind)
    if whole is not None:
        return Hop(whole_kind, whole.gbs, whole.latency_us, name)
    ids = tuple(sorted(gpus))
    key = (id(topo), ids, tuple(sorted(links.items())))
    kept = _RINGS.get(key)
    if kept is None or kept[0] is not topo:
        if len(_RINGS) >= MAX_RINGS_KEPT:
            _RINGS.clear()
        kept = _RINGS[key] = (topo, _ring_inside(topo, ids, links))
    kind, gbs, latency = kept[1]
    return Hop(kind, gbs, latency, f"{name} GPU{','.join(map(str, ids))}")


# The ring inside a node depends only on its topology, the GPUs taken and the link fits, and a
# cluster's nodes share one topology object: a model fit prices 128 identical nodes thousands of
# times, so each (topology, GPUs, link fits) is worked out once. The entry keeps the topology it
# was keyed on alive, so its id cannot be reused by another object meanwhile.
_RINGS: dict[tuple[int, tuple[int, ...], tuple[tuple[str, LinkFit], ...]],
             tuple[NodeTopology, tuple[str, float, float]]] = {}  # fmt: skip
MAX_RINGS_KEPT = 4096


def _ring_inside(topo: NodeTopology, ids: tuple[int, ...], links: Mapping[str, LinkFit]) -> tuple[str, float, float]:
    """The kind, GB/s and latency (us) of the best ring through GPUs ``ids`` of ``topo``."""
    bw = tuple(tuple(0.0 if a == b else _pair_gbs(topo, a, b, links) for b in ids) for a in ids)
    ring = best_ring_gbs(bw)
    pairs = list(itertools.combinations(ids, 2))
    at_ring = [p for p in pairs if bw[ids.index(p[0])][ids.index(p[1])] == ring]
    a0, b0 = (at_ring or [min(pairs, key=lambda p: bw[ids.index(p[0])][ids.index(p[1])])])[0]
    kind = str(topo.links[a0][b0])
    nv = tuple(tuple(bw[i][j] if topo.links[a][b].is_nvlink else 0.0 for j, b in enumerate(ids))
               for i, a in enumerate(ids))  # fmt: skip
    lat = max(_latency(topo.links[a][b], links) for a, b in itertools.combinations(ids, 2))
    switch = nvswitch_gbs(topo, links)
    if switch is not None:
        return "NVSwitch", switch, lat
    if best_ring_gbs(nv) > 0:
        aggregate = min(min(sum(row) for row in nv), nvlink_cap_gbs(topo))
        if aggregate > ring:
            ring, kind = aggregate, f"NVLink x{round(aggregate / _per_link(links), 1):g}"
    return kind, ring, lat


def nvlink_cap_gbs(topo: NodeTopology) -> float:
    """A GPU's own NVLink bandwidth (one direction) from its datasheet; inf when unknown."""
    spec = gpu_specs().get(normalize_gpu_type(topo.gpu_model)) if topo.gpu_model else None
    return spec.nvlink_gbs if spec is not None and spec.nvlink_gbs > 0 else math.inf


def nvswitch_gbs(topo: NodeTopology, links: Mapping[str, LinkFit] = PUBLISHED) -> float | None:
    """Per-GPU GB/s through NVSwitches, or None when the node has none: every pair shows the
    same NV# count c on 4+ GPUs and c links to each of the n-1 peers is more than a GPU has
    (18, NVLink 4) or its datasheet allows. Each GPU then gets c x 25 GB/s, whatever the set."""
    n = topo.n_gpus
    if n < 4:
        return None
    pairs = itertools.combinations(range(n), 2)
    counts = {topo.links[a][b].nvlinks if topo.links[a][b].is_nvlink else 0 for a, b in pairs}
    if len(counts) != 1 or 0 in counts:
        return None
    c = counts.pop()
    per_link = _per_link(links)
    cap = nvlink_cap_gbs(topo)
    most = cap if math.isfinite(cap) else 18 * per_link
    if c * (n - 1) * per_link <= most:
        return None  # a direct all-to-all mesh
    return min(c * per_link, cap)


def _per_link(links: Mapping[str, LinkFit]) -> float:
    fit = links.get("NV1")
    return fit.gbs if fit else float(reference()["links"]["nvlink_per_link_gbs"])


def _latency(link: Link, links: Mapping[str, LinkFit]) -> float:
    fit = links.get(str(link))
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
    links: Mapping[str, LinkFit] = PUBLISHED, efficiency: float | None = None,
    fabric: str | None = None, uplink_flows: Mapping[str, int] | None = None,
) -> Hop | None:  # fmt: skip
    """The inter-node hop: the slowest node's usable NIC bandwidth, shared by the ring's flows,
    and never more than its share of the narrowest switch uplink it crosses (``uplink_cap``)."""
    used = placement.nodes
    if len(used) < 2:
        return None
    domain = nodes[used[0]].spec.nvlink_domain
    if domain and all(nodes[n].spec.nvlink_domain == domain for n in used):
        # One multi-node NVLink domain (NVL72): the trays talk over NVSwitches, not the network.
        gbs = min(fabric_gbs(nodes[n]) for n in used)
        return Hop("nvlink-domain", gbs, latency_us(Link("NV", 1)), f"{' <-> '.join(used)} (NVLink domain {domain})")
    flows = nic_flows(placement, ring_order)
    fit = links.get("network")
    if fit is not None:
        gbs, lat, what = fit.gbs, fit.latency_us, "calibrated"
    else:
        def usable(name: str) -> tuple[float, int, str]:
            spec = nodes[name].spec
            nics = nics_near(spec.topology, placement.gpus_on(name))
            kind = check_fabric(fabric) if fabric else fabric_of(spec.topology)
            eff = network_efficiency(kind) if efficiency is None else efficiency
            return spec.network_gbs * nics * eff, nics, f"{spec.network_gbps:g} Gb/s x {nics} NIC x {eff:.3g} {kind}"

        gbs, _, what = min((usable(n) for n in used), key=lambda u: u[0])
        lat = net_latency_us()
    where = f"{' <-> '.join(used)} ({what}, {flows} flow(s) per NIC)"
    capped = uplink_cap(nodes, placement, gbs, uplink_flows)
    if capped is not None and capped[0] < gbs / flows:
        return Hop("network", capped[0], lat, f"{where}, {capped[1]}")
    return Hop("network", gbs / flows, lat, where)


def uplink_cap(
    nodes: Mapping[str, NodeState], placement: Placement, nic_gbs: float, flows: Mapping[str, int] | None = None
) -> tuple[float, str] | None:
    """The GB/s one ring flow gets through the narrowest uplink it crosses, and where (None on
    a cluster without a network tree, or inside one leaf). A switch of a level with down:up
    ratio r over d nodes has d x NIC / r of uplink, shared by the flows crossing it: the gangs
    whose rings leave it (``flows``: switch -> gangs, the simulator's count; 1 by default: a ring
    in tree order leaves each switch once per direction). ``nodes`` should be the whole
    cluster (``ClusterState.by_name``): d counts the nodes under the switch that it holds."""
    specs = [nodes[n].spec for n in placement.nodes]
    places = [s.network for s in specs]
    if len(specs) < 2 or any(p is None for p in places):
        return None
    levels = places[0].levels if places[0] is not None else ()
    paths = [p.switches for p in places if p is not None]
    span = next((k for k in range(len(levels)) if len({p[k] for p in paths}) == 1), len(levels))
    best: tuple[float, str] | None = None
    for k in range(span):
        ratio = levels[k].oversubscription
        for switch in dict.fromkeys(p[k] for p in paths):
            down = sum(1 for ns in nodes.values() if ns.spec.network is not None and ns.spec.switches[k] == switch)
            crossing = max(1, (flows or {}).get(switch, 1))
            gbs = nic_gbs * down / (ratio * crossing)
            if best is None or gbs < best[0]:
                best = (gbs, f"{levels[k].name} {switch} uplink {ratio:g}:1 over {down} node(s), {crossing} gang(s)")
    return best


def calibration_fabric_note(
    cal: Calibration | None, nodes: Iterable[NodeState], backend: str | None = None
) -> str | None:
    """A warning when a calibration's network link is faster than any node of this cluster can
    send at line rate: it was measured on another fabric (InfiniBand applied to 25 GbE), and
    every prediction across nodes would use its speed while the bottleneck names this one's."""
    return network_link_note(cal.link("network", backend) if cal else None, nodes)


def network_link_note(fit: LinkFit | None, nodes: Iterable[NodeState]) -> str | None:
    """``calibration_fabric_note`` for the calibration's network link ``fit`` (None: it has none)."""
    if fit is None:
        return None
    line = max((ns.spec.network_gbs * max(1, len(ns.spec.topology.nics)) for ns in nodes), default=0.0)
    if not line or fit.gbs <= line * 1.05:
        return None
    return (f"the calibration's network link ({fit.gbs:.3g} GB/s) is faster than this cluster's NICs at line "
            f"rate ({line:.3g} GB/s): it was measured on another fabric, and predictions across nodes use it; "
            "calibrate on this cluster, or leave --calibration out")  # fmt: skip


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
    ring_order: str | None = None, links: Mapping[str, LinkFit] = PUBLISHED,
    network_efficiency: float | None = None, fabric: str | None = None,
    uplink_flows: Mapping[str, int] | None = None,
) -> list[Hop]:  # fmt: skip
    """The hops of ``placement``'s allreduce; ``links``: the calibrated fits by hop kind, as
    ``Calibration.links_for(backend)`` resolves them (PUBLISHED: none)."""
    order = ring_order or ("ranks" if backend in RANK_ORDER_BACKENDS else "nodes")
    if order not in RING_ORDERS:
        raise UsageError(f"unknown ring order {order!r}", f"use one of {', '.join(RING_ORDERS)}")
    missing = [n for n in placement.nodes if n not in nodes]
    if missing:
        raise UsageError(f"placement names unknown node {missing[0]!r}", f"use one of {', '.join(nodes)}")
    hops = []
    for name in placement.nodes:
        hop = intra_node_hop(nodes[name], placement.gpus_on(name), links)
        if hop is not None:
            hops.append(hop)
    net = network_hop(nodes, placement, order, links, network_efficiency, fabric, uplink_flows)
    if net is not None:
        hops.append(net)
    return hops


def n_ranks(placement: Placement) -> int:
    """Data-parallel ranks: one per GPU (one per worker for CPU-only workers)."""
    return sum(max(1, len(s.gpus)) for s in placement.slots)


def hierarchical_time_s(placement: Placement, nbytes: float, hops: Sequence[Hop]) -> float:
    """Reduce-scatter and all-gather inside each node, a ring allreduce across the nodes (each
    GPU carries 1/k of the buffer over its node's NICs, so the node moves S per direction)."""
    intra = [h for h in hops if h.kind != "network"]
    net = next((h for h in hops if h.kind == "network"), None)
    k = max(len(placement.gpus_on(n)) or 1 for n in placement.nodes)
    m = len(placement.nodes)
    t = 0.0
    if intra and k > 1:
        slow = min(intra, key=lambda h: h.gbs)
        t += ring_time_s(k, nbytes, slow.gbs, max(h.latency_us for h in intra))
    if net is not None and m > 1:
        t += ring_time_s(m, nbytes, net.gbs, net.latency_us)
    return t


def allreduce_cost(
    nodes: Mapping[str, NodeState], placement: Placement, nbytes: float, *,
    algorithm: str = "auto", backend: str | None = None, ring_order: str | None = None,
    links: Mapping[str, LinkFit] = PUBLISHED, network_efficiency: float | None = None,
    fabric: str | None = None, uplink_flows: Mapping[str, int] | None = None,
) -> AllreduceCost:  # fmt: skip
    """Allreduce of ``nbytes`` over every rank of ``placement`` (see the module docstring)."""
    if algorithm not in ALGORITHMS:
        raise UsageError(f"unknown allreduce algorithm {algorithm!r}", f"use one of {', '.join(ALGORITHMS)}")
    n = n_ranks(placement)
    hops = placement_hops(nodes, placement, backend=backend, ring_order=ring_order, links=links,
                          network_efficiency=network_efficiency, fabric=fabric, uplink_flows=uplink_flows)  # fmt: skip
    if n < 2 or not hops:
        return AllreduceCost("none", 0.0, n, nbytes, None, 0.0)
    slow = min(hops, key=lambda h: h.gbs)
    lat = max(h.latency_us for h in hops)
    costs = {"ring": ring_time_s(n, nbytes, slow.gbs, lat), "tree": tree_time_s(n, nbytes, slow.gbs, lat)}
    if backend not in RANK_ORDER_BACKENDS and len(placement.nodes) > 1:
        costs["hierarchical"] = hierarchical_time_s(placement, nbytes, hops)
    if algorithm not in ("auto", *costs):
        raise UsageError(f"{algorithm} allreduce needs NCCL over several nodes", "use ring or tree")
    algo = min(costs, key=lambda a: costs[a]) if algorithm == "auto" else algorithm
    return AllreduceCost(algo, costs[algo], n, nbytes, slow, lat)


def allreduce_time_s(
    nodes: Mapping[str, NodeState], placement: Placement, nbytes: float, *,
    algorithm: str = "auto", backend: str | None = None, ring_order: str | None = None,
    links: Mapping[str, LinkFit] = PUBLISHED, network_efficiency: float | None = None,
    fabric: str | None = None,
) -> float:  # fmt: skip
    """Seconds for one allreduce of ``nbytes`` on ``placement``: a pure function of the cluster
    snapshot, usable as a placement policy's objective (lower is better)."""
    return allreduce_cost(
        nodes, placement, nbytes, algorithm=algorithm, backend=backend, ring_order=ring_order,
        links=links, network_efficiency=network_efficiency, fabric=fabric,
    ).time_s  # fmt: skip
