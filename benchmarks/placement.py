"""Placement decision time, optimality against brute force, and decision time at the GPU limit.

1. Scale: synthetic clusters of 8xV100 hybrid-cube-mesh nodes (preset dgx1v) with half of all
   GPUs taken at random; jobs of 1, 2, 4, 8 and 16 GPUs (workers x 1 GPU), topology policy.
   A scheduler keeps its cluster snapshot up to date incrementally, so the decision time is
   measured on a built snapshot (its group index made once, as `with_placement` carries it from
   commit to commit); the memoised per-topology searches are warm after one warm-up decision.
   The table also gives the one-off cost of building a snapshot's index from scratch and of a
   decision plus its commit (`with_placement`), so nothing is hidden.
2. Optimality (`--optimality`): fresh small clusters of 2-3 nodes drawn from real layouts with
   NUMA and NIC rows (two-socket all-SYS PCIe, DGX-1V with 4 NICs, V100 with one NIC, bridged
   A100 PCIe pairs, the 2-socket PCIe preset), random busy GPUs, random gangs that fit; every
   placement of the gang is enumerated and scored with the whole objective (islands,
   bottleneck, in-node phase, nodes, summed bandwidth, NUMA nodes, NIC affinity, rail load, free
   GPUs, leftover connectivity), written here independently of the engine.
3. At the limit (`--limit`): nodes of MAX_GPUS_PER_NODE GPUs (two sockets, NVSwitch) with random
   busy GPUs; every decision meets a free mask it has not searched before (cold memo).

    python benchmarks/placement.py [--sizes 100,1000,10000] [--decisions 200] [--json out.json]
    python benchmarks/placement.py --optimality 500 --limit 200 --sizes ""
"""

from __future__ import annotations

import argparse
import itertools
import json
import platform
import random
import statistics
import time
from collections.abc import Callable, Sequence

from ringleader.scheduler import ClusterState, JobRequest, NodeState, place
from ringleader.scheduler.gpuset import _SEARCHES
from ringleader.topology import MAX_GPUS_PER_NODE, Link, NodeSpec, NodeTopology, preset
from ringleader.topology.links import SELF

JOB_SIZES = (1, 2, 4, 8, 16)


