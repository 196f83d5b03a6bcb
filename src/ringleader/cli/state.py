"""`ringleader state export|import`: back up and restore the state database."""

from __future__ import annotations

from pathlib import Path

import click

from ringleader.engines.embedded.backup import export_state, import_state
from ringleader.engines.embedded.store import default_home


@click.group("state")
def state() -> None:
    """Back up the state (jobs, cluster, events) and restore it."""


@state.command("export")
@click.argument("path", type=click.Path(dir_okay=False))
def export(path: str) -> None:
    """Write a consistent copy of the state to PATH (safe while jobs run and commands write)."""
    size = export_state(default_home().absolute(), Path(path))
    click.echo(f"state exported to {path} ({size} bytes)")


@state.command("import")
@click.argument("path", type=click.Path(dir_okay=False))
def import_(path: str) -> None:
    """Replace the state with a copy written by `state export` (checked first; refused while a
    job runs)."""
    import_state(default_home().absolute(), Path(path))
    click.echo(f"state imported from {path}")


def register(cli: click.Group) -> None:
    cli.add_command(state)
