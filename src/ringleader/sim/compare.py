"""Run one trace on one cluster under several policies and write the results.

from ringleader.sim import compare_policies, load_trace
from ringleader.topology import load_cluster_file
result = compare_policies(load_cluster_file("c.yaml"), load_trace("t.csv"), ["topology", "default"])
result.summaries  # one dict per policy (see ringleader.sim.summary)
"""

from __future__ import annotations

import csv
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

# the throughput policy prices placements with the model, which plugs itself in on import (the
# scheduler may not import it); with a test's step-time function it is still the model
import ringleader.model  # noqa: F401
from ringleader.errors import UsageError
from ringleader.scheduler import BackfillConfig, get_policy
from ringleader.scheduler.cycle import DEFAULT_BACKFILL
from ringleader.scheduler.order import QueueOrder
from ringleader.scheduler.teams import TeamQueue
from ringleader.scheduler.types import START_RULES
from ringleader.sim.engine import DEFAULT_MAX_FAILURES, NodeFailures, PreemptionCost, SimRun, simulate
from ringleader.sim.families import EstimateError
from ringleader.sim.plots import plot_jct_cdf, plot_utilization, sim_report
from ringleader.sim.steptime import Memoised, StepTimeFn, check_models, model_step_time
from ringleader.sim.summary import identical_groups, job_rows, near_jct_pairs, queue_summary, summarise
from ringleader.sim.trace import TraceJob
from ringleader.topology.cluster import NodeSpec

SUMMARY_COLUMNS = (
    ("policy", "POLICY", "{}"),
    ("completed", "DONE", "{}"),
    ("rejected", "REJECTED", "{}"),
    ("avg_jct_s", "AVG JCT (h)", "h"),
    ("p95_jct_s", "P95 JCT (h)", "h"),
    ("avg_queue_s", "AVG QUEUE (h)", "h"),
    ("makespan_s", "MAKESPAN (h)", "h"),
    ("gpu_utilization", "GPU UTIL", "{:.1%}"),
    ("jobs_per_hour", "JOBS/H", "{:.2f}"),
    ("images_per_s", "IMAGES/S", "{:.0f}"),
    ("frag_stranded", "FRAG STRANDED", "{:.1%}"),
    ("frag_blocked", "FRAG BLOCKED", "{:.1%}"),
    ("multi_node_share", "MULTI-NODE", "{:.1%}"),
    ("wall_s", "WALL (s)", "{:.2f}"),
)


@dataclass
class Comparison:
    runs: list[SimRun]
    summaries: list[dict[str, Any]]

    def rejected(self) -> list[dict[str, str]]:
        """Jobs that can never fit, per policy, with the reason."""
        return [
            {"policy": run.name, "job": r.job.name, "reason": r.rejected}
            for run in self.runs
            for r in run.records
            if r.rejected is not None
        ]

    def as_dict(self) -> dict[str, Any]:
        return {"policies": [_clean(s) for s in self.summaries], "rejected": self.rejected(),
                "identical_placements": identical_groups(self.runs),
                "identical_job_times": identical_groups(self.runs, placements=False),
                "near_identical_jct": [[a, b] for a, b, _ in near_jct_pairs(self.runs)]}  # fmt: skip


def parse_policies(text: str) -> list[str]:
    names = [p.strip() for p in text.split(",") if p.strip()]
    if not names:
        raise UsageError("--policies is empty", "give policy names separated by commas, e.g. topology,default")
    for name in names:
        get_policy(name)  # raises UsageError listing the known policies
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise UsageError(f"policy {dupes[0]!r} given twice", "name each policy once")
    return names


def parse_start_rules(text: str) -> list[str]:
    """ "now,best,finish" -> the rules, each known and named once."""
    rules = [r.strip() for r in text.split(",") if r.strip()]
    if not rules:
        raise UsageError("--start is empty", f"give start rules separated by commas: {','.join(START_RULES)}")
    for rule in rules:
        if rule not in START_RULES:
            raise UsageError(f"unknown start rule {rule!r}", f"use one of {', '.join(START_RULES)}")
    if len(set(rules)) != len(rules):
        raise UsageError("a start rule is given twice", "name each rule once")
    return rules


