"""`bench pipeline`: the DLI lab's GPU-only vs end-to-end comparison.

Reports images/s of the loader alone (decode + augment, no model), of training on synthetic
data and of training on the real files, and the degradation as the lab computes it:
real / synthetic.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from ringleader.bench import models
from ringleader.bench.data import Augment, ImageFolder, LoaderStats, batches
from ringleader.bench.launchers import Launcher
from ringleader.bench.train import TrainConfig


def loader_throughput(cfg: TrainConfig) -> dict[str, Any]:
    """Images/s of the loader alone over ``num_batches`` batches after the warmup ones."""
    spec = models.spec(cfg.model)
    ds = ImageFolder(cfg.data, Augment(spec.fixed_size or cfg.image_size, cfg.augment,
                                       spec.channels), seed=cfg.seed)  # fmt: skip
    stats = LoaderStats()
    it = batches(ds, cfg.batch_size, cfg.loader_workers, prefetch=cfg.prefetch, stats=stats)
    for _ in range(max(1, cfg.num_warmup_batches)):
        next(it)
    # The loader processes filled their prefetch queues during the warmup: take those batches
    # off before the clock starts, so the rate is what the workers produce, not a backlog.
    for _ in range(max(1, cfg.loader_workers) * cfg.prefetch):
        next(it)
    first = stats.images
    t0 = time.perf_counter()
    for _ in range(cfg.num_batches):
        next(it)
    elapsed = time.perf_counter() - t0
    return {"images_per_sec": (stats.images - first) / elapsed, "skipped_images": stats.skipped,
            "files": len(ds), "loader_workers": cfg.loader_workers}  # fmt: skip


def run_pipeline(cfg: TrainConfig, launcher: Launcher, workers: int,
                 progress: Callable[[str], None] | None = None) -> dict[str, Any]:  # fmt: skip
    """The three measurements in turn; ``progress`` hears which one starts."""
    tick = progress or (lambda _msg: None)
    cfg.validate()
    base = asdict(cfg)
    tick("1/3 loader alone (decode + augment)")
    loader = loader_throughput(cfg)
    tick(f"2/3 training {cfg.model} on synthetic data, {workers} x {cfg.backend}")
    synthetic = launcher.run("train", dict(base, data="synthetic"), cfg.backend, workers)
    tick(f"3/3 training {cfg.model} on the files, {workers} x {cfg.backend}")
    real = launcher.run("train", base, cfg.backend, workers)
    syn, rea = synthetic["images_per_sec_total"], real["images_per_sec_total"]
    return {
        "kind": "pipeline", "model": cfg.model, "batch_size": cfg.batch_size,
        "precision": cfg.precision, "backend": cfg.backend, "world_size": workers,
        "augment": cfg.augment, "data": cfg.data, "loader_workers": cfg.loader_workers,
        "loader_images_per_sec": loader["images_per_sec"],
        "synthetic_images_per_sec": syn, "real_images_per_sec": rea,
        "degradation": rea / syn if syn else 0.0,
        "skipped_images": loader["skipped_images"] + int(real.get("skipped_images", 0)),
        "synthetic": synthetic, "real": real,
    }  # fmt: skip
