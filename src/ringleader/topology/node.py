"""A node's GPUs and the link between every pair: the immutable input of the placement engine."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import cached_property

from ringleader.errors import TopologyError
from ringleader.reference import reference
from ringleader.topology.links import SELF, Link, default_bandwidth_gbs

#: The most GPUs one node may have. Placement inside a node is exact up to 16 GPUs and a bounded
#: greedy search beyond; 64 keeps every decision within the bounds benchmarks/placement.py
#: records. Larger NVLink fabrics (GB200 NVL72) are declared as several nodes sharing an
#: ``nvlink_domain`` (one per tray), which placement treats as one NVLink fabric.
MAX_GPUS_PER_NODE = 64


@dataclass(frozen=True)
class NodeTopology:
    """GPUs 0..n-1 of one machine.

    ``links[i][j]`` is the `nvidia-smi topo -m` kind between GPU i and j. ``measured_gbs`` is an
    optional measured bandwidth matrix (GB/s, as ACK and Koordinator record one); when given it
    overrides the link kinds' default bandwidths. ``numa[i]`` is GPU i's NUMA node (None if
    unknown). ``nics`` names the network adapters and ``nic_links[i][k]`` GPU i's link to NIC k.
    ``numa_affinity[i]`` lists every NUMA node of GPU i's affinity (Grace prints lists such as
    ``0,5-11``) and ``gpu_numa_id[i]`` the NUMA node of the GPU's own memory (Grace Hopper).
    """

    links: tuple[tuple[Link, ...], ...]
    gpu_model: str = ""
    numa: tuple[int | None, ...] = ()
    cpu_affinity: tuple[str, ...] = ()
    measured_gbs: tuple[tuple[float, ...], ...] | None = None
    nics: tuple[str, ...] = ()
    nic_links: tuple[tuple[Link, ...], ...] = ()
    numa_affinity: tuple[tuple[int, ...], ...] = ()
    gpu_numa_id: tuple[int | None, ...] = ()
    source: str = field(default="", compare=False)
    notes: tuple[str, ...] = field(default=(), compare=False)  # what reading the files chose for the user

    def __post_init__(self) -> None:
        n = len(self.links)
        if n > MAX_GPUS_PER_NODE:
            raise TopologyError(
                f"a node has {n} GPUs, more than the {MAX_GPUS_PER_NODE} a node may have",
                "declare a bigger NVLink fabric as several nodes sharing an nvlink_domain",
            )
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
        for what, values in (("NUMA list", self.numa), ("NUMA affinity list", self.numa_affinity),
                             ("GPU NUMA ID list", self.gpu_numa_id), ("NIC link list", self.nic_links)):  # fmt: skip
            if values and len(values) != n:
                raise TopologyError(f"{what} has {len(values)} entries for {n} GPUs", "give one per GPU")
        if any(len(row) != len(self.nics) for row in self.nic_links):
            raise TopologyError(f"NIC links need one entry per NIC ({len(self.nics)})", "give one per NIC")

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

    def numa_nodes(self, gpu: int) -> tuple[int, ...]:
        """GPU ``gpu``'s NUMA nodes (its affinity list, else its NUMA node; () if unknown)."""
        if self.numa_affinity and self.numa_affinity[gpu]:
            return self.numa_affinity[gpu]
        if self.numa and self.numa[gpu] is not None:
            return (self.numa[gpu],)  # type: ignore[return-value]
        return ()

    @cached_property
    def numa_groups(self) -> tuple[int, ...]:
        """Per GPU, a small id shared by GPUs of the same NUMA affinity (-1: unknown)."""
        ids: dict[tuple[int, ...], int] = {}
        return tuple(ids.setdefault(nodes, len(ids)) if nodes else -1
                     for nodes in (self.numa_nodes(i) for i in range(self.n_gpus)))  # fmt: skip

    @cached_property
    def fingerprint(self) -> str:
        """Stable identity of everything placement reads (bandwidths, link kinds, NUMA groups,
        NIC links): equal fingerprints place identically."""
        text = repr((
            self.bandwidth_gbs, tuple(tuple(str(x) for x in r) for r in self.links),
            self.numa_groups, tuple(tuple(str(x) for x in r) for r in self.nic_links),
        ))  # fmt: skip
        return hashlib.sha1(text.encode()).hexdigest()[:16]

    @cached_property
    def warnings(self) -> tuple[str, ...]:
        """What reading the files chose (``notes``), then measured bandwidths that contradict
        their link kind: an NVLink pair slower than the fastest PCIe link (P2P off, a failed
        link, or a mislabelled matrix), or a PCIe pair faster than one NVLink."""
        if self.measured_gbs is None:
            return self.notes
        bw = self.bandwidth_gbs
        pcie_best = default_bandwidth_gbs(Link("PIX"))
        pcie_max = float(reference()["links"]["pcie_max_gbs"])
        found = []
        for i in range(self.n_gpus):
            for j in range(i + 1, self.n_gpus):
                link, gbs = self.links[i][j], bw[i][j]
                if link.is_nvlink and gbs < pcie_best:
                    found.append(f"GPU{i}-GPU{j} is {link} but measured {gbs:g} GB/s, below PCIe ({pcie_best:g})")
                elif not link.is_nvlink and gbs > pcie_max:
                    found.append(f"GPU{i}-GPU{j} is {link} but measured {gbs:g} GB/s, above any PCIe ({pcie_max:g})")
        return (*self.notes, *found)

    @cached_property
    def all_mask(self) -> int:
        return (1 << self.n_gpus) - 1


EMPTY = NodeTopology(links=())
