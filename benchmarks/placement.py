"""Placement decision time and single-node optimality at cluster scale.

Synthetic clusters of 8xV100 hybrid-cube-mesh nodes (preset dgx1v) with half of all GPUs taken
at random; jobs of 1, 2, 4, 8 and 16 GPUs (workers x 1 GPU) under the topology policy.

A scheduler keeps its cluster snapshot up to date incrementally, so the decision time is measured
on a built snapshot (its group index made once, as `with_placement` carries it from commit to
commit); the memoised per-topology searches are warm after one warm-up decision. The table also
gives the one-off cost of building a snapshot's index from scratch and of a decision plus its
commit (`with_placement`), so nothing is hidden.

    python benchmarks/placement.py [--sizes 100,1000,10000] [--decisions 200] [--json out.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import platform
import random
import statistics
import time

from ringleader.scheduler import ClusterState, JobRequest, NodeState, place
from ringleader.topology import NodeSpec, preset

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--decisions", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--check-clusters", type=int, default=20, help="fresh clusters per cell, optimality check")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        rows.extend(measure(size, args.decisions, args.seed, args.check_clusters))
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
