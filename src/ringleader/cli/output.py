"""Rendering shared by every command group: -o json|yaml, rich tables, arena's key/value
layout, durations."""

from __future__ import annotations

import contextlib
import functools
import io
import itertools
import json
import os
import re
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ringleader.cli.params import DAY_S, FiniteFloat

if TYPE_CHECKING:  # rich and yaml are imported when something is rendered: start-up stays quick
    from rich.console import Console, ConsoleOptions, RenderResult
    from rich.segment import Segment

# arena's key/value layout: "Name:      x" (the key and its colon padded to 11 columns).
KEY_WIDTH = 11
# A column whose cells are all this short keeps its width when a table must fit a narrow terminal.
SHORT_WORD = 14
# Sub-tables under a key/value block ("Instances:") are indented like arena's.
INDENT = 2

F = TypeVar("F", bound=Callable[..., Any])

# What a terminal would act on rather than show: C0 controls but tab and newline, DEL, C1
# controls, and the bidirectional overrides that reorder what is read. Rich's own styling (SGR:
# ESC [ ... m, colours and bold, as `less -R` passes) is kept.
_SGR = r"\x1b\[[0-9;]*m"
_UNSAFE = re.compile(rf"({_SGR})|[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` with every control character shown escaped (``\\x1b``), so that data from
    elsewhere (a node's GPU model, a job's command, a label) cannot move the cursor, retitle the
    terminal, ring it or hide what follows."""
    return _UNSAFE.sub(lambda m: m.group(1) or m.group().encode("unicode_escape").decode(), text)


class PrintableStdout(io.TextIOBase):
    """stdout as every command prints to it (``printable``). What ringleader itself means as
    terminal control (the refresh's clear screen) and a job's own log go to ``raw``."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw

    def write(self, text: str) -> int:
        self.raw.write(printable(text))  # bytes raise: click then takes it for the text stream it is
        return len(text)

    def flush(self) -> None:
        self.raw.flush()

    @property
    def buffer(self) -> Any:
        """Where bytes go as they are (``state export -``: a file, not text for a terminal)."""
        return self.raw.buffer

    def isatty(self) -> bool:
        return bool(self.raw.isatty())

    def fileno(self) -> int:
        return int(self.raw.fileno())

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return str(getattr(self.raw, "encoding", "utf-8"))

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return getattr(self.raw, "errors", None)


def echo_raw(text: str) -> None:
    """``text`` to stdout as it is: terminal control ringleader means, a job's own output."""
    click.echo(text, file=getattr(sys.stdout, "raw", sys.stdout), nl=False, color=True)  # not stripped in a pipe


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


def refresh_option(f: F) -> F:
    """arena's `top ... -r`: redraw until Ctrl-C, every SECONDS (2, arena's interval, when bare)."""
    return click.option(
        "-r", "--refresh", type=FiniteFloat(0.1, DAY_S), is_flag=False, flag_value=2.0, default=None,
        metavar="[SECONDS]",
        help="Redraw every SECONDS (2 when given alone) until Ctrl-C; piped, one snapshot after another.",
    )(f)  # fmt: skip


def refreshing(seconds: float | None, draw: Callable[[], None]) -> None:
    """``draw()`` once, or every ``seconds`` until Ctrl-C (a clean exit, code 0): in place on a
    terminal (cursor home, screen cleared), else snapshots separated by a blank line."""
    if seconds is None:
        draw()
        return

    # Ctrl-C is how a refresh ends: make sure it raises here even when this process was started
    # with SIGINT ignored (a non-interactive shell's background job, nohup), or it never ends.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    tty = sys.stdout.isatty()
    try:
        for frame in itertools.count():
            if tty:
                echo_raw("\x1b[H\x1b[2J")
            elif frame:
                click.echo("")
            draw()
            sys.stdout.flush()
            time.sleep(seconds)
    except KeyboardInterrupt:
        if tty:
            click.echo("")


@contextlib.contextmanager
def step_progress(total: int, enabled: bool = True) -> Iterator[Callable[[str], None]]:
    """A transient progress bar on stderr over ``total`` steps, on a terminal only (stdout, and
    any `-o json`, stay clean): ``step(description)`` announces the next step."""
    if not enabled or not sys.stderr.isatty():
        yield lambda description: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
               TimeElapsedColumn())  # fmt: skip
    with Progress(*columns, console=Console(stderr=True), transient=True) as prog:
        task = prog.add_task("", total=total)
        started = [0]

        def step(description: str) -> None:
            prog.update(task, completed=started[0], description=description)
            started[0] += 1

        yield step


def console() -> Printer:
    return Printer()


class Printer:
    """What commands print through. Tables of plain cells are written as text directly, in the
    layout rich gives them, without loading rich (most commands print one table and exit);
    anything else goes to a rich Console made on first use (also reachable as ``.rich``)."""

    def print(self, *objects: Any, **kwargs: Any) -> None:
        if objects and not kwargs and all(isinstance(o, PlainTable) for o in objects) and not _forced_style():
            tty = sys.stdout.isatty()
            # Piped (grep, awk, a file): a row stays one line, however long; wrapping is for eyes.
            width = _terminal_width() if tty else sys.maxsize
            bold = tty and os.environ.get("TERM") not in ("dumb", "unknown")
            texts = [o.plain_text(width, bold) for o in objects]
            if all(t is not None for t in texts):
                click.echo("".join(t for t in texts if t is not None), nl=False)
                return
        self.rich.print(*objects, **kwargs)

    @functools.cached_property
    def rich(self) -> Console:
        from rich.console import Console

        # The terminal's width on a terminal (COLUMNS first, as rich measures it). Piped (grep,
        # awk, a file), a table row stays one line however long: wrapping is for eyes.
        width = _terminal_width() if sys.stdout.isatty() else WIDTH_WHEN_PIPED
        return Console(width=width, highlight=False, soft_wrap=False)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.rich, name)


