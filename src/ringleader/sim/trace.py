"""Job traces: the CSV format, its parser (errors name the line) and a seeded generator.

A trace is CSV with a header::

    name,arrival_s,workers,gpus,model,batch_size,iterations[,priority][,time_limit_s][,queue][,accumulation_steps][,precision]
    job-0001,0.0,4,1,vgg16,64,2000,0,3600,team-a,1,fp16

``gpus`` is GPUs per worker, ``batch_size`` the per-GPU batch, ``iterations`` the training steps
the job runs; ``priority`` (optional, default 0) orders the queue before arrival time;
``time_limit_s`` (optional, empty for none) is the wall-clock limit the queue plans with;
``queue`` (optional, empty for the default queue) the team queue it is submitted to;
``accumulation_steps`` (optional, default 1) the micro-batches of ``batch_size`` each training
step sums before its one allreduce (gradient accumulation); ``precision`` (optional, default fp32)
what it trains in: fp32, tf32, fp16 or bf16 (amp, half and bfloat16 read as the model reads them).
"""

from __future__ import annotations

import csv
import io
import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ringleader.errors import UsageError
from ringleader.inputs import read_bounded
from ringleader.model.tables import check_precision
from ringleader.topology.cluster import check_name

COLUMNS = ("name", "arrival_s", "workers", "gpus", "model", "batch_size", "iterations")
OPTIONAL = ("priority", "time_limit_s", "queue", "accumulation_steps", "precision")

# Gang shapes (workers, GPUs per worker) per total size, and how often each size arrives:
# most jobs are small, as in published cluster traces (Philly, Helios: most jobs use 1-4 GPUs).
SHAPES: dict[int, tuple[tuple[int, int], ...]] = {
    1: ((1, 1),),
    2: ((2, 1), (1, 2)),
    4: ((4, 1), (1, 4), (2, 2)),
    8: ((8, 1), (1, 8), (2, 4)),
    16: ((16, 1), (2, 8), (4, 4)),
}
SIZE_WEIGHTS: dict[int, float] = {1: 0.30, 2: 0.20, 4: 0.25, 8: 0.15, 16: 0.10}
# Model and per-GPU batch (the reference study's 64 per GPU; alexnet's larger as in its benchmarks).
MODELS: tuple[tuple[str, int], ...] = (
    ("resnet50", 64),
    ("vgg16", 64),
    ("alexnet", 256),
    ("resnet152", 32),
    ("inception3", 64),
)
MIN_ITERATIONS = 500
MAX_ITERATIONS = 20000


@dataclass(frozen=True)
class TraceJob:
    """One job of a trace."""

    name: str
    arrival_s: float
    workers: int
    gpus: int  # per worker
    model: str
    batch_size: int  # per GPU
    iterations: int
    priority: int = 0
    time_limit_s: float | None = None  # what the user promised; the queue plans with it
    queue: str | None = None  # its team queue (None: the default queue)
    accumulation: int = 1  # micro-batches per training step (one allreduce a step)
    precision: str = "fp32"  # as the model names it (model.tables.check_precision)

    @property
    def total_gpus(self) -> int:
        return self.workers * self.gpus


def _fail(origin: str, line: int, problem: str, fix: str) -> UsageError:
    return UsageError(f"{origin} line {line}: {problem}", fix)


def parse_trace(text: str, origin: str = "trace") -> list[TraceJob]:
    """Parse trace CSV text. Raises UsageError naming the first bad line."""
    reader = csv.reader(io.StringIO(text))
    header: list[str] | None = None
    jobs: list[TraceJob] = []
    seen: dict[str, int] = {}
    for row in _rows(reader, origin):
        line = reader.line_num
        if not row or not "".join(row).strip() or row[0].lstrip().startswith("#"):
            continue
        cells = [c.strip() for c in row]
        if header is None:
            header = cells
            missing = [c for c in COLUMNS if c not in header]
            unknown = [c for c in header if c not in COLUMNS + OPTIONAL]
            twice = [c for c in header if header.count(c) > 1]
            if missing or unknown or twice:
                problem = (f"missing column {missing[0]!r}" if missing else f"unknown column {unknown[0]!r}"
                           if unknown else f"column {twice[0]!r} given twice")  # fmt: skip
                raise _fail(origin, line, f"bad header ({problem})", f"use the header {','.join(COLUMNS + OPTIONAL)}")
            continue
        if len(cells) != len(header):
            raise _fail(
                origin, line, f"{len(cells)} fields, expected {len(header)}", "give one value per header column"
            )
        job = _job(dict(zip(header, cells, strict=True)), origin, line)
        if job.name in seen:
            raise _fail(
                origin,
                line,
                f"job name {job.name!r} already used on line {seen[job.name]}",
                "give every job its own name",
            )
        seen[job.name] = line
        jobs.append(job)
    if header is None:
        raise UsageError(f"{origin}: empty trace (no header)", f"start with the header {','.join(COLUMNS)}")
    return jobs


def _rows(reader: Any, origin: str) -> Iterator[list[str]]:
    """The reader's rows; a line the csv module cannot split (a field over its size limit, a
    NUL byte) is one error naming the line."""
    while True:
        try:
            yield next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise _fail(origin, reader.line_num, f"not CSV ({exc})", "give one job per line, comma-separated") from None


