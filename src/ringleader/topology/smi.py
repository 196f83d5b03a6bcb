"""Read and write the text of `nvidia-smi topo -m`.

Accepts every shape real drivers print: tabs or spaces, ANSI colour/underline codes (as printed
to a terminal), NIC rows and columns (old names such as mlx5_0 or NIC<n> with a NIC legend),
CPU affinity, NUMA affinity as a number or a list (Grace: ``0,5-11``), the ``GPU NUMA ID``
column, the legend block, `SOC` for SYS. Every error names the line it is about. Measured
bandwidth matrices (p2pBandwidthLatencyTest and friends) are read by ``bandwidth.py``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ringleader.errors import TopologyError, UsageError
from ringleader.inputs import decode_text
from ringleader.topology.links import Link
from ringleader.topology.node import MAX_GPUS_PER_NODE, NodeTopology

_GPU_RE = re.compile(r"^GPU(\d+)$")
_NIC_LEGEND_RE = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")
# CSI sequences (colours, underline) and the two-byte escapes terminals also understand.
_ANSI_RE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_CPU_LIST_RE = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")
# Affinity columns after the device columns, as their header words read.
_AFFINITY_COLUMNS = (("CPU", "Affinity"), ("NUMA", "Affinity"), ("GPU", "NUMA", "ID"))
_MISSING = {"N/A"}  # what nvidia-smi prints for an unknown affinity


def strip_ansi(text: str) -> str:
    return _ANSI_RE.sub("", text)


def read_text_file(path: str | Path, what: str = "topology file") -> str:
    """A text file's content; a binary or non-UTF-8 file fails in one line that names it."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {what} {str(p)!r}: {exc.strerror}", "check the path") from None
    return decode_text(data, f"{what} {str(p)!r}")


def _fail(line_no: int, problem: str, fix: str) -> TopologyError:
    return TopologyError(f"topology text line {line_no}: {problem}", fix)


@dataclass(frozen=True)
class _Header:
    line_no: int
    devices: tuple[str, ...]
    affinity: tuple[str, ...]  # "CPU Affinity", "NUMA Affinity", "GPU NUMA ID" present, in order


def _header(lines: list[str]) -> _Header:
    for idx, line in enumerate(lines):
        tokens = line.split()
        if line.lstrip().startswith("#") or "GPU0" not in tokens or "X" in tokens:
            continue  # the header row names devices; every matrix row holds an X
        devices: list[str] = []
        rest = tokens
        while rest and not any(tuple(rest[: len(c)]) == c for c in _AFFINITY_COLUMNS):
            devices.append(rest[0])
            rest = rest[1:]
        affinity: list[str] = []
        while rest:
            column = next((c for c in _AFFINITY_COLUMNS if tuple(rest[: len(c)]) == c), None)
            if column is None:
                raise _fail(idx + 1, f"unknown header column starting at {rest[0]!r}",
                            "paste the header line as `nvidia-smi topo -m` prints it")  # fmt: skip
            affinity.append(" ".join(column))
            rest = rest[len(column) :]
        if len(set(devices)) != len(devices):
            raise _fail(idx + 1, "a device column appears twice", "paste the header line once, unchanged")
        return _Header(idx + 1, tuple(devices), tuple(affinity))
    raise TopologyError(
        "no `nvidia-smi topo -m` header (a line naming GPU0 GPU1 ...) found",
        "paste the whole output of `nvidia-smi topo -m`",
    )


def _int_list(cell: str) -> tuple[int, ...] | None:
    """``0,5-11`` -> (0, 5, 6, ..., 11); None if the cell is not such a list."""
    if not _CPU_LIST_RE.match(cell):
        return None
    out: list[int] = []
    for part in cell.split(","):
        lo, _, hi = part.partition("-")
        first, last = int(lo), int(hi or lo)
        if last < first or last - first > 4096:
            return None
        out.extend(range(first, last + 1))
    return tuple(out)


@dataclass(frozen=True)
class _Affinity:
    cpus: str
    numa: tuple[int, ...]
    gpu_numa_id: int | None


def _affinity(cells: list[str], columns: tuple[str, ...], line_no: int, row: str) -> _Affinity:
    if len(cells) != len(columns):
        raise _fail(
            line_no,
            f"row {row} has {len(cells)} affinity cell(s) for {len(columns)} column(s) "
            f"({', '.join(columns) or 'none'}): the row is cut or has extra cells",
            "paste the row whole, as `nvidia-smi topo -m` prints it",
        )
    values = dict(zip(columns, cells, strict=True))
    cpus = values.get("CPU Affinity", "N/A")
    if cpus not in _MISSING and _int_list(cpus) is None:
        raise _fail(line_no, f"row {row}: CPU affinity {cpus!r} is not a CPU list such as 0-51,104-155",
                    "paste the row whole")  # fmt: skip
    numa_cell = values.get("NUMA Affinity", "N/A")
    numa = () if numa_cell in _MISSING else _int_list(numa_cell)
    if numa is None:
        raise _fail(line_no, f"row {row}: NUMA affinity {numa_cell!r} is not a NUMA node list such as 0 or 0,5-11",
                    "paste the row whole")  # fmt: skip
    gpu_numa = values.get("GPU NUMA ID", "N/A")
    if gpu_numa not in _MISSING and not gpu_numa.isdigit():
        raise _fail(line_no, f"row {row}: GPU NUMA ID {gpu_numa!r} is not a number or N/A", "paste the row whole")
    return _Affinity("" if cpus in _MISSING else cpus, numa, None if gpu_numa in _MISSING else int(gpu_numa))


