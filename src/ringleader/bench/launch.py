"""`-np N`: start N local ranks of a bench (mpirun for mpi, horovodrun for horovod, plain
processes for gloo/nccl).

Each rank runs ``python -m ringleader.bench.worker KIND CONFIG_JSON``; only rank 0 prints, so
the launcher's stdout is exactly what a single rank-0 run would print. The environment
(NCCL_*, GLOO_*, ...) passes through to every rank.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from ringleader.bench import worker
from ringleader.bench.ranks import (
    INSTALL_HOROVOD,
    INSTALL_MPI,
    check_available,
    check_np,
    discover,
    free_port,
    horovodrun,
)
from ringleader.errors import DependencyError, RingleaderError


class BenchFailed(RingleaderError):
    """A bench ran but failed (wrong values, a rank that died); carries the exit code."""

    def __init__(self, message: str, fix: str = "", exit_code: int = 1) -> None:
        super().__init__(message, fix)
        self.exit_code = exit_code

PASS_PREFIXES = ("NCCL_", "GLOO_", "OMP_", "CUDA_", "TORCH_", "RINGLEADER_", "PYTHON", "UCX_")


@dataclass(frozen=True)
class Launched:
    returncode: int
    stdout: str  # empty unless captured
    stderr: str


def worker_command(kind: str, cfg: dict[str, Any]) -> list[str]:
    return [sys.executable, "-m", "ringleader.bench.worker", kind, json.dumps(cfg)]


def mpirun_command(np_: int, command: list[str], env: dict[str, str]) -> list[str]:
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        raise DependencyError("the mpi backend needs mpirun (Open MPI)", INSTALL_MPI)
    cmd = [mpirun, "-np", str(np_), "--oversubscribe", "--bind-to", "none"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    for key in sorted(env):
        if key.startswith(PASS_PREFIXES):
            cmd += ["-x", key]
    return cmd + command


def horovodrun_command(np_: int, command: list[str]) -> list[str]:
    """Horovod's own launcher, as its docs run one machine's ranks: ``horovodrun -np N -H
    localhost:N``; horovodrun picks its controller (MPI where Horovod was built with it, else
    Gloo) and passes the environment on."""
    launcher = horovodrun()
    if launcher is None:
        raise DependencyError("the horovod backend needs horovodrun (Horovod's launcher)", INSTALL_HOROVOD)
    return [launcher, "-np", str(np_), "-H", f"localhost:{np_}", *command]


# horovodrun tags what a rank prints: "[1,0]<stdout>:" (MPI) or "[0]<stdout>:" (Gloo), before
# each line and, under Open MPI, before each chunk it forwards: a line written in two parts may
# carry a second tag inside it ("}[1,0]<stdout>:" then its newline).
RANK_TAG = re.compile(r"\[(?:\d+,)?(\d+)\]<(stdout|stderr)>:")


def untag(text: str) -> str:
    """Rank 0's lines of a horovodrun output without their tags (the other ranks print none)."""
    kept = []
    for line in text.splitlines(keepends=True):
        tag = RANK_TAG.match(line)
        if tag is None or tag.group(1) == "0":
            kept.append(RANK_TAG.sub(lambda t: "" if t.group(1) == "0" else t.group(0), line))
    return "".join(kept)


def rank_env(np_: int, threads: int | None = None) -> dict[str, str]:
    """The environment every rank starts from; OMP threads split the cores among ranks unless
    ``threads`` (or OMP_NUM_THREADS) fixes them."""
    env = dict(os.environ)
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        env.pop(key, None)
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // np_)))
    env.setdefault("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
    # Waiting MPI ranks yield the core instead of spinning: on a shared or small machine a
    # spinning rank steals the CPU its peers compute on (measured 33 -> 23 ms/step here).
    env.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")
    return env


def launch(kind: str, cfg: dict[str, Any], backend: str, np_: int, *, capture: bool = False,
           timeout: float | None = None, threads: int | None = None) -> Launched:
    """Run ``np_`` ranks to completion; the first failing rank's code is returned."""
    command = worker_command(kind, cfg)
    env = rank_env(np_, threads)
    out = subprocess.PIPE if capture else None
    if backend == "mpi":
        proc = subprocess.run(mpirun_command(np_, command, env), env=env, stdout=out,
                              stderr=out, text=True, timeout=timeout, check=False)  # fmt: skip
        return Launched(proc.returncode, proc.stdout or "", proc.stderr or "")
    if backend == "horovod":
        if hasattr(os, "geteuid") and os.geteuid() == 0:  # horovodrun's mpirun, as root (Open MPI's switch)
            env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        proc = subprocess.run(horovodrun_command(np_, command), env=env, stdout=out, stderr=out, text=True,
                              timeout=timeout, check=False)  # fmt: skip
        return Launched(proc.returncode, untag(proc.stdout or ""), untag(proc.stderr or ""))
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(np_),
               LOCAL_WORLD_SIZE=str(np_))  # fmt: skip
    with contextlib.ExitStack() as stack:
        procs, files = [], []
        for rank in range(np_):
            renv = dict(env, RANK=str(rank), LOCAL_RANK=str(rank))
            o = stack.enter_context(tempfile.TemporaryFile("w+")) if capture else None
            e = stack.enter_context(tempfile.TemporaryFile("w+")) if capture else None
            files.append((o, e))
            procs.append(subprocess.Popen(command, env=renv, stdout=o, stderr=e, text=True))
        rc = _wait_all(procs, timeout)
        outs: list[str] = []
        errs: list[str] = []
        for o, e in files:
            for f, acc in ((o, outs), (e, errs)):
                if f is not None:
                    f.seek(0)
                    acc.append(f.read())
    return Launched(rc, "".join(outs), "".join(errs))


def _wait_all(procs: list[subprocess.Popen[str]], timeout: float | None) -> int:
    deadline = None if timeout is None else time.monotonic() + timeout
    failed = 0
    while any(p.poll() is None for p in procs):
        codes = [p.returncode for p in procs if p.returncode not in (None, 0)]
        expired = deadline is not None and time.monotonic() > deadline
        if codes or expired:
            failed = codes[0] if codes else 124
            for p in procs:
                if p.poll() is None:
                    p.terminate()
            break
        time.sleep(0.05)
    for p in procs:
        p.wait()
    if not failed:
        failed = next((p.returncode for p in procs if p.returncode), 0)
    return failed


def dispatch(kind: str, cfg: dict[str, Any], backend: str, np_: int | None) -> int:
    """The CLI's entry: launch ``np_`` local ranks unless this process already is a rank (or
    no -np was given), in which case run in-process. Returns the exit code."""
    info = discover()
    if np_ is not None and not info.in_job:
        check_available(backend, need_mpirun=backend == "mpi")
        check_np(backend, np_)
        rc = launch(kind, cfg, backend, np_).returncode
        if rc and kind != "allreduce":
            raise BenchFailed(f"{np_} {backend} ranks of bench {kind}: a rank exited with code {rc}",
                              "see the rank's error above", rc)
        return rc
    if np_ is not None and np_ != info.world_size and info.rank == 0:
        print(f"note: -np {np_} ignored: already rank {info.rank} of a {info.world_size}-rank job",
              file=sys.stderr)  # fmt: skip
    check_available(backend, need_mpirun=False)
    return worker.run_kind(kind, cfg)
