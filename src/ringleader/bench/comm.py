"""One communication API over three real backends.

``gloo`` and ``nccl`` go through torch.distributed; ``mpi`` goes through mpi4py on Open MPI
(PyPI's torch has no MPI backend). Every backend offers the same calls on torch tensors:
allreduce (sum, avg), broadcast, allgather and reduce-scatter, plus Horovod-style fusion of
many small tensors into one buffer (``allreduce_fused``).

``avg`` is a sum followed by a division by the world size on every backend (what Horovod's
Average does), so results are identical across backends and exactly checkable.

MPI has no half-precision reductions: fp16 and bf16 travel as 16-bit words and are summed by a
user-defined MPI op that adds pairs in fp32 and rounds once to nearest-even. The sum of two
fp16 or bf16 values is exact in fp32 (or below half an ulp of the larger one), so that single
rounding gives the correctly rounded pairwise sum, the same as gloo's and NCCL's.
"""

from __future__ import annotations

import functools
import gc
import os
from collections.abc import Callable, Sequence
from typing import Any

from ringleader.bench.ranks import RankInfo, check_available, discover, nodes, torch_rendezvous_env
from ringleader.errors import UsageError

OPS = ("sum", "avg")
DTYPES = {"float": "float32", "half": "float16", "bfloat16": "bfloat16"}
HOROVOD_FUSION_BYTES = 64 * 1024 * 1024  # Horovod's default HOROVOD_FUSION_THRESHOLD


def torch_dtype(name: str) -> Any:
    import torch

    table = {"float": torch.float32, "float32": torch.float32, "fp32": torch.float32,
             "half": torch.float16, "float16": torch.float16, "fp16": torch.float16,
             "bfloat16": torch.bfloat16, "bf16": torch.bfloat16}  # fmt: skip
    if name not in table:
        raise UsageError(f"unknown data type {name!r}", "use float, half or bfloat16")
    return table[name]


class Comm:
    """Base: rank, world size, the device tensors live on, and the shared fusion logic."""

    backend = ""

    def __init__(self, info: RankInfo, device: Any) -> None:
        self.rank = info.rank
        self.world_size = info.world_size
        self.local_rank = info.local_rank
        self.device = device

    # The four collectives. ``out`` may be the input itself (in place) or a separate buffer.
    def allreduce(self, inp: Any, out: Any = None, op: str = "sum") -> Any:
        raise NotImplementedError

    def prepared_allreduce(self, inp: Any, out: Any = None, op: str = "sum") -> Callable[[], Any]:
        """``allreduce(inp, out, op)`` with whatever can be resolved once resolved now: a timed
        loop then pays for the collective alone, as nccl-tests' loop does."""
        return functools.partial(self.allreduce, inp, out, op)

    def broadcast(self, buf: Any, root: int = 0, src: Any = None) -> Any:
        raise NotImplementedError

    def allgather(self, out: Any, inp: Any) -> Any:
        raise NotImplementedError

    def reduce_scatter(self, out: Any, inp: Any, op: str = "sum") -> Any:
        raise NotImplementedError

    def barrier(self) -> None:
        raise NotImplementedError

    # Non-blocking in-place sum (gradient buckets started during backward): a handle to pass
    # to ``test`` (progress, no wait) and ``wait``.
    def iallreduce(self, buf: Any) -> Any:
        raise NotImplementedError

    def test(self, handles: Sequence[Any]) -> None:
        raise NotImplementedError

    def wait(self, handles: Sequence[Any]) -> None:
        raise NotImplementedError

    def sum_scalar(self, value: float) -> float:
        raise NotImplementedError

    def close(self) -> None:
        """Release the backend; safe to call twice."""

    def allreduce_fused(self, tensors: Sequence[Any], op: str = "avg",
                        threshold_bytes: int = HOROVOD_FUSION_BYTES) -> None:
        """Allreduce ``tensors`` in place, packed into buffers of up to ``threshold_bytes``
        (in order, one dtype per buffer), one collective per buffer: Horovod's tensor fusion."""
        import torch

        for bucket in fusion_buckets(tensors, threshold_bytes):
            # On the comm's device: CUDA gradients are staged through host memory for mpi.
            flat = torch.cat([t.detach().reshape(-1) for t in bucket]).to(self.device)
            self.allreduce(flat, flat, op)
            offset = 0
            for t in bucket:
                n = t.numel()
                t.detach().copy_(flat[offset:offset + n].view_as(t))
                offset += n


