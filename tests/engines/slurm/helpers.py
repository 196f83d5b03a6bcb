"""Helpers of the real-Slurm tests: jobs from plain sbatch, Slurm's own view of GPUs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PY = sys.executable


class Outside:
    """Jobs submitted with plain sbatch, as a user who never heard of ringleader would."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.ids: list[str] = []

    def sbatch(self, *options: str, seconds: int = 300) -> str:
        script = self.workdir / f"outside-{len(self.ids)}.py"
        script.write_text(f"#!{PY}\nimport time\ntime.sleep({seconds})\n")
        script.chmod(0o755)
        argv = ["sbatch", "--parsable", "--output=/dev/null", f"--chdir={self.workdir}", *options, str(script)]
        ident = subprocess.run(argv, check=True, capture_output=True, text=True).stdout.strip()
        self.ids.append(ident)
        return ident

    def cancel(self, ident: str) -> None:
        subprocess.run(["scancel", ident], check=True)

    def cleanup(self) -> None:
        for ident in self.ids:
            subprocess.run(["scancel", ident], capture_output=True)


def node_gpus_used() -> dict[str, list[int]]:
    """Slurm's own answer: GPU indices in use per node (`scontrol -d show node`)."""
    from ringleader.engines.slurm.state import read_nodes

    return {n.name: list(n.used) for n in read_nodes() if n.used}
