"""Moves compared in the simulator: the same trace with and without moving degraded gangs to
their better placement at a checkpoint (``scheduler/move.py``).

Cluster: 16 x DGX-1V (8 V100, NVLink hybrid cube mesh), 25 Gb/s between nodes. Trace: the
philly family (``sim/families.py``: run times from the Philly trace's quantiles), drawn per seed
and offered at each load; each GPU of a gang of up to 8 is a worker of its own (one process per
GPU, as torchrun and mpirun start them: the reference study's job), so such a gang may start
spread over nodes; bigger gangs are whole nodes. Every run is the queue the
engines run (``BackfillConfig()``), start rule ``now`` (every gang starts on whatever fits, so
gangs start degraded), users' estimates biased x0.5-x3, the model's ranges with the default risk
and jobs' true rates off the model's by its held-out errors. A move costs what a preemption
does (``PreemptionCost()``: progress since the last 10-minute checkpoint, 1 min to restart).

"Degraded jobs" are those whose run without moves was on a placement the model prices slower
than their best (the start rule's ``as_good``); their mean JCT is compared, and every job's.

    nice -n 10 python benchmarks/moves.py [--family philly] [--seeds 1,2] [--loads 0.7,0.9] [--jobs 400]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from ringleader.scheduler import BackfillConfig, ClusterState
from ringleader.scheduler.types import as_good
from ringleader.sim import JobRecord, Memoised, PreemptionCost, model_step_time, simulate
from ringleader.sim.families import EstimateError, best_step_fn, family_trace
from ringleader.topology import NodeSpec, preset


def cluster() -> list[NodeSpec]:
    return [NodeSpec(f"v100-{i}", preset("dgx1v"), 25.0) for i in range(16)]


def degraded(record: JobRecord, empty: ClusterState, memo: Memoised, best_step_s: float) -> bool:
    """Whether the model prices the job's placement slower than its best."""
    if record.placement is None:
        return False
    step = memo({n: empty.node(n) for n in record.placement.nodes}, record.placement, record.job)
    return not as_good(best_step_s, step.step_time_s)


def mean_jct(records: list[JobRecord]) -> float:
    return statistics.fmean(r.jct_s or 0.0 for r in records) if records else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", default="philly")
    ap.add_argument("--seeds", default="1,2")
    ap.add_argument("--loads", default="0.7,0.9")
    ap.add_argument("--jobs", type=int, default=400)
    args = ap.parse_args()
    specs = cluster()
    gpus = sum(s.topology.n_gpus for s in specs)
    memo = Memoised(model_step_time())
    best = best_step_fn(specs, memo)
    empty = ClusterState.empty(specs)
    print(f"# 16 x DGX-1V, 25 Gb/s; {args.family}; {args.jobs} jobs; start rule now; biased estimates; "
          f"prediction error; risk averse; load average {os.getloadavg()[0]:.2f}")  # fmt: skip
    print("| load | seed | degraded jobs | moved | mean JCT h, degraded, stay | with moves | "
          "mean JCT h, all, stay | with moves | wall s (stay, moves) |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for load in (float(x) for x in args.loads.split(",")):
        for seed in (int(s) for s in args.seeds.split(",")):
            jobs = family_trace(args.family, args.jobs, seed, load, gpus, best, process_per_gpu=True)
            runs, walls = [], []
            for moves in (False, True):
                started = time.perf_counter()
                runs.append(simulate(specs, jobs, "topology", memo, backfill=BackfillConfig(), start_rule="now",
                                     seed=seed, estimate_error=EstimateError("biased"), risk="averse",
                                     prediction_error=True, preemption=PreemptionCost(), moves=moves))  # fmt: skip
                walls.append(time.perf_counter() - started)
            stay, moved = runs
            slow = {r.job.name for r in stay.records if degraded(r, empty, memo, best(r.job))}
            pick = [[r for r in run.records if r.job.name in slow] for run in runs]
            n_moved = sum(r.moved for r in moved.records)
            print(f"| {load:g} | {seed} | {len(slow)} | {n_moved} | {mean_jct(pick[0]) / 3600:.2f} | "
                  f"{mean_jct(pick[1]) / 3600:.2f} | {mean_jct(stay.records) / 3600:.2f} | "
                  f"{mean_jct(moved.records) / 3600:.2f} | {walls[0]:.0f}, {walls[1]:.0f} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