def fusion_buckets(tensors: Sequence[Any], threshold_bytes: int) -> list[list[Any]]:
    """Consecutive tensors of one dtype grouped up to ``threshold_bytes`` (a larger tensor
    goes alone)."""
    buckets: list[list[Any]] = []
    size = 0
    for t in tensors:
        nbytes = t.numel() * t.element_size()
        last = buckets[-1] if buckets else None
        if last and last[0].dtype == t.dtype and size + nbytes <= threshold_bytes:
            last.append(t)
            size += nbytes
        else:
            buckets.append([t])
            size = nbytes
    return buckets


class TorchComm(Comm):
    """gloo or nccl through torch.distributed."""

    def __init__(self, backend: str, info: RankInfo) -> None:
        import torch
        import torch.distributed as dist

        if backend == "nccl":
            torch.cuda.set_device(info.local_rank % torch.cuda.device_count())
            device = torch.device("cuda", torch.cuda.current_device())
        else:
            device = torch.device("cpu")
        super().__init__(info, device)
        self.backend = backend
        torch_rendezvous_env(info)
        self._dist = dist
        self._owned = not dist.is_initialized()
        if self._owned:
            kwargs: dict[str, Any] = {"device_id": device} if backend == "nccl" else {}
            dist.init_process_group(backend, rank=info.rank, world_size=info.world_size, **kwargs)

    def _div(self, t: Any, op: str) -> None:
        if op == "avg":
            t.div_(self.world_size)

    def allreduce(self, inp: Any, out: Any = None, op: str = "sum") -> Any:
        if out is None or out is inp:
            out = inp
        else:
            out.copy_(inp)
        self._dist.all_reduce(out)
        self._div(out, op)
        return out

    def broadcast(self, buf: Any, root: int = 0, src: Any = None) -> Any:
        if src is not None and self.rank == root:
            buf.copy_(src)
        self._dist.broadcast(buf, root)
        return buf

    def allgather(self, out: Any, inp: Any) -> Any:
        self._dist.all_gather_into_tensor(out, inp)
        return out

    def reduce_scatter(self, out: Any, inp: Any, op: str = "sum") -> Any:
        if out.data_ptr() >= inp.data_ptr() and out.data_ptr() < inp.data_ptr() + inp.nbytes:
            tmp = out.clone()  # in place: the output is this rank's slice of the input
            self._dist.reduce_scatter_tensor(tmp, inp)
            out.copy_(tmp)
        else:
            self._dist.reduce_scatter_tensor(out, inp)
        self._div(out, op)
        return out

    def barrier(self) -> None:
        if self.backend == "nccl":
            self._dist.barrier(device_ids=[self.device.index])
        else:
            self._dist.barrier()

    def iallreduce(self, buf: Any) -> Any:
        return self._dist.all_reduce(buf, async_op=True)

    def test(self, handles: Sequence[Any]) -> None:
        for work in handles:
            work.is_completed()

    def wait(self, handles: Sequence[Any]) -> None:
        for work in handles:
            work.wait()

    def sum_scalar(self, value: float) -> float:
        import torch

        t = torch.tensor([value], dtype=torch.float64, device=self.device)
        self._dist.all_reduce(t)
        return float(t.item())

    def close(self) -> None:
        if self._owned and self._dist.is_initialized():
            # Every rank done with the group, and DDP's reducer (which holds it and its worker
            # threads) gone, before it is destroyed: otherwise gloo can abort at exit
            # ("terminate called without an active exception").
            gc.collect()
            self.barrier()
            self._dist.destroy_process_group()
            self._owned = False


