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


def _log_ticks(axis: Any) -> None:
    """Readable log ticks: 1, 2 and 5 of every decade, written as plain numbers (a decade or two
    of data otherwise shows only 10^0 and 10^1)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def _span(r: dict[str, Any], key: str) -> tuple[float, float]:
    """How far a row's runs of ``key`` reach below and above its median (error bar lengths)."""
    runs = (r.get("runs") or {}).get(key) or [r[f"{key}_images_per_sec"]]
    mid = r[f"{key}_images_per_sec"]
    return (max(0.0, mid - min(runs)), max(0.0, max(runs) - mid))


def pipeline(results: list[dict[str, Any]], scatter_path: Path, ratio_path: Path) -> list[str]:
    """The lab's two plots: full pipeline vs compute-only (synthetic data) images/s, on log axes
    (models differ by orders of magnitude), and their ratio; every point and bar with error bars
    spanning its runs (min-max; a ratio's: lowest over highest run to highest over lowest)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 5))
    for i, r in enumerate(results):
        xlo, xhi = _span(r, "synthetic")
        ylo, yhi = _span(r, "real")
        ax.errorbar([r["synthetic_images_per_sec"]], [r["real_images_per_sec"]], xerr=[[xlo], [xhi]],
                    yerr=[[ylo], [yhi]], marker=MARKERS[i % len(MARKERS)], linestyle="none", capsize=4,
                    label=str(r.get("label") or r["model"]))  # fmt: skip
    values = [v for r in results for key in ("synthetic", "real")
              for v in ((r.get("runs") or {}).get(key) or [r[f"{key}_images_per_sec"]])]  # fmt: skip
    low, top = (min(values), max(values)) if values and min(values) > 0 else (1.0, 10.0)
    ax.plot([low / 1.5, top * 1.5], [low / 1.5, top * 1.5], "k--", linewidth=1, label="no degradation")
    device = results[0].get("device", "cpu") if results else "cpu"
    ax.set_xlabel(f"synthetic data (compute only, {device}), images/s")
    ax.set_ylabel("real data (full pipeline), images/s")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(low / 1.5, top * 1.5)
    ax.set_ylim(low / 1.5, top * 1.5)
    _log_ticks(ax.xaxis)
    _log_ticks(ax.yaxis)
    ax.grid(alpha=0.3, which="both")
    ax.set_title("full pipeline vs compute only (bars: min-max of the runs)")
    ax.legend(fontsize="small")
    scatter = _save(plt, fig, scatter_path)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(results)), 4))
    names = [str(r.get("label") or r["model"]) for r in results]
    ratios = [r["degradation"] for r in results]
    ranges = [r.get("degradation_range") or [r["degradation"]] * 2 for r in results]
    ax.bar(names, ratios, yerr=[[max(0.0, d - lo) for d, (lo, _hi) in zip(ratios, ranges, strict=True)],
                                [max(0.0, hi - d) for d, (_lo, hi) in zip(ratios, ranges, strict=True)]],
           capsize=4, color="tab:blue", alpha=0.8)  # fmt: skip
    ax.axhline(1.0, color="0.4", linestyle="--", linewidth=1, label="no degradation")
    ax.set_ylabel("real / synthetic")
    ax.set_title("full pipeline / compute-only throughput (bars: range of the runs)")
    ax.tick_params(axis="x", labelrotation=20 if len(results) > 4 else 0)
    ax.legend(fontsize="small")
    return [scatter, _save(plt, fig, ratio_path)]


def all_plots(out: Path, rows: list[dict[str, Any]], sweeps: dict[str, Any],
              pipelines: list[dict[str, Any]], model: str = "", batch: int | None = None) -> list[str]:  # fmt: skip
    files = [speedup(rows, out / "speedup.png", model, batch)] if rows else []
    if sweeps:
        files.append(busbw(sweeps, out / "busbw.png"))
    if pipelines:
        files += pipeline(pipelines, out / "pipeline_scatter.png", out / "pipeline_ratio.png")
    return files
