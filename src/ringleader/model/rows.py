"""Calibration from multi-GPU throughput rows: `bench train` results with several workers, or a
plain CSV a user writes from their own training logs.

A CSV has one run per line::

    model,gpu_type,batch_size,nodes,gpus_per_node,images_per_s,node,network_gbps,fabric,single_gpu_images_per_s,precision
    resnet50,V100,128,1,8,2969.45,dgx1v,100,infiniband,384.85,fp32
    resnet50,V100,128,2,8,5906.55,dgx1v,100,infiniband,384.85,fp32

Required: model, gpu_type, batch_size (per GPU), nodes, gpus_per_node, images_per_s (the whole
job), node (a topology preset). Optional: network_gbps (per NIC, default 25), nics (1), fabric
(tcp), precision (fp32), accumulation_steps (1: micro-batches of batch_size per optimizer step),
single_gpu_images_per_s (the same software's 1-GPU rate at that batch; a line with 1 node x 1
GPU gives it too). The rows are predicted with the same placement the
topology policy gives such a job, and the scaling constants (overlap, the sync terms and, when
rows span nodes without a calibrated network link, the fabric's efficiency) are fitted to them
as ``fidelity.fit_scaling`` fits the shipped ones.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from ringleader.errors import UsageError
from ringleader.inputs import read_bounded
from ringleader.model.calibration import Calibration, ComputeFit, LinkFit
from ringleader.model.checks import Check, check_point
from ringleader.model.comm import check_fabric, net_latency_us
from ringleader.model.fidelity import EMULATED, FidelityResult, FidelityRow, Scaling, fidelity_table, fit_scaling
from ringleader.model.fit import (
    FIX,
    MAX_BATCH,
    MAX_IMAGES_PER_S,
    MAX_NODES,
    TrainPoint,
    fit_calibration,
    read_bench_files,
)
from ringleader.model.tables import check_model, check_precision, normalize_gpu_type
from ringleader.topology.presets import preset

REQUIRED = ("model", "gpu_type", "batch_size", "nodes", "gpus_per_node", "images_per_s", "node")
CSV_FIX = f"give a header with {', '.join(REQUIRED)} (see docs/model.md, 'Calibration from throughput rows')"
# A row's numbers are bounded as a bench result's are (fit.py says why), and its links as a
# cluster file's.
MAX_NETWORK_GBPS = 1e6
MAX_NICS = 64


def _positive(text: str, what: str, high: float) -> float:
    value = float(text)
    if not math.isfinite(value) or not 0 < value <= high:
        raise ValueError(f"{what} must be > 0 and at most {high:g}, got {text!r}")
    return value


def _count(text: str, what: str, high: int) -> int:
    if not (text.isascii() and text.isdigit() and len(text) <= 9 and 1 <= int(text) <= high):  # 9 digits: int()
        raise ValueError(f"{what} must be a whole number from 1 to {high}, got {text!r}")
    return int(text)


def read_throughput_csv(path: str | Path) -> tuple[list[FidelityRow], list[ComputeFit]]:
    """Multi-GPU rows and the 1-GPU rates of a throughput CSV; bad input is a UsageError naming
    the file, the line and the problem."""
    p = Path(path)
    # restval: a short line gives empty cells (refused by name below), not None
    reader = csv.DictReader(read_bounded(p, "throughput CSV", fix="give a CSV saved as UTF-8").splitlines(), restval="")
    try:
        records = list(reader)
    except csv.Error as exc:  # a field over the csv module's size limit, a NUL byte
        raise UsageError(f"{str(p)!r} line {reader.line_num}: not CSV ({exc})", CSV_FIX) from None
    header = reader.fieldnames or []
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise UsageError(f"{str(p)!r} has no column {missing[0]!r}", CSV_FIX)
    twice = [c for c in header if header.count(c) > 1]
    if twice:  # DictReader would keep the last one's value without a word
        raise UsageError(f"{str(p)!r} line 1: column {twice[0]!r} given twice", CSV_FIX)
    rows: list[FidelityRow] = []
    singles: list[ComputeFit] = []
    for line, rec in enumerate(records, start=2):
        try:
            model = check_model(rec["model"])
            gpu = normalize_gpu_type(rec["gpu_type"])
            precision = check_precision(rec.get("precision") or "fp32")
            batch = _count(rec["batch_size"], "batch_size", MAX_BATCH)
            nodes = _count(rec["nodes"], "nodes", MAX_NODES)
            gpus = preset(rec["node"]).n_gpus  # unknown preset: one line listing them
            per_node = _count(rec["gpus_per_node"], f"gpus_per_node (a {rec['node']} node has {gpus})", gpus)
            rate = _positive(rec["images_per_s"], "images_per_s", MAX_IMAGES_PER_S)
            single_text = rec.get("single_gpu_images_per_s") or ""
            single = _positive(single_text, "single_gpu_images_per_s", MAX_IMAGES_PER_S) if single_text else None
            fabric = check_fabric(rec.get("fabric") or "tcp")
            gbps = _positive(rec.get("network_gbps") or "25", "network_gbps", MAX_NETWORK_GBPS)
            nics = _count(rec.get("nics") or "1", "nics", MAX_NICS)
            accumulation = _count(rec.get("accumulation_steps") or "1", "accumulation_steps", MAX_BATCH)
        except (ValueError, UsageError) as exc:
            msg = exc.one_line() if isinstance(exc, UsageError) else str(exc)
            raise UsageError(f"{str(p)!r} line {line}: {msg}", CSV_FIX) from None
        if nodes * per_node == 1:
            framework = (rec.get("framework") or "").strip()[:128] or None
            singles.append(ComputeFit(model, gpu, precision, batch, rate, framework=framework))
            continue
        rows.append(FidelityRow(
            str(p), f"line {line}", "", gpu, rec["node"], nodes, per_node, gbps, nics, fabric, model, precision,
            batch, measured=rate, single_gpu=single, accumulation=accumulation,
        ))  # fmt: skip
    return rows, singles


def rows_from_train(points: Sequence[TrainPoint], cal: Calibration) -> list[FidelityRow]:
    """`bench train` results with several workers, as rows on emulated hosts (the run's own
    nodes), predicted with the compute and link fits of the same calibration."""
    rows = []
    for p in points:
        if p.world_size < 2 or not cal.compute_fits(p.model, p.gpu_type, p.precision):
            continue
        per = math.ceil(p.world_size / p.nodes)
        if per * p.nodes != p.world_size:
            continue  # uneven spreads are checked (model.checks), not fitted
        same = tuple(c for c in cal.compute if c.image_size == p.image_size)
        rows.append(FidelityRow(
            p.source, "bench train", p.backend, p.gpu_type, EMULATED, p.nodes, per, 25.0, 1, "tcp", p.model,
            p.precision, p.batch_size, measured=p.images_per_s, compute=same, links=tuple(sorted(cal.links.items())),
            backend=p.backend or None,
        ))  # fmt: skip
    return rows


def fit_rows(cal: Calibration, rows: Sequence[FidelityRow]) -> tuple[Calibration, list[FidelityResult]]:
    """``cal`` with overlap, sync terms and (rows across nodes, no calibrated network) a network
    link fitted to ``rows``; and the rows as predicted with it."""
    if not rows:
        return cal, []
    rows = _priced(cal, rows)
    spanning = [r for r in rows if r.nodes > 1 and r.node != EMULATED]
    fabrics = _fitted_fabrics(cal, rows)
    fitted = fit_scaling(rows, sweeps=2, fabrics=fabrics, start=Scaling.shipped())
    links = dict(cal.links)
    if len(fabrics) == 1 and len({(r.network_gbps, r.nics) for r in spanning}) == 1:
        r = spanning[0]
        gbs = r.network_gbps / 8 * r.nics * fitted.fabrics[fabrics[0]]
        links["network"] = LinkFit(gbs, net_latency_us(), len(spanning))
    out = replace(cal, links=links, overlap=fitted.overlap, sync=(fitted.host_us_per_image, fitted.node_jitter))
    return out, fidelity_table(fitted, rows)


def _priced(cal: Calibration, rows: Sequence[FidelityRow]) -> list[FidelityRow]:
    """The rows, each priced with the calibration's compute rates where it gives none itself."""
    return [replace(r, compute=r.compute or tuple(cal.compute)) for r in rows]


