"""Predict measured multi-worker train runs from a calibration: the model's error on this machine.

A bench train result says only how many ranks and nodes it used, so the check rebuilds that
job as ranks spread block-wise over ``nodes`` emulated hosts and predicts it with the same
``predict_placement`` the scheduler uses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ringleader.model.calibration import Calibration
from ringleader.model.fidelity import emulated_host
from ringleader.model.fit import TrainPoint
from ringleader.model.predict import Prediction, predict_placement
from ringleader.scheduler.types import ClusterState, Placement, WorkerSlot


@dataclass(frozen=True)
class Check:
    point: TrainPoint
    prediction: Prediction

    @property
    def measured(self) -> float:
        return self.point.images_per_s

    @property
    def error(self) -> float:
        return self.prediction.images_per_s / self.measured - 1.0

    def as_dict(self) -> dict[str, object]:
        p = self.point
        return {
            "model": p.model, "gpu_type": p.gpu_type, "precision": p.precision, "backend": p.backend,
            "batch_size": p.batch_size, "world_size": p.world_size, "nodes": p.nodes,
            "measured_images_per_s": round(self.measured, 3),
            "predicted_images_per_s": round(self.prediction.images_per_s, 3),
            "error": round(self.error, 4), "source": p.source,
        }  # fmt: skip


def emulated_job(point: TrainPoint) -> tuple[ClusterState, Placement]:
    """``world_size`` ranks over ``nodes`` emulated hosts, node-major (ranks 0..k-1 on host 0)."""
    per = math.ceil(point.world_size / point.nodes)
    specs = [emulated_host(f"host-{i}", per, point.gpu_type) for i in range(point.nodes)]
    slots = tuple(WorkerSlot(r, f"host-{r // per}", (r % per,)) for r in range(point.world_size))
    return ClusterState.empty(specs), Placement("check", slots)


def check_point(point: TrainPoint, calibration: Calibration) -> Check:
    """Predict ``point`` with the compute fits of its own image size."""
    same = tuple(c for c in calibration.compute if c.image_size == point.image_size)
    calibration = replace(calibration, compute=same)
    state, placement = emulated_job(point)
    pred = predict_placement(
        state.by_name, placement, point.model, point.batch_size, point.precision, point.gpu_type,
        calibration, backend=point.backend or None,
    )  # fmt: skip
    return Check(point, pred)