def parse_topo_text(text: str, *, gpu_model: str = "", source: str = "") -> NodeTopology:
    """Parse `nvidia-smi topo -m` output into a NodeTopology (GPU rows feed the matrix, NIC
    columns the NIC links, affinity columns the NUMA placement)."""
    lines = strip_ansi(text).splitlines()
    head = _header(lines)
    devices = head.devices
    gpu_columns = [d for d in devices if _GPU_RE.match(d)]
    n = len(gpu_columns)
    if n > MAX_GPUS_PER_NODE:  # refuse before reading a huge matrix
        raise _fail(head.line_no, f"a node has {n} GPUs, more than the {MAX_GPUS_PER_NODE} a node may have",
                    "declare a bigger NVLink fabric as several nodes sharing an nvlink_domain")  # fmt: skip
    if gpu_columns != [f"GPU{i}" for i in range(n)]:
        raise _fail(head.line_no, f"GPU columns are {gpu_columns}", "columns must be GPU0..GPU<n-1> in order")

    nic_names: dict[str, str] = {}
    rows: dict[str, tuple[int, list[str]]] = {}
    affinity: dict[str, _Affinity] = {}
    for idx in range(head.line_no, len(lines)):
        line, line_no = lines[idx], idx + 1
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        legend = _NIC_LEGEND_RE.match(line)
        if legend:
            nic_names[legend.group(1)] = legend.group(2)
            continue
        cells = stripped.split()
        if cells[0] not in devices:
            continue  # legend text, titles, prompts
        if cells[0] in rows:
            raise _fail(line_no, f"row {cells[0]} appears twice", "paste the output once")
        values = cells[1 : 1 + len(devices)]
        if len(values) < len(devices):
            raise _fail(
                line_no,
                f"row {cells[0]} has {len(values)} link cells, expected {len(devices)}",
                "each row needs one cell per column of the header",
            )
        rows[cells[0]] = (line_no, values)
        if _GPU_RE.match(cells[0]):
            affinity[cells[0]] = _affinity(cells[1 + len(devices) :], head.affinity, line_no, cells[0])
        elif len(cells) != 1 + len(devices):
            raise _fail(line_no, f"row {cells[0]} has {len(cells) - 1} cells, expected {len(devices)}",
                        "paste the NIC row whole")  # fmt: skip

    missing = [g for g in gpu_columns if g not in rows]
    if missing:
        raise TopologyError(f"topology text has no row for {', '.join(missing)}", "paste every GPU row")

    def parse_cell(row: str, col: int) -> Link:
        line_no, values = rows[row]
        try:
            return Link.parse(values[col])
        except TopologyError as exc:
            raise _fail(line_no, f"{row} column {devices[col]}: {exc.message}", exc.fix) from None

    links = tuple(tuple(parse_cell(g, j) for j in range(n)) for g in gpu_columns)
    nic_columns = [(j, d) for j, d in enumerate(devices) if not _GPU_RE.match(d)]
    nic_links = tuple(tuple(parse_cell(g, j) for j, _ in nic_columns) for g in gpu_columns)
    for k, (_, nic) in enumerate(nic_columns):  # a NIC row, when printed, mirrors the GPU rows
        if nic in rows:
            for i, g in enumerate(gpu_columns):
                if parse_cell(nic, i) != nic_links[i][k]:
                    raise _fail(rows[nic][0], f"row {nic} says {parse_cell(nic, i)} to {g} but row {g} says "
                                f"{nic_links[i][k]}", "paste the output unchanged")  # fmt: skip
    found = [affinity[g] for g in gpu_columns]
    try:
        return NodeTopology(
            links=links,
            gpu_model=gpu_model,
            numa=tuple(a.numa[0] if a.numa else None for a in found),
            cpu_affinity=tuple(a.cpus for a in found),
            nics=tuple(nic_names.get(d, d) for _, d in nic_columns),
            nic_links=nic_links,
            numa_affinity=tuple(a.numa for a in found),
            gpu_numa_id=tuple(a.gpu_numa_id for a in found),
            source=source,
        )
    except TopologyError as exc:
        raise TopologyError(f"topology text (rows from line {rows['GPU0'][0]}): {exc.message}", exc.fix) from None


_LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks"""


def _ranges(values: tuple[int, ...]) -> str:
    parts: list[str] = []
    for v in values:
        if parts and parts[-1].split("-")[-1] == str(v - 1):
            parts[-1] = f"{parts[-1].split('-')[0]}-{v}"
        else:
            parts.append(str(v))
    return ",".join(parts)


def render_topo_text(topology: NodeTopology) -> str:
    """The matrix as `nvidia-smi topo -m` prints it (round-trips through parse_topo_text)."""
    n = topology.n_gpus
    nic_cols = [f"NIC{k}" for k in range(len(topology.nics))]
    header = [f"GPU{i}" for i in range(n)] + nic_cols
    out = ["\t" + "\t".join(header) + "\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID"]
    for i in range(n):
        cells = [str(topology.links[i][j]) for j in range(n)]
        cells += [str(x) for x in (topology.nic_links[i] if topology.nic_links else ())]
        cpu = topology.cpu_affinity[i] if topology.cpu_affinity and topology.cpu_affinity[i] else "N/A"
        numa_nodes = topology.numa_nodes(i)
        numa = _ranges(numa_nodes) if numa_nodes else "N/A"
        gpu_numa = topology.gpu_numa_id[i] if topology.gpu_numa_id else None
        out.append(f"GPU{i}\t" + "\t".join(cells) + f"\t{cpu}\t{numa}\t{'N/A' if gpu_numa is None else gpu_numa}")
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
