"""One self-contained HTML file per report (`simulate --out`, `bench scaling`): tables, notes and
plots inlined as data URIs, styles inline, no script and no network access, so it opens the
same from a laptop's downloads folder, a CI artifact or an air-gapped cluster.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

STYLE = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1f2328;
       max-width: 1280px; margin: 2em auto; padding: 0 1em; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; } h2 { font-size: 1.25em; margin-top: 1.6em; }
.meta { color: #59636e; font-size: 0.9em; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; margin: 0.6em 0; font-variant-numeric: tabular-nums; }
th, td { border-bottom: 1px solid #d1d9e0; padding: 0.3em 0.8em; text-align: right; vertical-align: top; }
th { background: #f6f8fa; } th:first-child, td:first-child { text-align: left; }
td.text { text-align: left; }
.warning { background: #fff8c5; border-left: 4px solid #d4a72c; padding: 0.5em 0.9em; margin: 0.6em 0; }
.note { background: #ddf4ff; border-left: 4px solid #54aeff; padding: 0.5em 0.9em; margin: 0.6em 0; }
figure { margin: 1em 0; } figure img { max-width: 100%; border: 1px solid #d1d9e0; }
figcaption { color: #59636e; font-size: 0.9em; }
"""


@dataclass(frozen=True)
class Table:
    headers: Sequence[str]
    rows: Sequence[Sequence[Any]]
    caption: str = ""


@dataclass(frozen=True)
class Figure:
    path: Path  # a PNG or SVG written beside the report
    caption: str = ""


@dataclass(frozen=True)
class Note:
    text: str
    warning: bool = False


@dataclass(frozen=True)
class Section:
    heading: str
    blocks: Sequence[Table | Figure | Note] = field(default_factory=tuple)


def data_uri(path: Path) -> str:
    mime = "image/svg+xml" if path.suffix.lower() == ".svg" else "image/png"
    return f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode('ascii')}"


NUMERIC = re.compile(r"^[-+]?[\d.,]+(%|x|[-–][\d.,]+)?$")  # 12.5, 75%, 1.5x, 27.3-54.3


def _cell(value: Any) -> str:
    text = "-" if value is None else str(value)
    numeric = bool(NUMERIC.match(text)) or text == "-"
    return f"<td>{html.escape(text)}</td>" if numeric else f'<td class="text">{html.escape(text)}</td>'


def _block(block: Table | Figure | Note) -> str:
    if isinstance(block, Note):
        return f'<div class="{"warning" if block.warning else "note"}">{html.escape(block.text)}</div>'
    if isinstance(block, Figure):
        alt = html.escape(block.caption or block.path.name)
        caption = f"<figcaption>{html.escape(block.caption)}</figcaption>" if block.caption else ""
        return f'<figure><img src="{data_uri(block.path)}" alt="{alt}">{caption}</figure>'
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in block.headers)
    body = "".join("<tr>" + "".join(_cell(v) for v in row) + "</tr>" for row in block.rows)
    caption = f"<caption>{html.escape(block.caption)}</caption>" if block.caption else ""
    return f'<div class="scroll"><table>{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def render(title: str, sections: Sequence[Section], subtitle: str = "") -> str:
    made = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f'<p class="meta">{html.escape(subtitle) + " · " if subtitle else ""}written by ringleader at {made}</p>',
    ]  # fmt: skip
    for section in sections:
        parts.append(f"<h2>{html.escape(section.heading)}</h2>")
        parts.extend(_block(b) for b in section.blocks)
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write(path: Path, title: str, sections: Sequence[Section], subtitle: str = "") -> Path:
    path.write_text(render(title, sections, subtitle), encoding="utf-8")
    return path
