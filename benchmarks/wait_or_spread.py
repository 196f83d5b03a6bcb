"""Wait for one node, or start spread now? The reference job on the emulated reference cluster.

    sudo python benchmarks/wait_or_spread.py [--steps 12] [--scale 0.04] [--hold 60]

As root (network namespaces, sshd, tc): brings the reference study's cluster up emulated (2
nodes x 8 V100, 25 Gb/s x ``--scale``), then runs the reference job (4 workers, one GPU each,
VGG16's gradients over gloo: examples/jobs/vgg16_exchange.py) three times:

1. alone on the idle cluster with --gputopology: its run time on its best placement, which the
   next two runs give as --run-time (what a user who ran it once knows);
2. arriving while 6 GPUs of each node are busy, node 172 for ``--hold`` seconds more (its holder
   says so with --run-time) and node 173 for 30 min, with ``--start now``: it starts at once,
   spread 2 + 2 over both nodes;
3. the same arrival with the default rule for a job with a run time (``finish``): the queue
   weighs both starts with the model and waits for node 172's quad.

It prints each run's time from submit to end (the job's completion time) and the waiting job's
pending reason as `get` shows it, with both predicted finishes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RL = [sys.executable, "-m", "ringleader.cli.main"]


def rl(*args: str, env: dict[str, str]) -> str:
    done = subprocess.run([*RL, *args], env=env, cwd=REPO, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"ringleader {' '.join(args)}: rc {done.returncode}\n{done.stdout}{done.stderr}")
    return done.stdout


def job(name: str, env: dict[str, str]) -> dict[str, Any]:
    return json.loads(rl("get", name, "-o", "json", env=env))  # type: ignore[no-any-return]


def until(name: str, status: str, env: dict[str, str], limit_s: float = 1200) -> float:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        got = job(name, env)["status"]
        if got == status:
            return time.monotonic()
        if got == "FAILED":
            sys.exit(f"job {name} failed:\n{rl('logs', name, env=env)}")
        time.sleep(0.5)
    sys.exit(f"job {name} not {status} after {limit_s:g} s")


def vgg(name: str, steps: int, env: dict[str, str], *extra: str) -> list[str]:
    return ["submit", "mpi", "--name", name, "--workers", "4", "--gpus", "1", "--gputopology", "--model", "vgg16",
            *extra, "--", "python3", "examples/jobs/vgg16_exchange.py", "--batch-size", "64", "--steps", str(steps),
            "--warmup", "1"]  # fmt: skip


def hold(env: dict[str, str], hold_s: float) -> None:
    """6 GPUs of each node busy: node 172's for ``hold_s`` more, node 173's for 30 min."""
    rl("submit", "mpi", "--name", "hold-a", "--workers", "6", "--gpus", "1", "--gputopology",
       "--run-time", f"{hold_s:g}s", "--", "sleep", f"{hold_s:g}", env=env)  # fmt: skip
    rl("submit", "mpi", "--name", "hold-b", "--workers", "6", "--gpus", "1", "--gputopology",
       "--run-time", "30m", "--", "sleep", "1800", env=env)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--scale", type=float, default=0.04)
    ap.add_argument("--hold", type=float, default=60.0)
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="rl-wait-"))
    env = {**os.environ, "RINGLEADER_HOME": str(home / "home")}
    rows = []
    try:
        rl("cluster", "up", "-f", "examples/seeds-cluster.yaml", "--scale", str(args.scale), env=env)
        started = time.monotonic()
        rl(*vgg("alone", args.steps, env), env=env)
        alone_s = until("alone", "SUCCEEDED", env) - started
        rows.append(("alone, idle cluster, --gputopology", alone_s, "-"))
        run_time = f"{max(1, round(alone_s))}s"
        for name, rule in (("spread", "now"), ("waits", "finish")):
            hold(env, args.hold)
            started = time.monotonic()
            rl(*vgg(name, args.steps, env, "--run-time", run_time, "--start", rule), env=env)
            shown = rl("get", name, env=env)
            placed = job(name, env)
            ended = until(name, "SUCCEEDED", env) - started
            nodes = sorted({w["node"] for w in job(name, env)["placement"]["chosen"]["workers"]})
            rows.append((f"--start {rule}: {'+'.join(nodes)}", ended, placed["status"]))
            print(f"\n$ ringleader get {name}   (right after submit)\n{shown}")
            rl("delete", "hold-a", "hold-b", env=env)
        print(f"\n4-worker VGG16 exchange, {args.steps} steps, links x {args.scale:g}; node 172 busy for "
              f"{args.hold:g} s more when the job arrives; --run-time {run_time} (the idle run)\n")
        print("| run | status at submit | submit to end (s) |")
        print("|---|---|---:|")
        for what, seconds, status in rows:
            print(f"| {what} | {status} | {seconds:.1f} |")
        print(f"\nspread / waited: {rows[1][1] / rows[2][1]:.2f}")
    finally:
        subprocess.run([*RL, "cluster", "down"], env=env, cwd=REPO, capture_output=True, check=False)
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
