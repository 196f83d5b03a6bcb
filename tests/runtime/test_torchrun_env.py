"""A rank sees the environment torchrun gives the processes it starts: real `torchrun
--nproc_per_node 2` (one node, then two nodes on this host) run beside the same program
submitted, and the variables a training program reads compared: its rank, which ranks share a
node, the sizes, OMP_NUM_THREADS and the restart counts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ringleader.engines.embedded.engine import Runtime
from ringleader.jobs.states import JobStatus
from ringleader.runtime.rank import rendezvous_port

PY = sys.executable
# What torchrun's agent sets for each process, compared one for one.
TORCHRUN_NAMES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                  "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "OMP_NUM_THREADS", "TORCHELASTIC_RESTART_COUNT",
                  "TORCHELASTIC_MAX_RESTARTS", "TORCH_NCCL_ASYNC_ERROR_HANDLING")  # fmt: skip
# DeepSpeed's launcher's names (torchrun sets none of them).
DEEPSPEED_NAMES = ("CROSS_RANK", "CROSS_SIZE", "LOCAL_SIZE")
# Prints what it was given; with a folder as its argument, writes it there too (RANK.json): the
# processes of one torchrun agent share its stdout, and two lines can interleave.
SHOW = (
    "import json, os, sys\n"
    f"seen = json.dumps({{n: os.environ.get(n) for n in {(*TORCHRUN_NAMES, *DEEPSPEED_NAMES, 'RINGLEADER_NODE')!r}}})\n"
    "print(seen, flush=True)\n"
    "if sys.argv[1:]:\n"
    "    open(os.path.join(sys.argv[1], os.environ['RANK'] + '.json'), 'w').write(seen)\n"
)

pytestmark = pytest.mark.slow


@pytest.fixture
def show(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The program, and a shell that has not set OMP_NUM_THREADS (torchrun's default applies)."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    script = tmp_path / "show.py"
    script.write_text(SHOW)
    return script


def by_torchrun(script: Path, nnodes: int) -> list[dict[str, Any]]:
    """Every process's variables under real torchrun, ``nnodes`` agents of 2 processes each on
    this host (node ranks 0..nnodes-1, a static rendezvous as on a cluster), sorted by RANK."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    port = str(rendezvous_port("127.0.0.1"))
    seen = script.parent / f"torchrun-{nnodes}"
    seen.mkdir()
    agents = [
        subprocess.Popen([PY, "-m", "torch.distributed.run", "--nnodes", str(nnodes), "--nproc_per_node", "2",
                          "--node_rank", str(node), "--master_addr", "127.0.0.1", "--master_port", port,
                          str(script), str(seen)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True)
        for node in range(nnodes)
    ]  # fmt: skip
    for agent in agents:
        _, err = agent.communicate(timeout=180)
        assert agent.returncode == 0, err
    return [json.loads((seen / f"{rank}.json").read_text()) for rank in range(2 * nnodes)]


def by_ringleader(rt: Runtime, h: Any, name: str, command: list[str], workers: int, gpus: int,
                  **kw: Any) -> list[dict[str, Any]]:  # fmt: skip
    rt.submit(h.spec(name, command, workers=workers, gpus=gpus, **kw))
    view = rt.wait(name, 120)
    assert view.status is JobStatus.SUCCEEDED, view.reason
    rows = [json.loads(rt.logs(name, f"worker-{i}").strip().splitlines()[-1]) for i in range(workers)]
    return sorted(rows, key=lambda r: int(r["RANK"]))


def torchruns(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: r[k] for k in TORCHRUN_NAMES} for r in rows]


