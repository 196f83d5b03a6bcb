"""The model against published multi-GPU results: the fidelity table and the fit of its constants.

reference.toml ``[fidelity]`` holds published throughputs (DLPerf, NVIDIA DeepLearningExamples,
Horovod's 512-GPU benchmark, the seeds' study), each with its source, cluster, fabric and job.
``fidelity_table()`` predicts every row with ``predict_placement`` and reports the signed error;
a row that gives the same source's 1-GPU rate uses it as a compute calibration (as ``calibrate``
would), so the row tests the scaling model, not the compute rate. ``fit_scaling()`` is how the
``[scaling]`` and ``[fabrics]`` constants were fitted: least absolute deviation of log(predicted /
measured) over all rows, one coordinate at a time.
"""

from __future__ import annotations

import functools
import math
import statistics
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ringleader.errors import UsageError
from ringleader.model.calibration import Calibration, ComputeFit, LinkFit
from ringleader.model.predict import Prediction, predict_placement
from ringleader.reference import reference
from ringleader.scheduler.framework import place
from ringleader.scheduler.types import ClusterState, JobRequest, Placement
from ringleader.topology.cluster import NodeSpec
from ringleader.topology.links import SELF, Link
from ringleader.topology.node import NodeTopology
from ringleader.topology.presets import preset

EMULATED = "emulated"


def emulated_host(name: str, slots: int, gpu_type: str) -> NodeSpec:
    """A host whose ``slots`` workers are processes (bench train's emulated nodes): PCIe links."""
    links = tuple(tuple(SELF if i == j else Link("PHB") for j in range(slots)) for i in range(slots))
    return NodeSpec(name, NodeTopology(links=links, gpu_model=gpu_type), emulated=True)


@dataclass(frozen=True)
class FidelityRow:
    """One published measurement: a job of ``nodes x gpus_per_node`` GPUs (or ``workers`` placed
    by ``policy``) and its throughput (``measured``) or share of linear scaling (``efficiency``)."""

    source: str
    table: str
    framework: str
    gpu: str
    node: str  # topology preset
    nodes: int
    gpus_per_node: int
    network_gbps: float
    nics: int
    fabric: str
    model: str
    precision: str
    batch: int
    measured: float | None = None
    efficiency: float | None = None
    single_gpu: float | None = None
    workers: int | None = None
    policy: str = "topology"
    # for rows measured by `bench train` (node "emulated": hosts of PCIe-linked slots) and for a
    # calibration's own rows: the compute and link fits to predict them with
    compute: tuple[ComputeFit, ...] = ()
    links: tuple[tuple[str, LinkFit], ...] = ()
    backend: str | None = None
    accumulation: int = 1  # micro-batches per optimizer step (a user's CSV; no published row has any)

    @property
    def label(self) -> str:
        what = f"{self.model} {self.precision} b{self.batch}"
        return f"{self.framework}: {what}, {self.ranks} GPU(s) on {self.nodes_used}"

    @property
    def ranks(self) -> int:
        return self.workers if self.workers is not None else self.nodes * self.gpus_per_node

    @property
    def nodes_used(self) -> str:
        if self.workers is not None:
            return f"{self.policy} placement"
        return f"{self.nodes} node(s)"


@dataclass(frozen=True)
class Scaling:
    """The constants ``fit_scaling`` fits: fabric efficiencies, overlap and the sync terms."""

    fabrics: Mapping[str, float] = field(default_factory=dict)
    overlap: float = 0.0
    host_us_per_image: float = 0.0
    node_jitter: float = 0.0

    @staticmethod
    def shipped() -> Scaling:
        ref = reference()
        fabrics = {k: float(v) for k, v in ref["fabrics"].items() if not k.endswith("source")}
        s = ref["scaling"]
        return Scaling(fabrics, float(s["overlap"]), float(s["host_us_per_image"]), float(s["node_jitter"]))


