"""The Slurm engine against a real Slurm (see conftest): gangs start together on exactly the
placed nodes and GPU ids, jobs from plain sbatch are respected, crashes fail the job, delete
cancels it."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from engines.slurm.helpers import PY, Outside, node_gpus_used
from rankprograms import checkpointing_rank, resuming_rank
from ringleader.engines.slurm import SlurmEngine
from ringleader.engines.slurm.sandbox import Sandbox
from ringleader.errors import NotFoundError, UnschedulableError
from ringleader.jobs.spec import JobSpec
from ringleader.jobs.states import JobStatus
from ringleader.scheduler.move import RESTART_WINDOW
from waiting import wait_for

T = TypeVar("T")

pytestmark = pytest.mark.slow

# Each rank writes what it was given, then waits for every other rank of the gang: a gang that
# did not start together times out and fails.
RECORD_AND_MEET = """
import json, os, socket, sys, time
out = sys.argv[1]
keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT",
        "CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS", "SLURM_PROCID", "SLURM_LOCALID", "RINGLEADER_NODE",
        "GROUP_RANK", "OMP_NUM_THREADS", "CROSS_RANK", "CROSS_SIZE", "LOCAL_SIZE", "TORCHELASTIC_RESTART_COUNT",
        "TORCHELASTIC_MAX_RESTARTS")
mine = {k: os.environ.get(k) for k in keys}
mine["host"] = socket.gethostname()
with open(os.path.join(out, "rank-%s.json" % mine["RANK"]), "w") as fh:
    json.dump(mine, fh)
deadline = time.time() + float(sys.argv[2])
while len([f for f in os.listdir(out) if f.startswith("rank-")]) < int(mine["WORLD_SIZE"]):
    if time.time() > deadline:
        sys.exit("not all ranks started together")
    time.sleep(0.1)
