"""PNG plots of a comparison: JCT CDF per policy and GPU utilization over time (matplotlib Agg)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ringleader.errors import DependencyError
from ringleader.sim.engine import SimRun


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise DependencyError("plots need matplotlib", "pip install 'ringleader[sim]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_jct_cdf(runs: Sequence[SimRun], path: Path, title: str = "") -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for run in runs:
        jcts = sorted(r.jct_s / 3600.0 for r in run.records if r.jct_s is not None)
        if not jcts:
            continue
        ys = [(i + 1) / len(jcts) for i in range(len(jcts))]
        ax.step(jcts, ys, where="post", label=run.policy)
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


def binned_utilization(run: SimRun, bins: int = 120) -> tuple[list[float], list[float]]:
    """Mean share of GPUs allocated in ``bins`` equal time bins (hours since the first event):
    the step function of the timeline integrated per bin, so short spikes do not hide trends."""
    tl = run.timeline
    if len(tl.times) < 2 or run.total_gpus == 0:
        return [], []
    t0, t1 = tl.times[0], tl.times[-1]
    width = (t1 - t0) / bins or 1.0
    area = [0.0] * bins
    for i in range(len(tl.times) - 1):
        a, b, level = tl.times[i] - t0, tl.times[i + 1] - t0, tl.busy_gpus[i]
        first, last = min(int(a / width), bins - 1), min(int(b / width), bins - 1)
        for k in range(first, last + 1):
            lo, hi = max(a, k * width), b if k == bins - 1 else min(b, (k + 1) * width)
            if hi > lo:
                area[k] += level * (hi - lo)
    xs = [(k + 0.5) * width / 3600.0 for k in range(bins)]
    return xs, [v / (width * run.total_gpus) for v in area]


def plot_utilization(runs: Sequence[SimRun], path: Path, title: str = "") -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for run in runs:
        xs, ys = binned_utilization(run)
        if xs:
            ax.plot(xs, ys, label=run.policy, linewidth=1.2)
    ax.set_ylim(0, 1.05)
    return _finish(plt, fig, ax, path, "time since first arrival (hours)", "share of GPUs allocated (mean per bin)",
                   title or "GPU utilization over time")  # fmt: skip
