"""Where this process sits in a job: rank discovery, slot limits and rendezvous.

Inside ``mpirun`` the OMPI_COMM_WORLD_* variables say who we are; under a plain launcher
(torchrun, ringleader's runtime) RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT do.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import sys
from dataclasses import dataclass

from ringleader.bench import BACKENDS, HOROVOD, TRAIN_BACKENDS
from ringleader.errors import DependencyError, UsageError
from ringleader.runtime.rank import rendezvous_port

# The most ranks `-np` launches on one machine. Each rank of a CPU backend is a full process
# with its own copy of the model, so beyond 4 per core a run measures the OS scheduler,
# not the backend; 64 is a hard cap whatever the core count.
MAX_RANKS = 64
RANKS_PER_CORE = 4

INSTALL_MPI = "apt-get install openmpi-bin libopenmpi-dev && pip install 'ringleader[bench]'"
INSTALL_HOROVOD = ("run `make lab-horovod` (it builds Horovod 0.28.1 from its sdist and installs it), or "
                   "`bash scripts/install-horovod.sh` in this virtual env")  # fmt: skip


@dataclass(frozen=True)
class RankInfo:
    rank: int
    world_size: int
    local_rank: int
    launcher: str  # "mpirun", "env" (RANK/WORLD_SIZE) or "none" (a single process)

    @property
    def in_job(self) -> bool:
        return self.launcher != "none"


def discover(env: dict[str, str] | None = None) -> RankInfo:
    """This process's rank, from mpirun's variables first, then torchrun's, else rank 0 of 1."""
    e = os.environ if env is None else env
    if "OMPI_COMM_WORLD_SIZE" in e:
        return RankInfo(
            int(e.get("OMPI_COMM_WORLD_RANK", "0")), int(e["OMPI_COMM_WORLD_SIZE"]),
            int(e.get("OMPI_COMM_WORLD_LOCAL_RANK", "0")), "mpirun",
        )  # fmt: skip
    if "WORLD_SIZE" in e and "RANK" in e:
        return RankInfo(int(e["RANK"]), int(e["WORLD_SIZE"]), int(e.get("LOCAL_RANK", "0")), "env")
    return RankInfo(0, 1, 0, "none")


def nodes(world_size: int, env: dict[str, str] | None = None) -> int:
    """Machines in the job: world size over ranks per machine (1 when unknown)."""
    e = os.environ if env is None else env
    local = e.get("OMPI_COMM_WORLD_LOCAL_SIZE") or e.get("LOCAL_WORLD_SIZE") or e.get("HOROVOD_LOCAL_SIZE")
    try:
        return max(1, -(-world_size // int(local))) if local else 1  # 3 ranks as 2+1: 2 machines
    except ValueError:
        return 1


def check_backend(backend: str, allowed: tuple[str, ...] = BACKENDS) -> None:
    if backend not in allowed:
        raise UsageError(f"unknown backend {backend!r}", f"use one of: {', '.join(allowed)}")


def horovod_installed() -> bool:
    """horovod.torch can be imported (found, not imported: Horovod's start-up is not cheap)."""
    try:
        return importlib.util.find_spec("horovod.torch") is not None
    except (ImportError, ValueError):
        return False


def horovodrun() -> str | None:
    """Horovod's launcher: beside this Python (a virtual env's bin), else on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "horovodrun")
    return beside if os.access(beside, os.X_OK) else shutil.which("horovodrun")


def cuda_count() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0


def max_ranks(backend: str) -> int:
    """The largest -np this machine runs: GPUs for nccl, else RANKS_PER_CORE x cores (<= 64)."""
    if backend == "nccl":
        return min(MAX_RANKS, cuda_count())
    return min(MAX_RANKS, RANKS_PER_CORE * (os.cpu_count() or 1))


def check_np(backend: str, np_: int) -> None:
    if np_ < 1:
        raise UsageError(f"-np must be at least 1, got {np_}", "pass -np 1 or more")
    limit = max_ranks(backend)
    if np_ > limit:
        why = "GPUs" if backend == "nccl" else f"{RANKS_PER_CORE} ranks per core, at most {MAX_RANKS}"
        raise UsageError(
            f"-np {np_} is more than this machine runs for {backend} ({limit}: {why})",
            f"pass -np {limit} or less, or run across machines under mpirun / ringleader's runtime",
        )


def check_available(backend: str, *, need_mpirun: bool) -> None:
    """Refuse early, with the fix, when the backend cannot run here."""
    check_backend(backend, TRAIN_BACKENDS)
    if importlib.util.find_spec("torch") is None:  # found, not imported: keeps the launcher light
        raise DependencyError("torch is not installed", "pip install 'ringleader[bench]'")
    if backend == "nccl" and cuda_count() == 0:
        raise DependencyError(
            "the nccl backend needs CUDA GPUs and none is visible here",
            "use --backend gloo or mpi on CPU, or run on a machine with NVIDIA GPUs",
        )
    if backend == HOROVOD:
        if not horovod_installed():
            raise DependencyError("the horovod backend needs Horovod with PyTorch (horovod.torch), not installed here",
                                  INSTALL_HOROVOD)  # fmt: skip
        if need_mpirun and horovodrun() is None:
            raise DependencyError("the horovod backend needs horovodrun (Horovod's launcher)", INSTALL_HOROVOD)
    if backend == "mpi":
        if importlib.util.find_spec("mpi4py") is None:
            raise DependencyError("the mpi backend needs mpi4py", INSTALL_MPI)
        if need_mpirun and shutil.which("mpirun") is None:
            raise DependencyError("the mpi backend needs mpirun (Open MPI)", INSTALL_MPI)


def free_port() -> int:
    """A rendezvous port for the bench's ranks, chosen as the engines choose MASTER_PORT."""
    return rendezvous_port("127.0.0.1")


def torch_rendezvous_env(info: RankInfo) -> None:
    """Make RANK / WORLD_SIZE / MASTER_* valid for torch.distributed's env:// init.

    Under mpirun they are derived from OMPI_*; if MASTER_ADDR/PORT are unset, rank 0 picks them
    and broadcasts them through mpi4py (required when mpi4py is missing)."""
    os.environ["RANK"] = str(info.rank)
    os.environ["WORLD_SIZE"] = str(info.world_size)
    os.environ["LOCAL_RANK"] = str(info.local_rank)
    if "MASTER_ADDR" in os.environ and "MASTER_PORT" in os.environ:
        return
    if info.world_size == 1:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(free_port()))
        return
    if info.launcher != "mpirun":
        raise UsageError(
            "MASTER_ADDR and MASTER_PORT must be set for a multi-rank gloo/nccl job",
            "export MASTER_ADDR=<rank 0 host> MASTER_PORT=<free port> on every rank",
        )
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise DependencyError(
            "under mpirun without mpi4py, MASTER_ADDR/MASTER_PORT must be set",
            f"pass -x MASTER_ADDR=... -x MASTER_PORT=... to mpirun, or {INSTALL_MPI}",
        ) from exc
    addr_port = None
    if info.rank == 0:
        local = os.environ.get("OMPI_COMM_WORLD_LOCAL_SIZE") == str(info.world_size)
        addr = "127.0.0.1" if local else socket.gethostbyname(socket.gethostname())
        addr_port = (addr, free_port())
    addr, port = MPI.COMM_WORLD.bcast(addr_port, root=0)
    os.environ["MASTER_ADDR"] = addr
    os.environ["MASTER_PORT"] = str(port)
