"""`ringleader simulate`: compare placement policies on a job trace; `simulate gen-trace`."""

from __future__ import annotations

from typing import Any

import click

from ringleader.cli.output import console, emit_data, output_option, step_progress, table
from ringleader.cli.params import FiniteFloat, count
from ringleader.errors import UsageError
from ringleader.scheduler import NO_RESERVATIONS
from ringleader.scheduler.cycle import DEFAULT_BACKFILL
from ringleader.scheduler.order import QueueOrder
from ringleader.scheduler.types import RISKS
from ringleader.sim import (
    NodeFailures,
    PreemptionCost,
    compare_policies,
    generate_trace,
    load_trace,
    parse_policies,
    write_outputs,
    write_trace,
)
from ringleader.sim.compare import parse_start_rules, table_rows
from ringleader.sim.families import FAMILIES, best_step_fn, family_trace, parse_estimate_error
from ringleader.sim.summary import coincidence_notes, utilization_note
from ringleader.topology import load_cluster_file
from ringleader.topology.cluster import check_name


class _DefaultRunGroup(click.Group):
    """A group whose options, given without a subcommand, go to ``run``."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("-h", "--help"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


@click.group("simulate", cls=_DefaultRunGroup)
def simulate_group() -> None:
    """Simulate a job trace on a declared cluster under several placement policies.

    `ringleader simulate --cluster C --trace T` is `ringleader simulate run ...`.
    """


@simulate_group.command("run")
@click.option("--cluster", "cluster_file", required=True, type=click.Path(dir_okay=False), help="Cluster YAML file.")
@click.option("--trace", "trace_file", required=True, type=click.Path(dir_okay=False), help="Job trace CSV.")
@click.option(
    "--policies", default="topology,default,besteffort,ack", show_default=True,
    help="Comma-separated policy names to compare.",
)  # fmt: skip
@click.option(
    "--out", "out_dir", type=click.Path(file_okay=False),
    help="Write results.json, CSVs, PNG plots and one self-contained report.html here.",
)  # fmt: skip
@click.option(
    "--no-reservations", is_flag=True,
    help="Backfill without reservations or age: any job that fits starts, and a big gang waits for "
         "the free GPUs no smaller job takes (faster). Default: the engines' queue, 2 reservations and age.",
)  # fmt: skip
@click.option(
    "--max-failures", default=32, show_default=True, type=click.IntRange(min=1),
    help="Failed placement attempts allowed per scheduling pass (with --no-reservations).",
)  # fmt: skip
@click.option(
    "--start", "start_rules", metavar="RULES",
    help="Also compare start rules, e.g. now,best,finish: every job waits or starts degraded by the rule "
         "(finish: whichever the model predicts finishes first; its work is its iterations on its best placement).",
)  # fmt: skip
@click.option(
    "--preempt",
    is_flag=True,
    help="Jobs of higher priority may preempt lower ones (requeued; they keep their 10-minute checkpoints).",
)
@click.option(
    "--moves",
    is_flag=True,
    help="A gang that runs degraded moves to its better placement once it frees, when it finishes sooner "
    "counting the restart (as the engines move --preemptible jobs; 10-minute checkpoints, a 1-minute restart).",
)
@click.option(
    "--queues",
    "queues_file",
    type=click.Path(dir_okay=False),
    help="Team queues (YAML: quotas, weights, cohorts; docs/queues.md) the trace's `queue` column names.",
)
@click.option(
    "--node-mtbf",
    "mtbf_h",
    type=FiniteFloat(0.0, 1e7, low_open=True),
    metavar="HOURS",
    help="Nodes fail, each after this many hours on average; their gangs restart from their last "
    "10-minute checkpoint (--max-restarts).",
)
@click.option(
    "--order",
    type=click.Choice([o.value for o in QueueOrder]),
    default="fifo",
    show_default=True,
    help="Queue order within a priority: fifo, las (least attained GPU service first) or srtf "
    "(shortest predicted remaining time first, none passed over more than 4 h).",
)
@click.option(
    "--estimate-error",
    "estimate_error",
    metavar="MODEL",
    help="How users misjudge their run time, as the queue sees it: biased (x0.5-x3, mostly over), "
    "lognormal[:SIGMA] or uniform[:E].",
)
@click.option(
    "--risk",
    type=click.Choice(list(RISKS)),
    help="Give every job this risk and the queue the model's likely ranges, as the engines do "
    "(default: a plain estimate, no ranges).",
)
@click.option(
    "--prediction-error",
    is_flag=True,
    help="Each job really runs at a rate off the model's by a draw from its held-out errors.",
)
@click.option(
    "--repair",
    "repair_h",
    type=FiniteFloat(0.0, 1e6),
    default=1.0,
    show_default=True,
    metavar="HOURS",
    help="How long a failed node stays out (with --node-mtbf).",
)
@output_option("json")
def run_cmd(
    cluster_file: str, trace_file: str, policies: str, out_dir: str | None, no_reservations: bool, max_failures: int,
    start_rules: str | None, preempt: bool, moves: bool, queues_file: str | None, mtbf_h: float | None, order: str,
    estimate_error: str | None, risk: str | None, prediction_error: bool, repair_h: float, output: str,
) -> None:  # fmt: skip
    """Run the trace under each policy; print JCT, queueing, makespan, utilization, throughput."""
    from ringleader.sim.queues_file import load_queues

    names = parse_policies(policies)
    rules = parse_start_rules(start_rules) if start_rules is not None else []
    specs = load_cluster_file(cluster_file)
    jobs = load_trace(trace_file)
    queues = load_queues(queues_file) if queues_file is not None else ()
    failures = NodeFailures(mtbf_h * 3600, repair_h * 3600) if mtbf_h else None
    misjudged = parse_estimate_error(estimate_error) if estimate_error is not None else None
    runs = len(names) * max(len(rules), 1)
    with step_progress(runs + (1 if out_dir else 0), output == "table") as step:
        result = compare_policies(specs, jobs, names, max_failures=max_failures,
                                  on_policy=lambda p: step(f"simulating {p}"), start_rules=rules,
                                  preemption=PreemptionCost() if preempt else None, queues=queues,
                                  failures=failures, order=QueueOrder(order), estimate_error=misjudged, risk=risk,
                                  prediction_error=prediction_error,
                                  backfill=NO_RESERVATIONS if no_reservations else DEFAULT_BACKFILL,
                                  moves=moves)  # fmt: skip
        step("writing plots and report")
        written = write_outputs(result, out_dir, title=f"{len(jobs)} jobs, {len(specs)} nodes") if out_dir else []
    if output == "json":
        data: dict[str, Any] = result.as_dict()
        data["files"] = [str(p) for p in written]
        emit_data(data, "json")
        return

    headers, rows = table_rows(result)
    con = console()
    con.print(table(headers, rows))
    if queues:
        con.print(table(["POLICY", "QUEUE", "JOBS", "GPU_HOURS", "SHARE", "WEIGHT_SHARE", "AVG_JCT(h)", "AVG_QUEUE(h)",
                         "PREEMPTED"], queue_rows(result.summaries)))  # fmt: skip
    for s in result.summaries if moves else ():
        con.print(f"{s['policy']}: {s['moved']} gang move(s) to a better placement")
    for s in result.summaries if mtbf_h else ():
        con.print(f"{s['policy']}: {s['node_failures']} node failure(s), {s['restarts']} gang restart(s), "
                  f"{s['lost_gpu_hours']:.1f} GPU-hours lost since the last checkpoints")  # fmt: skip
    for item in result.rejected():
        con.print(f"rejected ({item['policy']}): {item['job']}: {item['reason']}")
    for line in coincidence_notes(result.runs):
        con.print(f"note: {line}")
    note = utilization_note(result.summaries)
    if note:
        con.print(f"note: {note}")
    for path in written:
        con.print(f"wrote {path}")
    if not out_dir:
        con.print("note: --out DIR also writes the CSVs, JCT and utilization plots and report.html")


@simulate_group.command("gen-trace")
@click.option("--jobs", "n_jobs", required=True, type=count(1, 1_000_000), help="Number of jobs.")
@click.option(
    "--seed", default=0, show_default=True, type=count(0, 2**32 - 1), help="Random seed (same seed, same trace)."
)
@click.option(
    "--arrival-rate",
    type=FiniteFloat(0.0, 1e6, low_open=True),
    help="Poisson arrivals, jobs per hour (not with --family).",
)
@click.option(
    "--family",
    type=click.Choice(FAMILIES),
    help="Draw GPU counts and run times from a published trace's statistics (philly, helios, pai); "
    "needs --cluster and --load.",
)
@click.option(
    "--load",
    type=FiniteFloat(0.0, 100.0, low_open=True),
    help="With --family: offered load (GPU-seconds of work per GPU-second of arrivals).",
)
@click.option(
    "--cluster",
    "cluster_file",
    type=click.Path(dir_okay=False),
    help="With --family: the cluster whose best placements price each job's iterations.",
)
@click.option("--cluster-gpus", type=count(1, 1 << 16),
              help="Largest gang to generate (GPUs); default 16, with --family the cluster.")
@click.option("--process-per-gpu", is_flag=True,
              help="With --family: each GPU of a gang of up to a node is a worker of its own, as torchrun and "
                   "mpirun start data-parallel jobs (such a gang may start spread over nodes).")  # fmt: skip
@click.option("--out", "out_file", required=True, type=click.Path(dir_okay=False), help="Trace CSV to write.")
@click.option(
    "--queues",
    "queue_names",
    metavar="NAMES",
    help="Comma-separated team queues: each job goes to one of them at random (the `queue` column).",
)
def gen_trace_cmd(n_jobs: int, seed: int, arrival_rate: float | None, family: str | None, load: float | None,
                  cluster_file: str | None, cluster_gpus: int | None, process_per_gpu: bool, out_file: str,
                  queue_names: str | None) -> None:  # fmt: skip
    """Write a seeded trace: Poisson arrivals, gangs of 1-16 GPUs, CNN models; or, with --family,
    gangs and run times shaped like a published trace's."""
    names = [check_name(n.strip(), "queue") for n in (queue_names or "").split(",") if n.strip()]
    if queue_names is not None and not names:
        raise UsageError("--queues is empty", "give queue names separated by commas, e.g. vision,speech")
    if process_per_gpu and family is None:
        raise UsageError("--process-per-gpu shapes a --family trace", "add --family, or leave --process-per-gpu out")
    if family is not None:
        if cluster_file is None or load is None or arrival_rate is not None or names:
            raise UsageError("--family needs --cluster and --load (and takes no --arrival-rate or --queues)",
                             "e.g. --family helios --cluster c.yaml --load 0.9")  # fmt: skip
        specs = load_cluster_file(cluster_file)
        gpus = sum(s.topology.n_gpus for s in specs)
        per_node = max(s.topology.n_gpus for s in specs)
        jobs = family_trace(family, n_jobs, seed, load, gpus, best_step_fn(specs), per_node, cluster_gpus,
                            process_per_gpu)
    elif arrival_rate is None:
        raise UsageError("give --arrival-rate (jobs per hour) or --family", "e.g. --arrival-rate 6")
    else:
        jobs = generate_trace(n_jobs, seed, arrival_rate, cluster_gpus, queues=names)
    try:
        write_trace(jobs, out_file)
    except OSError as exc:
        raise UsageError(f"cannot write {out_file!r}: {exc.strerror}", "give a writable --out path") from None
    click.echo(f"wrote {len(jobs)} jobs to {out_file} (last arrival {jobs[-1].arrival_s / 3600:.2f} h)")


def register(cli: click.Group) -> None:
    cli.add_command(simulate_group)


def queue_rows(summaries: list[dict[str, Any]]) -> list[list[str]]:
    def pct(v: float) -> str:
        return "-" if v != v else f"{v:.1%}"

    def hours(v: float) -> str:
        return "-" if v != v else f"{v / 3600:.2f}"

    return [[s["policy"], q["queue"], str(q["jobs"]), f"{q['gpu_hours']:.1f}", pct(q["share"]), pct(q["weight_share"]),
             hours(q["avg_jct_s"]), hours(q["avg_queue_s"]), str(q["preempted"])]
            for s in summaries for q in s.get("queues", [])]  # fmt: skip
