"""How the pipeline and scaling drivers run one measurement point: one function per point
that returns the point's parsed JSON result.

``LocalLauncher`` starts the ranks itself (mpirun or plain processes, see launch.py);
``RuntimeLauncher`` submits each point as a job to ringleader's runtime, which places it
(topology-aware where GPUs exist) and starts the ranks with RANK/WORLD_SIZE/MASTER_*.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from typing import Any, Protocol

from ringleader.bench.launch import launch, worker_command
from ringleader.bench.ranks import cuda_count
from ringleader.engines.embedded import engine as api
from ringleader.errors import RingleaderError


class PointError(RingleaderError):
    """A measurement point failed; the message carries the tail of its output."""


class Launcher(Protocol):
    name: str

    def run(self, kind: str, cfg: dict[str, Any], backend: str, workers: int,
            threads: int | None = None) -> dict[str, Any]:  # fmt: skip
        """Run ``workers`` ranks of bench ``kind`` with ``cfg`` (``threads`` OpenMP threads each,
        default: the cores split among them) and return rank 0's JSON."""
        ...


def parse_json(stdout: str) -> dict[str, Any]:
    """The last top-level JSON object in a rank-0 output (anything before it is ignored)."""
    start = stdout.rfind("\n{")
    start = 0 if stdout.startswith("{") and start < 0 else start + 1
    return dict(json.loads(stdout[start:]))


class LocalLauncher:
    name = "local"

    def __init__(self, timeout: float | None = 600) -> None:
        self.timeout = timeout

    def run(self, kind: str, cfg: dict[str, Any], backend: str, workers: int,
            threads: int | None = None) -> dict[str, Any]:  # fmt: skip
        cfg = dict(cfg, output="json", backend=backend)
        res = launch(kind, cfg, backend, workers, capture=True, timeout=self.timeout, threads=threads)
        if res.returncode != 0 and kind != "allreduce":
            tail = (res.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise PointError(f"{kind} point {backend} x{workers} failed ({res.returncode}): {tail}")
        try:
            result = parse_json(res.stdout)
        except (ValueError, json.JSONDecodeError) as exc:
            raise PointError(f"{kind} point {backend} x{workers} printed no JSON result") from exc
        if result.get("out_of_bounds"):
            raise PointError(
                f"{kind} point {backend} x{workers}: {result['out_of_bounds']} wrong values",
                "a failed verification is not a bandwidth: check the backend",
            )
        return result


class RuntimeLauncher:
    """Each point is a ringleader job: the runtime places it and starts its ranks. A job that
    succeeded is deleted once its result is read (``keep`` keeps it); a failed one stays, so
    `ringleader logs` can show why."""

    name = "runtime"

    def __init__(self, home: str | None = None, timeout: float | None = 600, keep: bool = False) -> None:
        self.api = api
        self.rt = api.Runtime.open(home=home)
        self.timeout = timeout
        self.keep = keep

    def run(self, kind: str, cfg: dict[str, Any], backend: str, workers: int,
            threads: int | None = None) -> dict[str, Any]:  # fmt: skip
        cfg = dict(cfg, output="json", backend=backend)
        name = f"bench-{kind}-{backend}-{workers}-{uuid.uuid4().hex[:6]}"
        command = worker_command(kind, cfg)
        if backend == "mpi":  # the runtime rewrites mpirun's host options for its placement
            command = ["mpirun", "-np", str(workers), "--bind-to", "none", *command]
        per_rank = str(threads or max(1, (os.cpu_count() or 1) // workers))
        spec = self.api.JobSpec(
            name=name, workers=workers, gpus_per_worker=1 if cuda_count() else 0, command=command,
            env={"OMP_NUM_THREADS": per_rank, "OMPI_MCA_mpi_yield_when_idle": "1"},
            topology_aware=True,
        )  # fmt: skip
        self.rt.submit(spec)
        view = self.rt.wait(name, timeout=self.timeout)
        out = self.rt.logs(name)
        if view.status.value != "SUCCEEDED":
            tail = out.strip().splitlines()[-1:] or ["(no output)"]
            raise PointError(f"{kind} job {name} ended {view.status.value}: {tail[0]}",
                             f"see `ringleader logs {name}` (the job is kept)")  # fmt: skip
        try:
            result = parse_json(out)
        except (ValueError, json.JSONDecodeError) as exc:
            raise PointError(f"{kind} job {name} printed no JSON result",
                             f"see `ringleader logs {name}` (the job is kept)") from exc  # fmt: skip
        if not self.keep:
            self.rt.delete([name])
        return {**result, "job": name}


def default_launcher(kind: str = "auto", home: str | None = None, keep: bool = False) -> Launcher:
    """``runtime`` when ringleader.engines.embedded.engine is importable (and ``auto``), else ``local``;
    ``keep`` keeps each point's job in the runtime."""
    if kind in ("auto", "runtime"):
        try:
            return RuntimeLauncher(home=home, keep=keep)
        except (ImportError, AttributeError) as exc:
            if kind == "runtime":
                raise RingleaderError(f"ringleader's runtime is not available ({exc})",
                                      "use --launcher local") from exc
            print(f"note: runtime not available ({exc}); launching ranks locally",
                  file=sys.stderr)  # fmt: skip
    return LocalLauncher()
