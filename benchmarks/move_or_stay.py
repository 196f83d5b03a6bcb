"""Move a spread gang to one node at its checkpoint, or let it stay spread? The reference job on
the emulated reference cluster.

    sudo python benchmarks/move_or_stay.py [--steps 900] [--scale 0.01]

As root (network namespaces, sshd, tc): brings the reference study's cluster up emulated (2
nodes x 8 V100, 25 Gb/s x ``--scale``), then runs a 4-worker job of deterministic training that
checkpoints every 10 steps and allreduces 5 MB a step (examples/jobs/checkpointed_train.py;
VGG16 as the queue prices it, ``--run-time 10m``) twice, each time arriving while 6 GPUs of each
node are busy (so it starts spread 2 + 2), the holder of one node ending once the job trained
20 steps:

1. with ``--non-preemptible``: it stays spread to its end;
2. preemptible (the default): the queue moves it to the node that freed at its checkpoint.

It prints each run's time from submit to end, where the moved run spent it (training spread,
the restart, training on one node) and whether its final weights equal an uninterrupted run's.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from wait_or_spread import REPO, RL, job, rl, until

PROGRAM = REPO / "examples" / "jobs" / "checkpointed_train.py"


def workers(name: str, env: dict[str, str]) -> list[str]:
    return sorted({w["node"] for w in job(name, env)["placement"]["chosen"]["workers"]})


def progress(folder: Path, run: int) -> int:
    files = [folder / f"progress-{run}-{rank}" for rank in range(4)]
    return min(int((f.read_text() or "0").split()[0]) if f.exists() else 0 for f in files)


def one_run(name: str, folder: Path, steps: int, env: dict[str, str], *extra: str) -> tuple[float, str]:
    """Submit to end in s, and the node that freed."""
    folder.mkdir()
    for hold in ("hold-a", "hold-b"):
        rl("submit", "mpi", "--name", hold, "--workers", "6", "--gpus", "1", "--gputopology", "--", "sleep", "3600",
           env=env)  # fmt: skip
        until(hold, "RUNNING", env)
    started = time.monotonic()
    rl("submit", "mpi", "--name", name, "--workers", "4", "--gpus", "1", "--gputopology", "--model", "vgg16",
       "--run-time", "10m", *extra, "--", "python3", str(PROGRAM), str(folder), "--steps", str(steps),
       env=env)  # fmt: skip
    while progress(folder, 0) < 20:
        time.sleep(0.5)
    assert len(workers(name, env)) == 2, workers(name, env)
    [freed] = workers("hold-a", env)
    rl("delete", "hold-a", env=env)
    took = until(name, "SUCCEEDED", env, limit_s=3600) - started
    rl("delete", "hold-b", env=env)
    return took, freed


def same_weights(folder: Path, reference: Path) -> bool:
    import torch

    final, expected = torch.load(folder / "final.pt"), torch.load(reference)
    return final.keys() == expected.keys() and all(torch.equal(final[k], expected[k]) for k in final)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=900)
    ap.add_argument("--scale", type=float, default=0.01)
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="rl-move-"))
    env = {**os.environ, "RINGLEADER_HOME": str(home / "home"), "RINGLEADER_GRACE_S": "2"}
    try:
        subprocess.run([sys.executable, str(PROGRAM), str(home), "--steps", str(args.steps), "--workers", "4",
                        "--reference"], check=True)  # fmt: skip
        rl("cluster", "up", "-f", "examples/seeds-cluster.yaml", "--scale", str(args.scale), env=env)
        stay_s, _ = one_run("stays", home / "stays", args.steps, env, "--non-preemptible")
        move_s, freed = one_run("moves", home / "moves", args.steps, env)
        moved = job("moves", env)
        said = [e["message"] for e in moved["events"] if e["kind"] == "Moved"]
        moves = home / "moves"
        first = (moves / "start-0-0").stat().st_mtime
        resumed = min((moves / f"start-1-{r}").stat().st_mtime for r in range(4)) if said else float("nan")
        stopped = max(float((moves / f"progress-0-{r}").read_text().split()[1]) for r in range(4))
        ended = (moves / "final.pt").stat().st_mtime
        print(f"\n4-worker job, {args.steps} steps, links x {args.scale:g}; load average {os.getloadavg()[0]:.1f}\n")
        print("| run | placement at its end | submit to end (s) | same weights as an uninterrupted run |")
        print("|---|---|---:|---|")
        print(f"| --non-preemptible: stays spread | {'+'.join(workers('stays', env))} | {stay_s:.1f} | "
              f"{same_weights(home / 'stays', home / 'reference.pt')} |")  # fmt: skip
        print(f"| preemptible: moved to {freed} | {'+'.join(workers('moves', env))} | {move_s:.1f} | "
              f"{same_weights(moves, home / 'reference.pt')} |")  # fmt: skip
        print(f"\nmoved run: trained spread {stopped - first:.1f} s, stopped to restarted {resumed - stopped:.1f} s, "
              f"on one node {ended - resumed:.1f} s; stays / moved: {stay_s / move_s:.2f}")  # fmt: skip
        print(f"Moved: {said[0] if said else '(not moved)'}")
    finally:
        subprocess.run([*RL, "cluster", "down"], env=env, cwd=REPO, capture_output=True, check=False)
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
