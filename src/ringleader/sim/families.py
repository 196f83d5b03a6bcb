"""Traces shaped like published cluster traces, and how wrong users' run-time estimates are.

A family (``FAMILIES``) draws each job's GPU count and run time from a published trace's
statistics (``data/reference.toml``, section ``traces``, each number with its source):

- ``philly``: run times from Microsoft's Philly trace (Jeon et al., ATC'19) by its quantiles,
  log-linear between them; GPUs from ringleader's own mix (the trace's counts were not taken);
- ``helios``: SenseTime's Venus cluster (Hu et al., SC'21): run time lognormal with its median
  and mean, GPUs 1 or 2-64 with its median and mean;
- ``pai``: Alibaba PAI's GPU tasks (Weng et al., ATC'23 trace): run times by its quantiles,
  GPUs by its counts (nearly all one GPU).

A job's run time is its run on its best placement: ``iterations`` are the run time over the
step time of that placement, which the caller prices (``best_step_s``). Arrivals are Poisson at
the rate that offers ``load`` over the arrival window: the GPU-seconds the jobs would hold
before the last arrival if each started on arrival, per GPU-second of the window.

``EstimateError`` is how far the queue's idea of a job's work is off: ``uniform`` (log-uniform
in [1/(1+E), 1+E]), ``lognormal`` (sigma E), or ``biased``: log-uniform in [x0.5, x3], mostly
over-estimates, as users' requested time limits are in every published trace study.
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from ringleader.errors import UsageError
from ringleader.reference import reference
from ringleader.scheduler import ClusterState, JobRequest, place
from ringleader.sim.steptime import Memoised, model_step_time
from ringleader.sim.trace import MODELS, TraceJob
from ringleader.topology.cluster import NodeSpec

FAMILIES = ("philly", "helios", "pai")
ERRORS = ("uniform", "lognormal", "biased")
BIASED_RANGE = (0.5, 3.0)


def draw_runtime_s(family: str, rng: random.Random) -> float:
    """A run time drawn from the family's published distribution, capped at its longest."""
    data = reference()["traces"]
    cap = float(data["common"]["max_runtime_s"])
    if family in ("philly", "pai"):
        qs, values = data[family]["runtime_quantiles"], data[family]["runtime_s"]
        u = min(max(rng.random(), qs[0]), qs[-1])
        i = max(1, min(bisect.bisect_left(qs, u), len(qs) - 1))
        frac = (u - qs[i - 1]) / (qs[i] - qs[i - 1])
        low, high = math.log(values[i - 1]), math.log(values[i])
        return min(math.exp(low + frac * (high - low)), cap)
    helios = data["helios"]
    median, mean = float(helios["runtime_median_s"]), float(helios["runtime_mean_s"])
    sigma = math.sqrt(2 * math.log(mean / median))  # lognormal: mean = median * exp(sigma^2 / 2)
    return min(median * math.exp(sigma * rng.gauss(0.0, 1.0)), cap)


def draw_gpus(family: str, rng: random.Random, cluster_gpus: int) -> int:
    """A job's GPU count from the family's mix, no larger than the cluster."""
    data = reference()["traces"]
    if family in ("philly", "pai"):
        sizes, weights = data[family]["gpus"], data[family]["gpus_weight"]
    else:
        mean = float(data["helios"]["gpus_mean"])
        tail = [2, 4, 8, 16, 32, 64]
        single = (sum(tail) / len(tail) - mean) / (sum(tail) / len(tail) - 1)
        sizes, weights = [1, *tail], [single, *[(1 - single) / len(tail)] * len(tail)]
    kept = [(s, w) for s, w in zip(sizes, weights, strict=True) if s <= cluster_gpus]
    return rng.choices([s for s, _ in kept], [w for _, w in kept])[0]


def family_trace(
    family: str,
    n_jobs: int,
    seed: int,
    load: float,
    cluster_gpus: int,
    best_step_s: Callable[[TraceJob], float],
    gpus_per_node: int = 8,
    largest_gang: int | None = None,
    process_per_gpu: bool = False,
) -> list[TraceJob]:
    """``n_jobs`` seeded jobs of ``family`` arriving (Poisson) at the rate that offers ``load``
    to a cluster of ``cluster_gpus`` over the arrival window (``window_load``): a gang of up to
    ``gpus_per_node`` GPUs is one worker, a bigger one whole nodes; none larger than
    ``largest_gang`` GPUs (default: the cluster), which leaves the load offered to all of it.
    With ``process_per_gpu`` each GPU of a gang of up to a node is a worker of its own, as
    torchrun and mpirun start data-parallel jobs (the reference study's 4 workers): such a gang
    may then start spread over nodes, which a one-worker gang never can."""
    if family not in FAMILIES:
        raise UsageError(f"unknown trace family {family!r}", f"use one of {', '.join(FAMILIES)}")
    if n_jobs < 1 or not load > 0:
        raise UsageError(f"need jobs >= 1 and load > 0, got {n_jobs} and {load}", "give --jobs and --load")
    rng = random.Random(f"{family}:{seed}")
    width = len(str(n_jobs))
    drawn: list[TraceJob] = []
    runs: list[tuple[int, float]] = []  # (GPUs, seconds on its best placement)
    for i in range(n_jobs):
        gpus = draw_gpus(family, rng, min(cluster_gpus, largest_gang or cluster_gpus))
        runtime = draw_runtime_s(family, rng)
        if gpus > gpus_per_node:
            workers, per_worker = gpus // gpus_per_node, gpus_per_node
        else:
            workers, per_worker = (gpus, 1) if process_per_gpu else (1, gpus)
        model, batch = rng.choice(MODELS)
        job = TraceJob(f"job-{i:0{width}d}", 0.0, workers, per_worker, model, batch, 1)
        iterations = max(1, round(runtime / best_step_s(job)))
        runs.append((gpus, iterations * best_step_s(job)))
        drawn.append(TraceJob(job.name, 0.0, workers, per_worker, model, batch, iterations))
    gaps = random.Random(f"{family}:{seed}:arrivals")
    unit, t = [], 0.0  # arrivals at one job per second; the load sets the time scale
    for _ in drawn:
        t += gaps.expovariate(1.0)
        unit.append(t)
    scale = window_scale(runs, unit, load, cluster_gpus)
    return [TraceJob(j.name, round(a * scale, 3), j.workers, j.gpus, j.model, j.batch_size, j.iterations)
            for j, a in zip(drawn, unit, strict=True)]  # fmt: skip


