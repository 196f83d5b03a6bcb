"""Entry point: one click group; each command group lives in its own module with `register`."""

from __future__ import annotations

import os
import sys

import click

from ringleader import __version__
from ringleader.cli import bench, cluster, engine, jobs, model, sim, slurm, state
from ringleader.errors import RingleaderError


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="ringleader")
def cli() -> None:
    """ringleader: topology-aware gang scheduling, a local runtime and benchmarks for
    distributed deep-learning training.

    State lives in SQLite under ~/.ringleader (set RINGLEADER_HOME to move it).
    """


# click >= 8.2 raises this for a group given no subcommand (older versions print the help and exit).
NO_ARGS_IS_HELP: type[click.UsageError] | tuple[()] = getattr(click.exceptions, "NoArgsIsHelpError", ())

for _module in (jobs, cluster, engine, bench, model, sim, state, slurm):
    _module.register(cli)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; a RingleaderError becomes one line on stderr and its exit code."""
    try:
        cli.main(args=argv, prog_name="ringleader", standalone_mode=False)
    except RingleaderError as exc:
        if os.environ.get("RINGLEADER_DEBUG") == "1":
            raise
        click.echo(f"error: {exc.one_line()}", err=True)
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 130
    except NO_ARGS_IS_HELP as exc:  # a bare group prints its help, as kubectl's do
        click.echo(exc.ctx.get_help() if exc.ctx else exc.format_message())
        return 0
    except click.ClickException as exc:
        click.echo(f"error: {click_one_line(exc)}", err=True)
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except BrokenPipeError:
        return 0
    return 0


def click_one_line(exc: click.ClickException) -> str:
    """click's own errors (a missing argument, an unknown option, a bad choice) in the one-line
    form every other error takes, naming the command's --help as the fix."""
    message = " ".join(exc.format_message().split()).rstrip(".")
    ctx = getattr(exc, "ctx", None)
    if isinstance(exc, click.UsageError) and ctx is not None:
        return f"{message}{' ' if message.endswith('?') else '. '}To fix: see `{ctx.command_path} --help`"
    return message


if __name__ == "__main__":
    sys.exit(main())
