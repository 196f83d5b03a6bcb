"""Text output in the formats users know: nccl-tests tables and tf_cnn_benchmarks lines."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

RULE = "-" * 64


def _time(us: float) -> str:
    # nccl-tests prints more decimals for short times.
    return f"{us:7.2f}" if us < 10000 else f"{us:7.1f}" if us < 100000 else f"{us:7.0f}"


def allreduce_header(cfg: Any, backend: str, world: int, devices: list[dict[str, Any]],
                     machine: str = "") -> list[str]:  # fmt: skip
    """nccl-tests' header: the run's parameters, one "Using devices" line per rank, then the
    machine's load (a busy machine explains odd numbers)."""
    title = f"# ringleader bench {cfg.collective}: backend {backend} nranks {world}"
    split = ([f"# note: -t {cfg.nthreads} -g {cfg.ngpus}: each thread's GPU runs as its own rank "
              "(one process per device)"] if cfg.nthreads * cfg.ngpus > 1 else [])  # fmt: skip
    return [
        f"{title} nThread {cfg.nthreads} nGpus {cfg.ngpus} minBytes {cfg.minbytes} maxBytes {cfg.maxbytes} "
        f"step: {cfg.factor}(factor) warmup iters: {cfg.warmup} iters: {cfg.iters} "
        f"validation: {cfg.check} blocking: {cfg.blocking} time: {_AVERAGE[cfg.average]}",
        *split,
        "#",
        "# Using devices",
        *(f"#  Rank {d['rank']:2d} Group  0 Pid {d['pid']:6d} on {d['host']:>10s} device {d['device']}"
          for d in devices),
        *([f"# Machine: {machine}"] if machine else []),
        *_mca_lines(backend),
        *(
            [f"# note: {backend} out-of-place = a copy of the input + the in-place collective "
             "(torch.distributed has no out-of-place allreduce/reduce-scatter)"]
            if backend in ("gloo", "nccl") and cfg.collective in ("allreduce", "reducescatter")
            else []
        ),
        "#",
        f"# {'':>56s}out-of-place{'':>25s}in-place",
        f"# {'size':>10s}  {'count':>12s}  {'type':>8s}  {'redop':>6s}  {'root':>6s}  "
        f"{'time':>7s}  {'algbw':>6s}  {'busbw':>6s}  {'#wrong':>6s}  "
        f"{'time':>7s}  {'algbw':>6s}  {'busbw':>6s}  {'#wrong':>6s}",
        f"# {'(B)':>10s}  {'(elements)':>12s}  {'':>8s}  {'':>6s}  {'':>6s}  "
        f"{'(us)':>7s}  {'(GB/s)':>6s}  {'(GB/s)':>6s}  {'':>6s}  "
        f"{'(us)':>7s}  {'(GB/s)':>6s}  {'(GB/s)':>6s}  {'':>6s}",
    ]


_AVERAGE = {0: "rank0", 1: "avg", 2: "min", 3: "max"}


# mpirun's own bookkeeping in every rank's environment, not settings that shape the figures.
MCA_INTERNAL = ("orte_", "prte_", "ess", "pmix", "initial_wdir", "shmem_", "mpi_warn_on_fork")


def _mca_lines(backend: str) -> list[str]:
    """Open MPI's settings in this rank's environment (`-np` sets yielding while waiting, no
    single-copy transfers, no binding, oversubscription): they change the figures, so the
    table shows them."""
    if backend != "mpi":
        return []
    mca = sorted(f"{k[9:]}={v}" for k, v in os.environ.items()
                 if k.startswith("OMPI_MCA_") and not k[9:].startswith(MCA_INTERNAL))  # fmt: skip
    return [f"# MCA: {' '.join(mca)}"] if mca else []


def allreduce_row(row: dict[str, Any]) -> str:
    parts = [f"{row['size_bytes']:12d}  {row['count']:12d}  {row['type']:>8s}  "
             f"{row['redop']:>6s}  {row['root']:6d}"]  # fmt: skip
    for key in ("oop", "ip"):
        r = row[key]
        wrong = "N/A" if r["wrong"] is None else str(r["wrong"])
        parts.append(f"{_time(r['time_us'])}  {r['algbw_gbs']:6.2f}  {r['busbw_gbs']:6.2f}  "
                     f"{wrong:>6s}")  # fmt: skip
    return "  ".join(parts)


def allreduce_footer(result: dict[str, Any]) -> list[str]:
    bad = result["out_of_bounds"]
    return [
        f"# Out of bounds values : {bad} {'OK' if bad == 0 else 'FAILED'}",
        f"# Avg bus bandwidth    : {result['avg_busbw_gbs']:g} ",
        "#",
    ]


def train_header(cfg: Any, world: int, device: str) -> list[str]:
    return [
        f"Model:       {cfg.model}",
        f"Dataset:     {'synthetic' if cfg.data == 'synthetic' else cfg.data}",
        "Mode:        training",
        f"Batch size:  {cfg.batch_size * world} global",
        f"             {cfg.batch_size} per device",
        f"Num batches: {cfg.num_batches}",
        f"Devices:     {world} x {device}",
        f"Precision:   {cfg.precision}",
        f"Backend:     {cfg.backend}",
        "==========",
        "Step\tImg/sec\ttotal_loss",
    ]


def speed_stats(batch: int, step_times: list[float]) -> tuple[float, float, float]:
    """tf_cnn_benchmarks' (mean, uncertainty, jitter) of per-step images/s."""
    import numpy as np

    speeds = np.array([batch / t for t in step_times]) if step_times else np.zeros(1)
    mean = float(speeds.mean())
    uncertainty = float(speeds.std() / np.sqrt(len(speeds)))
    jitter = float(1.4826 * np.median(np.abs(speeds - np.median(speeds))))
    return mean, uncertainty, jitter


def train_step_line(step: int, batch: int, step_times: list[float], loss: float) -> str:
    mean, unc, jit = speed_stats(batch, step_times)
    return f"{step}\timages/sec: {mean:.1f} +/- {unc:.1f} (jitter = {jit:.1f})\t{loss:.3f}"


def about(seconds: float) -> str:
    """A time to wait, as a person says it: 40 s, 3.5 min, 2.1 h."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def train_estimate(warmup_s: float, warmup_steps: int, timed_steps: int) -> str:
    """The timed steps' length from the warm-up's (the first warm-up step, which builds what
    later steps reuse, counted with the rest: an estimate errs long rather than short)."""
    per_step = warmup_s / max(warmup_steps, 1)
    return (f"note: a warm-up step took {per_step:.2f} s: the {timed_steps} timed steps take about "
            f"{about(per_step * timed_steps)}")


def train_footer(total: float) -> list[str]:
    return [RULE, f"total images/sec: {total:.2f}", RULE]


class Status:
    """A one-line progress status on stderr, rewritten in place (at most 4 times a second) and
    cleared before each table row, so a long size shows it is alive without cluttering the table."""

    def __init__(self, stream: Any = None) -> None:
        self._clock = time.monotonic
        self.stream = stream or sys.stderr
        self.start = self._clock()
        self.last = 0.0
        self.shown = False

    def show(self, text: str) -> None:
        now = self._clock()
        if now - self.last < 0.25:
            return
        self.last = now
        self.stream.write(f"\r# measuring {text} ({now - self.start:.0f} s elapsed)\x1b[K")
        self.stream.flush()
        self.shown = True

    def clear(self) -> None:
        if self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.shown = False