@dataclass(frozen=True)
class FidelityResult:
    row: FidelityRow
    prediction: Prediction
    measured: float  # images/s (an efficiency row: efficiency x ranks x the 1-GPU rate)

    @property
    def error(self) -> float:
        return self.prediction.images_per_s / self.measured - 1.0

    @property
    def measured_efficiency(self) -> float:
        return self.measured / (self.prediction.ranks * self.prediction.single_gpu_images_per_s)

    @property
    def predicted_efficiency(self) -> float:
        return self.prediction.scaling_efficiency

    def as_dict(self) -> dict[str, Any]:
        r = self.row
        return {
            "source": r.source, "table": r.table, "framework": r.framework, "gpu": r.gpu, "model": r.model,
            "precision": r.precision, "batch": r.batch, "gpus": r.ranks, "nodes": r.nodes, "fabric": r.fabric,
            "measured_images_per_s": round(self.measured, 2),
            "predicted_images_per_s": round(self.prediction.images_per_s, 2), "error": round(self.error, 4),
            "measured_efficiency": round(self.measured_efficiency, 4),
            "predicted_efficiency": round(self.predicted_efficiency, 4),
        }  # fmt: skip


def fidelity_rows() -> list[FidelityRow]:
    names = set(FidelityRow.__dataclass_fields__)
    return [FidelityRow(**{k: v for k, v in row.items() if k in names}) for row in reference()["fidelity"]["rows"]]


AFTER_THE_FIT = "added after the fit"


def fitted_rows() -> list[FidelityRow]:
    """The rows the shipped [scaling] constants were fitted on (rows added later are an
    out-of-sample check and say so in their source)."""
    return [r for r in fidelity_rows() if AFTER_THE_FIT not in r.source]


def not_expressible() -> list[str]:
    return [str(s) for s in reference()["fidelity"].get("not_expressible", [])]


@functools.cache
def _setup(row: FidelityRow) -> tuple[ClusterState, Placement, Calibration | None]:
    """The row's cluster, the placement its job gets, and its compute calibration (if any)."""
    if row.node == EMULATED:
        specs = [emulated_host(f"host-{i}", row.gpus_per_node, row.gpu) for i in range(row.nodes)]
    else:
        specs = [NodeSpec(f"node-{i}", preset(row.node), row.network_gbps * row.nics) for i in range(row.nodes)]
    state = ClusterState.empty(specs)
    if row.workers is not None:
        job = JobRequest("fidelity", row.workers, 1, topology_aware=row.policy == "topology")
        decision = place(state, job, policy=row.policy)
    else:
        job = JobRequest("fidelity", row.nodes * row.gpus_per_node, 1, topology_aware=True)
        decision = place(state, job, policy="topology")
    if decision.placement is None:
        raise ValueError(f"fidelity row does not fit its cluster: {row.label}")
    compute = row.compute
    if row.single_gpu is not None:
        compute = (ComputeFit(row.model, row.gpu, row.precision, row.batch, row.single_gpu), *compute)
    cal = Calibration(dict(row.links), compute) if compute or row.links else None
    return state, decision.placement, cal


def predict_row(row: FidelityRow, scaling: Scaling | None = None) -> FidelityResult:
    sc = scaling or Scaling.shipped()
    state, placement, cal = _setup(row)
    pred = predict_placement(
        state.by_name, placement, row.model, row.batch, row.precision, row.gpu, cal, fabric=row.fabric,
        backend=row.backend, overlap=sc.overlap, network_efficiency=sc.fabrics.get(row.fabric),
        sync=(sc.host_us_per_image, sc.node_jitter), accumulation=row.accumulation,
    )  # fmt: skip
    if row.measured is not None:
        measured = row.measured
    else:
        assert row.efficiency is not None
        measured = row.efficiency * pred.ranks * pred.single_gpu_images_per_s
    return FidelityResult(row, pred, measured)


def fidelity_table(scaling: Scaling | None = None, rows: Iterable[FidelityRow] | None = None) -> list[FidelityResult]:
    return [predict_row(r, scaling) for r in (fidelity_rows() if rows is None else rows)]


@dataclass(frozen=True)
class FidelitySummary:
    rows: int
    expressible: int
    median_abs_error: float
    within_node_points: tuple[float, ...]  # |predicted - measured| efficiency, points, 1-node rows

    @property
    def expressible_share(self) -> float:
        return self.expressible / self.rows if self.rows else 0.0

    @property
    def median_within_node_points(self) -> float:
        return statistics.median(self.within_node_points) if self.within_node_points else 0.0


def summarise(results: Sequence[FidelityResult]) -> FidelitySummary:
    within = tuple(
        abs(r.predicted_efficiency - r.measured_efficiency) * 100
        for r in results
        if r.row.nodes == 1 and r.row.workers is None
    )
    return FidelitySummary(
        len(results) + len(not_expressible()), len(results),
        statistics.median(abs(r.error) for r in results), within,
    )


