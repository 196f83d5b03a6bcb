"""Gradient exchange alone, per step, over mpi: per-parameter Allreduce vs the bench's buckets.

    mpirun --allow-run-as-root -np 2 --bind-to none --mca mpi_yield_when_idle 1 \
        -x OMP_NUM_THREADS=1 python benchmarks/grad_exchange.py [--model resnet50] [--reps 5]

On resnet50's real gradient layout (the bench's model definition), each repetition times, in
turn: the plain loop's exchange (one in-place mpi4py Allreduce and a division per parameter),
the bench's preallocated buckets at 1, 2, 4, 8, 16 and 64 MiB (averaging only), and zeroing the
buffers (what a step pays instead of reallocating gradients). A barrier precedes each. Rank 0
prints min / median / max ms and the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    import torch
    from mpi4py import MPI

    from ringleader.bench.comm import init
    from ringleader.bench.gradsync import MIB, GradientBuckets
    from ringleader.bench.models import build

    comm = init("mpi")
    world = MPI.COMM_WORLD
    params = list(build(a.model, a.image_size).parameters())
    buckets = GradientBuckets(comm, params)

    def per_parameter() -> None:
        for p in params:
            world.Allreduce(MPI.IN_PLACE, p.grad.numpy(), op=MPI.SUM)
            p.grad.div_(comm.world_size)

    cases = ["per parameter", *(f"buckets {m} MiB" for m in (1, 2, 4, 8, 16, 64)), "zero buffers"]
    times: dict[str, list[float]] = {c: [] for c in cases}
    load = os.getloadavg()[0]
    for _ in range(a.reps):
        for case in cases:
            if case.startswith("buckets"):
                buckets.set_cap(int(case.split()[1]) * MIB)
                buckets.begin()
            world.Barrier()
            t0 = time.perf_counter()
            if case == "per parameter":
                per_parameter()
            elif case == "zero buffers":
                buckets.begin()
            else:
                buckets.finish()
            times[case].append((time.perf_counter() - t0) * 1e3)
    if comm.rank == 0:
        size = sum(p.numel() * p.element_size() for p in params) / MIB
        print(f"{a.model}: {len(params)} gradient tensors, {size:.1f} MiB, {comm.world_size} ranks, {a.reps} reps, "
              f"threads {torch.get_num_threads()}, load {load:.2f} -> {os.getloadavg()[0]:.2f}")  # fmt: skip
        print("| exchange | min ms | median ms | max ms |")
        print("|---|---:|---:|---:|")
        for case, xs in times.items():
            print(f"| {case} | {min(xs):.1f} | {statistics.median(xs):.1f} | {max(xs):.1f} |")


if __name__ == "__main__":
    main()
