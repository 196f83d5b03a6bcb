"""Programs the tests run as ranks, on any engine."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

# A checkpoint that takes 3 s to write under a 6 s grace: every launcher must give the grace, once
# (Open MPI's mpirun on SIGTERM would signal its ranks only after 1 s and SIGKILL them 1 s later).
SLOW_WRITE_S, GRACE_S = 3.0, "6"
# The lines users write for one program (each test file says how, for its hosts) and the stops.
LAUNCHERS, STOPS = ("plain", "mpirun", "horovodrun", "torchrun"), ("delete", "time-limit")


def slow_checkpointing_program(folder: Path, setenv: Callable[[str, str], None]) -> Path:
    """A file of ``checkpointing_rank`` taking SLOW_WRITE_S to checkpoint, and the grace GRACE_S
    set for the submit that follows (``setenv``: the test's monkeypatch.setenv)."""
    setenv("RINGLEADER_GRACE_S", GRACE_S)  # at submit: the job keeps it
    program = folder / "rank.py"
    program.write_text(checkpointing_rank(folder, write_s=SLOW_WRITE_S))
    return program


def assert_checkpoints_kept(folder: Path, ranks: int = 2) -> None:
    """Every rank of ``checkpointing_rank`` wrote its checkpoint, having had SIGTERM once."""
    for rank in map(str, range(ranks)):
        assert (folder / f"ckpt-{rank}").read_text() == "step 42", f"rank {rank} lost its checkpoint"
        assert (folder / f"ckpt-{rank}.terms").read_text() == "1"  # a second SIGTERM interrupts a handler


def checkpointing_rank(folder: Path, write_s: float = 0.5) -> str:
    """A rank that trains until SIGTERM, then takes ``write_s`` seconds to write its checkpoint
    (counting the SIGTERMs it got: a second one would interrupt a real program's checkpoint) and
    exits."""
    return f"""
import os, signal, sys, time
got = []
def on_term(signum, frame):
    got.append(signum)
    if len(got) > 1:
        return
    time.sleep({write_s!r})  # writing the checkpoint takes a while
    path = os.path.join({str(folder)!r}, "ckpt-" + os.environ["RANK"])
    with open(path + ".tmp", "w") as fh:
        fh.write("step 42")
    os.replace(path + ".tmp", path)
    time.sleep(0.2)  # a second SIGTERM would arrive by now
    with open(path + ".terms", "w") as fh:
        fh.write(str(len(got)))
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
print("training", flush=True)
while True:
    time.sleep(0.1)
"""


def resuming_rank(folder: Path) -> str:
    """The first run trains, saving a checkpoint per rank every 0.1 s; a later run resumes from
    it, says from where and on which node (``resumed-RANK``) and which run it is
    (``restarts-RANK``: RINGLEADER_RESTARTS, TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS),
    and ends."""
    return f"""
import os, time
folder, rank = {str(folder)!r}, os.environ["RANK"]
ckpt = os.path.join(folder, "ckpt-" + rank)
if os.environ["RINGLEADER_RESTARTS"] != "0":
    step = int(open(ckpt).read()) if os.path.exists(ckpt) else 0
    with open(os.path.join(folder, "resumed-" + rank), "w") as fh:
        fh.write(f"{{step}} {{os.environ['RINGLEADER_NODE']}}")
    print(f"resumed from step {{step}}", flush=True)  # its first line: what its restart took ends here
    with open(os.path.join(folder, "restarts-" + rank), "w") as fh:  # as torchrun counts them too
        fh.write(" ".join(os.environ.get(k, "-") for k in ("RINGLEADER_RESTARTS", "TORCHELASTIC_RESTART_COUNT",
                                                          "TORCHELASTIC_MAX_RESTARTS")))
    raise SystemExit(0)
step = 0
while True:
    step += 1
    with open(ckpt + ".tmp", "w") as fh:
        fh.write(str(step))
    os.replace(ckpt + ".tmp", ckpt)
    time.sleep(0.1)
"""
