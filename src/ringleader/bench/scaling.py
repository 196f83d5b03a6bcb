"""`bench scaling`: Lab 7's table (backend, servers, ranks = GPUs per server, median step time,
median throughput, speedup, scaling efficiency), ``repeat`` real multi-process runs per point,
written as markdown, CSV, JSON and one self-contained HTML report, with PNG plots.

Each row's figures are medians over the repeats, with min and max beside them. Speedup is a
backend's median throughput over its median throughput at the smallest worker count, scaled by
that count (so with 1 worker in the list it is throughput / 1-worker throughput); its range uses
the point's min and max throughput; scaling efficiency = speedup / workers. Repeats run round
robin (every point once, then again), so a burst of load from elsewhere spreads over all points
instead of skewing one. A row is flagged when its efficiency exceeds 100% or its throughput
spread ((max - min) / median) exceeds 10%: both mean the machine was not quiet enough to trust it.
"""

from __future__ import annotations

import csv
import json
import os
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ringleader import htmlreport as h
from ringleader.bench import HOROVOD, TRAIN_BACKENDS, plots
from ringleader.bench.launchers import Launcher
from ringleader.bench.machine import machine_load
from ringleader.bench.ranks import check_available, check_backend, check_np
from ringleader.bench.train import TrainConfig
from ringleader.errors import DependencyError, UsageError

COLUMNS = ("backend", "servers", "gpus_per_server", "avg_step_time_s", "avg_throughput",
           "speedup", "scaling_efficiency", "throughput_min", "throughput_max", "spread",
           "repeats", "load_1m", "warnings")  # fmt: skip
# Lab 7's columns, named for what they hold: medians over the repeats (Lab 7 says "average"), and
# ranks per server (one GPU each on GPUs; CPU processes on a machine without them).
HEADERS = ("Backend", "Servers", "Ranks per server", "Median step time (s)",
           "Median throughput (images/s)", "Speedup", "Scaling efficiency")  # fmt: skip
