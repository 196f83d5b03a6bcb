"""`ringleader bench ...`, `ringleader data synth` and `ringleader env`: parse and render;
the work lives in ringleader.bench."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click

from ringleader.bench.allreduce import AllreduceConfig, check_root, parse_size
from ringleader.bench.data import synth
from ringleader.bench.envinfo import collect, rows
from ringleader.bench.launch import BenchFailed, dispatch
from ringleader.bench.launchers import default_launcher
from ringleader.bench.pipeline import STUDY_FILES, check_label, need_line, run_pipeline, write_study
from ringleader.bench.ranks import check_available, check_backend, check_np, discover
from ringleader.bench.scaling import ScalingConfig, load_line, run_scaling, skipped_lines
from ringleader.bench.train import DATA_FORMATS, TrainConfig
from ringleader.cli.output import console, emit_data, output_option, shared_group, step_progress, table
from ringleader.cli.params import BACKENDS, FiniteFloat, count
from ringleader.errors import UsageError

NP_HELP = ("Launch N local ranks (mpirun for mpi, processes for gloo/nccl); ignored when this "
           "process already is a rank of a job (mpirun, ringleader's runtime, RANK/WORLD_SIZE).")  # fmt: skip


def _exit(rc: int) -> None:
    """A failed check (out-of-bounds values) exits 1, as nccl-tests does."""
    if rc:
        raise BenchFailed("results out of bounds (see #wrong above)", "", rc)


def _train_options(f: Any) -> Any:
    opts = [
        click.option("--model", default="trivial", show_default=True,
                     help="trivial, mnist, alexnet, googlenet, resnet50, resnet152 or vgg16."),
        click.option("--batch-size", default=32, show_default=True, type=count(1, 1 << 16), help="Images per worker."),
        click.option("--num-batches", default=100, show_default=True, type=count(1, 1 << 24), help="Timed steps."),
        click.option("--num-warmup-batches", default=10, show_default=True, type=count(0, 1 << 24),
                     help="Untimed steps first."),
        click.option("--precision", default="fp32", show_default=True, help="fp32, fp16, bf16."),
        click.option("--data", default="synthetic", show_default=True,
                     help="'synthetic' or a folder of class subfolders of JPEGs."),
        click.option("--backend", default="gloo", show_default=True, type=click.Choice(BACKENDS),
                     help="Communication backend."),
        click.option("--image-size", default=224, show_default=True, type=count(8, 4096), help="Input side, pixels."),
        click.option("--augment", default="standard", show_default=True,
                     help="simple, standard or complex (real data)."),
        click.option("--decode", type=click.Choice(["accurate", "fast"]), default="accurate", show_default=True,
                     help="JPEG decode (real data): libjpeg's exact DCT, or its fastest (INTEGER_FAST)."),
        click.option("--loader-workers", default=2, show_default=True, type=count(0, 256),
                     help="Loader processes (real data)."),
        click.option("--display-every", default=10, show_default=True, type=count(1, 1 << 24),
                     help="Print a progress line every N steps."),
        click.option("--seed", default=0, show_default=True, type=count(0, 2**32 - 1), help="Random seed."),
        click.option("--bucket-mb", default=0.0, show_default=True, type=FiniteFloat(0.0, 65536.0),
                     help="mpi: gradient bucket size in MiB; 0 measures the fastest at start-up."),
        click.option("--overlap/--no-overlap", default=False, show_default=True,
                     help="mpi: start each bucket's allreduce during backward."),
        click.option("--data-format", type=click.Choice(DATA_FORMATS), default="NCHW", show_default=True,
                     help="Image layout: NCHW, or NHWC (channels-last, as tuned mixed-precision recipes)."),
    ]  # fmt: skip
    for opt in reversed(opts):
        f = opt(f)
    return f


def _train_config(kw: dict[str, Any], output: str) -> Any:
    cfg = TrainConfig(
        model=kw["model"], batch_size=kw["batch_size"], num_batches=kw["num_batches"],
        num_warmup_batches=kw["num_warmup_batches"], precision=kw["precision"], data=kw["data"],
        backend=kw["backend"], image_size=kw["image_size"], augment=kw["augment"], decode=kw["decode"],
        loader_workers=kw["loader_workers"], display_every=kw["display_every"], seed=kw["seed"],
        output=output, bucket_mb=kw["bucket_mb"], overlap=kw["overlap"], data_format=kw["data_format"],
        progress=output == "table" and sys.stderr.isatty(),
    )  # fmt: skip
    cfg.validate()
    return cfg


@click.group("bench")
def bench_group() -> None:
    """Benchmarks: collectives (nccl-tests style), training throughput (tf_cnn_benchmarks
    style), the input pipeline and multi-process scaling."""


@bench_group.command("allreduce")
@click.option("-b", "--minbytes", default="8", show_default=True, help="Smallest size (8, 64K, 1M).")
@click.option("-e", "--maxbytes", default="128M", show_default=True, help="Largest size.")
@click.option("-f", "--stepfactor", default=2, show_default=True, help="Size multiplier per step.")
@click.option("-n", "--iters", default=20, show_default=True, help="Timed iterations per size.")
@click.option("-w", "--warmup-iters", default=5, show_default=True, help="Untimed iterations.")
@click.option("-c", "--check", default=1, show_default=True, help="Verify results (1) or not (0).")
@click.option("-d", "--datatype", default="float", show_default=True, help="float, half, bfloat16.")
@click.option("--op", default="sum", show_default=True,
              help="sum, avg or all (each in turn); nccl-tests' -o (here -o is the output format).")
@click.option("-a", "--average", default=1, show_default=True, type=int,
              help="Time over ranks: 0 rank 0, 1 average, 2 min, 3 max.")
@click.option("-z", "--blocking", default=0, show_default=True, type=int,
              help="1: wait for each collective before the next (CPU backends always do).")
@click.option("-t", "--nthreads", default=1, show_default=True, type=int,
              help="Threads per process; each thread's GPUs run as separate ranks.")
@click.option("-g", "--ngpus", default=1, show_default=True, type=int,
              help="GPUs per thread; ranks launched = np x t x g, one device each.")
@click.option("--collective", default="allreduce", show_default=True,
              help="allreduce, allgather, broadcast or reducescatter.")
@click.option("--root", default=0, show_default=True, help="Root rank (broadcast).")
@click.option("--backend", default="gloo", show_default=True, type=click.Choice(BACKENDS),
              help="Communication backend.")
@click.option("-np", "--np", "np_", type=count(1, 4096), default=None, help=NP_HELP)
@output_option("json")
def allreduce_cmd(minbytes: str, maxbytes: str, stepfactor: int, iters: int, warmup_iters: int,
                  check: int, datatype: str, op: str, average: int, blocking: int, nthreads: int,
                  ngpus: int, collective: str, root: int, backend: str, np_: int | None,
                  output: str) -> None:  # fmt: skip
    """Collective bandwidth with nccl-tests' columns, busbw and #wrong checks. On a terminal,
    the size being measured shows on stderr until its row prints."""
    check_backend(backend)
    cfg = AllreduceConfig(parse_size(minbytes), parse_size(maxbytes), stepfactor, iters,
                          warmup_iters, check, datatype, op, collective, root, backend, output,
                          average=average, blocking=blocking, nthreads=nthreads, ngpus=ngpus,
                          progress=output == "table" and sys.stderr.isatty())  # fmt: skip
    cfg.validate()
    per_process = nthreads * ngpus
    info = discover()
    if per_process > 1:
        if info.in_job:
            raise UsageError(f"-t {nthreads} -g {ngpus} inside a launched job: each rank drives one device",
                             "launch t x g times more ranks instead (mpirun -np, or -np here)")  # fmt: skip
        np_ = (np_ or 1) * per_process
    check_root(cfg, info.world_size if info.in_job or np_ is None else np_)
    _exit(dispatch("allreduce", asdict(cfg), backend, np_))


@bench_group.command("train")
@_train_options
@click.option("-np", "--np", "np_", type=int, default=None, help=NP_HELP)
@output_option("json")
def train_cmd(np_: int | None, output: str, **kw: Any) -> None:
    """Data-parallel training throughput (DDP for gloo/nccl, fused allreduce for mpi)."""
    cfg = _train_config(kw, output)
    _exit(dispatch("train", asdict(cfg), cfg.backend, np_))


@bench_group.command("pipeline")
@_train_options
@click.option("-np", "--np", "np_", type=int, default=1, show_default=True, help="Ranks per run.")
@click.option("--launcher", type=click.Choice(["auto", "local", "runtime"]), default="auto",
              show_default=True, help="Run each point locally or as a ringleader job.")
@click.option("--keep", is_flag=True,
              help="Keep each point's ringleader job (deleted once its result is read, by default).")
@click.option("--repeat", type=click.IntRange(1, 100), default=3, show_default=True,
              help="Rounds of the three measurements (synthetic and real alternate which goes first); "
                   "the table shows medians, min and max.")
@click.option("--out", "out", type=click.Path(file_okay=False), default=None,
              help="A study folder: keep this run's result there and redraw the table (pipeline.md) and the "
                   "lab's plots over every run into it.")
@click.option("--label", default=None,
              help="This run's row in the --out study [default: the model]; one model under several labels "
                   "(e.g. --loader-workers 1, --decode accurate) is the lab's pipeline made worse step by step.")
@output_option("json")
def pipeline_cmd(np_: int, launcher: str, keep: bool, repeat: int, out: str | None, label: str | None, output: str,
                 **kw: Any) -> None:  # fmt: skip
    """Loader alone, training on synthetic and on real data; degradation = real / synthetic."""
    if kw["data"] == "synthetic":
        raise UsageError("bench pipeline needs real files", "pass --data DIR (see `data synth`)")
    if label is not None:
        check_label(label)
    cfg = _train_config(kw, "json")
    check_available(cfg.backend, need_mpirun=cfg.backend == "mpi")
    check_np(cfg.backend, np_)
    with step_progress(3 * repeat, output == "table") as step:  # the three measurements, each round
        res = run_pipeline(cfg, default_launcher(launcher, keep=keep), np_, step, repeat=repeat, label=label)
    for note in res["notes"]:
        click.echo(f"note: {note}", err=True)
    study = write_study(Path(out), res) if out else []
    if output == "json":
        emit_data(res, "json")
        return
    runs = res["runs"]

    def row(label: str, key: str) -> tuple[str, str, str, str]:
        return (label, f"{res[f'{key}_images_per_sec']:.1f}", f"{min(runs[key]):.1f}", f"{max(runs[key]):.1f}")

    device = res["device"]
    low, high = res["degradation_range"]  # lowest real run / highest synthetic one, and the reverse
    rows = [row("loader only (decode + augment)", "loader"),
            row(f"training, synthetic data (compute only, {device})", "synthetic"),
            row("training, real data (full pipeline)", "real"),
            ("degradation (real / synthetic)", f"{res['degradation']:.3f}", f"{low:.3f}", f"{high:.3f}"),
            ("skipped (corrupt) files", str(res["skipped_images"]), "", "")]  # fmt: skip
    load = res["load_avg"]
    title = (f"{cfg.model}, {np_} x {cfg.backend} on {device}, augment {cfg.augment}, decode {cfg.decode}; "
             f"median of {repeat}; "
             f"load {load['before'][0]:.1f} -> {load['after'][0]:.1f} on {res['cpus']} cores")  # fmt: skip
    console().print(table(["MEASURE", "IMAGES/S", "MIN", "MAX"], rows, title=title))
    click.echo(need_line(res["need_per_gpu"]))
    if out:
        click.echo(f"wrote {out}: {len(study)} row(s) in {STUDY_FILES[0]}, {STUDY_FILES[1]} and {STUDY_FILES[2]}")


def _int_list(text: str, flag: str = "--workers") -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise UsageError(f"bad {flag} list {text!r}", f"pass e.g. {flag} 1,2,4") from exc


@bench_group.command("scaling")
@_train_options
@click.option("--backends", default="gloo,mpi", show_default=True,
              help="Comma-separated: gloo, mpi, nccl (ringleader's own) and horovod (Horovod itself: horovod.torch "
                   "under horovodrun, --launcher local; `make lab-horovod` installs it).")
@click.option("--workers", default="1,2", show_default=True, help="Worker counts, comma-separated.")
@click.option("--servers", default="1", show_default=True,
              help="Server counts, comma-separated: each worker count split over each that divides it (Lab 7's "
                   "servers x ranks per server; several servers need --launcher runtime on a declared cluster).")
@click.option("--out", "out_dir", required=True,
              help="Folder for the table, CSV, JSON, PNGs and report.html.")
@click.option("--repeat", default=3, show_default=True, type=int,
              help="Runs per point (round robin); the table shows medians, min and max.")
@click.option("--threads-per-rank", "threads", type=int, default=None,
              help="OpenMP threads per rank at every point [default: cores / largest worker count].")
@click.option("--busbw/--no-busbw", default=True, show_default=True,
              help="Also sweep allreduce busbw per backend.")
@click.option("--busbw-max", default="16M", show_default=True, help="Largest busbw size.")
@click.option("--pipeline-results", multiple=True,
              help="`bench pipeline -o json` files for the compute-only (the lab's GPU-only) vs pipeline plots.")
@click.option("--launcher", type=click.Choice(["auto", "local", "runtime"]), default="auto",
              show_default=True, help="Run each point locally or as a ringleader job.")
@click.option("--keep", is_flag=True,
              help="Keep each point's ringleader job (deleted once its result is read, by default).")
@output_option("json")
def scaling_cmd(backends: str, workers: str, servers: str, out_dir: str, repeat: int, threads: int | None, busbw: bool,
                busbw_max: str, pipeline_results: tuple[str, ...], launcher: str, keep: bool, output: str,
                **kw: Any) -> None:  # fmt: skip
    """Lab 7's scaling table (real multi-process runs, --repeat per point), plots and an HTML
    report. A row whose efficiency exceeds 100% or whose runs spread more than 10% is flagged."""
    cfg = ScalingConfig(
        backends=[b.strip() for b in backends.split(",") if b.strip()], workers=_int_list(workers),
        out=out_dir, train=_train_config(kw, "json"), busbw=busbw,
        busbw_max=parse_size(busbw_max), pipeline=list(pipeline_results), repeat=repeat, threads=threads,
        servers=_int_list(servers, "--servers"),
    )  # fmt: skip
    cfg.validate()
    swept = [b for b in cfg.runnable if b != "horovod"] if busbw else []  # horovod has no busbw sweep
    steps = len(cfg.runnable) * len(cfg.layouts) * cfg.repeat + len(swept)
    run_with = default_launcher(launcher, keep=keep)
    with step_progress(steps, output == "table") as step:  # each message announces the next point
        res = run_scaling(cfg, run_with, step)
    if output == "json":
        emit_data({k: v for k, v in res.items() if k != "points"}, "json")
        return
    rows = [(r["backend"], r["servers"], r["gpus_per_server"], f"{r['avg_step_time_s']:.4f}",
             f"{r['avg_throughput']:.1f}", f"{r['throughput_min']:.1f}-{r['throughput_max']:.1f}",
             f"{r['speedup']:.2f}", f"{r['scaling_efficiency']:.0%}", "!" if r["warnings"] else "")
            for r in res["rows"]]  # fmt: skip
    # Lab 7's columns (HEADERS, in the .md and .csv) in short headers, so the table fits 80 columns.
    headers = ["BACKEND", "SERVERS", "RANKS/SRV", "MED STEP(S)", "MED IMG/S", "MIN-MAX", "SPEEDUP", "EFF", "!"]
    console().print(table(headers, rows, title=res["title"]))
    for warning in res["warnings"]:
        click.echo(f"warning: {warning}")
    for line in skipped_lines(res["skipped"]):
        click.echo(line)
    click.echo(load_line(res["machine"]))
    click.echo("wrote: " + ", ".join(res["files"]))


def register(cli: click.Group) -> None:
    cli.add_command(bench_group)
    data_group = shared_group(cli, "data", "Datasets for the benches.")

    @data_group.command("synth")
    @click.option("--out", "out_dir", required=True, help="Folder to write class_NNN/*.jpg into.")
    @click.option("--images", default=256, show_default=True, help="Number of JPEG files.")
    @click.option("--size", default=352, show_default=True, help="Side in pixels.")
    @click.option("--classes", default=8, show_default=True, help="Class subfolders.")
    @click.option("--seed", default=0, show_default=True, help="Random seed.")
    @output_option("json")
    def synth_cmd(out_dir: str, images: int, size: int, classes: int, seed: int,
                  output: str) -> None:  # fmt: skip
        """Write a dataset of real JPEG files (one subfolder per class)."""
        with step_progress(images, output == "table") as step:
            res = synth(out_dir, images, size, classes, seed, on_image=step)
        if output == "json":
            emit_data(res, "json")
        else:
            click.echo(f"wrote {res['images']} JPEGs ({res['size']}x{res['size']}, "
                       f"{res['classes']} classes, {res['bytes'] / 1e6:.1f} MB) to {res['out']}")

    @cli.command("env")
    @output_option("json")
    def env_cmd(output: str) -> None:
        """The experiment-environment table: servers, NICs, GPUs and links, OS, driver,
        CUDA, NCCL, MPI, framework and package versions."""
        info = collect()
        if output == "json":
            click.echo(json.dumps(info, indent=2))
            return
        from rich.markup import escape

        body = [(item, escape(value)) for _section, item, value in rows(info)]
        console().print(table(["ITEM", "VALUE"], body, title="Experiment environment"))
