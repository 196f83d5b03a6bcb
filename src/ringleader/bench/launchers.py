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
from collections import Counter
from typing import Any, Protocol

from ringleader.bench.launch import launch, worker_command
from ringleader.bench.ranks import cuda_count
from ringleader.engines.embedded import engine as api
from ringleader.errors import RingleaderError, UsageError


class PointError(RingleaderError):
    """A measurement point failed; the message carries the tail of its output."""


class Launcher(Protocol):
    name: str

    def run(self, kind: str, cfg: dict[str, Any], backend: str, workers: int,
            threads: int | None = None, servers: int | None = None) -> dict[str, Any]:  # fmt: skip
        """Run ``workers`` ranks of bench ``kind`` with ``cfg`` (``threads`` OpenMP threads each,
        default: the cores split among them), ``workers / servers`` of them on each of
        ``servers`` servers when given, and return rank 0's JSON."""
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
            threads: int | None = None, servers: int | None = None) -> dict[str, Any]:  # fmt: skip
        if servers not in (None, 1):
            raise PointError(f"{kind} point {backend} x{workers}: local processes run on one server, not {servers}")
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
            threads: int | None = None, servers: int | None = None) -> dict[str, Any]:  # fmt: skip
        cfg = dict(cfg, output="json", backend=backend)
        name = f"bench-{kind}-{backend}-{workers}-{uuid.uuid4().hex[:6]}"
        command = worker_command(kind, cfg)
        if backend == "mpi":  # the runtime rewrites mpirun's host options for its placement
            command = ["mpirun", "-np", str(workers), "--bind-to", "none", *command]
        per_rank = str(threads or max(1, (os.cpu_count() or 1) // workers))
        gpus = 1 if cuda_count() else 0
        if servers is not None:
            gpus = self.gpus_for(workers // servers)
        spec = self.api.JobSpec(
            name=name, workers=workers, gpus_per_worker=gpus, command=command,
            env={"OMP_NUM_THREADS": per_rank, "OMPI_MCA_mpi_yield_when_idle": "1"},
            topology_aware=True,
        )  # fmt: skip
        self.rt.submit(spec)
        view = self.rt.wait(name, timeout=self.timeout)
        out = self.rt.logs(name)
        if servers is not None:
            self.check_layout(view, servers, workers // servers)
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

    def gpus_for(self, per_server: int) -> int:
        """GPUs per rank that put exactly ``per_server`` ranks on a server: a server's GPUs over
        ``per_server`` (a rank on a real GPU uses the first of its share; an emulated cluster's
        GPUs are ids only). The servers must all have the same count, a multiple of it."""
        counts = {n.spec.topology.n_gpus for n in self.rt.nodes().nodes if n.spec.topology.n_gpus}
        if len(counts) != 1:
            raise UsageError(
                "--servers needs servers of one GPU count to place ranks so many per server"
                + (f"; this cluster's have {', '.join(map(str, sorted(counts)))}" if counts else ", and none has GPUs"),
                "declare a cluster of like nodes (GPUs or an emulated cluster's: `ringleader cluster up`)",
            )
        [count] = counts
        if count % per_server:
            raise UsageError(f"{per_server} ranks per server do not split a server's {count} GPUs evenly",
                             f"use ranks-per-server counts that divide {count}")  # fmt: skip
        return count // per_server

    @staticmethod
    def check_layout(view: Any, servers: int, per_server: int) -> None:
        """The job ran ``per_server`` ranks on each of ``servers`` servers, or the point is not
        the layout it names."""
        chosen = (view.placement or {}).get("chosen") or {}
        per_node = Counter(worker["node"] for worker in chosen.get("workers", []))
        if sorted(per_node.values()) != [per_server] * servers:
            raise PointError(f"job {view.name} was placed as {dict(per_node)}, not {servers} x {per_server} ranks",
                             "free the cluster's GPUs (other jobs hold some) and run again")  # fmt: skip


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
