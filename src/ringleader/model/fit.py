"""Fit a Calibration from `ringleader bench allreduce|train -o json` results, by least squares.

Allreduce results of one hop kind (``network`` when the run spans nodes, ``local`` for gloo/MPI
processes on one host, ``intra`` for a single-node GPU run, or the file's own ``link`` field),
pooled over files and world sizes, fit the ring cost
    t = 2(n-1) a + 2(n-1)/n S / B
for the per-step latency a and bandwidth B, minimising the relative error (weights 1/t).
Single-worker train results fit the compute time t(b) = t0 + b / peak per (model, device,
precision); one batch size gives the rate at that batch with t0 = 0.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ringleader.errors import UsageError
from ringleader.model.calibration import Calibration, ComputeFit, LinkFit, read_json
from ringleader.model.tables import check_model, check_precision, normalize_gpu_type

FIX = "pass JSON written by `ringleader bench allreduce -o json` or `ringleader bench train -o json`"
# Bounds of the numbers a result or a throughput row gives, far beyond any real run but each a
# size the fit can price: every multi-node run is predicted on a cluster of its nodes hundreds of
# times over (the cost grows with the square of its nodes), so nodes are bounded by the largest
# runs of the reference table, and ranks, rates, batches and sizes by what training reaches.
MAX_NODES = 128
MAX_WORLD = 1024
MAX_IMAGES_PER_S = 1e8
MAX_BATCH = 1 << 20
MAX_BYTES = float(1 << 40)  # an allreduce's message
MAX_SIZE = 1 << 16  # an image's side, a thread count


@dataclass(frozen=True)
class AllreducePoint:
    link: str  # "gloo/local", "nccl/network", ...
    ranks: int
    size_bytes: float
    time_s: float


@dataclass(frozen=True)
class TrainPoint:
    model: str
    gpu_type: str
    precision: str
    backend: str
    batch_size: int
    world_size: int
    nodes: int
    images_per_s: float  # whole job
    source: str
    image_size: int = 224
    threads: int | None = None
    framework: str | None = None


# What `ringleader bench train` runs (bench/train.py): PyTorch, whatever its backend.
BENCH_FRAMEWORK = "PyTorch"


def bounded(value: Any, what: str, low: float, high: float, whole: bool = True) -> Any:
    """``value`` as an int (``whole``) or a finite float within [low, high], else a ValueError
    naming ``what`` and the range (bool is not a number here; a whole number's text is)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"{what} must be a number, got {value!r}")
    try:
        number = int(value) if whole and not isinstance(value, float) else float(value)
    except ValueError:
        raise ValueError(f"{what} must be a {'whole ' if whole else ''}number, got {value!r}") from None
    if whole and isinstance(number, float) and not number.is_integer():
        raise ValueError(f"{what} must be a whole number, got {value!r}")
    if not (math.isfinite(number) and low <= number <= high):
        raise ValueError(f"{what} must be {low:g} to {high:g}, got {value!r}")
    return int(number) if whole else number


def _nodes_count(value: Any) -> int:
    if isinstance(value, list | tuple):
        value = max(1, len(value))
    return int(bounded(1 if value is None else value, "nodes", 1, MAX_NODES))


def _link_key(doc: Mapping[str, Any], nodes: int) -> str:
    backend = str(doc["backend"]).lower()
    kind = doc.get("link")
    if not kind:
        kind = "network" if nodes > 1 else ("local" if backend in ("gloo", "mpi") else "intra")
    return f"{backend}/{kind}"


def _allreduce_points(doc: Mapping[str, Any]) -> list[AllreducePoint]:
    if doc.get("collective", "allreduce") != "allreduce":
        raise ValueError(f"collective is {doc.get('collective')!r}; only allreduce results calibrate links")
    n = int(bounded(doc["world_size"], "world_size", 1, MAX_WORLD))
    key = _link_key(doc, _nodes_count(doc.get("nodes", 1)))
    rows = doc["results"]
    if not isinstance(rows, list):
        raise ValueError('"results" must be a list')
    points = []
    for i, row in enumerate(rows):
        size = float(bounded(row["size_bytes"], f"results[{i}].size_bytes", 0, MAX_BYTES, whole=False))
        for part in ("oop", "ip"):
            cell = row.get(part)
            if not cell:
                continue
            t = float(cell["time_us"]) * 1e-6
            if not math.isfinite(t) or t <= 0:
                raise ValueError(f"results[{i}].{part}.time_us must be > 0, got {cell['time_us']!r}")
            if size > 0 and n > 1:
                points.append(AllreducePoint(key, n, size, t))
    return points


def _train_point(doc: Mapping[str, Any], source: str) -> TrainPoint:
    world = int(bounded(doc["world_size"], "world_size", 1, MAX_WORLD))
    batch = int(bounded(doc["batch_size"], "batch_size", 1, MAX_BATCH))
    total = doc.get("images_per_sec_total")
    rate = float(total) if total is not None else float(doc["images_per_sec_per_worker"]) * world
    if not (math.isfinite(rate) and 0 < rate <= MAX_IMAGES_PER_S):
        raise ValueError(f"images_per_sec_total must be > 0 and at most {MAX_IMAGES_PER_S:g}, got {rate!r}")
    raw = doc.get("config")
    config: Mapping[str, Any] = raw if isinstance(raw, dict) else {}
    image_size = int(bounded(doc.get("image_size") or config.get("image_size") or 224, "image_size", 1, MAX_SIZE))
    raw_env = doc.get("env")
    env: Mapping[str, Any] = raw_env if isinstance(raw_env, dict) else {}
    threads_raw = doc.get("threads") or config.get("threads") or env.get("OMP_NUM_THREADS")
    threads = int(bounded(threads_raw, "threads", 1, MAX_SIZE)) if threads_raw else None
    device = str(doc.get("device_name") or doc.get("gpu_name") or doc.get("device") or "cpu")
    return TrainPoint(
        check_model(str(doc["model"])), normalize_gpu_type(device), check_precision(str(doc.get("precision", "fp32"))),
        str(doc.get("backend", "")).lower(), batch, world, _nodes_count(doc.get("nodes", 1)), rate, source,
        image_size, threads, str(doc.get("framework") or _bench_framework(doc))[:128],
    )  # fmt: skip


def _bench_framework(doc: Mapping[str, Any]) -> str:
    """What a `bench train` result ran: PyTorch, with its layout where it was channels-last."""
    return f"{BENCH_FRAMEWORK} NHWC" if doc.get("data_format") == "NHWC" else BENCH_FRAMEWORK


def read_bench_files(paths: Sequence[str | Path]) -> tuple[list[AllreducePoint], list[TrainPoint]]:
    """Parse bench result files; a malformed one is a UsageError naming it and the problem."""
    if not paths:
        raise UsageError("no bench result files given", FIX)
    allreduce: list[AllreducePoint] = []
    train: list[TrainPoint] = []
    for path in paths:
        if str(path).lower().endswith(".csv"):
            continue  # throughput rows: ringleader.model.rows
        p = Path(path)
        doc = read_json(p, "bench result", FIX)
        docs = doc if isinstance(doc, list) else [doc]
        for d in docs:
            try:
                if not isinstance(d, dict):
                    raise ValueError("a result must be a JSON object")
                kind = d.get("kind")
                if kind == "allreduce":
                    allreduce.extend(_allreduce_points(d))
                elif kind == "train":
                    train.append(_train_point(d, str(p)))
                else:
                    raise ValueError(f'"kind" is {kind!r}, not "allreduce" or "train"')
            except KeyError as exc:
                raise UsageError(f"{str(p)!r} is malformed: missing key {exc}", FIX) from None
            except (TypeError, ValueError, UsageError) as exc:
                msg = exc.message if isinstance(exc, UsageError) else str(exc)
                raise UsageError(f"{str(p)!r} is malformed: {msg}", FIX) from None
    return allreduce, train


def weighted_lstsq2(x1: Sequence[float], x2: Sequence[float], y: Sequence[float],
                    w: Sequence[float]) -> tuple[float, float]:  # fmt: skip
    """(a, b) minimising sum w^2 (a x1 + b x2 - y)^2, with a >= 0 (refit with a = 0 otherwise)."""
    s11 = sum((wi * u) ** 2 for wi, u in zip(w, x1, strict=True))
    s22 = sum((wi * v) ** 2 for wi, v in zip(w, x2, strict=True))
    s12 = sum(wi * wi * u * v for wi, u, v in zip(w, x1, x2, strict=True))
    s1y = sum(wi * wi * u * t for wi, u, t in zip(w, x1, y, strict=True))
    s2y = sum(wi * wi * v * t for wi, v, t in zip(w, x2, y, strict=True))
    det = s11 * s22 - s12 * s12
    if abs(det) > 1e-300 * max(1.0, s11 * s22):
        a = (s1y * s22 - s2y * s12) / det
        b = (s2y * s11 - s1y * s12) / det
        if a >= 0 and b > 0:
            return a, b
    if s22 > 0:
        return 0.0, s2y / s22
    return s1y / s11 if s11 > 0 else 0.0, 0.0


def _fit_ab(points: Sequence[AllreducePoint]) -> tuple[float, float, list[float]]:
    x1 = [2.0 * (p.ranks - 1) for p in points]
    x2 = [2.0 * (p.ranks - 1) / p.ranks * p.size_bytes for p in points]
    y = [p.time_s for p in points]
    alpha, beta = weighted_lstsq2(x1, x2, y, [1.0 / t for t in y])
    resid = [(alpha * u + beta * v) / t - 1 for u, v, t in zip(x1, x2, y, strict=True)]
    return alpha, beta, resid


LARGE_BYTES = 1 << 20


def fit_link(points: Sequence[AllreducePoint]) -> LinkFit:
    """Least squares on relative error, once more without the outliers (relative residual above
    3x the median and above 10%) that a busy machine leaves in a sweep; then the bandwidth again,
    latency kept, by least squares on the absolute time of messages of 1 MiB and more: the sizes
    gradients have. (A sweep re-sends one buffer, which stays in CPU caches up to a few MiB;
    gradients of a training step do not, so mid-size bandwidth would be too optimistic.)"""
    alpha, beta, resid = _fit_ab(points)
    if len(points) >= 6:
        cut = max(3 * statistics.median(abs(r) for r in resid), 0.10)
        kept = [p for p, r in zip(points, resid, strict=True) if abs(r) <= cut]
        if len(kept) >= 4 and len(kept) < len(points):
            points = kept
            alpha, beta, resid = _fit_ab(points)
    large = [p for p in points if p.size_bytes >= LARGE_BYTES]
    if len({p.size_bytes for p in large}) >= 2:
        x2 = [2.0 * (p.ranks - 1) / p.ranks * p.size_bytes for p in large]
        rest = [p.time_s - alpha * 2.0 * (p.ranks - 1) for p in large]
        beta_large = sum(v * r for v, r in zip(x2, rest, strict=True)) / sum(v * v for v in x2)
        if beta_large > 0:
            beta = beta_large
            resid = [
                (alpha * 2.0 * (p.ranks - 1) + beta * 2.0 * (p.ranks - 1) / p.ranks * p.size_bytes) / p.time_s - 1
                for p in points
            ]
    if beta <= 0:
        raise UsageError(
            f"cannot fit a bandwidth for {points[0].link}: times do not grow with size",
            "include message sizes of at least a few MiB (`bench allreduce -e 64M`)",
        )
    rmse = math.sqrt(sum(r * r for r in resid) / len(resid))
    return LinkFit(1.0 / beta / 1e9, alpha * 1e6, len(points), rmse)


def fit_compute(points: Sequence[TrainPoint]) -> ComputeFit:
    """t(b) = t0 + b x per_image over one (model, device, precision) at one worker."""
    batches = [p.batch_size for p in points]
    steps = [p.batch_size / p.images_per_s for p in points]
    first = points[0]
    top = max(batches)
    if len(set(batches)) > 1:
        t0, per_image = weighted_lstsq2([1.0] * len(steps), [float(b) for b in batches], steps,
                                        [1.0 / s for s in steps])  # fmt: skip
    else:
        t0, per_image = 0.0, sum(steps) / len(steps) / top
    rate = top / (t0 + top * per_image)
    return ComputeFit(
        first.model, first.gpu_type, first.precision, top, rate, t0, len(points), first.image_size, first.threads,
        first.framework,
    )


def fit_calibration(allreduce: Iterable[AllreducePoint], train: Iterable[TrainPoint],
                    sources: Sequence[str] = ()) -> Calibration:  # fmt: skip
    by_link: dict[str, list[AllreducePoint]] = defaultdict(list)
    for p in allreduce:
        by_link[p.link].append(p)
    by_compute: dict[tuple[str, str, str, int, int, str], list[TrainPoint]] = defaultdict(list)
    for t in train:
        if t.world_size == 1:  # one fit per layout and framework: their rates differ
            by_compute[(t.model, t.gpu_type, t.precision, t.image_size, t.threads or 0, t.framework or "")].append(t)
    links = {k: fit_link(v) for k, v in sorted(by_link.items())}
    compute = tuple(fit_compute(v) for _, v in sorted(by_compute.items()))
    if not links and not compute:
        raise UsageError(
            "nothing to calibrate: no allreduce result with 2+ ranks and no 1-worker train result",
            "run `ringleader bench allreduce` with 2+ ranks or `ringleader bench train` with 1 worker",
        )
    return Calibration(links, compute, None, tuple(sources))
