"""What a rank's program is, read from its files at submit: a Python script that is not there,
and a plain MPI program (one with no launcher in its line).

The embedded engine starts a plain program's ranks as its own children. An MPI program started
that way is a world of one per rank, where every other engine (ssh hosts, Slurm's ``srun
--mpi=pmix``, a Kubernetes launcher's mpirun) makes the job's ranks one world. So such a
program is started under mpirun here too, as the user would start it by hand. It is known by
what it says it needs: a Python program that imports mpi4py or Horovod (``python -m mpi4py``
too), or a binary whose dynamic section needs ``libmpi``. A program that gets MPI some other
way (``importlib.import_module("mpi4py")``, as mpi4py's own test runner does, or a module of its
own beside it that imports mpi4py) is not known for one, but its name in the script or in such a
module is seen: the submit says so and how to write the line (``mpirun python prog.py``).
"""

from __future__ import annotations

import os
import re
import shutil
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

from ringleader.errors import UsageError
from ringleader.jobs.line import PythonTarget, interpreter_target

PYTHON = re.compile(r"python[0-9.]*")
MPI_IMPORT = re.compile(r"^[ \t]*(?:import|from)[ \t]+(mpi4py|horovod)\b", re.MULTILINE)
MPI_MODULES = ("mpi4py", "horovod")
# Enough of a script to see its imports; a binary's dynamic strings are read from its own header.
SCRIPT_BYTES = 1 << 20


def python_target(program: Sequence[str]) -> PythonTarget | None:
    """The script, code or module a Python interpreter line runs; None when the line is not a
    Python interpreter's or names none of them (stdin, the REPL)."""
    if not program or not PYTHON.fullmatch(os.path.basename(program[0])):
        return None
    return interpreter_target(program)


def check_script(program: Sequence[str], workdir: str | None) -> None:
    """A Python script the ranks would not find (`python nosuchfile.py`): refused at submit
    rather than every rank failing at start, its error in each rank's log."""
    target = python_target(program)
    if target is None or target.kind != "script" or not target.value.endswith(".py"):
        return
    if not (Path(workdir or ".") / target.value).exists():
        raise UsageError(f"script {target.value!r} does not exist in {workdir or os.getcwd()}",
                         "check the path: the ranks start in --working-dir (default: here)")  # fmt: skip


def mpi_program(program: Sequence[str], workdir: str | None, path: str | None) -> str | None:
    """Why ``program`` is an MPI program ("python imports mpi4py"), or None where nothing it
    says shows it. ``path`` is the PATH the ranks search."""
    target = python_target(program)
    name = os.path.basename(program[0]) if program else ""
    if target is not None:
        if target.kind == "module":
            top = target.value.split(".")[0]
            return f"{name} -m {target.value} runs {top}" if top in MPI_MODULES else None
        if target.kind == "code":
            found = MPI_IMPORT.search(target.value)
        else:
            found = MPI_IMPORT.search(_read_text(Path(workdir or ".") / target.value))
            name = target.value
        return f"{name} imports {found.group(1)}" if found else None
    binary = _resolve(program[0], workdir, path) if program else None
    if binary is not None and any(lib.startswith("libmpi.") for lib in needed_libraries(binary)):
        return f"{name} links libmpi"
    return None


MPI_NAMED = re.compile(r"\b(mpi4py|horovod)\b")
LOCAL_IMPORT = re.compile(r"^[ \t]*(?:import|from)[ \t]+([A-Za-z_][A-Za-z0-9_]*)", re.MULTILINE)


def mpi_unseen(program: Sequence[str], workdir: str | None) -> str | None:
    """Why ``program`` may use MPI where ``mpi_program`` sees no import ("run.py names mpi4py"):
    its script names mpi4py or Horovod without importing it by name (importlib, ``__import__``),
    or a module of its own in the script's folder imports one. None where nothing says so."""
    target = python_target(program)
    if target is None or target.kind not in ("script", "code"):
        return None
    script = Path(workdir or ".") / target.value if target.kind == "script" else None
    text = _read_text(script) if script is not None else target.value
    shown = target.value if script is not None else os.path.basename(program[0])
    named = MPI_NAMED.search(text)
    if named:
        return f"{shown} names {named.group(1)}"
    folder = script.parent if script is not None else Path(workdir or ".")
    for module in dict.fromkeys(LOCAL_IMPORT.findall(text)):
        imported = MPI_IMPORT.search(_read_text(folder / f"{module}.py"))
        if imported:
            return f"{shown} imports {module}.py, which imports {imported.group(1)}"
    return None


def _read_text(script: Path) -> str:
    try:
        with script.open("rb") as f:
            return f.read(SCRIPT_BYTES).decode("utf-8", "replace")
    except OSError:
        return ""


def _resolve(program: str, workdir: str | None, path: str | None) -> Path | None:
    if "/" in program:
        return Path(workdir or ".") / program
    found = shutil.which(program, path=path)
    return Path(found) if found else None


def needed_libraries(binary: Path) -> list[str]:
    """The DT_NEEDED names of an ELF binary's dynamic section (what ``readelf -d`` lists as
    NEEDED), read from its section headers without running it; [] for anything else."""
    try:
        with binary.open("rb") as f:
            return _needed(f)
    except (OSError, struct.error, IndexError, ValueError):
        return []


def _needed(f: BinaryIO) -> list[str]:
    ident = f.read(64)
    if len(ident) < 64 or ident[:4] != b"\x7fELF" or ident[4] not in (1, 2) or ident[5] not in (1, 2):
        return []
    order = "<" if ident[5] == 1 else ">"
    if ident[4] == 2:  # 64-bit
        (shoff,) = struct.unpack_from(order + "Q", ident, 0x28)
        shentsize, shnum = struct.unpack_from(order + "HH", ident, 0x3A)
        section, entry = order + "IIQQQQIIQQ", order + "qQ"
    else:
        (shoff,) = struct.unpack_from(order + "I", ident, 0x20)
        shentsize, shnum = struct.unpack_from(order + "HH", ident, 0x2E)
        section, entry = order + "IIIIIIIIII", order + "iI"
    f.seek(shoff)
    table = f.read(shentsize * shnum)
    headers = [struct.unpack_from(section, table, i * shentsize) for i in range(shnum)]
    names: list[str] = []
    for header in headers:
        if header[1] != 6:  # SHT_DYNAMIC; its sh_link is the string table its entries index
            continue
        f.seek(header[4])
        dynamic = f.read(min(header[5], 1 << 20))
        strings = headers[header[6]]
        f.seek(strings[4])
        text = f.read(min(strings[5], 16 << 20))
        for (tag, value) in struct.iter_unpack(entry, dynamic[: len(dynamic) - len(dynamic) % struct.calcsize(entry)]):
            if tag == 0:  # DT_NULL
                break
            if tag == 1:  # DT_NEEDED
                names.append(text[value : text.index(b"\0", value)].decode("utf-8", "replace"))
    return names
