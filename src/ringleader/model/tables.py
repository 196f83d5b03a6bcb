"""Published numbers the model starts from, read from data/reference.toml.

Every figure lives in reference.toml next to its source; this module only looks them up, derives
the per-model fixed step time t0 from the batch-scaling table, and names the known models, GPU
types and precisions (with the one-line errors a user can act on).
"""

from __future__ import annotations

import functools
import math
import re
import statistics
from dataclasses import dataclass

from ringleader.errors import UsageError
from ringleader.inputs import did_you_mean
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


@functools.cache
def model_params() -> dict[str, float]:
    """Parameter count (not millions) per known model name."""
    tables = (reference()["models"], reference().get("models_small", {}))
    return {k: float(v) * 1e6 for t in tables for k, v in t.items() if not k.endswith("source")}


def known_models() -> list[str]:
    """Models the model can predict without a calibration: a parameter count (gradient size)
    and a published single-GPU rate or a MAC count to derive one from (reference.toml)."""
    rated = {m for m, _, _ in published_rates()} | set(model_macs())
    return sorted(m for m in model_params() if m in rated)


def gradient_models() -> list[str]:
    """Models whose gradient size is known; a calibration can supply their compute rate."""
    return sorted(model_params())


def check_model(model: str) -> str:
    name = model.strip().lower().replace("-", "").replace("_", "")
    aliases = {"inceptionv3": "inception3", "inceptionv4": "inception4", "resnet": "resnet50", "vgg": "vgg16",
               "bert": "bertbase", "gpt2small": "gpt2", "mobilenet": "mobilenetv2", "efficientnet": "efficientnetb0",
               "transformer": "transformerbig"}  # fmt: skip
    name = aliases.get(name, name)
    if name not in model_params():
        raise UsageError(f"unknown model {model!r}{did_you_mean(name, gradient_models())}",
                         f"use one of {', '.join(gradient_models())}")  # fmt: skip
    return name


def check_precision(precision: str) -> str:
    p = precision.strip().lower()
    p = PRECISION_ALIASES.get(p, p)
    if p not in PRECISION_TABLE:
        raise UsageError(f"unknown precision {precision!r}", f"use one of {', '.join(PRECISION_TABLE)}")
    return p


def grad_bytes(model: str, precision: str) -> float:
    """Bytes allreduced per step: parameters x bytes per gradient element."""
    per = reference()["model"]["grad_bytes_per_param"][check_precision(precision)]
    return model_params()[check_model(model)] * float(per)


@functools.cache
def published_rates() -> dict[tuple[str, str, str], PublishedRate]:
    """(model, GPU type, table precision) -> published single-GPU rate.

    A GPU/precision row without its own batch sizes uses the V100 row's batch for the same
    precision (the Lambda tables list batch sizes for V100 only; docs/model.md).
    """
    table = reference()["throughput"]
    source = str(table["source"])
    out: dict[tuple[str, str, str], PublishedRate] = {}
    for gpu, rows in table.items():
        if not isinstance(rows, dict):
            continue
        for prec, row in rows.items():
            batches = row.get("batch") or table.get("V100", {}).get(prec, {}).get("batch", {})
            cite = str(row.get("source", source))
            for model, rate in row["images_per_s"].items():
                if model in batches:
                    out[(model, gpu, prec)] = PublishedRate(model, gpu, prec, float(rate), int(batches[model]), cite)
    for row in reference().get("throughput_rows", []):
        key = (str(row["model"]), str(row["gpu"]), str(row["precision"]))
        out[key] = PublishedRate(*key, float(row["images_per_s"]), int(row["batch"]), str(row["source"]))
    return out


@dataclass(frozen=True)
class GpuSpec:
    """Datasheet numbers of one GPU type (reference.toml [gpus])."""

    name: str
    fp32_tflops: float
    tf32_tflops: float  # 0: no TF32 tensor cores
    fp16_tflops: float  # 0: no faster half precision
    mem_gbs: float
    nvlink_gbs: float  # per GPU, one direction; 0: no NVLink
    names: tuple[str, ...]
    nvlink_gen: int = 0  # 0: no NVLink

    def peak_tflops(self, table_precision: str) -> float:
        """The rate a training run of that precision uses: TF32 for "fp32" where it exists."""
        if table_precision == "fp16":
            return self.fp16_tflops or self.fp32_tflops
        return self.tf32_tflops or self.fp32_tflops


@functools.cache
def gpu_specs() -> dict[str, GpuSpec]:
    out = {}
    for name, row in reference()["gpus"].items():
        if isinstance(row, dict):
            out[name] = GpuSpec(
                name, float(row["fp32"]), float(row["tf32"]), float(row["fp16"]), float(row["mem_gbs"]),
                float(row["nvlink_gbs"]), tuple(str(n).upper() for n in row["names"]), int(row["nvlink_gen"]),
            )  # fmt: skip
    return out


@functools.cache
def known_gpu_types() -> tuple[str, ...]:
    """GPU types with a published single-GPU rate or datasheet numbers to derive one from (read
    once: every pricing checks its GPU types' names against them)."""
    return tuple(sorted({gpu for _, gpu, _ in published_rates()} | set(gpu_specs())))


_GPU_NAME_RE = re.compile(r"\b([A-Z]{1,2}\d{1,3}[A-Z]?)\b")


