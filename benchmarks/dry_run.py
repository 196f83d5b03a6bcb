"""`submit --dry-run` on big clusters vs the 2-node seeds cluster, side by side.

    python benchmarks/dry_run.py [--sizes 1000,10000] [--reps 7]

Each cluster gets its own state directory (made once with `cluster apply`): the seeds cluster
(examples/seeds-cluster.yaml, 2 nodes) and clusters of N emulated nodes, most of them dgx1v
and a tenth each dgx-a100 and pcie-8gpu-2socket (three distinct topologies, three label sets).
Every repetition then runs the same `ringleader submit mpi --dry-run` (2 workers x 1 GPU,
topology-aware) once on each cluster, in turn, and records the CPU time (user + system) of
each process. The table gives min/median/max per cluster and the ratio of medians to the
seeds cluster, with the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SEEDS = ROOT / "examples" / "seeds-cluster.yaml"
SUBMIT = ["submit", "mpi", "--name", "probe", "--workers", "2", "--gpus", "1", "--gputopology=true",
          "--dry-run", "--", "true"]  # fmt: skip


def cluster_yaml(nodes: int) -> str:
    """N emulated nodes: 80% dgx1v, 10% dgx-a100, 10% PCIe, in blocks declared with `count`."""
    parts = [("dgx1v", nodes - 2 * (nodes // 10), "rack-a"), ("dgx-a100", nodes // 10, "rack-b"),
             ("pcie-8gpu-2socket", nodes // 10, "rack-c")]  # fmt: skip
    lines = ["nodes:"]
    for preset, count, rack in parts:
        if count:
            lines += [f"  - name: {preset.replace('-', '')}", f"    preset: {preset}", f"    count: {count}",
                      "    network_gbps: 25", "    emulated: true", f"    labels: {{rack: {rack}}}"]  # fmt: skip
    return "\n".join(lines) + "\n"


def ringleader(home: Path, args: list[str]) -> float:
    """CPU seconds (user + system) of one `ringleader ARGS` process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = dict(os.environ, RINGLEADER_HOME=str(home))
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as installed: modules load from .pyc files
    subprocess.run([sys.executable, "-m", "ringleader.cli.main", *args], check=True, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000", help="node counts to compare with the seeds cluster")
    ap.add_argument("--reps", type=int, default=7)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="rl-dry-run-") as tmp:
        homes: dict[str, Path] = {}
        for label, text in [("seeds (2)", SEEDS.read_text()),
                            *((f"{n:,}", cluster_yaml(n)) for n in map(int, a.sizes.split(",")))]:  # fmt: skip
            home, path = Path(tmp) / f"home{len(homes)}", Path(tmp) / f"cluster{len(homes)}.yaml"
            path.write_text(text)
            ringleader(home, ["cluster", "apply", "-f", str(path)])
            ringleader(home, SUBMIT)  # warm: .pyc files, page cache
            homes[label] = home
        load_before = os.getloadavg()
        times: dict[str, list[float]] = {label: [] for label in homes}
        for _ in range(a.reps):
            for label, home in homes.items():
                times[label].append(ringleader(home, SUBMIT) * 1e3)
        load_after = os.getloadavg()
    base = statistics.median(times["seeds (2)"])
    print(f"submit --dry-run CPU ms, {a.reps} interleaved repetitions; load average "
          f"{load_before[0]:.2f} before, {load_after[0]:.2f} after")
    print("| nodes | min | median | max | median / seeds |")
    print("|---:|---:|---:|---:|---:|")
    for label, xs in times.items():
        med = statistics.median(xs)
        print(f"| {label} | {min(xs):.0f} | {med:.0f} | {max(xs):.0f} | {med / base:.2f} |")


if __name__ == "__main__":
    main()