def _fitted_fabrics(cal: Calibration, rows: Sequence[FidelityRow]) -> list[str]:
    """The fabrics whose efficiency the rows fit: those they span nodes on, unless the
    calibration measured the network itself."""
    if cal.link("network") is not None:
        return []
    return sorted({r.fabric for r in rows if r.nodes > 1 and r.node != EMULATED})


HELD_OUT_FOLDS = 5  # rows left out together (leave-one-out up to this many rows: each refit costs ~0.05 s per row)


def held_out_errors(cal: Calibration, rows: Sequence[FidelityRow]) -> list[float]:
    """Each row predicted by the scaling fitted without it (k-fold, rows dealt round robin over
    at most HELD_OUT_FOLDS folds): the error a calibrated prediction of a run like them has, as
    opposed to the in-sample error of ``fit_rows``."""
    if len(rows) < 2:
        return []
    rows = _priced(cal, rows)
    fabrics = _fitted_fabrics(cal, rows)
    folds = min(len(rows), HELD_OUT_FOLDS)
    errors = []
    for fold in range(folds):
        held = rows[fold::folds]
        rest = [r for i, r in enumerate(rows) if i % folds != fold]
        fitted = fit_scaling(rest, sweeps=2, fabrics=fabrics, start=Scaling.shipped())
        errors += [result.error for result in fidelity_table(fitted, held)]
    return errors


