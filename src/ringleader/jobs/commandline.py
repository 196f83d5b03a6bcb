"""Users' command lines, taken faithfully at submit: what each option becomes, or a refusal.

A gang's ranks, hosts and counts come from the placement, so the parts of a user's line that
say otherwise are either replaced (with a note saying so) or refused (one line, and the fix),
never dropped silently:

- ``mpirun``: -np/-n/-c must equal --workers; -H/--host/--hostfile/--machinefile are replaced by
  the placement (a note); mapping options that would put ranks elsewhere than the placement
  are refused; ``-x NAME=VALUE`` passes VALUE, and ``-x NAME`` the value of NAME where mpirun
  runs, as mpirun does: where the ranks share the submitter's machine, the submitter's value,
  recorded in the job at submit (an unset NAME is named in a note, as mpirun warns and passes
  nothing); in an image (``--image``, Kubernetes pods), the image's own value, not this shell's
  (the reference study's ``-x PATH`` forwards the launcher pod's PATH).
- ``horovodrun``: rewritten as the mpirun line horovodrun's MPI mode builds (-np from
  --workers, ``--allow-run-as-root --tag-output``, ``-bind-to none -map-by slot``, its tunables
  as HOROVOD_* variables, -x of the NCCL_*/HOROVOD_* variables where it runs), then taken as an
  mpirun line.
- ``torchrun`` / ``python -m torch.distributed.run|launch``: ringleader already starts one
  process per worker with torchrun's variables, so the line becomes the script itself (run as
  torchrun would run it), its process counts checked against --workers.
- ``deepspeed`` (DeepSpeed's launcher): the same, as its per-node launcher runs the script:
  ``python -u SCRIPT --local_rank=N ARGS`` per worker, its hosts and counts from the placement.

Engines then render the prepared line for their launchers; what they do with ``--image`` is
theirs (``jobs.support``: podman or docker on the embedded engine, the pods' image on
Kubernetes, refused on Slurm).
"""

from __future__ import annotations

import math
import os
import re
import shlex
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from ringleader.errors import UsageError
from ringleader.jobs.hints import count_of
from ringleader.jobs.line import (
    OWNED,
    CommandLine,
    interpreter_target,
    is_mpirun,
    option_words,
    read_line,
    scan_mpirun,
    split_option,
)
from ringleader.jobs.spec import JobSpec


def check_np(line: CommandLine, workers: int) -> None:
    """Refuse (exit 2) an mpirun line whose -np disagrees with --workers."""
    if line.np is None:
        return
    try:
        np_int = int(line.np)
    except ValueError:
        raise UsageError(f"mpirun -np {line.np!r} is not a number", "write -np <workers>") from None
    if np_int != workers:
        raise UsageError(
            f"mpirun -np {np_int} disagrees with --workers {workers}",
            f"use -np {workers} or drop -np (ringleader sets it)",
        )


# -- what the user typed ---------------------------------------------------------------------------

SHELL = "/bin/sh"
# Words a shell runs itself (no program of that name runs them as a shell would).
SHELL_BUILTINS = {"cd", "export", "source", ".", "set", "unset", "ulimit", "umask", "eval", "exec", "trap", "alias",
                  "pushd", "popd", "wait", "test", "[", "if", "for", "while", "case", "!", "{", "("}  # fmt: skip
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def read_command(words: Sequence[str], literal: bool = False) -> list[str]:
    """The job's argv from what the user typed: the words after ``--`` (``literal``) as they
    are, even one, or one quoted string split like a shell would (never run by one) - unless it
    holds shell syntax (``&&``, ``|``, ``>``, ``$VAR``, a glob, ``cd`` ...): then each rank runs
    it with ``/bin/sh -c``, as arena runs a job's command, and nothing of it is passed to a
    program as an argument."""
    if literal or len(words) != 1:
        argv = list(words)
    else:
        try:
            argv = shlex.split(words[0])
        except ValueError as exc:
            raise UsageError(f"cannot split the command: {exc}", "check its quotes") from None
        if argv and (shell_syntax(words[0]) or argv[0] in SHELL_BUILTINS or _ASSIGNMENT.match(argv[0])):
            argv = [SHELL, "-c", words[0]]
    if not argv:
        raise UsageError("no command given", "give the command as one quoted string or after --")
    return argv


def shell_syntax(text: str) -> str | None:
    """The first piece of shell syntax outside quotes (an operator, an expansion, a glob, a
    comment), or None when the text is plain words."""
    quote: str | None = None
    escaped = False
    word_start = True
    for i, ch in enumerate(text):
        if escaped:
            escaped, word_start = False, False
            continue
        if ch == "\\" and quote != "'":
            escaped = True
            continue
        if quote is not None:
            if ch == quote:
                quote = None
            elif quote == '"' and ch in "$`":
                return ch
            continue
        if ch in "'\"":
            quote, word_start = ch, False
            continue
        if ch in ";&|<>()":
            pair = text[i : i + 2]
            return pair if pair in ("&&", "||", ">>", "<<", ";;", "2>", "|&") else ch
        if ch in "$`*?[" or (word_start and ch in "~#"):
            return ch
        word_start = ch.isspace()
    return None


