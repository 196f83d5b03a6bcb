"""Start-up of the commands people run most: no heavy optional library loaded by a read command,
and the plain table writer that lets them print without loading rich. Which of ringleader's own
modules a command imports is not pinned here: benchmarks/startup.py watches what it costs."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from cli.conftest import Cli, apply_seeds_cluster
from clijobs import wait_for
from ringleader.cli.output import WIDTH_WHEN_PIPED, table

# Heavy optional libraries a command that only reads state has no use for (yaml only for -o yaml,
# rich only for output the plain table writer cannot give).
HEAVY = ("torch", "numpy", "matplotlib", "yaml", "rich", "mpi4py")

REPO = Path(__file__).resolve().parents[2]
PROBE = """
import json, sys
from ringleader.cli.main import main
code = main(sys.argv[2:])
with open(sys.argv[1], "w") as f:
    json.dump({"code": code, "modules": sorted(sys.modules)}, f)
"""


def imported_by(cli: Any, tmp_path: Path, *args: str) -> list[str]:
    """Modules loaded by the time `ringleader ARGS` (run in a fresh interpreter) finished."""
    report = tmp_path / "modules.json"
    out = subprocess.run([sys.executable, "-c", PROBE, str(report), *args], env=cli.env, cwd=REPO,
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    data = json.loads(report.read_text())
    assert data["code"] == 0, out.stderr
    return [m for m in data["modules"] if any(m == h or m.startswith(h + ".") for h in HEAVY)]


@pytest.fixture(scope="module")
def finished_job(tmp_path_factory: pytest.TempPathFactory) -> Cli:
    """One home with one finished job, for every read below: they change nothing."""
    cli = Cli(tmp_path_factory.mktemp("startup") / "rl-home")
    apply_seeds_cluster(cli.home)
    cli.ok("submit", "mpi", "--name", "done", "--workers", "2", "--gpus", "1", "--", sys.executable, "-c", "pass")
    wait_for(cli, "done", "SUCCEEDED")
    return cli


@pytest.mark.parametrize(
    "args",
    [["--help"], ["list"], ["list", "-o", "json"], ["get", "done"], ["get", "done", "-o", "json"],
     ["submit", "--help"], ["top", "job"]],
)
def test_read_commands_import_nothing_heavy(finished_job: Cli, tmp_path: Path, args: list[str]) -> None:
    assert imported_by(finished_job, tmp_path, *args) == []


def test_yaml_output_loads_yaml_and_nothing_else_heavy(finished_job: Cli, tmp_path: Path) -> None:
    heavy = imported_by(finished_job, tmp_path, "list", "-o", "yaml")
    assert "yaml" in heavy and all(m == "yaml" or m.startswith("yaml.") for m in heavy)


def test_the_root_help_lists_every_command_as_the_command_describes_itself() -> None:
    from ringleader.cli.main import COMMANDS, cli

    ctx = click.Context(cli)
    commands = {name: cli.get_command(ctx, name) for name in COMMANDS}
    assert set(cli.commands) == set(COMMANDS)  # every module loaded: nothing more, nothing less
    for name, (_, text) in COMMANDS.items():
        command = commands[name]
        assert command is not None
        for limit in (40, 80, 200):
            assert click.Command(name, help=text).get_short_help_str(limit) == command.get_short_help_str(limit)


def rich_text(t: object, width: int = WIDTH_WHEN_PIPED) -> str:
    buf = io.StringIO()
    Console(file=buf, width=width, highlight=False, soft_wrap=False).print(t)
    return buf.getvalue()


PLAIN_CELL = st.text(st.sampled_from("abcXYZ019 -_.,/()=<>%:"), max_size=14)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 6).flatmap(
        lambda n: st.tuples(st.lists(PLAIN_CELL, min_size=n, max_size=n),
                            st.lists(st.lists(PLAIN_CELL, min_size=n, max_size=n), max_size=5))
    ),
    st.sampled_from([0, 2]),
)
def test_plain_tables_print_exactly_as_rich_prints_them(grid: tuple[list[str], list[list[str]]], indent: int) -> None:
    columns, rows = grid
    t = table(columns, rows, indent=indent)
    text = t.plain_text(WIDTH_WHEN_PIPED, bold=False)
    assert text is None or text == rich_text(t)


def test_tables_rich_would_change_are_left_to_rich() -> None:
    assert table(["A"], [["[bold]x[/bold]"]]).plain_text(160, False) is None  # markup
    assert table(["A"], [["ｗｉｄｅ"]]).plain_text(160, False) is None  # double-width characters
    assert table(["A", "B"], [["x" * 100, "y" * 100]]).plain_text(160, False) is None  # rich shrinks it
    assert table(["A"], [["x"]], title="T").plain_text(160, False) is None
    bold = "\x1b[1mNAME\x1b[0m    \x1b[1mGPUS\x1b[0m\nnode-a  8\n"
    assert table(["NAME", "GPUS"], [["node-a", 8]]).plain_text(160, True) == bold
