"""The queue watcher: ``python -m ringleader.engines.slurm.watch HOME``. Started by a submit whose
gang does not fit yet; runs scheduling passes until ringleader's queue is empty, then exits.
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
        try:
            if engine.schedule() == 0:
                return 0
        except RingleaderError as exc:  # Slurm briefly unreachable: keep trying
            print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {exc.one_line()}", file=sys.stderr, flush=True)
        time.sleep(INTERVAL_S)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
