"""One rank of the gradient-bucket test: a small network whose gradients differ per rank is
trained one step with the buckets (several bucket sizes, with and without overlap, fp32 and
bf16 parameters); every averaged gradient must equal the mean of all ranks' own gradients,
computed independently with one allgather per parameter. Rank 0 prints one JSON object."""

from __future__ import annotations

import json

import torch

from ringleader.bench.comm import init
from ringleader.bench.gradsync import MIB, GradientBuckets
from ringleader.bench.ranks import discover


def network(dtype: torch.dtype) -> torch.nn.Module:
    torch.manual_seed(0)  # same weights on every rank
    net = torch.nn.Sequential(torch.nn.Linear(64, 300), torch.nn.ReLU(), torch.nn.Linear(300, 200),
                              torch.nn.ReLU(), torch.nn.Linear(200, 10))  # fmt: skip
    return net.to(dtype)


def main() -> None:
    comm = init("mpi", discover())
    out: dict[str, list[float]] = {}
    for dtype in (torch.float32, torch.bfloat16):
        for cap, overlap in ((64 * MIB, False), (1024, False), (1024, True), (0, True)):
            net = network(dtype)
            params = list(net.parameters())
            grads = GradientBuckets(comm, params, overlap=overlap)
            chosen = grads.sweep() if cap == 0 else cap
            grads.set_cap(chosen)
            x = torch.randn(32, 64, generator=torch.Generator().manual_seed(1 + comm.rank)).to(dtype)
            reference = network(dtype)  # this rank's own gradients, computed without the buckets
            reference(x).square().mean().backward()
            own = [p.grad for p in reference.parameters()]
            for _ in range(2):  # a second step: the buffers must be zeroed, not accumulated
                grads.begin()
                net(x).square().mean().backward()
                grads.finish()
            worst = 0.0
            for p, g in zip(params, own, strict=True):
                everyone = torch.empty(comm.world_size * g.numel(), dtype=g.dtype)
                comm.allgather(everyone, g.reshape(-1).contiguous())
                mean = everyone.view(comm.world_size, -1).float().mean(0).view_as(g)
                worst = max(worst, float((p.grad.float() - mean).abs().max() / (mean.abs().max() + 1e-6)))
            size = "sweep" if cap == 0 else cap
            name = f"{str(dtype).removeprefix('torch.')}/{size}/{'overlap' if overlap else 'after'}"
            out[name] = [worst, len(grads.buckets), float(all(p.grad.data_ptr() for p in params))]
    comm.close()
    if comm.rank == 0:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
