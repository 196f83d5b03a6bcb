"""The calibration file's schema (what `ringleader calibrate --out` writes): every key, its type
and its range, checked strictly before any number reaches the model's arithmetic.

Bounds are far beyond any real measurement (a link of a million GB/s, a billion images/s) but
finite, so that a typo or a hostile file cannot overflow a prediction.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

Text = Annotated[str, StringConstraints(max_length=128)]
LinkKey = Annotated[str, StringConstraints(min_length=1, max_length=64)]
Count = Annotated[int, Field(ge=0, le=10**9)]


# Finite floats in a range (ints are numbers too; true and false are not).
Positive = Annotated[float, Field(gt=0, le=1e9, allow_inf_nan=False)]
NonNegative = Annotated[float, Field(ge=0, le=1e9, allow_inf_nan=False)]
Share = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
GBs = Annotated[float, Field(gt=0, le=1e6, allow_inf_nan=False)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LinkEntry(_Strict):
    gbs: GBs
    latency_us: NonNegative = 0.0
    points: Count = 0
    rel_rmse: NonNegative = 0.0


class ComputeEntry(_Strict):
    model: Text
    gpu_type: Text
    precision: Annotated[str, StringConstraints(max_length=16)]
    batch_size: Annotated[int, Field(ge=1, le=1 << 20)]
    images_per_s: Positive
    step_overhead_s: NonNegative = 0.0
    points: Count = 1
    image_size: Annotated[int, Field(ge=1, le=1 << 16)] = 224
    threads: Annotated[int, Field(ge=1, le=1 << 16)] | None = None
    framework: Text | None = None


class SyncEntry(_Strict):
    host_us_per_image: NonNegative
    node_jitter: NonNegative


class CalibrationFile(_Strict):
    kind: Literal["calibration"]
    version: Annotated[int, Field(ge=0)] = 0  # a newer version than this reads: refused by calibration.py
    sources: Annotated[list[Annotated[str, StringConstraints(max_length=4096)]], Field(max_length=10_000)] = []
    links: Annotated[dict[LinkKey, LinkEntry], Field(max_length=1_000)] = {}
    compute: Annotated[list[ComputeEntry], Field(max_length=10_000)] = []
    overlap: Share | None = None
    sync: SyncEntry | None = None
    # predicted / measured - 1 of each held-out run (a prediction is > 0: above -1)
    held_out: Annotated[list[Annotated[float, Field(gt=-1, le=1e6, allow_inf_nan=False)]],
                        Field(max_length=10_000)] = []  # fmt: skip
    # The report `calibrate -o json` prints beside the fit (so its output is a calibration file
    # too): read as lists of objects, not used.
    checks: Annotated[list[dict[str, Any]], Field(max_length=10_000)] = []
    rows: Annotated[list[dict[str, Any]], Field(max_length=10_000)] = []
