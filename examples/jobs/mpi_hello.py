"""An mpi4py job: every rank reports its rank, node and GPUs, then they allreduce their ranks.

    ringleader submit mpi --name hello --workers 2 --gpus 1 \
        "mpirun -np 2 python examples/jobs/mpi_hello.py"
"""

import os

from mpi4py import MPI

comm = MPI.COMM_WORLD
gpus = os.environ.get("CUDA_VISIBLE_DEVICES") or os.environ.get("RINGLEADER_VIRTUAL_GPUS", "")
print(
    f"rank {comm.Get_rank()}/{comm.Get_size()} node={os.environ.get('RINGLEADER_NODE')} "
    f"local_rank={os.environ.get('LOCAL_RANK')} gpus={gpus!r} "
    f"virtual={os.environ.get('RINGLEADER_VIRTUAL_GPUS')!r}",
    flush=True,
)
total = comm.allreduce(comm.Get_rank(), op=MPI.SUM)
if comm.Get_rank() == 0:
    print(f"allreduce sum of ranks: {total}", flush=True)
