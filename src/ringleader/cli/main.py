"""Entry point: one click group; each command group lives in its own module with `register`."""

from __future__ import annotations

import importlib
import signal
import sys

import click
from click.shell_completion import get_completion_class

from ringleader import __version__, settings
from ringleader.cli import QUIET_INTERRUPT
from ringleader.cli.output import PrintableStdout, printable
from ringleader.errors import RingleaderError, missing_extra

# Every top-level command: the command modules that add it (a shared group such as `top` gets
# commands from several) and the first paragraph of its help, which `ringleader --help` lists.
# A module is imported only when one of its commands runs, so `--help` or `list` do not pay
# for the others; tests/cli/test_startup.py checks this table against the commands themselves.
COMMANDS: dict[str, tuple[tuple[str, ...], str]] = {
    "bench": (("bench",), "Benchmarks: collectives (nccl-tests style), training throughput (tf_cnn_benchmarks "
                          "style), the input pipeline and multi-process scaling."),
    "calibrate": (("model",), "Fit links, compute rates and scaling from `bench allreduce|train -o json` files "
                              "and throughput CSVs (one multi-GPU run per line: docs/model.md)."),
    "cluster": (("cluster",), "Declare and show the cluster (this machine is node `local`)."),
    "data": (("bench",), "Datasets for the benches."),
    "delete": (("jobs",), "Stop jobs, free their GPUs, remove their state and logs (arena delete)."),
    "engine": (("engine",), "Choose where jobs run: the embedded engine (this host and ssh hosts), Slurm or "
                            "Kubernetes."),
    "env": (("bench",), "The experiment-environment table: servers, NICs, GPUs and links, OS, driver, CUDA, "
                        "NCCL, MPI, framework and package versions."),
    "get": (("jobs",), "Show a job: status, placement and its instances (arena get)."),
    "hold": (("queues",), "Keep waiting jobs from starting (Slurm's scontrol hold): each stays PENDING with "
                          "reason Held, out of the queue's line, until `ringleader release`."),
    "kube": (("kube",), "Run ringleader on Kubernetes: its scheduler, its node agent, their install manifests."),
    "list": (("jobs",), "List jobs (arena list) with their team queue and, for a waiting job, why it waits in "
                        "one word (REASON; `get` says it in full); -o wide adds priority, age, GPU ids, the "
                        "bottleneck link, restarts and who preempted whom."),
    "logs": (("jobs",), "Print a job instance's log (arena logs)."),
    "node": (("cluster",), "Label, cordon and uncordon nodes (kubectl's rules: changing a label needs "
                           "--overwrite)."),
    "predict": (("model",), "Predict images/s of a data-parallel job for the placement each policy picks (or one "
                            "given)."),
    "prune": (("jobs",), "Delete finished jobs older than --since (arena prune)."),
    "queue": (("queues",), "Team queues: GPU quotas, borrowing inside a cohort, fair share (as Kueue's "
                           "ClusterQueues)."),
    "release": (("queues",), "Put held jobs back in the queue's line (Slurm's scontrol release); one that fits "
                             "starts."),
    "simulate": (("sim",), "Simulate a job trace on a declared cluster under several placement policies."),
    "slurm": (("slurm",), "Slurm helpers (jobs run on Slurm with --engine slurm, or `ringleader engine use "
                          "slurm`)."),
    "state": (("state",), "Back up the state (jobs, cluster, events) and restore it."),
    "submit": (("jobs",), "Submit a training job (arena submit)."),
    "top": (("jobs", "cluster"), "Show what runs where (arena top)."),
    "topo": (("cluster",), "Print node topologies as `nvidia-smi topo -m` does; --png/--svg draw one node's GPUs, "
                           "NICs, link kinds and the job holding each GPU."),
    "update": (("queues",), "Change waiting jobs (Slurm's scontrol update JobId=... Priority=N): their priority, "
                            "which their place in line follows. A job that started keeps the priority it started "
                            "with."),
    "version": (("main",), "Print ringleader's version (arena version)."),
    "completion": (("main",), "Print the shell completion script: bash, zsh or fish (arena completion)."),
}  # fmt: skip
# The short names arena users type (arena ls / log / del).
ALIASES = {"ls": "list", "log": "logs", "del": "delete"}


class LazyGroup(click.Group):
    """The root group: imports a command's module when the command is looked up."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.loaded: set[str] = set()

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        cmd_name = ALIASES.get(cmd_name, cmd_name)
        for module in COMMANDS.get(cmd_name, ((), ""))[0]:
            if module not in self.loaded:
                self.loaded.add(module)
                # `version` and `completion` live here; every other command in its group's module
                name = __name__ if module == "main" else f"ringleader.cli.{module}"
                owner = sys.modules[name] if module == "main" else importlib.import_module(name)
                owner.register(self)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list from ``COMMANDS``, shortened as click shortens each command's help."""
        limit = formatter.width - 6 - max(len(name) for name in COMMANDS)
        rows = [(name, click.Command(name, help=text).get_short_help_str(limit))
                for name, (_, text) in sorted(COMMANDS.items())]  # fmt: skip
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="ringleader")
def cli() -> None:
    """ringleader: topology-aware gang scheduling, a local runtime and benchmarks for
    distributed deep-learning training.

    State lives in SQLite under ~/.ringleader (set RINGLEADER_HOME to move it).
    """


@click.command("version")
def version() -> None:
    """Print ringleader's version (arena version)."""
    click.echo(f"ringleader {__version__}")


@click.command("completion")
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the shell completion script: bash, zsh or fish (arena completion).

    \b
    source <(ringleader completion bash)     # this shell
    ringleader completion bash > /etc/bash_completion.d/ringleader
    """
    cls = get_completion_class(shell)
    assert cls is not None  # the choice above lists only shells click completes
    click.echo(cls(cli, {}, "ringleader", "_RINGLEADER_COMPLETE").source())


def register(group: click.Group) -> None:
    group.add_command(version)
    group.add_command(completion)


# click >= 8.2 raises this for a group given no subcommand (older versions print the help and exit).
NO_ARGS_IS_HELP: type[click.UsageError] | tuple[()] = getattr(click.exceptions, "NoArgsIsHelpError", ())


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; a RingleaderError becomes one line on stderr and its exit code."""
    if QUIET_INTERRUPT:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if sys.stdout is None:  # started with stdout closed (`ringleader list >&-`)
        click.echo("error: standard output is closed. To fix: run it with stdout open (a terminal, a file, a pipe)",
                   err=True)  # fmt: skip
        return 1
    stdout, sys.stdout = sys.stdout, PrintableStdout(sys.stdout)
    try:
        settings.check_all()  # a bad RINGLEADER_* value: one line before any command runs
        cli.main(args=argv, prog_name="ringleader", standalone_mode=False)
    except RingleaderError as exc:
        if settings.debug():
            raise
        click.echo(f"error: {printable(exc.one_line())}", err=True)
        return exc.exit_code
    except ModuleNotFoundError as exc:  # a package of an extra this install lacks (matplotlib, PIL, ...)
        missing = missing_extra(exc)
        if missing is None or settings.debug():
            raise
        click.echo(f"error: {missing.one_line()}", err=True)
        return missing.exit_code
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
    finally:
        sys.stdout = stdout
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
