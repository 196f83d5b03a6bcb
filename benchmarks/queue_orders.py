"""Queue orders and start rules on traces shaped like published ones (``sim/families.py``).

Cluster: 16 x DGX-1V (8 V100, NVLink hybrid cube mesh), 25 Gb/s between nodes. Each trace
family (philly, helios, pai: GPU counts and run times from the published statistics in
reference.toml ``traces``) is drawn per seed, then offered at each load over its arrival window
(``families.window_load``: the share of the cluster the jobs would hold while they arrive if each
started on arrival, priced on best placements). Every variant runs the queue the engines run
(``BackfillConfig()``: two reservations, age), users' run-time estimates biased x0.5-x3
(``EstimateError("biased")``), jobs' true rates off the model's by its held-out errors
(``prediction_error``), and the engines' default risk (``types.DEFAULT_RISK``) with the model's
ranges.

Variants:
* ``fifo/now``: FIFO, every job starts as soon as it fits (start rule ``now``);
* ``fifo/best``: FIFO, every job waits for a placement as fast as its best (``best``);
* ``fifo/finish``: FIFO, the default start rule (``finish``: whichever finishes first);
* ``fifo/finish-averse``: the same with ``--risk averse`` (waits only where waiting wins at the
  pessimistic end of both likely ranges);
* ``las/finish``, ``srtf/finish``: ringleader's orders (``scheduler/order.py``) with ``finish``;
* ``tiresias``: Tiresias' 2D-LAS as its paper defines it as far as this queue can run it: levels
  by attained GPU-seconds at its simulator's thresholds (3250, 7200, 18000), first in first out
  within a level, promotion to the first level after waiting twice its last run (its STARVELIMIT
  knob, the ``dlas-gpu-2`` run of its simulator), start rule ``now``, without preemption;
* ``las/finish+p``, ``srtf/finish+p``: the same orders with preemption for order
  (``scheduler/reorder.py``: a waiting job stops preemptible jobs of its queue ranked after it,
  where it pays counting the restart; none stopped within 30 min of its start), each victim
  keeping its work up to its last checkpoint (every 10 min) and paying a 1 min restart
  (``sim.PreemptionCost()``);
* ``tiresias+p``: Tiresias' 2D-LAS with its preemption: a job of a lower level stops jobs of
  higher levels whenever it would wait, with no cost weighed and no minimum run (as its paper),
  the same checkpoint and restart cost.

By default a gang of up to a node is one worker holding all its GPUs (it never spreads over
nodes, so the start rules weigh only placements inside a node); ``--process-per-gpu`` makes
each of its GPUs a worker, as torchrun and mpirun start data-parallel jobs.

    nice -n 10 python benchmarks/queue_orders.py [--families philly,helios,pai] [--seeds 1,2,3]
        [--loads 0.5,0.7,0.9,1.0,1.2] [--jobs 1000] [--process-per-gpu]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import dataclass

from ringleader.scheduler import BackfillConfig
from ringleader.scheduler.order import DEFAULT_ORDERS, OrderConfig, QueueOrder, tiresias_thresholds
from ringleader.scheduler.reorder import DEFAULT_REORDER, ReorderConfig
from ringleader.scheduler.types import DEFAULT_RISK
from ringleader.sim import JobRecord, Memoised, PreemptionCost, model_step_time, simulate, summarise
from ringleader.sim.families import EstimateError, best_step_fn, family_trace
from ringleader.topology import NodeSpec, preset

TIRESIAS = OrderConfig(las_thresholds_gpu_s=tiresias_thresholds(), starve_limit_s=None, promote_knob=2.0)
TIRESIAS_PREEMPTS = ReorderConfig(min_run_s=0.0, weighs_cost=False, for_fair_share=False)


@dataclass(frozen=True)
class Variant:
    name: str
    order: QueueOrder
    rule: str
    orders: OrderConfig = DEFAULT_ORDERS
    preempts: bool = False  # jobs may be stopped (and resume) for the order
    reorder: ReorderConfig = DEFAULT_REORDER
    risk: str = DEFAULT_RISK  # how rule finish weighs the model's ranges


VARIANTS = (
    Variant("fifo/now", QueueOrder.FIFO, "now"),
    Variant("fifo/best", QueueOrder.FIFO, "best"),
    Variant("fifo/finish", QueueOrder.FIFO, "finish"),
    Variant("fifo/finish-averse", QueueOrder.FIFO, "finish", risk="averse"),
    Variant("las/finish", QueueOrder.LAS, "finish"),
    Variant("srtf/finish", QueueOrder.SRTF, "finish"),
    Variant("tiresias", QueueOrder.LAS, "now", TIRESIAS),
    Variant("las/finish+p", QueueOrder.LAS, "finish", preempts=True),
    Variant("srtf/finish+p", QueueOrder.SRTF, "finish", preempts=True),
    Variant("tiresias+p", QueueOrder.LAS, "now", TIRESIAS, preempts=True, reorder=TIRESIAS_PREEMPTS),
)


def cluster() -> list[NodeSpec]:
    return [NodeSpec(f"v100-{i}", preset("dgx1v"), 25.0) for i in range(16)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--families", default="philly,helios,pai")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--loads", default="0.5,0.7,0.9,1.0,1.2")
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--variants", default=",".join(v.name for v in VARIANTS))
    ap.add_argument("--process-per-gpu", action="store_true",
                    help="each GPU of a gang of up to a node a worker of its own (it may start spread)")
    args = ap.parse_args()
    specs = cluster()
    gpus = sum(s.topology.n_gpus for s in specs)
    memo = Memoised(model_step_time())
    best = best_step_fn(specs, memo)
    chosen = [v for v in VARIANTS if v.name in args.variants.split(",")]
    shape = "a process per GPU" if args.process_per_gpu else "one process per gang of up to a node"
    print(f"# 16 x DGX-1V, 25 Gb/s; {args.jobs} jobs, {shape}; biased estimates x0.5-x3; prediction error; "
          f"default risk {DEFAULT_RISK}; load average {os.getloadavg()[0]:.2f}")  # fmt: skip
    print("| family | load | seed | variant | mean JCT h | p95 JCT h | mean queue h | longest wait h | preempted "
          "| wall s |")  # fmt: skip
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    results: dict[tuple[str, float, str], list[dict[str, float]]] = {}
    for family in args.families.split(","):
        for seed in (int(s) for s in args.seeds.split(",")):
            for load in (float(x) for x in args.loads.split(",")):
                jobs = family_trace(family, args.jobs, seed, load, gpus, best, process_per_gpu=args.process_per_gpu)
                for variant in chosen:
                    config = BackfillConfig(order=variant.order, orders=variant.orders, reorder=variant.reorder)
                    started = time.perf_counter()
                    run = simulate(specs, jobs, "topology", memo, backfill=config, start_rule=variant.rule, seed=seed,
                                   estimate_error=EstimateError("biased"), risk=variant.risk, prediction_error=True,
                                   preemption=PreemptionCost() if variant.preempts else None)  # fmt: skip
                    wall = time.perf_counter() - started
                    s = summarise(run)
                    longest = max((waited(r) for r in run.records), default=0.0)
                    row = {"mean": s["avg_jct_s"], "p95": s["p95_jct_s"], "queue": s["avg_queue_s"], "longest": longest,
                           "preempted": float(sum(r.preempted for r in run.records))}  # fmt: skip
                    results.setdefault((family, load, variant.name), []).append(row)
                    print(f"| {family} | {load:g} | {seed} | {variant.name} | {row['mean'] / 3600:.2f} | "
                          f"{row['p95'] / 3600:.2f} | {row['queue'] / 3600:.2f} | {longest / 3600:.2f} | "
                          f"{row['preempted']:.0f} | {wall:.1f} |",
                          flush=True)  # fmt: skip
    summary_table(results, [v.name for v in chosen])


def waited(record: JobRecord) -> float:
    """All the time a job spent waiting: before its first run and, preempted, between its runs."""
    if record.jct_s is None:
        return record.queue_s or 0.0
    return record.jct_s - sum(end - start for start, end in record.runs)


def summary_table(results: dict[tuple[str, float, str], list[dict[str, float]]], names: list[str]) -> None:
    """Per family and load, means over seeds, as ratios to fifo/now (and the start-rule check)."""
    print()
    print("| family | load | mean JCT h, fifo/now | " + " | ".join(f"{n} / fifo/now" for n in names[1:])
          + " | finish vs better of now, best (mean; p95) | longest wait vs fifo/now's, best order"
          + " | best order vs tiresias+p |")  # fmt: skip
    print("|---|---:|---:|" + "---:|" * (len(names) - 1) + "---:|---:|---:|")
    for family, load in sorted({(f, lo) for f, lo, _ in results}):

        def mean(name: str, key: str, family: str = family, load: float = load) -> float:
            return statistics.fmean(r[key] for r in results[(family, load, name)])

        base = mean("fifo/now", "mean")
        ratios = " | ".join(f"{mean(n, 'mean') / base:.2f}" for n in names[1:])
        check = "-"
        rules = [n for n in names if n.startswith("fifo/finish")]
        if {"fifo/now", "fifo/best"} <= set(names) and rules:
            better = min(mean("fifo/now", "mean"), mean("fifo/best", "mean"))
            better_p95 = min(mean("fifo/now", "p95"), mean("fifo/best", "p95"))
            check = ", ".join(f"{n.removeprefix('fifo/')} {mean(n, 'mean') / better - 1:+.1%}; "
                              f"{mean(n, 'p95') / better_p95 - 1:+.1%}" for n in rules)  # fmt: skip
        orders = [n for n in names if n.startswith(("las", "srtf"))]
        wait = against = "-"
        if orders:
            top = min(orders, key=lambda n: mean(n, "mean"))
            fifo_longest = mean("fifo/now", "longest")
            wait = f"{top}: {mean(top, 'longest') / fifo_longest:.2f}x" if fifo_longest else f"{top}: nobody waited"
            if "tiresias+p" in names:
                against = f"{mean(top, 'mean') / mean('tiresias+p', 'mean'):.2f}x"
        print(f"| {family} | {load:g} | {base / 3600:.2f} | {ratios} | {check} | {wait} | {against} |")


if __name__ == "__main__":
    main()
