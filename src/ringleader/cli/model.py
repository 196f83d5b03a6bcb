"""`ringleader predict` and `ringleader calibrate`: parse, call ringleader.model, render."""

from __future__ import annotations

from typing import Any

import click

from ringleader.cli.output import console, emit_data, output_option, table
from ringleader.cli.params import BACKENDS, FiniteFloat, count
from ringleader.engines.embedded.engine import Runtime
from ringleader.errors import UsageError
from ringleader.model import Prediction, compare_policies, known_models, load_calibration, predict_placement
from ringleader.model.calibration import MIN_HELD_OUT, Calibration, save_calibration
from ringleader.model.comm import ALGORITHMS, FABRICS, calibration_fabric_note, check_fabric
from ringleader.model.fidelity import seeds_cluster
from ringleader.model.predict import calibration_compute_note
from ringleader.model.rows import fit_calibration_rows
from ringleader.model.tables import check_model
from ringleader.scheduler import ClusterState, JobRequest, Placement, WorkerSlot, policy_names
from ringleader.topology import load_cluster_file


def parse_placement(spec: str, state: ClusterState, gpus_per_worker: int, job: str = "predict") -> Placement:
    """``node-a:0,1,2,3`` or ``node-a:0,1+node-b:0,1``: GPU ids per node, split into workers
    of ``gpus_per_worker`` GPUs in the order given."""
    slots: list[WorkerSlot] = []
    fix = "write NODE:GPU,GPU,...[+NODE:GPU,...], e.g. node-a:0,1+node-b:0,1"
    for part in spec.split("+"):
        name, sep, ids = part.strip().partition(":")
        if not sep or not name:
            raise UsageError(f"placement part {part!r} has no NODE:GPUS", fix)
        if name not in state.by_name:
            raise UsageError(f"placement names unknown node {name!r}", f"use one of {', '.join(state.by_name)}")
        try:
            gpus = [int(g) for g in ids.split(",") if g.strip()]
        except ValueError:
            raise UsageError(f"placement part {part!r}: GPU ids must be integers", fix) from None
        n = state.by_name[name].spec.topology.n_gpus
        bad = [g for g in gpus if not 0 <= g < n]
        if bad or len(set(gpus)) != len(gpus) or not gpus:
            raise UsageError(f"placement part {part!r}: GPU ids must be distinct, in 0..{n - 1}", fix)
        per = max(gpus_per_worker, 1)
        if len(gpus) % per:
            raise UsageError(f"{len(gpus)} GPU(s) on {name} do not split into workers of {per}", fix)
        for i in range(0, len(gpus), per):
            slots.append(WorkerSlot(len(slots), name, tuple(gpus[i : i + per])))
    return Placement(job, tuple(slots))


def _state(cluster: str | None) -> tuple[ClusterState, str]:
    """The cluster to predict on and where it came from: ``--cluster FILE``, else the applied
    cluster as `submit` sees it now (its running jobs' GPUs taken), else the reference study's."""
    if cluster:
        return ClusterState.empty(load_cluster_file(cluster)), f"cluster file {cluster}"

    with Runtime.open(readonly=True) as rt:
        state = rt.nodes()
    if state.total_gpus:
        return state, f"applied cluster ({len(state.nodes)} node(s), {state.free_gpus} of {state.total_gpus} GPUs free)"
    return seeds_cluster(), "no cluster with GPUs applied: the reference study's 2 x dgx1v on 25 Gb/s"


def _row(name: str, pred: Prediction | None) -> list[Any]:
    if pred is None:
        return [name, "does not fit", "-", "-", "-", "-", "-", "-", "-"]
    # the slowest link in submit's words ("NV1 25 GB/s"), without the where (in -o json)
    link = pred.bottleneck.split(" (", 1)[0] if pred.bottleneck else "-"
    return [
        name, pred.placement, f"{pred.images_per_s:.1f}", likely_range(pred), f"{pred.step_time_s * 1e3:.1f}",
        f"{pred.comm_s * 1e3:.1f} {pred.allreduce.algorithm}", link, pred.bound, f"{pred.scaling_efficiency:.0%}",
    ]  # fmt: skip


def likely_range(pred: Prediction) -> str:
    """The images/s 8 in 10 held-out runs like it were measured within (published rows, or the
    calibration's own left-out runs); "calibrated" where the calibration has too few of those."""
    if pred.likely_range is None:
        return "calibrated"
    low, high = pred.likely_range
    return f"{low:,.0f}-{high:,.0f}"


