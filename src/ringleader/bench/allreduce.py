"""`bench allreduce`: nccl-tests' measurement and table over the communication layer.

Conventions follow NVIDIA/nccl-tests doc/PERFORMANCE.md: algbw = bytes / time (GB = 1e9 B);
busbw = algbw x 2(n-1)/n (allreduce), (n-1)/n (allgather, reducescatter), 1 (broadcast).
Each size runs ``warmup`` untimed and ``iters`` timed operations back to back; the time is the
mean per operation, combined over ranks as nccl-tests' ``-a``: 0 rank 0's, 1 the average (the
default), 2 the fastest rank's, 3 the slowest's. ``-t`` threads x ``-g`` GPUs per process become
that many ranks, each a process with one device (torch.distributed and MPI drive one device per
process), so nranks, devices and bandwidths match nccl-tests' for the same product. With
``check`` the inputs are small integers (exact in fp16 and bf16 for any sum over <= 64 ranks),
so every expected element is computed exactly and #wrong counts real mismatches, summed over
ranks.
"""

from __future__ import annotations

import functools
import os
import re
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from ringleader import settings
from ringleader.bench.comm import DTYPES, OPS, Comm, torch_dtype
from ringleader.bench.ranks import nodes
from ringleader.errors import UsageError

COLLECTIVES = ("allreduce", "allgather", "broadcast", "reducescatter")
AVERAGES = {0: "rank 0", 1: "average", 2: "min", 3: "max"}  # nccl-tests -a
HOST_BYTES = 64  # hostnames travel to rank 0 as this many bytes
CORRUPT_ENV = "RINGLEADER_BENCH_CORRUPT"  # "RANK[:INDEX]": testing hook, plants one wrong value
ENV_PREFIXES = ("NCCL_", "GLOO_", "OMPI_MCA_", "UCX_", "TORCH_", "OMP_NUM_THREADS",
                "CUDA_VISIBLE_DEVICES", "MASTER_ADDR", "MASTER_PORT")  # fmt: skip


@dataclass
class AllreduceConfig:
    minbytes: int = 8
    maxbytes: int = 128 * 1024 * 1024
    factor: int = 2
    iters: int = 20
    warmup: int = 5
    check: int = 1
    dtype: str = "float"
    op: str = "sum"
    collective: str = "allreduce"
    root: int = 0
    backend: str = "gloo"
    output: str = "table"
    average: int = 1  # nccl-tests -a: 0 rank 0, 1 average, 2 min, 3 max over ranks
    blocking: int = 0  # nccl-tests -z: wait for each collective before starting the next
    nthreads: int = 1  # nccl-tests -t (recorded: each thread's GPUs are separate ranks here)
    ngpus: int = 1  # nccl-tests -g
    progress: bool = False  # rank 0 reports each size's progress on stderr

    def validate(self) -> None:
        if self.minbytes < 1 or self.maxbytes < 1:
            raise UsageError("-b and -e must be positive sizes", "pass e.g. -b 8 -e 128M")
        if self.minbytes > self.maxbytes:
            raise UsageError(f"-b {self.minbytes} is larger than -e {self.maxbytes}",
                             "pass a minimum size (-b) no larger than the maximum (-e)")
        if self.factor < 2:
            raise UsageError(f"-f {self.factor} would never reach -e", "pass -f 2 or more")
        if self.iters < 1 or self.warmup < 0:
            raise UsageError("-n must be >= 1 and -w >= 0", "pass e.g. -n 20 -w 5")
        if self.dtype not in DTYPES:
            raise UsageError(f"unknown data type {self.dtype!r}", "use float, half or bfloat16")
        if self.op not in (*OPS, "all"):
            raise UsageError(f"unknown reduction {self.op!r}", f"use --op {', --op '.join((*OPS, 'all'))}")
        if self.average not in AVERAGES:
            raise UsageError(f"-a {self.average} is not 0, 1, 2 or 3",
                             "pass -a 0 (rank 0), 1 (avg), 2 (min) or 3 (max)")
        if self.blocking not in (0, 1) or self.nthreads < 1 or self.ngpus < 1:
            raise UsageError("-z must be 0 or 1, -t and -g at least 1", "pass e.g. -z 0 -t 1 -g 1")
        if self.collective not in COLLECTIVES:
            raise UsageError(f"unknown collective {self.collective!r}",
                             f"use one of: {', '.join(COLLECTIVES)}")


