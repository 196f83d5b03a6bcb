"""Simulated JCT and per-level fragmentation with and without network-aware placement.

A cluster of 8-GPU nodes (preset dgx-a100, 200 Gb/s InfiniBand each) in racks under one spine,
the racks' uplinks oversubscribed (default 384 nodes in 16 racks of 24, 3:1). A Poisson trace of
gangs of 8 GPUs per worker, sized 1-16 nodes (many small, a few large), models from the
simulator's list. The same trace runs under each policy twice: placement seeing the tree
(network-aware) and placement blind to it (today's placement); the model prices every run with
the tree, each gang getting its share of the uplinks it crosses when it starts (sim/network.py).
The queue is the one without reservations (`NO_RESERVATIONS`), as its figures were measured.

    python benchmarks/network_sim.py [--nodes 384] [--rack 24] [--ratio 3] [--jobs 1500] [--rate 60]
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import random
import time

from ringleader.scheduler import NO_RESERVATIONS
from ringleader.sim.engine import simulate
from ringleader.sim.steptime import Memoised, model_step_time
from ringleader.sim.summary import summarise
from ringleader.sim.trace import MODELS, TraceJob
from ringleader.topology import Level, NetworkPlace, NodeSpec, preset

NODES_PER_GANG = {1: 0.35, 2: 0.25, 4: 0.2, 8: 0.12, 16: 0.08}


def cluster(nodes: int, rack: int, ratio: float) -> list[NodeSpec]:
    levels = (Level("rack", oversubscription=ratio), Level("spine"))
    topo = preset("dgx-a100")
    return [NodeSpec(f"node-{i}", topo, 200.0, (), True, network=NetworkPlace(levels, (f"rack-{i // rack}", "spine")))
            for i in range(nodes)]  # fmt: skip


def trace(jobs: int, rate_per_h: float, seed: int) -> list[TraceJob]:
    rng = random.Random(seed)
    sizes, weights = list(NODES_PER_GANG), list(NODES_PER_GANG.values())
    t, out = 0.0, []
    for i in range(jobs):
        t += rng.expovariate(rate_per_h / 3600.0)
        model, batch = rng.choice(MODELS)
        iterations = int(math.exp(rng.uniform(math.log(500), math.log(20000))))
        out.append(TraceJob(f"job-{i:05d}", round(t, 3), rng.choices(sizes, weights)[0], 8, model, batch, iterations))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=384)
    parser.add_argument("--rack", type=int, default=24)
    parser.add_argument("--ratio", type=float, default=3.0)
    parser.add_argument("--jobs", type=int, default=1500)
    parser.add_argument("--rate", type=float, default=60.0, help="arrivals per hour")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--policies", default="topology,default")
    args = parser.parse_args()
    print(f"# {platform.node()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {args.nodes} nodes x 8 GPUs, racks of "
          f"{args.rack} at {args.ratio:g}:1 under one spine; {args.jobs} jobs at {args.rate:g}/h, "
          f"seed {args.seed}")  # fmt: skip
    specs, jobs = cluster(args.nodes, args.rack, args.ratio), trace(args.jobs, args.rate, args.seed)
    step = Memoised(model_step_time())
    print("| policy | placement | avg JCT h | p95 JCT h | avg queue h | multi-node gangs across racks |"
          " whole racks free | frag rack | frag spine | wall s |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    for policy in args.policies.split(","):
        for aware in (True, False) if policy == "topology" else (False,):  # only topology reads the tree
            t0 = time.perf_counter()
            run = simulate(specs, jobs, policy, step, backfill=NO_RESERVATIONS, network_aware=aware)
            wall = time.perf_counter() - t0
            s = summarise(run)
            across, frag = s["cross_leaf_share"], s["level_fragmentation"]
            print(f"| {policy} | {'network-aware' if aware else 'tree hidden'} | {s['avg_jct_s'] / 3600:.2f} | "
                  f"{s['p95_jct_s'] / 3600:.2f} | {s['avg_queue_s'] / 3600:.2f} | {100 * across:.0f}% | "
                  f"{s['level_whole_free'][0]:.2f} | {frag[0]:.2f} | {frag[1]:.2f} | {wall:.1f} |")  # fmt: skip


if __name__ == "__main__":
    main()
