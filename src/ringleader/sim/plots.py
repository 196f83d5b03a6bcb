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
    ax.set_xlabel("job completion time (hours, log scale)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title(title or "JCT CDF per policy")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_utilization(runs: Sequence[SimRun], path: Path, title: str = "") -> Path:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for run in runs:
        tl = run.timeline
        if not tl.times:
            continue
        t0 = tl.times[0]
        xs = [(t - t0) / 3600.0 for t in tl.times]
        ys = [b / run.total_gpus for b in tl.busy_gpus]
        ax.step(xs, ys, where="post", label=run.policy, linewidth=0.9)
    ax.set_xlabel("time since first arrival (hours)")
    ax.set_ylabel("share of GPUs allocated")
    ax.set_ylim(0, 1.05)
    ax.set_title(title or "GPU utilization over time")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