def is_shell_line(argv: Sequence[str]) -> bool:
    return len(argv) == 3 and argv[0] == SHELL and argv[1] == "-c"


# -- preparing a user's line ---------------------------------------------------------------------

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HOSTS = OWNED - {"np", "n", "c"}
# Mapping and ranking policies that fill hosts in another order than the placement's slots.
_OFF_PLACEMENT_POLICIES = {"node", "board", "ppr", "seq", "dist", "rankfile"}
_PER_NODE = {"N", "npernode", "npersocket", "bynode", "rf", "rankfile"}
# torch.distributed.launch passes each rank --local-rank=N right after the script: this program
# (run by the rank's own interpreter: nothing of ringleader is needed where the rank runs) puts
# it at position argv[1] of the line that follows and execs that line.
LOCAL_RANK_ARG = (
    "import os, sys; line = sys.argv[2:]; line.insert(int(sys.argv[1]), '--local-rank=' + os.environ['LOCAL_RANK']); "
    "os.execvp(line[0], line)"
)
# DeepSpeed's launcher spells it --local_rank.
DEEPSPEED_LOCAL_RANK_ARG = LOCAL_RANK_ARG.replace("'--local-rank='", "'--local_rank='")


@dataclass
class Prepared:
    """A user's line made ready to run: the argv that runs, the job's environment (with what
    -x asked for), and the notes telling the user what was replaced."""

    command: list[str]
    env: dict[str, str]
    notes: list[str] = field(default_factory=list)
    line: CommandLine | None = None  # the command, read (set by prepare)


def prepare(command: Sequence[str], workers: int, env: Mapping[str, str], environ: Mapping[str, str],
            name: str, in_image: bool = False) -> Prepared:  # fmt: skip
    """Normalise ``command`` for a job of ``workers`` ranks (see the module's docstring).

    ``env`` is the job's own -e variables, ``environ`` the submitter's environment. Idempotent:
    a prepared command prepares to itself. ``in_image``: the ranks run in a container image, whose
    own python3 runs a torchrun line's script (the submitter's interpreter is not there)."""
    out = Prepared(list(command), dict(env))
    if is_shell_line(out.command):
        _shell_line(out, workers)
    launcher = _launcher(out.command)
    if launcher == "horovodrun":
        out.command = _horovodrun(out, workers, {} if in_image else environ, name)
    elif launcher in ("torchrun", "deepspeed"):
        run = _torchrun if launcher == "torchrun" else _deepspeed
        out.command = run(out, workers, environ, name, in_image)
        inner = _launcher(_program_of(out.command))
        if inner is not None:  # e.g. torchrun --no-python horovodrun ...
            raise UsageError(f"{launcher} would start one {inner} per worker, {workers} {inner}s in all",
                             f"submit the {inner} line without {launcher}")  # fmt: skip
    out.line = read_line(out.command)
    if out.line.mpirun:
        _mpirun(out, out.line, workers, environ, name, in_image)
    return out


def prepare_spec(spec: JobSpec, environ: Mapping[str, str],
                 in_image: bool = False) -> tuple[JobSpec, CommandLine, list[str]]:  # fmt: skip
    """The spec as it will run (its command rewritten, -x values in its env), its command read,
    and the notes for the user. Always prepared from the line the user wrote."""
    written = spec.user_command or spec.command
    out = prepare(written, spec.workers, spec.env, environ, spec.name, in_image or spec.image is not None)
    assert out.line is not None
    user_command = list(written) if out.command != list(written) else None
    return replace(spec, command=out.command, env=out.env, user_command=user_command), out.line, out.notes


# -- mpirun ---------------------------------------------------------------------------------------


