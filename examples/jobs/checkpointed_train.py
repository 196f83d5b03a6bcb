"""Deterministic data-parallel training that resumes from its checkpoint: what a job that may be
preempted or moved does.

    ringleader submit mpi --name t --workers 4 --gpus 1 --run-time 10m -- \\
        python3 examples/jobs/checkpointed_train.py FOLDER --steps 300
    python3 examples/jobs/checkpointed_train.py FOLDER --steps 300 --workers 4 --reference

On CPU over gloo: each step's batch comes from the step and the rank alone, every rank sums the
gathered gradients in rank order (the same sum on any placement, in any number of runs), rank 0
saves (step, weights, optimizer) to FOLDER/snapshot.pt every 10 steps, and a run started again
(RINGLEADER_RESTARTS > 0, or any run that finds a snapshot) resumes from it. Each step also
allreduces ``--exchange-mb`` of zeros (a bigger model's gradients), so the placement's links set
the step time. Each rank writes FOLDER/start-RUN-RANK (the step it started at and its node), then
says it starts in its log, and FOLDER/progress-RUN-RANK (its last step); rank 0 saves the final
weights to FOLDER/final.pt.
``--reference`` computes the same steps in one process (FOLDER/reference.pt): an uninterrupted
run's weights, to compare bit for bit.
"""

from __future__ import annotations

import argparse
import os
import time

import torch


def batch(step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(8, 16, generator=gen), torch.randn(8, 4, generator=gen)


def grads(model: torch.nn.Module, step: int, rank: int) -> list[torch.Tensor]:
    model.zero_grad(set_to_none=True)
    x, y = batch(step, rank)
    torch.nn.functional.mse_loss(model(x), y).backward()
    return [p.grad.clone() for p in model.parameters() if p.grad is not None]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--exchange-mb", type=float, default=5.0)
    ap.add_argument("--workers", type=int, default=None, help="--reference: how many ranks to stand for")
    ap.add_argument("--reference", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    if args.reference:
        world = args.workers or 1
        for step in range(args.steps):
            for p, *each in zip(model.parameters(), *(grads(model, step, r) for r in range(world)), strict=True):
                p.grad = sum(each) / world
            opt.step()
        torch.save(model.state_dict(), os.path.join(args.folder, "reference.pt"))
        return
    train(args.folder, args.steps, args.exchange_mb, model, opt)


def train(folder: str, steps: int, exchange_mb: float, model: torch.nn.Module, opt: torch.optim.Optimizer) -> None:
    import torch.distributed as dist

    run, rank = os.environ.get("RINGLEADER_RESTARTS", "0"), int(os.environ["RANK"])
    snapshot = os.path.join(folder, "snapshot.pt")
    first = 0
    if os.path.exists(snapshot):
        saved = torch.load(snapshot)
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["opt"])
        first = saved["step"]
    with open(os.path.join(folder, f"start-{run}-{rank}"), "w") as fh:
        fh.write(f"{first} {os.environ.get('RINGLEADER_NODE', '-')}")
    print(f"rank {rank}: run {run} starts at step {first}", flush=True)
    dist.init_process_group("gloo")
    world = dist.get_world_size()
    traffic = torch.zeros(int(exchange_mb * 1e6 / 4))
    for step in range(first, steps):
        for p, g in zip(model.parameters(), grads(model, step, rank), strict=True):
            each = [torch.zeros_like(g) for _ in range(world)]
            dist.all_gather(each, g)
            p.grad = sum(each) / world
        dist.all_reduce(traffic)
        opt.step()
        if rank == 0 and (step + 1) % 10 == 0:
            saved = {"step": step + 1, "model": model.state_dict(), "opt": opt.state_dict()}
            torch.save(saved, snapshot + ".tmp" + run)
            os.replace(snapshot + ".tmp" + run, snapshot)
        with open(os.path.join(folder, f"progress-{run}-{rank}"), "w") as fh:
            fh.write(f"{step + 1} {time.time():.3f}")
    if rank == 0:
        torch.save(model.state_dict(), os.path.join(folder, "final.pt"))


if __name__ == "__main__":
    main()
