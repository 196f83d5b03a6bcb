"""`bench pipeline`: the DLI lab's compute-only vs end-to-end comparison (its "GPU-only" is
compute only on whatever device trains: synthetic data, no files read).

Reports images/s of the loader alone (decode + augment, no model), of training on synthetic
data and of training on the real files, and the degradation as the lab computes it:
real / synthetic; each the median of ``repeat`` rounds, with the runs, the load and notes; and
what feeding one GPU at its compute-only rate takes, host to device and from storage.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from statistics import median
from typing import Any

from ringleader.bench import models, plots
from ringleader.bench.data import Augment, ImageFolder, LoaderStats, batches, scan
from ringleader.bench.launchers import Launcher
from ringleader.bench.train import TrainConfig
from ringleader.errors import UsageError


def loader_throughput(cfg: TrainConfig) -> dict[str, Any]:
    """Images/s of the loader alone over ``num_batches`` batches after the warmup ones."""
    spec = models.spec(cfg.model)
    ds = ImageFolder(cfg.data, Augment(spec.fixed_size or cfg.image_size, cfg.augment,
                                       spec.channels), seed=cfg.seed, decode=cfg.decode)  # fmt: skip
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
                 progress: Callable[[str], None] | None = None, repeat: int = 1,
                 label: str | None = None) -> dict[str, Any]:  # fmt: skip
    """The three measurements, ``repeat`` rounds of them; ``progress`` hears which one starts.
    Synthetic and real training alternate which goes first round by round, so neither always
    pays the cold start (caches, thread pools) that made real data look faster than synthetic
    in single runs. Reported: each measure's median, its runs, the load around them, and notes
    on what the numbers cannot be (``pipeline_notes``). ``label`` names the result's row in a
    study folder (default: the model)."""
    tick = progress or (lambda _msg: None)
    cfg.validate()
    base = asdict(cfg)
    load_before = os.getloadavg()
    runs: dict[str, list[float]] = {"loader": [], "synthetic": [], "real": []}
    last: dict[str, dict[str, Any]] = {}
    for round_ in range(repeat):
        of = f" (round {round_ + 1} of {repeat})" if repeat > 1 else ""
        tick(f"loader alone (decode + augment){of}")
        loader = loader_throughput(cfg)
        runs["loader"].append(loader["images_per_sec"])
        order = ("synthetic", "real") if round_ % 2 == 0 else ("real", "synthetic")
        for kind in order:
            where = "synthetic data" if kind == "synthetic" else "the files"
            tick(f"training {cfg.model} on {where}, {workers} x {cfg.backend}{of}")
            done = launcher.run("train", dict(base, data="synthetic") if kind == "synthetic" else base,
                                cfg.backend, workers)  # fmt: skip
            runs[kind].append(done["images_per_sec_total"])
            last[kind] = done
    syn, rea = median(runs["synthetic"]), median(runs["real"])
    result = {
        "kind": "pipeline", "label": label or cfg.model, "model": cfg.model, "batch_size": cfg.batch_size,
        "precision": cfg.precision, "backend": cfg.backend, "world_size": workers,
        "augment": cfg.augment, "decode": cfg.decode, "data": cfg.data, "loader_workers": cfg.loader_workers,
        "device": last["synthetic"].get("device", "cpu"), "repeat": repeat,
        "loader_images_per_sec": median(runs["loader"]),
        "synthetic_images_per_sec": syn, "real_images_per_sec": rea,
        "degradation": rea / syn if syn else 0.0,
        "degradation_range": list(ratio_range(runs["real"], runs["synthetic"])), "runs": runs,
        "load_avg": {"before": list(load_before), "after": list(os.getloadavg())}, "cpus": os.cpu_count(),
        # the last round's: every round reads the same files again
        "skipped_images": loader["skipped_images"] + int(last["real"].get("skipped_images", 0)),
        "synthetic": last["synthetic"], "real": last["real"],
    }  # fmt: skip
    spec = models.spec(cfg.model)
    items, _ = scan(cfg.data)
    file_bytes = sum(os.path.getsize(path) for path, _ in items) / len(items)
    result["need_per_gpu"] = need_per_gpu(syn / workers, spec.fixed_size or cfg.image_size, spec.channels, file_bytes)
    result["notes"] = pipeline_notes(result)
    return result


def need_per_gpu(images_per_sec: float, side: int, channels: int, file_bytes: float) -> dict[str, float]:
    """The DLI lab's arithmetic: feeding one GPU at ``images_per_sec`` (its compute-only rate)
    takes decoded images host to device (side x side x channels bytes each, as the lab counts
    them) and the files from storage at their mean size. MiB as the lab's MB (2**20 bytes)."""
    decoded = side * side * channels
    return {"images_per_sec": images_per_sec, "decoded_bytes_per_image": decoded, "side": side, "channels": channels,
            "host_to_device_mib_per_sec": images_per_sec * decoded / 2**20, "file_bytes_per_image": file_bytes,
            "storage_mib_per_sec": images_per_sec * file_bytes / 2**20}  # fmt: skip


