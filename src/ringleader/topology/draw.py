"""`ringleader topo NODE --png|--svg`: a node's GPUs and NICs as a picture (matplotlib, Agg).

GPUs sit on a circle, coloured by the job that holds them (white: idle). Every NVLink pair is a
solid green line, thicker with more bonded links and labelled NV#; a PCIe pair close enough to
matter (PIX: one switch, PXB: several switches, PHB: through the host bridge) is a dashed line
when the pair has no NVLink. NODE and SYS pairs (across host bridges or CPU sockets) would join
almost every pair, so they are counted under the title instead of drawn. Where every pair is the
same NV# (an NVSwitch system), one hub stands for all of them. NICs are boxes below the GPUs,
six to a row, joined to the GPUs they sit closest to (PIX or PXB).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ringleader.topology.links import Link
from ringleader.topology.node import NodeTopology

PCIE_STYLE: dict[str, tuple[str, Any]] = {"PIX": ("#1f6feb", "--"), "PXB": ("#8250df", "--"), "PHB": ("#bc4c00", ":")}
NV_COLOUR = "#1a7f37"
NOT_DRAWN = ("NODE", "SYS")
NICS_PER_ROW = 6
JOB_COLOURS = ("#fdd8a8", "#b6e3ff", "#ffd8f0", "#d2f4d3", "#e2d9fb", "#fff1a8", "#ffcfc9", "#cff5f6")


def _positions(n: int) -> list[tuple[float, float]]:
    """GPU i's centre: a circle, GPU0 at the top left, numbered clockwise."""
    if n == 1:
        return [(0.0, 0.0)]
    return [(math.cos(math.pi * (0.75 - 2 * i / n)), math.sin(math.pi * (0.75 - 2 * i / n))) for i in range(n)]


