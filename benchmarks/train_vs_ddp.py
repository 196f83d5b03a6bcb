"""`ringleader bench train` vs a plain hand-written data-parallel loop, interleaved.

    python benchmarks/train_vs_ddp.py --backend gloo --model resnet50 --image-size 64 \
        --batch-size 16 --num-batches 20 --reps 3

The plain loop (this file with --rank) builds the same model definition, one fixed synthetic
batch, SGD with momentum, and for gloo wraps the model in torch DDP; for mpi it averages each
gradient with a bare mpi4py Allreduce after backward. Both sides run the same number of warmup
and timed steps on the same number of ranks; total images/s = ranks x steps x batch / elapsed.
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


def plain_rank(a: argparse.Namespace) -> None:
    import torch

    from ringleader.bench.models import build

    torch.manual_seed(0)
    model = build(a.model, a.image_size)
    if a.backend == "mpi":
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        rank, n = comm.Get_rank(), comm.Get_size()
        for p in model.state_dict().values():
            comm.Bcast(p.numpy(), root=0)
        net = model
    else:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel

        dist.init_process_group("gloo")
        rank, n = dist.get_rank(), dist.get_world_size()
        net = DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    images = torch.randn(a.batch_size, 3, a.image_size, a.image_size)
    labels = torch.randint(0, 1000, (a.batch_size,))

    def step() -> None:
        opt.zero_grad()
        loss_fn(net(images), labels).backward()
        if a.backend == "mpi":
            for p in model.parameters():
                g = p.grad.numpy()
                comm.Allreduce(MPI.IN_PLACE, g, op=MPI.SUM)
                p.grad.div_(n)
        opt.step()

    for _ in range(a.num_warmup_batches):
        step()
    if a.backend == "mpi":
        comm.Barrier()
    else:
        dist.barrier()
    t0 = time.perf_counter()
    for _ in range(a.num_batches):
        step()
    elapsed = time.perf_counter() - t0
    if rank == 0:
        print(json.dumps({"images_per_sec_total": n * a.num_batches * a.batch_size / elapsed}))


def common(a: argparse.Namespace) -> list[str]:
    return ["--model", a.model, "--batch-size", str(a.batch_size), "--num-batches",
            str(a.num_batches), "--num-warmup-batches", str(a.num_warmup_batches),
            "--image-size", str(a.image_size), "--backend", a.backend]  # fmt: skip


def run_plain(a: argparse.Namespace) -> float:
    from ringleader.bench.launch import mpirun_command, rank_env
    from ringleader.bench.ranks import free_port

    cmd = [sys.executable, SELF, "--rank", *common(a)]
    env = rank_env(a.np)
    if a.backend == "mpi":
        out = subprocess.run(mpirun_command(a.np, cmd, env), env=env, capture_output=True,
                             text=True, check=True).stdout  # fmt: skip
    else:
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(a.np))
        procs = [subprocess.Popen(cmd, env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                                  stdout=subprocess.PIPE, text=True) for r in range(a.np)]  # fmt: skip
        out = "".join(p.communicate()[0] for p in procs)
    return float(json.loads(out)["images_per_sec_total"])


def run_bench(a: argparse.Namespace) -> float:
    cmd = [sys.executable, "-m", "ringleader.cli.main", "bench", "train", *common(a),
           "-np", str(a.np), "-o", "json"]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return float(json.loads(out)["images_per_sec_total"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="gloo", choices=["gloo", "mpi"])
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--num-batches", type=int, default=20)
    ap.add_argument("--num-warmup-batches", type=int, default=3)
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("-np", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.rank:
        plain_rank(a)
        return
    bench, plain = [], []
    for rep in range(a.reps):
        bench.append(run_bench(a))
        plain.append(run_plain(a))
        print(f"# repetition {rep + 1}: bench {bench[-1]:.1f}, plain {plain[-1]:.1f} images/s",
              file=sys.stderr)  # fmt: skip
    mb, mp = statistics.median(bench), statistics.median(plain)
    print(f"{a.model} {a.image_size}px batch {a.batch_size} x {a.np} {a.backend} ranks, "
          f"{a.num_batches} steps, {a.reps} interleaved reps: bench {mb:.1f} images/s, "
          f"plain loop {mp:.1f} images/s, ratio {mb / mp:.3f}")
    print("bench:", ", ".join(f"{x:.1f}" for x in bench))
    print("plain:", ", ".join(f"{x:.1f}" for x in plain))


if __name__ == "__main__":
    main()
