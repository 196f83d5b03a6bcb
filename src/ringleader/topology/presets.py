"""Real machines, written as facts (which GPU pairs share how many NVLinks, how PCIe is laid out).

Each preset names the machine and where its layout is documented.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from ringleader.errors import TopologyError
from ringleader.topology.links import SELF, Link
from ringleader.topology.node import NodeTopology


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    source: str
    build: Callable[[], NodeTopology]


def _from_pairs(
    n: int,
    numa: list[int],
    nvlinks: dict[tuple[int, int], int],
    pcie: Callable[[int, int], str],
    gpu_model: str,
    source: str,
) -> NodeTopology:
    """Matrix from NVLink pair counts; pairs without NVLink get ``pcie(i, j)``."""
    rows = []
    for i in range(n):
        row = []
        for j in range(n):
            count = nvlinks.get((min(i, j), max(i, j)), 0)
            row.append(SELF if i == j else Link("NV", count) if count else Link(pcie(i, j)))
        rows.append(tuple(row))
    return NodeTopology(links=tuple(rows), gpu_model=gpu_model, numa=tuple(numa), source=source)


# DGX-1V / Alibaba gn6v hybrid cube mesh: two fully NVLinked quads (0-3, 4-7) joined GPU i to i+4;
# inside a quad two pairs per GPU have 2 bonded links. Pairs without NVLink cross the sockets.
_V100_HCM_NVLINKS = {
    (0, 1): 1, (0, 2): 1, (0, 3): 2, (0, 4): 2,
    (1, 2): 2, (1, 3): 1, (1, 5): 2,
    (2, 3): 2, (2, 6): 1,
    (3, 7): 1,
    (4, 5): 1, (4, 6): 1, (4, 7): 2,
    (5, 6): 2, (5, 7): 1,
    (6, 7): 2,
}  # fmt: skip


def _socket(i: int, n: int) -> int:
    return 0 if i < n // 2 else 1


def _dgx1v() -> NodeTopology:
    return _from_pairs(
        8, [_socket(i, 8) for i in range(8)], _V100_HCM_NVLINKS, lambda i, j: "SYS", "V100",
        "preset dgx1v",
    )


def _all_pairs(n: int, count: int, model: str, name: str) -> NodeTopology:
    pairs = {(i, j): count for i in range(n) for j in range(i + 1, n)}
    return _from_pairs(n, [_socket(i, n) for i in range(n)], pairs, lambda i, j: "SYS", model, name)


def _pcie_dual_socket() -> NodeTopology:
    # Two PCIe switches per socket, two GPUs per switch: PIX under one switch, NODE across the
    # switches of one socket, SYS across sockets (the layout of common 8-GPU 4U PCIe servers).
    def kind(i: int, j: int) -> str:
        if _socket(i, 8) != _socket(j, 8):
            return "SYS"
        return "PIX" if i // 2 == j // 2 else "NODE"

    return _from_pairs(8, [_socket(i, 8) for i in range(8)], {}, kind, "", "preset pcie-8gpu-2socket")


def _pcie_workstation() -> NodeTopology:
    # One CPU, one PCIe switch per GPU pair: PIX inside a pair, PHB between pairs.
    return _from_pairs(
        4, [0] * 4, {}, lambda i, j: "PIX" if i // 2 == j // 2 else "PHB", "", "preset pcie-4gpu-workstation"
    )


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset(
            "dgx1v",
            "8x V100 SXM2, NVLink hybrid cube mesh (NV1/NV2), 2 sockets; DGX-1V, Alibaba gn6v",
            "NVIDIA DGX-1 system architecture whitepaper; nvidia-smi topo -m of DGX-1V/gn6v",
            _dgx1v,
        ),
        Preset(
            "dgx2",
            "16x V100 SXM3 on NVSwitch: NV6 between every pair",
            "NVIDIA DGX-2 datasheet (12 NVSwitches, 6 NVLinks per GPU)",
            lambda: _all_pairs(16, 6, "V100", "preset dgx2"),
        ),
        Preset(
            "dgx-a100",
            "8x A100 SXM4 on NVSwitch: NV12 between every pair, 2 sockets",
            "NVIDIA DGX A100 user guide; nvidia-smi topo -m on DGX A100",
            lambda: _all_pairs(8, 12, "A100", "preset dgx-a100"),
        ),
        Preset(
            "dgx-h100",
            "8x H100 SXM5 on NVSwitch: NV18 between every pair, 2 sockets",
            "NVIDIA DGX H100 user guide; nvidia-smi topo -m on DGX H100",
            lambda: _all_pairs(8, 18, "H100", "preset dgx-h100"),
        ),
        Preset(
            "pcie-8gpu-2socket",
            "8 PCIe GPUs, 2 sockets, 2 GPUs per PCIe switch (PIX), NODE within a socket, SYS across",
            "typical 4U 8-GPU PCIe server block diagram",
            _pcie_dual_socket,
        ),
        Preset(
            "pcie-4gpu-workstation",
            "4 PCIe GPUs, 1 socket, 2 GPUs per PCIe switch (PIX), PHB between switches",
            "typical 4-GPU workstation block diagram",
            _pcie_workstation,
        ),
    )
}
ALIASES = {"gn6v": "dgx1v", "v100-hcm": "dgx1v", "dgx-1v": "dgx1v", "dgx-2": "dgx2"}


@functools.cache
def preset(name: str) -> NodeTopology:
    key = ALIASES.get(name, name)
    if key not in PRESETS:
        raise TopologyError(
            f"unknown preset {name!r}",
            f"use one of {', '.join(sorted(PRESETS))} (aliases: {', '.join(sorted(ALIASES))})",
        )
    return PRESETS[key].build()
