"""Data-parallel training steps that move VGG16's gradients: the communication-heavy half of the
reference study's workload, measured.

    ringleader submit mpi --name vgg --workers 4 --gpus 1 --model vgg16 -- \\
        python3 examples/jobs/vgg16_exchange.py --batch-size 64 --steps 5

Each step is a fixed compute phase, then a synchronous allreduce (torch.distributed, gloo) of one
gradient buffer with the model's parameter count (ringleader's reference tables: 138.36 M for
VGG16, 553 MB in fp32) in 25 MB buckets, as DDP sends them. The compute phase is a fixed wait
(``--compute-ms``; default: one V100's VGG16 step at this batch as ringleader's model puts it):
this stands in for a GPU, whose kernels leave the host's cores free, so only the placement
(which links the allreduce crosses) changes the step time. Rank 0 prints one JSON line in
`ringleader bench train -o json`'s form, so `ringleader calibrate` reads it (one worker: the
compute rate of device ``emulated``; more: a multi-worker result).

Runs under ringleader (torchrun's variables), under a plain `mpirun` (Open MPI's variables;
rank 0 picks MASTER_ADDR/PORT and sends them through mpi4py) or alone (one worker, no allreduce).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import time

import torch
import torch.distributed as dist

from ringleader.bench.ranks import discover, torch_rendezvous_env
from ringleader.model import grad_bytes
from ringleader.model.compute import compute_rate

BUCKET_BYTES = 25 * 1024 * 1024  # DDP's default bucket_cap_mb
DEVICE = "emulated"  # the fixed wait stands in for a GPU: calibrate files it under this device


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="vgg16", help="Gradient size of this model (reference tables).")
    p.add_argument("--batch-size", type=int, default=64, help="Images per worker per step.")
    p.add_argument("--steps", type=int, default=5, help="Timed steps.")
    p.add_argument("--warmup", type=int, default=1, help="Untimed steps first.")
    p.add_argument("--compute-ms", type=float, default=None,
                   help="Fixed compute per step (default: a V100's step of the model at this batch).")  # fmt: skip
    args = p.parse_args()
    if args.batch_size < 1 or args.steps < 1 or args.warmup < 0:
        p.error("--batch-size and --steps must be >= 1, --warmup >= 0")
    if args.compute_ms is None:
        args.compute_ms = compute_rate(args.model, "V100", "fp32", args.batch_size).step_s * 1e3
    if args.compute_ms < 0:
        p.error("--compute-ms must be >= 0")
    return args


def buckets(grads: torch.Tensor) -> list[torch.Tensor]:
    per = BUCKET_BYTES // grads.element_size()
    return list(grads.split(per))


def step(grads: list[torch.Tensor], compute_s: float, world: int) -> tuple[float, float]:
    """One step: compute, then allreduce every bucket; (compute s, allreduce s)."""
    t0 = time.perf_counter()
    time.sleep(compute_s)
    t1 = time.perf_counter()
    if world > 1:
        for bucket in grads:
            dist.all_reduce(bucket)
    return t1 - t0, time.perf_counter() - t1


def main() -> None:
    args = parse_args()
    info = discover()
    torch_rendezvous_env(info)
    world = info.world_size
    if world > 1:
        dist.init_process_group("gloo")
    torch.set_num_threads(1)  # the reduction is memory-bound; ranks share the host's cores
    n_grads = int(grad_bytes(args.model, "fp32")) // 4
    grads = buckets(torch.ones(n_grads, dtype=torch.float32))
    compute_s = args.compute_ms / 1e3
    for _ in range(args.warmup):
        step(grads, compute_s, world)
    if world > 1:
        dist.barrier()
    spent = [0.0, 0.0]
    start = time.perf_counter()
    for _ in range(args.steps):
        c, a = step(grads, compute_s, world)
        spent[0] += c
        spent[1] += a
    elapsed = time.perf_counter() - start
    hosts: list[str] = [socket.gethostname()]
    if world > 1:
        gathered: list[str | None] = [None] * world
        dist.all_gather_object(gathered, socket.gethostname())
        hosts = [str(h) for h in gathered]
    if info.rank == 0:
        step_s = elapsed / args.steps
        print(json.dumps({
            "kind": "train", "model": args.model, "device_name": DEVICE, "precision": "fp32",
            "backend": "gloo" if world > 1 else "", "batch_size": args.batch_size, "world_size": world,
            "nodes": sorted(set(hosts)), "hosts": hosts, "steps": args.steps,
            "images_per_sec_total": world * args.batch_size / step_s, "step_time_s": step_s,
            "compute_s": spent[0] / args.steps, "allreduce_s": spent[1] / args.steps,
            "grad_bytes": n_grads * 4, "compute_ms": args.compute_ms,
            "env": {k: os.environ[k] for k in ("MASTER_ADDR", "GLOO_SOCKET_IFNAME") if k in os.environ},
        }), flush=True)  # fmt: skip
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