MAX_SPREAD = 0.10  # beyond this (max - min) / median, a point's repeats disagree too much


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
    repeat: int = 3
    # OpenMP threads per rank, the same at every point (default: cores / largest worker count),
    # so a smaller run does not get more threads per rank than a larger one. Measured here: one
    # rank with 2 threads on 2 busy cores stepped 25-50x slower than with 1, which alone read as
    # a 1464% scaling efficiency.
    threads: int | None = None
    # Backends this machine cannot run (nccl without CUDA, mpi without Open MPI) -> why: the study
    # skips their rows and says so (set by validate; all of them: refused).
    skipped: dict[str, str] = field(default_factory=dict)
    # Server counts each worker count is split over (Lab 7's second table: servers x ranks per
    # server); a count that does not divide a worker count skips that layout.
    servers: list[int] = field(default_factory=lambda: [1])

    @property
    def runnable(self) -> list[str]:
        return [b for b in self.backends if b not in self.skipped]

    @property
    def layouts(self) -> list[tuple[int, int]]:
        """(servers, workers) of every point, by workers then servers."""
        return [(s, w) for w in self.workers for s in sorted(set(self.servers)) if w % s == 0]

    @property
    def several_servers(self) -> bool:
        return any(s > 1 for s, _ in self.layouts)

    def threads_per_rank(self) -> int:
        return self.threads or max(1, (os.cpu_count() or 1) // max(self.workers))

    def validate(self) -> None:
        if not self.backends or not self.workers:
            raise UsageError("need at least one backend and one worker count",
                             "pass e.g. --backends gloo,mpi --workers 1,2")
        if self.threads is not None and self.threads < 1:
            raise UsageError(f"--threads-per-rank {self.threads} is not a thread count", "pass 1 or more")
        if self.repeat < 1:
            raise UsageError(f"--repeat {self.repeat} runs nothing", "pass --repeat 1 or more (3 gives a spread)")
        if not self.servers or min(self.servers) < 1:
            raise UsageError(f"--servers {','.join(map(str, self.servers))} is not a list of server counts",
                             "pass e.g. --servers 1,2")  # fmt: skip
        if not self.layouts:
            raise UsageError("no worker count splits evenly over the server counts",
                             "pass multiples of a server count, e.g. --workers 2,4 --servers 1,2")
        self.skipped, refusal = {}, None
        for b in self.backends:
            check_backend(b, TRAIN_BACKENDS)
            try:
                check_available(b, need_mpirun=b == "mpi")
            except DependencyError as exc:
                self.skipped[b], refusal = exc.message, refusal or exc
                continue
            for w in self.workers:
                check_np(b, w)
        if refusal is not None and not self.runnable:
            raise refusal
        self.train.validate()
        for p in self.pipeline:
            if not Path(p).is_file():
                raise UsageError(f"pipeline result {p!r} not found",
                                 "pass files written by `ringleader bench pipeline -o json`")


def row_warnings(efficiency: float, spread: float | None, repeats: int) -> list[str]:
    warnings = []
    if efficiency > 1.0 + 1e-9:
        warnings.append(f"efficiency {efficiency:.0%} > 100%: the smaller run was slowed (load elsewhere?); "
                        "rerun on a quiet machine")  # fmt: skip
    if spread is not None and spread > MAX_SPREAD:
        warnings.append(f"spread {spread:.0%} > {MAX_SPREAD:.0%} over {repeats} runs: too noisy to trust")
    return warnings


def table_rows(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One Lab 7 row per (backend, workers, servers), medians over its repeated points (train JSON
    results); speedups over each backend's smallest run."""
    groups: dict[tuple[str, int, int], list[dict[str, Any]]] = {}
    for p in points:
        groups.setdefault((p["backend"], int(p["world_size"]), max(1, int(p.get("nodes", 1)))), []).append(p)
    rows = []
    base: dict[str, tuple[int, float]] = {}
    for (backend, w, nodes), pts in sorted(groups.items()):
        thrs = [float(p["images_per_sec_total"]) for p in pts]
        thr = statistics.median(thrs)
        base.setdefault(backend, (w, thr))
        bw, bthr = base[backend]
        speedup = thr / bthr * bw if bthr else 0.0
        times = [statistics.fmean(p.get("step_times_s") or [p["step_time_s"]]) for p in pts]
        spread = (max(thrs) - min(thrs)) / thr if len(thrs) > 1 and thr else None
        loads = [p["load"]["load_1m"] for p in pts if "load" in p]
        rows.append({
            "backend": backend, "servers": nodes, "gpus_per_server": w // nodes,
            "avg_step_time_s": statistics.median(times), "avg_throughput": thr,
            "speedup": speedup, "scaling_efficiency": speedup / w,
            "throughput_min": min(thrs), "throughput_max": max(thrs),
            "speedup_min": min(thrs) / bthr * bw if bthr else 0.0,
            "speedup_max": max(thrs) / bthr * bw if bthr else 0.0,
            "spread": spread, "repeats": len(pts),
            "load_1m": statistics.median(loads) if loads else None,
            "warnings": row_warnings(speedup / w, spread, len(pts)),
        })  # fmt: skip
    return rows


def skipped_lines(skipped: dict[str, str]) -> list[str]:
    """What the table lacks and why: "nccl skipped: the nccl backend needs CUDA GPUs ..."."""
    return [f"{backend} skipped: {why}" for backend, why in skipped.items()]


def markdown(rows: list[dict[str, Any]], title: str, machine: dict[str, Any] | None = None,
             skipped: dict[str, str] | None = None) -> str:  # fmt: skip
    lines = [f"# {title}", "", "| " + " | ".join(HEADERS) + " | Min-max (images/s) | Repeats | Warnings |",
             "|" + "---|" * (len(HEADERS) + 3)]  # fmt: skip
    for r in rows:
        lines.append(
            f"| {r['backend']} | {r['servers']} | {r['gpus_per_server']} | "
            f"{r['avg_step_time_s']:.4f} | {r['avg_throughput']:.1f} | {r['speedup']:.2f} | "
            f"{r['scaling_efficiency']:.0%} | {r['throughput_min']:.1f}-{r['throughput_max']:.1f} | "
            f"{r['repeats']} | {'; '.join(r['warnings']) or '-'} |"
        )
    if skipped:
        lines += ["", *skipped_lines(skipped)]
    if machine:
        lines += ["", load_line(machine)]
    return "\n".join(lines) + "\n"


def load_line(machine: dict[str, Any]) -> str:
    start, end = machine["load_start"], machine["load_end"]
    return (f"Machine load (1-minute average, {start['cpus']} cores): {start['load_1m']:.2f} at the start, "
            f"{end['load_1m']:.2f} at the end; medians per row in the JSON and CSV.")  # fmt: skip


def run_scaling(cfg: ScalingConfig, launcher: Launcher,
                progress: Callable[[str], None] | None = None) -> dict[str, Any]:  # fmt: skip
    """Measure every (backend, workers) point ``repeat`` times, round robin, then the busbw
    sweeps; write all outputs."""
    cfg.validate()
    if HOROVOD in cfg.runnable and launcher.name != "local":
        raise UsageError(f"the horovod backend starts its ranks with horovodrun, not the {launcher.name} launcher",
                         "pass --launcher local (or leave horovod out of --backends)")  # fmt: skip
    if cfg.several_servers and launcher.name != "runtime":
        many = max(s for s, _ in cfg.layouts)
        raise UsageError(f"--servers {many} places ranks on several servers, and the {launcher.name} launcher "
                         "starts them on this one",
                         "run each point as a ringleader job on a declared cluster: --launcher runtime "
                         "(ssh hosts, or `ringleader cluster up`)")  # fmt: skip
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    tick = progress or (lambda _msg: None)
    train_cfg = dict(asdict(cfg.train), display_every=10**9)
    machine: dict[str, Any] = {"load_start": machine_load()}
    points = []
    for rep in range(cfg.repeat):
        for b in cfg.runnable:
            for servers, w in cfg.layouts:
                on = f" on {servers} servers" if cfg.several_servers else ""
                tick(f"train {cfg.train.model} {b} x{w}{on} (run {rep + 1}/{cfg.repeat})")
                load = machine_load()
                result = launcher.run("train", train_cfg, b, w, cfg.threads_per_rank(),
                                      servers if cfg.several_servers else None)  # fmt: skip
                points.append({**result, "load": load, "repeat": rep})
    sweeps: dict[str, dict[str, Any]] = {}
    if cfg.busbw:
        ar = {"minbytes": cfg.busbw_min, "maxbytes": cfg.busbw_max, "factor": 2,
              "iters": cfg.busbw_iters, "warmup": 2, "check": 1}  # fmt: skip
        wmax = max(w for w in cfg.workers)
        for b in cfg.runnable:
            if b == HOROVOD:  # the sweep is ringleader's allreduce bench, which has no Horovod path
                continue
            tick(f"allreduce {b} x{max(2, wmax)}")
            sweep = launcher.run("allreduce", ar, b, max(2, wmax), cfg.threads_per_rank())
            sweeps[b] = {**sweep, "load": machine_load()}
    machine["load_end"] = machine_load()
    pipelines = [json.loads(Path(p).read_text()) for p in cfg.pipeline]
    rows = table_rows(points)
    device = points[0]["device"] if points else "cpu"
    title = (f"Scaling: {cfg.train.model}, batch {cfg.train.batch_size} per worker, "
             f"{cfg.train.precision}, {device}"
             f"{f', {cfg.threads_per_rank()} thread(s) per rank' if device == 'cpu' else ''}")  # fmt: skip
    doc = {"kind": "scaling", "title": title, "launcher": launcher.name, "repeat": cfg.repeat,
           "threads_per_rank": cfg.threads_per_rank(),
           "machine": machine, "warnings": [f"{r['backend']} x{r['servers'] * r['gpus_per_server']}: {w}"
                                            for r in rows for w in r["warnings"]],
           "rows": rows, "skipped": dict(cfg.skipped), "points": points, "busbw": sweeps,
           "pipeline": pipelines}  # fmt: skip
    files = _write(out, doc)
    pngs = plots.all_plots(out, rows, sweeps, pipelines, model=cfg.train.model, batch=cfg.train.batch_size)
    files += pngs
    files.append(str(scaling_report(doc, [Path(p) for p in pngs], out / "report.html")))
    tick("done")
    return {**doc, "files": files}


def _write(out: Path, doc: dict[str, Any]) -> list[str]:
    (out / "scaling.md").write_text(markdown(doc["rows"], doc["title"], doc["machine"], doc["skipped"]))
    with open(out / "scaling.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(COLUMNS), extrasaction="ignore")
        w.writeheader()
        w.writerows({**r, "warnings": "; ".join(r["warnings"])} for r in doc["rows"])
    (out / "scaling.json").write_text(json.dumps(doc, indent=2))
    return [str(out / n) for n in ("scaling.md", "scaling.csv", "scaling.json")]


def scaling_report(doc: dict[str, Any], pngs: list[Path], path: Path) -> Path:
    """`bench scaling`'s self-contained HTML: the table with ranges and warnings, the machine's
    load, then every plot."""
    headers = [*HEADERS, "Min-max (images/s)", "Spread", "Runs", "Load (1m)"]
    rows = [[r["backend"], r["servers"], r["gpus_per_server"], f"{r['avg_step_time_s']:.4f}",
             f"{r['avg_throughput']:.1f}", f"{r['speedup']:.2f}", f"{r['scaling_efficiency']:.0%}",
             f"{r['throughput_min']:.1f}-{r['throughput_max']:.1f}",
             "-" if r["spread"] is None else f"{r['spread']:.0%}", r["repeats"],
             "-" if r["load_1m"] is None else f"{r['load_1m']:.2f}"] for r in doc["rows"]]  # fmt: skip
    notes = [h.Note(w, warning=True) for w in [*doc["warnings"], *skipped_lines(doc.get("skipped") or {})]]
    results = h.Section("Results", [h.Table(headers, rows), *notes, h.Note(load_line(doc["machine"]))])
    captions = {"speedup.png": "Median speedup per backend; bars span the fastest and slowest run.",
                "busbw.png": "Allreduce bus bandwidth by message size (nccl-tests' busbw).",
                "pipeline_scatter.png": "Real-data pipeline vs synthetic (compute only) throughput.",
                "pipeline_ratio.png": "Pipeline / compute-only throughput per model."}  # fmt: skip
    plots = h.Section("Plots", [h.Figure(p, captions.get(p.name, "")) for p in pngs])
    subtitle = f"{doc['launcher']} launcher, {doc['repeat']} run(s) per point"
    return h.write(path, doc["title"], [results, plots], subtitle)