def golden_min(f: Callable[[float], float], lo: float, hi: float, iters: int = 40) -> float:
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


def loss(results: Iterable[FidelityResult]) -> float:
    """Summed |log(predicted / measured)|: a least-absolute-deviation fit, so that the few rows
    no placement model can explain (frameworks that lose 40% on one NVLinked node where others
    lose 4%) do not drag every other prediction towards them."""
    return sum(abs(math.log(r.prediction.images_per_s / r.measured)) for r in results)


_BOUNDS: dict[str, tuple[float, float]] = {
    "overlap": (0.0, 1.0), "host_us_per_image": (0.0, 60.0), "node_jitter": (0.0, 0.2),
}  # fmt: skip


def fit_scaling(
    rows: Sequence[FidelityRow] | None = None, sweeps: int = 3, fabrics: Sequence[str] = ("tcp",),
    start: Scaling | None = None,
) -> Scaling:  # fmt: skip
    """Fit the efficiency of ``fabrics`` (the others keep their sourced values), overlap and the
    sync terms by coordinate descent on the summed absolute log error."""
    rows = list(fitted_rows() if rows is None else rows)
    current = start or Scaling.shipped()

    def with_value(sc: Scaling, name: str, value: float) -> Scaling:
        if name.startswith("fabric:"):
            return replace(sc, fabrics={**sc.fabrics, name.split(":", 1)[1]: value})
        if name == "overlap":
            return replace(sc, overlap=value)
        if name == "host_us_per_image":
            return replace(sc, host_us_per_image=value)
        return replace(sc, node_jitter=value)

    names = [f"fabric:{f}" for f in fabrics] + list(_BOUNDS)
    for _ in range(sweeps):
        for name in names:
            lo, hi = _BOUNDS.get(name, (0.01, 1.0))
            users = rows if not name.startswith("fabric:") else [r for r in rows if r.fabric == name[7:]]

            def objective(
                x: float, name: str = name, users: list[FidelityRow] = users, base: Scaling = current
            ) -> float:
                return loss(fidelity_table(with_value(base, name, x), users))

            current = with_value(current, name, golden_min(objective, lo, hi))
    return current


@dataclass(frozen=True)
class HeldOut:
    """One row predicted three times: with the shipped constants (fitted with it, where it is one
    of the fitted rows); with constants fitted on every other source's rows only (``held_out``:
    the scaling model, the row's compute being its source's own 1-GPU rate); and as a user
    without a calibration gets it (``uncalibrated``: those constants and the model's own 1-GPU
    rate, published for another framework or derived, so that the compute's error counts too)."""

    shipped: FidelityResult
    held_out: FidelityResult
    uncalibrated: FidelityResult


# Where no row left to fit on runs over a fabric, its efficiency is what the model would assume
# with no measurement of it: the RDMA-class share of the line rate ([fabrics] infiniband).
UNMEASURED_FABRIC = "infiniband"


def leave_one_source_out(rows: Sequence[FidelityRow] | None = None, sweeps: int = 2) -> list[HeldOut]:
    """Leave-one-source-out cross-validation: for each source (the publisher, ``short_source``:
    DLPerf's several reports ran on one cluster, so they go out together), the scaling constants
    fitted on the other sources' rows (``fit_scaling``: TCP's efficiency too where TCP rows
    remain), then that source's rows predicted with them, beside the shipped constants'."""
    rows = list(fidelity_rows() if rows is None else rows)
    shipped = Scaling.shipped()
    out: list[HeldOut] = []
    for source in dict.fromkeys(short_source(r.source) for r in rows):
        held = [r for r in rows if short_source(r.source) == source]
        rest = [r for r in rows if short_source(r.source) != source]
        fabrics = tuple(f for f in ("tcp",) if any(r.fabric == f for r in rest))
        start = shipped
        for fabric in {r.fabric for r in held} - {r.fabric for r in rest}:
            start = replace(start, fabrics={**start.fabrics, fabric: shipped.fabrics[UNMEASURED_FABRIC]})
        fitted = fit_scaling(rest, sweeps=sweeps, fabrics=fabrics, start=start) if rest else start
        for r in held:
            uncalibrated = predict_row(replace(r, single_gpu=None), fitted)
            out.append(HeldOut(predict_row(r, shipped), predict_row(r, fitted), uncalibrated))
    return out


def model_family(model: str) -> str:
    """How docs/model.md groups models: transformers and convolutional networks."""
    return "transformer" if model.startswith("bert") else "CNN"