"""


def job(name: str, workers: int, gpus: int, command: list[str], **kw: object) -> JobSpec:
    return JobSpec(name=name, workers=workers, gpus_per_worker=gpus, command=command, **kw)  # type: ignore[arg-type]


def ranks(out: Path) -> list[dict[str, str]]:
    return [json.loads((out / f"rank-{r}.json").read_text()) for r in range(len(list(out.glob("rank-*"))))]


def test_gang_over_two_nodes_starts_together_on_exactly_the_placed_gpus(
    engine: SlurmEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # torchrun's default applies
    out = tmp_path / "ranks"
    out.mkdir()
    result = engine.submit(job("gang", 6, 1, [PY, "-c", RECORD_AND_MEET, str(out), "30"], topology_aware=True))
    placement = result.decision.placement
    assert placement is not None and len(placement.nodes) == 2
    view = engine.wait("gang", timeout=90)
    assert view.status is JobStatus.SUCCEEDED, view.reason
    seen = ranks(out)
    assert len(seen) == 6
    first = next(i for i in view.instances if i.is_chief)
    for inst, env in zip(view.instances, seen, strict=True):
        node_gpus = [g for i in view.instances if i.node == inst.node for g in i.gpus]
        # Slurm itself handed this node exactly the placed GPU ids...
        assert sorted(int(g) for g in env["SLURM_STEP_GPUS"].split(",")) == sorted(node_gpus)
        # ...and the rank sees them in placement order, runs where it was placed, with
        # torchrun's variables matching Slurm's task numbering.
        assert env["CUDA_VISIBLE_DEVICES"] == ",".join(map(str, node_gpus))
        assert env["host"] == env["RINGLEADER_NODE"] == inst.node
        assert env["RANK"] == env["SLURM_PROCID"] and env["LOCAL_RANK"] == env["SLURM_LOCALID"]
        assert env["WORLD_SIZE"] == "6" and env["MASTER_ADDR"] == seen[0]["MASTER_ADDR"]
        # torchrun's environment: its OMP_NUM_THREADS rule, the node's index, the restart counts
        assert env["OMP_NUM_THREADS"] == ("1" if int(env["LOCAL_WORLD_SIZE"]) > 1 else None)
        assert env["GROUP_RANK"] == env["CROSS_RANK"] == env["NODE_RANK"] and env["CROSS_SIZE"] == "2"
        assert env["LOCAL_SIZE"] == env["LOCAL_WORLD_SIZE"]
        assert (env["TORCHELASTIC_RESTART_COUNT"], env["TORCHELASTIC_MAX_RESTARTS"]) == ("0", "0")
    # ranks numbered node by node, as Slurm numbers its tasks
    assert [env["NODE_RANK"] for env in seen] == sorted(env["NODE_RANK"] for env in seen)
    assert first.node == placement.nodes[0] and seen[0]["host"] == first.node
    assert {inst.node for inst in view.instances} == set(placement.nodes)
    assert view.started_at is not None and view.ended_at is not None
    for path in [engine.root, *engine.root.rglob("*")]:  # state, plans, logs: the owner's only
        assert path.stat().st_mode & 0o077 == 0, path


def test_plain_sbatch_jobs_are_respected_and_a_gang_waits_for_whole_gpus(
    engine: SlurmEngine, outside: Outside, tmp_path: Path
) -> None:
    one = outside.sbatch("--nodelist=node-a", "--gres=gpu:1")
    all_b = outside.sbatch("--nodelist=node-b", "--gres=gpu:4")
    wait_for(lambda: len(node_gpus_used().get("node-a", [])) == 1 and len(node_gpus_used().get("node-b", [])) == 4,
             60, "the outside jobs to hold their GPUs")  # fmt: skip
    (busy,) = node_gpus_used()["node-a"]
    snapshot = engine.nodes()
    assert snapshot.node("node-a").owner(busy) == f"slurm-{one}"
    assert snapshot.node("node-b").n_free == 0

    out = tmp_path / "pair"
    out.mkdir()
    pair = engine.submit(job("pair", 1, 2, [PY, "-c", RECORD_AND_MEET, str(out), "5"], topology_aware=True))
    assert pair.decision.placement is not None
    gpus = set(pair.decision.placement.gpus_on("node-a"))
    assert busy not in gpus and len(gpus) == 2
    assert pair.decision.chosen is not None and pair.decision.chosen.metrics.bottleneck.kind == "NV2"
    assert engine.wait("pair", timeout=60).status is JobStatus.SUCCEEDED
    assert {int(g) for g in ranks(out)[0]["SLURM_STEP_GPUS"].split(",")} == gpus

    big = engine.submit(job("big", 1, 4, [PY, "-c", "print('big ran')"]))
    assert big.job is not None and big.job.status is JobStatus.PENDING and big.job.reason
    assert not big.job.instances  # nothing is handed to Slurm while it cannot start whole
    outside.cancel(all_b)  # the watcher submits it once node-b is free
    view = engine.wait("big", timeout=60)
    assert view.status is JobStatus.SUCCEEDED and view.nodes == ["node-b"]
    assert engine.logs("big") == "big ran\n" == "".join(engine.follow("big"))
    assert any(e.kind == "Pending" for e in view.events) and any(e.kind == "Placed" for e in view.events)
    assert (engine.root / "watcher.log").stat().st_mode & 0o077 == 0


def test_a_crashing_rank_fails_the_job_and_frees_its_gpus(engine: SlurmEngine) -> None:
    code = "import os, sys, time; sys.exit(3) if os.environ['RANK'] == '1' else time.sleep(120)"
    engine.submit(job("crash", 2, 1, [PY, "-c", code]))
    view = engine.wait("crash", timeout=90)
    assert view.status is JobStatus.FAILED
    assert view.reason is not None and "crash-worker-1" in view.reason and "exit code 3" in view.reason
    by_name = {i.name: i for i in view.instances}
    assert by_name["crash-worker-1"].status == "Failed" and by_name["crash-worker-1"].exit_code == 3
    assert by_name["crash-worker-0"].status == "Stopped"
    wait_for(lambda: all(a[1] != "crash" for ns in engine.nodes().nodes for a in ns.allocated), what="GPUs freed")


def test_delete_cancels_every_rank_in_slurm(engine: SlurmEngine) -> None:
    engine.submit(job("long", 2, 2, [PY, "-c", "import time; time.sleep(300)"]))
    wait_for(lambda: all(i.pid for i in engine.get("long").instances), what="both ranks running")
    pids = [i.pid for i in engine.get("long").instances]
    ident = engine.records.load("long")["slurm_id"]  # type: ignore[index]
    assert engine.delete(["long"]) == ["long"]
    state = subprocess.run(["scontrol", "-o", "show", "job", ident], capture_output=True, text=True).stdout
    assert "JobState=CANCELLED" in state or not state.strip()
    with pytest.raises(NotFoundError):
        engine.get("long")
    wait_for(lambda: not any(_alive(p) for p in pids if p), what="rank processes gone")
    assert all(not ns.allocated for ns in engine.nodes().nodes)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_mpirun_line_runs_as_one_mpi_world_with_the_placements_ranks(engine: SlurmEngine) -> None:
    """The user's mpirun inside the allocation: rank i where the placement put worker i, local
    ranks as Open MPI numbers them, each rank seeing its node's placed GPUs."""
    pytest.importorskip("mpi4py")
    code = ("from mpi4py import MPI; import os; c = MPI.COMM_WORLD; "
            "assert c.Get_rank() == int(os.environ['RANK']) and c.Get_size() == 4; "
            "e = os.environ; assert e['OMPI_COMM_WORLD_LOCAL_RANK'] == e['LOCAL_RANK']; "
            "assert len(e['CUDA_VISIBLE_DEVICES'].split(',')) == 4; "  # the node's placed GPUs, as torchrun shows them
            "print('sum', c.allreduce(c.Get_rank()), os.environ['FROM_X'])")  # fmt: skip
    engine.submit(job("mpi", 4, 2, ["mpirun", "-np", "4", "-x", "FROM_X=yes", PY, "-c", code]))
    view = engine.wait("mpi", timeout=120)
    assert view.status is JobStatus.SUCCEEDED, (view.reason, engine.logs("mpi", "worker-0")[-1500:])
    assert len(view.nodes) == 2  # 4 x 2 GPUs need both 4-GPU nodes
    assert engine.logs("mpi") == "sum 6 yes\n"


