"""`bench scaling`: Lab 7's table (backend, servers, GPUs per server, average step time,
average throughput, speedup, scaling efficiency), one real multi-process run per point,
written as markdown, CSV and JSON, with PNG plots.

Speedup is a backend's throughput over its throughput at the smallest worker count, scaled
by that count (so with 1 worker in the list it is throughput / 1-worker throughput);
scaling efficiency = speedup / workers.
"""

from __future__ import annotations

import csv
import json
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ringleader.bench.launchers import Launcher
from ringleader.bench.ranks import check_available, check_backend, check_np
from ringleader.bench.train import TrainConfig
from ringleader.errors import UsageError

COLUMNS = ("backend", "servers", "gpus_per_server", "avg_step_time_s", "avg_throughput",
           "speedup", "scaling_efficiency")  # fmt: skip
HEADERS = ("Backend", "Servers", "GPUs per server", "Avg step time (s)",
           "Avg throughput (images/s)", "Speedup", "Scaling efficiency")  # fmt: skip


@dataclass
class ScalingConfig:
    backends: list[str]
    workers: list[int]
    out: str
    train: TrainConfig = field(default_factory=TrainConfig)
    busbw: bool = True
    busbw_min: int = 1024
    busbw_max: int = 16 * 1024 * 1024
    busbw_iters: int = 5
    pipeline: list[str] = field(default_factory=list)  # bench pipeline -o json files

    def validate(self) -> None:
        if not self.backends or not self.workers:
            raise UsageError("need at least one backend and one worker count",
                             "pass e.g. --backends gloo,mpi --workers 1,2")
        for b in self.backends:
            check_backend(b)
            check_available(b, need_mpirun=b == "mpi")
            for w in self.workers:
                check_np(b, w)
        self.train.validate()
        for p in self.pipeline:
            if not Path(p).is_file():
                raise UsageError(f"pipeline result {p!r} not found",
                                 "pass files written by `ringleader bench pipeline -o json`")


def table_rows(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One Lab 7 row per point (points: train JSON results)."""
    rows = []
    base: dict[str, tuple[int, float]] = {}
    for p in sorted(points, key=lambda p: (p["backend"], p["world_size"])):
        w, thr = int(p["world_size"]), float(p["images_per_sec_total"])
        base.setdefault(p["backend"], (w, thr))
        bw, bthr = base[p["backend"]]
        speedup = thr / bthr * bw if bthr else 0.0
        times = p.get("step_times_s") or [p["step_time_s"]]
        rows.append({
            "backend": p["backend"], "servers": int(p.get("nodes", 1)),
            "gpus_per_server": w // max(1, int(p.get("nodes", 1))),
            "avg_step_time_s": statistics.fmean(times), "avg_throughput": thr,
            "speedup": speedup, "scaling_efficiency": speedup / w,
        })  # fmt: skip
    return rows


def markdown(rows: list[dict[str, Any]], title: str) -> str:
    lines = [f"# {title}", "", "| " + " | ".join(HEADERS) + " |",
             "|" + "---|" * len(HEADERS)]  # fmt: skip
    for r in rows:
        lines.append(
            f"| {r['backend']} | {r['servers']} | {r['gpus_per_server']} | "
            f"{r['avg_step_time_s']:.4f} | {r['avg_throughput']:.1f} | {r['speedup']:.2f} | "
            f"{r['scaling_efficiency']:.0%} |"
        )
    return "\n".join(lines) + "\n"


def run_scaling(cfg: ScalingConfig, launcher: Launcher,
                progress: Callable[[str], None] | None = None) -> dict[str, Any]:  # fmt: skip
    """Measure every (backend, workers) point, then the busbw sweeps; write all outputs."""
    from ringleader.bench import plots

    cfg.validate()
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    tick = progress or (lambda _msg: None)
    train_cfg = dict(asdict(cfg.train), display_every=10**9)
    points = []
    for b in cfg.backends:
        for w in cfg.workers:
            tick(f"train {cfg.train.model} {b} x{w}")
            points.append(launcher.run("train", train_cfg, b, w))
    sweeps: dict[str, dict[str, Any]] = {}
    if cfg.busbw:
        ar = {"minbytes": cfg.busbw_min, "maxbytes": cfg.busbw_max, "factor": 2,
              "iters": cfg.busbw_iters, "warmup": 2, "check": 1}  # fmt: skip
        wmax = max(w for w in cfg.workers)
        for b in cfg.backends:
            tick(f"allreduce {b} x{max(2, wmax)}")
            sweeps[b] = launcher.run("allreduce", ar, b, max(2, wmax))
    pipelines = [json.loads(Path(p).read_text()) for p in cfg.pipeline]
    rows = table_rows(points)
    title = (f"Scaling: {cfg.train.model}, batch {cfg.train.batch_size} per worker, "
             f"{cfg.train.precision}, {points[0]['device'] if points else 'cpu'}")  # fmt: skip
    files = _write(out, rows, title, points, sweeps, pipelines, launcher.name)
    files += plots.all_plots(out, rows, sweeps, pipelines)
    tick("done")
    return {"kind": "scaling", "title": title, "launcher": launcher.name, "rows": rows,
            "files": files, "points": points, "busbw": sweeps}  # fmt: skip


def _write(out: Path, rows: list[dict[str, Any]], title: str, points: list[dict[str, Any]],
           sweeps: dict[str, Any], pipelines: list[Any], launcher: str) -> list[str]:  # fmt: skip
    (out / "scaling.md").write_text(markdown(rows, title))
    with open(out / "scaling.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(COLUMNS))
        w.writeheader()
        w.writerows(rows)
    doc = {"kind": "scaling", "title": title, "launcher": launcher, "rows": rows,
           "points": points, "busbw": sweeps, "pipeline": pipelines}  # fmt: skip
    (out / "scaling.json").write_text(json.dumps(doc, indent=2))
    return [str(out / n) for n in ("scaling.md", "scaling.csv", "scaling.json")]
