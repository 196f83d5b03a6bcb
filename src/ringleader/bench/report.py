"""Text output in the formats users know: nccl-tests tables and tf_cnn_benchmarks lines."""

from __future__ import annotations

import os
import socket
from typing import Any

RULE = "-" * 64


def _time(us: float) -> str:
    # nccl-tests prints more decimals for short times.
    return f"{us:7.2f}" if us < 10000 else f"{us:7.1f}" if us < 100000 else f"{us:7.0f}"


def allreduce_header(cfg: Any, backend: str, world: int, device: str) -> list[str]:
    title = f"# ringleader bench {cfg.collective}: backend {backend} nranks {world}"
    return [
        f"{title} minBytes {cfg.minbytes} maxBytes {cfg.maxbytes} step: {cfg.factor}(factor) "
        f"warmup iters: {cfg.warmup} iters: {cfg.iters} validation: {cfg.check}",
        "#",
        "# Using devices",
        f"#  Rank  0 Pid {os.getpid():6d} on {socket.gethostname():>10s} device {device}",
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


def train_footer(total: float) -> list[str]:
    return [RULE, f"total images/sec: {total:.2f}", RULE]
