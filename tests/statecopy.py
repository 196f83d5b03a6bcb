"""A state folder made once and copied by each test that starts from it: the CLI commands and
the agent that made it run once per module, and each test changes only its own copy."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from statedb import agent_pids
from waiting import wait_for


def idle(home: Path) -> Path:
    """``home`` once its agents have left (an agent leaves its folder when nothing runs) and no
    process holds a file of it open, so that nothing writes the folder while it is copied: the
    last connection to close the database removes its -wal and -shm files, and a supervisor or
    an agent still starting on a loaded machine can be that last one after its agent was gone."""
    wait_for(lambda: not agent_pids(home) and not holders(home), what=f"the processes of {home} to leave it")
    return home


def holders(home: Path) -> list[int]:
    """The other processes with a file under ``home`` open (this one's own connections are its
    tests' to close)."""
    inside = f"{home}/"
    found = []
    for fd_folder in Path("/proc").glob("[0-9]*/fd"):
        try:
            targets = [os.readlink(fd) for fd in fd_folder.iterdir()]
        except OSError:  # gone meanwhile, or not ours to read
            continue
        pid = int(fd_folder.parent.name)
        if pid != os.getpid() and any(target.startswith(inside) for target in targets):
            found.append(pid)
    return found


def copy_of(home: Path, to: Path) -> Path:
    """A copy of an idle state folder at ``to``. The agent's wake FIFO is left out (the next agent
    makes it): copying one would block reading it."""

    def not_plain(folder: str, names: list[str]) -> list[str]:
        return [n for n in names if not (os.path.isdir(os.path.join(folder, n))
                                          or os.path.isfile(os.path.join(folder, n)))]  # fmt: skip

    shutil.copytree(home, to, symlinks=True, ignore=not_plain)
    return to