def calibrate_files(paths: Sequence[str | Path]) -> tuple[Calibration, list[TrainPoint]]:
    """The calibration fitted from ``paths`` (bench JSON, throughput CSV) and the multi-worker
    CPU train results it was checked on. Multi-GPU throughput rows (CSV lines, or bench train
    runs on GPUs) also fit overlap, the sync terms and the network (``fit_calibration_rows``)."""
    cal, checks, _ = fit_calibration_rows(paths)
    return cal, [c.point for c in checks]


def fit_calibration_rows(paths: Sequence[str | Path]) -> tuple[Calibration, list[Check], list[FidelityResult]]:
    """The calibration, its checks (each multi-worker CPU run predicted by it, ``checks.Check``)
    and the fitted rows' predictions (``fidelity.FidelityResult``)."""
    if not paths:
        raise UsageError("no bench result files given", FIX)
    json_paths = [p for p in paths if not str(p).lower().endswith(".csv")]
    rows, singles = [], []
    for p in paths:
        if str(p).lower().endswith(".csv"):
            more, one = read_throughput_csv(p)
            rows.extend(more)
            singles.extend(one)
    allreduce, train = read_bench_files(json_paths) if json_paths else ([], [])
    multi = [t for t in train if t.world_size > 1]
    if not allreduce and not any(t.world_size == 1 for t in train) and not singles and not rows:
        raise UsageError(
            "nothing to calibrate: no allreduce result with 2+ ranks, no 1-worker train result and no "
            "multi-GPU throughput row",
            "run `ringleader bench allreduce` with 2+ ranks or `ringleader bench train`, or pass a throughput CSV",
        )
    if allreduce or any(t.world_size == 1 for t in train):
        cal = fit_calibration(allreduce, train, [str(p) for p in paths])
    else:
        cal = Calibration(sources=tuple(str(p) for p in paths))
    cal = Calibration(cal.links, (*cal.compute, *singles), cal.overlap, cal.sources, cal.sync)
    gpu_rows = [r for r in rows_from_train(multi, cal) if r.gpu.lower() != "cpu"]
    unscaled = cal
    cal, results = fit_rows(cal, [*rows, *gpu_rows])
    # what the calibration's predictions are worth: the rows each predicted without it, and the
    # CPU runs of several workers, which nothing was fitted to
    checks = [check_point(p, cal) for p in multi if p.gpu_type.lower() == "cpu"]
    held_out = [*held_out_errors(unscaled, [*rows, *gpu_rows]), *(c.error for c in checks)]
    return replace(cal, held_out=tuple(held_out)), checks, results
