"""Start rules compared in the simulator: start degraded now, always wait for the best placement,
and take whichever finishes first (``types.StartRule``), over a sweep of load.

Two clusters:
* ``2x8`` -- the reference study's 2 x DGX-1V (8 V100, NVLink hybrid cube mesh), 25 GbE between;
  gangs of 1-16 GPUs as ``ringleader simulate gen-trace`` draws them (its SIZE_WEIGHTS);
* ``1000`` -- 1,000 x DGX-1V on a 3-level tree: racks of 32 nodes (uplinks 4:1), pods of 8 racks
  (2:1), one spine; 100 Gb/s per node. Gangs of 1-4 GPUs on one node and 1-16 whole nodes
  (``NODE_GANGS`` below).

Job mix (both): models and per-GPU batches from the simulator's list, iterations log-uniform in
500-20,000 (minutes to hours on these GPUs); gang sizes skewed small. The shape follows what the
Philly trace study reports (Jeon et al., "Analysis of Large-Scale Multi-Tenant GPU Clusters for
DNN Training Workloads", USENIX ATC 2019: most jobs use few GPUs, a minority of large gangs holds
most GPU time, run times spread over orders of magnitude); the weights are ours, not fitted to
that trace. Arrivals are Poisson; the sweep scales the arrival rate so the offered load (GPU
seconds of work on best placements per GPU second of arrivals) runs from light to overloaded.

A share of the jobs (``--urgent``, default 20%) has priority 10, the rest 0, as a team's
production runs beside experiments. Each rule runs without and with preemption (``--preempt``:
victims keep what they trained up to their last checkpoint, every 10 min of their run, and pay
1 min to restart).

Every rule runs the same trace with the same queue (no reservations beyond those the rules
make: ``NO_RESERVATIONS``, the queue engines run when a job asks nothing of it); the simulator
predicts with the same model it prices runs with, plus each gang's uplink share where there is
a tree. ``--error E`` multiplies every job's work as the queue sees it by a seeded factor in
[1/(1+E), 1+E] (users misjudge their run time; the runs themselves are unchanged).

    python benchmarks/start_rules.py --cluster 2x8 [--jobs 400] [--seeds 1,2,3] [--loads 0.5,0.7,0.9,1.1]
        [--urgent 0.2] [--preempt]
    python benchmarks/start_rules.py --cluster 1000 --jobs 6000 --seeds 1 --loads 1.05,1.2
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import time
from dataclasses import replace

from ringleader.scheduler import NO_RESERVATIONS, ClusterState, JobRequest, place
from ringleader.sim import Memoised, PreemptionCost, TraceJob, model_step_time, simulate, summarise
from ringleader.sim.trace import MAX_ITERATIONS, MIN_ITERATIONS, MODELS, SHAPES, SIZE_WEIGHTS
from ringleader.topology import Level, NetworkPlace, NodeSpec, preset

RULES = ("now", "best", "finish")
# 1000-node cluster: (workers, GPUs per worker) -> weight. Single-node jobs 70%, whole-node gangs 30%.
NODE_GANGS: dict[tuple[int, int], float] = {
    (1, 1): 0.25, (2, 1): 0.10, (4, 1): 0.15, (1, 4): 0.05, (8, 1): 0.05, (1, 8): 0.10,
    (2, 8): 0.10, (4, 8): 0.08, (8, 8): 0.07, (16, 8): 0.05,
}  # fmt: skip


def cluster(kind: str) -> list[NodeSpec]:
    if kind == "2x8":
        return [NodeSpec(f"v100-{i}", preset("dgx1v"), 25.0) for i in range(2)]
    levels = (Level("rack", oversubscription=4.0), Level("pod", oversubscription=2.0), Level("spine"))
    return [NodeSpec(f"node-{i}", preset("dgx1v"), 100.0, (), True,
                     network=NetworkPlace(levels, (f"rack-{i // 32}", f"pod-{i // 256}", "spine")))
            for i in range(1000)]  # fmt: skip


def shapes(kind: str) -> tuple[list[tuple[int, int]], list[float]]:
    if kind == "2x8":
        pairs = [(shape, SIZE_WEIGHTS[size] / len(SHAPES[size])) for size in SIZE_WEIGHTS for shape in SHAPES[size]]
    else:
        pairs = list(NODE_GANGS.items())
    return [p for p, _ in pairs], [w for _, w in pairs]


def draw_jobs(kind: str, n_jobs: int, seed: int, urgent: float = 0.0,
              iterations_range: tuple[int, int] = (MIN_ITERATIONS, MAX_ITERATIONS)) -> list[TraceJob]:  # fmt: skip
    """Jobs without arrival times yet (arrival 0): shapes, models, iterations, priorities."""
    low, high = iterations_range
    rng = random.Random(seed)
    ranks = random.Random(seed + 104729)  # its own stream: the shapes do not depend on --urgent
    options, weights = shapes(kind)
    jobs = []
    for i in range(n_jobs):
        workers, gpus = rng.choices(options, weights)[0]
        model, batch = rng.choice(MODELS)
        iterations = int(math.exp(rng.uniform(math.log(low), math.log(high))))
        priority = 10 if ranks.random() < urgent else 0
        jobs.append(TraceJob(f"job-{i:05d}", 0.0, workers, gpus, model, batch, iterations, priority))
    return jobs


def best_gpu_seconds(specs: list[NodeSpec], jobs: list[TraceJob], memo: Memoised) -> float:
    empty = ClusterState.empty(specs)
    total = 0.0
    for job in jobs:
        placement = place(empty, JobRequest(job.name, job.workers, job.gpus), "topology").placement
        assert placement is not None
        step = memo({n: empty.node(n) for n in placement.nodes}, placement, job).step_time_s
        total += job.iterations * step * job.workers * job.gpus
    return total


def with_arrivals(jobs: list[TraceJob], rate_per_s: float, seed: int) -> list[TraceJob]:
    rng = random.Random(seed * 7919 + 1)
    t, out = 0.0, []
    for job in jobs:
        t += rng.expovariate(rate_per_s)
        out.append(replace(job, arrival_s=round(t, 3)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cluster", choices=("2x8", "1000"), default="2x8")
    ap.add_argument("--jobs", type=int, default=400)
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--loads", default="0.5,0.7,0.9,1.1")
    ap.add_argument("--error", type=float, default=0.0)
    ap.add_argument("--policy", default="topology")
    ap.add_argument("--urgent", type=float, default=0.2)
    ap.add_argument("--preempt", action="store_true", help="also run every rule with preemption")
    ap.add_argument("--iterations", default=f"{MIN_ITERATIONS},{MAX_ITERATIONS}",
                    help="MIN,MAX of the log-uniform iterations per job (default: the trace generator's)")
    args = ap.parse_args()
    low, high = (int(x) for x in args.iterations.split(","))
    specs = cluster(args.cluster)
    gpus = sum(s.topology.n_gpus for s in specs)
    memo = Memoised(model_step_time())
    print(f"# {args.cluster}: {len(specs)} nodes, {gpus} GPUs; {args.jobs} jobs; policy {args.policy}; "
          f"work error {args.error:g}; urgent {args.urgent:g}; iterations {low}-{high} log-uniform; "
          f"load average {os.getloadavg()[0]:.2f}")  # fmt: skip
    print("| load | seed | rule | mean JCT h | p95 JCT h | mean queue h | urgent mean JCT h | preempted | multi-node "
          "| wall s |")  # fmt: skip
    print("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    variants = [(rule, None) for rule in RULES]
    if args.preempt:
        variants += [(rule, PreemptionCost(checkpoint_s=600.0, restart_s=60.0)) for rule in RULES]
    totals: dict[tuple[float, str], list[float]] = {}
    for seed in (int(s) for s in args.seeds.split(",")):
        drawn = draw_jobs(args.cluster, args.jobs, seed, args.urgent, (low, high))
        work = best_gpu_seconds(specs, drawn, memo)
        for load in (float(x) for x in args.loads.split(",")):
            # offered load = work / (GPUs x arrival span); span = jobs / rate
            rate = load * gpus * args.jobs / work
            jobs = with_arrivals(drawn, rate, seed)
            for rule, preemption in variants:
                name = rule + ("+preempt" if preemption else "")
                started = time.perf_counter()
                run = simulate(specs, jobs, args.policy, memo, backfill=NO_RESERVATIONS, start_rule=rule,
                               work_error=args.error, seed=seed, preemption=preemption)  # fmt: skip
                wall = time.perf_counter() - started
                s = summarise(run)
                totals.setdefault((load, name), []).append(s["avg_jct_s"])
                totals.setdefault((load, name + ":p95"), []).append(s["p95_jct_s"])
                hours = " | ".join(f"{s[key] / 3600:.2f}" for key in ("avg_jct_s", "p95_jct_s", "avg_queue_s"))
                urgent = [r.jct_s for r in run.records if r.job.priority and r.jct_s is not None]
                urgent_h = f"{statistics.fmean(urgent) / 3600:.2f}" if urgent else "-"
                stopped = sum(r.preempted for r in run.records)
                share = f"{s['multi_node_share']:.1%}"
                print(f"| {load:g} | {seed} | {name} | {hours} | {urgent_h} | {stopped} | {share} | {wall:.1f} |",
                      flush=True)  # fmt: skip
    print()
    print("| load | mean JCT now / best / finish (h) | finish vs better | finish vs worse | p95 finish vs better |")
    print("|---:|---|---:|---:|---:|")
    for suffix in ("", "+preempt") if args.preempt else ("",):
        for load in sorted({k[0] for k in totals}):
            mean = {r: statistics.fmean(totals[(load, r + suffix)]) for r in RULES}
            p95 = {r: statistics.fmean(totals[(load, r + suffix + ":p95")]) for r in RULES}
            better, worse = sorted((mean["now"], mean["best"]))
            p95_better = min(p95["now"], p95["best"])
            hours = " / ".join(f"{mean[r] / 3600:.2f}" for r in RULES)
            print(f"| {load:g}{suffix} | {hours} | {mean['finish'] / better - 1:+.1%} | "
                  f"{mean['finish'] / worse - 1:+.1%} | {p95['finish'] / p95_better - 1:+.1%} |")  # fmt: skip


if __name__ == "__main__":
    main()
