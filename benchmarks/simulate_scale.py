"""Simulator wall time at scale: a 10,000-job trace on 1,000 nodes x 8 V100 (preset dgx1v).

The trace comes from `ringleader simulate gen-trace` (seed 1; Poisson arrivals at 2,000 jobs/hour,
0.25 jobs/hour per GPU, the per-GPU rate of the default 2x8 and 64x8 scenarios); step times come
from the throughput model (ringleader.model.predict_placement), memoised by placement shape and
shared between policies, as `ringleader simulate` does; the queue without reservations (its
figures' queue, `--no-reservations`). Prints wall time per policy and what the loop did (place()
calls, failed ones, model evaluations).

    python benchmarks/simulate_scale.py [--nodes 1000] [--jobs 10000] [--rate 2000]
        [--policies topology,default,besteffort,ack] [--profile POLICY] [--json out.json]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import platform
import pstats
import time
from datetime import UTC, datetime

from ringleader.scheduler import NO_RESERVATIONS
from ringleader.sim import Memoised, generate_trace, model_step_time, simulate, summarise
from ringleader.topology import NodeSpec, preset


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--jobs", type=int, default=10000)
    ap.add_argument("--rate", type=float, default=2000.0, help="arrivals, jobs per hour")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--policies", default="topology,default,besteffort,ack")
    ap.add_argument("--profile", metavar="POLICY", help="print a cProfile summary of this policy's run")
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = ap.parse_args()

    specs = [NodeSpec(f"v100-{i}", preset("dgx1v")) for i in range(args.nodes)]
    jobs = generate_trace(args.jobs, args.seed, args.rate, 16)
    memo = Memoised(model_step_time())
    print(f"# {args.jobs} jobs on {args.nodes} nodes x 8 V100 (dgx1v), {args.rate:g} jobs/h, seed {args.seed}")
    when = f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC"
    print(f"# {when}, nproc {os.cpu_count()}, {cpu_model()}, Python {platform.python_version()}")
    print(f"{'policy':<11} {'wall_s':>7} {'place':>6} {'failed':>6} {'model':>6} {'avg_jct_h':>9} {'util':>5}")
    results = []
    for policy in args.policies.split(","):
        profiler = cProfile.Profile() if policy == args.profile else None
        started = time.perf_counter()
        if profiler:
            profiler.enable()
        run = simulate(specs, jobs, policy, memo, backfill=NO_RESERVATIONS)  # the figures' queue
        if profiler:
            profiler.disable()
        wall = time.perf_counter() - started
        s = summarise(run)
        st = run.stats
        print(
            f"{policy:<11} {wall:7.1f} {st.place_calls:6d} {st.failed_places:6d} {st.step_time_misses:6d} "
            f"{s['avg_jct_s'] / 3600:9.2f} {s['gpu_utilization']:5.2f}",
            flush=True,
        )
        results.append({"policy": policy, "wall_s": wall, "stats": vars(st), "summary": s})
        if profiler:
            out = io.StringIO()
            pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(15)
            print(out.getvalue())
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"nodes": args.nodes, "jobs": args.jobs, "rate": args.rate, "results": results}, fh, indent=2)


if __name__ == "__main__":
    main()
