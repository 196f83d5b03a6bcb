"""Placement on a cluster with a network tree: decision time at scale, optimality against brute force.

1. Scale: 10,000 nodes of 8 x V100 (preset dgx1v) in racks of 32, 8 racks to a spine, spines
   under one core (3 levels, racks 4:1 and spines 2:1 oversubscribed), half of all GPUs taken at
   random; multi-node gangs (16, 32 and 64 one-GPU workers, 4 and 8 four-GPU workers, 2 and 4
   eight-GPU workers), topology policy. As in benchmarks/placement.py the decision is timed on
   a built snapshot (its group index made once, as a scheduler carries it from commit to
   commit), as wall time and as this process's CPU time (what a loaded machine does not
   inflate); the wall time of a decision made right after a commit (the group index and the
   per-switch counts updated for the touched node) is given beside it.
2. Optimality (``--optimality N``): random 2- and 3-level trees of 4-GPU nodes with random busy
   GPUs and random gangs; every set of nodes that can hold the gang is enumerated and the least
   (span level, nodes, GPUs left free under the spanning switch) compared with the decision's.

    python benchmarks/network_placement.py [--nodes 10000] [--decisions 300] [--optimality 2000]
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import random
import statistics
import time

from ringleader.scheduler import ClusterState, JobRequest, NodeState, place
from ringleader.topology import Level, NetworkPlace, NodeSpec, preset

SHAPES = ((16, 1), (32, 1), (64, 1), (4, 4), (8, 4), (2, 8), (4, 8))
LEVELS = (Level("rack", oversubscription=4.0), Level("spine", oversubscription=2.0), Level("core"))


def tree_cluster(nodes: int, rack: int, racks_per_spine: int, rng: random.Random) -> ClusterState:
    topo = preset("dgx1v")
    all_gpus = [(n, g) for n in range(nodes) for g in range(8)]
    taken: dict[int, list[int]] = {}
    for n, g in rng.sample(all_gpus, len(all_gpus) // 2):
        taken.setdefault(n, []).append(g)
    out = []
    for n in range(nodes):
        r = n // rack
        place = NetworkPlace(LEVELS, (f"rack-{r}", f"spine-{r // racks_per_spine}", "core"))
        spec = NodeSpec(f"node-{n}", topo, 200.0, (), True, network=place)
        out.append(NodeState(spec, tuple((g, "busy") for g in sorted(taken.get(n, [])))))
    return ClusterState(tuple(out))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def scale(nodes: int, decisions: int, seed: int) -> None:
    rng = random.Random(seed)
    state = tree_cluster(nodes, 32, 8, rng)
    _ = state.groups  # the snapshot's index, as a scheduler keeps it
    print(f"{nodes} nodes, {len(state.groups)} groups, {state.free_gpus} of {state.total_gpus} GPUs free")
    print("| gang | decisions | wall median ms | wall p99 ms | CPU median ms | CPU p99 ms | "
          "after a commit: wall median ms | wall p99 ms | span |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for workers, gpus in SHAPES:
        job = JobRequest("g", workers, gpus, topology_aware=True)
        place(state, job)  # warm the memoised per-topology searches
        times, cpu, spans = [], [], set()
        for _ in range(decisions):
            t0, c0 = time.perf_counter(), time.process_time()
            decision = place(state, job)
            times.append((time.perf_counter() - t0) * 1e3)
            cpu.append((time.process_time() - c0) * 1e3)
            assert decision.ok and decision.chosen is not None
            span = -int(decision.chosen.objective_dict().get("-span_level", 1))
            spans.add(LEVELS[span].name if 0 <= span < len(LEVELS) else "node")
        after = []
        moving = state
        for i in range(min(decisions, 50)):
            other = place(moving, JobRequest(f"o{i}", 1, 1, topology_aware=True))
            assert other.placement is not None
            moving = moving.with_placement(other.placement)  # a commit: a new snapshot
            t0 = time.perf_counter()
            place(moving, job)
            after.append((time.perf_counter() - t0) * 1e3)
        print(f"| {workers} x {gpus} GPU | {decisions} | {statistics.median(times):.2f} | "
              f"{percentile(times, 0.99):.2f} | {statistics.median(cpu):.2f} | {percentile(cpu, 0.99):.2f} | "
              f"{statistics.median(after):.2f} | {percentile(after, 0.99):.2f} | "
              f"{'/'.join(sorted(spans))} |")  # fmt: skip


def random_tree(rng: random.Random) -> ClusterState:
    three = rng.random() < 0.5
    levels = (Level("rack"), Level("spine"), Level("core"))[: 3 if three else 2]
    nodes = []
    for s in range(rng.randint(1, 2) if three else 1):
        for r in range(rng.randint(1, 3 if three else 4)):
            for i in range(rng.randint(1, 2 if three else 3)):
                busy = sorted(rng.sample(range(4), rng.randint(0, 4)))
                path = (f"rack-{s}-{r}", f"spine-{s}", "core")[: len(levels)]
                spec = NodeSpec(f"s{s}r{r}n{i}", preset("pcie-4gpu-workstation"), 100.0, (), True,
                                network=NetworkPlace(levels, path))  # fmt: skip
                nodes.append(NodeState(spec, tuple((g, "x") for g in busy)))
    return ClusterState(tuple(nodes))


def brute_force(state: ClusterState, job: JobRequest) -> tuple[int, int, int] | None:
    levels = len(state.nodes[0].spec.switches)
    best = None
    for size in range(1, min(len(state.nodes), job.workers) + 1):
        for subset in itertools.combinations(state.nodes, size):
            caps = [ns.n_free // job.gpus_per_worker for ns in subset]
            if min(caps) < 1 or sum(caps) < job.workers:
                continue
            if size == 1:
                key = (-1, 1, 0)
            else:
                paths = [ns.spec.switches for ns in subset]
                span = next((k for k in range(levels) if len({p[k] for p in paths}) == 1), levels)
                under = [ns for ns in state.nodes if ns.n_free >= job.gpus_per_worker
                         and (span == levels or ns.spec.switches[span] == paths[0][span])]  # fmt: skip
                key = (span, size, sum(ns.n_free for ns in under) - job.total_gpus)
            best = key if best is None or key < best else best
    return best


def optimality(cases: int, seed: int) -> None:
    rng = random.Random(seed)
    by_depth = {2: [0, 0], 3: [0, 0]}
    for _ in range(cases):
        state = random_tree(rng)
        job = JobRequest("g", rng.randint(2, 8), rng.randint(1, 4), topology_aware=True)
        best = brute_force(state, job)
        if best is None or best[0] < 0:
            continue  # no fit, or one node: not a question of the tree
        decision = place(state, job)
        got = decision.chosen.objective_dict() if decision.chosen else {}
        key = (-int(got.get("-span_level", 9)), decision.chosen.metrics.nodes_used if decision.chosen else 0,
               -int(got.get("-switch_free_after", 0)))  # fmt: skip
        depth = len(state.nodes[0].spec.switches)
        by_depth[depth][0] += key == best
        by_depth[depth][1] += 1
    for depth, (ok, total) in by_depth.items():
        print(f"{depth}-level trees: {ok}/{total} multi-node decisions optimal ({100 * ok / max(total, 1):.1f}%)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--decisions", type=int, default=300)
    parser.add_argument("--optimality", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    print(f"# {platform.node()} {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.2f}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")  # fmt: skip
    if args.optimality:
        optimality(args.optimality, args.seed)
    if args.nodes:
        scale(args.nodes, args.decisions, args.seed)


if __name__ == "__main__":
    main()
