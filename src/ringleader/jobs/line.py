"""A command line read once, into one typed value every check and launcher reads.

``read_line`` takes an argv apart: an Open MPI ``mpirun`` line into its options (each with its
values) and its program, any other line as a program started once per worker. The value is
kept with the job (``JobSpec.line``), so whoever launches it reads it instead of parsing the
line again; ``commandline`` prepares users' lines (horovodrun, torchrun, shell lines) into one.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from ringleader.errors import UsageError

MPI_LAUNCHERS = ("mpirun", "mpiexec", "orterun")


# Open MPI options that take one value (all others are taken as flags); --mca takes two.
TWO_VALUES = {"mca", "gmca"}
ONE_VALUE = {
    "np", "n", "c", "x", "map-by", "bind-to", "rank-by", "wdir", "wd", "path", "prefix",
    "output-filename", "npernode", "npersocket", "cpus-per-proc", "cpus-per-rank", "cpu-set",
    "tune", "am", "launch-agent", "report-bindings-file", "timeout", "stdin", "display-map-file",
    "N", "ppr", "max-vm-size", "merge-stderr-to-stdout-file", "app", "preload-files",
    "set-cwd-to-session-dir", "tmpdir", "report-uri", "report-pid", "xml-file", "debugger",
    "H", "host", "hostfile", "machinefile", "default-hostfile", "rf", "rankfile",
}  # fmt: skip
OWNED = {"np", "n", "c", "H", "host", "hostfile", "machinefile", "default-hostfile"}
NP_OPTIONS = {"np", "n", "c"}


def is_mpirun(argv: Sequence[str]) -> bool:
    return bool(argv) and Path(argv[0]).name in MPI_LAUNCHERS


def split_option(token: str) -> tuple[str, str | None]:
    name = token.lstrip("-")
    if "=" in name and token.startswith("--"):
        key, value = name.split("=", 1)
        return key, value
    return name, None


@dataclass(frozen=True)
class MpiOption:
    token: str  # as written, e.g. "-H" or "--host=a:2"
    name: str  # without its dashes, e.g. "H", "host"
    values: tuple[str, ...]  # the values that follow it (none when given inline: --host=a:2)

    def text(self) -> str:
        return shlex.join([self.token, *self.values])


class PythonTarget(NamedTuple):
    """What a ``python ...`` line runs: a script file, code given with -c, or a module (-m)."""

    kind: str  # "script", "code" or "module"
    value: str  # the script as written, the code, or the module's name


def interpreter_target(argv: Sequence[str]) -> PythonTarget | None:
    """The script, code or module that ``argv``, a Python interpreter's line (the caller knows
    its first word is one), runs after the interpreter's own flags; None when it names none of
    them (stdin, the REPL)."""
    words = iter(argv[1:])
    for word in words:
        for flag, kind in (("-c", "code"), ("-m", "module")):
            if word == flag:
                value = next(words, None)
                return PythonTarget(kind, value) if value is not None else None
            if word.startswith(flag) and not word.startswith("--"):
                return PythonTarget(kind, word[len(flag) :])
        if word == "-":
            return None
        if word in ("-W", "-X", "-Q"):
            next(words, None)
        elif not word.startswith("-"):
            return PythonTarget("script", word)
    return None


def scan_mpirun(argv: Sequence[str]) -> tuple[list[MpiOption], list[str]]:
    """An mpirun line's options (each with its values) and the program it runs: the one walk
    over an mpirun line that every reader of one uses."""
    options: list[MpiOption] = []
    i = 1
    while i < len(argv):
        token = argv[i]
        if not token.startswith("-") or token == "-":
            break
        name, inline = split_option(token)
        count = 0 if inline is not None else 2 if name in TWO_VALUES else 1 if name in ONE_VALUE else 0
        values = tuple(argv[i + 1 : i + 1 + count])
        if len(values) < count:
            raise UsageError(f"mpirun option {token} lacks its value", "complete the mpirun line")
        options.append(MpiOption(token, name, values))
        i += 1 + count
    return options, list(argv[i:])


def option_words(options: Sequence[MpiOption]) -> list[str]:
    """Options as the argv words they were written as."""
    return [word for o in options for word in (o.token, *o.values)]


# Options that map ranks onto hosts. Where ranks go is the placement's (a hostfile in rank order,
# read by Open MPI's sequential mapper), so the launchers that write one drop these.
MAPPING_OPTIONS = frozenset({"map-by", "rank-by", "npernode", "npersocket", "ppr", "N"})


def mca_parameter(option: MpiOption) -> str | None:
    """The parameter a ``--mca NAME VALUE`` option sets, else None."""
    return option.values[0] if option.name in ("mca", "gmca") and len(option.values) == 2 else None


def mca_values(options: Sequence[MpiOption]) -> dict[str, str]:
    """The ``--mca NAME VALUE`` settings among ``options``."""
    return {o.values[0]: o.values[1] for o in options if mca_parameter(o) is not None}


def root_option(options: Sequence[MpiOption], as_root: bool) -> list[str]:
    """``--allow-run-as-root`` where mpirun runs as root (Open MPI refuses to start then without
    it) and the line does not say it already."""
    return ["--allow-run-as-root"] if as_root and not any(o.name == "allow-run-as-root" for o in options) else []


@dataclass(frozen=True)
class CommandLine:
    """A prepared command line, read once: every check and every engine's launcher reads this.

    ``mpirun`` lines keep their options (``options``, ``kept``: those the placement does not
    own) and the program they run; any other line is a program started once per worker."""

    argv: tuple[str, ...]
    mpirun: bool
    options: tuple[MpiOption, ...]
    program: tuple[str, ...]
    np: str | None  # the mpirun line's own -np, if given

    @property
    def kept_options(self) -> list[MpiOption]:
        """The mpirun options ringleader passes on: all but -np and the host options."""
        return [o for o in self.options if o.name not in OWNED]

    @property
    def kept(self) -> list[str]:
        """``kept_options`` as argv words."""
        return option_words(self.kept_options)

    @property
    def head(self) -> list[str]:
        """mpirun and its options as written (the line minus its program)."""
        return list(self.argv[: len(self.argv) - len(self.program)])


def read_line(argv: Sequence[str]) -> CommandLine:
    """The one reading of a command line; a malformed mpirun line is refused (exit 2)."""
    if not argv:
        raise UsageError("no command given", "give the command as one quoted string or after --")
    if not is_mpirun(argv):
        return CommandLine(tuple(argv), False, (), tuple(argv), None)
    options, program = scan_mpirun(argv)
    if not program:
        raise UsageError("the mpirun line names no program", "end it with the program to run, e.g. python train.py")
    if ":" in program:
        raise UsageError("MPMD mpirun lines (with ':') are not supported", "run one program per job")
    np_value = None
    for opt in options:
        if opt.name in NP_OPTIONS:
            np_value = opt.values[0] if opt.values else split_option(opt.token)[1]
    return CommandLine(tuple(argv), True, tuple(options), tuple(program), np_value)


def line_from_dict(data: Mapping[str, Any]) -> CommandLine:
    """A CommandLine as ``dataclasses.asdict`` stored it (JSON lists for its tuples)."""
    options = tuple(MpiOption(str(o["token"]), str(o["name"]), tuple(o["values"])) for o in data["options"])
    np_value = data.get("np")
    return CommandLine(tuple(data["argv"]), bool(data["mpirun"]), options, tuple(data["program"]),
                       None if np_value is None else str(np_value))  # fmt: skip