def compare_policies(
    specs: list[NodeSpec],
    jobs: Sequence[TraceJob],
    policies: Sequence[str],
    step_time: StepTimeFn | None = None,
    max_failures: int = DEFAULT_MAX_FAILURES,
    on_policy: Callable[[str], None] | None = None,
    start_rules: Sequence[str] = (),
    preemption: PreemptionCost | None = None,
    queues: tuple[TeamQueue, ...] = (),
    failures: NodeFailures | None = None,
    order: QueueOrder = QueueOrder.FIFO,
    estimate_error: EstimateError | None = None,
    risk: str | None = None,
    prediction_error: bool = False,
    backfill: BackfillConfig = DEFAULT_BACKFILL,
    moves: bool = False,
) -> Comparison:
    """Simulate ``jobs`` under each policy; one step-time cache is shared (the model is pure).
    ``on_policy`` hears each run's name as it starts (a progress bar). With ``start_rules``,
    each policy runs once per rule (named ``topology/finish``), every job given the rule and
    its work; with ``preemption``, a job of higher priority may preempt (``sim.PreemptionCost``);
    ``queues``: the team queues the trace's jobs name (their summaries gain ``queues``); with
    ``failures``, nodes fail and their gangs restart (``sim.NodeFailures``: the same failures for
    every policy); ``order`` orders the queue (``scheduler/order.py``); ``estimate_error``,
    ``risk`` and ``prediction_error`` are as ``simulate`` takes them; ``backfill``: the queue, by
    default the engines' (reservations and age; ``NO_RESERVATIONS``: any job that fits starts,
    ``max_failures`` failed places a pass at most); ``moves``: gangs that run degraded move to
    their better placement at a checkpoint, as on the engines (``simulate``'s ``moves``)."""
    for policy in policies:
        get_policy(policy)
    if step_time is None:
        check_models(jobs)
    memo = Memoised(step_time if step_time is not None else model_step_time())
    runs, summaries = [], []
    variants = [(policy, rule) for policy in policies for rule in (start_rules or (None,))]
    for policy, rule in variants:
        label = policy if rule is None else f"{policy}/{rule}"
        if on_policy:
            on_policy(label)
        started = time.perf_counter()
        run = simulate(list(specs), list(jobs), policy, memo, max_failures, replace(backfill, order=order),
                       start_rule=rule, preemption=preemption, queues=queues, failures=failures,
                       estimate_error=estimate_error, risk=risk, prediction_error=prediction_error,
                       moves=moves)  # fmt: skip
        if rule is not None:
            run.label = label
        wall = time.perf_counter() - started
        summary = summarise(run)
        summary["wall_s"] = wall
        if queues:
            summary["queues"] = queue_summary(run, queues)
        runs.append(run)
        summaries.append(summary)
    return Comparison(runs, summaries)


def _clean(summary: dict[str, Any]) -> dict[str, Any]:
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in summary.items()}


def table_rows(comparison: Comparison) -> tuple[list[str], list[list[str]]]:
    headers = [h for _, h, _ in SUMMARY_COLUMNS]
    rows = []
    for s in comparison.summaries:
        row = []
        for key, _, fmt in SUMMARY_COLUMNS:
            v = s.get(key)
            if v is None or (isinstance(v, float) and math.isnan(v)):
                row.append("-")
            elif fmt == "h":
                row.append(f"{v / 3600.0:.2f}")
            else:
                row.append(fmt.format(v))
        rows.append(row)
    return headers, rows


def write_outputs(comparison: Comparison, out_dir: str | Path, title: str = "") -> list[Path]:
    """results.json, summary.csv, jobs-<policy>.csv, jct_cdf.png, utilization.png and report.html."""
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create {str(out)!r}: {exc.strerror}", "give a writable --out folder") from None
    written = [out / "results.json", out / "summary.csv"]
    written[0].write_text(json.dumps(comparison.as_dict(), indent=2) + "\n")
    headers, rows = table_rows(comparison)
    with written[1].open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(headers)
        writer.writerows(rows)
    for run in comparison.runs:
        path = out / f"jobs-{run.name}.csv"
        job_table = job_rows(run)
        with path.open("w", newline="") as fh:
            writer2 = csv.DictWriter(fh, fieldnames=list(job_table[0]) if job_table else ["name"])
            writer2.writeheader()
            writer2.writerows(job_table)
        written.append(path)
    written.append(plot_jct_cdf(comparison.runs, out / "jct_cdf.png", title and f"JCT CDF: {title}"))
    written.append(plot_utilization(comparison.runs, out / "utilization.png",
                                    title and f"GPU utilization: {title}", comparison.summaries))  # fmt: skip
    written.append(sim_report(comparison, (headers, rows), written[-2:], out / "report.html", title))
    return written