def test_cli_jobs_commands_on_the_slurm_engine(slurm_box: object, tmp_path: Path) -> None:
    env = {**os.environ, "RINGLEADER_HOME": str(tmp_path / "home")}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([PY, "-m", "ringleader.cli.main", *args], env=env, capture_output=True, text=True)

    assert cli("engine", "use", "slurm").returncode == 0
    plan = cli("submit", "mpi", "--name", "dry", "--workers", "2", "--gpus", "2", "--gputopology=true",
               "--dry-run", "--", PY, "-c", "pass")  # fmt: skip
    assert plan.returncode == 0 and "Bottleneck:  NV" in plan.stdout
    assert "WORKER  NODE    GPU_IDS\n0       node-a" in plan.stdout
    top = cli("top", "node")
    assert top.returncode == 0 and "node-a" in top.stdout and "node-b" in top.stdout
    missing = cli("get", "nope")
    assert missing.returncode == 1 and missing.stderr.startswith("error: job 'nope' not found")  # as kubectl
    too_big = cli("submit", "mpi", "--name", "huge", "--workers", "1", "--gpus", "5", "--", PY, "-c", "pass")
    assert too_big.returncode == 2 and too_big.stderr.count("\n") == 1 and "can never run" in too_big.stderr
    assert not (tmp_path / "home" / "slurm").exists()  # refused: nothing written


def test_torch_gloo_rendezvous_across_two_nodes_from_the_rank_environment(engine: SlurmEngine) -> None:
    pytest.importorskip("torch")
    code = ("import os, torch, torch.distributed as dist; dist.init_process_group('gloo'); "
            "t = torch.ones(1) * (dist.get_rank() + 1); dist.all_reduce(t); "
            "print(dist.get_world_size(), int(t.item()), os.environ['MASTER_ADDR']); "
            "dist.destroy_process_group()")  # fmt: skip
    # The sandbox's node names are in no resolver: gloo is told the interface, as on sites
    # where the host name resolves to the wrong network.
    engine.submit(job("gloo", 2, 4, [PY, "-c", code], env={"GLOO_SOCKET_IFNAME": "eth0"}))  # one rank per node
    view = engine.wait("gloo", timeout=180)
    assert view.status is JobStatus.SUCCEEDED, view.reason
    assert sorted(i.node for i in view.instances) == ["node-a", "node-b"]
    world, total, master = engine.logs("gloo").splitlines()[-1].split()  # after torch's own warnings
    assert (world, total) == ("2", "3") and master.startswith("10.213.")


def training(engine: SlurmEngine, job: str) -> bool:
    instances = engine.get(job).instances
    return bool(instances) and all(i.pid and "training" in engine.logs(job, i.name) for i in instances)


