"""`bench train`: data-parallel training throughput in tf_cnn_benchmarks' format.

gloo and nccl use torch DDP (bucketed allreduce overlapped with backward); mpi broadcasts the
initial weights from rank 0 and averages gradients in buckets of preallocated buffers
(``gradsync``), their size measured at start-up unless ``bucket_mb`` is given.

Precision: fp32; bf16 = autocast to bfloat16 (CPU and CUDA); fp16 = autocast to float16 with a
GradScaler. On CUDA fp16 is the usual AMP. On CPU, torch's autocast runs float16 kernels in
software (no fp16 units): it is correct but slow, and is reported as such, not refused.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

from ringleader.bench import TRAIN_BACKENDS, models, report
from ringleader.bench.comm import Comm, HorovodComm, init
from ringleader.bench.data import AUGMENTS, Augment, ImageFolder, LoaderStats, batches, check_decode, scan
from ringleader.bench.gradsync import MIB, GradientBuckets
from ringleader.bench.ranks import check_backend, discover, nodes
from ringleader.errors import UsageError

PRECISIONS = ("fp32", "fp16", "bf16")
# tf_cnn_benchmarks' --data_format: NCHW (PyTorch's default layout) or NHWC (channels-last, what
# tuned mixed-precision recipes train in: tensor-core convolutions read it without transposes)
DATA_FORMATS = ("NCHW", "NHWC")


@dataclass
class TrainConfig:
    model: str = "trivial"
    batch_size: int = 32
    num_batches: int = 100
    num_warmup_batches: int = 10
    precision: str = "fp32"
    data: str = "synthetic"
    backend: str = "gloo"
    image_size: int = 224
    augment: str = "standard"
    decode: str = "accurate"  # data.DECODES: JPEG's exact or fastest DCT
    loader_workers: int = 2
    prefetch: int = 2
    display_every: int = 10
    learning_rate: float = 0.01
    seed: int = 0
    output: str = "table"
    bucket_mb: float = 0.0  # mpi gradient buckets; 0: the fastest of a measured sweep
    overlap: bool = False  # mpi: start each bucket's allreduce during backward
    progress: bool = False  # rank 0 shows what it is doing on stderr (a terminal, table output)
    data_format: str = "NCHW"  # DATA_FORMATS

    def validate(self) -> None:
        models.spec(self.model)
        check_backend(self.backend, TRAIN_BACKENDS)
        if self.precision not in PRECISIONS:
            raise UsageError(f"unknown precision {self.precision!r}",
                             f"use one of: {', '.join(PRECISIONS)}")
        check_decode(self.decode)
        if self.data_format not in DATA_FORMATS:
            raise UsageError(f"unknown data format {self.data_format!r}", f"use one of: {', '.join(DATA_FORMATS)}")
        if self.augment not in AUGMENTS:
            raise UsageError(f"unknown augment level {self.augment!r}",
                             f"use one of: {', '.join(AUGMENTS)}")
        if self.batch_size < 1 or self.num_batches < 1 or self.num_warmup_batches < 0:
            raise UsageError("batch size and number of batches must be positive",
                             "pass e.g. --batch-size 32 --num-batches 100")
        if self.bucket_mb < 0:
            raise UsageError("--bucket-mb must be >= 0", "pass 0 to measure the best size, or e.g. 4")
        if self.image_size < 8 or self.loader_workers < 0:
            raise UsageError("--image-size must be >= 8 and --loader-workers >= 0",
                             "pass e.g. --image-size 224 --loader-workers 2")
        if self.data != "synthetic":
            scan(self.data)


def _emit(comm: Comm, cfg: TrainConfig, text: str) -> None:
    if comm.rank == 0 and cfg.output == "table":
        print(text, flush=True)


class Step:
    """Model, optimizer, precision and gradient exchange: one call = one training step."""

    def __init__(self, cfg: TrainConfig, comm: Comm) -> None:
        import torch

        self.torch, self.comm, self.cfg = torch, comm, cfg
        dev = comm.device
        if comm.backend == "mpi" and torch.cuda.is_available():
            dev = torch.device("cuda", comm.local_rank % torch.cuda.device_count())
        self.device = dev
        self.hvd: Any = comm.hvd if isinstance(comm, HorovodComm) else None  # horovod.torch
        torch.manual_seed(cfg.seed)
        spec = models.spec(cfg.model)
        model = models.build(cfg.model, spec.fixed_size or cfg.image_size).to(dev)
        self.layout = torch.channels_last if cfg.data_format == "NHWC" else None
        if self.layout is not None:
            model = model.to(memory_format=self.layout)  # the 4-D weights; DDP then keeps them so
        if comm.backend == "mpi":
            for p in model.state_dict().values():
                host = p.data if p.device.type == "cpu" else p.data.cpu()
                comm.broadcast(host, 0)
                if host is not p.data:
                    p.data.copy_(host)
            self.net = model
        elif self.hvd is not None:
            # Horovod's recipe: the same initial weights everywhere, from rank 0
            self.hvd.broadcast_parameters(model.state_dict(), root_rank=0)
            self.net = model
        elif comm.world_size == 1:
            self.net = model  # one rank has nothing to reduce: time the model, not DDP's hooks
        else:
            from torch.nn.parallel import DistributedDataParallel as DDP

            ids = [dev.index] if dev.type == "cuda" else None
            self.net = DDP(model, device_ids=ids)
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.grads: GradientBuckets | None = None
        if comm.backend == "mpi" and comm.world_size > 1:
            self.grads = GradientBuckets(comm, self.params, overlap=cfg.overlap)
            if cfg.bucket_mb:
                self.grads.set_cap(int(cfg.bucket_mb * MIB))
            else:
                self.grads.sweep()
        self.opt: Any = torch.optim.SGD(self.params, lr=cfg.learning_rate, momentum=0.9)
        if self.hvd is not None:  # gradients averaged by Horovod's allreduce during backward
            self.opt = self.hvd.DistributedOptimizer(self.opt, named_parameters=model.named_parameters())
            self.hvd.broadcast_optimizer_state(self.opt, root_rank=0)
        self.loss_fn = torch.nn.NLLLoss() if cfg.model == "mnist" else torch.nn.CrossEntropyLoss()
        amp = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(cfg.precision)
        self.amp = amp
        self.scaler = torch.amp.GradScaler(dev.type) if cfg.precision == "fp16" else None

    def __call__(self, images: Any, labels: Any) -> Any:
        torch = self.torch
        ctx = (torch.autocast(self.device.type, dtype=self.amp) if self.amp is not None
               else contextlib.nullcontext())  # fmt: skip
        if self.grads is not None:
            self.grads.begin()  # zeroes the gradient buffers in place
        elif self.hvd is not None:
            self.opt.zero_grad()  # Horovod's optimizer takes no set_to_none
        else:
            self.opt.zero_grad(set_to_none=True)
        if self.layout is not None and images.dim() == 4:
            images = images.contiguous(memory_format=self.layout)
        with ctx:
            loss = self.loss_fn(self.net(images), labels)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
        else:
            loss.backward()
        if self.grads is not None:
            self.grads.finish()
        if self.scaler is not None and self.hvd is not None:
            self.opt.synchronize()  # Horovod's AMP recipe: reduce, then step without reducing again
            with self.opt.skip_synchronize():
                self.scaler.step(self.opt)
            self.scaler.update()
        elif self.scaler is not None:
            self.scaler.step(self.opt)
            self.scaler.update()
        else:
            self.opt.step()
        return loss


def _inputs(cfg: TrainConfig, comm: Comm, device: Any) -> tuple[Any, LoaderStats | None]:
    """An iterator of (images, labels) on ``device``: one fixed random batch for synthetic
    data (as tf_cnn_benchmarks), else the real-file loader."""
    import torch

    spec = models.spec(cfg.model)
    size = spec.fixed_size or cfg.image_size
    if cfg.data == "synthetic":
        g = torch.Generator().manual_seed(cfg.seed + comm.rank)
        images = torch.randn(cfg.batch_size, spec.channels, size, size, generator=g).to(device)
        labels = torch.randint(0, spec.num_classes, (cfg.batch_size,), generator=g).to(device)

        def forever() -> Any:
            while True:
                yield images, labels

        return forever(), None
    stats = LoaderStats()
    ds = ImageFolder(cfg.data, Augment(size, cfg.augment, spec.channels), comm.rank,
                     comm.world_size, cfg.seed, cfg.decode)  # fmt: skip
    it = batches(ds, cfg.batch_size, cfg.loader_workers, prefetch=cfg.prefetch,
                 pin=device.type == "cuda", stats=stats)  # fmt: skip

    def moved() -> Any:
        for images, labels in it:
            yield (images.to(device, non_blocking=True),
                   (labels % spec.num_classes).to(device, non_blocking=True))

    return moved(), stats


def _device_name(device: Any) -> str:
    """The GPU's marketing name (what calibration keys on), or "cpu"."""
    if device.type == "cuda":
        import torch

        return str(torch.cuda.get_device_name(device))
    return "cpu"


