"""Fair share between team queues: does each queue's share of the used GPU-time, while every
queue has work waiting, follow its weight?

Cluster: 16 x DGX-1V (128 GPUs), 25 Gb/s. Three queues a, b, c weighted 1:2:1, each offered a
third of a trace of a published family's shape (``sim/families.py``: philly, helios, pai) at a
load above what the cluster holds, so that the queues contend. Quota settings (GPUs of a, b, c):

* ``proportional``: 32/64/32 in one cohort (the weights' shares of the cluster);
* ``proportional-half``: 16/32/16 in one cohort (the cohort may hold only half the cluster);
* ``equal-whole``: 128 each in one cohort (no queue's quota binds alone);
* ``equal-half``: 64 each in one cohort (b's weighted share, 64, is its whole quota);
* ``no-quota``: no quotas, no cohort (weights alone).

The share is counted over the time all three queues had a job waiting (arrived, not running),
as GPU-seconds held per queue over the GPU-seconds all three held then; the target is the
weight's share (25/50/25%).

Every gang may be stopped and resume (each victim keeps its work up to its last checkpoint, every
10 min, and pays a 1 min restart): a queue in a cohort reclaims the quota it lent and, with
``--fair-preemption on`` (the default, ``scheduler/reorder.py``), stops gangs of queues above
their share (Kueue's fairSharing preemption); ``off`` is the queue before it.

    nice -n 10 python benchmarks/fair_share.py [--families philly,helios,pai] [--seeds 1,2,3]
        [--load 1.5] [--jobs 1200] [--settings proportional,...] [--fair-preemption on|off]
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Sequence

from ringleader.scheduler import BackfillConfig
from ringleader.scheduler.reorder import DEFAULT_REORDER, NO_REORDER
from ringleader.scheduler.teams import ANY_TYPE, TeamQueue
from ringleader.sim import Memoised, model_step_time, simulate
from ringleader.sim.families import best_step_fn, family_trace
from ringleader.sim.summary import contended_shares
from ringleader.sim.trace import TraceJob
from ringleader.topology import NodeSpec, preset

NAMES = ("a", "b", "c")
WEIGHTS = (1.0, 2.0, 1.0)
SETTINGS: dict[str, tuple[int, int, int] | None] = {
    "proportional": (32, 64, 32),
    "proportional-half": (16, 32, 16),
    "equal-whole": (128, 128, 128),
    "equal-half": (64, 64, 64),
    "no-quota": None,
}


def cluster() -> list[NodeSpec]:
    return [NodeSpec(f"v100-{i}", preset("dgx1v"), 25.0) for i in range(16)]


def queues_of(quotas: tuple[int, int, int] | None) -> tuple[TeamQueue, ...]:
    if quotas is None:
        return tuple(TeamQueue(n, weight=w) for n, w in zip(NAMES, WEIGHTS, strict=True))
    return tuple(TeamQueue(n, ((ANY_TYPE, q),), w, "lab") for n, q, w in zip(NAMES, quotas, WEIGHTS, strict=True))


def in_queues(jobs: Sequence[TraceJob]) -> list[TraceJob]:
    """Each job in queue a, b or c in turn: every queue offered a third of the load."""
    return [TraceJob(j.name, j.arrival_s, j.workers, j.gpus, j.model, j.batch_size, j.iterations, queue=NAMES[i % 3])
            for i, j in enumerate(jobs)]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--families", default="philly,helios,pai")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--load", type=float, default=1.5)
    ap.add_argument("--jobs", type=int, default=1200)
    ap.add_argument("--settings", default=",".join(SETTINGS))
    ap.add_argument("--fair-preemption", choices=("on", "off"), default="on")
    args = ap.parse_args()
    config = BackfillConfig(reorder=DEFAULT_REORDER if args.fair_preemption == "on" else NO_REORDER)
    specs = cluster()
    gpus = sum(s.topology.n_gpus for s in specs)
    memo = Memoised(model_step_time())
    best = best_step_fn(specs, memo)
    target = {q: w / sum(WEIGHTS) for q, w in zip(NAMES, WEIGHTS, strict=True)}
    print(f"# 16 x DGX-1V; queues a:b:c weighted 1:2:1; {args.jobs} jobs; load {args.load:g}; "
          f"fair-share preemption {args.fair_preemption}; load average {os.getloadavg()[0]:.2f}")  # fmt: skip
    print("| setting | family | seed | a % | b % | c % | worst gap pts | contended h | preempted | wall s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    worst: dict[str, float] = {}
    for setting in args.settings.split(","):
        for family in args.families.split(","):
            for seed in (int(s) for s in args.seeds.split(",")):
                jobs = in_queues(family_trace(family, args.jobs, seed, args.load, gpus, best))
                started = time.perf_counter()
                run = simulate(specs, jobs, "topology", memo, backfill=config, seed=seed,
                               queues=queues_of(SETTINGS[setting]))  # fmt: skip
                wall = time.perf_counter() - started
                shares, contended = contended_shares(run, NAMES)
                gap = max(abs(shares[q] - target[q]) for q in NAMES) * 100
                worst[setting] = max(worst.get(setting, 0.0), gap)
                print(f"| {setting} | {family} | {seed} | {shares['a'] * 100:.1f} | {shares['b'] * 100:.1f} | "
                      f"{shares['c'] * 100:.1f} | {gap:.1f} | {contended / 3600:.1f} | "
                      f"{sum(r.preempted for r in run.records)} | {wall:.1f} |", flush=True)
    print("\n| setting | worst gap to the weights' share, points |\n|---|---:|")
    for setting, gap in worst.items():
        print(f"| {setting} | {gap:.1f} |")


if __name__ == "__main__":
    main()
