"""PNG plots of a comparison (matplotlib Agg) and its self-contained HTML report: the JCT CDF per
policy (markers and line styles keep coinciding curves apart; the legend names policies that
placed every job identically) and GPU utilization over time, one panel per policy, in bins of a
stated, round width."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ringleader import htmlreport as h
from ringleader.errors import DependencyError
from ringleader.sim.engine import SimRun
from ringleader.sim.summary import coincidence_notes, identical_groups, near_jct_pairs, utilization_note


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise DependencyError("plots need matplotlib", "pip install 'ringleader[sim]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


MARKERS = ("o", "s", "^", "D", "v", "P", "X")
STYLES = ("-", "--", "-.", ":")
# A curve drawn later is thinner, so one lying exactly on another still shows both colours.
WIDTHS = (3.2, 2.4, 1.7, 1.1)


def legend_labels(runs: Sequence[SimRun]) -> dict[str, str]:
    """Each policy's legend entry; one whose curve lies on an earlier policy's says so (the
    same placements where it has them, else the same job times)."""
    labels = {run.name: run.name for run in runs}
    for name, other, gap in near_jct_pairs(runs):
        labels[name] = f"{name} (JCTs within {gap:.1%} of {other})"
    for what, groups in (("job times", identical_groups(runs, placements=False)),
                         ("placements", identical_groups(runs))):  # fmt: skip
        for group in groups:
            for name in group[1:]:
                labels[name] = f"{name} (same {what} as {group[0]})"
    return labels


def plot_jct_cdf(runs: Sequence[SimRun], path: Path, title: str = "") -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    labels = legend_labels(runs)
    for i, run in enumerate(runs):
        jcts = sorted(r.jct_s / 3600.0 for r in run.records if r.jct_s is not None)
        if not jcts:
            continue
        ys = [(k + 1) / len(jcts) for k in range(len(jcts))]
        ax.step(jcts, ys, where="post", label=labels[run.name], linestyle=STYLES[i % len(STYLES)],
                linewidth=WIDTHS[i % len(WIDTHS)], marker=MARKERS[i % len(MARKERS)],
                markevery=max(1, len(jcts) // 8), markersize=6, alpha=0.9)  # fmt: skip
    ax.set_xscale("log")
    return _finish(plt, fig, ax, path, "job completion time (hours, log scale)", "fraction of jobs",
                   title or "JCT CDF per policy")  # fmt: skip


def _finish(plt: Any, fig: Any, ax: Any, path: Path, xlabel: str, ylabel: str, title: str) -> Path:
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


NICE_BINS_S = (60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)


def bin_width_s(span_s: float, target_bins: int = 48) -> float:
    """A round bin width (1 min .. 1 day) giving about ``target_bins`` bins over ``span_s``:
    wide enough to average out single arrivals, narrow enough to show the trend."""
    want = span_s / target_bins
    return float(next((w for w in NICE_BINS_S if w >= want), NICE_BINS_S[-1]))


def utilization_bin_s(runs: Sequence[SimRun]) -> float:
    """The utilization plot's bin width for these runs (one width for all, so panels compare)."""
    span = max((r.timeline.times[-1] - r.timeline.times[0] for r in runs if len(r.timeline.times) > 1), default=0.0)
    return bin_width_s(span)


def _width_label(width_s: float) -> str:
    return f"{width_s / 3600:g} h" if width_s >= 3600 else f"{width_s / 60:g} min"


