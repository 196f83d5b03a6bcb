"""The queue with and without reservations on a trace of 1-32 GPU gangs: wait by gang size and
GPU utilization, over the simulator (ringleader.sim) and the real scheduler.

The trace is generated here, seeded: Poisson arrivals, gang sizes 1, 2, 4, 8, 16, 32 GPUs
(weights 0.30, 0.20, 0.20, 0.15, 0.10, 0.05; a 32-GPU gang is 4x8 or 8x4), models and iterations
as `ringleader simulate gen-trace`. Every job has a time limit, as a Slurm user gives one: its
predicted run time on an empty cluster (throughput model), packed or spread over nodes whichever
is slower, times a seeded factor in 1.2..3 (users
overestimate), rounded up to a minute. Running it prints one table per queue discipline.

    python benchmarks/sim_reservations.py [--nodes 64] [--jobs 1500] [--rate 110] [--seed 7]
        [--policy topology] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import time
from datetime import UTC, datetime

from ringleader.scheduler import NO_RESERVATIONS, BackfillConfig, ClusterState, JobRequest, place
from ringleader.sim import Memoised, TraceJob, model_step_time, simulate, summarise, wait_by_size
from ringleader.sim.trace import MAX_ITERATIONS, MIN_ITERATIONS, MODELS
from ringleader.topology import NodeSpec, preset

SIZES = {1: 0.30, 2: 0.20, 4: 0.20, 8: 0.15, 16: 0.10, 32: 0.05}
SHAPES = {1: ((1, 1),), 2: ((2, 1), (1, 2)), 4: ((4, 1), (1, 4), (2, 2)), 8: ((8, 1), (1, 8), (2, 4)),
          16: ((2, 8), (4, 4)), 32: ((4, 8), (8, 4))}  # fmt: skip


def gang_trace(n_jobs: int, seed: int, rate_per_h: float, specs: list[NodeSpec], memo: Memoised) -> list[TraceJob]:
    rng = random.Random(seed)
    empty = ClusterState.empty(specs)
    jobs = []
    t = 0.0
    for i in range(n_jobs):
        t += rng.expovariate(rate_per_h / 3600.0)
        size = rng.choices(list(SIZES), list(SIZES.values()))[0]
        workers, gpus = rng.choice(SHAPES[size])
        model, batch = rng.choice(MODELS)
        iterations = int(math.exp(rng.uniform(math.log(MIN_ITERATIONS), math.log(MAX_ITERATIONS))))
        job = TraceJob(f"job-{i:04d}", round(t, 3), workers, gpus, model, batch, iterations)
        step = 0.0
        for topology_aware in (True, False):  # packed and spread: the limit covers either
            placement = place(empty, JobRequest(job.name, workers, gpus, topology_aware=topology_aware)).placement
            assert placement is not None
            step = max(step, memo({n: empty.node(n) for n in placement.nodes}, placement, job).step_time_s)
        limit = math.ceil(iterations * step * rng.uniform(1.2, 3.0) / 60) * 60
        jobs.append(TraceJob(job.name, job.arrival_s, workers, gpus, model, batch, iterations, 0, limit))
    return jobs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--jobs", type=int, default=1500)
    ap.add_argument("--rate", type=float, default=110.0, help="arrivals, jobs per hour")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--policy", default="topology")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()

    specs = [NodeSpec(f"v100-{i}", preset("dgx1v")) for i in range(args.nodes)]
    memo = Memoised(model_step_time())
    jobs = gang_trace(args.jobs, args.seed, args.rate, specs, memo)
    print(f"# {args.jobs} jobs, 1-32 GPU gangs, on {args.nodes} nodes x 8 V100 (dgx1v), {args.rate:g} jobs/h, "
          f"seed {args.seed}, policy {args.policy}")  # fmt: skip
    print(f"# {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, nproc {os.cpu_count()}, load {os.getloadavg()[0]:.2f}")
    queues = {"no reservations": NO_RESERVATIONS, "reservations (depth 2, age 100/24 h)": BackfillConfig()}
    results = []
    for label, config in queues.items():
        started = time.perf_counter()
        run = simulate(specs, jobs, args.policy, memo, backfill=config)
        wall = time.perf_counter() - started
        s = summarise(run)
        waits = wait_by_size(run)
        overran = sum(1 for r in run.records if r.start_s is not None and r.finish_s is not None
                      and r.job.time_limit_s is not None and r.finish_s - r.start_s > r.job.time_limit_s)  # fmt: skip
        print(f"\n## {label}: GPU util {s['gpu_utilization']:.1%}, avg JCT {s['avg_jct_s'] / 3600:.2f} h, "
              f"makespan {s['makespan_s'] / 3600:.1f} h, {overran} job(s) ran past their limit, "
              f"wall {wall:.1f} s")  # fmt: skip
        print(f"{'GPUs':>4} {'jobs':>5} {'p50 wait (h)':>12} {'p95 wait (h)':>12} {'max wait (h)':>12}")
        for size, w in waits.items():
            print(f"{size:>4} {w['jobs']:>5.0f} {w['p50_s'] / 3600:>12.2f} {w['p95_s'] / 3600:>12.2f} "
                  f"{w['max_s'] / 3600:>12.2f}")  # fmt: skip
        results.append({"queue": label, "wall_s": wall, "summary": s, "wait_by_size": waits, "overran": overran})
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"nodes": args.nodes, "jobs": args.jobs, "rate": args.rate, "results": results}, fh, indent=2)


if __name__ == "__main__":
    main()
