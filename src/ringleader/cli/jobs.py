"""Job commands, arena's names and layouts: submit mpi, get, list, logs, delete, prune, top job.

Parse and render only: every command calls ``ringleader.engines.embedded.engine.Runtime``.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import click

from ringleader.cli.arena_flags import SWITCHES_WITH_A_WORD, TRUTH_WORDS, read_arena_flags
from ringleader.cli.kube_options import kube_submit_options, read_kube_options
from ringleader.cli.output import (
    INDENT,
    console,
    duration,
    echo_raw,
    emit_data,
    key_values,
    output_option,
    refresh_option,
    refreshing,
    shared_group,
    table,
)
from ringleader.engines import ALL_NAMESPACES, ENGINES, chosen_engine, open_engine
from ringleader.engines.base import PreviousLogs
from ringleader.engines.embedded.engine import JobSpec, Runtime
from ringleader.engines.embedded.store import default_home
from ringleader.errors import NotFoundError, UsageError
from ringleader.jobs.commandline import SHELL, read_command
from ringleader.jobs.logfiles import instance_name, lines_since
from ringleader.jobs.queues import Preempted, read_preempted
from ringleader.jobs.spec import (
    TRAINERS,
    ContainerOptions,
    parse_container_user,
    parse_data,
    parse_duration,
    parse_size,
)
from ringleader.jobs.states import JobStatus
from ringleader.model import load_calibration
from ringleader.scheduler.types import RISKS

if TYPE_CHECKING:  # the runtime is imported by the commands that use it: `--help` stays quick
    from ringleader.engines import Engine
    from ringleader.engines.embedded.engine import JobView, Runtime, SubmitResult
    from ringleader.jobs.views import GpuUsage

F = TypeVar("F", bound=Callable[..., Any])
E = TypeVar("E", bound="Engine")


def engine_option(f: F) -> F:
    """`--engine`: which engine runs the command (default: RINGLEADER_ENGINE, else the one set
    with `ringleader engine use`, else embedded); `-n/--namespace`: the kubernetes engine's
    namespace for this command (arena's -n), kept in the click context for ``using_engine``."""
    f = click.option("-n", "--namespace", default=None, expose_value=False, is_eager=True, metavar="NS",
                     callback=_remember_namespace,
                     help="[kubernetes] The namespace of the job(s) (default: the context's).")(f)  # fmt: skip
    return click.option(
        "--engine", default=None, metavar="NAME", help=f"Where jobs run: {', '.join(sorted(ENGINES))}."
    )(f)


# arena's names for the one kind of job ringleader runs (its -T/--type on read commands)
# arena's job types as -T names them, and the kind of ringleader job each is.
JOB_TYPES = {"mpijob": "mpi", "mpi": "mpi", "mj": "mpi", "pytorchjob": "pytorch", "pytorch": "pytorch", "py": "pytorch"}


def job_type_option(f: F) -> F:
    """arena's `-T/--type TYPE` on the read commands: mpijob or pytorchjob, the jobs `submit mpi`
    and `submit pytorch` make; another type is refused in one line (no job of it exists)."""
    return click.option("-T", "--type", "job_type", default=None, expose_value=False, metavar="TYPE",
                        callback=_check_job_type,
                        help="arena's job type: mpijob or pytorchjob (only jobs of it).")(f)  # fmt: skip


def _check_job_type(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    del param
    if value is not None and value.lower() not in JOB_TYPES:
        raise UsageError(f"-T {value}: ringleader runs MPI and PyTorch jobs (mpijob, pytorchjob) only",
                         "drop -T, or give -T mpijob or -T pytorchjob")  # fmt: skip
    ctx.meta["ringleader.job_type"] = None if value is None else JOB_TYPES[value.lower()]


def _job_type() -> str | None:
    ctx = click.get_current_context(silent=True)
    return ctx.meta.get("ringleader.job_type") if ctx is not None else None


def of_type(jobs: Sequence[JobView]) -> list[JobView]:
    """The jobs of the type -T asks for (all without -T)."""
    kind = _job_type()
    return [j for j in jobs if kind is None or j.spec.kind == kind]


def typed(job: JobView) -> JobView:
    """The named job, if it is of the type -T asks for; else not found, as arena says."""
    kind = _job_type()
    if kind is not None and job.spec.kind != kind:
        raise NotFoundError(f"job {job.name!r} is of type {job.trainer.lower()}, not {TRAINERS[kind].lower()}",
                            f"drop -T, or give -T {job.trainer.lower()}")  # fmt: skip
    return job


def _remember_namespace(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    del param
    ctx.meta["ringleader.namespace"] = value


def _namespace() -> str | None:
    ctx = click.get_current_context(silent=True)
    return ctx.meta.get("ringleader.namespace") if ctx is not None else None


@contextmanager
def _opened(engine: E) -> Iterator[E]:
    """``engine`` closed after the command. Its notes (e.g. "no GPUs found", once, when the
    database is created) go to stderr only when the command succeeded, so a refused command
    prints exactly one line."""
    try:
        yield engine
    finally:
        engine.close()
    for note in engine.notes:
        click.echo(note, err=True)


def open_runtime(engine: str | None, operation: str, what: str) -> AbstractContextManager[Runtime]:
    """The embedded engine at RINGLEADER_HOME (or ~/.ringleader), for what only it keeps (the
    declared cluster, labels, finished jobs); refused in one line, before anything is opened or
    changed, when the engine chosen (--engine, RINGLEADER_ENGINE, `engine use`) is another."""
    home = default_home()
    name = chosen_engine(home, engine)
    if _namespace() is not None:
        raise UsageError(f"-n/--namespace does not apply to {what}", "leave -n out")
    if name != "embedded":
        other = open_engine(name, home, readonly=True)
        try:
            other.supports.require(operation, what)
        finally:
            other.close()

    return _opened(Runtime.open())


def using_engine(engine: str | None) -> AbstractContextManager[Engine]:
    """The engine a job command runs on: --engine, RINGLEADER_ENGINE, or the default."""
    home = default_home()
    opened = open_engine(chosen_engine(home, engine), home)
    namespace = _namespace()
    if namespace is not None:
        try:
            asked = "-A/--all-namespaces" if namespace == ALL_NAMESPACES else "-n/--namespace"
            opened.supports.require("kube_options", asked)
        except UsageError:
            opened.close()
            raise
        from ringleader.engines.kubernetes.engine import KubernetesEngine

        assert isinstance(opened, KubernetesEngine)  # the one engine with Kubernetes options
        opened.use_namespace(namespace)
    return _opened(opened)


def complete_jobs(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    """Shell completion of job names (through click's _RINGLEADER_COMPLETE): read only,
    no agent started."""
    del ctx, param

    try:
        with Runtime.open(readonly=True) as rt:
            return [v.name for v in rt.list_jobs() if v.name.startswith(incomplete)]
    except Exception:  # completion must never print a traceback into the shell
        return []


def when(ts: float | None) -> str:
    return datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S") if ts else "N/A"


def prediction_line(prediction: dict[str, Any] | None) -> str | None:
    """The "Prediction:" line of `get` and `submit --dry-run` when --model was given."""
    if not prediction:
        return None
    return prediction.get("summary") or f"unavailable: {prediction.get('error')}"


# -- submit ---------------------------------------------------------------------------------------


AFTER_DASHES = "ringleader.command_after_dashes"


class ArenaCommand(click.Command):
    """Reads a line as arena does: its ``--gputopology=true|false`` and ``--gang=true|false``
    spellings, the same with the value as a word of its own (``--gputopology true``), and flags
    after a command given as one quoted string (``"python train.py" --dry-run``)."""

    BOOL_FLAGS = SWITCHES_WITH_A_WORD
    TRUTH: ClassVar[dict[str, bool]] = {w: w in ("true", "1", "yes") for w in TRUTH_WORDS}

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        args = read_arena_flags(args, self._arity())
        out = []
        i = 0
        while i < len(args):
            arg = args[i]
            if arg == "--":  # the command's words follow, to be run exactly as they are
                ctx.meta[AFTER_DASHES] = True
                out += args[i:]
                break
            flag, sep, value = arg.partition("=")
            if flag in self.BOOL_FLAGS and not sep and i + 1 < len(args) and args[i + 1].lower() in self.TRUTH:
                sep, value = "=", args[i + 1]  # arena's `--gputopology true`: the word is the flag's value
                i += 1
            if sep and flag in self.BOOL_FLAGS:
                truth = value.strip().lower()
                if truth not in self.TRUTH:
                    raise click.BadParameter(f"{value!r} is not true or false", param_hint=flag)
                arg = flag if self.TRUTH[truth] else "--no-" + flag[2:]
            out.append(arg)
            i += 1
        return super().parse_args(ctx, self._flags_after_the_command(out))

    def _arity(self) -> dict[str, int]:
        """How many values each of this command's options takes."""
        arity: dict[str, int] = {}
        for param in self.params:
            if isinstance(param, click.Option):
                for name in (*param.opts, *param.secondary_opts):
                    arity[name] = 0 if param.is_flag or param.count else param.nargs
        return arity

    def _flags_after_the_command(self, args: list[str]) -> list[str]:
        """arena takes the command as one string and reads flags after it: a quoted command
        (one word with a space) followed only by this command's own options and their values has
        those options moved before it. Anything else is left for the usual reading."""
        arity = self._arity()

        def option_end(at: int) -> int | None:  # where the option at ``at`` and its values end
            name, inline, _ = args[at].partition("=")
            if name not in arity:
                return None
            return at + 1 + (0 if inline else arity[name])

        at = 0
        while at < len(args) and args[at].startswith("-") and args[at] != "-":
            end = option_end(at)
            if end is None or args[at] == "--":
                return args
            at = end
        if at >= len(args) or " " not in args[at].strip():
            return args
        command, rest, after = args[at], args[at + 1 :], at + 1
        while after < len(args):
            end = option_end(after) if args[after].startswith("-") else None
            if end is None or end > len(args):
                return args
            after = end
        return [*args[:at], *rest, command]


def parse_env(pairs: Sequence[str]) -> dict[str, str]:
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"-e {pair!r} is not NAME=VALUE", "write -e NAME=VALUE")
        env[key] = value
    return env


def parse_command(words: Sequence[str]) -> list[str]:
    """One quoted string (split like a shell would; run by /bin/sh only when it holds shell
    syntax) or the words after -- (as they are, one word included)."""
    return read_command(words, literal=click.get_current_context().meta.get(AFTER_DASHES, False))


TIME_LIMIT_HELP = ("Stop the job (SIGTERM, then SIGKILL after the job's grace, RINGLEADER_GRACE_S at submit) "
                   "and fail it after this long: 90s, 30m, 2h, 1h30m or seconds. Lets it start early on GPUs "
                   "reserved for a bigger job.")


START_HELP = ("When the gang starts if its best placement is busy: `now` on the free GPUs, `best` only on a "
              "placement as fast as its best, `finish` whichever the model predicts finishes first (the default "
              "with --run-time).")
RUN_TIME_HELP = ("How long the job trains on its best placement (your estimate): the queue weighs starting now "
                 "on slower GPUs against waiting for better ones by it.")
MAX_WAIT_HELP = "The longest it waits for better GPUs, from submit; then it starts on whatever fits."
RISK_HELP = ("How --start finish weighs predictions that have a likely range: `neutral` (default) waits where "
             "waiting wins as predicted, `averse` only where it wins at the pessimistic end of both ranges.")


def read_calibration(path: str | None) -> dict[str, Any] | None:
    """The calibration file's document, checked (a malformed one is one line naming it)."""
    if path is None:
        return None

    return load_calibration(path).as_dict()


def _duration(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    del ctx
    return None if value is None else parse_duration(value, param.opts[0])


def _shm_size(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    del ctx, param
    return None if value is None else parse_size(value)


def _data(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    del ctx, param
    return tuple(parse_data(v) for v in value)


def _container_user(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    del ctx, param
    return None if value is None else parse_container_user(value)


class SubmitGroup(click.Group):
    """arena's names for an MPI or PyTorch job; its other job kinds pointed at `submit mpi`, which runs them."""

    ALIASES: ClassVar[dict[str, str]] = {"mpijob": "mpi", "mj": "mpi", "pytorchjob": "pytorch", "py": "pytorch"}
    OTHER_KINDS: ClassVar[dict[str, str]] = {
        "tfjob": "a TensorFlow program", "tf": "a TensorFlow program", "horovod": "a horovodrun line",
        "horovodjob": "a horovodrun line", "etjob": "a horovodrun line", "deepspeedjob": "a deepspeed line",
        "deepspeed": "a deepspeed line",
    }  # fmt: skip

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.OTHER_KINDS:
            raise UsageError(
                f"ringleader runs every data-parallel job as a gang of MPI or PyTorch workers: `submit {cmd_name}` "
                "has no separate kind",
                f"use `ringleader submit mpi` with {self.OTHER_KINDS[cmd_name]} (it runs once per worker, "
                "with torchrun's and Open MPI's variables)",
            )
        return super().get_command(ctx, self.ALIASES.get(cmd_name, cmd_name))


@click.group("submit", cls=SubmitGroup)
def submit() -> None:
    """Submit a training job (arena submit).

    `submit mpi` (also `mpijob`, `mj`) runs every data-parallel job: mpirun, horovodrun,
    torchrun lines and plain programs. `submit pytorch` (also `pytorchjob`, `py`) runs a PyTorch
    program once per worker, as arena's pytorchjob does (on Kubernetes: a PyTorchJob)."""


# Every kind's options, in the order `--help` lists them: `submit mpi` and `submit pytorch` read a
# line alike on every engine.
SUBMIT_OPTIONS: tuple[Callable[[Any], Any], ...] = (
    click.option("--name", required=True, help="Job name (DNS-1123 label)."),
    click.option("--workers", type=int, default=1, show_default=True, help="Number of workers (ranks)."),
    click.option("--gpus", type=int, default=0, show_default=True, help="GPUs per worker."),
    click.option("--gputopology/--no-gputopology", default=False, help="Topology-aware placement (also =true|false)."),
    click.option("--gang/--no-gang", default=True, help="Accepted for compatibility: jobs are always gang-scheduled."),
    click.option("--priority", default="0", show_default=True, metavar="N|NAME",
                 help="Higher runs first; FIFO among equals. A name (arena's) is the pods' Kubernetes "
                      "PriorityClass, as -p gives it."),
    click.option("--queue", default=None, metavar="NAME",
                 help="The team queue it counts against (`ringleader queue list`): its quota, borrowing, fair share."),
    click.option("--hold", is_flag=True,
                 help="Submit it held (sbatch's --hold): it waits, reason Held, until `ringleader release NAME`."),
    click.option("--max-restarts", type=click.IntRange(0, 100), default=0, show_default=True,
                 help="Restart a failed gang this often (placed again; RINGLEADER_RESTARTS and "
                      "TORCHELASTIC_RESTART_COUNT count them), a node blamed for two failures cordoned."),
    click.option("-e", "--env", "env", multiple=True, metavar="NAME=VALUE", help="Environment variable (repeatable)."),
    click.option("--image", default=None,
                 help="Run each rank in this container image (podman or docker on this host)."),
    click.option("-d", "--data", "data", multiple=True, metavar="SRC:DST", callback=_data,
                 help="Mount SRC (a host path; on Kubernetes a PVC name) at DST in each rank's container "
                      "(repeatable)."),
    click.option("--shm-size", metavar="SIZE", callback=_shm_size,
                 help="Size of /dev/shm in each container: 1g, 512m."),
    click.option("--rdma", is_flag=True, help="Give each container /dev/infiniband and unlimited locked memory."),
    click.option("--image-pull-policy", type=click.Choice(["Always", "IfNotPresent", "Never"]), default=None,
                 help="When to pull --image: Always, IfNotPresent (default), Never (it must be there)."),
    click.option("--container-user", metavar="UID[:GID]", callback=_container_user,
                 help="Run the program in the container as UID[:GID], or `submitter` for your own."),
    click.option("--model", default=None, help="Model name (recorded; a hint for throughput predictions)."),
    click.option("--dry-run", is_flag=True, help="Print the placement plan; start and write nothing."),
    click.option("--time-limit", "time_limit_s", metavar="DURATION", callback=_duration, help=TIME_LIMIT_HELP),
    click.option("--start", type=click.Choice(["now", "best", "finish"]), default=None, help=START_HELP),
    click.option("--run-time", "run_time_s", metavar="DURATION", callback=_duration, help=RUN_TIME_HELP),
    click.option("--steps", type=click.IntRange(min=1), default=None,
                 help="Training steps the job runs: with --model, the model's step time on its best placement "
                      "gives its run time (as --run-time does)."),
    click.option("--max-wait", "max_wait_s", metavar="DURATION", callback=_duration, help=MAX_WAIT_HELP),
    click.option("--risk", type=click.Choice(RISKS), default=None, help=RISK_HELP),
    click.option("--calibration", "calibration_file", type=click.Path(dir_okay=False), default=None,
                 help="A calibration (`ringleader calibrate --out`) the queue prices this job's placements with "
                      "when it weighs its start or a preemption (default: the published rates)."),
    click.option("--preempt", is_flag=True, help="May stop preemptible jobs of lower priority to start (requeued)."),
    click.option("--preemptible/--non-preemptible", default=True, show_default=True,
                 help="Whether a job of higher priority with --preempt may stop and requeue this one."),
    click.option("--working-dir", "working_dir", default=None,
                 help="Where the ranks start (default: here; on Kubernetes, the image's)."),
    click.option("--shell", type=click.Choice(["sh", "bash"]), default="sh", show_default=True,
                 help="The shell a quoted command with shell syntax runs with on each rank (arena's)."),
    click.option("--config-file", "config_files", multiple=True, metavar="HOST_FILE:CONTAINER_FILE",
                 help="Mount this host's file at CONTAINER_FILE in each rank's --image container (arena's; "
                      "repeatable)."),
    click.option("--loglevel", type=click.Choice(["debug", "info", "warn", "warning", "error"]), default="info",
                 help="arena's: warn or error leave out the notes a submit prints (what the line became, a "
                      "better placement); debug and info print them."),
    kube_submit_options,
    click.option("--topology-required", metavar="LEVEL", help="Stay under one switch of this network level, or wait."),
    click.option("--topology-preferred", metavar="LEVEL", help="Prefer one switch of this level; spread if it must."),
    output_option("json", "yaml"),
    click.argument("command", nargs=-1, required=True),
    engine_option,
)  # fmt: skip


def submit_options(f: F) -> F:
    for option in reversed(SUBMIT_OPTIONS):
        f = option(f)
    return f


@submit.command("mpi", cls=ArenaCommand, context_settings={"allow_interspersed_args": False})
@submit_options
def submit_mpi(**options: Any) -> None:
    """Submit an MPI job: COMMAND is one quoted string (an `mpirun ... program` line or a plain
    program started once per worker, torchrun-style) or the words after `--`. A quoted string
    with shell syntax (`cd data && python train.py > out-$RANK.txt`) runs with /bin/sh -c on
    each rank, as arena runs a job's command.

    Each worker sees its job's GPUs on its node in CUDA_VISIBLE_DEVICES (on emulated nodes:
    RINGLEADER_VIRTUAL_GPUS, and no real GPU), plus RANK (numbered node by node), WORLD_SIZE,
    LOCAL_RANK, MASTER_ADDR, MASTER_PORT and the rest of torchrun's variables (OMP_NUM_THREADS=1
    where several ranks share a node and none was set). The job starts in the current directory
    and keeps running after this command exits; a job that does not fit yet waits (PENDING) and
    starts when GPUs free up.

    A horovodrun line runs as the mpirun line horovodrun would build, a torchrun line as its
    script once per worker; mpirun's -x NAME passes this shell's NAME. What the placement
    replaces (-H, --hostfile, torchrun's counts) is named in a note on stderr.

    \b
    ringleader submit mpi --name vgg --workers 4 --gpus 1 --gputopology=true \\
        "mpirun -np 4 -bind-to none -map-by slot python train.py"
    """
    _submit("mpi", **options)


@submit.command("pytorch", cls=ArenaCommand, context_settings={"allow_interspersed_args": False})
@submit_options
def submit_pytorch(**options: Any) -> None:
    """Submit a PyTorch job (arena's pytorchjob): COMMAND is the training program (`python
    train.py ...`, or a torchrun line), started once per worker with every variable torchrun
    sets (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, ..., OMP_NUM_THREADS=1 where several ranks
    share a node and none was set): the same gang, placement and options
    as `submit mpi`, on every engine. On Kubernetes it is a PyTorchJob (Kubeflow's Training
    Operator): each pod starts the program under torchrun, with no launcher and no sshd in the
    image. An mpirun or horovodrun line is refused: submit it with `submit mpi`.

    \b
    ringleader submit pytorch --name resnet --workers 4 --gpus 1 --gputopology=true \\
        -- python train.py --backend nccl
    """
    _submit("pytorch", **options)


def _submit(
    kind: str, name: str, workers: int, gpus: int, gputopology: bool, gang: bool, priority: str, queue: str | None,
    hold: bool, max_restarts: int, env: tuple[str, ...],
    image: str | None, data: tuple[tuple[str, str], ...], shm_size: int | None, rdma: bool,
    image_pull_policy: str | None, container_user: str | None, model: str | None, dry_run: bool,
    time_limit_s: float | None, start: str | None, run_time_s: float | None, max_wait_s: float | None,
    risk: str | None, steps: int | None, calibration_file: str | None, preempt: bool, preemptible: bool,
    working_dir: str | None, shell: str, config_files: tuple[str, ...], loglevel: str,
    topology_required: str | None, topology_preferred: str | None, output: str, command: tuple[str, ...],
    engine: str | None, **kube: Any,
) -> None:  # fmt: skip
    del gang
    engine_name = chosen_engine(default_home(), engine)
    rank, kube["kube_priority_class"] = read_priority(priority, kube["kube_priority_class"], engine_name)
    if kube["kube_retry"] is not None and engine_name != "kubernetes":
        raise UsageError(f"--retry is the Kubernetes launcher's backoffLimit, which the {engine_name} engine has not",
                         f"give --max-restarts {kube['kube_retry']}: a failed gang restarts, placed again, on every "
                         "engine")  # fmt: skip
    data = (*data, *config_mounts(config_files, image, engine_name))
    container = ContainerOptions(data, shm_size, rdma, image_pull_policy, container_user)
    spec = JobSpec(
        name=name, workers=workers, gpus_per_worker=gpus, command=with_shell(parse_command(command), shell),
        env=parse_env(env), topology_aware=gputopology, priority=rank, image=image, model=model,
        time_limit_s=time_limit_s, container=container, workdir=working_dir, kube=read_kube_options(kube),
        topology_required=topology_required, topology_preferred=topology_preferred, start=start,
        run_time_s=run_time_s, max_wait_s=max_wait_s, risk=risk, preempt=preempt, preemptible=preemptible,
        calibration=read_calibration(calibration_file), steps=steps, queue=queue, max_restarts=max_restarts,
        kind=kind, hold=hold,
    )  # fmt: skip
    with using_engine(engine) as rt:
        result = rt.submit(spec, dry_run=dry_run)
        if loglevel in ("warn", "warning", "error"):  # arena's levels: its notes are info
            rt.notes[:] = [n for n in rt.notes if not n.startswith("note:")]
    if dry_run and output == "yaml" and "manifests" in result.extra:
        click.echo(result.extra["manifests"], nl=False)  # what `kubectl apply -f -` takes
    elif output != "table":
        emit_data(result.to_dict(), output)
    elif dry_run:
        render_plan(result)
    else:
        render_submitted(result)


def read_priority(given: str, priority_class: str | None, engine: str) -> tuple[int, str | None]:
    """``--priority``: a number is the queue's order; a name is arena's meaning, the pods'
    Kubernetes PriorityClass (as -p/--priority-class), which only the kubernetes engine has."""
    try:
        return int(given), priority_class
    except ValueError:
        pass
    if engine != "kubernetes":
        raise UsageError(f"--priority {given!r} names a Kubernetes PriorityClass (arena's meaning), which the "
                         f"{engine} engine has none of",
                         "give a number instead (--priority 10: higher runs first, FIFO among equals)")  # fmt: skip
    if priority_class is not None and priority_class != given:
        raise UsageError(f"--priority {given} and -p {priority_class} name two PriorityClasses", "give one of them")
    return 0, given


def config_mounts(files: Sequence[str], image: str | None, engine: str) -> tuple[tuple[str, str], ...]:
    """arena's ``--config-file HOST_FILE:CONTAINER_FILE``: the host's file mounted in each rank's
    container, as ``-d`` mounts a host path (refused where there is no container to put it in, or
    no host file to mount: a pod mounts volumes)."""
    if not files:
        return ()
    if engine == "kubernetes":
        raise UsageError("--config-file mounts a file of this host, and pods mount volumes only",
                         "put the file in a PersistentVolumeClaim and give -d CLAIM:/container/dir")  # fmt: skip
    if image is None:
        raise UsageError("--config-file puts a file in each rank's container and this job has none (no --image)",
                         "without --image the ranks read this host's files: give the program the file's own path")
    mounts = []
    for text in files:
        host, _, container = text.rpartition(":")
        if not host or not os.path.isfile(host):
            raise UsageError(f"--config-file {text!r}: {host or text!r} is not a file here",
                             "write --config-file HOST_FILE:CONTAINER_FILE with an existing HOST_FILE")  # fmt: skip
        mounts.append(parse_data(f"{os.path.abspath(host)}:{container}"))
    return tuple(mounts)


def with_shell(command: list[str], shell: str) -> list[str]:
    """A command that runs through a shell (shell syntax in a quoted string) run by ``shell``,
    arena's --shell; any other command runs as it is, whatever the shell."""
    if shell != "sh" and command[:2] == [SHELL, "-c"]:
        return [shell, *command[1:]]
    return command


def render_plan(result: SubmitResult) -> None:
    plan = result.plan
    req = plan["request"]
    click.echo(f"Plan for job {plan['job']} (dry run: nothing was started or written)")
    click.echo(f"Request:     {req['workers']} worker(s) x {req['gpus_per_worker']} GPU(s), policy {plan['policy']}")
    click.echo(f"Result:      {plan['code']}")
    chosen = plan["chosen"]
    if chosen is None:
        click.echo(f"Pending:     {'; '.join(plan['reasons'])}")
        for node, why in plan["node_reasons"].items():
            click.echo(f"  {node}: {why}")
        return
    click.echo(f"Nodes:       {', '.join(chosen['nodes'])}")
    click.echo(f"Objective:   {_objective(chosen['objective'])}")
    click.echo(f"Bottleneck:  {chosen['bottleneck']}")
    runner = plan["runner_up"]
    if runner:
        click.echo(f"Runner-up:   {runner['describe']} ({_versus(chosen['objective'], runner['objective'])})")
    line = prediction_line(result.extra.get("prediction"))
    if line:
        click.echo(f"Prediction:  {line}")
    rows = [[w["index"], w["node"], ",".join(map(str, w["gpus"])) or "-"] for w in chosen["workers"]]
    console().print(table(["WORKER", "NODE", "GPU_IDS"], rows))


def _objective(obj: dict[str, float]) -> str:
    return ", ".join(f"{k}={v:g}" for k, v in obj.items())


def _versus(chosen: dict[str, float], runner: dict[str, float]) -> str:
    """Why the runner-up lost: the first objective term that differs (they compare in order),
    or that it tied on every term and the first in node order was kept."""
    lost = next((k for k in chosen if runner.get(k) != chosen[k]), None)
    if lost is None:
        return "tied on every objective term; the first in node order was kept"
    return f"lost on {lost}: {runner[lost]:g} vs {chosen[lost]:g}; objective {_objective(runner)}"


def render_submitted(result: SubmitResult) -> None:
    job, placement = result.job, result.decision.placement
    assert job is not None
    if job.status is JobStatus.RUNNING and placement is not None:
        click.echo(f"job {job.name!r} submitted: RUNNING on {placement.describe()}")
        click.echo(f"bottleneck link: {job.bottleneck}")
    else:
        click.echo(f"job {job.name!r} submitted: {job.status.value} ({job.reason})")
    click.echo(f"Run `ringleader get {job.name}` to check the job status, `ringleader logs {job.name}` for its logs")


# -- get / list / top job -------------------------------------------------------------------------


@click.command("get")
@click.argument("name", shell_complete=complete_jobs)
@output_option("json", "yaml", "wide")
@click.option("-e", "--events", "show_events", is_flag=True, help="Show the job's events.")
@click.option("-g", "--gpu", "--gpus", "show_gpus", is_flag=True,
              help="Each instance's GPU duty cycle and memory now (n/a: emulated node or not readable).")
@job_type_option
@engine_option
def get(name: str, output: str, show_events: bool, show_gpus: bool, engine: str | None) -> None:
    """Show a job: status, placement and its instances (arena get)."""
    with using_engine(engine) as runtime:
        job = typed(runtime.get(name))
        prediction = runtime.prediction(job) if job.spec.model else None
        usage = runtime.gpu_usage(name) if show_gpus else None
    if output in ("json", "yaml"):
        data = {**job.to_dict(), "prediction": prediction}
        if usage is not None:
            data["gpu_usage"] = {k: None if v is None else [u.to_dict() for u in v] for k, v in usage.items()}
        emit_data(data, output)
        return
    render_job(job, wide=output == "wide", events=show_events, prediction=prediction, usage=usage)


def duty_cycle(usage: tuple[GpuUsage, ...] | None) -> str:
    return "n/a" if usage is None else ",".join(f"{u.duty_cycle_pct:.0f}%" for u in usage)


def gpu_memory(usage: tuple[GpuUsage, ...] | None) -> str:
    if usage is None:
        return "n/a"
    return ",".join(f"{u.memory_used_mib:.0f}MiB/{u.memory_total_mib:.0f}MiB" for u in usage)


def render_job(job: JobView, wide: bool, events: bool, prediction: dict[str, Any] | None = None,
               usage: dict[str, tuple[GpuUsage, ...] | None] | None = None) -> None:  # fmt: skip
    lines: list[tuple[str, Any]] = [
        ("Name", job.name), ("Status", job.status.value), ("Priority", job.priority),
        *([("Queue", job.spec.queue)] if job.spec.queue else []), ("Trainer", job.trainer),
        ("Duration", duration(job.duration)),
        ("CreateTime", when(job.created_at)), ("EndTime", when(job.ended_at)),
    ]  # fmt: skip
    if job.placement and job.placement.get("chosen"):
        lines.append(("Placement", job.placement["chosen"]["describe"]))
        lines.append(("Bottleneck", job.bottleneck or "N/A"))
    if job.reason_code:
        lines.append(("ReasonCode", job.reason_code))
    if job.reason:
        lines.append(("Reason", job.reason))
    if job.restarts:
        preempted = [e.message for e in job.events if e.kind == "Preempted"]
        lines.append(("Restarts", f"{job.restarts}" + (f" (last preempted {preempted[-1]})" if preempted else "")))
    line = prediction_line(prediction)
    if line:
        lines.append(("Prediction", line))
    lines += list(job.endpoints)  # arena's "Tensorboard: http://..."
    key_values(lines)
    click.echo("\nInstances:")
    cols = ["NAME", "STATUS", "AGE", "IS_CHIEF", "GPU(Requested)", "NODE", "GPU_IDS"]
    if wide:
        cols += ["PID", "EXIT_CODE"]
    if usage is not None:
        cols += ["GPU(DutyCycle)", "GPU_MEMORY"]
    rows: list[list[Any]] = [["-" * len(c) for c in cols]]
    for inst in job.instances:
        age = time.time() - inst.started_at if inst.started_at else None  # AGE as kubectl's: since it began
        row = [inst.name, inst.status, duration(age), str(inst.is_chief).lower(), inst.gpu_requested,
               inst.node or "N/A", ",".join(map(str, inst.gpus)) or "-"]  # fmt: skip
        if wide:
            row += [inst.pid or "-", "-" if inst.exit_code is None else inst.exit_code]
        if usage is not None:
            row += [duty_cycle(usage.get(inst.name)), gpu_memory(usage.get(inst.name))]
        rows.append(row)
    console().print(table(cols, rows, indent=INDENT))  # indented like arena
    if events:
        click.echo("\nEvents:")
        # Plain lines, not a table: messages are long and must never be cut.
        pad = " " * INDENT  # indented like the Instances table above
        click.echo(f"{pad}{'TIME':<20} {'TYPE':<15} MESSAGE")
        for e in job.events:
            click.echo(f"{pad}{when(e.at):<20} {e.kind:<15} {e.message}")


LIST_COLUMNS = ["NAME", "STATUS", "TRAINER", "DURATION", "GPU(Requested)", "GPU(Allocated)", "NODE"]
# `list` only, after arena's columns: the team queue and why a job waits in one word (squeue's
# PARTITION and REASON; the words in docs/queues.md, the prose in `get`).
QUEUE_COLUMNS = ["QUEUE", "REASON"]
# -o wide, as kubectl's: what the scheduler decided, beside the columns above.
WIDE_COLUMNS = ["PRIORITY", "AGE", "GPU_IDS", "BOTTLENECK"]
# `list -o wide` only: restarts (preemptions and failures), and who preempted whom.
PREEMPTION_COLUMNS = ["RESTARTS", "PREEMPTION"]


def gpu_ids(job: JobView) -> str:
    """The placement's GPUs as node:ids, e.g. "n1:0,1 n2:3"."""
    chosen = (job.placement or {}).get("chosen")
    if not chosen:
        return "-"
    return " ".join(f"{w['node']}:{','.join(map(str, w['gpus'])) or '-'}" for w in chosen["workers"])


def job_row(job: JobView, wide: bool, first: str = "duration", queue: bool = False) -> list[Any]:
    span = duration(job.duration) if first == "duration" else duration(job.age)
    row: list[Any] = [job.name, job.status.value, job.trainer, span, job.gpus_requested, job.gpus_allocated,
                      ",".join(job.nodes) or "N/A"]  # fmt: skip
    if queue:
        row += [job.queue, job.reason_code or "-"]
    if wide:
        row += [job.priority, duration(job.age), gpu_ids(job), job.bottleneck or "-"]
    return row


@click.command("list")
@output_option("json", "yaml", "wide")
@click.option("-A", "--all-namespaces", "--allNamespaces", "all_namespaces", is_flag=True,
              help="[kubernetes] Jobs of every namespace (arena's, kubectl's).")
@click.option("--queue", "in_queue", default=None, metavar="NAME",
              help="Only the jobs of this team queue (`default`: those submitted without --queue).")
@job_type_option
@engine_option
def list_jobs(output: str, all_namespaces: bool, in_queue: str | None, engine: str | None) -> None:
    """List jobs (arena list) with their team queue and, for a waiting job, why it waits in one
    word (REASON; `get` says it in full); -o wide adds priority, age, GPU ids, the bottleneck
    link, restarts and who preempted whom."""
    if all_namespaces:
        if _namespace() is not None:
            raise UsageError("-A and -n cannot go together", "give -A for every namespace, or -n NS for one")
        click.get_current_context().meta["ringleader.namespace"] = ALL_NAMESPACES
    wide = output == "wide"
    with using_engine(engine) as rt:
        jobs = [j for j in of_type(rt.list_jobs()) if in_queue is None or j.queue == in_queue]
        preempted = {j.name: last_preempted(rt, j.name) for j in jobs if wide and j.restarts}
    if output in ("json", "yaml"):
        emit_data([j.to_dict() for j in jobs], output)
        return
    cols = (["NAMESPACE"] if all_namespaces else []) + LIST_COLUMNS + QUEUE_COLUMNS
    cols += [*WIDE_COLUMNS, *PREEMPTION_COLUMNS] if wide else []
    rows = [([j.namespace or "-"] if all_namespaces else []) + job_row(j, wide, queue=True)
            + ([j.restarts, preemption_cell(j.name, preempted)] if wide else []) for j in jobs]  # fmt: skip
    console().print(table(cols, rows))


def last_preempted(rt: Engine, name: str) -> Preempted | None:
    """Job ``name``'s last preemption, read from its events (a list reads none); None if it never
    was preempted, or is gone since the list was read."""
    try:
        events = rt.get(name).events
    except NotFoundError:
        return None
    said = [read_preempted(e.message) for e in events if e.kind == "Preempted"]
    return said[-1] if said else None


def preemption_cell(name: str, preempted: Mapping[str, Preempted | None]) -> str:
    """`list -o wide`'s PREEMPTION: who last preempted job ``name`` and why, and whom it stopped
    to start, at the images/s the placement they freed was predicted to give."""
    mine = preempted.get(name)
    said = [f"by {mine.by} ({mine.why})"] if mine else []
    stopped = {victim: p for victim, p in preempted.items() if p is not None and p.by == name}
    if stopped:
        speeds = {p.images_per_s for p in stopped.values() if p.images_per_s is not None}
        said.append(f"stopped {','.join(stopped)}" + (f" for {max(speeds):.0f}/s" if speeds else ""))
    return "; ".join(said) or "-"


@click.command("job")
@click.argument("name", required=False, shell_complete=complete_jobs)
@output_option("json", "yaml", "wide")
@refresh_option
@click.option("-i", "--instance", default=None, help="Only this instance of the job (arena's).")
@job_type_option
@engine_option
def top_job(name: str | None, output: str, refresh: float | None, instance: str | None, engine: str | None) -> None:
    """Jobs with their GPUs and nodes, or one job's instances and GPU ids (arena top job).
    AGE is the time since each job was created, as kubectl's.

    The footer counts GPUs held by running jobs / GPUs asked for by running and waiting jobs."""
    if instance is not None and not name:
        raise UsageError("-i/--instance needs the job's NAME", "give `ringleader top job NAME -i INSTANCE`")
    refreshing(refresh, lambda: _draw_top_job(name, output, engine, instance))


def _draw_top_job(name: str | None, output: str, engine: str | None, instance: str | None = None) -> None:
    with using_engine(engine) as rt:
        jobs = [typed(rt.get(name))] if name else of_type(rt.list_jobs())
        usage = rt.gpu_usage(name) if name else {}
    if instance is not None:  # as `logs -i` reads it: the full name, or `worker-1` for JOB-worker-1
        chosen = instance_name(jobs[0], instance)
        jobs = [dataclasses.replace(jobs[0], instances=tuple(i for i in jobs[0].instances if i.name == chosen))]
    if output in ("json", "yaml"):
        emit_data([j.to_dict() for j in jobs], output)
        return
    if name:
        render_top_job(jobs[0], usage)
        return
    wide = output == "wide"
    cols = ["NAME", "STATUS", "TRAINER", "AGE", "GPU(Requested)", "GPU(Allocated)", "NODE"]
    cols += [c for c in WIDE_COLUMNS if c != "AGE"] if wide else []
    rows = [job_row(j, False, first="age") + ([j.priority, gpu_ids(j), j.bottleneck or "-"] if wide else [])
            for j in jobs]  # fmt: skip
    console().print(table(cols, rows))
    allocated = sum(j.gpus_allocated for j in jobs)
    requested = sum(j.gpus_requested for j in jobs if not j.status.is_terminal())
    click.echo(f"\nTotal Allocated/Requested GPUs of Training Jobs: {allocated}/{requested}")


def render_top_job(job: JobView, usage: dict[str, tuple[GpuUsage, ...] | None]) -> None:
    key_values([
        ("Name", job.name), ("Status", job.status.value), ("Trainer", job.trainer), ("Age", duration(job.age)),
        ("GPU(Requested)", job.gpus_requested), ("GPU(Allocated)", job.gpus_allocated),
        ("Node", ",".join(job.nodes) or "N/A"),
    ])  # fmt: skip
    click.echo("\nInstances:")
    cols = ["NAME", "STATUS", "NODE", "GPU(Allocated)", "GPU_IDS", "GPU(DutyCycle)", "GPU_MEMORY"]
    rows: list[list[Any]] = [["-" * len(c) for c in cols]]
    rows += [[i.name, i.status, i.node or "N/A", len(i.gpus), ",".join(map(str, i.gpus)) or "-",
              duty_cycle(usage.get(i.name)), gpu_memory(usage.get(i.name))] for i in job.instances]  # fmt: skip
    console().print(table(cols, rows, indent=INDENT))


# -- logs / delete / prune ------------------------------------------------------------------------


@click.command("logs")
@click.argument("name", shell_complete=complete_jobs)
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines until the job ends.")
@click.option("-t", "--tail", type=int, default=None, help="Only the last N lines.")
@click.option("-i", "--instance", default=None, help="Instance name (default: the chief).")
@click.option("--timestamps", is_flag=True, help="Prefix each line with its time (RFC 3339, UTC).")
@click.option("--since", default=None, help="Only lines newer than this: 30s, 10m, 1h30m (arena's).")
@click.option("--since-time", default=None, help="Only lines from this RFC 3339 time on, e.g. 2026-11-24T15:00:00Z.")
@click.option("-p", "--previous", is_flag=True,
              help="The job's previous run, before it was preempted or restarted and requeued (kubectl's).")
@job_type_option
@engine_option
def logs(name: str, follow: bool, tail: int | None, instance: str | None, timestamps: bool, since: str | None,
         since_time: str | None, previous: bool, engine: str | None) -> None:  # fmt: skip
    """Print a job instance's log (arena logs)."""
    if tail is not None and tail < 0:
        raise UsageError(f"--tail must be >= 0, got {tail}", "give a number of lines")
    cutoff = since_cutoff(since, since_time)
    if previous and (follow or cutoff is not None):
        raise UsageError("--previous shows a run that has ended: it takes no -f, --since or --since-time",
                         "leave them out")  # fmt: skip
    with using_engine(engine) as rt:
        if _job_type() is not None:
            typed(rt.get(name))
        if previous:
            rt.supports.require("previous_logs", "--previous")
            assert isinstance(rt, PreviousLogs)
            echo_raw(rt.previous_logs(name, instance, tail, timestamps))
            return
        if cutoff is not None:  # read with the stamps, keep what is recent enough
            read = rt.follow(name, instance, None, True) if follow else [rt.logs(name, instance, None, True)]
            for chunk in lines_since(read, cutoff, timestamps, tail):
                echo_raw(chunk)  # the program's own output, as it wrote it (kubectl logs)
            return
        if not follow:
            if instance is None:
                _lead_with_the_failure(rt, name, timestamps)
            echo_raw(rt.logs(name, instance, tail, timestamps))
            return
        job = rt.get(name)
        if not job.status.is_terminal() and job.status is not JobStatus.RUNNING:  # silence would look hung
            click.echo(f"job {name} is {job.status.value} ({job.reason or 'not placed yet'}): its log follows once "
                       "it starts; Ctrl-C stops waiting", err=True)  # fmt: skip
        for chunk in rt.follow(name, instance, tail, timestamps):
            echo_raw(chunk)


FAILURE_LINES = 20  # of the failing instance, before a failed job's chief log


def _lead_with_the_failure(rt: Any, name: str, timestamps: bool) -> None:
    """A failed job whose root cause is not its chief: that instance's last lines first (the
    chief, an mpirun launcher, often said nothing), each part named on stderr."""
    job = rt.get(name)
    if job.status is not JobStatus.FAILED:
        return
    failed = [i for i in job.instances if i.exit_code not in (None, 0)]
    chief = next((i for i in job.instances if i.is_chief), None)
    if not failed or chief is None:
        return
    root = min(failed, key=lambda i: (i.ended_at if i.ended_at is not None else float("inf"), i.is_chief))
    if root.is_chief:
        return
    click.echo(f"==> {name} failed at {root.name} (exit code {root.exit_code}); its last {FAILURE_LINES} lines "
               f"(all of them: `ringleader logs {name} -i {root.name}`):", err=True)  # fmt: skip
    echo_raw(rt.logs(name, root.name, FAILURE_LINES, timestamps))
    sys.stdout.flush()  # its lines before the next header, on a terminal showing both
    click.echo(f"==> {chief.name}, the chief:", err=True)


@click.command("delete")
@click.argument("names", nargs=-1, required=True, shell_complete=complete_jobs)
@click.option("--now", is_flag=True, help="SIGKILL every process at once, with no grace period to checkpoint.")
@job_type_option
@engine_option
def delete(names: tuple[str, ...], now: bool, engine: str | None) -> None:
    """Stop jobs, free their GPUs, remove their state and logs (arena delete).

    Every rank gets SIGTERM (on Slurm: scancel's, forwarded by Slurm), then the job's grace
    (RINGLEADER_GRACE_S when it was submitted, default 5 s) to write a checkpoint and exit, then
    SIGKILL; --now kills at once."""
    with using_engine(engine) as rt:
        if _job_type() is not None:  # every one of them, before any is stopped
            for name in names:
                typed(rt.get(name))
        gone = rt.delete(list(dict.fromkeys(names)), now=now)
    for name in gone:
        click.echo(f"job {name!r} deleted")


_SPAN = re.compile(r"(\d+)([smhdw])")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_span(text: str, option: str = "--since") -> float:
    """'90s', '10m', '1h30m', '2d' -> seconds."""
    parts = _SPAN.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text.strip():
        raise UsageError(f"{option} {text!r} is not a duration", "write e.g. 30m, 1h, 2d or 1h30m")
    return float(sum(int(n) * _UNIT[u] for n, u in parts))


def since_cutoff(since: str | None, since_time: str | None) -> float | None:
    """--since / --since-time as seconds since the epoch (None: the whole log)."""
    if since and since_time:
        raise UsageError("--since and --since-time both given", "give one of them")
    if since:
        return time.time() - parse_span(since, "--since")
    if not since_time:
        return None
    try:
        at = datetime.fromisoformat(since_time)
    except ValueError:
        at = None
    if at is None or at.tzinfo is None:
        raise UsageError(f"--since-time {since_time!r} is not an RFC 3339 time", "write e.g. 2026-11-24T15:00:00Z")
    return at.timestamp()


@click.command("prune")
@click.option("-s", "--since", required=True, help="Delete finished jobs that ended longer ago than this (1h, 2d).")
@engine_option
def prune(since: str, engine: str | None) -> None:
    """Delete finished jobs older than --since (arena prune)."""
    with open_runtime(engine, "prune", "`prune`") as rt:
        gone = rt.prune(parse_span(since))
    for name in gone:
        click.echo(f"job {name!r} deleted")
    if not gone:
        click.echo("no finished jobs to prune")


def top_group(cli: click.Group) -> click.Group:
    """The `top` group shared by `top job` and `top node`."""
    return shared_group(cli, "top", "Show what runs where (arena top).")


def register(cli: click.Group) -> None:
    for command in (submit, get, list_jobs, logs, delete, prune):
        cli.add_command(command)
    top_group(cli).add_command(top_job)