def check_root(cfg: AllreduceConfig, world_size: int) -> None:
    """A broadcast's root must be one of the ranks: checked once, before any rank starts (each
    rank would otherwise print the same error, after the table's header)."""
    if cfg.collective == "broadcast" and not 0 <= cfg.root < world_size:
        raise UsageError(f"root {cfg.root} is not a rank of {world_size}", f"pass a root in 0..{world_size - 1}")


def parse_size(text: str) -> int:
    """nccl-tests sizes: a number with an optional K, M or G suffix (powers of 1024)."""
    m = re.fullmatch(r"\s*(\d+)\s*([kKmMgG]?)[bB]?\s*", str(text))
    if not m:
        raise UsageError(f"bad size {text!r}", "use a byte count like 8, 64K, 128M or 1G")
    mult = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}[m.group(2).lower()]
    return int(m.group(1)) * mult


def bus_factor(collective: str, n: int) -> float:
    if collective == "allreduce":
        return 2.0 * (n - 1) / n
    if collective in ("allgather", "reducescatter"):
        return (n - 1) / n
    return 1.0


def sizes(cfg: AllreduceConfig, world: int, elem: int) -> list[tuple[int, int]]:
    """(bytes, elements) per step; sizes round down to whole elements (per rank for
    allgather / reducescatter, whose size is the full buffer) and zero sizes are skipped."""
    out: list[tuple[int, int]] = []
    size = cfg.minbytes
    while size <= cfg.maxbytes:
        unit = elem * (world if cfg.collective in ("allgather", "reducescatter") else 1)
        count = (size // unit) * unit // elem
        if count and (not out or out[-1][1] != count):
            out.append((count * elem, count))
        size *= cfg.factor
    return out


PERIOD = 65521  # the check's inputs repeat with this prime period (see _values)


def _pattern(torch: Any, rank: int, device: Any) -> Any:
    """One period of rank ``rank``'s inputs: small integers in [-2, 2] from a hash of (element,
    rank). Sums stay exact in fp16/bf16, the sum over ranks is not zero everywhere for any
    world size, and no two ranks send the same pattern (so a collective that mixes up ranks'
    blocks is caught). Masks keep every product inside int64."""
    idx = torch.arange(PERIOD, dtype=torch.int64, device=device)
    h = (idx * 40503 + (rank + 1) * 2654435761) & 0x7FFFFFFF
    h = ((h ^ (h >> 13)) * 40503) & 0x7FFFFFFF
    h = h ^ (h >> 16)
    return h % 5 - 2


def _tile(period: Any, start: int, count: int) -> Any:
    """Elements ``start`` to ``start + count`` of ``period`` repeated end to end."""
    offset = start % PERIOD
    return period.repeat(-(-(offset + count) // PERIOD))[offset:offset + count]


def _values(torch: Any, start: int, count: int, rank: int, dtype: Any, device: Any) -> Any:
    """Rank ``rank``'s inputs: its pattern repeated with a prime period, so filling a buffer
    and computing the expected result cost one pass over memory each, far less than the timed
    collectives (a hash per element made checking dominate large sizes). A prime period never
    divides the power-of-two block sizes collectives split buffers into, so a block written
    to the wrong place still differs."""
    return _tile(_pattern(torch, rank, device).to(dtype), start, count)


def _sentinel(world_size: int) -> int:
    """A value no collective result can take (sums lie in [-2n, 2n]): receive buffers start
    with it, so a collective that writes nothing is counted wrong."""
    return -(2 * world_size + 3)


class Case:
    """Buffers and the expected result of one collective at one size on this rank."""

    def __init__(self, cfg: AllreduceConfig, comm: Comm, count: int) -> None:
        import torch

        self.cfg, self.comm, self.count, self.torch = cfg, comm, count, torch
        self.dtype = torch_dtype(cfg.dtype)
        n, dev = comm.world_size, comm.device
        per = count // n
        self.in_count = per if cfg.collective == "allgather" else count
        self.out_count = per if cfg.collective == "reducescatter" else count
        self.send = torch.empty(self.in_count, dtype=self.dtype, device=dev)
        self.recv = torch.empty(self.out_count, dtype=self.dtype, device=dev)
        self.inplace = torch.empty(max(self.in_count, self.out_count), dtype=self.dtype, device=dev)

    def fill(self) -> None:
        torch, r, dev = self.torch, self.comm.rank, self.comm.device
        self.send.copy_(_values(torch, 0, self.in_count, r, self.dtype, dev))
        self.recv.fill_(_sentinel(self.comm.world_size))
        if self.cfg.collective == "allgather":
            self.inplace.fill_(_sentinel(self.comm.world_size))
            self._ip_in().copy_(self.send)
        else:
            self.inplace.copy_(_values(torch, 0, self.inplace.numel(), r, self.dtype, dev))

    def _ip_in(self) -> Any:
        per = self.count // self.comm.world_size
        if self.cfg.collective == "allgather":
            return self.inplace[self.comm.rank * per:(self.comm.rank + 1) * per]
        return self.inplace

    def _ip_out(self) -> Any:
        per = self.count // self.comm.world_size
        if self.cfg.collective == "reducescatter":
            return self.inplace[self.comm.rank * per:(self.comm.rank + 1) * per]
        return self.inplace

    def run(self, inplace: bool) -> Any:
        c, cfg = self.comm, self.cfg
        src, dst = (self._ip_in(), self._ip_out()) if inplace else (self.send, self.recv)
        if cfg.collective == "allreduce":
            return c.allreduce(src, dst, cfg.op)
        if cfg.collective == "broadcast":
            return c.broadcast(dst, cfg.root, None if inplace else src)
        if cfg.collective == "allgather":
            return c.allgather(dst, src)
        return c.reduce_scatter(dst, src, cfg.op)

    def operation(self, inplace: bool) -> Callable[[], Any]:
        """``run(inplace)`` prepared for a timed loop (see Comm.prepared_allreduce)."""
        if self.cfg.collective == "allreduce":
            src, dst = (self._ip_in(), self._ip_out()) if inplace else (self.send, self.recv)
            return self.comm.prepared_allreduce(src, dst, self.cfg.op)
        return functools.partial(self.run, inplace)

    def expected(self) -> Any:
        torch, n, dev, cfg = self.torch, self.comm.world_size, self.comm.device, self.cfg
        per = self.count // n
        if cfg.collective == "broadcast":
            return _values(torch, 0, self.count, cfg.root, self.dtype, dev)
        if cfg.collective == "allgather":
            return torch.cat([_values(torch, 0, per, r, self.dtype, dev) for r in range(n)])
        start = self.comm.rank * per if cfg.collective == "reducescatter" else 0
        total = sum(_pattern(torch, r, dev) for r in range(n)).to(self.dtype)  # one period, exact
        return _tile(total.div_(n) if cfg.op == "avg" else total, start, self.out_count)


def count_wrong(result: Any, expected: Any) -> int:
    """Elements of ``result`` that differ from ``expected`` (NaN counts as wrong)."""
    return int((result != expected).sum().item())


def _corrupt(result: Any, rank: int) -> None:
    spec = settings.text(CORRUPT_ENV)
    if not spec:
        return
    r, _, idx = spec.partition(":")
    if int(r) == rank and result.numel():
        result[int(idx or 0) % result.numel()] += 1


def _time_op(case: Case, inplace: bool, progress: Callable[[int], None] | None = None) -> float:
    """Mean seconds per operation; ``-z 1`` waits for each one (CPU backends always do)."""
    cfg, comm = case.cfg, case.comm
    operation = case.operation(inplace)
    for _ in range(cfg.warmup):
        operation()
    comm.barrier()
    sync = case.torch.cuda.synchronize if comm.device.type == "cuda" else None
    t0 = time.perf_counter()
    for i in range(cfg.iters):
        operation()
        if sync and cfg.blocking:
            sync()
        if progress:
            progress(i + 1)
    if sync:
        sync()
    return (time.perf_counter() - t0) / cfg.iters


def gather_floats(comm: Comm, values: list[float]) -> list[list[float]]:
    """Every rank's ``values`` (same length everywhere), on every rank, in rank order: each rank
    writes its slot of a zeroed float64 buffer and one sum-allreduce fills in the rest (exact:
    every element has one non-zero term)."""
    import torch

    n = len(values)
    buf = torch.zeros(n * comm.world_size, dtype=torch.float64, device=comm.device)
    buf[comm.rank * n:(comm.rank + 1) * n] = torch.tensor(values, dtype=torch.float64)
    flat = comm.allreduce(buf, buf, "sum").tolist()
    return [flat[r * n:(r + 1) * n] for r in range(comm.world_size)]


def combine_time(times: list[float], average: int) -> float:
    """nccl-tests' -a over the ranks' times: 0 rank 0, 1 mean, 2 min, 3 max."""
    if average == 0:
        return times[0]
    if average == 2:
        return min(times)
    if average == 3:
        return max(times)
    return sum(times) / len(times)


def rank_devices(comm: Comm) -> list[dict[str, Any]]:
    """nccl-tests' "Using devices" block for every rank: rank, pid, host and device, gathered
    to all ranks (collective: every rank must call it)."""
    host = socket.gethostname().encode()[:HOST_BYTES].ljust(HOST_BYTES, b"\0")
    dev = comm.device
    index = dev.index if dev.type == "cuda" and dev.index is not None else -1
    rows = gather_floats(comm, [float(os.getpid()), float(index), *map(float, host)])
    out = []
    for rank, row in enumerate(rows):
        name = bytes(int(b) for b in row[2:]).rstrip(b"\0").decode(errors="replace")
        idx = int(row[1])
        out.append({"rank": rank, "pid": int(row[0]), "host": name,
                    "device": f"cuda:{idx}" if idx >= 0 else "cpu"})  # fmt: skip
    return out


def _check(case: Case, inplace: bool) -> int:
    case.fill()
    result = case.run(inplace)
    if case.comm.device.type == "cuda":
        case.torch.cuda.synchronize()
    if not inplace:
        _corrupt(result, case.comm.rank)
    return int(case.comm.sum_scalar(count_wrong(result, case.expected())))


def measure(cfg: AllreduceConfig, comm: Comm, on_row: Callable[[dict[str, Any]], None] | None = None,
            on_progress: Callable[[str], None] | None = None) -> dict[str, Any]:  # fmt: skip
    """Run the sweep; ``on_row`` sees each size's row as soon as it is measured (rank 0
    prints), ``on_progress`` a line per timed operation ("16777216 B sum out-of-place 7/20")."""
    import torch

    cfg.validate()
    n = comm.world_size
    check_root(cfg, n)
    elem = torch.empty(0, dtype=torch_dtype(cfg.dtype)).element_size()
    reduces = cfg.collective in ("allreduce", "reducescatter")
    ops = list(OPS) if cfg.op == "all" and reduces else [cfg.op if cfg.op != "all" else "sum"]
    rows = []
    for size, count in sizes(cfg, n, elem):
        for op in ops:
            op_cfg = AllreduceConfig(**{**asdict(cfg), "op": op})
            case = Case(op_cfg, comm, count)
            row: dict[str, Any] = {
                "size_bytes": size, "count": count, "type": cfg.dtype,
                "redop": op if reduces else "none",
                "root": cfg.root if cfg.collective == "broadcast" else -1,
            }  # fmt: skip
            for key, inplace in (("oop", False), ("ip", True)):
                case.fill()
                label = f"{size} B {row['redop']} {'in-place' if inplace else 'out-of-place'}"
                tick = (lambda i, label=label: on_progress(f"{label} {i}/{cfg.iters}")) if on_progress else None
                times = [r[0] for r in gather_floats(comm, [_time_op(case, inplace, tick)])]
                t = combine_time(times, cfg.average)
                algbw = size / t / 1e9
                if on_progress and cfg.check:
                    on_progress(f"{label}: checking")
                wrong = _check(case, inplace) if cfg.check else None
                row[key] = {"time_us": t * 1e6, "algbw_gbs": algbw,
                            "busbw_gbs": algbw * bus_factor(cfg.collective, n), "wrong": wrong}
            rows.append(row)
            if on_row:
                on_row(row)
            del case
    wrong_total = sum((r[k]["wrong"] or 0) for r in rows for k in ("oop", "ip"))
    busbws = [r[k]["busbw_gbs"] for r in rows for k in ("oop", "ip")]
    return {
        "kind": "allreduce", "collective": cfg.collective, "backend": comm.backend,
        "world_size": n, "nodes": nodes(n), "dtype": cfg.dtype, "op": cfg.op,
        "time_over_ranks": AVERAGES[cfg.average],
        "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)},
        "config": asdict(cfg), "results": rows,
        "avg_busbw_gbs": sum(busbws) / len(busbws) if busbws else 0.0,
        "out_of_bounds": wrong_total,
    }  # fmt: skip
