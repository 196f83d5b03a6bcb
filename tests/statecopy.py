"""A state folder made once and copied by each test that starts from it: the CLI commands and
the agent that made it run once per module, and each test changes only its own copy."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from statedb import agent_pids
from waiting import wait_for


def idle(home: Path) -> Path:
    """``home`` once its agents have left (an agent leaves its folder when nothing runs), so that
    no process writes the folder while it is copied."""
    wait_for(lambda: not agent_pids(home), what=f"the agents of {home} to leave it")
    return home


def copy_of(home: Path, to: Path) -> Path:
    """A copy of an idle state folder at ``to``. The agent's wake FIFO is left out (the next agent
    makes it): copying one would block reading it."""

    def not_plain(folder: str, names: list[str]) -> list[str]:
        return [n for n in names if not (os.path.isdir(os.path.join(folder, n))
                                          or os.path.isfile(os.path.join(folder, n)))]  # fmt: skip

    shutil.copytree(home, to, symlinks=True, ignore=not_plain)
    return to
