"""Calibration: fitted link bandwidths, latencies and compute rates, and their JSON file.

A calibration file is what `ringleader calibrate` writes and `predict --calibration` reads::

    {"kind": "calibration", "version": 1, "sources": ["a.json", ...],
     "links": {"network": {"gbs": 0.83, "latency_us": 30.0, "points": 12, "rel_rmse": 0.04},
               "gloo/local": {...}},
     "compute": [{"model": "resnet50", "gpu_type": "cpu", "precision": "fp32",
                  "batch_size": 32, "images_per_s": 11.2, "step_overhead_s": 0.0, "points": 1}],
     "overlap": null, "sync": {"host_us_per_image": 12.0, "node_jitter": 0.01}}

Link keys are a hop kind (``network``, ``local`` for processes sharing one host, ``intra`` for a
whole single-node GPU ring, or a `nvidia-smi topo -m` kind such as ``NV1`` / ``SYS``), optionally
prefixed by a backend (``gloo/local``); a prefixed key wins for that backend.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ringleader.inputs import InputError, load_json, read_bounded, validate

VERSION = 2  # 2: compute fits say what framework measured them (1 files read as they are)
MIN_HELD_OUT = 5  # held-out runs a calibration needs before it states a likely range


@dataclass(frozen=True)
class LinkFit:
    """Effective one-direction GB/s and per-step latency of one hop kind."""

    gbs: float
    latency_us: float
    points: int = 0
    rel_rmse: float = 0.0


@dataclass(frozen=True)
class ComputeFit:
    """A measured or fitted single-worker rate: step time t(b) = t0 + b / peak."""

    model: str
    gpu_type: str
    precision: str
    batch_size: int
    images_per_s: float
    step_overhead_s: float = 0.0
    points: int = 1
    image_size: int = 224  # input side the rate was measured at (bench train --image-size)
    threads: int | None = None  # CPU threads of the measured worker, when known
    framework: str | None = None  # what ran it ("PyTorch": ringleader's bench; a CSV's column)


@dataclass(frozen=True)
class Calibration:
    links: Mapping[str, LinkFit] = field(default_factory=dict)
    compute: tuple[ComputeFit, ...] = ()
    overlap: float | None = None
    sources: tuple[str, ...] = ()
    sync: tuple[float, float] | None = None  # (host us per image, node jitter), fitted from multi-GPU rows
    # Its predictions' errors (predicted / measured - 1) on the user's multi-worker runs it was not
    # fitted to (rows.held_out_errors, checks.check_point): what its `interval` is read from.
    held_out: tuple[float, ...] = ()

    @property
    def interval(self) -> tuple[float, float] | None:
        """The errors 8 in 10 of its held-out runs fell within (10th and 90th percentiles); None
        with fewer than MIN_HELD_OUT of them, too few to say."""
        if len(self.held_out) < MIN_HELD_OUT:
            return None
        cuts = statistics.quantiles(self.held_out, n=10, method="inclusive")
        return cuts[0], cuts[-1]

    @property
    def compute_only(self) -> bool:
        """Only single-GPU rates were measured (a `bench train` run on one GPU): the scaling is
        the model's own, so the published rows' held-out errors with their source's 1-GPU rate
        say how far to trust its predictions (reference.toml [intervals] *_measured_compute)."""
        gpu_fits = [c for c in self.compute if c.gpu_type.lower() != "cpu"]
        return bool(gpu_fits) and len(gpu_fits) == len(self.compute) and not self.links and (
            self.overlap is None and self.sync is None)  # fmt: skip

    def link(self, kind: str, backend: str | None = None) -> LinkFit | None:
        """The fit for a hop kind: ``backend/kind`` first, then plain ``kind``; a key for
        another backend is used only when it is the one fit of that kind."""
        if backend and f"{backend}/{kind}" in self.links:
            return self.links[f"{backend}/{kind}"]
        if kind in self.links:
            return self.links[kind]
        if backend is None:
            matches = [v for k, v in self.links.items() if k.split("/")[-1] == kind]
            if len(matches) == 1:
                return matches[0]
        return None

    def links_for(self, backend: str | None = None) -> dict[str, LinkFit]:
        """The link table as ``backend`` reads it, resolved once: each hop kind's fit by
        ``link``'s rule. A prediction reads this, not ``link`` once per hop it prices."""
        kinds = {key.split("/")[-1] for key in self.links}
        return {kind: fit for kind in sorted(kinds) if (fit := self.link(kind, backend)) is not None}

    def compute_fits(self, model: str, gpu_type: str, precision: str) -> list[ComputeFit]:
        return [
            fit for fit in self.compute
            if (fit.model, fit.gpu_type.lower(), fit.precision) == (model, gpu_type.lower(), precision)
        ]  # fmt: skip

    def gpu_types(self) -> list[str]:
        return sorted({c.gpu_type for c in self.compute})

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": "calibration",
            "version": VERSION,
            "sources": list(self.sources),
            "links": {
                k: {
                    "gbs": round(v.gbs, 6),
                    "latency_us": round(v.latency_us, 3),
                    "points": v.points,
                    "rel_rmse": round(v.rel_rmse, 4),
                }
                for k, v in sorted(self.links.items())
            },
            "compute": [
                {
                    "model": c.model,
                    "gpu_type": c.gpu_type,
                    "precision": c.precision,
                    "batch_size": c.batch_size,
                    "images_per_s": round(c.images_per_s, 4),
                    "step_overhead_s": round(c.step_overhead_s, 6),
                    "points": c.points,
                    "image_size": c.image_size,
                    "threads": c.threads,
                    "framework": c.framework,
                }
                for c in self.compute
            ],
            "overlap": self.overlap,
            "sync": None if self.sync is None else {
                "host_us_per_image": round(self.sync[0], 4), "node_jitter": round(self.sync[1], 5)},
            "held_out": [round(e, 4) for e in self.held_out],
        }  # fmt: skip