class _StepTimer:
    """Per-step times. On CUDA, events recorded on the stream: no synchronisation between
    steps, so the host queues step k+1 while the GPU runs step k, as a plain training loop does
    (a synchronize per step cost about 5% on an H100); the events are read only when a progress
    line is printed. On the CPU, wall time between step ends."""

    def __init__(self, torch: Any, device: Any) -> None:
        self.cuda = device.type == "cuda"
        self.torch = torch
        self.marks: list[Any] = []

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def _mark(self) -> Any:
        if not self.cuda:
            return time.perf_counter()
        event = self.torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def start(self) -> None:
        self.marks = [self._mark()]

    def step_done(self) -> None:
        self.marks.append(self._mark())

    def times(self) -> list[float]:
        """Seconds of every step so far (waits for the GPU to reach the last one)."""
        if not self.cuda:
            return [b - a for a, b in zip(self.marks, self.marks[1:], strict=False)]
        self.marks[-1].synchronize()
        return [a.elapsed_time(b) / 1e3 for a, b in zip(self.marks, self.marks[1:], strict=False)]


def train(cfg: TrainConfig, comm: Comm) -> dict[str, Any]:
    """Warm up, then time ``num_batches`` steps on this rank; rank 0 prints progress."""
    cfg.validate()
    status = report.Status() if cfg.progress and comm.rank == 0 else None
    note = status.show if status else lambda text: None
    sweep = cfg.backend == "mpi" and not cfg.bucket_mb
    note(f"{cfg.model}: building the model" + (" and timing gradient bucket sizes" if sweep else ""))
    step = Step(cfg, comm)
    data, stats = _inputs(cfg, comm, step.device)
    timer = _StepTimer(step.torch, step.device)
    device_name = str(step.device)

    def emit(line: str) -> None:
        if status:
            status.clear()
        _emit(comm, cfg, line)

    for line in report.train_header(cfg, comm.world_size, device_name):
        emit(line)
    if cfg.precision == "fp16" and step.device.type == "cpu" and comm.rank == 0:
        print("note: fp16 on CPU runs in software (no fp16 units); expect it to be slow",
              file=sys.stderr)  # fmt: skip
    warmup_start = time.perf_counter()
    for i in range(cfg.num_warmup_batches):
        note(f"warm-up step {i + 1}/{cfg.num_warmup_batches}")
        step(*next(data))
    timer.sync()
    comm.barrier()
    if cfg.num_warmup_batches and comm.rank == 0:  # a bench may run for hours: say so before it does
        print(report.train_estimate(time.perf_counter() - warmup_start, cfg.num_warmup_batches, cfg.num_batches),
              file=sys.stderr, flush=True)  # fmt: skip
    images_seen = 0
    printing = 0.0  # time spent formatting progress lines, left out of the elapsed time
    start = time.perf_counter()
    timer.start()
    for i in range(cfg.num_batches):
        images, labels = next(data)
        loss = step(images, labels)
        timer.step_done()
        note(f"step {i + 1}/{cfg.num_batches}")  # at most 4 writes a second, on rank 0
        images_seen += len(labels)
        if (i + 1) % cfg.display_every == 0 or i + 1 == cfg.num_batches:
            so_far = timer.times()  # waits for the GPU: training time, not printing time
            t1 = time.perf_counter()
            line = report.train_step_line(i + 1, cfg.batch_size, so_far, float(loss.detach()))
            emit(line)
            printing += time.perf_counter() - t1
    timer.sync()
    times = timer.times()
    elapsed = time.perf_counter() - start - printing
    total = comm.world_size * images_seen / elapsed
    for line in report.train_footer(total):
        emit(line)
    return {
        "kind": "train", "model": cfg.model, "batch_size": cfg.batch_size,
        "precision": cfg.precision, "data_format": cfg.data_format, "backend": comm.backend,
        "world_size": comm.world_size,
        "nodes": nodes(comm.world_size), "device": device_name, "device_name": _device_name(step.device),
        "image_size": models.spec(cfg.model).fixed_size or cfg.image_size,
        "num_batches": cfg.num_batches, "threads": step.torch.get_num_threads(),
        "images_per_sec_total": total, "images_per_sec_per_worker": total / comm.world_size,
        "step_time_s": elapsed / cfg.num_batches, "step_times_s": times,
        "data": "synthetic" if cfg.data == "synthetic" else cfg.data,
        "skipped_images": stats.skipped if stats else 0, "config": asdict(cfg),
        "bucket_bytes": step.grads.cap_bytes if step.grads else None,
        "bucket_sweep_s": {str(k): v for k, v in step.grads.sweep_s.items()} if step.grads else None,
        **(_horovod_facts(comm, step) if isinstance(comm, HorovodComm) else {}),
    }  # fmt: skip


def _horovod_facts(comm: HorovodComm, step: Step) -> dict[str, Any]:
    """Which controller horovodrun started, and every rank's sum of its weights after training:
    each rank trained on its own data, so they agree only if DistributedOptimizer averaged."""
    total = float(sum(float(p.detach().double().sum()) for p in step.params))
    return {"horovod_controller": comm.controller, "weight_sums": comm.hvd.allgather_object(total)}


def run(cfg: TrainConfig) -> dict[str, Any]:
    """Train as this process's rank (from the launcher's environment) and print on rank 0."""
    cfg.validate()
    comm = init(cfg.backend, discover())
    try:
        result = train(cfg, comm)
    finally:
        comm.close()
    if comm.rank == 0 and cfg.output == "json":
        print(json.dumps(result, indent=2), flush=True)
    return result