WIDTH_WHEN_PIPED = 100_000  # rich tables take their natural width, never this


def _terminal_width() -> int:
    """As rich measures it: $COLUMNS, else the terminal's width, else 80."""
    try:
        return int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        pass
    try:
        return os.get_terminal_size(sys.stdout.fileno()).columns or 80  # 0: a terminal that says nothing
    except (OSError, ValueError):
        return 80


def _forced_style() -> bool:
    """Environment that makes rich style a pipe: leave those cases to rich."""
    return any(os.environ.get(v) for v in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"))


def _plain(cell: str) -> bool:
    """A cell rich would print as is: printable ASCII, no markup, no :emoji: code."""
    return cell.isascii() and cell.isprintable() and "[" not in cell and cell.count(":") < 2


class PlainTable:
    """A table in the style of arena's (no boxes, upper-case headers), optionally indented,
    with no trailing spaces (rich pads the last column to its width). Wider than the terminal,
    it keeps short columns (states, numbers) whole and wraps the long ones (nodes, placements)
    in the width left, folding a word only when it is longer than its column."""

    GAP = 2  # rich's padding between columns (box=None)

    def __init__(self, columns: Sequence[str], rows: list[list[str]], title: str | None, indent: int) -> None:
        self.columns, self.rows, self.title, self.indent = list(columns), rows, title, indent

    def plain_text(self, width: int, bold: bool) -> str | None:
        """The table as rich renders it (columns two spaces apart, bold header on a terminal),
        or None where rich's rendering would differ: a title, markup, wide characters, or a
        table that does not fit ``width`` (rich wraps its long columns)."""
        n = len(self.columns)
        if self.title is not None or any(len(r) != n for r in self.rows):
            return None
        grid = [self.columns, *self.rows]
        if not all(_plain(cell) for row in grid for cell in row):
            return None
        widths = [max(len(row[i]) for row in grid) for i in range(n)]
        if n == 0 or sum(widths) + self.GAP * (n - 1) > width - self.indent:
            return None
        lines = []
        for i, row in enumerate(grid):
            cells = [c + " " * (w - len(c)) for c, w in zip(row, widths, strict=True)]
            if i == 0 and bold:
                cells = [f"\x1b[1m{c}\x1b[0m" + " " * (w - len(c)) for c, w in zip(row, widths, strict=True)]
            lines.append(" " * self.indent + "  ".join(cells).rstrip())
        return "\n".join(lines) + "\n"

    def _widths(self, width: int) -> list[int | None]:
        """Column widths for ``width``: None (rich's own) where the table fits or not even its
        short columns do; else short columns whole and the long ones sharing what is left."""
        natural = [max(len(text) for text in [col, *(r[i] for r in self.rows if i < len(r))])
                   for i, col in enumerate(self.columns)]  # fmt: skip
        free: list[int | None] = [None] * len(natural)
        room = width - self.GAP * (len(natural) - 1)
        if sum(natural) <= room:
            return free  # fits as it is
        short = [n <= SHORT_WORD for n in natural]
        left = room - sum(n for n, s in zip(natural, short, strict=True) if s)
        long_total = sum(n for n, s in zip(natural, short, strict=True) if not s)
        if not long_total or left < 4 * short.count(False):
            # Not even the short columns fit whole with their headers: let the headers wrap at
            # their spaces ("MED" over "STEP(S)") before any number is broken across lines.
            cells = [max([len(r[i]) for r in self.rows if i < len(r)], default=0) for i in range(len(natural))]
            words = [max([len(w) for w in col.split()], default=0) for col in self.columns]
            compact = [max(c, w) for c, w in zip(cells, words, strict=True)]
            return list(compact) if sum(compact) <= room else free  # else rich folds every column
        return [n if is_short else max(4, left * n // long_total) for n, is_short in zip(natural, short, strict=True)]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        from rich.segment import Segment
        from rich.table import Table

        inner = Table(title=self.title, box=None, show_edge=False, pad_edge=False, header_style="bold")
        width = max(1, options.max_width - self.indent)
        for col, col_width in zip(self.columns, self._widths(width), strict=True):
            inner.add_column(col, overflow="fold", width=col_width)
        for row in self.rows:
            inner.add_row(*row)
        for line in console.render_lines(inner, options.update(width=width), pad=False):
            if self.indent:
                yield Segment(" " * self.indent)
            yield from _rstrip(line)
            yield Segment.line()


def _rstrip(line: list[Segment]) -> list[Segment]:
    from rich.segment import Segment

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
    return PlainTable(columns, [["" if v is None else str(v) for v in row] for row in rows], title, indent)


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
