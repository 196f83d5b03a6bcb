"""Launch overhead on ssh hosts: `ringleader submit` vs a plain `mpirun -H`, same hosts, interleaved.

    python benchmarks/hosts_launch.py --reps 5        (root: brings up and removes its own cluster)

Brings up a 2-node emulated cluster (examples/seeds-cluster.yaml, `cluster up`) in a private
RINGLEADER_HOME, then alternates, ``--reps`` times each, for two programs:
  * submit: `ringleader submit mpi --workers 4 --gpus 1 -- PROGRAM` as a user types it (a new CLI
    process), timed from just before the command starts to the job's recorded end (SUCCEEDED);
    the default placement puts 2 ranks on each node;
  * plain: `mpirun -np 4 -H node-a:2,node-b:2 [--map-by node] PROGRAM` over the same two
    namespaces with the same ssh configuration (ringleader's per-job ssh_config: keys, known
    hosts) and the same interface selection, timed until mpirun exits. Its ranks land on the
    same hosts in the same rank order as the submitted job's (the default placement alternates
    between the nodes, as Kubernetes' default spread does, hence --map-by node); the training
    program reports each rank's host, and a difference stops the benchmark.
The programs: a trivial one (each rank prints its rank: nothing but the fixed cost of starting
and ending a job), and a short training job (examples/jobs/vgg16_exchange.py moving ResNet-50's
gradients across the shaped link, ``--steps`` timed steps), whose rank 0 reports images/s.
Reported: median seconds of each, the ratios plain/submit of wall time and submit/plain of
images/s (goal >= 0.9), where submit's time goes (the CLI until the job is recorded, until mpirun
starts, mpirun until SUCCEEDED), and the load average before and after.
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
TRIVIAL = ["python3", "-c", "import os; print('rank', os.environ.get('OMPI_COMM_WORLD_RANK'), flush=True)"]
TRAIN = ["python3", "examples/jobs/vgg16_exchange.py", "--model", "resnet50", "--batch-size", "64", "--warmup", "1"]
GOAL = 0.9
LAYOUT: list[str] = []  # the node of each rank, in rank order, as the submitted jobs have them


def ringleader(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(Path(sys.executable).parent / "ringleader"), *args], env=env, cwd=REPO,
                          capture_output=True, text=True, check=True)  # fmt: skip


def images_per_s(text: str) -> float | None:
    """Rank 0's images/s from a training program's output (its one JSON line), if any; the
    hosts it reports for its ranks must be those of the placement (same rank order)."""
    for line in reversed(text.splitlines()):
        brace = line.find("{")
        if brace >= 0 and "images_per_sec_total" in line:
            result = json.loads(line[brace:])
            if LAYOUT and result["hosts"] != LAYOUT:
                raise SystemExit(f"ranks ran on {result['hosts']}, not {LAYOUT}: the two sides differ")
            return float(result["images_per_sec_total"])
    return None


def time_submit(
    name: str, program: list[str], env: dict[str, str], phases: list[tuple[float, float, float]] | None = None
) -> tuple[float, float | None]:
    """(seconds until the recorded end, rank 0's images/s if it printed them)."""
    from ringleader.engines.embedded.engine import Runtime
    from ringleader.jobs.states import JobStatus

    start = time.time()
    ringleader("submit", "mpi", "--name", name, "--workers", "4", "--gpus", "1", "--", *program, env=env)
    with Runtime.open(env["RINGLEADER_HOME"]) as rt:
        view = rt.wait(name, timeout=600)
        log = rt.logs(name, f"{name}-worker-0")
    if view.status is not JobStatus.SUCCEEDED or view.ended_at is None or view.started_at is None:
        raise SystemExit(f"job {name} ended {view.status.value}: {view.reason}")
    if phases is not None:  # CLI until recorded, recorded until mpirun started, mpirun until SUCCEEDED
        launched = next(e.at for e in view.events if e.kind == "Started")
        phases.append((view.created_at - start, launched - view.created_at, view.ended_at - launched))
    return view.ended_at - start, images_per_s(log)


def rank_hosts(home: Path, job: str) -> list[str]:
    """The node of each rank of a submitted job, in rank order."""
    from ringleader.engines.embedded.engine import Runtime

    with Runtime.open(home) as rt:
        workers = (rt.get(job).placement or {})["chosen"]["workers"]
    return [w["node"] for w in sorted(workers, key=lambda w: w["index"])]


def host_options(hosts: list[str]) -> list[str]:
    """What a user types to get ranks on ``hosts`` in that order: -H with each host's slots, and
    --map-by node when the ranks go round the hosts (the default policy's spread, as pods of an
    MPIJob spread by Kubernetes' scheduler) rather than filling one host after another."""
    counts = {h: hosts.count(h) for h in dict.fromkeys(hosts)}
    line = ["-H", ",".join(f"{h}:{n}" for h, n in counts.items())]
    by_slot = [h for h, n in counts.items() for _ in range(n)]
    by_node = [h for i in range(max(counts.values())) for h, n in counts.items() if i < n]
    if hosts == by_slot:
        return line
    if hosts == by_node:
        return [*line, "--map-by", "node"]
    raise SystemExit(f"no -H line gives ranks on {hosts} in this order")


def plain_argv(home: Path, hosts: list[str]) -> list[str]:
    """The mpirun line a user would type for the same ranks on the same hosts in the same order
    (the program follows)."""
    from ringleader.engines.embedded.engine import Runtime
    from ringleader.engines.embedded.hosts.netns import settings
    from ringleader.engines.embedded.hosts.ssh import write_config

    with Runtime.open(home) as rt:
        nodes = [ns.spec for ns in rt.nodes().nodes if ns.spec.address is not None]
    config = write_config(home / "plain_ssh_config", nodes, home)
    argv = ["mpirun", "-np", str(len(hosts)), *host_options(hosts), "--bind-to", "none",
            "--mca", "plm_rsh_agent", f"ssh -F {config}", "-x", "PATH"]  # fmt: skip
    if os.geteuid() == 0:
        argv.append("--allow-run-as-root")
    for key, value in settings(home)["mca"].items():
        argv += ["--mca", key, str(value)]
    return argv


def time_plain(argv: list[str], env: dict[str, str]) -> tuple[float, float | None]:
    start = time.time()
    done = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True)
    took = time.time() - start
    if done.returncode != 0:
        raise SystemExit(f"plain mpirun failed ({done.returncode}): {done.stderr.strip()[-400:]}")
    return took, images_per_s(done.stdout)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=5, help="Runs of each, interleaved.")
    p.add_argument("--steps", type=int, default=3, help="Timed steps of the training job.")
    p.add_argument("-o", "--output", choices=["table", "json"], default="table")
    a = p.parse_args()
    if os.geteuid() != 0:
        print("hosts_launch needs root (`cluster up`: network namespaces, a bridge, tc)", file=sys.stderr)
        return 2
    home = Path(tempfile.mkdtemp(prefix="rl-launch-")) / "home"
    venv_bin = str(Path(sys.executable).parent)
    env = {**os.environ, "RINGLEADER_HOME": str(home), "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}"}
    programs = {"trivial": TRIVIAL, "train": [*TRAIN, "--steps", str(a.steps)]}
    load_before = os.getloadavg()
    ringleader("cluster", "up", "-f", "examples/seeds-cluster.yaml", env=env)
    runs: dict[str, dict[str, list[tuple[float, float | None]]]] = {k: {"submit": [], "plain": []} for k in programs}
    phases: list[tuple[float, float, float]] = []
    try:
        time_submit("warmup", TRIVIAL, env)  # warm both paths once (page cache, sshd's first connections)
        LAYOUT.extend(rank_hosts(home, "warmup"))
        argv = plain_argv(home, LAYOUT)
        time_plain([*argv, *TRIVIAL], env)
        for i in range(a.reps):
            for kind, program in programs.items():
                runs[kind]["submit"].append(time_submit(f"{kind}-{i}", program, env,
                                                        phases if kind == "trivial" else None))  # fmt: skip
                runs[kind]["plain"].append(time_plain([*argv, *program], env))
    finally:
        ringleader("cluster", "down", env=env)
    load_after = os.getloadavg()
    med = statistics.median
    result: dict[str, object] = {
        "reps": a.reps, "steps": a.steps, "load_before": load_before, "load_after": load_after,
        "cores": os.cpu_count(), "plain_command": " ".join(argv), "rank_hosts": LAYOUT,
        "submit_phases_median_s": {
            k: med(ph[i] for ph in phases) for i, k in enumerate(("cli", "to_start", "run_to_succeeded"))
        },
    }  # fmt: skip
    for kind in programs:
        sub, pl = runs[kind]["submit"], runs[kind]["plain"]
        entry: dict[str, object] = {
            "submit_s": [t for t, _ in sub], "plain_s": [t for t, _ in pl],
            "wall_ratio_plain_over_submit": med(t for t, _ in pl) / med(t for t, _ in sub),
        }  # fmt: skip
        if all(r is not None for _, r in sub + pl):
            entry["submit_images_per_s"] = [r for _, r in sub]
            entry["plain_images_per_s"] = [r for _, r in pl]
            entry["throughput_ratio_submit_over_plain"] = med(r for _, r in sub if r) / med(r for _, r in pl if r)
        result[kind] = entry
    if a.output == "json":
        print(json.dumps(result, indent=2))
        return 0
    print(f"{'':44}{'median':>10}  runs")
    for kind in programs:
        r = result[kind]
        assert isinstance(r, dict)
        for side in ("submit", "plain"):
            label = f"{kind}: " + ("ringleader submit -> SUCCEEDED, s" if side == "submit" else "plain mpirun -H, s")
            print(f"{label:44}{med(r[side + '_s']):>10.2f}  " + " ".join(f"{t:.2f}" for t in r[side + "_s"]))
        if "throughput_ratio_submit_over_plain" in r:
            for side in ("submit", "plain"):
                rates = r[f"{side}_images_per_s"]
                label = f"{kind}: {side}, images/s"
                print(f"{label:44}{med(rates):>10.1f}  " + " ".join(f"{x:.1f}" for x in rates))
    cli, to_start, run = result["submit_phases_median_s"].values()  # type: ignore[attr-defined]
    print(
        f"trivial submit, median phases: CLI {cli:.2f} s, recorded -> mpirun started {to_start:.2f} s, "
        f"mpirun started -> SUCCEEDED {run:.2f} s"
    )
    for kind in programs:
        r = result[kind]
        assert isinstance(r, dict)
        line = f"{kind}: wall time plain/submit {r['wall_ratio_plain_over_submit']:.2f}"
        if "throughput_ratio_submit_over_plain" in r:
            line += f", images/s submit/plain {r['throughput_ratio_submit_over_plain']:.2f}"
        print(line + f" (goal >= {GOAL})")
    print(f"ranks on {', '.join(LAYOUT)} (rank order) on both sides; plain: {' '.join(argv[:6])} ...")
    print(f"load average {load_before[0]:.1f} before, {load_after[0]:.1f} after, {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
