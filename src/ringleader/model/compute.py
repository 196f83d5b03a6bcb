"""Per-GPU compute time of one training step: t(b) = t0 + b / peak.

``t0`` is a fixed time per step (kernel launches, optimizer update, framework bookkeeping) and
``1/peak`` the time per image once the GPU is busy. ``peak`` follows from one published point
(``images_per_s`` at batch ``b_pub``) and ``t0``: 1/peak = (b_pub/images_per_s - t0) / b_pub.
``t0`` per model comes from a published pair of batch sizes on one GPU (tables.step_overheads),
assumed the same on every GPU type. A calibration entry (measured) replaces both.
"""

from __future__ import annotations

from dataclasses import dataclass

from ringleader.errors import UsageError
from ringleader.model.calibration import Calibration
from ringleader.model.tables import (
    PRECISION_TABLE,
    check_model,
    check_precision,
    known_gpu_types,
    model_constant,
    published_rates,
    step_overhead_s,
)


@dataclass(frozen=True)
class ComputeRate:
    """Compute time of one step of ``batch_size`` images on one GPU (or one CPU worker)."""

    model: str
    gpu_type: str
    precision: str
    batch_size: int
    overhead_s: float  # t0
    per_image_s: float  # 1 / peak
    source: str
    threads: int | None = None  # CPU threads of the calibrated worker (None: unknown / a GPU)

    @property
    def step_s(self) -> float:
        return self.overhead_s + self.batch_size * self.per_image_s

    @property
    def images_per_s(self) -> float:
        return self.batch_size / self.step_s

    @property
    def backward_s(self) -> float:
        """The part of the step that allreduce can overlap with (backward ~ 2/3 of the FLOPs)."""
        return model_constant("backward_fraction") * self.batch_size * self.per_image_s


def gpu_types(calibration: Calibration | None = None) -> list[str]:
    extra = calibration.gpu_types() if calibration else []
    return sorted({*known_gpu_types(), *extra})


def check_gpu_type(gpu_type: str, calibration: Calibration | None = None) -> str:
    known = gpu_types(calibration)
    for name in known:
        if name.lower() == gpu_type.strip().lower():
            return name
    raise UsageError(f"unknown GPU type {gpu_type!r}", f"use one of {', '.join(known)}")


def compute_rate(
    model: str, gpu_type: str, precision: str, batch_size: int, calibration: Calibration | None = None,
    threads: int | None = None,
) -> ComputeRate:
    """The step compute time of ``model`` on one ``gpu_type`` at ``batch_size`` per GPU
    (``threads``: prefer a CPU calibration measured with that many threads)."""
    if batch_size < 1:
        raise UsageError(f"batch size must be >= 1, got {batch_size}", "give the per-GPU batch size")
    model = check_model(model)
    precision = check_precision(precision)
    gpu = check_gpu_type(gpu_type, calibration)
    fit = calibration.compute_for(model, gpu, precision, threads) if calibration else None
    if fit is not None:
        t0 = fit.step_overhead_s
        per_image = (fit.batch_size / fit.images_per_s - t0) / fit.batch_size
        source = f"calibrated: {fit.images_per_s:.4g} images/s at batch {fit.batch_size}"
        return ComputeRate(model, gpu, precision, batch_size, t0, max(per_image, 0.0), source, fit.threads)
    pub = published_rates().get((model, gpu, PRECISION_TABLE[precision]))
    if pub is None:
        have = sorted(m for m, g, p in published_rates() if g == gpu and p == PRECISION_TABLE[precision])
        raise UsageError(
            f"no single-{gpu} {precision} training rate for {model}",
            f"use one of {', '.join(have) or '(none)'} or measure it with `ringleader bench train` "
            "and pass `--calibration`",
        )
    t_pub = pub.batch / pub.images_per_s
    t0 = min(step_overhead_s(model), 0.5 * t_pub)  # never more than half the published step
    per_image = (t_pub - t0) / pub.batch
    source = f"published: {pub.images_per_s:g} images/s at batch {pub.batch} ({pub.source.split(',')[0]})"
    return ComputeRate(model, gpu, precision, batch_size, t0, per_image, source)