def _sum_f16(inbuf: Any, inoutbuf: Any, datatype: Any) -> None:
    import numpy as np

    a = np.frombuffer(inbuf, dtype=np.float16)
    b = np.frombuffer(inoutbuf, dtype=np.float16)
    np.add(b, a, out=b)  # numpy adds fp16 in fp32 and rounds once


def _sum_bf16(inbuf: Any, inoutbuf: Any, datatype: Any) -> None:
    import numpy as np

    a = np.frombuffer(inbuf, dtype=np.uint16).astype(np.uint32) << 16
    b_words = np.frombuffer(inoutbuf, dtype=np.uint16)
    b = b_words.astype(np.uint32) << 16
    s = (a.view(np.float32) + b.view(np.float32)).view(np.uint32)
    rounded = (s + 0x7FFF + ((s >> 16) & 1)) >> 16  # round to nearest even
    nan = (s & 0x7FFFFFFF) > 0x7F800000
    b_words[:] = np.where(nan, 0x7FC0, rounded).astype(np.uint16)


class MpiComm(Comm):
    """Open MPI through mpi4py, on host memory (CUDA tensors are staged through the host)."""

    backend = "mpi"

    def __init__(self, info: RankInfo) -> None:
        import torch
        from mpi4py import MPI

        super().__init__(info, torch.device("cpu"))
        self._mpi = MPI
        self._comm = MPI.COMM_WORLD
        self.rank = self._comm.Get_rank()
        self.world_size = self._comm.Get_size()
        self._ops = {torch.float16: MPI.Op.Create(_sum_f16, commute=True),
                     torch.bfloat16: MPI.Op.Create(_sum_bf16, commute=True)}  # fmt: skip
        self._bufs: dict[tuple[int, int, Any], list[Any]] = {}

    def _buf(self, t: Any) -> list[Any]:
        """[numpy view, MPI datatype] of a contiguous CPU tensor, cached for the last few
        buffers (a timed loop calls this twice per operation; the view keeps its tensor alive,
        so a cached address cannot be reused by another tensor while cached)."""
        key = (t.data_ptr(), t.numel(), t.dtype)
        spec = self._bufs.get(key)
        if spec is None:
            import torch

            if t.dtype in (torch.float16, torch.bfloat16):
                spec = [t.view(torch.int16).numpy(), self._mpi.SHORT]
            else:
                arr = t.numpy()
                spec = [arr, self._mpi._typedict[arr.dtype.char]]
            if len(self._bufs) >= 4:
                self._bufs.pop(next(iter(self._bufs)))
            self._bufs[key] = spec
        return spec

    def _op(self, t: Any) -> Any:
        return self._ops.get(t.dtype, self._mpi.SUM)

    def _div(self, t: Any, op: str) -> None:
        if op == "avg":
            t.div_(self.world_size)

    def allreduce(self, inp: Any, out: Any = None, op: str = "sum") -> Any:
        self.prepared_allreduce(inp, out, op)()
        return inp if out is None else out

    def prepared_allreduce(self, inp: Any, out: Any = None, op: str = "sum") -> Callable[[], Any]:
        # The buffers and the MPI op looked up once (a few microseconds of Python per call
        # otherwise: measurable on small messages).
        if out is None or out is inp:
            call = functools.partial(self._comm.Allreduce, self._mpi.IN_PLACE, self._buf(inp), op=self._op(inp))
            out = inp
        else:
            call = functools.partial(self._comm.Allreduce, self._buf(inp), self._buf(out), op=self._op(inp))
        if op != "avg":
            return call
        done = out

        def average() -> Any:
            call()
            return done.div_(self.world_size)

        return average

    def broadcast(self, buf: Any, root: int = 0, src: Any = None) -> Any:
        if src is not None and self.rank == root:
            buf.copy_(src)
        self._comm.Bcast(self._buf(buf), root=root)
        return buf

    def allgather(self, out: Any, inp: Any) -> Any:
        n = inp.numel()
        if inp.data_ptr() == out.data_ptr() + self.rank * n * out.element_size():
            self._comm.Allgather(self._mpi.IN_PLACE, self._buf(out))
        else:
            self._comm.Allgather(self._buf(inp), self._buf(out))
        return out

    def reduce_scatter(self, out: Any, inp: Any, op: str = "sum") -> Any:
        n = out.numel()
        if out.data_ptr() == inp.data_ptr() + self.rank * n * inp.element_size():
            # MPI's in-place form leaves the result at the start of the buffer.
            self._comm.Reduce_scatter_block(self._mpi.IN_PLACE, self._buf(inp), op=self._op(inp))
            if self.rank:
                out.copy_(inp[:n].clone())
        else:
            self._comm.Reduce_scatter_block(self._buf(inp), self._buf(out), op=self._op(inp))
        self._div(out, op)
        return out

    def barrier(self) -> None:
        self._comm.Barrier()

    def iallreduce(self, buf: Any) -> Any:
        if buf.dtype in self._ops:  # Python-level reduction ops: run them now, not in progress calls
            self._comm.Allreduce(self._mpi.IN_PLACE, self._buf(buf), op=self._op(buf))
            return self._mpi.REQUEST_NULL
        # The request holds the numpy view, so the buffer outlives the operation.
        return self._comm.Iallreduce(self._mpi.IN_PLACE, self._buf(buf), op=self._mpi.SUM)

    def test(self, handles: Sequence[Any]) -> None:
        self._mpi.Request.Testall(list(handles))

    def wait(self, handles: Sequence[Any]) -> None:
        self._mpi.Request.Waitall(list(handles))

    def sum_scalar(self, value: float) -> float:
        return float(self._comm.allreduce(float(value)))

    def close(self) -> None:
        for op in self._ops.values():
            if op != self._mpi.OP_NULL:
                op.Free()
        self._ops = {}
        self._bufs.clear()