@click.command("predict")
@click.option("--model", "model", required=True, help=f"Model ({', '.join(known_models())}).")
@click.option("--batch-size", type=count(1, 1 << 20), default=64, show_default=True,
              help="Images per GPU per step.")
@click.option("--precision", default="fp32", show_default=True, help="fp32, tf32, fp16 (amp) or bf16.")
@click.option("--accumulation-steps", type=count(1, 1 << 20), default=1, show_default=True,
              help="Micro-batches per optimizer step (gradient accumulation: one allreduce a step).")
@click.option("--workers", type=count(1, 1 << 20), default=None,
              help="Workers of the gang (required without --placement).")
@click.option("--gpus", "gpus", type=count(1, 1 << 10), default=1, show_default=True, help="GPUs per worker.")
@click.option("--gpu-type", default=None, help="GPU type (default: each node's GPU model).")
@click.option("--cluster", type=click.Path(dir_okay=False), default=None,
              help="Cluster YAML (default: the applied cluster, as submit sees it now).")  # fmt: skip
@click.option("--policy", "policies", multiple=True, help="Policy to predict (repeatable; default: all).")
@click.option("--placement", "placement_spec", default=None, help="Predict this placement: node-a:0,1+node-b:0,1.")
@click.option("--calibration", type=click.Path(dir_okay=False), default=None, help="Calibration JSON.")
@click.option("--backend", type=click.Choice(BACKENDS), default=None,
              help="Communication backend for calibrated links.")
@click.option("--algorithm", type=click.Choice(ALGORITHMS), default="auto", show_default=True,
              help="Allreduce algorithm (auto: the faster of ring and tree).")
@click.option("--overlap", type=FiniteFloat(0.0, 1.0), default=None,
              help="Share of the hideable allreduce hidden behind backward (0..1).")
@click.option("--fabric", default=None,
              help=f"Inter-node fabric: {', '.join(FABRICS)} (default: from the nodes' NIC names; none listed: tcp).")
@click.option("--network-efficiency", type=FiniteFloat(0.0, 1.0, low_open=True), default=None,
              help="Share of the line rate the inter-node hop gets (default: the fabric's).")
@click.option("--data-rate", type=FiniteFloat(0.0, low_open=True), default=None,
              help="Input pipeline images/s per worker (ceiling).")
@output_option("json", "yaml")
def predict_cmd(model: str, batch_size: int, precision: str, accumulation_steps: int, workers: int | None, gpus: int,
                gpu_type: str | None, cluster: str | None, policies: tuple[str, ...],
                placement_spec: str | None, calibration: str | None, backend: str | None,
                algorithm: str, overlap: float | None, fabric: str | None, network_efficiency: float | None,
                data_rate: float | None, output: str) -> None:  # fmt: skip
    """Predict images/s of a data-parallel job for the placement each policy picks (or one given)."""
    check_model(model)  # first, with a suggestion: before any cluster or calibration is read
    if fabric is not None:
        fabric = check_fabric(fabric)
    state, origin = _state(cluster)
    cal: Calibration | None = load_calibration(calibration) if calibration else None
    opts: dict[str, Any] = {"backend": backend, "algorithm": algorithm, "overlap": overlap,
                            "data_images_per_s": data_rate, "fabric": fabric,
                            "network_efficiency": network_efficiency, "accumulation": accumulation_steps}  # fmt: skip
    if placement_spec:
        placement = parse_placement(placement_spec, state, gpus)
        if workers is not None and workers != len(placement.slots):
            raise UsageError(f"--workers {workers} but the placement has {len(placement.slots)}", "drop --workers")
        preds: dict[str, Prediction | None] = {
            "given": predict_placement(state.by_name, placement, model, batch_size, precision, gpu_type, cal, **opts)
        }
    else:
        if workers is None or workers < 1:
            raise UsageError("--workers is required (>= 1) without --placement", "pass --workers N")
        job = JobRequest("predict", workers, gpus)
        known = policy_names()
        for p in policies:
            if p not in known:
                raise UsageError(f"unknown policy {p!r}", f"use one of {', '.join(known)}")
        preds = compare_policies(
            state, job, model=model, batch_size=batch_size, precision=precision, gpu_type=gpu_type,
            calibration=cal, policies=policies or None, **opts,
        )  # fmt: skip
    notes = [calibration_fabric_note(cal, state.nodes, backend)]
    notes += dict.fromkeys(calibration_compute_note(cal, p) for p in preds.values() if p is not None)
    for note in filter(None, notes):
        click.echo(f"warning: {note}", err=True)
    if output in ("json", "yaml"):
        emit_data({"cluster": origin, "predictions": [{"policy": k, **(v.as_dict() if v else {"fits": False})}
                                                      for k, v in preds.items()]}, output)  # fmt: skip
        return
    click.echo(f"cluster: {origin}")
    cols = ["POLICY", "PLACEMENT", "IMAGES/S", "LIKELY (8 IN 10)", "STEP ms", "ALLREDUCE ms", "BOTTLENECK", "BOUND",
            "SCALING"]
    console().print(table(cols, [_row(k, v) for k, v in preds.items()]))


