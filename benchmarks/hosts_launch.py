"""Launch overhead on ssh hosts: `ringleader submit` vs a plain `mpirun -H`, same hosts, interleaved.

    python benchmarks/hosts_launch.py --reps 5        (root: brings up and removes its own cluster)

Brings up a 2-node emulated cluster (examples/seeds-cluster.yaml, `cluster up`) in a private
RINGLEADER_HOME, then alternates, ``--reps`` times each:
  * submit: `ringleader submit mpi --workers 4 --gpus 1 -- PROGRAM` as a user types it (a new CLI
    process), timed from just before the command starts to the job's recorded end (SUCCEEDED);
    the default placement puts 2 ranks on each node;
  * plain: `mpirun -np 4 -H node-a:2,node-b:2 PROGRAM` over the same two namespaces with the
    same ssh configuration (ringleader's per-job ssh_config: keys, known hosts) and the same
    interface selection, timed until mpirun exits.
PROGRAM is a trivial Python program (each rank prints its rank). Reported: median seconds of
each, the ratio plain/submit (goal >= 0.9), where submit's time goes (the CLI until the job is
recorded, until mpirun starts, mpirun until SUCCEEDED), and the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROGRAM = ["python3", "-c", "import os; print('rank', os.environ.get('OMPI_COMM_WORLD_RANK'), flush=True)"]
GOAL = 0.9


def ringleader(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(Path(sys.executable).parent / "ringleader"), *args], env=env, cwd=REPO,
                          capture_output=True, text=True, check=True)  # fmt: skip


def time_submit(name: str, env: dict[str, str], phases: list[tuple[float, float, float]] | None = None) -> float:
    from ringleader.runtime.api import Runtime
    from ringleader.runtime.states import JobStatus

    start = time.time()
    ringleader("submit", "mpi", "--name", name, "--workers", "4", "--gpus", "1", "--", *PROGRAM, env=env)
    with Runtime.open(env["RINGLEADER_HOME"]) as rt:
        view = rt.wait(name, timeout=120)
    if view.status is not JobStatus.SUCCEEDED or view.ended_at is None or view.started_at is None:
        raise SystemExit(f"job {name} ended {view.status.value}: {view.reason}")
    if phases is not None:  # CLI until recorded, recorded until mpirun started, mpirun until SUCCEEDED
        launched = next(e.at for e in view.events if e.kind == "Started")
        phases.append((view.created_at - start, launched - view.created_at, view.ended_at - launched))
    return view.ended_at - start


def plain_argv(home: Path) -> list[str]:
    """The mpirun line a user would type for the same 2 + 2 ranks on the same hosts."""
    from ringleader.engines.hosts.netns import settings
    from ringleader.engines.hosts.ssh import write_config
    from ringleader.runtime.api import Runtime

    with Runtime.open(home) as rt:
        nodes = [ns.spec for ns in rt.nodes().nodes if ns.spec.address is not None]
    config = write_config(home / "plain_ssh_config", nodes, home)
    argv = ["mpirun", "-np", "4", "-H", ",".join(f"{n.name}:2" for n in nodes), "--bind-to", "none",
            "--mca", "plm_rsh_agent", f"ssh -F {config}"]  # fmt: skip
    if os.geteuid() == 0:
        argv.append("--allow-run-as-root")
    for key, value in settings(home)["mca"].items():
        argv += ["--mca", key, str(value)]
    return [*argv, *PROGRAM]


def time_plain(argv: list[str], env: dict[str, str]) -> float:
    start = time.time()
    done = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True)
    took = time.time() - start
    if done.returncode != 0 or done.stdout.count("rank ") != 4:
        raise SystemExit(f"plain mpirun failed ({done.returncode}): {done.stderr.strip()[-400:]}")
    return took


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=5, help="Runs of each, interleaved.")
    p.add_argument("-o", "--output", choices=["table", "json"], default="table")
    a = p.parse_args()
    if os.geteuid() != 0:
        print("hosts_launch needs root (`cluster up`: network namespaces, a bridge, tc)", file=sys.stderr)
        return 2
    home = Path(tempfile.mkdtemp(prefix="rl-launch-")) / "home"
    venv_bin = str(Path(sys.executable).parent)
    env = {**os.environ, "RINGLEADER_HOME": str(home), "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}"}
    load_before = os.getloadavg()
    ringleader("cluster", "up", "-f", "examples/seeds-cluster.yaml", env=env)
    submit: list[float] = []
    plain: list[float] = []
    phases: list[tuple[float, float, float]] = []
    try:
        argv = plain_argv(home)
        time_plain(argv, env)  # warm both paths once (page cache, sshd's first connections)
        time_submit("warmup", env)
        for i in range(a.reps):
            submit.append(time_submit(f"launch-{i}", env, phases))
            plain.append(time_plain(argv, env))
    finally:
        ringleader("cluster", "down", env=env)
    load_after = os.getloadavg()
    result = {
        "reps": a.reps, "submit_s": submit, "plain_s": plain,
        "submit_median_s": statistics.median(submit), "plain_median_s": statistics.median(plain),
        "ratio_plain_over_submit": statistics.median(plain) / statistics.median(submit),
        "load_before": load_before, "load_after": load_after, "cores": os.cpu_count(),
        "plain_command": " ".join(argv),
        "submit_phases_median_s": {
            k: statistics.median(ph[i] for ph in phases) for i, k in enumerate(("cli", "to_start", "run_to_succeeded"))
        },
    }  # fmt: skip
    if a.output == "json":
        print(json.dumps(result, indent=2))
        return 0
    print(f"{'':34}{'median s':>10}  runs")
    for label, runs in (("ringleader submit -> SUCCEEDED", submit), ("plain mpirun -H", plain)):
        print(f"{label:34}{statistics.median(runs):>10.2f}  " + " ".join(f"{t:.2f}" for t in runs))
    cli, to_start, run = result["submit_phases_median_s"].values()
    print(f"submit, median phases: CLI {cli:.2f} s, recorded -> mpirun started {to_start:.2f} s, "
          f"mpirun started -> SUCCEEDED {run:.2f} s")
    ratio = result["ratio_plain_over_submit"]
    print(f"ratio plain/submit {ratio:.2f} (goal >= {GOAL}: {'met' if ratio >= GOAL else 'NOT met'}); "
          f"load average {load_before[0]:.1f} before, {load_after[0]:.1f} after, {os.cpu_count()} cores")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
