"""CPU a trivial 2-rank `--image` job costs the host, against two hand-typed `podman run`s.

    CONTAINERS_CONF=/path/containers.conf PYTHONPATH=src python benchmarks/job_cpu.py --image IMAGE --reps 6

Each repetition submits (Python API) a 2-worker 0-GPU job `--image IMAGE -- true` in an idle
state folder (it ran a job before, and its agent has left, as in job_start.py) and waits for
its end, then runs the two
`podman run`s of container_overhead.py side by side. What each cost is the host's busy CPU time
(/proc/stat: all but idle and iowait) from just before it to 0.3 s after it ended (the containers'
cleanup; the agent's exit a second later is not counted): so it counts every process the job started,
and the rest of the host's load too; run it on a quiet host and compare medians.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from container_overhead import by_hand  # this folder is on sys.path: the script's own
from job_start import idle

SETTLE_S = 0.3
TICK_MS = 1000 / os.sysconf("SC_CLK_TCK")


def busy_ms() -> float:
    with open("/proc/stat") as fh:
        fields = [int(x) for x in fh.readline().split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) * TICK_MS  # less idle and iowait


def cost(run: Callable[[], object]) -> float:
    before = busy_ms()
    run()
    time.sleep(SETTLE_S)
    return busy_ms() - before


def job(home: Path, image: str, name: str) -> None:
    from ringleader.engines.embedded.engine import JobSpec, Runtime

    os.environ["RINGLEADER_HOME"] = str(home)
    with Runtime.open(home) as rt:
        rt.submit(JobSpec(name, 2, 0, ["true"], image=image))
        while not rt.get(name).status.is_terminal():
            time.sleep(0.02)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", required=True)
    parser.add_argument("--reps", type=int, default=6)
    args = parser.parse_args()
    podman = "podman"
    costs: dict[str, list[float]] = {"ringleader --image": [], "by hand": []}
    with tempfile.TemporaryDirectory(prefix="ringleader-bench-") as folder:
        job(Path(folder) / "warm", args.image, "warm")  # imports, page cache
        for rep in range(args.reps):
            home = Path(folder) / str(rep)
            idle(home)  # not counted: a job before, and the wait for its watchdog to leave
            time.sleep(1.0)
            costs["ringleader --image"].append(cost(lambda home=home: job(home, args.image, "j")))
            time.sleep(1.0)
            costs["by hand"].append(cost(lambda: by_hand(podman, args.image)))
    for what, values in costs.items():
        runs = " ".join(f"{v:.0f}" for v in values)
        print(f"{what:<20} CPU ms median {statistics.median(values):6.0f}  runs {runs}")
    print(f"load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
