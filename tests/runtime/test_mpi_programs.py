"""A plain MPI program (no launcher in its line) is one world of the job's ranks here too, as on
ssh hosts, Slurm and Kubernetes: the embedded engine starts it under mpirun, and says so."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ringleader.engines.embedded.engine import Runtime
from ringleader.engines.embedded.programs import mpi_program, mpi_unseen, needed_libraries, python_target
from ringleader.jobs.states import JobStatus

# How mpi4py's own test runner gets MPI: by name, through importlib (no import statement to see).
BY_NAME = ("import importlib\nMPI = importlib.import_module('mpi4py.MPI')\nw = MPI.COMM_WORLD\n"
           "print('WORLD %d of %d' % (w.Get_rank(), w.Get_size()))\n")
WORLD = "from mpi4py import MPI; w = MPI.COMM_WORLD; print('WORLD %d of %d' % (w.Get_rank(), w.Get_size()))"
C_WORLD = r"""#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    printf("C WORLD %d of %d\n", rank, size);
    MPI_Finalize();
    return 0;
}
"""


def test_what_a_python_line_runs() -> None:
    assert python_target(["python3", "-u", "-W", "ignore", "train.py", "--lr", "1"]) == ("script", "train.py")
    assert python_target(["/usr/bin/python3.11", "-c", "print(1)"]) == ("code", "print(1)")
    assert python_target(["python", "-m", "mpi4py", "prog.py"]) == ("module", "mpi4py")
    assert python_target(["python", "-mmpi4py"]) == ("module", "mpi4py")
    assert python_target(["python"]) is None
    assert python_target(["python", "-"]) is None
    assert python_target(["./train", "x.py"]) is None


def test_mpi_programs_are_known_by_what_they_import_or_link(tmp_path: Path) -> None:
    (tmp_path / "hvd.py").write_text('"""doc"""\nimport os\nimport horovod.torch as hvd\n')
    (tmp_path / "ddp.py").write_text("import torch.distributed as dist\n# from mpi4py import MPI (a comment)\n")
    assert mpi_program(["python3", "hvd.py"], str(tmp_path), None) == "hvd.py imports horovod"
    assert mpi_program(["python3", "ddp.py"], str(tmp_path), None) is None
    assert mpi_program(["python3", "-c", WORLD], None, None) == "python3 imports mpi4py"
    assert mpi_program(["python3", "-m", "mpi4py.bench", "helloworld"], None, None) == \
        "python3 -m mpi4py.bench runs mpi4py"  # fmt: skip
    assert mpi_program(["python3", "nosuch.py"], str(tmp_path), None) is None
    assert mpi_program(["true"], None, None) is None  # an ELF binary that needs no MPI
    assert mpi_program(["nosuchprogram"], None, None) is None


def test_an_elf_binarys_needed_libraries_are_read_without_running_it(tmp_path: Path) -> None:
    mpi4py = pytest.importorskip("mpi4py")
    module = next(Path(mpi4py.__path__[0]).glob("MPI.*.so"))
    assert any(lib.startswith("libmpi.") for lib in needed_libraries(module))
    assert "libc.so.6" in needed_libraries(Path(shutil.which("true") or "/bin/true"))
    for junk in (b"", b"\x7fELF", b"\x7fELF\x02\x01" + b"\xff" * 200, b"#!/bin/sh\necho hi\n"):
        (tmp_path / "junk").write_bytes(junk)
        assert needed_libraries(tmp_path / "junk") == []


def _worlds(rt: Runtime, name: str, workers: int) -> list[str]:
    return [line for i in range(workers) for line in rt.logs(name, f"worker-{i}").splitlines() if "WORLD" in line]


def test_a_plain_mpi4py_program_is_one_world_under_mpirun(small: Runtime, h) -> None:  # type: ignore[no-untyped-def]
    if shutil.which("mpirun") is None:
        pytest.skip("Open MPI's mpirun is not installed (make setup installs openmpi-bin)")
    pytest.importorskip("mpi4py")
    small.submit(h.spec("world", [sys.executable, "-c", WORLD], workers=2))
    assert any(n.startswith("note: python") and "imports mpi4py: its 2 ranks start under mpirun as one MPI world"
               in n for n in small.notes), small.notes  # fmt: skip
    view = small.wait("world", 120)
    assert view.status is JobStatus.SUCCEEDED, view.reason
    assert _worlds(small, "world", 2) == ["WORLD 0 of 2", "WORLD 1 of 2"]
    job = small.get("world")
    assert job.spec.user_command == [sys.executable, "-c", WORLD]  # the line as the user wrote it
    assert [i.role for i in job.instances].count("launcher") == 1


def test_a_plain_c_mpi_program_is_one_world_under_mpirun(small: Runtime, h, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    if shutil.which("mpicc") is None or shutil.which("mpirun") is None:
        pytest.skip("Open MPI's mpicc/mpirun are not installed (make setup installs libopenmpi-dev)")
    (tmp_path / "world.c").write_text(C_WORLD)
    subprocess.run(["mpicc", "-o", str(tmp_path / "world"), str(tmp_path / "world.c")], check=True)
    small.submit(h.spec("cworld", ["./world"], workers=2, workdir=str(tmp_path)))
    assert any("world links libmpi" in n for n in small.notes), small.notes
    view = small.wait("cworld", 120)
    assert view.status is JobStatus.SUCCEEDED, view.reason
    assert _worlds(small, "cworld", 2) == ["C WORLD 0 of 2", "C WORLD 1 of 2"]


def test_without_mpirun_an_mpi_program_is_started_per_rank_and_the_user_told(
    small: Runtime, h, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
) -> None:
    pytest.importorskip("mpi4py")
    bare = tmp_path / "bin"  # a PATH without mpirun
    bare.mkdir()
    monkeypatch.setenv("PATH", str(bare))
    small.submit(h.spec("alone", [sys.executable, "-c", "import mpi4py"], workers=2))
    assert any("mpirun is not installed here: each of its 2 ranks is an MPI world of its own" in n
               for n in small.notes), small.notes  # fmt: skip
    view = small.wait("alone", 120)
    assert view.status is JobStatus.SUCCEEDED, (view.reason, small.logs("alone", "worker-0"))


def test_a_torch_program_still_starts_one_process_per_worker(small: Runtime, h) -> None:  # type: ignore[no-untyped-def]
    small.submit(h.spec("ddp", [sys.executable, "-c", "import os; print('RANK', os.environ['RANK'])"], workers=2))
    assert not any("mpirun" in n for n in small.notes), small.notes
    assert small.wait("ddp", 120).status is JobStatus.SUCCEEDED
    assert [i.role for i in small.get("ddp").instances] == ["worker", "worker"]


def test_mpi_use_the_submit_cannot_see_is_named(tmp_path: Path) -> None:
    (tmp_path / "runtests.py").write_text(BY_NAME)
    (tmp_path / "comm.py").write_text("from mpi4py import MPI\n")
    (tmp_path / "main.py").write_text("import os\nimport comm\n")
    (tmp_path / "ddp.py").write_text("import torch.distributed as dist\n")
    assert mpi_program(["python3", "runtests.py"], str(tmp_path), None) is None  # no import statement
    assert mpi_unseen(["python3", "runtests.py"], str(tmp_path)) == "runtests.py names mpi4py"
    assert mpi_unseen(["python3", "main.py"], str(tmp_path)) == "main.py imports comm.py, which imports mpi4py"
    assert mpi_unseen(["python3", "-c", "__import__('horovod.torch')"], None) == "python3 names horovod"
    assert mpi_unseen(["python3", "ddp.py"], str(tmp_path)) is None
    assert mpi_unseen(["python3", "-m", "pkg"], str(tmp_path)) is None


def test_a_program_importing_mpi4py_by_name_gets_a_note_and_its_fix_runs_one_world(  # type: ignore[no-untyped-def]
    small: Runtime, h, tmp_path: Path
) -> None:
    """As mpi4py's own test runner: each rank alone would be a world of one, silently; the submit
    says so and names the line that makes one world, and that line does."""
    if shutil.which("mpirun") is None:
        pytest.skip("Open MPI's mpirun is not installed (make setup installs openmpi-bin)")
    pytest.importorskip("mpi4py")
    (tmp_path / "runtests.py").write_text(BY_NAME)
    small.submit(h.spec("byname", [sys.executable, "runtests.py"], workers=2, workdir=str(tmp_path)))
    [note] = [n for n in small.notes if "runtests.py names mpi4py" in n]
    assert "its 2 ranks start here as 2 MPI worlds of one each" in note, note
    fix = note.rsplit("submit `", 1)[1].rstrip("`")
    assert fix == f"mpirun -np 2 {sys.executable} runtests.py"
    assert small.wait("byname", 120).status is JobStatus.SUCCEEDED
    assert _worlds(small, "byname", 2) == ["WORLD 0 of 1", "WORLD 0 of 1"]  # what the note warned of
    small.submit(h.spec("fixed", fix.split(), workers=2, workdir=str(tmp_path)))
    assert small.wait("fixed", 120).status is JobStatus.SUCCEEDED
    assert _worlds(small, "fixed", 2) == ["WORLD 0 of 2", "WORLD 1 of 2"]
