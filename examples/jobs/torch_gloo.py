"""A torch.distributed job over gloo (CPU): runs under ringleader as under torchrun.

    ringleader submit mpi --name gloo --workers 2 --gpus 1 -- python examples/jobs/torch_gloo.py

Each rank prints one JSON line with what it was given, then all ranks allreduce their rank.
"""

import json
import os

import torch
import torch.distributed as dist


def main() -> None:
    dist.init_process_group("gloo")  # RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT from the env
    rank, world = dist.get_rank(), dist.get_world_size()
    total = torch.tensor([float(rank)])
    dist.all_reduce(total)
    seen = {
        "rank": rank, "world_size": world, "local_rank": int(os.environ["LOCAL_RANK"]),
        "node": os.environ.get("RINGLEADER_NODE"), "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "virtual_gpus": os.environ.get("RINGLEADER_VIRTUAL_GPUS"), "allreduce_sum": total.item(),
    }  # fmt: skip
    print(json.dumps(seen), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