def synthetic_cluster(nodes: int, rng: random.Random) -> tuple[NodeState, ...]:
    topo = preset("dgx1v")
    all_gpus = [(n, g) for n in range(nodes) for g in range(8)]
    taken: dict[int, list[int]] = {}
    for n, g in rng.sample(all_gpus, len(all_gpus) // 2):
        taken.setdefault(n, []).append(g)
    return tuple(
        NodeState(NodeSpec(f"node-{n}", topo, 25.0, (), True), tuple((g, "busy") for g in sorted(taken.get(n, []))))
        for n in range(nodes)
    )


def exhaustive_single_node(nodes: tuple[NodeState, ...], k: int) -> tuple[float, float] | None:
    """Best (bottleneck, summed GB/s) over every k-subset of every node's free GPUs. Nodes with
    the same free mask have the same subsets, so each distinct mask is enumerated once."""
    bw = nodes[0].spec.topology.bandwidth_gbs
    best: tuple[float, float] | None = None
    for mask in {ns.free_mask for ns in nodes}:
        free = [g for g in range(8) if mask >> g & 1]
        for subset in itertools.combinations(free, k):
            pairs = [bw[a][b] for a, b in itertools.combinations(subset, 2)] or [float("inf")]
            value = (min(pairs), sum(p for p in pairs if p != float("inf")))
            best = value if best is None or value > best else best
    return best


def optimality(size: int, k: int, clusters: int, rng: random.Random) -> tuple[int, int]:
    """(optimal, checked) single-node decisions for a k-GPU job over fresh random clusters."""
    optimal = checked = 0
    request = JobRequest(f"job-{k}", k, 1, topology_aware=True)
    for _ in range(clusters):
        nodes = synthetic_cluster(size, rng)
        decision = place(ClusterState(nodes), request)
        if decision.chosen is None or decision.chosen.metrics.nodes_used != 1:
            continue
        checked += 1
        m = decision.chosen.metrics
        optimal += (m.bottleneck.gbs, m.sum_pair_gbs) == exhaustive_single_node(nodes, k)
    return optimal, checked


def measure(size: int, decisions: int, seed: int, check_clusters: int) -> list[dict[str, object]]:
    rng = random.Random(seed)
    clusters = [synthetic_cluster(size, rng) for _ in range(4)]
    build_times = []
    states = []
    for nodes in clusters:
        start = time.perf_counter()
        state = ClusterState(nodes)
        _ = state.index
        build_times.append(time.perf_counter() - start)
        states.append(state)
    rows = []
    for k in JOB_SIZES:
        request = JobRequest(f"job-{k}", k, 1, topology_aware=True)
        place(states[0], request)  # warm the per-topology memo
        times = []
        commit_times = []
        for i in range(decisions):
            state = states[i % len(states)]
            start = time.perf_counter()
            decision = place(state, request)
            times.append(time.perf_counter() - start)
            if decision.placement is not None:
                start = time.perf_counter()
                state.with_placement(decision.placement)
                commit_times.append(time.perf_counter() - start)
        optimal, single = optimality(size, k, check_clusters, rng) if k > 1 else (0, 0)
        times.sort()
        rows.append({
            "nodes": size,
            "job_gpus": k,
            "median_ms": statistics.median(times) * 1e3,
            "p99_ms": times[min(len(times) - 1, int(len(times) * 0.99))] * 1e3,
            "commit_median_ms": statistics.median(commit_times) * 1e3 if commit_times else 0.0,
            "index_build_ms": statistics.median(build_times) * 1e3,
            "single_node_checked": single,
            "single_node_optimal": optimal,
            "nodes_used": len(decision.placement.nodes) if decision.placement else 0,
        })  # fmt: skip
    return rows


# -- optimality against brute force, tie-breaks and splits included -----------------------------


def _layouts() -> dict[str, NodeTopology]:
    def build(
        n: int, kind: Callable[[int, int], str], numa: tuple[int | None, ...], nics: dict[int, tuple[str, ...]]
    ) -> NodeTopology:
        links = tuple(tuple(SELF if i == j else Link.parse(kind(i, j)) for j in range(n)) for i in range(n))
        names = sorted(nics)
        nic_links = tuple(tuple(Link.parse(nics[k][i]) for k in names) for i in range(n)) if nics else ()
        return NodeTopology(links=links, numa=numa, nics=tuple(f"mlx5_{k}" for k in names), nic_links=nic_links)

    hcm = preset("dgx1v")
    dgx1_nics = {
        k: tuple("PIX" if i // 2 == k else "PHB" if i // 4 == k // 2 else "SYS" for i in range(8)) for k in range(4)
    }
    return {
        "2-socket all-SYS PCIe, 2 NICs": build(8, lambda i, j: "SYS", (0,) * 4 + (1,) * 4,
                                               {0: ("SYS",) * 6 + ("PHB", "SYS"), 1: ("SYS",) * 6 + ("PHB", "SYS")}),
        "DGX-1V, 4 NICs": build(8, lambda i, j: str(hcm.links[i][j]), hcm.numa, dgx1_nics),
        "V100, 1 NIC": build(8, lambda i, j: str(hcm.links[i][j]), (None,) * 8,
                             {0: ("NODE", "NODE", "PIX", "PIX") + ("SYS",) * 4}),
        "bridged A100 PCIe, 2 NICs": build(
            4, lambda i, j: "NV12" if i // 2 == j // 2 else "NODE", (0, 0, 1, 1),
            {k: tuple("PIX" if i // 2 == k else "SYS" for i in range(4)) for k in range(2)},
        ),
        "pcie-8gpu-2socket": preset("pcie-8gpu-2socket"),
    }  # fmt: skip


def _max_clique(topo: NodeTopology, gpus: tuple[int, ...], level: float) -> int:
    bw = topo.bandwidth_gbs
    for size in range(len(gpus), 0, -1):
        for sub in itertools.combinations(gpus, size):
            if all(bw[a][b] >= level for a, b in itertools.combinations(sub, 2)):
                return size
    return 0


def _rail_load(topo: NodeTopology, gpus: tuple[int, ...]) -> int:
    load = [0] * len(topo.nics)
    for g in gpus:
        best = max(link.rank for link in topo.nic_links[g])
        nearest = [k for k, link in enumerate(topo.nic_links[g]) if link.rank == best]
        load[min(nearest, key=lambda k: load[k])] += 1
    return max(load, default=0)


def brute_objective(nodes: Sequence[NodeState], shares: Sequence[tuple[int, ...]]) -> tuple[float, ...]:
    """The policy's objective of one placement, from its definition (docs/scheduler.md)."""
    used = [(ns, gpus) for ns, gpus in zip(nodes, shares, strict=True) if gpus]
    spans = len(used) > 1
    bottleneck, phase, total, numa, near, rail, free_after, leftover = float("inf"), 0.0, 0.0, 0, 0, 0, 0, 0.0
    for ns, gpus in used:
        topo = ns.spec.topology
        bw = topo.bandwidth_gbs
        pairs = [bw[a][b] for a, b in itertools.combinations(gpus, 2)]
        share_b = min(pairs, default=float("inf"))
        bottleneck = min(bottleneck, share_b, ns.spec.network_gbs if spans else float("inf"))
        k = len(gpus)
        phase = max(phase, (k - 1) / (k * share_b) if k > 1 else 0.0)
        total += sum(pairs)
        numa += len({topo.numa_groups[g] for g in gpus})
        if spans and topo.nics:
            near += sum(1 for g in gpus if max(link.rank for link in topo.nic_links[g]) >= Link("PXB").rank)
            rail += _rail_load(topo, gpus)
        left = tuple(g for g in ns.free_gpus if g not in gpus)
        free_after += len(left)
        levels = sorted({bw[a][b] for a in range(topo.n_gpus) for b in range(topo.n_gpus) if a != b})
        leftover += sum(_max_clique(topo, left, lv) for lv in levels) if left else 0.0
    return (-float(len(used)), min(bottleneck, 1e9), -phase, -float(len(used)), total, -float(numa),
            float(near), -float(rail), -float(free_after), leftover)  # fmt: skip


def brute_best(nodes: Sequence[NodeState], k: int) -> tuple[float, ...]:
    """Best objective over every way to take k free GPUs from the nodes."""
    options = [[sub for size in range(0, k + 1) for sub in itertools.combinations(ns.free_gpus, size)] for ns in nodes]
    best: tuple[float, ...] | None = None
    for shares in itertools.product(*options):
        if sum(len(s) for s in shares) == k:
            value = brute_objective(nodes, shares)
            best = value if best is None or value > best else best
    assert best is not None
    return best


def optimality_check(clusters: int, seed: int) -> dict[str, tuple[int, int, int]]:
    """Per layout: (optimal decisions, decisions checked, of which across nodes)."""
    rng = random.Random(seed)
    layouts = _layouts()
    out: dict[str, tuple[int, int, int]] = {}
    for name, topo in layouts.items():
        optimal = checked = spanning = 0
        for c in range(clusters):
            count = rng.choice((2, 3)) if topo.n_gpus <= 4 else 2
            nodes = []
            for i in range(count):
                busy = sorted(rng.sample(range(topo.n_gpus), rng.randint(0, topo.n_gpus - 1)))
                nodes.append(NodeState(NodeSpec(f"n{i}", topo, 25.0, (), True), tuple((g, "busy") for g in busy)))
            free = sum(ns.n_free for ns in nodes)
            k = rng.randint(2, max(2, free)) if free >= 2 else 0
            if k == 0:
                continue
            decision = place(ClusterState(tuple(nodes)), JobRequest(f"j{c}", k, 1, topology_aware=True))
            assert decision.chosen is not None and decision.placement is not None
            shares = [decision.placement.gpus_on(ns.name) for ns in nodes]
            got = brute_objective(nodes, [tuple(sorted(s)) for s in shares])
            checked += 1
            spanning += len(decision.placement.nodes) > 1
            optimal += got == brute_best(nodes, k)
        out[name] = (optimal, checked, spanning)
    return out


# -- at the GPU-count limit ------------------------------------------------------------------


def at_the_limit(decisions: int, seed: int) -> list[dict[str, object]]:
    """Cold decisions on 20 nodes of MAX_GPUS_PER_NODE GPUs (NV18 everywhere, two sockets)."""
    n = MAX_GPUS_PER_NODE
    links = tuple(tuple(SELF if i == j else Link("NV", 18) for j in range(n)) for i in range(n))
    topo = NodeTopology(links=links, numa=tuple(0 if i < n // 2 else 1 for i in range(n)))
    rng = random.Random(seed)
    rows = []
    for k in (1, 8, 16, n // 2, n):
        times = []
        for _ in range(decisions):
            _SEARCHES.clear()  # every decision searches from scratch
            nodes = tuple(
                NodeState(NodeSpec(f"big-{i}", topo, 100.0, (), True),
                          tuple((g, "busy") for g in sorted(rng.sample(range(n), rng.randint(0, n // 2)))))
                for i in range(20)
            )  # fmt: skip
            start = time.perf_counter()
            place(ClusterState(nodes), JobRequest("j", k, 1, topology_aware=True))
            times.append(time.perf_counter() - start)
        times.sort()
        rows.append({"gpus_per_node": n, "job_gpus": k, "median_ms": statistics.median(times) * 1e3,
                     "max_ms": times[-1] * 1e3})  # fmt: skip
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--decisions", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--check-clusters", type=int, default=20, help="fresh clusters per cell, optimality check")
    parser.add_argument("--json", help="also write the rows to this file")
    parser.add_argument("--optimality", type=int, default=0, help="fresh clusters per layout, brute-force check")
    parser.add_argument("--limit", type=int, default=0, help="cold decisions per job size at the GPU-count limit")
    args = parser.parse_args()
    if args.optimality:
        print(f"# optimality vs brute force, {args.optimality} fresh clusters per layout")
        print(f"{'layout':<32} {'optimal':>9} {'across nodes':>13}")
        for name, (optimal, checked, spanning) in optimality_check(args.optimality, args.seed).items():
            print(f"{name:<32} {optimal:>4}/{checked:<4} {spanning:>13}")
    if args.limit:
        print(f"# cold decisions at the limit ({MAX_GPUS_PER_NODE} GPUs per node, 20 nodes), {args.limit} per size")
        for r in at_the_limit(args.limit, args.seed):
            print(f"job {r['job_gpus']:>3} GPUs: median {r['median_ms']:8.2f} ms, max {r['max_ms']:8.2f} ms")
    rows = []
    for size in (int(s) for s in args.sizes.split(",") if s):
        rows.extend(measure(size, args.decisions, args.seed, args.check_clusters))
    if not rows:
        return
    print(
        f"# python {platform.python_version()} on {platform.machine()}; decisions per cell: {args.decisions}; "
        f"optimality checked on {args.check_clusters} fresh clusters per cell"
    )
    print(
        f"{'nodes':>6} {'gpus':>4} {'median ms':>10} {'p99 ms':>8} {'commit ms':>9} {'index build ms':>14} "
        f"{'nodes used':>10} {'optimal (single-node)':>22}"
    )
    for r in rows:
        opt = f"{r['single_node_optimal']}/{r['single_node_checked']}" if r["single_node_checked"] else "n/a"
        print(
            f"{r['nodes']:>6} {r['job_gpus']:>4} {r['median_ms']:>10.3f} {r['p99_ms']:>8.3f} "
            f"{r['commit_median_ms']:>9.3f} {r['index_build_ms']:>14.2f} {r['nodes_used']:>10} {opt:>22}"
        )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)


if __name__ == "__main__":
    main()
