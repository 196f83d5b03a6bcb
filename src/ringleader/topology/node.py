"""A node's GPUs and the link between every pair: the immutable input of the placement engine."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

from ringleader.errors import TopologyError
from ringleader.topology.links import SELF, Link


@dataclass(frozen=True)
class NodeTopology:
    """GPUs 0..n-1 of one machine.

    ``links[i][j]`` is the `nvidia-smi topo -m` kind between GPU i and j. ``measured_gbs`` is an
    optional measured bandwidth matrix (GB/s, as ACK and Koordinator record one); when given it
    overrides the link kinds' default bandwidths. ``numa[i]`` is GPU i's NUMA node (None if
    unknown). ``nics`` names the network adapters and ``nic_links[i][k]`` GPU i's link to NIC k.
    """

    links: tuple[tuple[Link, ...], ...]
    gpu_model: str = ""
    numa: tuple[int | None, ...] = ()
    cpu_affinity: tuple[str, ...] = ()
    measured_gbs: tuple[tuple[float, ...], ...] | None = None
    nics: tuple[str, ...] = ()
    nic_links: tuple[tuple[Link, ...], ...] = ()
    source: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        n = len(self.links)
        for i, row in enumerate(self.links):
            if len(row) != n:
                raise TopologyError(
                    f"link matrix is not square: row GPU{i} has {len(row)} entries, expected {n}",
                    "give one link kind per GPU in every row",
                )
            if row[i] != SELF:
                raise TopologyError(f"GPU{i} to itself must be X, got {row[i]}", "put X on the diagonal")
        for i in range(n):
            for j in range(i + 1, n):
                if self.links[i][j] != self.links[j][i]:
                    raise TopologyError(
                        f"link matrix is not symmetric: GPU{i}-GPU{j} is {self.links[i][j]} "
                        f"but GPU{j}-GPU{i} is {self.links[j][i]}",
                        "make both directions the same link kind",
                    )
                if self.links[i][j] == SELF:
                    raise TopologyError(f"GPU{i}-GPU{j} is X off the diagonal", "X only means self")
        if self.measured_gbs is not None:
            m = self.measured_gbs
            if len(m) != n or any(len(row) != n for row in m):
                raise TopologyError(
                    f"bandwidth matrix is not {n}x{n} like the link matrix",
                    "give one measured GB/s value per GPU pair",
                )
            if any(m[i][j] <= 0 for i in range(n) for j in range(n) if i != j):
                raise TopologyError("bandwidth matrix has a non-positive entry", "use GB/s > 0")
        if self.numa and len(self.numa) != n:
            raise TopologyError(f"NUMA list has {len(self.numa)} entries for {n} GPUs", "one per GPU")

    @property
    def n_gpus(self) -> int:
        return len(self.links)

    def link(self, i: int, j: int) -> Link:
        return self.links[i][j]

    @cached_property
    def bandwidth_gbs(self) -> tuple[tuple[float, ...], ...]:
        """Effective one-direction GB/s per pair. A measured matrix may be asymmetric (copy
        engines differ per direction); a ring uses both directions, so the slower one counts."""
        n = self.n_gpus
        if self.measured_gbs is not None:
            m = self.measured_gbs
            return tuple(
                tuple(0.0 if i == j else min(m[i][j], m[j][i]) for j in range(n)) for i in range(n)
            )
        return tuple(
            tuple(self.links[i][j].default_bandwidth_gbs() for j in range(n)) for i in range(n)
        )

    @cached_property
    def fingerprint(self) -> str:
        """Stable identity of the bandwidth structure: equal fingerprints place identically."""
        text = repr((self.bandwidth_gbs, tuple(tuple(str(x) for x in r) for r in self.links)))
        return hashlib.sha1(text.encode()).hexdigest()[:16]

    @cached_property
    def all_mask(self) -> int:
        return (1 << self.n_gpus) - 1


def matrix_from_rows(rows: Sequence[Sequence[str]]) -> tuple[tuple[Link, ...], ...]:
    """Link matrix from rows of `nvidia-smi topo -m` cells (["X", "NV1", ...], ...)."""
    return tuple(tuple(Link.parse(cell) for cell in row) for row in rows)


EMPTY = NodeTopology(links=())
