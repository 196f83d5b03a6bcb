"""A trivial 2-rank job with --image vs the same two containers started by hand, interleaved.

    CONTAINERS_CONF=/path/containers.conf python benchmarks/container_overhead.py --image IMAGE --reps 5

Each repetition times, from the first command to the last container's end:
  * by hand: two `podman run --rm --network=host --ipc=host --pid=host IMAGE true` started
    side by side (what a user would type), waited for;
  * ringleader: `ringleader submit mpi --workers 2 --image IMAGE -- true` (a fresh state folder
    each time, this host's local node), then polling of the job (every 20 ms) until
    SUCCEEDED, all through the Python API the CLI calls.
Reports each median and their ratio (the goal: at most 1.5x).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def by_hand(podman: str, image: str) -> float:
    started = time.monotonic()
    argv = [podman, "run", "--rm", "--network=host", "--ipc=host", "--pid=host", image, "true"]
    runs = [subprocess.Popen(argv, stdin=subprocess.DEVNULL) for _ in range(2)]
    assert all(r.wait() == 0 for r in runs)
    return time.monotonic() - started


def with_ringleader(image: str, folder: Path, rep: int) -> float:
    from ringleader.engines.embedded.engine import JobSpec, Runtime
    from ringleader.jobs.states import JobStatus

    home = folder / f"home-{rep}"
    os.environ["RINGLEADER_HOME"] = str(home)
    started = time.monotonic()
    with Runtime.open(home) as rt:
        rt.submit(JobSpec("bench", 2, 0, ["true"], image=image))
        while not (view := rt.get("bench")).status.is_terminal():
            time.sleep(0.02)
        assert view.status is JobStatus.SUCCEEDED, view.reason
    return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", required=True)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    podman = shutil.which("podman")
    if podman is None:
        print("needs podman", file=sys.stderr)
        return 2
    hand, ours = [], []
    with tempfile.TemporaryDirectory(prefix="ringleader-bench-") as folder:
        by_hand(podman, args.image)  # warm: page cache, podman's storage
        with_ringleader(args.image, Path(folder), -1)
        for rep in range(args.reps):
            hand.append(by_hand(podman, args.image))
            ours.append(with_ringleader(args.image, Path(folder), rep))
    h, o = statistics.median(hand), statistics.median(ours)
    print(f"by hand (2 x podman run): median {h:.2f} s  runs {' '.join(f'{x:.2f}' for x in hand)}")
    print(f"ringleader --image:       median {o:.2f} s  runs {' '.join(f'{x:.2f}' for x in ours)}")
    print(f"ratio: {o / h:.2f}x (goal <= 1.5x); load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
