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
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ringleader.errors import UsageError

VERSION = 1


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


@dataclass(frozen=True)
class Calibration:
    links: Mapping[str, LinkFit] = field(default_factory=dict)
    compute: tuple[ComputeFit, ...] = ()
    overlap: float | None = None
    sources: tuple[str, ...] = ()
    sync: tuple[float, float] | None = None  # (host us per image, node jitter), fitted from multi-GPU rows

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

    def compute_fits(self, model: str, gpu_type: str, precision: str) -> list[ComputeFit]:
        return [
            fit for fit in self.compute
            if (fit.model, fit.gpu_type.lower(), fit.precision) == (model, gpu_type.lower(), precision)
        ]  # fmt: skip

    def compute_for(
        self, model: str, gpu_type: str, precision: str, threads: int | None = None
    ) -> ComputeFit | None:
        """The fit for (model, device, precision): at 224 px when several image sizes were run;
        with ``threads`` the fit measured at that many threads, else the one with the most."""
        found = self.compute_fits(model, gpu_type, precision)
        if threads is not None:
            exact = [f for f in found if f.threads == threads]
            found = exact or found
        return min(found, key=lambda f: (f.image_size != 224, -(f.threads or 0)), default=None)

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
                }
                for c in self.compute
            ],
            "overlap": self.overlap,
            "sync": None if self.sync is None else {
                "host_us_per_image": round(self.sync[0], 4), "node_jitter": round(self.sync[1], 5)},
        }  # fmt: skip


def save_calibration(cal: Calibration, path: str | Path) -> None:
    Path(path).write_text(json.dumps(cal.as_dict(), indent=2) + "\n")


def read_json(path: str | Path, what: str, fix: str) -> Any:
    """The JSON document in ``path``; unreadable or not JSON is a UsageError naming the file."""
    p = Path(path)
    from ringleader.topology.cluster import read_bounded

    text = read_bounded(p, what, fix=f"{fix} (UTF-8 JSON)")  # bounded, UTF-8, one line naming the file otherwise
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{what} {str(p)!r} is not JSON (line {exc.lineno}: {exc.msg})", fix) from None


def load_calibration(path: str | Path) -> Calibration:
    """Read a calibration file; a malformed one is a UsageError naming the file and the problem."""
    p = Path(path)
    doc = read_json(p, "calibration file", "pass a file written by `ringleader calibrate --out`")
    try:
        return calibration_from_dict(doc)
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(
            f"calibration file {str(p)!r} is malformed: {_describe(exc)}",
            "pass a file written by `ringleader calibrate --out`",
        ) from None


def _describe(exc: Exception) -> str:
    return f"missing key {exc}" if isinstance(exc, KeyError) else str(exc)


def _positive(value: Any, what: str) -> float:
    x = float(value)
    if not math.isfinite(x) or x <= 0:
        raise ValueError(f"{what} must be a positive number, got {value!r}")
    return x


def _nonneg(value: Any, what: str) -> float:
    x = float(value)
    if not math.isfinite(x) or x < 0:
        raise ValueError(f"{what} must be >= 0, got {value!r}")
    return x


def calibration_from_dict(doc: Any) -> Calibration:
    if not isinstance(doc, dict) or doc.get("kind") != "calibration":
        raise ValueError('"kind" is not "calibration"')
    if int(doc.get("version", 0)) > VERSION:
        raise ValueError(f"version {doc.get('version')} is newer than this ringleader reads ({VERSION})")
    links_doc = doc.get("links", {})
    if not isinstance(links_doc, dict):
        raise ValueError('"links" must be an object')
    links = {
        str(k): LinkFit(
            _positive(v["gbs"], f"links.{k}.gbs"), _nonneg(v.get("latency_us", 0.0), f"links.{k}.latency_us"),
            int(v.get("points", 0)), float(v.get("rel_rmse", 0.0)),
        )
        for k, v in links_doc.items()
    }  # fmt: skip
    compute_doc = doc.get("compute", [])
    if not isinstance(compute_doc, list):
        raise ValueError('"compute" must be a list')
    compute = tuple(
        ComputeFit(
            str(c["model"]), str(c["gpu_type"]), str(c["precision"]), int(c["batch_size"]),
            _positive(c["images_per_s"], f"compute[{i}].images_per_s"),
            _nonneg(c.get("step_overhead_s", 0.0), f"compute[{i}].step_overhead_s"), int(c.get("points", 1)),
            int(c.get("image_size", 224)),
            int(c["threads"]) if c.get("threads") is not None else None,
        )
        for i, c in enumerate(compute_doc)
    )  # fmt: skip
    overlap = doc.get("overlap")
    if overlap is not None:
        overlap = float(overlap)
        if not 0.0 <= overlap <= 1.0:
            raise ValueError(f"overlap must be within 0..1, got {overlap}")
    sync_doc = doc.get("sync")
    sync = None
    if sync_doc is not None:
        if not isinstance(sync_doc, dict):
            raise ValueError('"sync" must be an object')
        sync = (_nonneg(sync_doc["host_us_per_image"], "sync.host_us_per_image"),
                _nonneg(sync_doc["node_jitter"], "sync.node_jitter"))  # fmt: skip
    return Calibration(links, compute, overlap, tuple(str(s) for s in doc.get("sources", [])), sync)