@pytest.mark.parametrize("kind", ["mpi", "pytorch"])
def test_one_node_two_ranks_as_torchrun_gives_them(small: Runtime, h: Any, show: Path, kind: str) -> None:
    """`torchrun --nproc_per_node 2 show.py` and a plain line (or `submit pytorch`) of 2 workers
    on one node: the same variables, OMP_NUM_THREADS=1 included."""
    ours = by_ringleader(small, h, f"one-{kind}", [PY, str(show)], 2, 1, kind=kind)
    theirs = by_torchrun(show, 1)
    assert torchruns(ours) == torchruns(theirs)
    assert {r["OMP_NUM_THREADS"] for r in ours} == {"1"}
    assert [(r["CROSS_RANK"], r["CROSS_SIZE"], r["LOCAL_SIZE"]) for r in ours] == [("0", "1", "2")] * 2


def test_two_nodes_number_ranks_node_by_node(seeds: Runtime, h: Any, show: Path) -> None:
    """4 workers x 2 GPUs spread over two nodes (no --gputopology): ranks 0,1 share one node and
    2,3 the other, as two torchrun agents of --nproc_per_node 2 number them (a ring crosses the
    network twice, not four times)."""
    ours = by_ringleader(seeds, h, "spread", [PY, str(show)], 4, 2)
    theirs = by_torchrun(show, 2)
    assert torchruns(ours) == torchruns(theirs)
    nodes = [r["RINGLEADER_NODE"] for r in ours]
    assert nodes[0] == nodes[1] != nodes[2] == nodes[3]
    assert [(r["CROSS_RANK"], r["CROSS_SIZE"], r["LOCAL_SIZE"]) for r in ours] == [
        ("0", "2", "2"), ("0", "2", "2"), ("1", "2", "2"), ("1", "2", "2")]  # fmt: skip


def test_what_the_user_set_and_mpirun_lines_keep(small: Runtime, h: Any, show: Path) -> None:
    """OMP_NUM_THREADS given with -e stays (torchrun keeps the one it finds); the ranks of an
    mpirun line get none (mpirun sets no such default); one rank on its node gets none (torchrun
    sets it only for more than one process per node)."""
    given = by_ringleader(small, h, "given", [PY, str(show)], 2, 1, env={"OMP_NUM_THREADS": "3"})
    assert {r["OMP_NUM_THREADS"] for r in given} == {"3"}
    under_mpirun = by_ringleader(small, h, "mpirun", ["mpirun", "-np", "2", PY, str(show)], 2, 1)
    assert {r["OMP_NUM_THREADS"] for r in under_mpirun} == {None}
    alone = by_ringleader(small, h, "alone", [PY, str(show)], 1, 1)
    assert alone[0]["OMP_NUM_THREADS"] is None


def test_a_kubernetes_launchers_ranks_get_the_same(show: Path) -> None:
    """The MPIJob launcher's line for a plain program (mpirun, then a shell that renames Open
    MPI's variables), run by real Open MPI as one pod of 2 ranks: torchrun's variables again."""
    from ringleader.engines.kubernetes.manifests import launcher_command, rank_shell
    from ringleader.jobs.spec import JobSpec

    spec = JobSpec(name="k", workers=2, gpus_per_worker=1, command=[PY, str(show)])
    argv = launcher_command(spec, per_pod=2)
    assert argv[0] == "mpirun"
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    seen = show.parent / "launcher"
    seen.mkdir()
    done = subprocess.run([argv[0], "--oversubscribe", *argv[1:], str(seen)], env=env, capture_output=True,
                          text=True, timeout=180)  # fmt: skip
    assert done.returncode == 0, done.stderr
    ours = [json.loads((seen / f"{rank}.json").read_text()) for rank in range(2)]
    assert torchruns(ours) == torchruns(by_torchrun(show, 1))
    assert [(r["CROSS_RANK"], r["CROSS_SIZE"], r["LOCAL_SIZE"]) for r in ours] == [("0", "1", "2")] * 2
    # what a deepspeed line became gets no torchrun defaults: DeepSpeed's launcher sets none
    deepspeed = JobSpec(name="d", workers=2, gpus_per_worker=1, command=[PY, str(show)],
                        user_command=["deepspeed", str(show)])  # fmt: skip
    assert "OMP_NUM_THREADS" in rank_shell(spec) and "OMP_NUM_THREADS" not in rank_shell(deepspeed)
