"""`ringleader engine`: which engine runs jobs by default (embedded, slurm, kubernetes)."""

from __future__ import annotations

import click

from ringleader.engines import DEFAULT, ENGINES, chosen_engine, set_default_engine
from ringleader.engines.embedded.store import default_home


@click.group("engine")
def engine() -> None:
    """Choose where jobs run: the embedded engine (this host and ssh hosts), Slurm or Kubernetes."""


@engine.command("use")
@click.argument("name", type=click.Choice(sorted(ENGINES)))
def use(name: str) -> None:
    """Make NAME the default engine of every job command (kept in the home folder)."""
    set_default_engine(default_home(), name)
    click.echo(f"default engine: {name}")


@engine.command("show")
def show() -> None:
    """Print the engine job commands use now (--engine and RINGLEADER_ENGINE override it)."""
    name = chosen_engine(default_home())
    click.echo(name + (" (default)" if name == DEFAULT else ""))


def register(cli: click.Group) -> None:
    cli.add_command(engine)
