"""Step-time and throughput model of data-parallel training, and its calibration.

    from ringleader.model import predict_placement, compare_policies
    pred = predict_placement(state.by_name, placement, model="vgg16", batch_size=64, precision="fp32")
    pred.images_per_s, pred.step_time_s, pred.bound, pred.scaling_efficiency

Pure functions over small frozen values; the formulas and constants are in docs/model.md and
data/reference.toml. No torch, no I/O except reading/writing calibration and bench JSON files.
"""

from ringleader.model.calibration import (
    Calibration,
    ComputeFit,
    LinkFit,
    load_calibration,
    save_calibration,
)
from ringleader.model.comm import AllreduceCost, Hop, allreduce_cost, allreduce_time_s
from ringleader.model.compute import ComputeRate, compute_rate, gpu_types
from ringleader.model.predict import (
    MODEL_ESTIMATOR,
    ModelEstimator,
    Prediction,
    calibrated_estimator,
    compare_policies,
    comparison_line,
    placement_images_per_s,
    predict_placement,
)
from ringleader.model.tables import grad_bytes, gradient_models
from ringleader.model.tables import known_models as published
from ringleader.scheduler.policies.throughput import install_estimator

# The scheduler cannot import the model (docs/architecture.md); the model plugs its estimate
# into the `throughput` policy instead.
install_estimator(MODEL_ESTIMATOR)


def known_models(calibration: Calibration | None = None) -> list[str]:
    """Models with a gradient size and a published (or, given a calibration, a measured) rate."""
    calibrated = {c.model for c in calibration.compute} if calibration else set()
    return sorted({*published(), *(m for m in gradient_models() if m in calibrated)})


__all__ = [
    "MODEL_ESTIMATOR",
    "AllreduceCost",
    "Calibration",
    "ComputeFit",
    "ComputeRate",
    "Hop",
    "LinkFit",
    "ModelEstimator",
    "Prediction",
    "allreduce_cost",
    "allreduce_time_s",
    "calibrated_estimator",
    "compare_policies",
    "comparison_line",
    "compute_rate",
    "gpu_types",
    "grad_bytes",
    "known_models",
    "load_calibration",
    "placement_images_per_s",
    "predict_placement",
    "save_calibration",
]
