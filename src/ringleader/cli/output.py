"""Rendering shared by every command group: -o json|yaml, rich tables, arena's key/value
layout, durations."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click
from rich.console import Console, ConsoleOptions, RenderResult
from rich.segment import Segment
from rich.table import Table

# arena's key/value layout: "Name:      x" (the key and its colon padded to 11 columns).
KEY_WIDTH = 11
# A column whose cells are all this short keeps its width when a table must fit a narrow terminal.
SHORT_WORD = 14
# Sub-tables under a key/value block ("Instances:") are indented like arena's.
INDENT = 2

F = TypeVar("F", bound=Callable[..., Any])


def output_option(*choices: str) -> Callable[[F], F]:
    """`-o/--output` with the given formats (table is always the default)."""
    allowed = ("table", *choices)
    return click.option(
        "-o", "--output", type=click.Choice(allowed), default="table", show_default=True,
        help="Output format.",
    )  # fmt: skip


def emit_data(data: Any, fmt: str) -> None:
    """Write ``data`` as JSON or YAML to stdout."""
    if fmt == "json":
        click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))
    elif fmt == "yaml":
        import yaml

        click.echo(yaml.safe_dump(data, sort_keys=False), nl=False)
    else:
        raise ValueError(fmt)


def console() -> Console:
    """The terminal's width on a terminal, COLUMNS when set, else 160 (pipes, logs): tables
    wider than that wrap their cells rather than cut them."""
    columns = os.environ.get("COLUMNS", "")
    width = int(columns) if columns.isdigit() and int(columns) > 0 else None if sys.stdout.isatty() else 160
    return Console(width=width, highlight=False, soft_wrap=False)


class PlainTable:
    """A table in the style of arena's (no boxes, upper-case headers), optionally indented,
    with no trailing spaces (rich pads the last column to its width). Wider than the terminal,
    it keeps short columns (states, numbers) whole and wraps the long ones (nodes, placements)
    in the width left, folding a word only when it is longer than its column."""

    GAP = 2  # rich's padding between columns (box=None)

    def __init__(self, inner: Table, indent: int = 0, natural: Sequence[int] = ()) -> None:
        self.inner, self.indent = inner, indent
        self.natural = list(natural) or [1] * len(inner.columns)

    def _fit(self, width: int) -> None:
        room = width - self.GAP * (len(self.natural) - 1)
        if sum(self.natural) <= room:
            return  # fits as it is
        short = [n <= SHORT_WORD for n in self.natural]
        left = room - sum(n for n, s in zip(self.natural, short, strict=True) if s)
        long_total = sum(n for n, s in zip(self.natural, short, strict=True) if not s)
        if not long_total or left < 4 * short.count(False):
            return  # not even the short columns fit: rich folds every column
        for column, n, is_short in zip(self.inner.columns, self.natural, short, strict=True):
            column.width = n if is_short else max(4, left * n // long_total)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = max(1, options.max_width - self.indent)
        self._fit(width)
        for line in console.render_lines(self.inner, options.update(width=width), pad=False):
            if self.indent:
                yield Segment(" " * self.indent)
            yield from _rstrip(line)
            yield Segment.line()


def _rstrip(line: list[Segment]) -> list[Segment]:
    out = list(line)
    while out and not out[-1].control:
        text = out[-1].text.rstrip()
        if text:
            out[-1] = Segment(text, out[-1].style)
            break
        out.pop()
    return out


def table(
    columns: Sequence[str], rows: Sequence[Sequence[Any]], title: str | None = None, indent: int = 0
) -> PlainTable:
    """A plain table in the style of arena's (no boxes, upper-case headers). A cell too wide
    for the terminal wraps at spaces, or folds, onto more lines: never cut to "…"."""
    t = Table(title=title, box=None, show_edge=False, pad_edge=False, header_style="bold")
    cells = [["" if v is None else str(v) for v in row] for row in rows]
    for col in columns:
        t.add_column(col, overflow="fold")
    for row in cells:
        t.add_row(*row)
    natural = [max(len(text) for text in [col, *(r[i] for r in cells if i < len(r))]) for i, col in enumerate(columns)]
    return PlainTable(t, indent, natural)


def key_values(pairs: Sequence[tuple[str, Any]]) -> None:
    """arena's key/value lines: "Name:      x", "Status:    RUNNING"; values stay in one
    column when a key is longer than arena's ("CreateTime:"), as its tabwriter keeps them."""
    width = max([KEY_WIDTH - 1, *(len(key) + 1 for key, _ in pairs)])
    for key, value in pairs:
        click.echo(f"{key + ':':<{width}} {value}")


def duration(seconds: float | None) -> str:
    """Kubernetes-style short duration: 9s, 2m, 1h5m, 3d."""
    if seconds is None:
        return "N/A"
    s = int(max(seconds, 0))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        h, m = divmod(s // 60, 60)
        return f"{h}h{m}m" if m else f"{h}h"
    return f"{s // 86400}d"


def shared_group(cli: click.Group, name: str, help_text: str) -> click.Group:
    """The subgroup ``name`` of ``cli``, created on first use: command modules that each add
    commands to one group (`top job`, `top node`) share it whatever their import order."""
    existing = cli.commands.get(name)
    if isinstance(existing, click.Group):
        return existing
    group = click.Group(name, help=help_text)
    cli.add_command(group)
    return group