@pytest.mark.parametrize("launcher", [[], ["mpirun", "-np", "2"]], ids=["srun", "mpirun"])
def test_delete_lets_every_rank_write_its_checkpoint_on_sigterm(engine: SlurmEngine, tmp_path: Path,
                                                                launcher: list[str]) -> None:  # fmt: skip
    engine.submit(job("ckpt", 2, 1, [*launcher, PY, "-c", checkpointing_rank(tmp_path)]))
    # Training: their SIGTERM handler is in place (a pid alone may be a program still starting).
    wait_for(lambda: training(engine, "ckpt"), what="both ranks to train")
    engine.delete(["ckpt"])
    wait_for(lambda: len(list(tmp_path.glob("ckpt-*.terms"))) == 2, what="both ranks to write their checkpoint")
    for rank in ("0", "1"):
        assert (tmp_path / f"ckpt-{rank}").read_text() == "step 42"
        assert (tmp_path / f"ckpt-{rank}.terms").read_text() == "1"  # SIGTERM once, as Slurm sends it


def test_delete_now_stops_every_rank_and_frees_the_gpus(engine: SlurmEngine, tmp_path: Path) -> None:
    engine.submit(job("hasty", 2, 1, [PY, "-c", checkpointing_rank(tmp_path)]))
    # Training: their SIGTERM handler is in place (a pid alone may be a program still starting).
    wait_for(lambda: training(engine, "hasty"), what="both ranks to train")
    pids = [i.pid for i in engine.get("hasty").instances]
    engine.delete(["hasty"], now=True)
    wait_for(lambda: not any(_alive(p) for p in pids if p), what="rank processes gone")
    assert all(not ns.allocated for ns in engine.nodes().nodes)


def test_slurms_topology_conf_is_the_network_tree_and_a_required_leaf_waits(engine: SlurmEngine) -> None:
    conf_dir = Path(os.environ["SLURM_CONF"]).parent
    topology = conf_dir / "topology.conf"
    topology.write_text("SwitchName=leaf-a Nodes=node-a\nSwitchName=leaf-b Nodes=node-b\n"
                        "SwitchName=spine Switches=leaf-a,leaf-b\n")  # fmt: skip
    try:
        state = engine.nodes()
        assert [ns.spec.switches for ns in state.nodes] == [("leaf-a", "spine"), ("leaf-b", "spine")]
        spread = engine.submit(job("spread", 2, 4, [PY, "-c", "pass"], topology_required="spine"), dry_run=True)
        assert spread.decision.placement is not None and len(spread.decision.placement.nodes) == 2
        with pytest.raises(UnschedulableError) as err:
            engine.submit(job("in-leaf", 2, 4, [PY, "-c", "pass"], topology_required="leaf"), dry_run=True)
        assert "needs 2 worker(s) x 4 GPU(s) under one leaf; most free under any leaf: 1 worker slot(s)" in str(
            err.value
        )
    finally:
        topology.unlink()


def test_top_node_status_follows_slurms_node_state_with_its_reason(slurm_box: object, tmp_path: Path) -> None:
    """A node an admin sets DOWN shows NotReady with Slurm's Reason=, a drained one Drained; both
    Ready again once resumed. Slurm keeps no per-GPU health: UNHEALTHY is n/a. (The sandbox has
    ReturnToService=2: slurmctld returns a DOWN node whose slurmd answers its next ping, so each
    look is taken again unless node-b was still DOWN after it, i.e. throughout it.)"""
    env = {**os.environ, "RINGLEADER_HOME": str(tmp_path / "home")}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([PY, "-m", "ringleader.cli.main", *args], env=env, capture_output=True, text=True)

    def scontrol(*args: str, check: bool = True) -> None:
        subprocess.run(["scontrol", "update", *args], check=check, capture_output=True)

    def while_down(look: Callable[[], T]) -> T:
        for _ in range(5):
            scontrol("nodename=node-b", "state=down", "reason=fan failure ticket 42")
            seen = look()
            state = subprocess.run(["scontrol", "-o", "show", "node", "node-b"], capture_output=True, text=True)
            if "State=DOWN" in state.stdout:
                return seen
        raise AssertionError("node-b kept returning to service before the look ended")

    assert cli("engine", "use", "slurm").returncode == 0
    eng = SlurmEngine(tmp_path / "home")
    assert {n: h.status for n, h in eng.node_health().items()} == {"node-a": "Ready", "node-b": "Ready"}
    try:
        scontrol("nodename=node-a", "state=drain", "reason=nccl tests")
        health = while_down(lambda: eng.node_health(names=["node-a", "node-b"]))
        assert health["node-b"].status == "NotReady" and "fan failure ticket 42" in health["node-b"].reason
        assert health["node-a"].status == "Drained" and "nccl tests" in health["node-a"].reason
        assert health["node-a"].unhealthy_gpus is None
        rows = {ln.split()[0]: ln.split() for ln in while_down(lambda: cli("top", "node")).stdout.splitlines()[1:3]}
        assert rows["node-a"][2] == "Drained" and rows["node-b"][2] == "NotReady" and rows["node-b"][5] == "n/a"
        shown = json.loads(while_down(lambda: cli("top", "node", "node-b", "-o", "json")).stdout)
        assert shown[0]["status"] == "NotReady" and "fan failure ticket 42" in shown[0]["reason"]
        assert "+DRAIN: nccl tests" in cli("top", "node", "-d", "node-a").stdout
    finally:
        for node in ("node-a", "node-b"):
            scontrol(f"nodename={node}", "state=resume", check=False)  # node-b may be back already
    wait_for(lambda: all(h.status == "Ready" for h in eng.node_health().values()), what="nodes resumed")