def _edge_label(ax: Any, a: tuple[float, float], b: tuple[float, float], text: str, colour: str,
                placed: list[tuple[float, float]]) -> None:  # fmt: skip
    """Label an edge at its middle, or further along where the middle is taken (on a circle,
    every diameter crosses the centre)."""
    spots = [(a[0] + (b[0] - a[0]) * t, a[1] + (b[1] - a[1]) * t) for t in (0.5, 0.35, 0.65, 0.25, 0.75)]
    # The centre belongs to no single diameter, so no label goes there.
    free = [p for p in spots if math.hypot(*p) > 0.1 and all(math.dist(p, q) > 0.16 for q in placed)]
    x, y = free[0] if free else spots[1]
    placed.append((x, y))
    ax.text(x, y, text, fontsize=7, color=colour, ha="center", va="center",
            bbox={"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.85}, zorder=3)  # fmt: skip


def draw_node(topo: NodeTopology, path: Path, title: str, owners: Mapping[int, str] | None = None) -> Path:
    """Write the picture of ``topo`` to ``path`` (PNG or SVG by its suffix); ``owners`` maps a
    GPU to the job holding it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Circle, FancyBboxPatch, Patch

    owners = dict(owners or {})
    n = topo.n_gpus
    pos = _positions(n)
    nic_rows = math.ceil(len(topo.nics) / NICS_PER_ROW)
    fig, ax = plt.subplots(figsize=(7.5, 7.2 + 0.45 * nic_rows))
    skipped: dict[str, int] = {}
    labels: list[tuple[float, float]] = []
    pairs = {str(topo.link(i, j)) for i in range(n) for j in range(i + 1, n)}
    switched = n > 4 and len(pairs) == 1 and topo.link(0, 1).is_nvlink
    if switched:  # NVSwitch: every pair the same NV#, drawn as one hub instead of n(n-1)/2 lines
        for x, y in pos:
            ax.plot([0, x], [0, y], color=NV_COLOUR, linewidth=4, zorder=1)
        ax.add_patch(Circle((0, 0), 0.3, fc="#dafbe1", ec=NV_COLOUR, linewidth=2, zorder=2))
        ax.text(0, 0, f"NVSwitch\nevery pair\n{pairs.pop()}", ha="center", va="center", fontsize=8, zorder=3)
    for i in range(n if not switched else 0):
        for j in range(i + 1, n):
            link: Link = topo.link(i, j)
            a, b = pos[i], pos[j]
            if link.is_nvlink:
                ax.plot([a[0], b[0]], [a[1], b[1]], color=NV_COLOUR, linewidth=1.2 + 1.3 * link.nvlinks, zorder=1)
                _edge_label(ax, a, b, str(link), NV_COLOUR, labels)
            elif link.kind in PCIE_STYLE:
                colour, style = PCIE_STYLE[link.kind]
                ax.plot([a[0], b[0]], [a[1], b[1]], color=colour, linestyle=style, linewidth=1.4, zorder=1)
                _edge_label(ax, a, b, link.kind, colour, labels)
            else:
                skipped[link.kind] = skipped.get(link.kind, 0) + 1
    jobs = sorted(set(owners.values()))
    colour_of = {job: JOB_COLOURS[k % len(JOB_COLOURS)] for k, job in enumerate(jobs)}
    for g, (x, y) in enumerate(pos):
        job = owners.get(g)
        box = FancyBboxPatch((x - 0.16, y - 0.11), 0.32, 0.22, boxstyle="round,pad=0.02",
                             fc=colour_of.get(job or "", "white"), ec="0.2", linewidth=1.3, zorder=4)  # fmt: skip
        ax.add_patch(box)
        ax.text(x, y + 0.035, f"GPU{g}", ha="center", va="center", fontsize=10, weight="bold", zorder=5)
        ax.text(x, y - 0.055, job or "idle", ha="center", va="center", fontsize=7.5, zorder=5,
                color="0.1" if job else "0.45")  # fmt: skip
    _draw_nics(ax, topo, pos)
    handles: list[Any] = [Line2D([], [], color=NV_COLOUR, linewidth=3, label="NVLink (NV#: bonded links)")]
    used = {str(topo.link(i, j)) for i in range(n) for j in range(i + 1, n)} | {
        str(link) for row in topo.nic_links for link in row if str(link) in ("PIX", "PXB")}
    handles += [Line2D([], [], color=c, linestyle=s, label=f"{kind} (PCIe)")
                for kind, (c, s) in PCIE_STYLE.items() if kind in used]  # fmt: skip
    handles += [Patch(fc=colour_of[j], ec="0.2", label=f"job {j}") for j in jobs]
    if n:
        handles.append(Patch(fc="white", ec="0.2", label="idle GPU"))
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.02), ncol=2, fontsize=8, frameon=False)
    notes = [f"{count} {kind} pair(s) not drawn ({'across host bridges' if kind == 'NODE' else 'across CPU sockets'})"
             for kind, count in sorted(skipped.items()) if kind in NOT_DRAWN]  # fmt: skip
    ax.set_title(title + ("\n" + "; ".join(notes) if notes else ""), fontsize=11)
    ax.set_xlim(-1.45, 1.45)
    ax.set_ylim(-1.45 - 0.32 * nic_rows, 1.35)
    ax.set_aspect("equal")
    ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _draw_nics(ax: Any, topo: NodeTopology, pos: list[tuple[float, float]]) -> None:
    from matplotlib.patches import Rectangle

    for k, name in enumerate(topo.nics):
        row, col = divmod(k, NICS_PER_ROW)
        in_row = min(NICS_PER_ROW, len(topo.nics) - row * NICS_PER_ROW)
        x, y = (col - (in_row - 1) / 2) * 0.46, -1.55 - 0.32 * row
        ax.add_patch(Rectangle((x - 0.21, y - 0.1), 0.42, 0.2, fc="#eaeef2", ec="0.2", zorder=4))
        ax.text(x, y, f"NIC{k}\n{name}", ha="center", va="center", fontsize=7, zorder=5)
        for g in range(topo.n_gpus):
            link = topo.nic_links[g][k] if topo.nic_links else None
            if link is not None and link.kind in ("PIX", "PXB"):
                colour, style = PCIE_STYLE[link.kind]
                ax.plot([x, pos[g][0]], [y + 0.08, pos[g][1]], color=colour, linestyle=style, linewidth=1, zorder=1)
