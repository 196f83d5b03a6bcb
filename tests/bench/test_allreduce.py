"""Real 2-rank collectives: numerically checked, a planted error caught, and the same table
from `-np 2`, from inside mpirun and from the plain per-rank program."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ringleader.bench.launch import mpirun_command, rank_env
from ringleader.bench.ranks import free_port

from .conftest import PY, cli

pytestmark = pytest.mark.slow  # multi-process runs of seconds each: run early (tests/conftest.py)

SMALL = ("-b", "64", "-e", "16K", "-f", "16", "-n", "3", "-w", "1")
ROW = re.compile(r"^\s+\d+\s+\d+\s+\w+\s+\w+\s+-?\d+(\s+[\d.]+){3}\s+\d+(\s+[\d.]+){3}\s+\d+$")
MATRIX = Path(__file__).with_name("rank_matrix.py")
HAS_MPI = shutil.which("mpirun") is not None


def _rows(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line and not line.startswith("#")]


def _shape(stdout: str) -> list[tuple[str, ...]]:
    """(size, count, type, redop, root, #wrong oop, #wrong ip) per row: what must not change."""
    return [tuple(r.split()[i] for i in (0, 1, 2, 3, 4, 8, 12)) for r in _rows(stdout)]


EXPECTED_SHAPE = [("64", "16", "float", "sum", "-1", "0", "0"),
                  ("1024", "256", "float", "sum", "-1", "0", "0"),
                  ("16384", "4096", "float", "sum", "-1", "0", "0")]  # fmt: skip


@pytest.mark.parametrize("backend", ["gloo", pytest.param("mpi", marks=pytest.mark.skipif(
    not HAS_MPI, reason="needs Open MPI"))])  # fmt: skip
def test_every_dtype_op_and_collective_verifies_exactly(backend: str) -> None:
    env = rank_env(2)
    cmd = [PY, str(MATRIX), backend]
    if backend == "mpi":
        proc = subprocess.run(mpirun_command(2, cmd, env), env=env, capture_output=True,
                              text=True, timeout=180, check=False)  # fmt: skip
        outs, errs, codes = [proc.stdout], proc.stderr, [proc.returncode]
    else:
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE="2")
        procs = [subprocess.Popen(cmd, env=dict(env, RANK=str(r)), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for r in range(2)]  # fmt: skip
        pairs = [p.communicate(timeout=180) for p in procs]
        outs, errs, codes = [o for o, _ in pairs], pairs[0][1], [p.returncode for p in procs]
    assert codes == [0] * len(codes), errs[-2000:]
    res = json.loads("".join(outs))
    assert res.pop("corrupted") == [1, 1]
    assert len(res) == 18
    assert all(wrong == 0 and n > 0 for wrong, n in res.values()), res


@pytest.mark.skipif(not HAS_MPI, reason="needs Open MPI")
def test_planted_wrong_value_fails_the_run() -> None:
    proc = cli("bench", "allreduce", *SMALL, "--backend", "mpi", "-np", "2",
               env={"RINGLEADER_BENCH_CORRUPT": "1:5"})  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-1000:]
    rows = _rows(proc.stdout)
    assert len(rows) == 3 and all(ROW.match(r) for r in rows), proc.stdout
    assert all(r.split()[8] == "1" and r.split()[12] == "0" for r in rows)  # oop caught, ip fine
    assert "# Out of bounds values : 3 FAILED" in proc.stdout
    mca = next(ln for ln in proc.stdout.splitlines() if ln.startswith("# MCA: "))  # they change the figures
    assert "mpi_yield_when_idle=1" in mca and "btl_vader_single_copy_mechanism=none" in mca
    assert "orte_" not in mca and "pmix" not in mca  # mpirun's bookkeeping is not a setting


def _mpirun(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = ["mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    return subprocess.run([*cmd, PY, "-m", "ringleader.cli.main", "bench", "allreduce", *SMALL,
                           *args], capture_output=True, text=True, timeout=120, check=False,
                          env=rank_env(2))  # fmt: skip


@pytest.mark.skipif(not HAS_MPI, reason="needs Open MPI")
def test_under_mpirun_prints_the_same_table() -> None:
    job = _mpirun("--backend", "mpi")
    assert job.returncode == 0, job.stderr[-1000:]
    assert _shape(job.stdout) == EXPECTED_SHAPE
    assert "# Out of bounds values : 0 OK" in job.stdout


@pytest.mark.skipif(not HAS_MPI, reason="needs Open MPI")
def test_gloo_inside_mpirun_json_contract() -> None:
    """gloo ranks started by mpirun find each other through mpi4py; the JSON keeps its keys."""
    job = _mpirun("--backend", "gloo", "-d", "half", "-o", "json")
    assert job.returncode == 0, job.stderr[-1000:]
    res = json.loads(job.stdout)
    assert res["kind"] == "allreduce" and res["world_size"] == 2 and res["nodes"] == 1
    assert (res["collective"], res["backend"], res["dtype"], res["op"]) == (
        "allreduce", "gloo", "half", "sum")
    assert res["out_of_bounds"] == 0 and res["avg_busbw_gbs"] > 0 and "env" in res
    assert [r["size_bytes"] for r in res["results"]] == [64, 1024, 16384]
    for row in res["results"]:
        assert {"count", "type", "redop", "root"} <= row.keys()
        for part in ("oop", "ip"):
            cell = row[part]
            assert cell["wrong"] == 0 and cell["time_us"] > 0
            assert cell["busbw_gbs"] == pytest.approx(cell["algbw_gbs"])  # 2(n-1)/n = 1 at n=2


def test_plain_per_rank_program_prints_the_same_table() -> None:
    env = dict(rank_env(2), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE="2")
    argv = [sys.executable, "-m", "ringleader.cli.main", "bench", "allreduce", *SMALL, "-np", "2"]
    procs = [subprocess.Popen(argv, env=dict(env, RANK=str(r), LOCAL_RANK=str(r)), text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for r in range(2)]  # fmt: skip
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs[0][1][-1000:]
    assert outs[1][0] == ""  # only rank 0 prints
    assert _shape(outs[0][0]) == EXPECTED_SHAPE  # -np inside a job: runs as that rank
    assert re.search(r"# Avg bus bandwidth    : [\d.e+-]+", outs[0][0])


@pytest.mark.parametrize("world", range(2, 17))
def test_a_collective_that_writes_nothing_or_mixes_ranks_is_caught(world: int) -> None:
    """The verification's inputs: a receive buffer left as filled never equals the expected
    sum (at any world size, 5 and 10 included), and no two ranks send the same pattern."""
    import torch

    from ringleader.bench.allreduce import _sentinel, _values

    sent = [_values(torch, 0, 2048, r, torch.int64, "cpu") for r in range(world)]
    expected_sum = sum(sent)
    untouched = torch.full((2048,), _sentinel(world), dtype=torch.int64)
    assert int((untouched != expected_sum).sum()) == 2048
    assert int((untouched != expected_sum / world).sum()) == 2048  # avg
    assert len({tuple(v.tolist()) for v in sent}) == world
    assert all(int(v.abs().max()) <= 2 for v in sent)  # sums stay exact in fp16 and bf16