def test_a_priority_job_preempts_a_whole_slurm_job_which_checkpoints_and_is_requeued(
    engine: SlurmEngine, tmp_path: Path
) -> None:
    """--preempt on Slurm: the victim's Slurm job is cancelled (SIGTERM, KillWait, SIGKILL), its
    ranks write their checkpoint, it goes back to ringleader's queue, the preemptor starts on its
    node's NVLink quad, and the victim runs again with RINGLEADER_RESTARTS=1 when GPUs free."""
    low_a, low_b = tmp_path / "a", tmp_path / "b"
    low_a.mkdir()
    low_b.mkdir()
    engine.submit(job("low-a", 4, 1, [PY, "-c", checkpointing_rank(low_a)], topology_aware=True))
    engine.submit(job("low-b", 4, 1, [PY, "-c", checkpointing_rank(low_b)], topology_aware=True))
    wait_for(lambda: training(engine, "low-a") and training(engine, "low-b"), what="both jobs to train")
    first = {w.node for w in engine.get("low-a").instances}
    result = engine.submit(job("urgent", 4, 1, [PY, "-c", "import time; time.sleep(3)"], topology_aware=True,
                               priority=10, preempt=True))  # fmt: skip
    preemption = result.decision.preemption
    assert preemption is not None and preemption.names == ("low-a",)
    wait_for(lambda: engine.get("urgent").status is JobStatus.RUNNING, what="the preemptor to start")
    assert {w.node for w in engine.get("urgent").instances} == first
    for rank in range(4):
        assert (low_a / f"ckpt-{rank}").read_text() == "step 42"  # each rank checkpointed on SIGTERM
    kinds = [e.kind for e in engine.get("low-a").events]
    assert "Preempted" in kinds and "Requeued" in kinds
    assert engine.get("low-b").status is JobStatus.RUNNING and not (low_b / "ckpt-0").exists()
    wait_for(lambda: engine.get("low-a").status is JobStatus.RUNNING, what="the victim to run again")
    view = engine.get("low-a")
    assert view.restarts == 1
    wait_for(lambda: engine.logs("low-a") == "training\ntraining\n", what="the second run's first line")
    assert engine.previous_logs("low-a") == "training\n"  # `logs --previous`: the run before this one
    plan = json.loads((engine.root / "run" / "low-a" / "plan.json").read_text())
    assert plan["env"]["RINGLEADER_RESTARTS"] == "1"