class HorovodComm(Comm):
    """Horovod itself (horovod.torch), as its lab uses it: ``hvd.init()`` under horovodrun, and
    rank, size and local rank as Horovod counts them. Training exchanges gradients through
    ``hvd.DistributedOptimizer`` (train.Step); here are the calls the training loop makes besides."""

    backend = "horovod"

    def __init__(self) -> None:
        import horovod.torch as hvd
        import torch

        hvd.init()
        self.hvd = hvd
        device = torch.device("cpu")
        if torch.cuda.is_available():
            torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
            device = torch.device("cuda", torch.cuda.current_device())
        super().__init__(RankInfo(hvd.rank(), hvd.size(), hvd.local_rank(), "horovodrun"), device)
        # which of Horovod's controllers horovodrun started: MPI where Horovod was built with it
        self.controller = "mpi" if hvd.mpi_enabled() else "gloo"

    def allreduce(self, inp: Any, out: Any = None, op: str = "sum") -> Any:
        if out is not None and out is not inp:
            out.copy_(inp)
            inp = out
        return self.hvd.allreduce_(inp, op=self.hvd.Average if op == "avg" else self.hvd.Sum)

    def barrier(self) -> None:
        self.hvd.barrier()

    def close(self) -> None:
        self.hvd.shutdown()


def init(backend: str, info: RankInfo | None = None) -> Comm:
    """A communicator for this process (rank and world from the launcher's environment)."""
    info = info or discover()
    check_available(backend, need_mpirun=False)
    share_cores(info)
    if backend == "horovod":
        return HorovodComm()
    if backend == "mpi":
        os.environ.setdefault("OMPI_MCA_mpi_warn_on_fork", "0")
        return MpiComm(info)
    return TorchComm(backend, info)


def share_cores(info: RankInfo) -> None:
    """Without OMP_NUM_THREADS, split this machine's cores among the job's ranks on it, as `-np`
    does: each rank's torch would otherwise start a thread per core, and ranks launched by hand
    (RANK=... WORLD_SIZE=...) spun on each other's cores (a 2-rank sweep to 1M: 14-66 s against
    12-23 s, on a 2-core machine under changing load)."""
    if not info.in_job or os.environ.get("OMP_NUM_THREADS"):
        return
    import torch

    local = max(1, info.world_size // nodes(info.world_size))
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // local))