def seeds_cluster(network_gbps: float | None = None) -> ClusterState:
    """The seeds' cluster: two gn6v (DGX-1V layout) nodes on the default network."""
    gbps = float(reference()["network"]["default_gbps"]) if network_gbps is None else network_gbps
    return ClusterState.empty([NodeSpec(n, preset("dgx1v"), gbps) for n in ("node-a", "node-b")])


def seed_results(scaling: Scaling | None = None) -> list[FidelityResult]:
    """The seeds' four runs (VGG16 and ResNet-50, topology and default placement)."""
    return fidelity_table(scaling, [r for r in fidelity_rows() if r.workers is not None])


def load_rows(path: str) -> list[FidelityRow]:
    """Rows of the same form as reference.toml's ``[[fidelity.rows]]`` from a TOML file of
    ``[[rows]]`` tables (a hold-out set is checked the same way as the shipped table)."""
    try:
        with open(path, "rb") as fh:
            doc = tomllib.load(fh)
    except OSError as exc:
        raise UsageError(f"cannot read {path!r}: {exc.strerror}", "check the path") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path!r} is not TOML: {exc}", "write [[rows]] tables as in reference.toml") from None
    names = set(FidelityRow.__dataclass_fields__)
    try:
        return [FidelityRow(**{k: v for k, v in row.items() if k in names}) for row in doc.get("rows", [])]
    except TypeError as exc:
        fix = "give every row the fields of reference.toml's [[fidelity.rows]]"
        raise UsageError(f"{path!r}: {exc}", fix) from None


def short_source(source: str) -> str:
    for needle, name in (("DLPerf", "DLPerf"), ("DeepLearningExamples", "NVIDIA DLE"), ("horovod", "Horovod"),
                         ("seeds", "seeds (ACK)")):  # fmt: skip
        if needle in source:
            return name
    return source.split(" ", 1)[0]


def markdown(results: Sequence[FidelityResult]) -> str:
    """The fidelity table as docs/model.md shows it, then the summary line."""
    lines = [
        "| # | source | table | framework | GPU | model | prec. | batch | GPUs (nodes) | fabric | measured | predicted "
        "| error | eff. measured | eff. predicted |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(results, 1):
        row = r.row
        src = short_source(row.source)
        where = f"{row.ranks} ({row.nodes})" if row.workers is None else f"{row.ranks} ({row.policy})"
        lines.append(
            f"| {i} | {src} | {row.table} | {row.framework} | {row.gpu} | {row.model} | {row.precision} | "
            f"{row.batch} | {where} | {row.fabric} | {r.measured:,.1f} | {r.prediction.images_per_s:,.1f} | "
            f"{r.error:+.1%} | {r.measured_efficiency:.1%} | {r.predicted_efficiency:.1%} |"
        )
    s = summarise(results)
    lines.append("")
    lines.append(
        f"{s.expressible} of {s.rows} rows expressible ({s.expressible_share:.0%}); median |error| "
        f"{s.median_abs_error:.1%}; within-node scaling efficiency: median |difference| "
        f"{s.median_within_node_points:.1f} points over {len(s.within_node_points)} one-node rows, "
        f"{sum(p <= 3 for p in s.within_node_points)} of them within 3 points"
    )
    for name, part in subsets(results).items():
        if part:
            errors = [r.error for r in part]
            lines.append(
                f"{name}: {len(part)} rows, median |error| {statistics.median(map(abs, errors)):.1%}, "
                f"median error {statistics.median(errors):+.1%}"
            )
    return "\n".join(lines)


def subsets(results: Sequence[FidelityResult]) -> dict[str, list[FidelityResult]]:
    """The parts of the table the model is judged on separately (docs/model.md)."""
    return {
        "mixed precision": [r for r in results if r.row.precision in ("fp16", "bf16")],
        "mixed precision, one node": [r for r in results if r.row.precision in ("fp16", "bf16") and r.row.nodes == 1],
        "multi-node InfiniBand": [r for r in results if r.row.nodes > 1 and r.row.fabric == "infiniband"],
        "added after the fit": [r for r in results if AFTER_THE_FIT in r.row.source],
    }


if __name__ == "__main__":  # python -m ringleader.model.fidelity [rows.toml]
    import sys

    chosen = load_rows(sys.argv[1]) if len(sys.argv) > 1 else None
    print(markdown(fidelity_table(rows=chosen)))
