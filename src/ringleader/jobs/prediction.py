"""Throughput predictions for a job's placement, shown by `get` and `submit --dry-run`.

A job submitted with ``--model`` gets "predicted N images/s; <other policy> placement would give
M" from ``ringleader.model``, at the per-GPU batch, precision and gradient accumulation it
trains at (``JobSpec.training_workload``: its flags and DeepSpeed configuration, ``jobs.hints``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ringleader.errors import RingleaderError
from ringleader.jobs.hints import job_framework
from ringleader.jobs.spec import JobSpec
from ringleader.jobs.views import JobView
from ringleader.model import MODEL_ESTIMATOR, calibrated_estimator
from ringleader.model.calibration import calibration_from_dict
from ringleader.model.comm import network_link_note
from ringleader.model.predict import Prediction, Pricing, calibration_compute_note, price, pricing
from ringleader.scheduler import Placement, WorkerSlot, Workload, place

if TYPE_CHECKING:
    from ringleader.scheduler import ClusterState, Placement
    from ringleader.scheduler.policies.throughput import Estimator


def framework_note(job: Pricing, pred: Prediction, command: Sequence[str]) -> str | None:
    """A warning when the rate ``job`` is priced with was measured with another framework than
    the one its command line runs: one GPU's rate differs by framework (docs/model.md)."""
    fit = job.rates.fit_for(pred.gpu_type)
    runs = job_framework(command)
    if fit is None or not fit.framework or runs is None:
        return None
    if runs.split()[0].lower() == fit.framework.split()[0].lower():
        return None
    return (f"the calibration's {pred.model} rate on {pred.gpu_type} was measured with {fit.framework}, and this "
            f"job runs {runs}: one GPU's rate differs by framework (on a V100, 6-31% in FP32 and up to 1.8x in "
            "mixed precision; docs/model.md); calibrate with this program's own runs (a throughput CSV)")  # fmt: skip


def described(work: Workload) -> str:
    """"batch 64/GPU, fp32", or "batch 16/GPU x 8 micro-batches a step, fp16"."""
    micro = f" x {work.accumulation} micro-batches a step" if work.accumulation > 1 else ""
    return f"batch {work.batch_size}/GPU{micro}, {work.precision}"


def placement_from_plan(name: str, plan: dict[str, Any] | None) -> Placement | None:
    """The Placement stored with a job's decision (None while it has none)."""
    chosen = (plan or {}).get("chosen")
    if not chosen:
        return None

    slots = tuple(
        WorkerSlot(int(w["index"]), str(w["node"]), tuple(int(g) for g in w["gpus"])) for w in chosen["workers"]
    )
    return Placement(name, slots)


def view_prediction(job: JobView, cluster: Callable[[], ClusterState]) -> dict[str, Any] | None:
    """`get`'s prediction for a job as an engine read it: its placement's images/s and the other
    policy's on ``cluster()`` (the cluster now, read only when there is something to predict)
    without the job; None without a --model hint or a placement."""
    placement = placement_from_plan(job.name, job.placement)
    if placement is None or not job.spec.model:
        return None
    return predict_job(cluster().without_job(job.name), job.spec, placement)


def job_pricing(spec: JobSpec, work: Workload) -> Pricing:
    """What ``spec`` is priced with at ``work`` (its ``training_workload``), resolved once for
    every placement it is priced on: with its calibration where it has one, as the queue prices
    its placements, so that what the user is shown agrees with what the queue weighs."""
    assert spec.model is not None
    calibration = calibration_from_dict(spec.calibration) if spec.calibration is not None else None
    return pricing(spec.model, work.batch_size, work.precision, calibration=calibration,
                   accumulation=work.accumulation)  # fmt: skip