def _job(values: dict[str, str], origin: str, line: int) -> TraceJob:
    """One row, checked against ``trace_schema.TraceRow``; a refusal names the line and the
    column as ``column=value`` with what it must be."""
    from pydantic import ValidationError

    from ringleader.sim.trace_schema import TraceRow

    try:
        name = check_name(values["name"], "job")
    except UsageError as exc:
        raise _fail(origin, line, exc.message, exc.fix) from None
    if not values["model"]:
        raise _fail(origin, line, "empty model", "name a model such as resnet50 or vgg16")
    # empty optional cells: priority 0, no time limit
    cells = {key: value for key, value in values.items() if key not in OPTIONAL or value}
    if cells.get("queue"):
        try:
            check_name(cells["queue"], "queue")
        except UsageError as exc:
            raise _fail(origin, line, exc.message, exc.fix) from None
    precision = "fp32"
    if cells.get("precision"):
        try:
            precision = check_precision(cells.pop("precision"))
        except UsageError as exc:
            raise _fail(origin, line, exc.message, exc.fix) from None
    try:
        row = TraceRow.model_validate(cells)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        key = str(error["loc"][0])
        raise _fail(origin, line, _cell_problem(key, values[key], error["type"], error.get("ctx") or {}),
                    f"give {key} as {_KINDS.get(key, 'a number')} within its range") from None  # fmt: skip
    return TraceJob(name, row.arrival_s, row.workers, row.gpus, row.model, row.batch_size, row.iterations,
                    row.priority, row.time_limit_s, row.queue, row.accumulation_steps, precision)  # fmt: skip


_KINDS = {"arrival_s": "a number of seconds", "model": "a model name"}


def _cell_problem(key: str, raw: str, kind: str, ctx: dict[str, object]) -> str:
    shown = raw if len(raw) <= 40 else raw[:40] + "..."
    if kind in ("int_parsing", "int_parsing_size", "int_type", "int_from_float"):
        return f"{key}={shown!r} is not an integer" if kind != "int_parsing_size" else f"{key}={shown} is too big"
    if kind in ("float_parsing", "float_type"):
        return f"{key}={shown!r} is not a number"
    if kind == "finite_number":
        return f"{key}={shown} is not a finite number"
    for bound, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
        if bound in ctx:
            value = ctx[bound]
            limit = f"{value:g}" if isinstance(value, float) else str(value)
            return f"{key}={shown} must be {sign} {limit}"
    return f"{key}={shown!r} is not valid"


def load_trace(path: str | Path) -> list[TraceJob]:
    p = Path(path)
    return parse_trace(read_bounded(p, "trace", fix="give a CSV trace saved as UTF-8"), origin=str(p))


def format_trace(jobs: Sequence[TraceJob]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    # the optional columns only where they say something
    limits = any(j.time_limit_s is not None for j in jobs)
    queues = any(j.queue is not None for j in jobs)
    summed = any(j.accumulation > 1 for j in jobs)
    mixed = any(j.precision != "fp32" for j in jobs)
    writer.writerow((*COLUMNS, "priority", *(["time_limit_s"] if limits else []), *(["queue"] if queues else []),
                     *(["accumulation_steps"] if summed else []), *(["precision"] if mixed else [])))  # fmt: skip
    for j in jobs:
        row = [j.name, f"{j.arrival_s:.3f}", j.workers, j.gpus, j.model, j.batch_size, j.iterations, j.priority]
        if limits:
            row.append("" if j.time_limit_s is None else f"{j.time_limit_s:.3f}")
        if queues:
            row.append(j.queue or "")
        if summed:
            row.append(j.accumulation)
        if mixed:
            row.append(j.precision)
        writer.writerow(row)
    return out.getvalue()


def write_trace(jobs: Sequence[TraceJob], path: str | Path) -> None:
    Path(path).write_text(format_trace(jobs))


def generate_trace(
    n_jobs: int, seed: int, arrival_rate_per_h: float, cluster_gpus: int | None = None, queues: Sequence[str] = ()
) -> list[TraceJob]:
    """Seeded trace: Poisson arrivals at ``arrival_rate_per_h`` jobs/hour, gang sizes 1-16 GPUs
    (no bigger than ``cluster_gpus``), models from MODELS, log-uniform iterations; each job in
    one of ``queues`` at random (from its own seeded stream: the rest is the trace without)."""
    if n_jobs < 1:
        raise UsageError(f"--jobs must be >= 1, got {n_jobs}", "give how many jobs to generate")
    if not arrival_rate_per_h > 0:
        raise UsageError(f"--arrival-rate must be > 0, got {arrival_rate_per_h}", "give jobs per hour")
    sizes = [s for s in SIZE_WEIGHTS if cluster_gpus is None or s <= cluster_gpus]
    if not sizes:
        raise UsageError(f"--cluster-gpus {cluster_gpus} is below the smallest job (1 GPU)", "give >= 1")
    rng = random.Random(seed)
    weights = [SIZE_WEIGHTS[s] for s in sizes]
    width = len(str(n_jobs))
    pick = random.Random(f"{seed}:queues")
    t = 0.0
    jobs = []
    for i in range(n_jobs):
        t += rng.expovariate(arrival_rate_per_h / 3600.0)
        size = rng.choices(sizes, weights)[0]
        workers, gpus = rng.choice(SHAPES[size])
        model, batch = rng.choice(MODELS)
        iterations = int(math.exp(rng.uniform(math.log(MIN_ITERATIONS), math.log(MAX_ITERATIONS))))
        queue = pick.choice(queues) if queues else None
        jobs.append(TraceJob(f"job-{i:0{width}d}", round(t, 3), workers, gpus, model, batch, iterations, queue=queue))
    return jobs
