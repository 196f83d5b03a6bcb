"""The seeds' fidelity check: fit the network on one model, predict the other.

The reference study (reference.toml [seeds]) ran 4 workers x 1 V100, batch 64, on 2 x DGX-1V
nodes: the topology policy's placement (4 GPUs of one node) and the default one (2 + 2 over the
two nodes), for VGG16 and ResNet-50. ``fit_seeds("vgg16")`` fits the network efficiency (the
share of the declared Gb/s an NCCL-over-TCP ring gets) on VGG16's two runs by least squares on
log(predicted / measured), then predicts ResNet-50's two runs with it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from ringleader.model.predict import Prediction, predict_placement
from ringleader.reference import reference
from ringleader.scheduler.framework import place
from ringleader.scheduler.types import ClusterState, JobRequest
from ringleader.topology.cluster import NodeSpec
from ringleader.topology.presets import preset

SEED_POLICIES = ("topology", "default")


@dataclass(frozen=True)
class SeedPoint:
    model: str
    policy: str
    measured: float
    predicted: float

    @property
    def error(self) -> float:
        """Relative error, (predicted - measured) / measured."""
        return self.predicted / self.measured - 1.0


@dataclass(frozen=True)
class SeedFit:
    fit_model: str
    network_efficiency: float
    network_gbs: float  # effective GB/s of the ring's inter-node hop
    overlap: float
    points: tuple[SeedPoint, ...]

    def point(self, model: str, policy: str) -> SeedPoint:
        return next(p for p in self.points if (p.model, p.policy) == (model, policy))


def seeds_cluster(network_gbps: float | None = None) -> ClusterState:
    """The seeds' cluster: two gn6v (DGX-1V layout) nodes on the default network."""
    gbps = float(reference()["network"]["default_gbps"]) if network_gbps is None else network_gbps
    return ClusterState.empty([NodeSpec(n, preset("dgx1v"), gbps) for n in ("node-a", "node-b")])


def seed_measurements() -> dict[str, dict[str, float]]:
    seeds = reference()["seeds"]
    return {m: dict(v) for m, v in seeds.items() if isinstance(v, dict)}


def _predict(model: str, policy: str, efficiency: float, overlap: float | None) -> Prediction:
    seeds = reference()["seeds"]
    state = seeds_cluster()
    job = JobRequest("seed", int(seeds["workers"]), 1, topology_aware=policy == "topology")
    decision = place(state, job, policy=policy)
    assert decision.placement is not None
    return predict_placement(
        state.by_name, decision.placement, model, int(seeds["batch_per_gpu"]), "fp32",
        network_efficiency=efficiency, overlap=overlap,
    )  # fmt: skip


def golden_min(f: Callable[[float], float], lo: float, hi: float, iters: int = 80) -> float:
    """Minimum of a unimodal ``f`` on [lo, hi] by golden-section search."""
    g = (math.sqrt(5) - 1) / 2
    a, b = lo, hi
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(iters):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(d)
    return (a + b) / 2


def fit_seeds(fit_model: str = "vgg16", overlap: float | None = None) -> SeedFit:
    """Fit the network efficiency on ``fit_model``'s seeds runs; predict every seeds run."""
    measured = seed_measurements()

    def loss(log_eff: float) -> float:
        eff = math.exp(log_eff)
        return sum(
            math.log(_predict(fit_model, pol, eff, overlap).images_per_s / measured[fit_model][pol]) ** 2
            for pol in SEED_POLICIES
        )

    eff = math.exp(golden_min(loss, math.log(1e-3), 0.0))
    points = tuple(
        SeedPoint(m, pol, measured[m][pol], _predict(m, pol, eff, overlap).images_per_s)
        for m in sorted(measured)
        for pol in SEED_POLICIES
    )
    phi = overlap if overlap is not None else float(reference()["model"]["overlap"])
    gbs = seeds_cluster().nodes[0].spec.network_gbs * eff
    return SeedFit(fit_model, eff, gbs, phi, points)
