"""Numbers that summarise a simulated run (every one defined here, and in docs/sim.md).

* ``avg_jct_s`` / ``p95_jct_s``: job completion time, finish - arrival, over completed jobs
  (p95 by linear interpolation between order statistics, as numpy's default);
* ``avg_queue_s`` / ``p95_queue_s``: queueing delay, start - arrival;
* ``makespan_s``: last completion - first arrival;
* ``gpu_utilization``: GPU-seconds allocated to jobs / (cluster GPUs x makespan);
* ``jobs_per_hour``: completed jobs / makespan; ``images_per_s``: images all jobs trained
  (iterations x images per step of their placement) / makespan;
* ``frag_stranded``: time average, over the time some job waits and some GPU is free, of the
  share of free GPUs that cannot host one worker of the queue head (sum over nodes of
  free mod gpus_per_worker, over all free GPUs);
* ``frag_blocked``: share of the time some job waits during which enough GPUs are free in total
  for the queue head, yet it cannot be placed (its gang does not fit the way GPUs are spread);
* ``placement_frag_after``: mean over placements of the scheduler's
  ``Metrics.fragmentation_after`` (share of the used nodes' free GPUs left stranded);
* ``multi_node_share``: share of started jobs placed on more than one node;
* on a cluster with a network tree only: ``level_fragmentation``, per level nearest the nodes
  first, the time average of the share of free GPUs under switches that are not wholly free;
  ``level_whole_free``, per level, the time average of how many switches are wholly free;
  ``cross_leaf_share``, the share of multi-node jobs whose nodes span more than one leaf
  switch (sim/network.py);
* ``wait_by_size``: per gang size (total GPUs), how many started and the p50 / p95 / max of
  their queueing delay (start - arrival).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ringleader.scheduler.teams import TeamQueue, queue_of
from ringleader.sim.engine import SimRun


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), linear interpolation; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def summarise(run: SimRun) -> dict[str, Any]:
    done = [r for r in run.records if r.finish_s is not None]
    started = [r for r in run.records if r.start_s is not None]
    rejected = [r for r in run.records if r.rejected is not None]
    jcts = [r.jct_s for r in done if r.jct_s is not None]
    queues = [r.queue_s for r in started if r.queue_s is not None]
    if done:
        first = min(r.job.arrival_s for r in done)
        makespan = max(r.finish_s for r in done if r.finish_s is not None) - first
    else:
        makespan = 0.0
    gpu_seconds = sum(r.gpu_seconds() for r in done)
    images = sum(r.images for r in done)
    frag_stranded, frag_blocked = _fragmentation(run)
    return {
        "policy": run.name,
        "jobs": len(run.records),
        "completed": len(done),
        "rejected": len(rejected),
        "avg_jct_s": _mean(jcts),
        "p95_jct_s": percentile(jcts, 95),
        "avg_queue_s": _mean(queues),
        "p95_queue_s": percentile(queues, 95),
        "makespan_s": makespan,
        "gpu_utilization": gpu_seconds / (run.total_gpus * makespan) if makespan > 0 else math.nan,
        "jobs_per_hour": len(done) / makespan * 3600.0 if makespan > 0 else math.nan,
        "images_per_s": images / makespan if makespan > 0 else math.nan,
        "frag_stranded": frag_stranded,
        "frag_blocked": frag_blocked,
        "placement_frag_after": _mean([r.fragmentation_after for r in started]),
        "multi_node_share": _mean([1.0 if r.nodes_used > 1 else 0.0 for r in started]),
        **_network(run, started),
        **_failures(run),
        **({"moved": sum(r.moved for r in run.records)} if run.moves else {}),
    }


def _failures(run: SimRun) -> dict[str, Any]:
    """Where nodes failed: how often, how many gang restarts that took, and the GPU-hours the
    restarted gangs lost (trained since their last checkpoint)."""
    if run.node_failures is None:
        return {}
    return {"node_failures": run.node_failures, "restarts": sum(r.failed for r in run.records),
            "lost_gpu_hours": sum(r.lost_s * r.job.total_gpus for r in run.records if r.failed) / 3600.0}  # fmt: skip


def queue_summary(run: SimRun, queues: Sequence[TeamQueue]) -> list[dict[str, Any]]:
    """Per team queue: its jobs, the GPU-hours they ran, their share of the GPU-hours run while
    every queue with jobs had one waiting (``contended_shares``: when fewer wait, shares follow
    what is left, not the weights) beside the share its weight entitles it to, mean JCT and
    queueing, and preemptions (reclaims)."""
    members: dict[str, list[Any]] = {}
    for record in run.records:
        members.setdefault(queue_of(record.job), []).append(record)
    names = [q.name for q in queues] + [n for n in members if n not in {q.name for q in queues}]
    shares, _ = contended_shares(run, [n for n in names if n in members])
    weights = {q.name: q.weight for q in queues}
    total_weight = sum(weights.get(n, 1.0) for n in names if n in members)
    out = []
    for name in names:
        records = members.get(name, [])
        jcts = [r.jct_s for r in records if r.jct_s is not None]
        waits = [r.queue_s for r in records if r.queue_s is not None]
        out.append({
            "queue": name, "jobs": len(records), "gpu_hours": sum(r.gpu_seconds() for r in records) / 3600.0,
            "share": shares.get(name, math.nan),
            "weight_share": weights.get(name, 1.0) / total_weight if records and total_weight else math.nan,
            "avg_jct_s": _mean(jcts), "avg_queue_s": _mean(waits), "preempted": sum(r.preempted for r in records),
        })  # fmt: skip
    return out


def contended_shares(run: SimRun, names: Sequence[str]) -> tuple[dict[str, float], float]:
    """Each of the queues ``names``' share of the GPU-seconds their jobs held while every one of
    them had a job waiting (arrived or requeued, not running), and how long that was (seconds):
    the share fair share promises by the weights."""
    points: list[tuple[float, int, str, int]] = []  # (time, 0: waiting / 1: holding, queue, change)
    for record in run.records:
        queue, gpus = queue_of(record.job), record.job.total_gpus
        if queue not in names or record.rejected is not None:
            continue
        waits_from = record.job.arrival_s
        for start, end in record.runs:
            points += [(waits_from, 0, queue, 1), (start, 0, queue, -1)]
            points += [(start, 1, queue, gpus), (end, 1, queue, -gpus)]
            waits_from = end
        if record.finish_s is None:
            points.append((waits_from, 0, queue, 1))  # never finished: waits to the end
    points.sort()
    waiting, holding = dict.fromkeys(names, 0), dict.fromkeys(names, 0)
    used = dict.fromkeys(names, 0.0)
    contended, last = 0.0, 0.0
    for at, kind, queue, change in points:
        if all(waiting.values()):
            for name in names:
                used[name] += holding[name] * (at - last)
            contended += at - last
        last = at
        (waiting if kind == 0 else holding)[queue] += change
    total = sum(used.values())
    return {name: used[name] / total if total else math.nan for name in names}, contended


def _network(run: SimRun, started: Sequence[Any]) -> dict[str, Any]:
    tl = run.timeline
    if not tl.level_fragmentation:
        return {}
    levels = len(tl.level_fragmentation[0])
    sums, whole = [0.0] * levels, [0.0] * levels
    total = 0.0
    for i in range(len(tl.times) - 1):
        dt = tl.times[i + 1] - tl.times[i]
        sums = [a + f * dt for a, f in zip(sums, tl.level_fragmentation[i], strict=True)]
        whole = [a + w * dt for a, w in zip(whole, tl.level_whole_free[i], strict=True)]
        total += dt
    multi = [r for r in started if r.nodes_used > 1]
    return {
        "level_fragmentation": [s / total if total else 0.0 for s in sums],
        "level_whole_free": [w / total if total else 0.0 for w in whole],
        "cross_leaf_share": _mean([1.0 if r.span_level >= 1 else 0.0 for r in multi]),
    }


def wait_by_size(run: SimRun) -> dict[int, dict[str, float]]:
    """Gang size (GPUs) -> started jobs and the p50, p95 and max of their queueing delay."""
    waits: dict[int, list[float]] = {}
    for r in run.records:
        if r.queue_s is not None:
            waits.setdefault(r.job.total_gpus, []).append(r.queue_s)
    return {
        size: {"jobs": len(w), "p50_s": percentile(w, 50), "p95_s": percentile(w, 95), "max_s": max(w)}
        for size, w in sorted(waits.items())
    }


def _fragmentation(run: SimRun) -> tuple[float, float]:
    tl = run.timeline
    stranded_time = stranded_sum = queued_time = blocked_time = 0.0
    for i in range(len(tl.times) - 1):
        dt = tl.times[i + 1] - tl.times[i]
        if tl.queued[i]:
            queued_time += dt
            blocked_time += dt if tl.head_blocked[i] else 0.0
        share = tl.stranded_share[i]
        if share is not None:
            stranded_time += dt
            stranded_sum += share * dt
    return (
        stranded_sum / stranded_time if stranded_time else 0.0,
        blocked_time / queued_time if queued_time else 0.0,
    )


def job_rows(run: SimRun) -> list[dict[str, Any]]:
    """One row per job: times, placement, step time and images/s with its likely range where the
    step-time function states one (for CSV/JSON output)."""
    rows = []
    for r in run.records:
        rows.append({
            "name": r.job.name,
            "arrival_s": r.job.arrival_s,
            "workers": r.job.workers,
            "gpus": r.job.gpus,
            "model": r.job.model,
            "start_s": r.start_s,
            "finish_s": r.finish_s,
            "jct_s": r.jct_s,
            "queue_s": r.queue_s,
            "nodes_used": r.nodes_used,
            "bottleneck": r.bottleneck,
            "step_time_s": r.step.step_time_s if r.step else None,
            "images_per_s": r.step.images_per_s if r.step else None,
            "images_per_s_low": r.step.likely[0] if r.step and r.step.likely else None,
            "images_per_s_high": r.step.likely[1] if r.step and r.step.likely else None,
            "placement": r.placement.describe() if r.placement else None,
            "rejected": r.rejected,
        })  # fmt: skip
    return rows


def identical_groups(runs: Sequence[SimRun], placements: bool = True) -> list[list[str]]:
    """Policies whose runs coincide, as groups of two or more names in run order: with
    ``placements``, every job on the same nodes and GPUs at the same times; without, every job
    starting and finishing at the same times (so the policies' JCT and utilization curves lie on
    each other even where they chose other GPUs). Plots and reports say so."""
    groups: dict[tuple[Any, ...], list[str]] = {}
    for run in runs:
        key = tuple(
            (r.job.name, r.start_s, r.finish_s, r.placement.describe() if placements and r.placement else None)
            for r in run.records
        )
        groups.setdefault(key, []).append(run.name)
    return [names for names in groups.values() if len(names) > 1]


# JCT CDFs this close at every quantile draw as one curve at the plot's scale.
NEAR_JCT = 0.01


def near_jct_pairs(runs: Sequence[SimRun]) -> list[tuple[str, str, float]]:
    """(policy, earlier policy, largest relative gap) for each policy whose JCT CDF lies within
    NEAR_JCT of an earlier one's at every quantile without coinciding with it (identical_groups
    names those): one curve hides the other in the plot, so the legend and notes say so."""
    coinciding = {name for group in identical_groups(runs, placements=False) for name in group[1:]}
    jcts = {run.name: sorted(r.jct_s for r in run.records if r.jct_s is not None) for run in runs}
    pairs = []
    for i, run in enumerate(runs):
        mine = jcts[run.name]
        if run.name in coinciding or not mine:
            continue
        for earlier in runs[:i]:
            theirs = jcts[earlier.name]
            if len(theirs) != len(mine):
                continue
            gap = max(abs(a - b) / b if b > 0 else abs(a - b) for a, b in zip(mine, theirs, strict=True))
            if gap <= NEAR_JCT:
                pairs.append((run.name, earlier.name, gap))
                break
    return pairs


def coincidence_notes(runs: Sequence[SimRun]) -> list[str]:
    """One sentence per group of policies whose curves coincide: those that placed every job
    identically, then those that only ran every job at the same times, then those whose JCT
    CDFs lie within 1% of another's."""
    same_places = identical_groups(runs)
    notes = [f"{', '.join(g)} placed every job identically: their curves coincide" for g in same_places]
    for group in identical_groups(runs, placements=False):
        if group not in same_places:
            notes.append(f"{', '.join(group)} started and finished every job at the same times (on other GPUs "
                         "where their placements differ): their curves coincide")  # fmt: skip
    for name, other, gap in near_jct_pairs(runs):
        notes.append(f"{name}'s JCT CDF lies within {gap:.1%} of {other}'s at every quantile: the curves overlap")
    return notes


def utilization_note(summaries: Sequence[dict[str, Any]]) -> str | None:
    """Why a policy with lower GPU utilization can still be the better one, when the table
    shows exactly that (lower utilization and lower average JCT than another policy)."""
    def num(s: dict[str, Any], key: str) -> float:
        v = s.get(key)
        return float(v) if isinstance(v, int | float) and not math.isnan(v) else math.nan

    for a in summaries:
        for b in summaries:
            ua, ub = num(a, "gpu_utilization"), num(b, "gpu_utilization")
            ja, jb = num(a, "avg_jct_s"), num(b, "avg_jct_s")
            # Only differences the table shows (a tenth of a point of utilization, 1% of JCT).
            if ua < ub - 0.001 and ja < jb * 0.99:
                return (f"GPU UTIL counts GPUs allocated, not work done: {a['policy']} finishes jobs sooner "
                        f"(avg JCT {ja / 3600:.2f} h vs {jb / 3600:.2f} h for {b['policy']}), so the same trace "
                        "holds GPUs for less time; lower utilization here is a gain, as IMAGES/S shows.")
    return None