def test_a_spread_gang_moves_to_the_node_that_freed_and_resumes_there_from_its_checkpoint(
    engine: SlurmEngine, tmp_path: Path
) -> None:
    """Moves on Slurm (``jobs/moves.py``): two holders take three GPUs of each node, so the gang
    (2 workers of one GPU, VGG16 as the queue prices it, ten minutes of work as its user says)
    starts spread 1 + 1. Once one holder ends, the watcher's pass moves the gang to that node:
    its Slurm job is cancelled (SIGTERM, KillWait, SIGKILL), requeued and submitted again on the
    node's free GPUs, where every rank resumes from its checkpoint as run 1."""
    for name in ("hold-a", "hold-b"):
        engine.submit(job(name, 3, 1, [PY, "-c", "import time; time.sleep(600)"], topology_aware=True))
        wait_for(lambda name=name: engine.get(name).status is JobStatus.RUNNING, what=f"{name} to run")
    held = {name: {i.node for i in engine.get(name).instances} for name in ("hold-a", "hold-b")}
    assert len(held["hold-a"]) == len(held["hold-b"]) == 1 and held["hold-a"] != held["hold-b"]
    (tmp_path / "rank.py").write_text(resuming_rank(tmp_path))
    engine.submit(job("gang", 2, 1, [PY, str(tmp_path / "rank.py")], topology_aware=True, model="vgg16",
                      run_time_s=600.0))  # fmt: skip
    wait_for(lambda: all((tmp_path / f"ckpt-{rank}").exists() for rank in "01"), what="the gang to train spread")
    assert len({i.node for i in engine.get("gang").instances}) == 2
    [freed] = held["hold-a"]
    engine.delete(["hold-a"])
    wait_for(lambda: engine.get("gang").status is JobStatus.SUCCEEDED, timeout=120, what="the gang to move and end")
    view = engine.get("gang")
    [said] = [e.message for e in view.events if e.kind == "Moved"]
    assert said.startswith("moves: finishes sooner by ~") and f"move to node {freed} (" in said, said
    assert "Requeued" in [e.kind for e in view.events]
    assert {i.node for i in view.instances} == {freed} and view.restarts == 1
    for rank in "01":
        step, node = (tmp_path / f"resumed-{rank}").read_text().split()
        assert int(step) > 0 and node == freed
        assert (tmp_path / f"restarts-{rank}").read_text().split()[0] == "1"
    # What the restart took, measured as the embedded engine measures it (Slurm's start of the
    # run to its program's first line), prices the next move and stop for queue order here.
    started_at = engine.records.load("gang")["started_at"]
    resumed_at = min((tmp_path / f"resumed-{rank}").stat().st_mtime for rank in "01")
    [restart_s] = engine.records.recent_restarts(RESTART_WINDOW)
    # (Slurm's start and end times are whole seconds, the lines' stamps milliseconds)
    assert resumed_at - started_at - 0.01 <= restart_s <= view.ended_at + 1.0 - started_at, restart_s
    snapshot = engine._queue_snapshot(engine.snapshot(), engine.records.all(), time.time())
    assert snapshot.config.reorder.restart_s == restart_s
    engine.delete(["hold-b"])


FAULTY_NCCL = ("import sys; print('node:12:34 [0] NCCL WARN NET/Socket : Connection closed by remote peer', "
               "flush=True); sys.exit(1)")  # fmt: skip


def test_a_gang_on_a_crashed_slurm_node_restarts_elsewhere_and_the_node_is_drained(
    slurm_box: Sandbox, engine: SlurmEngine, tmp_path: Path
) -> None:
    """--max-restarts on Slurm: a node already blamed once (a gang's NCCL connection error) crashes
    under a training gang (every process on it killed, the node set DOWN as a health check
    does). Slurm fails the job (NODE_FAIL); ringleader blames the node a second time, drains it
    in Slurm with the reason, and restarts the gang on the other node from its checkpoint."""
    engine.submit(job("flaky", 4, 1, [PY, "-c", FAULTY_NCCL], topology_aware=True))
    flaky = engine.wait("flaky", 60)
    assert flaky.status is JobStatus.FAILED
    [node] = {i.node for i in flaky.instances}
    (tmp_path / "rank.py").write_text(resuming_rank(tmp_path))
    engine.submit(job("train", 4, 1, [PY, str(tmp_path / "rank.py")], topology_aware=True, max_restarts=2))
    wait_for(lambda: all((tmp_path / f"ckpt-{r}").exists() for r in range(4)), what="every rank to checkpoint")
    assert {i.node for i in engine.get("train").instances} == {node}
    [other] = {"node-a", "node-b"} - {node}
    slurm_box.crash(node)
    try:
        subprocess.run(["scontrol", "update", f"nodename={node}", "state=down", "reason=nhc: node lost"], check=True)
        done = engine.wait("train", 90)
        assert done.status is JobStatus.SUCCEEDED, (done.reason, [(e.kind, e.message) for e in done.events])
        [restarting] = [e.message for e in done.events if e.kind == "Restarting"]
        # the node named: DOWN with the health check's reason, or lost where ringleader read the
        # failed job before the health check's `scontrol update` landed (a loaded machine)
        said = restarting.split(f"Slurm: NODE_FAIL, node {node} ", 1)[-1]
        assert said.startswith(("DOWN", "lost")) and "restart 1 of 2" in restarting, restarting
        assert {i.node for i in done.instances} == {other}
        for rank in range(4):  # resumed from where the lost node's run had saved it
            step, resumed_on = (tmp_path / f"resumed-{rank}").read_text().split()
            assert int(step) > 0 and resumed_on == other
        health = engine.node_health([node])[node]
        assert health.status == "Cordoned" and health.reason.startswith("blamed for 2 failures, the last of job train")
        shown = subprocess.run(["scontrol", "-o", "show", "node", node], capture_output=True, text=True).stdout
        assert "DRAIN" in shown and "Reason=ringleader: blamed for 2 failures" in shown
    finally:
        slurm_box.revive(node)
    engine.uncordon_node(node)
    wait_for(lambda: all(h.status == "Ready" for h in engine.node_health().values()), what="the node back")


