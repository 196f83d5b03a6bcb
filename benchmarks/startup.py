"""CPU time of the commands people type most, side by side with a bare interpreter.

    python benchmarks/startup.py [--reps 15]

Every repetition runs, in turn: `python -c pass`, `python -c "import click"` (the floor any
click program pays), `ringleader --help`, `ringleader list` and `ringleader get JOB`, against a
state directory holding the seeds cluster and three finished jobs (made once, first). Each
process's CPU time (user + system) comes from the kernel's accounting of the child. The table
gives min/median/max in ms and the ratio of medians to `python -c pass`, with the load average
before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The console script a user types (installed beside this interpreter), not `python -m`, which
# pays for runpy on top.
_SCRIPT = Path(sys.executable).parent / "ringleader"
RINGLEADER = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "ringleader.cli.main"]


def cpu_ms(argv: list[str], env: dict[str, str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1e3


def prepare(home: Path, env: dict[str, str]) -> None:
    """The seeds cluster and three finished jobs, so `list` and `get` print real rows."""
    run = lambda *a: subprocess.run([*RINGLEADER, *a], env=env, check=True, capture_output=True, text=True)  # noqa: E731
    run("cluster", "apply", "-f", str(ROOT / "examples" / "seeds-cluster.yaml"))
    for i in range(3):
        run("submit", "mpi", "--name", f"job-{i}", "--workers", "2", "--gpus", "1", "--", sys.executable, "-c", "pass")
    deadline = time.monotonic() + 120
    while any(j["status"] != "SUCCEEDED" for j in json.loads(run("list", "-o", "json").stdout)):
        if time.monotonic() > deadline:
            raise SystemExit("the probe jobs did not finish")
        time.sleep(0.5)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=15)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="rl-startup-") as tmp:
        env = dict(os.environ, RINGLEADER_HOME=str(Path(tmp) / "home"))
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # as installed: modules load from .pyc files
        prepare(Path(tmp) / "home", env)
        cases = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "python -c 'import click'": [sys.executable, "-c", "import click"],
            "ringleader --help": [*RINGLEADER, "--help"],
            "ringleader list": [*RINGLEADER, "list"],
            "ringleader get job-1": [*RINGLEADER, "get", "job-1"],
        }
        for argv in cases.values():  # warm: .pyc files, page cache
            cpu_ms(argv, env)
        load_before = os.getloadavg()
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(a.reps):
            for name, argv in cases.items():
                times[name].append(cpu_ms(argv, env))
        load_after = os.getloadavg()
    base = statistics.median(times["python -c pass"])
    print(f"CPU ms per process, {a.reps} interleaved repetitions; load average {load_before[0]:.2f} before, "
          f"{load_after[0]:.2f} after")  # fmt: skip
    print("| command | min | median | max | median / python -c pass |")
    print("|---|---:|---:|---:|---:|")
    for name, xs in times.items():
        med = statistics.median(xs)
        print(f"| `{name}` | {min(xs):.1f} | {med:.1f} | {max(xs):.1f} | {med / base:.2f} |")


if __name__ == "__main__":
    main()
