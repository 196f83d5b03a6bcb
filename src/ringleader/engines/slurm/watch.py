"""The queue watcher: ``python -m ringleader.engines.slurm.watch HOME``. Started by a submit whose
gang does not fit yet, or that may move to a better placement (``jobs/moves.py``); runs
scheduling passes until nothing waits in ringleader's queue, no running gang may move and no run
after a requeue is still to write its first line (what its restart took), then exits.
One per home (a lock file); state is only ever the job records, so it may die at any time."""

from __future__ import annotations

import fcntl
import os
import sys
import time
from pathlib import Path

from ringleader.engines.slurm.engine import SlurmEngine
from ringleader.errors import RingleaderError

INTERVAL_S = 1.0
# Between passes while nothing waits and a running gang may move: a node that frees is seen within
# this, late by little against the minute a move must gain (MoveRule.margin_s), and Slurm is not
# asked for its nodes and jobs every second for the whole of a long run.
MOVE_CHECK_S = 10.0


def main(argv: list[str]) -> int:
    home = Path(argv[0])
    root = home / "slurm"
    fd = os.open(root / "watcher.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return 0  # another watcher serves this home
    engine = SlurmEngine(home)
    while True:
        waiting = 1
        try:
            waiting, movers = engine.schedule()
            if not waiting and not movers:
                return 0
        except RingleaderError as exc:  # Slurm briefly unreachable: keep trying
            print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {exc.one_line()}", file=sys.stderr, flush=True)
        time.sleep(INTERVAL_S if waiting else MOVE_CHECK_S)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
