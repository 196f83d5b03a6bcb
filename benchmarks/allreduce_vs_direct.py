"""`ringleader bench allreduce` vs a minimal direct script, same backend and sizes, interleaved.

    python benchmarks/allreduce_vs_direct.py --backend gloo --reps 3 -b 1M -e 128M

Each repetition runs the bench (`ringleader bench allreduce -np N -o json`) and then the
direct script (this file with --rank: a bare torch.distributed.all_reduce loop for gloo,
a bare mpi4py Allreduce loop for mpi), with the same sizes, warmup and iterations. Reports per
size the median busbw of each and their ratio (bench in-place column vs the direct in-place
all_reduce for gloo; bench out-of-place vs direct Allreduce(send, recv) for mpi), and the
memory-copy bandwidth of this machine (numpy copy of 256 MiB) as the ceiling.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

SELF = os.path.abspath(__file__)


def direct_rank(backend: str, sizes: list[int], iters: int, warmup: int) -> None:
    """The minimal script: one buffer per size, warmup, barrier, timed loop; rank 0 prints."""
    import numpy as np

    out = {}
    if backend == "mpi":
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        rank, n = comm.Get_rank(), comm.Get_size()
        for size in sizes:
            send = np.ones(size // 4, dtype=np.float32)
            recv = np.empty_like(send)
            for _ in range(warmup):
                comm.Allreduce(send, recv, op=MPI.SUM)
            comm.Barrier()
            t0 = time.perf_counter()
            for _ in range(iters):
                comm.Allreduce(send, recv, op=MPI.SUM)
            t = comm.allreduce((time.perf_counter() - t0) / iters) / n
            out[size] = size / t / 1e9 * 2 * (n - 1) / n
    else:
        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo")
        rank, n = dist.get_rank(), dist.get_world_size()
        for size in sizes:
            x = torch.ones(size // 4)
            for _ in range(warmup):
                dist.all_reduce(x)
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(iters):
                dist.all_reduce(x)
            t = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64)
            dist.all_reduce(t)
            out[size] = size / (float(t) / n) / 1e9 * 2 * (n - 1) / n
        dist.destroy_process_group()
    if rank == 0:
        print(json.dumps(out))


def run_direct(backend: str, np_: int, sizes: list[int], iters: int, warmup: int) -> dict[int, float]:
    from ringleader.bench.launch import mpirun_command, rank_env
    from ringleader.bench.ranks import free_port

    cmd = [sys.executable, SELF, "--rank", "--backend", backend, "--sizes",
           ",".join(map(str, sizes)), "-n", str(iters), "-w", str(warmup)]  # fmt: skip
    env = rank_env(np_)
    if backend == "mpi":
        proc = subprocess.run(mpirun_command(np_, cmd, env), env=env, capture_output=True,
                              text=True, check=True)  # fmt: skip
        stdout = proc.stdout
    else:
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(np_))
        procs = [subprocess.Popen(cmd, env=dict(env, RANK=str(r)), stdout=subprocess.PIPE,
                                  text=True) for r in range(np_)]  # fmt: skip
        stdout = "".join(p.communicate()[0] for p in procs)
    return {int(k): v for k, v in json.loads(stdout).items()}


def run_bench(backend: str, np_: int, b: str, e: str, iters: int, warmup: int) -> dict[int, float]:
    cmd = [sys.executable, "-m", "ringleader.cli.main", "bench", "allreduce", "--backend",
           backend, "-np", str(np_), "-b", b, "-e", e, "-n", str(iters), "-w", str(warmup),
           "-o", "json"]  # fmt: skip
    res = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    part = "oop" if backend == "mpi" else "ip"
    return {r["size_bytes"]: r[part]["busbw_gbs"] for r in res["results"]}


def memcpy_gbs(reps: int = 5) -> float:
    import numpy as np

    src = np.ones(256 * 2**20, dtype=np.uint8)
    dst = np.empty_like(src)
    best = []
    for _ in range(reps):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best.append(src.nbytes / (time.perf_counter() - t0) / 1e9)
    return statistics.median(best)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="gloo", choices=["gloo", "mpi"])
    ap.add_argument("-np", type=int, default=2)
    ap.add_argument("-b", default="1M")
    ap.add_argument("-e", default="128M")
    ap.add_argument("-n", type=int, default=20)
    ap.add_argument("-w", type=int, default=5)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--sizes", default="", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.rank:
        direct_rank(a.backend, [int(s) for s in a.sizes.split(",")], a.n, a.w)
        return
    bench: dict[int, list[float]] = {}
    direct: dict[int, list[float]] = {}
    for rep in range(a.reps):
        for size, bw in run_bench(a.backend, a.np, a.b, a.e, a.n, a.w).items():
            bench.setdefault(size, []).append(bw)
        for size, bw in run_direct(a.backend, a.np, sorted(bench), a.n, a.w).items():
            direct.setdefault(size, []).append(bw)
        print(f"# repetition {rep + 1}/{a.reps} done", file=sys.stderr)
    ceiling = memcpy_gbs()
    print(f"| size | bench busbw (GB/s) | direct busbw (GB/s) | bench / direct | "
          f"bench / memcpy ({ceiling:.2f} GB/s) |")
    print("|---:|---:|---:|---:|---:|")
    ratios = []
    for size in sorted(bench):
        mb, md = statistics.median(bench[size]), statistics.median(direct[size])
        ratios.append(mb / md)
        print(f"| {size // 2**20} MiB | {mb:.3f} | {md:.3f} | {mb / md:.3f} | {mb / ceiling:.3f} |")
    print(f"\nmedian bench/direct ratio over sizes: {statistics.median(ratios):.3f}; "
          f"memcpy 256 MiB: {ceiling:.2f} GB/s; backend {a.backend}, {a.np} ranks, "
          f"{a.reps} interleaved repetitions, -n {a.n} -w {a.w}")


if __name__ == "__main__":
    main()
