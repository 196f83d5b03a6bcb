"""Gradient averaging for data-parallel training without DDP: buckets in preallocated buffers.

Every gradient lives in one flat buffer per dtype allocated once (each parameter's ``.grad`` is
a view into it, as DDP's ``gradient_as_bucket_view``), laid out in the reverse order of the
parameters, the order backward produces them. A bucket is a contiguous slice of that buffer, so
averaging needs no packing copy (Horovod's fusion buffer without the copies in and out), and a
step only zeroes the buffers instead of reallocating the gradients.

The bucket size is measured, not guessed: DDP's ``bucket_cap_mb`` (25) and Horovod's fusion
threshold (64 MiB) suit GPUs on a network, while on shared memory a collective is fastest when
its buffers stay in cache. ``sweep`` times the allreduce of the real gradient layout with each
candidate size and keeps the fastest on every rank.

With ``overlap``, a bucket's non-blocking allreduce starts as soon as backward has accumulated
its last gradient (a post-accumulate hook), and later hooks poll the outstanding ones so a
backend without its own progress thread (Open MPI's shared-memory transport) advances them
between layers; ``finish`` waits for the rest.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ringleader.bench.comm import Comm

MIB = 1024 * 1024
# Bucket sizes the sweep tries: from cache-sized to Horovod's default fusion threshold.
CANDIDATE_CAPS = tuple(m * MIB for m in (1, 2, 4, 8, 16, 32, 64))


@dataclass
class _Bucket:
    flat: int  # index of the flat buffer (one per dtype and device)
    start: int  # element offsets into it
    end: int
    params: list[Any] = field(default_factory=list)


class GradientBuckets:
    """The gradients of ``params``, averaged over ``comm``'s ranks after (or during) backward."""

    def __init__(self, comm: Comm, params: Sequence[Any], overlap: bool = False) -> None:
        import torch

        self.comm, self.torch, self.overlap = comm, torch, overlap
        order = list(reversed(params))  # backward produces the last layer's gradients first
        self.flats: list[Any] = []
        self.host: list[Any] = []  # host copies of CUDA buffers (mpi works on host memory)
        self._slots: list[tuple[Any, int, int]] = []  # (param, flat index, offset) in order
        keys: dict[tuple[Any, Any], int] = {}
        sizes: list[int] = []
        for p in order:
            key = (p.dtype, p.device)
            if key not in keys:
                keys[key] = len(sizes)
                sizes.append(0)
            i = keys[key]
            self._slots.append((p, i, sizes[i]))
            sizes[i] += p.numel()
        for (dtype, device), i in keys.items():
            self.flats.append(torch.zeros(sizes[i], dtype=dtype, device=device))
            needs_host = device.type != comm.device.type
            self.host.append(torch.zeros(sizes[i], dtype=dtype, pin_memory=True) if needs_host else None)
        for p, i, offset in self._slots:
            p.grad = self.flats[i][offset : offset + p.numel()].view_as(p)
        self.nbytes = sum(f.numel() * f.element_size() for f in self.flats)
        self.cap_bytes = 0
        self.buckets: list[_Bucket] = []
        self.sweep_s: dict[int, float] = {}
        self._pending: list[tuple[_Bucket, Any]] = []
        self._waiting: dict[int, int] = {}  # id(bucket) -> gradients still to come this step
        self._bucket_of: dict[int, _Bucket] = {}
        self.set_cap(CANDIDATE_CAPS[-1])
        if overlap:
            for p, _, _ in self._slots:
                p.register_post_accumulate_grad_hook(self._ready)

    def set_cap(self, cap_bytes: int) -> None:
        """Regroup the gradients into buckets of up to ``cap_bytes`` (a bigger tensor goes
        alone); the buffers stay where they are."""
        self.cap_bytes = cap_bytes
        self.buckets = []
        for p, i, offset in self._slots:
            nbytes = p.numel() * p.element_size()
            last = self.buckets[-1] if self.buckets else None
            if last and last.flat == i and (last.end - last.start) * p.element_size() + nbytes <= cap_bytes:
                last.end += p.numel()
                last.params.append(p)
            else:
                self.buckets.append(_Bucket(i, offset, offset + p.numel(), [p]))
        self._bucket_of = {id(p): b for b in self.buckets for p in b.params}

    def sweep(self, caps: Sequence[int] = CANDIDATE_CAPS, reps: int = 3) -> int:
        """Time one averaging of the current buffers with each bucket size (interleaved,
        ``reps`` rounds, fastest round per size, summed over ranks so all ranks agree) and keep
        the fastest. The buffers should hold zeros (as before a step): averaging zeros leaves
        them unchanged."""
        total = self.nbytes
        # Sizes at or above the whole buffer give the same buckets: try only the first of them.
        tried = [c for c in caps if c < total] + [c for c in caps if c >= total][:1]
        best: dict[int, float] = {}
        self.comm.barrier()
        for _ in range(reps):
            for cap in tried:
                self.set_cap(cap)
                self.begin()
                t0 = time.perf_counter()
                self.finish()
                elapsed = time.perf_counter() - t0
                best[cap] = min(best.get(cap, elapsed), elapsed)
        self.sweep_s = {cap: self.comm.sum_scalar(s) / self.comm.world_size for cap, s in best.items()}
        chosen = min(self.sweep_s, key=lambda c: (self.sweep_s[c], -c))
        self.set_cap(chosen)
        return chosen

    def begin(self) -> None:
        """Zero the gradients for a new step (in place: the views stay valid)."""
        for f in self.flats:
            f.zero_()
        self._pending = []
        self._waiting = {id(b): len(b.params) for b in self.buckets}

    def _ready(self, param: Any) -> None:
        bucket = self._bucket_of[id(param)]
        left = self._waiting[id(bucket)] - 1
        self._waiting[id(bucket)] = left
        if self._pending:
            self.comm.test([h for _, h in self._pending])  # let the started ones progress
        if left == 0 and self.host[bucket.flat] is None:  # staged buckets go in finish()
            self._pending.append((bucket, self.comm.iallreduce(self._slice(bucket))))
            self._waiting[id(bucket)] = -1

    def _slice(self, bucket: _Bucket) -> Any:
        return self.flats[bucket.flat][bucket.start : bucket.end]

    def finish(self) -> None:
        """Average every bucket not yet started, then wait for the started ones."""
        started = {id(b) for b, _ in self._pending}
        for bucket in self.buckets:
            if id(bucket) in started:
                continue
            flat = self._slice(bucket)
            host = self.host[bucket.flat]
            if host is None:
                self.comm.allreduce(flat, flat, "avg")
            else:
                staged = host[bucket.start : bucket.end]
                staged.copy_(flat)
                self.comm.allreduce(staged, staged, "avg")
                flat.copy_(staged, non_blocking=True)
        if self._pending:
            self.comm.wait([h for _, h in self._pending])
            for bucket, _ in self._pending:
                self._slice(bucket).div_(self.comm.world_size)
        self._pending = []
