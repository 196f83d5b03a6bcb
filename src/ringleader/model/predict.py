"""Throughput of a data-parallel job on a placement: the API the scheduler-facing code calls.

    from ringleader.model import predict_placement
    pred = predict_placement(state.by_name, decision.placement, model="vgg16", batch_size=64)
    print(f"predicted {pred.images_per_s:.0f} images/s ({pred.bound}-bound)")
    job = pricing("vgg16", 64)                     # one job on several placements: resolved once
    price(job, state.by_name, placement)           # then each placement priced over it

Step time (docs/model.md): t = t_compute + t_allreduce - overlap x (t_allreduce - least exposed)
+ t_sync. The least exposed part follows the order backward makes gradients ready
(tables.exposed_allreduce_s); t_sync is the per-step cost of keeping k ranks per node and m
nodes in step (grows with both); images/s = ranks x batch / t, capped by the input pipeline
when its rate is given.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from ringleader.errors import UsageError
from ringleader.model.calibration import Calibration, LinkFit
from ringleader.model.comm import PUBLISHED, AllreduceCost, allreduce_cost, n_ranks
from ringleader.model.compute import ComputeRate, Rates, rates_for
from ringleader.model.tables import check_model, check_precision, exposed_s, grad_bytes, grad_ready_curves
from ringleader.reference import reference
from ringleader.scheduler.framework import get_policy, place, placement_metrics, policy_names
from ringleader.scheduler.types import ClusterState, JobRequest, NodeState, Placement, Workload


@dataclass(frozen=True)
class Prediction:
    """Predicted step time and throughput of one job on one placement."""

    model: str
    gpu_type: str
    precision: str
    batch_size: int  # per GPU (per rank)
    ranks: int
    nodes: int
    placement: str
    images_per_s: float
    step_time_s: float
    compute_s: float
    comm_s: float  # the whole allreduce
    comm_exposed_s: float  # the part not hidden behind backward
    overlap: float
    bound: str  # "compute" | "communication" | "data"
    scaling_efficiency: float  # images_per_s / (ranks x single-GPU images/s at this batch)
    single_gpu_images_per_s: float
    grad_bytes: float
    allreduce: AllreduceCost
    compute_source: str
    data_ceiling_images_per_s: float | None = None
    sync_s: float = 0.0  # per-step cost of keeping ranks and nodes in step
    bottleneck: str = ""  # the placement's slowest link, worded as `submit` and `get` word it
    calibrated: bool = False  # priced with a user's calibration (no row of the published table)
    # a calibrated prediction: the errors 8 in 10 of the calibration's held-out runs fell within
    calibration_interval: tuple[float, float] | None = None
    # a calibration of single-GPU rates only (Calibration.compute_only), this GPU's rate among them
    measured_compute: bool = False
    accumulation: int = 1  # micro-batches of batch_size per optimizer step (one allreduce per step)

    @property
    def likely_range(self) -> tuple[float, float] | None:
        """The images/s 8 in 10 runs like this one were measured within: for the published rates,
        the model's held-out errors on published rows of this kind (one node, several nodes;
        reference.toml [intervals]); for a calibrated prediction, its calibration's on the user's
        own runs it left out; where the calibration measured only this GPU's rate, the published
        rows' errors with their source's own 1-GPU rate; else None (nothing tests it)."""
        if self.calibrated:
            if self.calibration_interval is not None:
                return within(self.images_per_s, *self.calibration_interval)
            return likely_range(self.images_per_s, self.nodes, measured_compute=True) if self.measured_compute else None
        return likely_range(self.images_per_s, self.nodes)

    def summary(self) -> str:
        return f"predicted {self.images_per_s:.0f} images/s ({self.bound}-bound)"

    def as_dict(self) -> dict[str, Any]:
        return {
            "model": self.model, "gpu_type": self.gpu_type, "precision": self.precision,
            "batch_size": self.batch_size, "accumulation": self.accumulation, "ranks": self.ranks, "nodes": self.nodes,
            "placement": self.placement, "images_per_s": round(self.images_per_s, 2),
            "step_time_s": round(self.step_time_s, 6), "compute_s": round(self.compute_s, 6),
            "comm_s": round(self.comm_s, 6), "comm_exposed_s": round(self.comm_exposed_s, 6),
            "overlap": self.overlap, "bound": self.bound,
            "scaling_efficiency": round(self.scaling_efficiency, 4),
            "single_gpu_images_per_s": round(self.single_gpu_images_per_s, 2),
            "grad_bytes": int(self.grad_bytes), "allreduce": self.allreduce.as_dict(),
            "compute_source": self.compute_source,
            "data_ceiling_images_per_s": self.data_ceiling_images_per_s,
            "sync_s": round(self.sync_s, 6), "bottleneck": self.bottleneck,
            "likely_images_per_s": [round(x, 1) for x in self.likely_range] if self.likely_range else None,
        }  # fmt: skip


def _gpu_types_of(nodes: Mapping[str, NodeState], placement: Placement, known: Iterable[str]) -> list[str]:
    found = []
    for name in placement.nodes:
        model = nodes[name].spec.topology.gpu_model
        if not model:
            raise UsageError(
                f"node {name!r} declares no GPU model",
                f"pass a GPU type (one of {', '.join(known)}) or set gpu_model in the cluster file",
            )
        found.append(model)
    return sorted(set(found))


def cpu_host_share(placement: Placement) -> int:
    """Ranks on the busiest host of the placement."""
    per_node: dict[str, int] = {}
    for slot in placement.slots:
        per_node[slot.node] = per_node.get(slot.node, 0) + max(1, len(slot.gpus))
    return max(per_node.values(), default=1)


def cpu_compute_s(rate: ComputeRate, placement: Placement, rates: Rates) -> float:
    """Compute time per step of one CPU rank when k ranks share a host: each rank gets cores // k
    threads (the bench's rule) and the k ranks together cannot beat the host's best single-worker
    rate. So t = max(k x best step, step measured at cores // k threads when calibrated); with
    no thread counts known, k x the calibrated step."""
    k = cpu_host_share(placement)
    counts = sorted({f.threads for f in rates.fits_on(rate.gpu_type) if f.threads})
    measured = [rates.rate(rate.gpu_type, rate.batch_size, t) for t in counts]
    best = min((r.step_s for r in measured), default=rate.step_s)
    matched = [r.step_s for r in measured if r.threads == max(1, max(counts, default=1) // k)]
    return max([k * best, *matched])


def scaling_constant(name: str) -> float:
    return float(reference()["scaling"][name])


def sync_time_s(placement: Placement, batch_size: int, compute_s: float,
                host_us_per_image: float | None = None, node_jitter: float | None = None) -> float:  # fmt: skip
    """Per-step cost of synchronous data parallelism beyond the allreduce's bytes: each extra
    rank on a host adds host work per image (input pipeline, launches, PCIe and CPU shared by
    the node's ranks), and the slowest of m nodes sets the pace: if a node's step varies by a
    share ``jitter`` of the compute time, the expected maximum of m such steps exceeds their mean
    by jitter x t_compute x sqrt(2 ln m) (the Gaussian extreme-value bound).
    t = host x (k - 1) x b + jitter x t_compute x sqrt(2 ln m)."""
    per_node: dict[str, int] = {}
    for slot in placement.slots:
        per_node[slot.node] = per_node.get(slot.node, 0) + max(1, len(slot.gpus))
    k = max(per_node.values(), default=1)
    m = len(per_node)
    host = scaling_constant("host_us_per_image") if host_us_per_image is None else host_us_per_image
    jitter = scaling_constant("node_jitter") if node_jitter is None else node_jitter
    return host * 1e-6 * (k - 1) * batch_size + jitter * compute_s * math.sqrt(2 * math.log(max(m, 1)))


def _slowest(rates: Iterable[ComputeRate]) -> ComputeRate:
    return max(rates, key=lambda r: r.step_s)


@dataclass(frozen=True)
class Pricing:
    """What a job is priced with, resolved once from what it names: its checked model and
    precision, per-GPU batch and micro-batches, the bytes it allreduces and the order backward
    makes them ready, where its compute rates come from (``compute.Rates``: the calibration's fits
    read once), how it communicates (``Calibration.links_for`` its backend: the link table read
    once), the overlap and sync constants, its calibration. ``price`` is arithmetic over it and a
    placement, so pricing one job on several placements resolves nothing twice."""

    model: str
    precision: str
    batch_size: int  # per GPU (per rank)
    accumulation: int  # micro-batches of batch_size per optimizer step
    grad_bytes: float
    overlap: float
    sync: tuple[float, float] | None  # (host us per image, node jitter); None: the published constants
    calibration: Calibration | None
    links: Mapping[str, LinkFit]
    rates: Rates
    ready_curve: tuple[float, ...] | None  # tables.grad_ready_curves; None: every gradient ready at once
    gpu_type: str | None = None  # None: each node's GPU model
    backend: str | None = None
    algorithm: str = "auto"
    ring_order: str | None = None
    network_efficiency: float | None = None
    fabric: str | None = None
    data_images_per_s: float | None = None  # one worker's input pipeline; None: unlimited


def pricing(
    model: str,
    batch_size: int,
    precision: str = "fp32",
    gpu_type: str | None = None,
    calibration: Calibration | None = None,
    *,
    backend: str | None = None,
    algorithm: str = "auto",
    ring_order: str | None = None,
    overlap: float | None = None,
    network_efficiency: float | None = None,
    fabric: str | None = None,
    data_images_per_s: float | None = None,
    sync: tuple[float, float] | None = None,
    accumulation: int = 1,
) -> Pricing:
    """The pricing of a job of ``batch_size`` images per GPU (see ``predict_placement``), checked
    once: an unknown model or precision, or an out-of-range setting, is a UsageError here."""
    if accumulation < 1:
        raise UsageError(f"gradient accumulation must be >= 1 micro-batch per step, got {accumulation}",
                         "give the micro-batches each optimizer step sums (1: none)")  # fmt: skip
    model = check_model(model)
    precision = check_precision(precision)
    nbytes = grad_bytes(model, precision)
    phi = overlap if overlap is not None else (
        calibration.overlap if calibration and calibration.overlap is not None else scaling_constant("overlap")
    )  # fmt: skip
    if not 0.0 <= phi <= 1.0:
        raise UsageError(f"overlap must be within 0..1, got {phi}", "give the share of allreduce to hide")
    if data_images_per_s is not None and data_images_per_s <= 0:
        raise UsageError(f"data pipeline rate must be > 0, got {data_images_per_s}", "give images/s per worker")
    if batch_size < 1:
        raise UsageError(f"batch size must be >= 1, got {batch_size}", "give the per-GPU batch size")
    if sync is None and calibration is not None and calibration.sync is not None:
        sync = calibration.sync
    links = calibration.links_for(backend) if calibration is not None else PUBLISHED
    rates = rates_for(model, precision, calibration)
    return Pricing(model, precision, batch_size, accumulation, nbytes, phi, sync, calibration, links, rates,
                   grad_ready_curves().get(model), gpu_type, backend, algorithm, ring_order, network_efficiency,
                   fabric, data_images_per_s)  # fmt: skip


def predict_placement(
    nodes: Mapping[str, NodeState],
    placement: Placement,
    model: str,
    batch_size: int,
    precision: str = "fp32",
    gpu_type: str | None = None,
    calibration: Calibration | None = None,
    *,
    backend: str | None = None,
    algorithm: str = "auto",
    ring_order: str | None = None,
    overlap: float | None = None,
    network_efficiency: float | None = None,
    fabric: str | None = None,
    data_images_per_s: float | None = None,
    sync: tuple[float, float] | None = None,
    uplink_flows: Mapping[str, int] | None = None,
    accumulation: int = 1,
) -> Prediction:
    """Predict a synchronous data-parallel job of ``batch_size`` images per GPU on ``placement``.

    ``nodes`` maps node names to their state (``ClusterState.by_name``). ``gpu_type`` None uses
    each node's GPU model (the slowest GPU sets the step). ``data_images_per_s`` is what one
    worker's input pipeline delivers (None: unlimited). ``fabric`` (tcp, roce, infiniband, efa)
    overrides what the nodes' NIC names suggest; ``network_efficiency`` overrides the fabric's
    share of the line rate; ``sync`` overrides (host us per image, node jitter).
    ``accumulation``: micro-batches of ``batch_size`` per optimizer step (gradient accumulation:
    DDP's no_sync, Horovod's backward_passes_per_step): a step computes that many and allreduces
    once, hidden behind the last one's backward only; step_time_s and compute_s are per step.
    One job on several placements: ``pricing`` once, then ``price`` each.
    """
    job = pricing(model, batch_size, precision, gpu_type, calibration, backend=backend, algorithm=algorithm,
                  ring_order=ring_order, overlap=overlap, network_efficiency=network_efficiency, fabric=fabric,
                  data_images_per_s=data_images_per_s, sync=sync, accumulation=accumulation)  # fmt: skip
    return price(job, nodes, placement, uplink_flows)


def price(
    job: Pricing, nodes: Mapping[str, NodeState], placement: Placement, uplink_flows: Mapping[str, int] | None = None
) -> Prediction:
    """The prediction of ``job`` on ``placement`` (docs/model.md): its slowest GPU's compute, the
    allreduce over the placement's hops, the part of it backward cannot hide, the sync cost.
    ``uplink_flows``: gangs crossing each switch (``comm.uplink_cap``)."""
    missing = [n for n in placement.nodes if n not in nodes]
    if missing:
        raise UsageError(f"placement names unknown node {missing[0]!r}", f"use one of {', '.join(nodes)}")
    calibration, batch_size = job.calibration, job.batch_size
    types = [job.gpu_type] if job.gpu_type else _gpu_types_of(nodes, placement, job.rates.known)
    rate = _slowest(job.rates.rate(t, batch_size) for t in types)
    cost = allreduce_cost(
        nodes, placement, job.grad_bytes, algorithm=job.algorithm, backend=job.backend, ring_order=job.ring_order,
        links=job.links, network_efficiency=job.network_efficiency, fabric=job.fabric, uplink_flows=uplink_flows,
    )  # fmt: skip
    micro_s = cpu_compute_s(rate, placement, job.rates) if rate.gpu_type.lower() == "cpu" else rate.step_s
    backward_s = rate.backward_s * micro_s / rate.step_s
    hidden = job.overlap * (cost.time_s - exposed_s(job.ready_curve, cost.time_s, backward_s))
    exposed = cost.time_s - hidden
    compute_s = job.accumulation * micro_s
    sync_s = sync_time_s(placement, job.accumulation * batch_size, compute_s, *(job.sync or (None, None)))
    step = compute_s + exposed + sync_s
    ranks = n_ranks(placement)
    images = ranks * batch_size * job.accumulation / step
    bound = "communication" if cost.time_s > compute_s else "compute"
    ceiling = None
    if job.data_images_per_s is not None:
        ceiling = job.data_images_per_s * len(placement.slots)
        if ceiling < images:
            images, bound = ceiling, "data"
            step = ranks * batch_size * job.accumulation / images
    measured = rate.source.startswith("calibrated")
    # a calibration of GPU rates only, none of them this one, leaves the prediction the table's
    priced = calibration is not None and (measured or not calibration.compute_only)
    return Prediction(
        job.model, rate.gpu_type, job.precision, batch_size, ranks, len(placement.nodes), placement.describe(),
        images, step, compute_s, cost.time_s, exposed, job.overlap, bound,
        images / (ranks * rate.images_per_s), rate.images_per_s, job.grad_bytes, cost, rate.source, ceiling,
        sync_s, placement_metrics(nodes, placement).bottleneck.describe(), priced,
        calibration.interval if calibration is not None else None,
        calibration is not None and calibration.compute_only and measured, job.accumulation,
    )  # fmt: skip


def compare_policies(
    state: ClusterState,
    job: JobRequest,
    *,
    model: str,
    batch_size: int,
    precision: str = "fp32",
    gpu_type: str | None = None,
    calibration: Calibration | None = None,
    policies: Iterable[str] | None = None,
    **options: Any,
) -> dict[str, Prediction | None]:
    """For every policy (default: all registered), the prediction on the placement it picks
    for ``job`` on ``state``; None where that policy cannot place the job. The job is submitted
    as each policy's own kind (with or without --gputopology), so labelled nodes serve it."""
    out: dict[str, Prediction | None] = {}
    for name in policies if policies is not None else policy_names():
        as_kind = replace(job, topology_aware=get_policy(name).serves_topology_jobs)
        decision = place(state, as_kind, policy=name)
        if decision.placement is None:
            out[name] = None
            continue
        out[name] = predict_placement(
            state.by_name, decision.placement, model, batch_size, precision, gpu_type, calibration, **options
        )
    return out


def calibration_compute_note(calibration: Calibration | None, pred: Prediction) -> str | None:
    """A warning when a calibration measured training rates, but none for this prediction's
    model, GPU type and precision: the job is priced with the table's rate, not the user's."""
    if calibration is None or not calibration.compute or pred.compute_source.startswith("calibrated"):
        return None
    measured = ", ".join(sorted({f"{c.model} {c.precision} on {c.gpu_type}" for c in calibration.compute}))
    types = " or ".join(f"--gpu-type {t}" for t in sorted({c.gpu_type for c in calibration.compute}))
    return (f"the calibration measured {measured}, not {pred.model} {pred.precision} on {pred.gpu_type}: this "
            f"prediction uses the model's own rate ({pred.compute_source}); calibrate on these GPUs with this "
            f"model and precision, or pass {types} if the job runs there")  # fmt: skip


def comparison_line(preds: Mapping[str, Prediction | None], chosen: str, baseline: str = "default") -> str:
    """'predicted 900 images/s (compute-bound); default placement would give 200 (4.5x slower)'."""
    mine, other = preds.get(chosen), preds.get(baseline)
    if mine is None:
        return f"{chosen} cannot place the job"
    line = mine.summary()
    if baseline == chosen or baseline not in preds:
        return line
    if other is None:
        return f"{line}; {baseline} cannot place it"
    ratio = mine.images_per_s / other.images_per_s if other.images_per_s else float("inf")
    return f"{line}; {baseline} placement would give {other.images_per_s:.0f} ({ratio:.1f}x)"


ESTIMATE_MODEL = "resnet50"
ESTIMATE_GPU = "V100"


def estimate_model(job: JobRequest) -> str:
    """The model a job is estimated as: its hint when known, else ResNet-50."""
    try:
        return check_model(job.model) if job.model else ESTIMATE_MODEL
    except UsageError:
        return ESTIMATE_MODEL


def placement_images_per_s(
    nodes: Mapping[str, NodeState], placement: Placement, job: JobRequest, calibration: Calibration | None = None
) -> float:
    """The throughput policy's estimator: predicted images/s of ``job`` on ``placement``, for its
    model hint and workload (batch 64 in fp32 where it names none; ResNet-50 without a known
    hint). Nodes without a known GPU model are estimated as the reference V100: the ranking of
    placements needs the ratio of communication to compute, not the exact rate. ``calibration``:
    the links and rates measured on this cluster (``ringleader calibrate``) instead of the
    published ones."""
    model = estimate_model(job)
    work = job.workload or Workload()
    batch, precision, steps = work.batch_size, work.precision, work.accumulation
    try:
        return predict_placement(nodes, placement, model, batch, precision, calibration=calibration,
                                 accumulation=steps).images_per_s  # fmt: skip
    except UsageError:
        return predict_placement(nodes, placement, model, batch, precision, gpu_type=ESTIMATE_GPU,
                                 calibration=calibration, accumulation=steps).images_per_s  # fmt: skip


def likely_range(images_per_s: float, nodes: int, measured_compute: bool = False) -> tuple[float, float]:
    """The images/s 8 in 10 published rows of a prediction's kind (one node, several nodes)
    were measured within, from the model's held-out errors (reference.toml [intervals]): priced
    with the model's own 1-GPU rate, or (``measured_compute``) with their source's."""
    key = ("one_node" if nodes == 1 else "several_nodes") + ("_measured_compute" if measured_compute else "")
    low, high = reference()["intervals"][key]
    return within(images_per_s, low, high)


def within(images_per_s: float, low: float, high: float) -> tuple[float, float]:
    """The measured images/s a prediction stands for, given the errors (predicted / measured - 1)
    that runs like it fell within."""
    return images_per_s / (1 + high), images_per_s / (1 + low)


class ModelEstimator:
    """The queue's estimator (``placement_images_per_s``) with its likely range, so that the
    start rule ``finish`` waits only where waiting wins at the pessimistic end. A job with a
    calibration (``submit --calibration``) is priced with its own, its range from the runs the
    calibration left out; a calibration of single-GPU rates only takes the published rows' range
    with their source's own rate (one of them the job's model) or with the table's (none);
    any other has none."""

    def __init__(self, calibrations: Mapping[str, Calibration] | None = None) -> None:
        self.calibrations = dict(calibrations or {})

    def __call__(self, nodes: Mapping[str, NodeState], placement: Placement, job: JobRequest) -> float:
        return placement_images_per_s(nodes, placement, job, self.calibrations.get(job.name))

    def likely(self, placement: Placement, job: JobRequest, images_per_s: float) -> tuple[float, float]:
        calibration = self.calibrations.get(job.name)
        if calibration is None:
            return likely_range(images_per_s, len(placement.nodes))
        interval = calibration.interval
        if interval is not None:
            return within(images_per_s, *interval)
        if calibration.compute_only:  # its rate for the job's model, or else the table's
            measured = any(fit.model == estimate_model(job) for fit in calibration.compute)
            return likely_range(images_per_s, len(placement.nodes), measured_compute=measured)
        return images_per_s, images_per_s


def calibrated_estimator(calibrations: Mapping[str, Calibration]) -> ModelEstimator:
    """The queue's estimator where some jobs carry a calibration (``submit --calibration``): each
    job's placements priced with its own, the others with the published rates."""
    return ModelEstimator(calibrations)


#: The queue's estimator for jobs without a calibration.
MODEL_ESTIMATOR = ModelEstimator()