def need_line(need: dict[str, float]) -> str:
    return (f"each GPU at its compute-only rate ({need['images_per_sec']:.1f} images/s) needs "
            f"{need['host_to_device_mib_per_sec']:.1f} MiB/s of decoded {need['side']:g}x{need['side']:g}x"
            f"{need['channels']:g} images host to device and {need['storage_mib_per_sec']:.1f} MiB/s of files "
            f"from storage ({need['file_bytes_per_image'] / 1024:.1f} KiB each)")  # fmt: skip


# Runs of one measure further apart than this (max / min) are too noisy to quote as one number.
NOISY_SPREAD = 1.5


def ratio_range(num: list[float], den: list[float]) -> tuple[float, float]:
    """The interval a ratio of two measures' medians can be read in, from their runs: the
    lowest run of one over the highest of the other, to the highest over the lowest."""
    if not num or not den or min(den) <= 0:
        return (0.0, 0.0)
    return (min(num) / max(den), max(num) / min(den))


def spread(values: list[float]) -> float:
    """max / min of a measure's runs (1.0: they agree)."""
    return max(values) / min(values) if values and min(values) > 0 else 1.0


def ratio_note(what: str, ratio: float, num: list[float], den: list[float]) -> str | None:
    """A note when the runs behind ``ratio`` vary more than the ratio moves away from 1: the
    effect is then within the noise, not a measured change."""
    if ratio <= 0:
        return None
    noise, effect = max(spread(num), spread(den)), max(ratio, 1 / ratio)
    if noise < effect:
        return None
    lo, hi = ratio_range(num, den)
    return (f"{what} {ratio:.2f} (range {lo:.2f}-{hi:.2f}) is within the noise: its runs varied {noise:.1f}x, "
            f"more than the {effect:.2f}x it measures; rerun on a quieter machine or with more --repeat")


def pipeline_notes(result: dict[str, Any]) -> list[str]:
    """What the numbers say about themselves: real data cannot make training faster than
    synthetic data (the same steps with the loader's work added), a degradation within the
    runs' own spread, runs that disagree, a busy machine."""
    runs, notes = result["runs"], []
    syn, rea = runs["synthetic"], runs["real"]
    if min(rea) > max(syn):
        notes.append(f"real data trained faster than synthetic data in every run ({min(rea):.1f} > {max(syn):.1f} "
                     "images/s): reading files cannot speed training up, so these runs measured something else "
                     "(threads, caches, other load); rerun with more --num-batches and --repeat")  # fmt: skip
    elif result["real_images_per_sec"] > result["synthetic_images_per_sec"]:
        notes.append("real data's median is above synthetic data's within the runs' spread: no degradation that "
                     "these runs can tell from noise")  # fmt: skip
    else:
        ratio = result["real_images_per_sec"] / result["synthetic_images_per_sec"]
        note = ratio_note("the degradation (real / synthetic)", ratio, rea, syn)
        notes += [note] if note else []
    for name, values in runs.items():
        if len(values) > 1 and spread(values) > NOISY_SPREAD:
            notes.append(f"the {name} runs varied {spread(values):.1f}x ({min(values):.1f} to "
                         f"{max(values):.1f} images/s): quote the spread, not one number")  # fmt: skip
    load, cpus = result["load_avg"]["before"][0], result.get("cpus") or 1
    if load > cpus:
        notes.append(f"the machine was busy before the runs (load {load:.1f} on {cpus} cores): expect noise")
    return notes


STUDY_FILES = ("pipeline.md", "pipeline_scatter.png", "pipeline_ratio.png")