def window_load(runs: list[tuple[int, float]], arrivals: list[float], cluster_gpus: int) -> float:
    """The share of the cluster's GPU-seconds over the arrival window that the jobs would hold
    if each started on arrival (a run is counted up to the window's end only)."""
    end = arrivals[-1]
    if end <= 0:
        return math.inf
    held = sum(gpus * min(run, end - at) for (gpus, run), at in zip(runs, arrivals, strict=True))
    return held / (cluster_gpus * end)


def window_scale(runs: list[tuple[int, float]], unit: list[float], load: float, cluster_gpus: int) -> float:
    """The time scale of the unit-rate arrivals ``unit`` at which the jobs offer ``load`` over
    the arrival window (``window_load``); a heavy tail of long runs then offers its load through
    what it holds while jobs arrive, not through work that ends long after the last arrival.
    Refused where so few jobs cannot offer that much."""

    def at(scale: float) -> float:
        return window_load(runs, [a * scale for a in unit], cluster_gpus)

    low, high = 1e-6, 1e9  # seconds per unit gap; the window load falls as the window grows
    if at(low) < load:
        raise UsageError(f"{len(runs)} jobs cannot offer load {load:g} to {cluster_gpus} GPUs",
                         "give more --jobs or a lower --load")  # fmt: skip
    for _ in range(100):
        mid = math.sqrt(low * high)
        low, high = (mid, high) if at(mid) > load else (low, mid)
    return math.sqrt(low * high)


def best_step_fn(specs: list[NodeSpec], memo: Memoised | None = None) -> Callable[[TraceJob], float]:
    """Seconds per step of a job on the placement the topology policy gives it on the empty
    cluster ``specs``, by the model (memoised by shape)."""
    empty = ClusterState.empty(specs)
    steps = memo or Memoised(model_step_time())
    cache: dict[tuple[object, ...], float] = {}

    def best_step_s(job: TraceJob) -> float:
        key = (job.workers, job.gpus, job.model, job.batch_size, job.accumulation, job.precision)
        if key not in cache:
            placement = place(empty, JobRequest(job.name, job.workers, job.gpus), "topology").placement
            if placement is None:
                raise UsageError(f"a gang of {job.workers} x {job.gpus} GPUs fits nowhere on this cluster",
                                 "give a cluster with room for the family's largest gangs")  # fmt: skip
            cache[key] = steps({n: empty.node(n) for n in placement.nodes}, placement, job).step_time_s
        return cache[key]

    return best_step_s


def parse_estimate_error(text: str) -> EstimateError:
    """ "biased", "lognormal:0.5", "uniform:0.3" -> the model; a bad one is one line naming it."""
    kind, _, size = text.strip().partition(":")
    try:
        return EstimateError(kind, float(size) if size else (0.5 if kind == "lognormal" else 0.0))
    except ValueError:
        raise UsageError(f"bad --estimate-error {text!r}",
                         "give biased, lognormal[:SIGMA] or uniform[:E], e.g. lognormal:0.5") from None  # fmt: skip


@dataclass(frozen=True)
class EstimateError:
    """How the queue misjudges each job's work: a seeded factor per job (see the module)."""

    kind: str = "uniform"
    size: float = 0.0  # uniform: E; lognormal: sigma; biased: unused

    def __post_init__(self) -> None:
        if self.kind not in ERRORS:
            raise ValueError(f"unknown estimate error {self.kind!r}: use one of {', '.join(ERRORS)}")
        if not (self.size >= 0 and math.isfinite(self.size)):
            raise ValueError(f"estimate error size must be >= 0, got {self.size}")

    def factor(self, seed: int, name: str) -> float:
        """The factor by which the queue's idea of job ``name``'s work is off (1: exact)."""
        if self.kind == "biased":
            low, high = BIASED_RANGE
            return math.exp(random.Random(f"{seed}:{name}").uniform(math.log(low), math.log(high)))
        if self.size == 0:
            return 1.0
        rng = random.Random(f"{seed}:{name}")
        if self.kind == "lognormal":
            return math.exp(rng.gauss(0.0, self.size))
        spread = math.log1p(self.size)
        return math.exp(rng.uniform(-spread, spread))
