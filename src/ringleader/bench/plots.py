"""PNG plots (matplotlib, Agg backend): speedup vs workers with the ideal line, busbw vs
message size, and the DLI lab's compute-only (its GPU-only) vs pipeline scatter and ratio bars."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(plt: Any, fig: Any, path: Path) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return str(path)


def _line_plot(plt: Any, fig: Any, ax: Any, path: Path, xlabel: str, ylabel: str, title: str) -> str:
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend()
    ax.grid(alpha=0.3)
    return _save(plt, fig, path)


MARKERS = ("o", "s", "^", "D", "v", "P")
STYLES = ("-", "--", "-.", ":")


def speedup(rows: list[dict[str, Any]], path: Path, model: str = "", batch: int | None = None) -> str:
    """Median speedup per backend with min-max error bars, the ideal line, integer worker ticks;
    backends whose lines coincide stay apart by marker and line style."""
    plt = _plt()
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    workers = sorted({int(r["gpus_per_server"]) * int(r["servers"]) for r in rows})
    ax.plot(workers, workers, color="0.4", linestyle="--", linewidth=1, label="ideal (linear)")
    # one line per backend, or per backend and server count where rows span several servers
    several = len({int(r["servers"]) for r in rows}) > 1
    lines = sorted({(r["backend"], int(r["servers"]) if several else 0) for r in rows})
    for i, (b, servers) in enumerate(lines):
        mine = sorted((r for r in rows if r["backend"] == b and (not several or int(r["servers"]) == servers)),
                      key=lambda r: r["gpus_per_server"] * r["servers"])  # fmt: skip
        xs = [int(r["gpus_per_server"]) * int(r["servers"]) for r in mine]
        ys = [r["speedup"] for r in mine]
        lo = [max(0.0, r["speedup"] - r.get("speedup_min", r["speedup"])) for r in mine]
        hi = [max(0.0, r.get("speedup_max", r["speedup"]) - r["speedup"]) for r in mine]
        runs = max((int(r.get("repeats", 1)) for r in mine), default=1)
        name = f"{b}, {servers} server{'s' if servers > 1 else ''}" if several else b
        ax.errorbar(xs, ys, yerr=[lo, hi], marker=MARKERS[i % len(MARKERS)], linestyle=STYLES[i % len(STYLES)],
                    capsize=4, label=f"{name} (median of {runs}, bars min-max)")  # fmt: skip
    flagged = [r for r in rows if r.get("warnings")]
    if flagged:  # the table's "!" rows: ringed in red, so a suspicious point is not read as a result
        ax.plot([int(r["gpus_per_server"]) * int(r["servers"]) for r in flagged], [r["speedup"] for r in flagged],
                linestyle="none", marker="o", markersize=14, markerfacecolor="none", markeredgecolor="red",
                label="flagged: see the warnings")  # fmt: skip
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xticks(workers)
    what = ", ".join(x for x in (model, f"batch {batch} per worker" if batch else "") if x)
    title = f"Speedup vs workers{': ' + what if what else ''}"
    return _line_plot(plt, fig, ax, path, "workers (ranks)", "speedup over the smallest run", title)


def busbw(sweeps: dict[str, dict[str, Any]], path: Path) -> str:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    for i, (b, sweep) in enumerate(sorted(sweeps.items())):
        res = sweep.get("results", [])
        ax.plot([r["size_bytes"] for r in res], [r["oop"]["busbw_gbs"] for r in res],
                marker=MARKERS[i % len(MARKERS)], linestyle=STYLES[i % len(STYLES)],
                label=f"{b} ({sweep.get('world_size')} ranks)")  # fmt: skip
    ax.set_xscale("log", base=2)
    return _line_plot(plt, fig, ax, path, "message size (bytes)", "busbw (GB/s)", "allreduce bus bandwidth")


def pipeline(results: list[dict[str, Any]], scatter_path: Path, ratio_path: Path) -> list[str]:
    """The lab's two plots: full pipeline vs compute-only (synthetic data) images/s, on log axes
    (models differ by orders of magnitude), and their ratio."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5, 5))
    for r in results:
        ax.plot(r["synthetic_images_per_sec"], r["real_images_per_sec"], "o", label=r["model"])
    top = max([max(r["synthetic_images_per_sec"], r["real_images_per_sec"]) for r in results]
              + [1.0])  # fmt: skip
    low = min([min(r["synthetic_images_per_sec"], r["real_images_per_sec"]) for r in results] + [top]) or 1.0
    ax.plot([low / 2, top * 2], [low / 2, top * 2], "k--", label="no degradation")
    device = results[0].get("device", "cpu") if results else "cpu"
    ax.set_xlabel(f"synthetic data (compute only, {device}), images/s")
    ax.set_ylabel("real data (full pipeline), images/s")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.legend()
    scatter = _save(plt, fig, scatter_path)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.bar([r["model"] for r in results], [r["degradation"] for r in results])
    ax.set_ylabel("real / synthetic")
    ax.set_title("full pipeline / compute-only throughput")
    return [scatter, _save(plt, fig, ratio_path)]


def all_plots(out: Path, rows: list[dict[str, Any]], sweeps: dict[str, Any],
              pipelines: list[dict[str, Any]], model: str = "", batch: int | None = None) -> list[str]:  # fmt: skip
    files = [speedup(rows, out / "speedup.png", model, batch)] if rows else []
    if sweeps:
        files.append(busbw(sweeps, out / "busbw.png"))
    if pipelines:
        files += pipeline(pipelines, out / "pipeline_scatter.png", out / "pipeline_ratio.png")
    return files