# The first run: rank 1 fails once every rank trains; the others take 1.5 s (within the sandbox's
# KillWait of 2 s) to write a checkpoint on SIGTERM. A later run marks its start and ends.
LATE_CHECKPOINT = """
import os, signal, sys, time
folder, rank = sys.argv[1], os.environ["RANK"]
if os.environ["RINGLEADER_RESTARTS"] != "0":
    open(os.path.join(folder, "start-" + rank), "w").close()
    raise SystemExit(0)
stopping = []
def on_term(signum, frame):
    if stopping:
        return
    stopping.append(signum)
    time.sleep(1.5)
    open(os.path.join(folder, "late-" + rank), "w").close()
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
open(os.path.join(folder, "ready-" + rank), "w").close()
while rank == "1" and len([f for f in os.listdir(folder) if f.startswith("ready-")]) < 4:
    time.sleep(0.05)
if rank == "1":
    sys.exit(1)
while True:
    time.sleep(0.05)
"""


def test_a_restarted_slurm_gang_starts_only_once_its_last_run_has_stopped(engine: SlurmEngine, tmp_path: Path) -> None:
    """--max-restarts on Slurm: a rank fails; its gang's other ranks write their checkpoints in
    Slurm's KillWait, and the next run (which would fit on the other node at once) starts only
    after: a run is over for ringleader only once Slurm lists none of its job's components as
    running or completing (every node has reported its processes gone)."""
    engine.submit(job("relay", 4, 1, [PY, "-c", LATE_CHECKPOINT, str(tmp_path)], topology_aware=True,
                      max_restarts=1))  # fmt: skip
    done = engine.wait("relay", 120)
    assert done.status is JobStatus.SUCCEEDED, (done.reason, [(e.kind, e.message) for e in done.events])
    late = [(tmp_path / f"late-{rank}").stat().st_mtime for rank in (0, 2, 3)]
    started = [(tmp_path / f"start-{rank}").stat().st_mtime for rank in range(4)]
    assert max(late) < min(started), f"the last run wrote {max(late) - min(started):.2f} s after the next started"


def test_queue_and_cordon_commands_on_the_slurm_engine(slurm_box: object, tmp_path: Path) -> None:
    """`node cordon|uncordon` answer on Slurm as on the embedded engine; a cordon drains the node
    in Slurm with the reason, and uncordon resumes it. Team queues are slurmdbd's accounts and
    QOS (test_real_slurm_queues.py): on a Slurm without accounting `queue create` says so."""
    env = {**os.environ, "RINGLEADER_HOME": str(tmp_path / "home")}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([PY, "-m", "ringleader.cli.main", *args], env=env, capture_output=True, text=True)

    assert cli("engine", "use", "slurm").returncode == 0
    refused = cli("queue", "create", "team-a", "--gpus", "4")
    assert refused.returncode == 2 and len(refused.stderr.splitlines()) == 1
    assert refused.stderr.startswith("error: team queues on Slurm are slurmdbd's accounts and QOS, and this Slurm "
                                     "keeps no accounting (AccountingStorageType=accounting_storage/none). To fix: ask "
                                     "the Slurm administrator for slurmdbd")  # fmt: skip
    assert [q["name"] for q in json.loads(cli("queue", "list", "-o", "json").stdout)] == ["default"]
    unknown = cli("submit", "mpi", "--name", "q", "--queue", "nope", "--workers", "1", "--gpus", "1", "--", "true")
    assert unknown.returncode == 1 and unknown.stderr.startswith("error: queue 'nope' not found")
    try:
        assert cli("node", "cordon", "node-b", "--reason", "fan ticket 7").returncode == 0
        shown = subprocess.run(["scontrol", "-o", "show", "node", "node-b"], capture_output=True, text=True).stdout
        assert "DRAIN" in shown and "Reason=ringleader: fan ticket 7" in shown
        top = json.loads(cli("top", "node", "node-b", "-o", "json").stdout)
        assert top[0]["status"] == "Cordoned" and top[0]["reason"] == "fan ticket 7"
        assert cli("node", "uncordon", "node-b").returncode == 0
        not_cordoned = cli("node", "uncordon", "node-b")
        assert not_cordoned.returncode == 1 and "is not cordoned" in not_cordoned.stderr
    finally:
        subprocess.run(["scontrol", "update", "nodename=node-b", "state=resume"], capture_output=True)
    wait_for(lambda: "DRAIN" not in subprocess.run(["scontrol", "-o", "show", "node", "node-b"], capture_output=True,
                                                   text=True).stdout, 30, "node-b resumed")  # fmt: skip


