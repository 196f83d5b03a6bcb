"""Link kinds between two GPUs, as `nvidia-smi topo -m` names them, and their default bandwidths."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from ringleader.errors import TopologyError
from ringleader.reference import reference

# Best first. NV# ranks above all PCIe kinds; among NV#, more bonded links rank higher.
PCIE_KINDS: tuple[str, ...] = ("PIX", "PXB", "PHB", "NODE", "SYS")
LEGACY_NAMES = {"SOC": "SYS"}  # drivers before R384 printed SOC for SYS
_NV_RE = re.compile(r"^NV(\d+)$")


@dataclass(frozen=True)
class Link:
    """One GPU pair's connection: ``kind`` is NV, PIX, PXB, PHB, NODE, SYS or X (self)."""

    kind: str
    nvlinks: int = 0

    @staticmethod
    def parse(text: str) -> Link:
        token = LEGACY_NAMES.get(text.strip().upper(), text.strip().upper())
        if token == "X":
            return SELF
        match = _NV_RE.match(token)
        if match:
            count = int(match.group(1))
            if count < 1:
                raise TopologyError(f"link kind {text!r} has no NVLinks", "use NV1..NV18")
            return Link("NV", count)
        if token in PCIE_KINDS:
            return Link(token)
        raise TopologyError(
            f"unknown link kind {text!r}",
            "use one of X, NV<n>, PIX, PXB, PHB, NODE, SYS (as `nvidia-smi topo -m` prints)",
        )

    def __str__(self) -> str:
        return f"NV{self.nvlinks}" if self.kind == "NV" else self.kind

    @property
    def rank(self) -> tuple[int, int]:
        """Sort key, higher is better: (class, NVLink count)."""
        if self.kind == "NV":
            return (len(PCIE_KINDS) + 1, self.nvlinks)
        if self.kind == "X":
            return (len(PCIE_KINDS) + 2, 0)
        return (len(PCIE_KINDS) - PCIE_KINDS.index(self.kind), 0)

    @property
    def is_nvlink(self) -> bool:
        return self.kind == "NV"

    def default_bandwidth_gbs(self) -> float:
        """One-direction GB/s used when the node has no measured bandwidth matrix."""
        return default_bandwidth_gbs(self)


SELF = Link("X")


@functools.cache
def default_bandwidth_gbs(link: Link) -> float:
    links = reference()["links"]
    if link.kind == "X":
        return 0.0
    if link.kind == "NV":
        return float(links["nvlink_per_link_gbs"]) * link.nvlinks
    return float(links[link.kind])


def latency_us(link: Link) -> float:
    """Per-hop latency for the alpha term of the allreduce cost model."""
    links = reference()["links"]
    return float(links["nvlink_latency_us"] if link.is_nvlink else links["pcie_latency_us"])
