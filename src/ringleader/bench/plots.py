"""PNG plots (matplotlib, Agg backend): speedup vs workers with the ideal line, busbw vs
message size, and the DLI lab's GPU-only vs pipeline scatter and ratio bars."""

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


def speedup(rows: list[dict[str, Any]], path: Path) -> str:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    workers = sorted({int(r["gpus_per_server"]) * int(r["servers"]) for r in rows})
    ax.plot(workers, workers, "k--", label="ideal")
    for b in sorted({r["backend"] for r in rows}):
        pts = [(int(r["gpus_per_server"]) * int(r["servers"]), r["speedup"])
               for r in rows if r["backend"] == b]  # fmt: skip
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=b)
    return _line_plot(plt, fig, ax, path, "workers", "speedup", "Speedup vs workers")


def busbw(sweeps: dict[str, dict[str, Any]], path: Path) -> str:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    for b, sweep in sorted(sweeps.items()):
        res = sweep.get("results", [])
        ax.plot([r["size_bytes"] for r in res], [r["oop"]["busbw_gbs"] for r in res], "o-",
                label=f"{b} ({sweep.get('world_size')} ranks)")  # fmt: skip
    ax.set_xscale("log", base=2)
    return _line_plot(plt, fig, ax, path, "message size (bytes)", "busbw (GB/s)", "allreduce bus bandwidth")


def pipeline(results: list[dict[str, Any]], scatter_path: Path, ratio_path: Path) -> list[str]:
    """The lab's two plots: pipeline vs GPU-only (synthetic) images/s, and their ratio."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5, 5))
    for r in results:
        ax.plot(r["synthetic_images_per_sec"], r["real_images_per_sec"], "o", label=r["model"])
    top = max([max(r["synthetic_images_per_sec"], r["real_images_per_sec"]) for r in results]
              + [1.0])  # fmt: skip
    ax.plot([0, top], [0, top], "k--", label="no degradation")
    ax.set_xlabel("synthetic data (compute only), images/s")
    ax.set_ylabel("real data (full pipeline), images/s")
    ax.axis("equal")
    ax.legend()
    scatter = _save(plt, fig, scatter_path)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.bar([r["model"] for r in results], [r["degradation"] for r in results])
    ax.set_ylabel("real / synthetic")
    ax.set_title("pipeline / GPU-only throughput")
    return [scatter, _save(plt, fig, ratio_path)]


def all_plots(out: Path, rows: list[dict[str, Any]], sweeps: dict[str, Any],
              pipelines: list[dict[str, Any]]) -> list[str]:  # fmt: skip
    files = [speedup(rows, out / "speedup.png")] if rows else []
    if sweeps:
        files.append(busbw(sweeps, out / "busbw.png"))
    if pipelines:
        files += pipeline(pipelines, out / "pipeline_scatter.png", out / "pipeline_ratio.png")
    return files