def _mpirun(out: Prepared, line: CommandLine, workers: int, environ: Mapping[str, str], name: str,
            in_image: bool) -> None:  # fmt: skip
    check_np(line, workers)
    inner = _launcher(line.program)
    if inner is not None:
        raise UsageError(
            f"mpirun would start one {inner} per rank, {workers} {inner}s in all",
            f"submit the {inner} line without mpirun (ringleader rewrites it onto the placement)",
        )
    hosts, unset, imaged = [], [], []
    for opt in line.options:
        value = opt.values[0] if opt.values else split_option(opt.token)[1] or ""
        if opt.name in _HOSTS:
            hosts.append(opt.text())
        elif opt.name == "app":
            raise UsageError(f"mpirun {opt.text()} takes ranks, hosts and programs from its app file",
                             "give the program on the line instead: ringleader places the ranks")  # fmt: skip
        elif opt.name in _PER_NODE or (
            opt.name in ("map-by", "rank-by") and value.split(":")[0].lower() in _OFF_PLACEMENT_POLICIES
        ):
            raise UsageError(
                f"mpirun {opt.text()} would put ranks elsewhere than the placement",
                "drop it: ringleader gives each host the slots the placement gives it (map-by slot)",
            )
        elif opt.name == "x" and in_image and "=" not in value:
            _check_export(value)
            imaged.append(value)  # mpirun in the image passes the image's value: nothing to record
        elif opt.name == "x" and not _export(value, out.env, environ):
            unset.append(value)
    if imaged:
        given = ", ".join(f"-x {n}" for n in imaged)
        out.notes.append(f"note: mpirun {given}: each rank gets the image's value, as mpirun passes its own "
                         "environment where it runs, not this shell's; write -x NAME=VALUE or -e NAME=VALUE to "
                         "pass a value")  # fmt: skip
    if unset:
        names = ", ".join(unset)
        out.notes.append(f"note: mpirun -x {' -x '.join(unset)}: {names} not set when submitted, so no rank gets it "
                         "(mpirun too would pass nothing)")  # fmt: skip
    if hosts:
        out.notes.append(f"note: mpirun {' '.join(hosts)} replaced by the placement; see `ringleader get {name}`")


def _shell_line(out: Prepared, workers: int) -> None:
    try:
        words = shlex.split(out.command[2], comments=True)
    except ValueError:
        words = out.command[2].split()
    for word in words:
        inner = _launcher([word.strip(";&|()")]) or ("torchrun" if word in _TORCH_MODULES else None)
        if inner is not None:
            raise UsageError(
                f"the shell line starts {inner}, and each of the {workers} ranks would run it: {workers} {inner}s",
                f"put {inner} first and the shell part in its program, e.g. {inner} ... sh -c 'cd data && python "
                "train.py', or give the line after -- without shell syntax",
            )
    out.notes.append(f"note: the command has shell syntax: each rank runs it with {SHELL} -c (as arena does)")


def _check_export(value: str) -> None:
    if not ENV_NAME.match(value.partition("=")[0]):
        raise UsageError(f"mpirun -x {value!r} is not NAME or NAME=VALUE", "write -x NAME or -x NAME=VALUE")


def _export(value: str, env: dict[str, str], environ: Mapping[str, str]) -> bool:
    """``-x NAME`` takes the submitter's value of NAME, ``-x NAME=VALUE`` that value; either
    lands in the job's environment, which every rank gets. False: NAME is set nowhere (mpirun
    warns and passes nothing; so do the ranks, and the caller says so in a note)."""
    key, sep, given = value.partition("=")
    _check_export(value)
    if sep:
        wanted = given
    elif key in environ:
        wanted = environ[key]
    else:
        return key in env  # unset here; the job's -e gives it, and mpirun would pass that value
    if key in env and env[key] != wanted:
        raise UsageError(f"-e {key}={env[key]} and mpirun -x {value} give {key} two values", "keep one of them")
    env[key] = wanted
    return True


# -- which launcher -------------------------------------------------------------------------------

_TORCH_MODULES = {"torch.distributed.run": "torchrun", "torch.distributed.launch": "launch"}


def gets_torchrun_defaults(spec: JobSpec) -> bool:
    """Whether a job's ranks get what torchrun sets only where the job did not (OMP_NUM_THREADS,
    NCCL's async error handling: ``runtime.rank.torchrun_defaults``): a program ringleader starts
    once per worker as torchrun would, not an mpirun line's ranks nor what DeepSpeed's launcher
    starts (neither sets them)."""
    return not spec.command_line().mpirun and _launcher(spec.user_command or spec.command) != "deepspeed"


def _launcher(argv: Sequence[str]) -> str | None:
    """'horovodrun', 'torchrun' (also python -m torch.distributed.run|launch), 'deepspeed', 'mpirun'
    or None."""
    if not argv:
        return None
    base = Path(argv[0]).name
    if base in ("horovodrun", "torchrun", "deepspeed") or is_mpirun(argv):
        return "mpirun" if is_mpirun(argv) else base
    return "torchrun" if _python_module(argv) in _TORCH_MODULES else None


def _python_module(argv: Sequence[str]) -> str | None:
    """The module of ``python [flags] -m MODULE ...``, else None."""
    if not Path(argv[0]).name.startswith("python"):
        return None
    target = interpreter_target(argv)
    return target.value if target is not None and target.kind == "module" else None


# -- horovodrun -----------------------------------------------------------------------------------

# horovodrun's tunables and the variables its launcher sets from them (its config_parser):
# option -> (variable, how the value is checked and written). Each value is checked as
# horovodrun checks it (argparse's int or float, then validate_config_args' ranges), so a value
# horovodrun would refuse is refused at submit, not passed on for the ranks to misread.
_MB = 1024 * 1024