def binned_utilization(run: SimRun, width_s: float) -> tuple[list[float], list[float]]:
    """Mean share of GPUs allocated in bins of ``width_s`` seconds from the first event (x: bin
    starts, hours): the step function of the timeline integrated per bin, so short spikes do not
    hide trends; the last bin covers only the time up to the last event."""
    tl = run.timeline
    if len(tl.times) < 2 or run.total_gpus == 0:
        return [], []
    t0, t1 = tl.times[0], tl.times[-1]
    bins = max(1, math.ceil((t1 - t0) / width_s))
    area, covered = [0.0] * bins, [0.0] * bins
    for i in range(len(tl.times) - 1):
        a, b, level = tl.times[i] - t0, tl.times[i + 1] - t0, tl.busy_gpus[i]
        for k in range(min(int(a / width_s), bins - 1), min(int(b / width_s), bins - 1) + 1):
            lo, hi = max(a, k * width_s), min(b, (k + 1) * width_s)
            if hi > lo:
                area[k] += level * (hi - lo)
                covered[k] += hi - lo
    xs = [k * width_s / 3600.0 for k in range(bins)]
    return xs, [a / (c * run.total_gpus) if c else 0.0 for a, c in zip(area, covered, strict=True)]


def plot_utilization(runs: Sequence[SimRun], path: Path, title: str = "",
                     summaries: Sequence[dict[str, Any]] = ()) -> Path:  # fmt: skip
    """One panel per policy (shared axes): the mean share of GPUs allocated per bin as a filled
    step, and the run's overall mean as a dashed line."""
    plt = _pyplot()
    width = utilization_bin_s(runs)
    labels = legend_labels(runs)
    means = {s["policy"]: s.get("gpu_utilization") for s in summaries}
    fig, axes = plt.subplots(len(runs), 1, figsize=(7, 1.2 + 1.35 * len(runs)), sharex=True, sharey=True,
                             squeeze=False)  # fmt: skip
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (run, ax) in enumerate(zip(runs, axes[:, 0], strict=True)):
        xs, ys = binned_utilization(run, width)
        colour = colours[i % len(colours)]
        if xs:
            edges = [*xs, xs[-1] + width / 3600.0]
            ax.stairs(ys, edges, fill=True, alpha=0.35, color=colour)
            ax.stairs(ys, edges, color=colour, linewidth=1.2)
        mean = means.get(run.name)
        if isinstance(mean, float) and not math.isnan(mean):
            ax.axhline(mean, color="0.25", linestyle="--", linewidth=1)
            ax.text(1.0, mean, f" mean {mean:.0%}", transform=ax.get_yaxis_transform(), va="center", fontsize=8)
        ax.set_ylim(0, 1.05)
        label = run.name if " (JCTs within " in labels[run.name] else labels[run.name]  # JCT only
        short = re.sub(r" \(same (placements|job times) as ", "\n(= ", label)
        ax.set_ylabel(short, rotation=0, ha="right", va="center", fontsize=9)
        ax.grid(True, alpha=0.3)
    axes[-1, 0].set_xlabel(f"hours since the first arrival (each step: the mean over a {_width_label(width)} bin)")
    fig.suptitle(title or "Share of GPUs allocated over time", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def sim_report(comparison: Any, table: tuple[list[str], list[list[str]]], pngs: Sequence[Path], path: Path,
               title: str = "") -> Path:  # fmt: skip
    """The comparison as one self-contained HTML file: the summary ``table`` (its headers and
    rows), what the numbers mean where they could mislead, the rejected jobs, and the plots."""
    headers, rows = table
    notes = [h.Note(f"{note}.") for note in coincidence_notes(comparison.runs)]
    util = utilization_note(comparison.summaries)
    if util:
        notes.append(h.Note(util))
    rejected = comparison.rejected()
    blocks: list[Any] = [h.Table(headers, rows), *notes]
    if rejected:
        why = [[r["policy"], r["job"], r["reason"]] for r in rejected]
        blocks.append(h.Table(["POLICY", "JOB", "WHY REJECTED"], why))
    captions = {"jct_cdf.png": "Job completion time CDF per policy (further left is better).",
                "utilization.png": "Share of the cluster's GPUs allocated to jobs over time, per policy: the mean "
                                   f"over each {_width_label(utilization_bin_s(comparison.runs))} bin; dashed, "
                                   "the run's overall mean."}  # fmt: skip
    figures = h.Section("Plots", [h.Figure(p, captions.get(p.name, "")) for p in pngs])
    return h.write(path, f"Simulation: {title}" if title else "Simulation", [h.Section("Summary", blocks), figures])
