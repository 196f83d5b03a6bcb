"""Per-GPU compute time of one training step: t(b) = t0 + b / peak.

``t0`` is a fixed time per step (kernel launches, optimizer update, framework bookkeeping) and
``1/peak`` the time per image once the GPU is busy. With the model's half batch ``h`` (the batch
at which a GPU runs at half its peak, tables.half_batches, the same on every GPU type) one rate
``R`` at batch ``B`` fixes both: peak = R (B + h) / B and t0 = h / peak. The rate is a
calibration entry (measured), a published one, or one derived from the nearest published GPU
(tables.derived_rate), in that order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ringleader.errors import UsageError
from ringleader.model.calibration import Calibration, ComputeFit
from ringleader.model.tables import (
    PRECISION_TABLE,
    check_model,
    check_precision,
    derived_rate,
    half_batch,
    known_gpu_types,
    model_constant,
    published_rates,
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
    """GPU types with a published (or, given a calibration, a measured) single-GPU rate."""
    extra = calibration.gpu_types() if calibration else []
    return sorted({*known_gpu_types(), *extra})


def _named(gpu_type: str, known: Sequence[str]) -> str:
    for name in known:
        if name.lower() == gpu_type.strip().lower():
            return name
    raise UsageError(f"unknown GPU type {gpu_type!r}", f"use one of {', '.join(known)}")


@dataclass(frozen=True)
class Rates:
    """Where one model's step compute times come from at one precision, read once (``rates_for``):
    the calibration's fits of that model and precision, the GPU types known, the model's half
    batch. A job priced on several placements and GPU types reads its calibration no further."""

    model: str  # checked
    precision: str  # checked
    fits: tuple[ComputeFit, ...]  # the calibration's, of this model and precision, on any GPU type
    known: tuple[str, ...]  # GPU types with a published or measured rate
    half: float  # the model's half batch (tables.half_batch)

    def fits_on(self, gpu_type: str) -> list[ComputeFit]:
        return [fit for fit in self.fits if fit.gpu_type.lower() == gpu_type.lower()]

    def fit_for(self, gpu_type: str, threads: int | None = None) -> ComputeFit | None:
        """The fit on ``gpu_type``: at 224 px when several image sizes were run; with ``threads``
        the fit measured at that many threads, else the one with the most."""
        found = self.fits_on(gpu_type)
        if threads is not None:
            exact = [f for f in found if f.threads == threads]
            found = exact or found
        return min(found, key=lambda f: (f.image_size != 224, -(f.threads or 0)), default=None)

    def rate(self, gpu_type: str, batch_size: int, threads: int | None = None) -> ComputeRate:
        """The step compute time on one ``gpu_type`` (a name as a node or user writes it) at
        ``batch_size`` (>= 1, checked by the caller) per GPU (``threads``: prefer a CPU fit
        measured with that many threads)."""
        model, precision, gpu = self.model, self.precision, _named(gpu_type, self.known)
        fit = self.fit_for(gpu, threads)
        if fit is not None:
            t0 = fit.step_overhead_s
            if fit.points == 1 and t0 == 0.0 and gpu.lower() != "cpu":
                # one measured batch on a GPU: the model's half batch supplies the fixed part
                t0 = fit.batch_size / fit.images_per_s * _fixed_share(self.half, fit.batch_size)
            per_image = (fit.batch_size / fit.images_per_s - t0) / fit.batch_size
            source = f"calibrated: {fit.images_per_s:.4g} images/s at batch {fit.batch_size}"
            return ComputeRate(model, gpu, precision, batch_size, t0, max(per_image, 0.0), source, fit.threads)
        table = PRECISION_TABLE[precision]
        pub = published_rates().get((model, gpu, table)) or derived_rate(model, gpu, table)
        if pub is None:
            have = sorted(m for m, g, p in published_rates() if g == gpu and p == table)
            raise UsageError(
                f"no single-{gpu} {precision} training rate for {model}",
                f"use one of {', '.join(have) or '(none)'} or measure it with `ringleader bench train` "
                "and pass `--calibration`",
            )
        t_pub = pub.batch / pub.images_per_s
        t0 = t_pub * _fixed_share(self.half, pub.batch)
        per_image = (t_pub - t0) / pub.batch
        kind = "derived" if pub.source.startswith("derived") else "published"
        source = f"{kind}: {pub.images_per_s:.4g} images/s at batch {pub.batch} ({pub.source.split(',')[0]})"
        return ComputeRate(model, gpu, precision, batch_size, t0, per_image, source)


def rates_for(model: str, precision: str, calibration: Calibration | None = None) -> Rates:
    """The ``Rates`` of an already checked ``model`` and ``precision`` (``tables.check_model``,
    ``tables.check_precision``), with ``calibration``'s fits where given."""
    fits = tuple(f for f in calibration.compute if (f.model, f.precision) == (model, precision)) if calibration else ()
    return Rates(model, precision, fits, tuple(gpu_types(calibration)), half_batch(model))


def compute_rate(
    model: str, gpu_type: str, precision: str, batch_size: int, calibration: Calibration | None = None,
    threads: int | None = None,
) -> ComputeRate:
    """The step compute time of ``model`` on one ``gpu_type`` at ``batch_size`` per GPU
    (``threads``: prefer a CPU calibration measured with that many threads)."""
    if batch_size < 1:
        raise UsageError(f"batch size must be >= 1, got {batch_size}", "give the per-GPU batch size")
    rates = rates_for(check_model(model), check_precision(precision), calibration)
    return rates.rate(gpu_type, batch_size, threads)


def _fixed_share(h: float, batch: int) -> float:
    """t0 / t(batch) = h / (batch + h) for the model's half batch ``h``, never more than half the step."""
    return min(h / (batch + h), 0.5)