def _hvd_int(low: int | None = 0, scale: int = 1) -> Callable[[str], str]:
    def write(value: str) -> str:
        try:
            number = int(value)
        except ValueError:
            raise ValueError("not a whole number") from None
        if low is not None and number < low:
            raise ValueError(f"must be >= {low}")
        return str(number * scale)

    return write


def _hvd_float(high: float | None = None) -> Callable[[str], str]:
    def write(value: str) -> str:
        try:
            number = float(value)
        except ValueError:
            raise ValueError("not a number") from None
        if not math.isfinite(number):  # inf or nan: a cycle that never comes, a noise beyond any range
            raise ValueError("must be a finite number")
        if number < 0 or (high is not None and number > high):
            raise ValueError(f"must be in [0, {high:g}]" if high is not None else "must be >= 0")
        return value

    return write


def _hvd_level(value: str) -> str:
    if value not in HOROVOD_LOG_LEVELS:
        raise ValueError(f"must be one of {', '.join(HOROVOD_LOG_LEVELS)}")
    return value


HOROVOD_LOG_LEVELS = ("TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "FATAL")
_HVD_TUNABLES: dict[str, tuple[str, Callable[[str], str]]] = {
    "fusion-threshold-mb": ("HOROVOD_FUSION_THRESHOLD", _hvd_int(scale=_MB)),
    "cycle-time-ms": ("HOROVOD_CYCLE_TIME", _hvd_float()),
    "cache-capacity": ("HOROVOD_CACHE_CAPACITY", _hvd_int()),
    "autotune-log-file": ("HOROVOD_AUTOTUNE_LOG", str),
    "autotune-warmup-samples": ("HOROVOD_AUTOTUNE_WARMUP_SAMPLES", _hvd_int()),
    "autotune-steps-per-sample": ("HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", _hvd_int()),
    "autotune-bayes-opt-max-samples": ("HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", _hvd_int()),
    "autotune-gaussian-process-noise": ("HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", _hvd_float(high=1.0)),
    "timeline-filename": ("HOROVOD_TIMELINE", str),
    "stall-check-warning-time-seconds": ("HOROVOD_STALL_CHECK_TIME_SECONDS", _hvd_int()),
    "stall-check-shutdown-time-seconds": ("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", _hvd_int()),
    "num-nccl-streams": ("HOROVOD_NUM_NCCL_STREAMS", _hvd_int()),
    "thread-affinity": ("HOROVOD_THREAD_AFFINITY", _hvd_int(low=None)),
    "gloo-timeout-seconds": ("HOROVOD_GLOO_TIMEOUT_SECONDS", _hvd_int()),
    "log-level": ("HOROVOD_LOG_LEVEL", _hvd_level),
}  # fmt: skip
# Flags -> (variable, value).
_HVD_SWITCHES = {
    "hierarchical-allreduce": ("HOROVOD_HIERARCHICAL_ALLREDUCE", "1"),
    "no-hierarchical-allreduce": ("HOROVOD_HIERARCHICAL_ALLREDUCE", "0"),
    "hierarchical-allgather": ("HOROVOD_HIERARCHICAL_ALLGATHER", "1"),
    "no-hierarchical-allgather": ("HOROVOD_HIERARCHICAL_ALLGATHER", "0"),
    "autotune": ("HOROVOD_AUTOTUNE", "1"),
    "timeline-mark-cycles": ("HOROVOD_TIMELINE_MARK_CYCLES", "1"),
    "no-stall-check": ("HOROVOD_STALL_CHECK_DISABLE", "1"),
    "stall-check": ("HOROVOD_STALL_CHECK_DISABLE", "0"),
    "mpi-threads-disable": ("HOROVOD_MPI_THREADS_DISABLE", "1"),
    "log-without-timestamp": ("HOROVOD_LOG_HIDE_TIME", "1"),
    "log-hide-timestamp": ("HOROVOD_LOG_HIDE_TIME", "1"),
    "tcp": ("NCCL_IB_DISABLE", "1"),
}  # fmt: skip
_HVD_ALIASES = {"np": "num-proc", "H": "hosts", "p": "ssh-port", "i": "ssh-identity-file",
                "prefix-timestamp": "prefix-output-with-timestamp"}  # fmt: skip
# Options horovodrun uses to reach and check hosts: the cluster file says how hosts are reached.
_HVD_IGNORED_VALUE = {"start-timeout", "ssh-port", "ssh-identity-file"}
_HVD_IGNORED_FLAGS = {"verbose", "disable-cache", "mpi"}
_HVD_ELASTIC = {"min-np", "min-num-proc", "max-np", "max-num-proc", "slots-per-host", "elastic-timeout",
                "reset-limit", "blacklist-cooldown-range", "host-discovery-script"}  # fmt: skip
_HVD_VALUE = {"num-proc", "hosts", "hostfile", "mpi-args", "binding-args", "output-filename", "network-interface",
              "network-interfaces", "config-file", *_HVD_TUNABLES, *_HVD_IGNORED_VALUE}  # fmt: skip
_HVD_FLAGS = {"prefix-output-with-timestamp", "gloo", "jsrun", "check-build", "cb", "version", "v",
              *_HVD_SWITCHES, *_HVD_IGNORED_FLAGS}  # fmt: skip
# What horovodrun's MPI mode puts on every Open MPI line (its mpi_run).
HOROVOD_MPI_FLAGS = ["-mca", "pml", "ob1", "-mca", "btl", "^openib"]
# What it starts every Open MPI line with (its mpi_run: ``basic_args``), as root or not.
HOROVOD_BASIC = ["--allow-run-as-root", "--tag-output"]
HOROVOD_BINDING = ["-bind-to", "none", "-map-by", "slot"]
# The submitter's variables horovodrun's line passes with -x that a job does not keep anyway.
HOROVOD_EXPORTED = ("NCCL_", "HOROVOD_")


def _options(argv: Sequence[str], values: set[str], flags: set[str], aliases: Mapping[str, str],
             what: str) -> tuple[list[tuple[str, str, str | None]], list[str]]:  # fmt: skip
    """Split a launcher's argv into ((token, canonical name, value), ...) and the program after
    them; an unknown option is refused (guessing its arity could run the wrong program)."""
    found: list[tuple[str, str, str | None]] = []
    i = 1
    while i < len(argv):
        token = argv[i]
        if token == "--":
            i += 1
            break
        if not token.startswith("-") or token == "-":
            break
        raw, inline = split_option(token) if token.startswith("--") else (token.lstrip("-"), None)
        name = aliases.get(raw, raw)
        name = aliases.get(name.replace("_", "-"), name.replace("_", "-"))
        if name in values:
            if inline is None:
                if i + 1 >= len(argv):
                    raise UsageError(f"{what} option {token} lacks its value", f"complete the {what} line")
                inline = argv[i + 1]
                i += 1
            # horovodrun's --blacklist-cooldown-range takes two (refused below anyway)
        elif name not in flags:
            raise UsageError(f"{what} option {token} is not known to ringleader",
                             f"drop it, or run the program without {what}")  # fmt: skip
        found.append((token, name, inline))
        i += 1
    return found, list(argv[i:])


def _horovodrun(out: Prepared, workers: int, environ: Mapping[str, str], name: str) -> list[str]:
    options, program = _options(out.command, _HVD_VALUE | _HVD_ELASTIC, _HVD_FLAGS, _HVD_ALIASES, "horovodrun")
    if not program:
        raise UsageError("the horovodrun line names no program", "end it with the program, e.g. python train.py")
    binding, extra, exports, ignored, hosts = list(HOROVOD_BINDING), [], [], [], []
    for token, opt, value in options:
        shown = token if value is None or "=" in token else f"{token} {value}"
        if opt in _HVD_ELASTIC:
            raise UsageError(f"elastic horovodrun ({token}) is not supported: a gang has a fixed size",
                             "drop the elastic options and give -np equal to --workers")  # fmt: skip
        if opt == "gloo" or opt == "jsrun":
            raise UsageError(f"horovodrun --{opt} is not supported: ringleader runs Horovod through mpirun",
                             f"drop --{opt} (Horovod then uses its MPI controller)")  # fmt: skip
        if opt == "config-file":
            raise UsageError("horovodrun --config-file is not read by ringleader",
                             "give its settings as horovodrun options instead")  # fmt: skip
        if opt in ("check-build", "cb", "version", "v"):
            raise UsageError(f"horovodrun {token} only prints and runs nothing", "run it directly, without ringleader")
        if opt == "num-proc":
            assert value is not None
            if count_of(value) != workers:
                raise UsageError(f"horovodrun -np {value} disagrees with --workers {workers}",
                                 f"use -np {workers} or drop -np (ringleader sets it)")  # fmt: skip
        elif opt in ("hosts", "hostfile"):
            hosts.append(shown)
        elif opt == "mpi-args":
            extra += _mpirun_options(value, "--mpi-args")
        elif opt == "binding-args":
            binding = _mpirun_options(value, "--binding-args")
        elif opt == "output-filename":
            extra += ["--output-filename", str(value)]
        elif opt == "prefix-output-with-timestamp":
            extra.append("--timestamp-output")
        elif opt in ("network-interface", "network-interfaces"):
            extra += ["-mca", "btl_tcp_if_include", str(value)]
            exports.append(f"NCCL_SOCKET_IFNAME={value}")
        elif opt in _HVD_TUNABLES:
            var, write = _HVD_TUNABLES[opt]
            try:
                exports.append(f"{var}={write(str(value))}")
            except ValueError as exc:
                raise UsageError(f"horovodrun {shown}: {exc}", f"give {token} a value horovodrun accepts") from None
        elif opt in _HVD_SWITCHES:
            var, flag = _HVD_SWITCHES[opt]
            exports.append(f"{var}={flag}")
        elif opt not in ("mpi",):
            ignored.append(shown)
    exports += sorted(k for k in environ if k.startswith(HOROVOD_EXPORTED) and ENV_NAME.match(k))
    env_args = [a for e in dict.fromkeys(exports) for a in ("-x", e)]
    line = ["mpirun", *HOROVOD_BASIC, "-np", str(workers), *binding, *HOROVOD_MPI_FLAGS, *extra, *env_args, *program]
    said = f"note: horovodrun runs as its MPI mode's line: {shlex.join(line)}"
    if hosts:
        said += f"; its {' '.join(hosts)} replaced by the placement (see `ringleader get {name}`)"
    if ignored:
        said += f"; ignored (hosts are reached as the cluster file says): {' '.join(ignored)}"
    out.notes.append(said)
    return line


def _mpirun_options(value: str | None, what: str) -> list[str]:
    """horovodrun's words for mpirun: options only, each with its values. A word that is none
    would stand where mpirun reads its program, and run instead of the user's."""
    words = _split(value, what)
    options, stray = scan_mpirun(["mpirun", *words])
    if stray:
        raise UsageError(f"horovodrun {what} {value!r} holds {stray[0]!r}, which is not an mpirun option "
                         "(mpirun would run it as the program)",
                         f"give {what} mpirun options only, e.g. {what} '--mca btl ^openib'")  # fmt: skip
    return option_words(options)


def _split(value: str | None, what: str) -> list[str]:
    try:
        return shlex.split(value or "")
    except ValueError as exc:
        raise UsageError(f"horovodrun {what} cannot be split: {exc}", "check its quotes") from None


# -- torchrun -------------------------------------------------------------------------------------

_TORCH_REPLACED = {"nnodes", "nproc-per-node", "node-rank", "master-addr", "master-port", "rdzv-backend",
                   "rdzv-endpoint", "rdzv-id", "rdzv-conf", "local-addr"}  # fmt: skip
_TORCH_IGNORED = {"max-restarts", "monitor-interval", "start-method", "event-log-handler", "role", "log-dir",
                  "redirects", "tee", "local-ranks-filter", "duplicate-stdout-filters", "duplicate-stderr-filters",
                  "logs-specs", "numa-binding", "signals-to-handle", "shutdown-timeout"}  # fmt: skip
# --standalone asks for a rendezvous on this host: the placement's rendezvous replaces it too.
_TORCH_REPLACED_FLAGS = {"standalone"}
_TORCH_FLAGS = {"module", "no-python", "run-path", "virtual-local-rank", "use-env", *_TORCH_REPLACED_FLAGS}
_TORCH_ALIASES = {"m": "module", "r": "redirects", "t": "tee"}


def _torchrun(out: Prepared, workers: int, environ: Mapping[str, str], name: str, in_image: bool) -> list[str]:
    argv = out.command
    kind = "torchrun"
    python: list[str] | None = None
    if Path(argv[0]).name != "torchrun":  # python [flags] -m torch.distributed.run|launch ...
        module = _python_module(argv)
        kind = _TORCH_MODULES[str(module)]
        at = next(i for i, t in enumerate(argv) if t == "-m" or t == f"-m{module}")
        python = [argv[0]]
        argv = [f"python -m {module}", *argv[at + (2 if argv[at] == "-m" else 1) :]]
    what = "torchrun" if kind == "torchrun" else "torch.distributed.launch"
    options, program = _options(argv, _TORCH_REPLACED | _TORCH_IGNORED, _TORCH_FLAGS, _TORCH_ALIASES, what)
    if not program:
        raise UsageError(f"the {what} line names no training script", "end it with the script, e.g. train.py")
    given = {opt: value for _, opt, value in options}
    if "use-env" in given and kind == "torchrun":
        raise UsageError("torchrun has no --use-env option", "drop it (torchrun always sets LOCAL_RANK)")
    nproc = _check_counts(given, workers, what)
    if "OMP_NUM_THREADS" not in environ and "OMP_NUM_THREADS" not in out.env and nproc > 1:
        out.env["OMP_NUM_THREADS"] = "1"  # torchrun's default when it starts several per node
    torchrun = out.command[0] if kind == "torchrun" else None
    if in_image and python is None:
        torchrun = IMAGE_PYTHON  # the image's own interpreter: the submitter's torchrun is not there
    run = _torch_program(program, given, environ, python, torchrun,
                         local_rank_arg=kind == "launch" and "use-env" not in given)  # fmt: skip
    replaced, ignored = _written(options, _TORCH_REPLACED | _TORCH_REPLACED_FLAGS), _written(options, _TORCH_IGNORED)
    out.notes.append(_replaced_note(what, run, workers, name, replaced, ignored))
    return run


def _written(options: Sequence[tuple[str, str, str | None]], names: set[str]) -> list[str]:
    """The options of ``names`` as the line wrote them (``--opt value`` or ``--opt=value``)."""
    return [f"{t} {v}" if v is not None and "=" not in t else t for t, o, v in options if o in names]


def _program_of(run: list[str]) -> list[str]:
    """The program a prepared torchrun or deepspeed line runs: itself, or what the --local-rank
    helper execs."""
    if run[1:2] == ["-c"] and run[2] in (LOCAL_RANK_ARG, DEEPSPEED_LOCAL_RANK_ARG):
        return run[4:]
    return run


def _replaced_note(what: str, run: list[str], workers: int, name: str, replaced: list[str], ignored: list[str]) -> str:
    """What a torchrun or deepspeed line became: the line each worker runs, and the launcher
    options the placement replaced or ringleader ignores."""
    shown, per_rank = shlex.join(run), ""
    if _program_of(run) is not run:  # shown as the rank runs it
        shown_argv = _program_of(run)
        shown_argv.insert(int(run[3]), "--local-rank=N" if run[2] == LOCAL_RANK_ARG else "--local_rank=N")
        shown, per_rank = shlex.join(shown_argv), " (N: the rank's LOCAL_RANK)"
    said = (f"note: {what} replaced: ringleader starts `{shown}`{per_rank} once per worker ({workers} in all) "
            "with torchrun's variables (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)")  # fmt: skip
    if replaced:
        said += f"; {' '.join(replaced)} taken from the placement (see `ringleader get {name}`)"
    if ignored:
        said += f"; ignored (a failed rank fails the job, logs are per instance): {' '.join(ignored)}"
    return said


def _check_counts(given: Mapping[str, str | None], workers: int, what: str) -> int:
    """torchrun's processes per node; nnodes x nproc-per-node must equal --workers when given."""
    nnodes, nproc = given.get("nnodes"), given.get("nproc-per-node")
    if nnodes is not None and ":" in nnodes:
        low, _, high = nnodes.partition(":")
        if low != high:
            raise UsageError(f"elastic {what} (--nnodes {nnodes}) is not supported: a gang has a fixed size",
                             "give --nnodes N, or drop it (ringleader takes the nodes from the placement)")  # fmt: skip
        nnodes = low
    if nnodes is not None and count_of(nnodes) is None:
        raise UsageError(f"{what} --nnodes {nnodes} is not a number", "give --nnodes N or drop it")
    if nproc is not None and count_of(nproc) is None:
        if nproc not in ("auto", "cpu", "gpu"):
            raise UsageError(f"{what} --nproc-per-node {nproc} is not a number", "give a number or drop it")
        return 2  # one per GPU or core: torchrun would count several
    if nnodes is None and nproc is None:
        return 2 if workers > 1 else 1
    total = int(nnodes or 1) * int(nproc or 1)
    if total != workers:
        raise UsageError(
            f"{what} would start {total} process(es) (--nnodes {nnodes or 1} x --nproc-per-node {nproc or 1}) "
            f"but --workers is {workers}",
            f"use --workers {total}, or drop --nnodes/--nproc-per-node (ringleader starts one per worker)",
        )
    return int(nproc or 1)


def _torch_program(program: list[str], given: Mapping[str, str | None], environ: Mapping[str, str],
                   python: list[str] | None, torchrun: str | None, local_rank_arg: bool,
                   adds_local_rank: str = LOCAL_RANK_ARG) -> list[str]:  # fmt: skip
    """What torchrun would start per process: ``python -u [-m] SCRIPT ARGS`` or, with
    --no-python, the program itself; launch without --use-env adds --local-rank=N (per rank,
    through ``adds_local_rank``: LOCAL_RANK_ARG, or DeepSpeed's spelling)."""
    script, args = program[0], program[1:]
    if "no-python" in given:
        if local_rank_arg:  # as torch.distributed.launch refuses it
            raise UsageError("--no-python needs --use-env (the program cannot take --local-rank)", "add --use-env")
        if "module" in given:
            raise UsageError("--no-python and --module cannot go together", "drop one of them")
        run = [script]
    else:
        interpreter = environ.get("PYTHON_EXEC") or (
            python[0] if python else _interpreter_of_launcher(torchrun, environ)
        )
        run = [interpreter, "-u", *(["-m"] if "module" in given else []), script]
    if local_rank_arg:
        return [run[0], "-c", adds_local_rank, str(len(run)), *run, *args]
    return [*run, *args]


# -- deepspeed ------------------------------------------------------------------------------------

# DeepSpeed's launcher (its runner's options): what the placement replaces, what does not apply to
# a gang whose ranks ringleader starts and logs, and what a fixed-size gang cannot do.
_DS_REPLACED = {"hostfile", "include", "exclude", "num-nodes", "num-gpus", "master-port", "master-addr", "launcher",
                "launcher-args", "ssh-port"}  # fmt: skip
_DS_REPLACED_FLAGS = {"force-multi", "no-ssh-check", "no-ssh"}
_DS_IGNORED = {"enable-each-rank-log", "bind-core-list", "comment"}
_DS_IGNORED_FLAGS = {"save-pid", "bind-cores-to-rank"}
_DS_REFUSED = {"min-elastic-nodes", "max-elastic-nodes", "autotuning"}
_DS_FLAGS = {"module", "no-python", "no-local-rank", "elastic-training", *_DS_REPLACED_FLAGS, *_DS_IGNORED_FLAGS}
_DS_ALIASES = {"H": "hostfile", "i": "include", "e": "exclude", "num-accelerators": "num-gpus"}


def _deepspeed(out: Prepared, workers: int, environ: Mapping[str, str], name: str, in_image: bool) -> list[str]:
    """A deepspeed line as its per-node launcher runs the script on each rank."""
    options, program = _options(out.command, _DS_REPLACED | _DS_IGNORED | _DS_REFUSED, _DS_FLAGS, _DS_ALIASES,
                                "deepspeed")  # fmt: skip
    if not program:
        raise UsageError("the deepspeed line names no training script", "end it with the script, e.g. train.py")
    given = {opt: value for _, opt, value in options}
    for token, opt, _ in options:
        if opt in ("elastic-training", "min-elastic-nodes", "max-elastic-nodes"):
            raise UsageError(f"elastic deepspeed ({token}) is not supported: a gang has a fixed size",
                             "drop the elastic options (ringleader starts --workers ranks)")  # fmt: skip
        if opt == "autotuning":
            raise UsageError("deepspeed --autotuning runs its own series of experiments, not one gang",
                             "tune outside ringleader, then submit the tuned configuration without it")  # fmt: skip
    _check_deepspeed_counts(given, workers)
    launcher = IMAGE_PYTHON if in_image else out.command[0]  # in an image, the image's python3
    if "no-python" in given and "module" in given:  # as deepspeed refuses them
        raise UsageError("deepspeed --no_python and --module cannot go together", "drop one of them")
    local_rank = "no-local-rank" not in given
    if "no-python" in given and local_rank:
        # deepspeed puts --local_rank=N after the program itself: a Python interpreter does it here
        interpreter = _interpreter_of_launcher(launcher, environ)
        run = [interpreter, "-c", DEEPSPEED_LOCAL_RANK_ARG, "1", *program]
    else:
        run = _torch_program(program, given, environ, None, launcher, local_rank_arg=local_rank,
                             adds_local_rank=DEEPSPEED_LOCAL_RANK_ARG)  # fmt: skip
    replaced = _written(options, _DS_REPLACED | _DS_REPLACED_FLAGS)
    ignored = _written(options, _DS_IGNORED | _DS_IGNORED_FLAGS)
    out.notes.append(_replaced_note("deepspeed", run, workers, name, replaced, ignored))
    return run


def _check_deepspeed_counts(given: Mapping[str, str | None], workers: int) -> None:
    """--num_nodes x --num_gpus must equal --workers where the line fixes both (without a
    hostfile or host filter, deepspeed runs on this one node)."""
    for opt in ("num-nodes", "num-gpus"):
        value = given.get(opt)
        if value is not None and count_of(value) is None:
            raise UsageError(f"deepspeed --{opt.replace('-', '_')} {value} is not a count", "give N > 0 or drop it")
    nodes, gpus = given.get("num-nodes"), given.get("num-gpus")
    on_hosts = any(k in given for k in ("hostfile", "include", "exclude"))
    if gpus is None or (nodes is None and on_hosts):
        return
    total = int(nodes or 1) * int(gpus)
    if total != workers:
        raise UsageError(
            f"deepspeed would start {total} process(es) (--num_nodes {nodes or 1} x --num_gpus {gpus}) "
            f"but --workers is {workers}",
            f"use --workers {total}, or drop --num_nodes/--num_gpus (ringleader starts one per worker)",
        )


IMAGE_PYTHON = "python3"  # found on the image's PATH


def _interpreter_of_launcher(torchrun: str | None, environ: Mapping[str, str]) -> str:
    """The Python the torchrun the user named runs with (its script's #! line: a path is that
    file, a bare name the first on the submitter's PATH), as torchrun starts its ranks with
    sys.executable; else the first python3 on the PATH."""
    if torchrun == IMAGE_PYTHON:
        return IMAGE_PYTHON
    path = environ.get("PATH", os.defpath)
    named = torchrun or "torchrun"
    found = named if "/" in named else shutil.which(named, path=path)
    if found:
        try:
            with open(found, "rb") as fh:
                first = fh.readline(4096).decode(errors="replace")
        except OSError:
            first = ""
        words = first[2:].split() if first.startswith("#!") else []
        if words and Path(words[0]).name == "env" and len(words) > 1:
            words = words[1:]
        if words and Path(words[0]).name.startswith("python"):
            return words[0]
    return shutil.which("python3", path=path) or shutil.which("python", path=path) or "python3"