def test_a_gang_with_start_best_waits_for_one_node_instead_of_spreading(
    engine: SlurmEngine, outside: Outside, tmp_path: Path
) -> None:
    """The start rules on real Slurm, as on every engine: two GPUs are free on each node, so a
    4-GPU gang would start spread now (its dry run says so); with --start best it waits for the node whose other two
    GPUs a ringleader job holds (its time limit tells when they free), says so, and starts there
    whole once they free."""
    holder = engine.submit(job("holder", 2, 1, [PY, "-c", "import time; time.sleep(6)"], topology_aware=True,
                               time_limit_s=120))  # fmt: skip
    assert holder.decision.placement is not None
    [first] = holder.decision.placement.nodes
    [second] = {"node-a", "node-b"} - {first}
    outside.sbatch(f"--nodelist={second}", "--gres=gpu:2")
    wait_for(lambda: len(node_gpus_used().get(second, [])) == 2 and engine.get("holder").status is JobStatus.RUNNING,
             60, "the holder and the outside job to hold their GPUs")  # fmt: skip
    now = engine.submit(job("quad", 4, 1, [PY, "-c", "pass"], topology_aware=True), dry_run=True)
    assert now.decision.placement is not None and set(now.decision.placement.nodes) == {first, second}  # spread
    waiting = engine.submit(job("quad", 4, 1, [PY, "-c", "pass"], topology_aware=True, start="best"))
    assert waiting.job is not None and waiting.job.status is JobStatus.PENDING, waiting.job
    assert waiting.job.reason and f"on {first}[" in waiting.job.reason, waiting.job.reason
    assert not waiting.job.instances  # not handed to Slurm while it waits for better GPUs
    done = engine.wait("quad", timeout=90)
    assert done.status is JobStatus.SUCCEEDED and done.nodes == [first], (done.reason, done.events)


def test_a_job_that_would_fit_on_cordoned_slurm_nodes_says_cordoned(slurm_box: object, tmp_path: Path) -> None:
    """Both nodes cordoned, one by ringleader and one drained by hand in Slurm (`scontrol update
    state=drain`): a one-GPU job says Cordoned, naming the nodes and the reasons, not "0 free
    GPU(s)"; the drained node resumed, it starts there."""
    env = {**os.environ, "RINGLEADER_HOME": str(tmp_path / "home")}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([PY, "-m", "ringleader.cli.main", *args], env=env, capture_output=True, text=True)

    assert cli("engine", "use", "slurm").returncode == 0
    try:
        assert cli("node", "cordon", "node-a", "--reason", "disk swap").returncode == 0
        subprocess.run(["scontrol", "update", "nodename=node-b", "state=drain", "reason=fan ticket 9"], check=True)
        made = cli("submit", "mpi", "--name", "one", "--workers", "1", "--gpus", "1", "--", PY, "-c", "pass")
        assert made.returncode == 0, made.stderr
        waiting = json.loads(cli("get", "one", "-o", "json").stdout)
        assert waiting["reason_code"] == "Cordoned", waiting["reason"]
        assert waiting["reason"].startswith("it would fit on cordoned node(s) node-a (disk swap), node-b (drained in "
                                            "Slurm: fan ticket 9 [")  # Slurm's reason, with who and when
        assert "0 free GPU(s)" not in waiting["reason"]
        subprocess.run(["scontrol", "update", "nodename=node-b", "state=resume"], check=True)
        wait_for(lambda: json.loads(cli("get", "one", "-o", "json").stdout)["status"] in ("RUNNING", "SUCCEEDED"),
                 what="the job to start on node-b")  # fmt: skip
    finally:
        cli("delete", "--now", "one")
        for node in ("node-a", "node-b"):
            subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"], capture_output=True)
    wait_for(lambda: "DRAIN" not in subprocess.run(["scontrol", "show", "node"], capture_output=True,
                                                   text=True).stdout, 30, "both nodes resumed")  # fmt: skip