def normalize_gpu_type(name: str) -> str:
    """'Tesla V100-SXM2-32GB' -> 'V100', 'NVIDIA H100 80GB HBM3' -> 'H100', 'NVIDIA A100-SXM4-80GB'
    -> 'A100-80GB', 'cpu' -> 'cpu'; names without a known GPU token stay as given."""
    text = name.strip()
    upper = text.upper()
    for known in known_gpu_types():
        if known.upper() == upper:
            return known
    for spec in gpu_specs().values():  # most specific first, as reference.toml lists them
        if any(re.search(re.escape(n) + r"(?![0-9])", upper) for n in spec.names):
            return spec.name
    if upper.startswith("CPU"):
        return "cpu"
    match = _GPU_NAME_RE.search(upper.replace("NVIDIA", " ").replace("TESLA", " "))
    return match.group(1) if match else text


@functools.cache
def model_macs() -> dict[str, float]:
    """Forward multiply-accumulates per sample (GMACs) of the models that have them."""
    return {k: float(v) for k, v in reference()["model_flops"].items() if not k.endswith("source")}


def derived_rate(model: str, gpu: str, table_precision: str) -> PublishedRate | None:
    """A single-GPU rate where none is published (docs/model.md, "Derived rates"): the same
    model on the nearest published GPU, scaled by peak and memory bandwidth; or, for a model
    published on no GPU, ResNet-50's achieved MACs/s on this GPU over the model's MACs."""
    specs = gpu_specs()
    rates = published_rates()
    if (model, gpu, table_precision) in rates:
        return rates[(model, gpu, table_precision)]
    target = specs.get(gpu)
    if target is None:
        return None
    weight = float(reference()["derivation"]["compute_weight"])
    candidates = [r for (m, g, p), r in rates.items() if m == model and p == table_precision and g in specs]
    if candidates:
        def distance(r: PublishedRate) -> float:
            s = specs[r.gpu_type]
            return abs(math.log(s.peak_tflops(table_precision) / target.peak_tflops(table_precision))) + abs(
                math.log(s.mem_gbs / target.mem_gbs))

        ref = min(candidates, key=lambda r: (distance(r), r.gpu_type))
        s = specs[ref.gpu_type]
        factor = (target.peak_tflops(table_precision) / s.peak_tflops(table_precision)) ** weight * (
            target.mem_gbs / s.mem_gbs) ** (1 - weight)  # fmt: skip
        return PublishedRate(
            model, gpu, table_precision, ref.images_per_s * factor, ref.batch,
            f"derived from {ref.gpu_type} {ref.images_per_s:g} images/s x {factor:.3g} (peak and memory ratio)",
        )  # fmt: skip
    macs = model_macs()
    if model == "resnet50" or model not in macs:
        return None
    base = derived_rate("resnet50", gpu, table_precision)
    if base is None:
        return None
    rate = base.images_per_s * macs["resnet50"] / macs[model]
    return PublishedRate(
        model, gpu, table_precision, rate, base.batch,
        f"derived: ResNet-50's achieved MACs/s on {gpu} / {macs[model]:g} GMACs per sample",
    )  # fmt: skip


@functools.cache
def half_batches() -> dict[str, float]:
    """Per-model batch at which a GPU runs at half its peak rate, from two batch sizes of one GPU:
    with t(b) = t0 + b/peak, t0 = t(b_hi) - b_hi (t(b_hi) - t(b_lo)) / (b_hi - b_lo), and the
    half batch is t0 x peak (images' worth of fixed time; the same on every GPU type)."""
    bs = reference()["batch_scaling"]
    hi, lo = int(bs["batch_high"]), int(bs["batch_low"])
    out = {}
    for model, rate_hi in bs["images_per_s_high"].items():
        rate_lo = float(bs["images_per_s_low"][model])
        t_hi, t_lo = hi / float(rate_hi), lo / rate_lo
        per_image = (t_hi - t_lo) / (hi - lo)
        out[model] = max(0.0, t_hi - hi * per_image) / per_image
    return out


def half_batch(model: str) -> float:
    """The half batch of ``model``; models without batch-scaling data get the median."""
    table = half_batches()
    return table.get(model, statistics.median(table.values()))


def model_constant(name: str) -> float:
    return float(reference()["model"][name])


@functools.cache
def grad_ready_curves() -> dict[str, tuple[float, ...]]:
    """Per model, the share of gradient bytes ready at each 1/n of the backward pass
    (reference.toml [grad_ready]); models without one are absent."""
    table = reference().get("grad_ready", {})
    return {k: tuple(float(x) for x in v) for k, v in table.items() if isinstance(v, list)}


def exposed_allreduce_s(model: str, allreduce_s: float, backward_s: float) -> float:
    """The least part of an allreduce of ``allreduce_s`` that a bucketed allreduce running beside
    a backward pass of ``backward_s`` (DDP, Horovod) must leave exposed. Gradients are sent in
    the order backward makes them ready, so the bytes not ready before the k-th 1/n of backward
    cannot finish before k/n x B + their allreduce time (a bucket is sent once it is full, so
    bytes made ready within a slice count from its end):
    exposed = max(B, max over k of (k/n B + C (1 - g((k-1)/n)))) - B.
    A model without a readiness curve: every gradient ready at once, max(0, C - B)."""
    return exposed_s(grad_ready_curves().get(check_model(model)), allreduce_s, backward_s)


def exposed_s(curve: tuple[float, ...] | None, allreduce_s: float, backward_s: float) -> float:
    """``exposed_allreduce_s`` for a model's readiness curve (``grad_ready_curves``, None: none)."""
    if curve is None or backward_s <= 0:
        return max(0.0, allreduce_s - backward_s)
    n = len(curve)
    before = (0.0, *curve[:-1])
    finish = max([backward_s] + [k / n * backward_s + allreduce_s * (1 - g) for k, g in enumerate(before, 1)])
    return finish - backward_s