def predict_job(state: ClusterState, spec: JobSpec, placement: Placement) -> dict[str, Any] | None:
    """Prediction for ``placement`` and for the placement the other policy would pick on
    ``state`` (the cluster without this job). None when the job gave no model hint."""
    if not spec.model:
        return None
    work = spec.training_workload()
    batch, precision = work.batch_size, work.precision
    out: dict[str, Any] = {"model": spec.model, "batch_size": batch, "precision": precision,
                           "accumulation": work.accumulation}  # fmt: skip
    if spec.gpus_per_worker == 0:
        return {**out, "error": "a CPU-only job: the model predicts GPU training"}

    request = spec.request()
    other = "default" if spec.topology_aware else "topology"
    try:
        job = job_pricing(spec, work)
        own = price(job, state.by_name, placement)
        alternative = place(state, request, policy=other)
        alt = price(job, state.by_name, alternative.placement) if alternative.placement is not None else None
    except RingleaderError as exc:
        return {**out, "error": exc.one_line()}
    out.update(
        images_per_s=round(own.images_per_s, 1), step_time_s=own.step_time_s, bound=own.bound,
        scaling_efficiency=own.scaling_efficiency, gpu_type=own.gpu_type, bottleneck=own.bottleneck,
        alternative={
            "policy": other,
            "placement": alternative.placement.describe() if alternative.placement else None,
            "images_per_s": round(alt.images_per_s, 1) if alt else None,
            "bottleneck": alt.bottleneck if alt else None,
        },
    )  # fmt: skip
    workload = f"{spec.model}, {described(work)}"
    likely = own.likely_range
    out["likely_images_per_s"] = [round(likely[0], 1), round(likely[1], 1)] if likely else None
    trust = f"likely {likely[0]:,.0f}-{likely[1]:,.0f}" if likely else "calibrated"
    summary = f"predicted {own.images_per_s:.0f} images/s ({trust}; {own.bound}-bound; {workload})"
    if alt is not None:
        ratio = own.images_per_s / alt.images_per_s
        summary += f"; {other} placement would give {alt.images_per_s:.0f} ({ratio:.2f}x)"
    calibration = job.calibration
    network = job.links.get("network") if calibration is not None else None  # without one: the published links
    notes = [network_link_note(network, state.nodes), calibration_compute_note(calibration, own),
             framework_note(job, own, spec.user_command or spec.command)]  # fmt: skip
    warnings = [n for n in notes if n]
    if warnings:
        out["warnings"] = warnings
        summary += "".join(f"; warning: {w}" for w in warnings)
    out["summary"] = summary
    return out


def queue_estimator(specs: Iterable[JobSpec]) -> Estimator | None:
    """The model's images/s for a queue pass that weighs start rules (``--start``/``--run-time``)
    or preemptions (``--preempt``), each job's placements priced with its own calibration where it
    has one (``--calibration``); None when no job asks for either, so a pass without one never
    loads the model."""
    weighing = [s for s in specs if s.request().prices_placements]
    if not weighing:
        return None

    calibrations = {s.name: calibration_from_dict(s.calibration) for s in weighing if s.calibration is not None}
    return calibrated_estimator(calibrations) if calibrations else MODEL_ESTIMATOR


def run_time_from_steps(spec: JobSpec, state: ClusterState) -> tuple[JobSpec, str]:
    """``spec`` with its run time: its --steps times the model's step time on its best placement
    (the one ``place`` gives it on the cluster with every GPU free), for the batch and precision
    it trains at (``JobSpec.training_workload``), with its calibration if it has one; and the line
    that says so."""
    assert spec.steps is not None and spec.model is not None
    empty = state.all_free()
    best = place(empty, spec.request()).placement
    if best is None:  # never fits: submit refuses it in its own words next
        return spec, ""
    work = spec.training_workload()
    step = price(job_pricing(spec, work), empty.by_name, best).step_time_s
    run_time = spec.steps * step
    said = (f"run time from --steps: {spec.steps} steps x {step:.3g} s ({spec.model}, {described(work)}, "
            f"on {best.describe()}) = {run_time:.0f} s")  # fmt: skip
    return replace(spec, run_time_s=run_time), said