def save_calibration(cal: Calibration, path: str | Path) -> None:
    Path(path).write_text(json.dumps(cal.as_dict(), indent=2) + "\n")


def read_json(path: str | Path, what: str, fix: str) -> Any:
    """The JSON document in ``path``, read bounded and strictly (ringleader.inputs.load_json: no
    NaN, no key twice, bounded depth and integers); anything else is a UsageError naming the file."""
    p = Path(path)

    text = read_bounded(p, what, fix=f"{fix} (UTF-8 JSON)")  # bounded, UTF-8, one line naming the file otherwise
    return load_json(text, f"{what} {str(p)!r}", fix)


def load_calibration(path: str | Path) -> Calibration:
    """Read a calibration file; a malformed one is a UsageError naming the file and the problem."""
    p = Path(path)
    fix = "pass a file written by `ringleader calibrate --out`"
    doc = read_json(p, "calibration file", fix)
    return calibration_from_dict(doc, f"calibration file {str(p)!r}", fix)


def calibration_from_dict(doc: Any, origin: str = "calibration", fix: str = "") -> Calibration:
    """A Calibration from its JSON document, checked against ``calibration_schema`` first."""
    from ringleader.model.calibration_schema import CalibrationFile

    fix = fix or "pass a file written by `ringleader calibrate --out`"
    if not isinstance(doc, dict) or doc.get("kind") != "calibration":
        raise InputError(f'{origin} is malformed: "kind" is not "calibration"', fix)
    version = doc.get("version", 0)
    if isinstance(version, int) and not isinstance(version, bool) and version > VERSION:
        raise InputError(f"{origin} is malformed: version {version} is newer than this ringleader reads ({VERSION})",
                         "upgrade ringleader, or calibrate again with this one")  # fmt: skip
    cal = validate(CalibrationFile, doc, origin, fix)
    links = {key: LinkFit(v.gbs, v.latency_us, v.points, v.rel_rmse) for key, v in cal.links.items()}
    compute = tuple(
        ComputeFit(c.model, c.gpu_type, c.precision, c.batch_size, c.images_per_s, c.step_overhead_s, c.points,
                   c.image_size, c.threads, c.framework)
        for c in cal.compute
    )  # fmt: skip
    sync = None if cal.sync is None else (cal.sync.host_us_per_image, cal.sync.node_jitter)
    return Calibration(links, compute, cal.overlap, tuple(cal.sources), sync, tuple(cal.held_out))
