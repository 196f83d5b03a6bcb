"""GPUs as Slurm GRES: one GRES type per GPU (so a job can name exact GPU ids), and gres.conf
lines with ``Links=`` (so Slurm's own selection sees NVLinks too).

Slurm lets a job ask for a GRES *type* on a named node but never for a device index; naming each
GPU ``g<index>`` turns "GPUs 1 and 2 of node-a" into ``--nodelist=node-a --gres=gpu:g1:1,gpu:g2:1``.
Untyped requests (``--gres=gpu:2``) still match any of them, so plain sbatch users see no change.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from ringleader.errors import TopologyError
from ringleader.topology.links import SELF, Link
from ringleader.topology.node import NodeTopology

TYPE_PREFIX = "g"
# Slurm's Links= has NVLink counts only; a pair without NVLink is taken as crossing the CPU
# sockets (the slowest PCIe kind), so ringleader never overrates a link it cannot see.
NO_NVLINK = Link("SYS")
_TYPE_RE = re.compile(rf"^{TYPE_PREFIX}(\d+)$")


def gpu_type(index: int) -> str:
    return f"{TYPE_PREFIX}{index}"


def type_index(gres_type: str | None) -> int | None:
    """The GPU index a per-GPU type names (``g3`` -> 3), None for any other type."""
    match = _TYPE_RE.match(gres_type or "")
    return int(match.group(1)) if match else None


def node_gres(n_gpus: int) -> str:
    """The node's ``Gres=`` in slurm.conf: ``gpu:g0:1,gpu:g1:1,...``."""
    return ",".join(f"gpu:{gpu_type(i)}:1" for i in range(n_gpus))


def request_gres(gpus: Iterable[int]) -> str:
    """The ``--gres`` of a job component that must get exactly these GPUs."""
    return ",".join(f"gpu:{gpu_type(g)}:1" for g in sorted(gpus))


def links_value(topo: NodeTopology, gpu: int) -> str:
    """GPU ``gpu``'s ``Links=``: -1 for itself, else the NVLink count to each GPU (0: none)."""
    return ",".join(
        "-1" if j == gpu else str(topo.link(gpu, j).nvlinks if topo.link(gpu, j).is_nvlink else 0)
        for j in range(topo.n_gpus)
    )


def gres_conf_lines(node: str, topo: NodeTopology, files: Sequence[str], typed: bool = True) -> list[str]:
    """gres.conf lines for ``node``: one per GPU, with its device file, type and ``Links=``."""
    if len(files) != topo.n_gpus:
        raise TopologyError(f"{len(files)} device files for {topo.n_gpus} GPUs", "give one file per GPU")
    lines = []
    for i, path in enumerate(files):
        kind = f" Type={gpu_type(i)}" if typed else ""
        lines.append(f"NodeName={node} Name=gpu{kind} File={path} Links={links_value(topo, i)}")
    return lines


def topology_from_links(rows: Sequence[Sequence[int]], gpu_model: str = "") -> NodeTopology:
    """A node's topology from its GPUs' ``Links=`` rows (index order)."""
    n = len(rows)
    matrix = []
    for i, row in enumerate(rows):
        if len(row) != n:
            raise TopologyError(f"GPU {i} has {len(row)} Links= values for {n} GPUs", "give one value per GPU")
        matrix.append(tuple(SELF if i == j else Link("NV", v) if v > 0 else NO_NVLINK for j, v in enumerate(row)))
    return NodeTopology(links=tuple(matrix), gpu_model=gpu_model, source="gres.conf Links=")