@click.command("calibrate")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--out", "out", type=click.Path(dir_okay=False), default=None, help="Write the calibration JSON here.")
@output_option("json")
def calibrate_cmd(files: tuple[str, ...], out: str | None, output: str) -> None:
    """Fit links, compute rates and scaling from `bench allreduce|train -o json` files and
    throughput CSVs (one multi-GPU run per line: docs/model.md)."""
    cal, checks, fitted = fit_calibration_rows(files)
    if out:
        save_calibration(cal, out)
    if output == "json":
        emit_data({**cal.as_dict(), "checks": [c.as_dict() for c in checks],
                   "rows": [r.as_dict() for r in fitted]}, "json")  # fmt: skip
        return
    rows: list[list[Any]] = [
        [f"link {k}", f"{v.gbs:.4g} GB/s", f"{v.latency_us:.3g} us", v.points, f"{v.rel_rmse:.1%}"]
        for k, v in sorted(cal.links.items())
    ]
    rows += [
        [f"compute {c.model}/{c.gpu_type}/{c.precision} {c.image_size}px"
         + (f" {c.threads} threads" if c.threads and c.gpu_type == "cpu" else ""),
         f"{c.images_per_s:.4g} images/s @ {c.batch_size}",
         f"t0 {c.step_overhead_s * 1e3:.3g} ms", c.points, ""]
        for c in cal.compute
    ]  # fmt: skip
    if cal.sync is not None:
        rows.append(["scaling", f"overlap {cal.overlap or 0:.2f}", f"host {cal.sync[0]:.3g} us/image",
                     len(fitted), f"node jitter {cal.sync[1]:.3g}"])  # fmt: skip
    console().print(table(["FIT", "VALUE", "LATENCY/OVERHEAD", "POINTS", "REL RMSE"], rows))
    if fitted:
        frow = [
            [f"{r.row.model} {r.row.gpu} {r.row.ranks} GPU(s) on {r.row.nodes} node(s) ({r.row.table})",
             f"{r.measured:.4g}", f"{r.prediction.images_per_s:.4g}", f"{r.error:+.1%}"]
            for r in fitted
        ]  # fmt: skip
        console().print(table(["ROW", "MEASURED IMAGES/S", "PREDICTED", "ERROR"], frow))
    if checks:
        crow = [[f"{c.point.model} x{c.point.world_size} {c.point.backend}", f"{c.measured:.3g}",
                 f"{c.prediction.images_per_s:.3g}", f"{c.error:+.1%}"] for c in checks]  # fmt: skip
        console().print(table(["CHECK", "MEASURED IMAGES/S", "PREDICTED", "ERROR"], crow))
    held = held_out_line(cal)
    if held:
        click.echo(held)
    if out:
        click.echo(f"wrote {out}")


def held_out_line(cal: Calibration) -> str | None:
    """What the calibration's predictions are worth on the user's runs it left out, and whether
    that is enough for the likely range its predictions show."""
    if not cal.held_out:
        return None
    n = len(cal.held_out)
    line = (f"held out: {n} run(s) each predicted by the fit without it: errors {min(cal.held_out):+.1%} to "
            f"{max(cal.held_out):+.1%}")  # fmt: skip
    interval = cal.interval
    if interval is None:
        return f"{line}; {MIN_HELD_OUT} are needed for a likely range, so its predictions show none"
    return f"{line}; likely range of its predictions (8 in 10): {interval[0]:+.1%} to {interval[1]:+.1%}"


def register(cli: click.Group) -> None:
    cli.add_command(predict_cmd)
    cli.add_command(calibrate_cmd)
