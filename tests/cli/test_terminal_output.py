"""What reaches the terminal: data from elsewhere (a job's command, a node's GPU model, a label)
is shown, never acted on: its control characters come out escaped, whatever command prints them.
A job's own log is the program's output and comes out as it wrote it (kubectl logs)."""

from __future__ import annotations

import io

import pytest

from ringleader.cli.output import printable

ESCAPES = "\x1b]0;owned\x07\x1b[2J\x1b[H\x08\r\u202etxt.exe"


def test_printable_escapes_what_a_terminal_would_act_on_and_keeps_styling() -> None:
    assert printable(ESCAPES) == "\\x1b]0;owned\\x07\\x1b[2J\\x1b[H\\x08\\r\\u202etxt.exe"
    assert printable("\x1b[1mbold\x1b[0m\tand\nlines") == "\x1b[1mbold\x1b[0m\tand\nlines"  # rich's SGR styling


@pytest.mark.parametrize("args", [["get", "esc", "-e"], ["list"], ["get", "esc"]])
def test_a_jobs_command_cannot_drive_the_terminal(cli, args: list[str]) -> None:
    from ringleader.engines.embedded.engine import Runtime

    cli.ok("submit", "mpi", "--name", "esc", "--", "echo", ESCAPES)
    Runtime.open(cli.home).wait("esc", 60)  # the Started event, which names the command, is written at launch
    shown = cli.ok(*args)
    assert "\x1b]" not in shown and "\x07" not in shown and "\x1b[2J" not in shown and "\u202e" not in shown
    if args[-1] == "-e":
        assert "\\x1b]0;owned\\x07" in shown


def test_a_jobs_log_comes_out_as_the_program_wrote_it(cli) -> None:
    from ringleader.engines.embedded.engine import Runtime

    cli.ok("submit", "mpi", "--name", "colours", "--", "printf", "\x1b[31mred\x1b[0m\n")
    Runtime.open(cli.home).wait("colours", 60)
    assert cli.ok("logs", "colours") == "\x1b[31mred\x1b[0m\n"


def test_a_table_too_wide_wraps_its_headers_never_its_numbers() -> None:
    """The scaling table on an 80-column terminal: headers wrap at their spaces, every number
    stays whole on its line (it printed `1600.1-258` over `9.1`)."""
    from rich.console import Console

    from ringleader.cli.output import table

    headers = ["BACKEND", "SERVERS", "RANKS/SRV", "MED STEP(S)", "MED IMG/S", "MIN-MAX", "SPEEDUP", "EFF", "!"]
    rows = [("gloo", "2", "4", "0.1234", "1600.1", "1600.1-2589.1", "1.93", "97%", ""),
            ("mpi", "2", "4", "0.1100", "1700.2", "1650.0-1750.5", "2.01", "100%", "!")]  # fmt: skip
    console = Console(width=80, record=True, file=io.StringIO(), color_system=None)
    console.print(table(headers, rows, title="scaling"))
    shown = console.export_text()
    for row in rows:
        for cell in row:
            assert cell in shown, cell
    assert max(len(line) for line in shown.splitlines()) <= 80
