"""How long a trivial 2-rank job takes on the embedded engine, submit to SUCCEEDED, by phase.

    python benchmarks/job_start.py --reps 10                          # this checkout
    python benchmarks/job_start.py --reps 10 --image IMAGE            # the same job with --image
    python benchmarks/job_start.py --reps 10 --src OLD/src --src src  # two source trees, interleaved
    python benchmarks/job_start.py --reps 10 --busy                   # placed while another job runs

Each repetition runs, in a fresh process (a program using the Python API: ringleader imported
and one job run before the clock starts, as in container_overhead.py) and a fresh state folder
on this host's local node, `submit` of a 2-worker 0-GPU job `-- true` (or `--image IMAGE --
true`), then polls it every 20 ms until SUCCEEDED. With several --src trees the repetitions
alternate between them, so each sees the same load; with --image each repetition also times
the two hand-typed `podman run`s of container_overhead.py, and the ratio is reported. With --busy
the job is placed while another job of the folder runs (`sleep`): a queue at work, its agent
serving (and, on trees from before the agent, the spare supervisor waiting). Without it the
folder is idle: it ran one job before, and its agent (or watchdog) has left.
Phases, from the rank wrappers' state files and the job's record:
submit (the call), to ranks (its return to the first rank wrapper's start), ranks (first start to
last end), to SUCCEEDED (last rank end to the recorded end), and the total the poller saw.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from container_overhead import by_hand  # this folder is on sys.path: the script's own

PHASES = ("submit", "to ranks", "ranks", "to SUCCEEDED", "total")


def one_job(home: Path, image: str | None, name: str = "bench") -> list[float]:
    from ringleader.engines.embedded.engine import JobSpec, Runtime
    from ringleader.jobs.states import JobStatus

    os.environ["RINGLEADER_HOME"] = str(home)
    started = time.time()
    with Runtime.open(home) as rt:
        rt.submit(JobSpec(name, 2, 0, ["true"], image=image))
        submitted = time.time()
        while not (view := rt.get(name)).status.is_terminal():
            time.sleep(0.02)
        seen = time.time()
    assert view.status is JobStatus.SUCCEEDED, view.reason
    states = [json.loads(p.read_text()) for p in (home / "run" / name).glob(f"{name}-worker-*.json")]
    first = min(s["started_at"] for s in states)
    last = max(s["ended_at"] for s in states)
    ended = view.ended_at or seen
    return [submitted - started, first - submitted, last - first, ended - last, seen - started]


def busy(home: Path) -> None:
    """A job that runs until deleted, with the folder's agent and its standby up (on a tree from
    before the agent: the spare supervisor its watchdog keeps)."""
    from ringleader.engines.embedded.engine import JobSpec, Runtime

    os.environ["RINGLEADER_HOME"] = str(home)
    with Runtime.open(home) as rt:
        rt.submit(JobSpec("busy", 1, 0, ["sleep", "600"]))
    try:
        from ringleader.engines.embedded.spare import socket_path  # type: ignore[import-not-found]
    except ImportError:  # the agent: serving at once, its standby started within a tick
        time.sleep(3.0)
        return
    deadline = time.monotonic() + 30
    while not socket_path(home).exists():
        if time.monotonic() > deadline:
            raise SystemExit("no spare supervisor came up in 30 s")
        time.sleep(0.05)


def idle(home: Path) -> None:
    """A folder in use but idle: it has run a job, and its agent (or, on a tree from before the
    agent, its watchdog) has left."""
    from ringleader.engines.embedded.engine import JobSpec, Runtime

    os.environ["RINGLEADER_HOME"] = str(home)
    with Runtime.open(home) as rt:
        rt.submit(JobSpec("prior", 1, 0, ["true"]))
        while not rt.get("prior").status.is_terminal():
            time.sleep(0.02)
    deadline = time.monotonic() + 30
    locks = [home / "run" / n for n in ("watchdog.lock", "agent.lock", "agent.standby.lock")]
    quiet = 0  # the locks found free twice in a row, 1.5 s apart (a standby takes over, then leaves)
    while quiet < 2 and time.monotonic() < deadline:
        quiet = quiet + 1 if all(_free(lock) for lock in locks) else 0
        time.sleep(1.5 if quiet else 0.1)


def _free(lock: Path) -> bool:
    import fcntl

    if not lock.exists():
        return True
    with open(lock) as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
    return True


def unbusy(home: Path) -> None:
    from ringleader.engines.embedded.engine import Runtime

    with Runtime.open(home) as rt:
        rt.delete(["busy"])


def measure(src: str | None, home: Path, image: str | None, busy: bool = False) -> list[float]:
    """One job in a fresh process importing ringleader from ``src`` (None: as installed)."""
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = str(Path(src).resolve())
    argv = [sys.executable, __file__, "--one", str(home), *(["--image", image] if image else []),
            *(["--busy"] if busy else [])]  # fmt: skip
    out = subprocess.run(argv, env=env, check=True, capture_output=True, text=True).stdout
    return [float(x) for x in out.split()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image")
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--src", action="append", help="a source tree to import ringleader from (repeatable)")
    parser.add_argument("--busy", action="store_true", help="place the job while another job runs")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        one_job(Path(args.one + "-warm"), args.image, "warm")  # this process's lazy imports
        if args.busy:
            busy(Path(args.one))
        else:
            idle(Path(args.one))
        try:
            print(" ".join(f"{x:.4f}" for x in one_job(Path(args.one), args.image)))
        finally:
            if args.busy:
                unbusy(Path(args.one))
        return 0
    trees: list[str | None] = list(args.src or [None])
    runs: dict[str | None, list[list[float]]] = {t: [] for t in trees}
    hand: list[float] = []
    podman = shutil.which("podman")
    if args.image and podman is None:
        print("--image needs podman (for the hand-typed baseline)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="ringleader-bench-") as folder:
        for tree in trees:  # warm: page cache, compiled bytecode, the runtime's storage
            measure(tree, Path(folder) / f"warm-{trees.index(tree)}", args.image, args.busy)
        for rep in range(args.reps):
            if args.image and podman:
                hand.append(by_hand(podman, args.image))
            for i, tree in enumerate(trees):
                runs[tree].append(measure(tree, Path(folder) / f"{rep}-{i}", args.image, args.busy))
    where = "placed while another job runs" if args.busy else "in an idle folder (a job ran there before)"
    print(f"2-rank `true` job{' --image ' + args.image if args.image else ''}, {where}, {args.reps} reps, medians in s")
    print(f"{'source':<40}" + "".join(f"{p:>14}" for p in PHASES))
    medians = {}
    for tree in trees:
        medians[tree] = [statistics.median(col) for col in zip(*runs[tree], strict=True)]
        print(f"{tree or '(installed)':<40}" + "".join(f"{m:>14.3f}" for m in medians[tree]))
    if len(trees) > 1:
        base = medians[trees[0]][-1]
        for tree in trees[1:]:
            print(f"total {tree} / {trees[0]}: {medians[tree][-1] / base:.2f}")
    if hand:
        h = statistics.median(hand)
        print(f"by hand (2 x podman run): median {h:.3f} s; total / by hand: "
              + ", ".join(f"{tree or '(installed)'} {medians[tree][-1] / h:.2f}x" for tree in trees))
    print(f"load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
