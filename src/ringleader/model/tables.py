"""Published numbers the model starts from, read from data/reference.toml.

Every figure lives in reference.toml next to its source; this module only looks them up, derives
the per-model fixed step time t0 from the batch-scaling table, and names the known models, GPU
types and precisions (with the one-line errors a user can act on).
"""

from __future__ import annotations

import functools
import re
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ringleader.errors import UsageError
from ringleader.reference import reference

PRECISION_ALIASES = {"amp": "fp16", "mixed": "fp16", "float32": "fp32", "float16": "fp16",
                     "half": "fp16", "bfloat16": "bf16"}  # fmt: skip
# Throughput rows of precisions without their own table (TF32 is what A100 runs for "fp32").
PRECISION_TABLE = {"fp32": "fp32", "tf32": "fp32", "fp16": "fp16", "bf16": "fp16"}


@dataclass(frozen=True)
class PublishedRate:
    """Single-GPU training throughput as published: ``images_per_s`` at ``batch`` per GPU."""

    model: str
    gpu_type: str
    precision: str
    images_per_s: float
    batch: int
    source: str


def _ref() -> Mapping[str, Any]:
    return reference()


@functools.cache
def model_params() -> dict[str, float]:
    """Parameter count (not millions) per known model name."""
    tables = (_ref()["models"], _ref().get("models_small", {}))
    return {k: float(v) * 1e6 for t in tables for k, v in t.items() if not k.endswith("source")}


def known_models() -> list[str]:
    """Models the model can predict without a calibration: a parameter count (gradient size)
    and at least one published single-GPU rate in reference.toml."""
    rated = {m for m, _, _ in published_rates()}
    return sorted(m for m in model_params() if m in rated)


def gradient_models() -> list[str]:
    """Models whose gradient size is known; a calibration can supply their compute rate."""
    return sorted(model_params())


def check_model(model: str) -> str:
    name = model.strip().lower().replace("-", "").replace("_", "")
    aliases = {"inceptionv3": "inception3", "resnet": "resnet50", "vgg": "vgg16"}
    name = aliases.get(name, name)
    if name not in model_params():
        raise UsageError(f"unknown model {model!r}", f"use one of {', '.join(gradient_models())}")
    return name


def check_precision(precision: str) -> str:
    p = precision.strip().lower()
    p = PRECISION_ALIASES.get(p, p)
    if p not in PRECISION_TABLE:
        raise UsageError(f"unknown precision {precision!r}", f"use one of {', '.join(PRECISION_TABLE)}")
    return p


def grad_bytes(model: str, precision: str) -> float:
    """Bytes allreduced per step: parameters x bytes per gradient element."""
    per = _ref()["model"]["grad_bytes_per_param"][check_precision(precision)]
    return model_params()[check_model(model)] * float(per)


@functools.cache
def published_rates() -> dict[tuple[str, str, str], PublishedRate]:
    """(model, GPU type, table precision) -> published single-GPU rate.

    A GPU/precision row without its own batch sizes uses the V100 row's batch for the same
    precision (the Lambda tables list batch sizes for V100 only; docs/model.md).
    """
    table = _ref()["throughput"]
    source = str(table["source"])
    out: dict[tuple[str, str, str], PublishedRate] = {}
    for gpu, rows in table.items():
        if not isinstance(rows, dict):
            continue
        for prec, row in rows.items():
            batches = row.get("batch") or table.get("V100", {}).get(prec, {}).get("batch", {})
            for model, rate in row["images_per_s"].items():
                if model in batches:
                    out[(model, gpu, prec)] = PublishedRate(model, gpu, prec, float(rate), int(batches[model]), source)
    return out


def known_gpu_types() -> list[str]:
    """GPU types with at least one published single-GPU rate."""
    return sorted({gpu for _, gpu, _ in published_rates()})


_GPU_NAME_RE = re.compile(r"\b([A-Z]{1,2}\d{1,3}[A-Z]?)\b")


def normalize_gpu_type(name: str) -> str:
    """'Tesla V100-SXM2-32GB' -> 'V100', 'NVIDIA H100 80GB HBM3' -> 'H100', 'cpu' -> 'cpu';
    names without a GPU model token stay as given."""
    text = name.strip()
    upper = text.upper()
    for known in known_gpu_types():
        if known.upper() in upper:
            return known
    if upper.startswith("CPU"):
        return "cpu"
    match = _GPU_NAME_RE.search(upper.replace("NVIDIA", " ").replace("TESLA", " "))
    return match.group(1) if match else text


@functools.cache
def step_overheads() -> dict[str, float]:
    """Per-model fixed time per step t0 (s), from two batch sizes of one GPU: with
    t(b) = t0 + b/peak, t0 = t(b_hi) - b_hi (t(b_hi) - t(b_lo)) / (b_hi - b_lo)."""
    bs = _ref()["batch_scaling"]
    hi, lo = int(bs["batch_high"]), int(bs["batch_low"])
    out = {}
    for model, rate_hi in bs["images_per_s_high"].items():
        rate_lo = float(bs["images_per_s_low"][model])
        t_hi, t_lo = hi / float(rate_hi), lo / rate_lo
        per_image = (t_hi - t_lo) / (hi - lo)
        out[model] = max(0.0, t_hi - hi * per_image)
    return out


def step_overhead_s(model: str) -> float:
    """t0 of ``model``; models without batch-scaling data get the median of those with it."""
    table = step_overheads()
    return table.get(model, statistics.median(table.values()))


def model_constant(name: str) -> float:
    return float(_ref()["model"][name])
