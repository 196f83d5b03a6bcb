"""Measured GPU-to-GPU bandwidth matrices, as tools print them.

Reads the whole output of CUDA's p2pBandwidthLatencyTest (device list, connectivity matrix,
four bandwidth matrices, latency matrices) and picks one bandwidth matrix by name; also bare
matrices with ``D\\D 0 1 ...``, ``GPU0 GPU1 ...`` or ``gpu_0 ...`` headers (Koordinator, ACK's
``arena top node -d``). The result is one direction's GB/s per pair: a bidirectional matrix
is halved, and a bare matrix can be labelled bidirectional by the matrix choice.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ringleader.errors import TopologyError
from ringleader.topology.smi import strip_ansi

#: Matrix choices: (direction, P2P). The default is what NCCL uses between peers.
MATRICES: dict[str, tuple[str, str]] = {
    "unidirectional-p2p": ("uni", "enabled"),
    "unidirectional-no-p2p": ("uni", "disabled"),
    "bidirectional-p2p": ("bi", "enabled"),
    "bidirectional-no-p2p": ("bi", "disabled"),
}
DEFAULT_MATRIX = "unidirectional-p2p"

_LABEL_RE = re.compile(r"^(?:GPU|gpu_?|D)?(\d+)$")
_MISSING = {"N/A", "N-A", "NA", "-", "X"}


@dataclass
class _Table:
    title: str
    title_line: int
    header_line: int
    size: int
    rows: list[tuple[int, str, list[str]]] = field(default_factory=list)

    @property
    def kind(self) -> str:
        t = self.title.lower().replace(" ", "")
        if "latency" in t or "(us)" in t:
            return "latency"
        if "connectivity" in t or "linktype" in t or "cliques" in t:
            return "other"
        return "bandwidth"

    @property
    def direction(self) -> str | None:
        t = self.title.lower()
        return "bi" if "bidirectional" in t else "uni" if "unidirectional" in t else None

    @property
    def p2p(self) -> str | None:
        t = self.title.lower().replace(" ", "")
        return "enabled" if "p2p=enabled" in t else "disabled" if "p2p=disabled" in t else None

    def describe(self) -> str:
        return f"{self.title or 'untitled matrix'!r} (line {self.title_line or self.header_line})"


def _header_size(cells: list[str]) -> int | None:
    """Columns of a matrix header (``D\\D 0 1 2``, ``GPU 0 1``, ``GPU0 GPU1``, ``gpu_0 ...``)."""
    if cells and cells[0] in ("D\\D", "GPU", "CPU"):
        cells = cells[1:]
    if not cells:
        return None
    labels = [_LABEL_RE.match(c) for c in cells]
    if all(labels) and [int(m.group(1)) for m in labels if m] == list(range(len(cells))):
        return len(cells)
    return None


def _tables(text: str) -> list[_Table]:
    tables: list[_Table] = []
    title, title_line = "", 0
    current: _Table | None = None
    for line_no, raw in enumerate(strip_ansi(text).splitlines(), start=1):
        cells = raw.split()
        if not cells or raw.lstrip().startswith("#"):
            continue
        size = _header_size(cells)
        if size is not None and not (current and current.size == size and _is_row(cells, current)):
            current = _Table(title, title_line, line_no, size)
            tables.append(current)
            continue
        if current is not None and _is_row(cells, current):
            current.rows.append((line_no, cells[0], cells[1:]))
            continue
        title, title_line, current = raw.strip(), line_no, None
    return tables


def _is_row(cells: list[str], table: _Table) -> bool:
    match = _LABEL_RE.match(cells[0])
    if not match or len(cells) < 2:
        return False
    # A row label is the next device; its cells are numbers or a missing-value mark.
    return int(match.group(1)) == len(table.rows) and all(_is_number(c) or c in _MISSING for c in cells[1:])


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def _choose(tables: list[_Table], matrix: str | None) -> tuple[_Table, str, str | None]:
    bandwidth = [t for t in tables if t.kind == "bandwidth"]
    if not bandwidth:
        raise TopologyError(
            "no bandwidth matrix found (a header such as `D\\D 0 1 ...` or `GPU0 GPU1 ...` then one row per GPU)",
            "paste the output of p2pBandwidthLatencyTest or a GB/s matrix with a header row",
        )
    if matrix is not None and matrix not in MATRICES:
        raise TopologyError(f"unknown bandwidth matrix {matrix!r}", f"use one of {', '.join(MATRICES)}")
    direction, p2p = MATRICES[matrix or DEFAULT_MATRIX]
    titled = [t for t in bandwidth if t.direction is not None or t.p2p is not None]
    if not titled:
        if len(bandwidth) > 1:
            raise TopologyError(
                f"{len(bandwidth)} untitled bandwidth matrices "
                f"(lines {', '.join(str(t.header_line) for t in bandwidth)})",
                "keep only the one to use",
            )
        # A bare matrix: its direction is what the choice says (the default, one direction).
        return bandwidth[0], direction, None
    found = [t for t in titled if (t.direction or "uni") == direction and (t.p2p or "enabled") == p2p]
    both_ways = [t for t in titled if t.direction == "bi" and (t.p2p or "enabled") == p2p]
    if not found and matrix is None and both_ways:
        # An output that kept only the bidirectional matrices: both directions at once, so half
        # of each figure is one direction's (what a link gives each way when both are busy).
        note = (f"no unidirectional matrix: {both_ways[0].describe()} used, halved "
                "(bandwidth_matrix: bidirectional-p2p says so and silences this)")
        return both_ways[0], "bi", note
    if not found:
        present = "; ".join(t.describe() for t in titled)
        raise TopologyError(f"no {matrix or DEFAULT_MATRIX} matrix in the text (found: {present})",
                            f"choose one that is present ({', '.join(MATRICES)})")  # fmt: skip
    return found[0], found[0].direction or direction, None  # P2P Writes come before Reads: first wins


def parse_bandwidth_text(text: str, matrix: str | None = None) -> tuple[tuple[float, ...], ...]:
    """One direction's GB/s per GPU pair (diagonal 0) from a measured matrix or a whole
    p2pBandwidthLatencyTest output; ``matrix`` picks one of ``MATRICES`` (default:
    unidirectional with P2P enabled, else, when the output holds only bidirectional matrices,
    the bidirectional one). Bidirectional numbers are halved."""
    return read_bandwidth_text(text, matrix)[0]


def read_bandwidth_text(text: str, matrix: str | None = None) -> tuple[tuple[tuple[float, ...], ...], str | None]:
    """``parse_bandwidth_text`` and a note for the user when it chose for them (None when not)."""
    table, direction, note = _choose(_tables(text), matrix)
    n = table.size
    where = table.describe()
    if len(table.rows) != n:
        last = table.rows[-1][0] if table.rows else table.header_line
        raise TopologyError(
            f"bandwidth matrix {where}: {len(table.rows)} row(s) for {n} columns (rows end at line {last})",
            "give one row per GPU",
        )
    scale = 0.5 if direction == "bi" else 1.0
    out: list[tuple[float, ...]] = []
    for i, (line_no, label, cells) in enumerate(table.rows):
        if len(cells) != n:
            raise TopologyError(
                f"bandwidth matrix line {line_no}: row {label} has {len(cells)} value(s), expected {n} (cut short?)",
                "give one GB/s value per GPU in every row",
            )
        row = []
        for j, cell in enumerate(cells):
            if i == j:
                row.append(0.0)  # the diagonal is local memory bandwidth, not a link
                continue
            if cell in _MISSING:
                raise TopologyError(f"bandwidth matrix line {line_no}: row {label} has no value for GPU {j}",
                                    "measure every GPU pair")  # fmt: skip
            value = float(cell)
            if not value > 0 or value == float("inf"):
                raise TopologyError(
                    f"bandwidth matrix line {line_no}: row {label} value {cell!r} for GPU {j} is not > 0",
                    "give GB/s values > 0",
                )
            row.append(value * scale)
        out.append(tuple(row))
    return tuple(out), note
