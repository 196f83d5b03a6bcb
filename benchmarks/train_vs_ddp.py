"""`ringleader bench train` vs a plain hand-written data-parallel loop, interleaved.

    python benchmarks/train_vs_ddp.py --models trivial,resnet50 --backends gloo,mpi --reps 3

The plain loop (this file with --rank) builds the same model definition, one fixed synthetic
batch, SGD with momentum, and for gloo wraps the model in torch DDP; for mpi it averages each
gradient with a bare mpi4py Allreduce after backward. Both sides run the same number of warmup
and timed steps on the same number of ranks; total images/s = ranks x steps x batch / elapsed.
Every repetition runs each (model, backend) pair in turn, the bench then the plain loop, and
records the load average beside it.
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


# Per model: (batch size, timed steps, warmup steps) unless given on the command line. resnet50
# runs at 64 px so that a step takes about a second on a CPU core.
MODEL_DEFAULTS = {"trivial": (32, 200, 10), "resnet50": (16, 20, 3)}


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


def run_bench(a: argparse.Namespace) -> tuple[float, int | None]:
    """(images/s, mpi bucket size chosen by the bench's sweep)."""
    cmd = [sys.executable, "-m", "ringleader.cli.main", "bench", "train", *common(a),
           "-np", str(a.np), "-o", "json"]  # fmt: skip
    out = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    return float(out["images_per_sec_total"]), out.get("bucket_bytes")


def pairs(a: argparse.Namespace) -> list[argparse.Namespace]:
    """One configuration per (model, backend), model defaults filled in."""
    out = []
    for model in a.models.split(","):
        batch, steps, warmup = MODEL_DEFAULTS.get(model, (16, 20, 3))
        for backend in a.backends.split(","):
            out.append(argparse.Namespace(**{**vars(a), "model": model, "backend": backend,
                                             "batch_size": a.batch_size or batch,
                                             "num_batches": a.num_batches or steps,
                                             "num_warmup_batches": a.num_warmup_batches or warmup}))  # fmt: skip
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="gloo,mpi", help="comma-separated: gloo, mpi")
    ap.add_argument("--models", default="trivial,resnet50", help="comma-separated model names")
    ap.add_argument("--backend", default="gloo", help=argparse.SUPPRESS)  # a rank of the plain loop
    ap.add_argument("--model", default="resnet50", help=argparse.SUPPRESS)
    ap.add_argument("--batch-size", type=int, default=0, help="default per model (trivial 32, resnet50 16)")
    ap.add_argument("--num-batches", type=int, default=0, help="default per model (trivial 200, resnet50 20)")
    ap.add_argument("--num-warmup-batches", type=int, default=0, help="default per model (10, 3)")
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("-np", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.rank:
        plain_rank(a)
        return
    configs = pairs(a)
    results: dict[tuple[str, str], dict[str, list[float]]] = {}
    buckets: dict[tuple[str, str], set[int | None]] = {}
    for rep in range(a.reps):
        for c in configs:
            key = (c.model, c.backend)
            load = os.getloadavg()[0]
            bench, bucket = run_bench(c)
            plain = run_plain(c)
            r = results.setdefault(key, {"bench": [], "plain": [], "ratio": [], "load": []})
            r["bench"].append(bench)
            r["plain"].append(plain)
            r["ratio"].append(bench / plain)
            r["load"].append(load)
            buckets.setdefault(key, set()).add(bucket)
            print(f"# rep {rep + 1} {c.model} {c.backend}: bench {bench:.1f}, plain {plain:.1f} images/s, "
                  f"ratio {bench / plain:.3f}, load {load:.2f}", file=sys.stderr, flush=True)  # fmt: skip
    print(f"{a.np} ranks, {a.image_size} px, {a.reps} interleaved repetitions (bench, then plain loop, per "
          "configuration); images/s total")  # fmt: skip
    print("| model, batch, steps | backend | bench median | plain median | ratio of medians | "
          "per-rep ratio min / median / max | load average (1 min) | mpi bucket |")  # fmt: skip
    print("|---|---|---:|---:|---:|---|---|---|")
    for c in configs:
        r = results[(c.model, c.backend)]
        mb, mp = statistics.median(r["bench"]), statistics.median(r["plain"])
        ratios = r["ratio"]
        bucket = ", ".join(f"{b / 2**20:g} MiB" for b in sorted(b for b in buckets[(c.model, c.backend)] if b)) or "-"
        print(f"| {c.model}, {c.batch_size}, {c.num_batches} | {c.backend} | {mb:.1f} | {mp:.1f} | **{mb / mp:.3f}** | "
              f"{min(ratios):.2f} / {statistics.median(ratios):.2f} / {max(ratios):.2f} | "
              f"{min(r['load']):.1f}-{max(r['load']):.1f} | {bucket} |")  # fmt: skip


if __name__ == "__main__":
    main()