def write_study(out: Path, result: dict[str, Any]) -> list[dict[str, Any]]:
    """The DLI lab's study in one folder (`bench pipeline --out`): this run's result kept as
    ``pipeline-<label>.json`` (the label: ``--label``, else the model) beside the other rows' runs,
    then the table (pipeline.md) and the lab's two plots redrawn over all of them. Rows keep the
    order their labels were first run in (a rerun replaces its row in place), so a study that
    makes one model's pipeline worse step by step reads top to bottom. Returns every row's result."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"pipeline-{label_of(result)}.json"
    earlier = [json.loads(p.read_text()) for p in out.glob("pipeline-*.json")]
    if path.exists():
        result = dict(result, order=json.loads(path.read_text()).get("order", 0))
    else:
        result = dict(result, order=max((int(r.get("order", 0)) for r in earlier), default=-1) + 1)
    path.write_text(json.dumps(result, indent=2) + "\n")
    results = study_results(out)
    (out / "pipeline.md").write_text(study_table(results))
    plots.pipeline(results, out / "pipeline_scatter.png", out / "pipeline_ratio.png")
    return results


def study_results(out: Path) -> list[dict[str, Any]]:
    """A study folder's rows in their order (results of older runs, without one: by label)."""
    results = [json.loads(p.read_text()) for p in out.glob("pipeline-*.json")]
    return sorted(results, key=lambda r: (int(r.get("order", 0)), label_of(r)))


def label_of(result: dict[str, Any]) -> str:
    return str(result.get("label") or result["model"])


LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def check_label(label: str) -> None:
    """A label names a file in the study folder: letters, digits, '.', '_' and '-' only."""
    if not LABEL.fullmatch(label):
        raise UsageError(f"--label {label!r} cannot name a study row",
                         "use letters, digits, '.', '_' or '-' (up to 64), e.g. --label 1-reader")


def one_model(results: list[dict[str, Any]]) -> bool:
    """A study of one model's pipeline made worse step by step (each row against the one before),
    not of several models (rows side by side)."""
    return len(results) > 1 and len({r["model"] for r in results}) == 1


def _runs_text(r: dict[str, Any], key: str) -> str:
    runs = r["runs"][key]
    return f"{r[f'{key}_images_per_sec']:.1f} ({min(runs):.1f}-{max(runs):.1f})"


def _ratio_text(ratio: float, num: list[float], den: list[float]) -> str:
    lo, hi = ratio_range(num, den)
    return f"{ratio:.3f} ({lo:.2f}-{hi:.2f})"


def study_table(results: list[dict[str, Any]]) -> str:
    """Every row's medians (min-max of its runs) as the lab tabulates them, the degradation with
    the range its runs allow, what feeding one GPU takes, and, in a one-model study, each step
    against the one before. A ratio whose runs vary more than it moves from 1 gets a note."""
    steps = one_model(results)
    head = ["row", "model", "ranks x backend on device", "loader workers", "decode", "augment",
            "loader images/s", "compute only images/s", "full pipeline images/s", "real / synthetic",
            *(["vs previous row (full pipeline)", "vs first row"] if steps else []), "host to device MiB/s per GPU",
            "storage MiB/s per GPU", "runs"]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|---|---|---|---:|---|---|" + "---:|" * (len(head) - 6)]
    notes = [f"- {label_of(r)}: {note}" for r in results for note in r.get("notes") or ()]
    for i, r in enumerate(results):
        need, runs = r["need_per_gpu"], r["runs"]
        vs = []
        if steps:
            vs = ["-", "-"]
            for k, base in enumerate((results[i - 1], results[0]) if i else ()):
                ratio = r["real_images_per_sec"] / base["real_images_per_sec"]
                vs[k] = _ratio_text(ratio, runs["real"], base["runs"]["real"])
                note = ratio_note(f"{label_of(r)} / {label_of(base)}", ratio, runs["real"], base["runs"]["real"])
                if note and not (k == 1 and i == 1):  # the first row is the previous one: said once
                    notes.append(f"- {label_of(r)}: {note}")
        lines.append(f"| {label_of(r)} | {r['model']} | {r['world_size']} x {r['backend']} on {r['device']} | "
                     f"{r.get('loader_workers', '-')} | {r.get('decode', '-')} | {r.get('augment', '-')} | "
                     f"{_runs_text(r, 'loader')} | {_runs_text(r, 'synthetic')} | {_runs_text(r, 'real')} | "
                     f"{_ratio_text(r['degradation'], runs['real'], runs['synthetic'])} | "
                     + "".join(f"{v} | " for v in vs)
                     + f"{need['host_to_device_mib_per_sec']:.1f} | {need['storage_mib_per_sec']:.1f} | "
                     f"{r['repeat']} |")  # fmt: skip
    legend = ("Each figure is the median of the row's runs, (min-max) beside it; a ratio's range is the "
              "lowest run of one measure over the highest of the other, to the highest over the lowest.")
    return "\n".join([*lines, "", legend, "", *(["Notes:", "", *notes, ""] if notes else [])])
