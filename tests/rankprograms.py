"""Programs the tests run as ranks, on any engine."""

from __future__ import annotations

from pathlib import Path


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
