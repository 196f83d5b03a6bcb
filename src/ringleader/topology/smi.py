"""Read and write the text of `nvidia-smi topo -m` and of measured bandwidth matrices.

Accepts every shape real drivers print: tabs or spaces, NIC rows and columns (old names such as
mlx5_0 or NIC<n> with a NIC legend), CPU/NUMA affinity columns, the legend block, `SOC` for SYS.
"""

from __future__ import annotations

import re

from ringleader.errors import TopologyError
from ringleader.topology.links import Link
from ringleader.topology.node import NodeTopology

_GPU_RE = re.compile(r"^GPU(\d+)$")
_AFFINITY_WORDS = {"CPU", "NUMA", "GPU"}  # "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"
_NIC_LEGEND_RE = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")


def _fail(line_no: int, problem: str, fix: str) -> TopologyError:
    return TopologyError(f"topology text line {line_no}: {problem}", fix)


def parse_topo_text(text: str, *, gpu_model: str = "", source: str = "") -> NodeTopology:
    """Parse `nvidia-smi topo -m` output into a NodeTopology (GPU rows only feed the matrix)."""
    lines = text.splitlines()
    header_at = None
    for idx, line in enumerate(lines):
        if line.lstrip().startswith("#"):
            continue
        tokens = line.split()
        if "GPU0" in tokens and "X" not in tokens:  # the header row names devices; rows hold X
            header_at = idx
            break
    if header_at is None:
        raise TopologyError(
            "no `nvidia-smi topo -m` header (a line naming GPU0 GPU1 ...) found",
            "paste the whole output of `nvidia-smi topo -m`",
        )
    header = lines[header_at].split()
    devices: list[str] = []
    for token in header:
        if token in _AFFINITY_WORDS:
            break
        devices.append(token)
    gpu_columns = [d for d in devices if _GPU_RE.match(d)]
    n = len(gpu_columns)
    if gpu_columns != [f"GPU{i}" for i in range(n)]:
        raise _fail(header_at + 1, f"GPU columns are {gpu_columns}", "columns must be GPU0..GPU<n-1> in order")

    nic_names: dict[str, str] = {}
    rows: dict[str, list[str]] = {}
    affinity: dict[str, list[str]] = {}
    for idx in range(header_at + 1, len(lines)):
        line = lines[idx]
        stripped = line.strip()
        if not stripped:
            continue
        legend = _NIC_LEGEND_RE.match(line)
        if legend:
            nic_names[legend.group(1)] = legend.group(2)
            continue
        if stripped.startswith(("Legend", "NIC Legend", "X ", "X=")) or "=" in stripped:
            continue
        cells = stripped.split()
        if cells[0] not in devices:
            continue
        if cells[0] in rows:
            raise _fail(idx + 1, f"row {cells[0]} appears twice", "paste the output once")
        values = cells[1 : 1 + len(devices)]
        if len(values) < len(devices):
            raise _fail(
                idx + 1,
                f"row {cells[0]} has {len(values)} link cells, expected {len(devices)}",
                "each row needs one cell per column of the header",
            )
        rows[cells[0]] = values
        affinity[cells[0]] = cells[1 + len(devices) :]

    missing = [g for g in gpu_columns if g not in rows]
    if missing:
        raise TopologyError(f"topology text has no row for {', '.join(missing)}", "paste every GPU row")

    def parse_cell(row: str, col: int) -> Link:
        try:
            return Link.parse(rows[row][col])
        except TopologyError as exc:
            line_no = next(i for i, ln in enumerate(lines) if ln.split()[:1] == [row]) + 1
            raise _fail(line_no, f"{row} column {devices[col]}: {exc.message}", exc.fix) from None

    links = tuple(tuple(parse_cell(g, j) for j in range(n)) for g in gpu_columns)
    nic_columns = [(j, d) for j, d in enumerate(devices) if not _GPU_RE.match(d)]
    nic_links = tuple(tuple(parse_cell(g, j) for j, _ in nic_columns) for g in gpu_columns)
    numa: list[int | None] = []
    cpus: list[str] = []
    for g in gpu_columns:
        extra = affinity[g]
        cpus.append(extra[0] if extra else "")
        numa_cell = extra[1] if len(extra) > 1 else "N/A"
        numa.append(int(numa_cell) if numa_cell.isdigit() else None)
    return NodeTopology(
        links=links,
        gpu_model=gpu_model,
        numa=tuple(numa),
        cpu_affinity=tuple(cpus),
        nics=tuple(nic_names.get(d, d) for _, d in nic_columns),
        nic_links=nic_links,
        source=source,
    )


def parse_bandwidth_text(text: str) -> tuple[tuple[float, ...], ...]:
    """Parse a measured GB/s matrix: a header of device names, then one row per device."""
    rows: list[tuple[float, ...]] = []
    for idx, line in enumerate(text.splitlines(), start=1):
        cells = line.split()
        if not cells or line.lstrip().startswith("#") or cells[0].endswith(":"):
            continue
        numbers = cells[1:]
        try:
            values = tuple(float(c) for c in numbers)
        except ValueError:
            if rows:
                raise TopologyError(
                    f"bandwidth matrix line {idx}: non-numeric cell in {line.strip()!r}",
                    "give GB/s numbers only",
                ) from None
            continue  # header row of device names
        if not values:
            continue
        rows.append(values)
    n = len(rows)
    if n == 0 or any(len(r) != n for r in rows):
        raise TopologyError(
            f"bandwidth matrix is not square ({n} rows of lengths {[len(r) for r in rows]})",
            "give one row per GPU and one column per GPU",
        )
    return tuple(rows)


_LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks"""


def render_topo_text(topology: NodeTopology) -> str:
    """The matrix as `nvidia-smi topo -m` prints it (round-trips through parse_topo_text)."""
    n = topology.n_gpus
    nic_cols = [f"NIC{k}" for k in range(len(topology.nics))]
    header = [f"GPU{i}" for i in range(n)] + nic_cols
    out = ["\t" + "\t".join(header) + "\tCPU Affinity\tNUMA Affinity"]
    for i in range(n):
        cells = [str(topology.links[i][j]) for j in range(n)]
        cells += [str(x) for x in (topology.nic_links[i] if topology.nic_links else ())]
        cpu = topology.cpu_affinity[i] if topology.cpu_affinity and topology.cpu_affinity[i] else "N/A"
        numa = topology.numa[i] if topology.numa and topology.numa[i] is not None else "N/A"
        out.append(f"GPU{i}\t" + "\t".join(cells) + f"\t{cpu}\t{numa}")
    for k, _ in enumerate(topology.nics):
        cells = [str(topology.nic_links[i][k]) for i in range(n)]
        cells += ["X" if k2 == k else "-" for k2 in range(len(topology.nics))]
        out.append(f"NIC{k}\t" + "\t".join(cells))
    text = "\n".join(out) + "\n" + _LEGEND
    if topology.nics:
        text += "\n\nNIC Legend:\n\n" + "\n".join(
            f"  NIC{k}: {name}" for k, name in enumerate(topology.nics)
        )
    return text + "\n"
