"""Slurm's text formats and the per-GPU GRES encoding, without a Slurm cluster."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from ringleader.engines.slurm.gres import gres_conf_lines, node_gres, request_gres, topology_from_links, type_index
from ringleader.engines.slurm.launch import by_node, mpirun_head
from ringleader.engines.slurm.slurmcli import expand_indices, job_node_gres, parse_gres, parse_records
from ringleader.engines.slurm.state import SlurmNode, cluster_state, node_from_record, node_spec, unknown_topology
from ringleader.jobs.line import read_line
from ringleader.runtime.rank import stop_mca
from ringleader.scheduler import Placement, WorkerSlot
from ringleader.topology import NodeSpec, preset


def test_gres_used_with_indices_typed_and_untyped() -> None:
    typed = parse_gres("gpu:g0:1(IDX:0),gpu:g1:0(IDX:N/A),gpu:g2:1(IDX:2),gpu:g3:0(IDX:N/A)")
    assert [(i.type, i.count, i.indices) for i in typed] == [("g0", 1, (0,)), ("g1", 0, ()), ("g2", 1, (2,)),
                                                             ("g3", 0, ())]  # fmt: skip
    untyped = parse_gres("gpu:tesla:3(IDX:0,2-3),nic:1(IDX:0)")
    assert [(i.name, i.type, i.indices) for i in untyped] == [("gpu", "tesla", (0, 2, 3)), ("nic", None, (0,))]
    assert expand_indices("N/A") == []


def test_one_line_records_keep_values_with_spaces_and_per_node_gres() -> None:
    line = ("JobId=5 HetJobId=5 JobName=wrap JobState=RUNNING Reason=None JOB_GRES=gpu:g2:1   "
            "Nodes=node-a CPU_IDs=0 Mem=0 GRES=gpu:g2:1(IDX:2) OS=Linux 6.1 #1 SMP Power=")  # fmt: skip
    (rec,) = parse_records(line + "\n")
    assert rec["JobId"] == "5" and rec["JobState"] == "RUNNING" and rec["OS"] == "Linux 6.1 #1 SMP"
    assert job_node_gres(rec["_line"]) == [("node-a", [2])]


@given(st.sampled_from(["dgx1v", "dgx-a100", "pcie-8gpu-2socket", "pcie-4gpu-workstation"]))
def test_gres_conf_links_round_trip_nvlinks(name: str) -> None:
    topo = preset(name)
    lines = gres_conf_lines("n1", topo, [f"/dev/nvidia{i}" for i in range(topo.n_gpus)])
    rows = [[int(v) for v in line.split("Links=")[1].split(",")] for line in lines]
    back = topology_from_links(rows)
    for i in range(topo.n_gpus):
        assert f"Type=g{i} " in lines[i]
        for j in range(topo.n_gpus):
            a, b = topo.link(i, j), back.link(i, j)
            assert a.is_nvlink == b.is_nvlink and a.nvlinks == b.nvlinks
            if i != j and not a.is_nvlink:
                assert str(b) == "SYS"  # never better than what Slurm can say


def test_exact_ids_become_per_gpu_types() -> None:
    assert node_gres(3) == "gpu:g0:1,gpu:g1:1,gpu:g2:1"
    assert request_gres([3, 1]) == "gpu:g1:1,gpu:g3:1"
    assert type_index("g12") == 12 and type_index("tesla") is None


def test_ranks_are_numbered_node_by_node_like_slurm_tasks() -> None:
    mixed = Placement("j", (WorkerSlot(0, "a", (0,)), WorkerSlot(1, "b", (5,)), WorkerSlot(2, "a", (1,))))
    assert [(s.index, s.node, s.gpus) for s in by_node(mixed).slots] == [(0, "a", (0,)), (1, "a", (1,)),
                                                                          (2, "b", (5,))]  # fmt: skip


def test_an_mpirun_line_runs_as_its_mpirun_inside_the_allocation() -> None:
    """The user's options as written but those that would map ranks elsewhere than the placement
    or reach the nodes otherwise than the launch does; stopped as every rank is."""
    line = read_line(["mpirun", "-np", "4", "-x", "A=1", "-x", "B", "--mca", "btl", "tcp,self", "--map-by", "node",
                      "--mca", "plm", "slurm", "python", "t.py", "-x", "keep"])  # fmt: skip
    head = mpirun_head(line, grace_s=7)
    assert head[0] == "mpirun" and ("--allow-run-as-root" in head) == (os.geteuid() == 0)
    assert head[head.index("--bind-to") + 1] == "none"  # Slurm decides the cores
    mca = {head[i + 1]: head[i + 2] for i, w in enumerate(head) if w == "--mca"}
    assert mca["btl"] == "tcp,self" and mca["plm"] == "rsh" and mca["rmaps"] == "seq"  # the user's plm replaced
    assert mca["odls_base_sigkill_timeout"] == "7"
    assert mca["ess_base_forward_signals"] == stop_mca({}, 7)["ess_base_forward_signals"]
    assert "--map-by" not in head and head[-7:] == ["-x", "A=1", "-x", "B", "--mca", "btl", "tcp,self"]
    assert "-np" not in head and "python" not in head  # the batch step adds the gang's -np and the program


def test_snapshot_counts_outside_jobs_reservations_and_down_nodes() -> None:
    topo = unknown_topology(4)
    nodes = [SlurmNode("a", "10.0.0.1", "MIXED", ("gpu",), 4, True, (0, 1)),
             SlurmNode("b", "10.0.0.2", "DOWN+DRAIN", ("gpu",), 4, True, ())]  # fmt: skip
    state = cluster_state(nodes, {n.name: NodeSpec(n.name, topo) for n in nodes},
                          holders={"slurm-7": {"a": [0]}}, reserved={"mine": {"a": [3]}})  # fmt: skip
    a, b = state.nodes
    assert a.allocated == ((0, "slurm-7"), (1, "slurm"), (3, "mine"))
    assert b.n_free == 0


def test_gres_conf_command_prints_typed_lines_with_links() -> None:
    argv = [sys.executable, "-m", "ringleader.cli.main", "slurm", "gres-conf", "--preset", "dgx1v", "--node", "gpu-01"]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    assert "Gres=gpu:g0:1,gpu:g1:1" in out and "Features=v100\n" in out
    assert "NodeName=gpu-01 Name=gpu Type=g0 File=/dev/nvidia0 Links=-1,1,1,2,2,0,0,0" in out


BAD_GRES_CONF = [
    ["--preset", "nope"],
    ["--preset", "dgx1v", "--device", "/dev/gpu"],
    ["--preset", "dgx1v", "--node", "a b"],
]


@pytest.mark.parametrize("args", BAD_GRES_CONF)
def test_gres_conf_bad_input_is_one_line_exit_2(args: list[str]) -> None:
    argv = [sys.executable, "-m", "ringleader.cli.main", "slurm", "gres-conf", *args]
    done = subprocess.run(argv, capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def _record(name: str = "j") -> dict[str, object]:
    chosen = {"describe": "node-a[1w: GPU 1,2]", "workers": [{"index": 0, "node": "node-a", "gpus": [1, 2]}]}
    return {"name": name, "slurm_id": "7", "plan": {"chosen": chosen}, "started_at": 100.0}


def test_job_states_join_slurm_and_ringleader_reasons(tmp_path: Path) -> None:
    from ringleader.engines.slurm.views import NOT_YET, slurm_status
    from ringleader.jobs.states import JobStatus

    waiting = slurm_status([{"JobState": "PENDING", "Reason": "Resources"}], tmp_path, _record())
    assert waiting[:2] == (JobStatus.PENDING, "Slurm: Resources; waiting for exactly node-a[1w: GPU 1,2]")
    assert slurm_status([{"JobState": "PENDING", "Reason": "None"}], tmp_path, _record())[1] == NOT_YET
    both = [{"JobState": "RUNNING", "StartTime": "2026-11-23T13:50:06"}, {"JobState": "COMPLETING"}]
    assert slurm_status(both, tmp_path, _record())[0] is JobStatus.RUNNING
    out = tmp_path / "logs" / "j" / "batch.log"
    out.parent.mkdir(parents=True)
    out.write_text("srun: error: task 0 launch failed: Unspecified error\n\n")
    failed = slurm_status([{"JobState": "FAILED", "ExitCode": "1:0", "Reason": "NonZeroExitCode"}], tmp_path, _record())
    assert failed[0] is JobStatus.FAILED
    assert failed[1] == ("Slurm: FAILED (exit code 1:0, reason NonZeroExitCode); "
                         "batch output: srun: error: task 0 launch failed: Unspecified error")  # fmt: skip


def test_a_job_slurm_forgot_is_judged_by_its_ranks_exit_codes(tmp_path: Path) -> None:
    import json

    from ringleader.engines.slurm.views import slurm_status
    from ringleader.jobs.states import JobStatus

    run = tmp_path / "run" / "j"
    run.mkdir(parents=True)
    ranks = [{"instance": f"j-worker-{r}", "node": "node-a", "state": str(run / f"{r}.json")} for r in (0, 1)]
    (run / "plan.json").write_text(json.dumps({"ranks": ranks}))
    (run / "0.json").write_text(json.dumps({"exit_code": 0, "ended_at": 5.0}))
    (run / "1.json").write_text(json.dumps({"exit_code": 0, "ended_at": 6.0}))
    assert slurm_status([], tmp_path, _record())[:2] == (JobStatus.SUCCEEDED, None)
    (run / "1.json").write_text(json.dumps({"exit_code": 137, "signal": "SIGKILL", "ended_at": 6.0}))
    lost = slurm_status([], tmp_path, _record())
    assert lost[:2] == (JobStatus.FAILED, "j-worker-1 on node-a failed (killed by SIGKILL)")


@given(st.text(max_size=300))
@example("gpu:1(IDX:1-x),gpu:g1:1(IDX:0-)")
def test_any_scontrol_text_parses_without_error(text: str) -> None:
    for item in parse_gres(text):
        assert item.count >= 0 and all(i >= 0 for i in item.indices)
    for rec in parse_records(text):
        assert "_line" in rec
    job_node_gres(text)


def test_a_step_that_stays_after_every_rank_ended_is_over(tmp_path: Path) -> None:
    """srun (pmix, heterogeneous step) was seen staying after all four ranks exited, 0 or not."""
    import json
    import time

    from ringleader.engines.slurm.views import STEP_LINGER_S, slurm_status
    from ringleader.jobs.states import JobStatus

    run = tmp_path / "run" / "j"
    run.mkdir(parents=True)
    ranks = [{"instance": f"j-worker-{r}", "node": "node-a", "state": str(run / f"{r}.json")} for r in (0, 1)]
    (run / "plan.json").write_text(json.dumps({"ranks": ranks}))
    running = [{"JobState": "RUNNING", "StartTime": "2026-11-23T13:50:06"}]
    ended = time.time() - STEP_LINGER_S - 1
    (run / "0.json").write_text(json.dumps({"exit_code": 0, "ended_at": ended}))
    (run / "1.json").write_text(json.dumps({"exit_code": 0, "ended_at": time.time()}))
    assert slurm_status(running, tmp_path, _record())[0] is JobStatus.RUNNING  # the last just ended: wait
    (run / "1.json").write_text(json.dumps({"exit_code": 0, "ended_at": ended}))
    assert slurm_status(running, tmp_path, _record())[:2] == (JobStatus.SUCCEEDED, None)
    (run / "1.json").write_text(json.dumps({"pid": 5}))
    assert slurm_status(running, tmp_path, _record())[0] is JobStatus.RUNNING  # a rank still runs
    # Both ranks failed and srun stayed (seen for 12 minutes until a delete): failed all the same.
    (run / "0.json").write_text(json.dumps({"exit_code": 1, "ended_at": ended}))
    (run / "1.json").write_text(json.dumps({"exit_code": 2, "ended_at": ended + 0.5}))
    assert slurm_status(running, tmp_path, _record())[:2] == (
        JobStatus.FAILED, "j-worker-0 on node-a failed (exit code 1); Slurm's step stayed after every rank had ended")


@pytest.mark.parametrize(("state", "status"), [
    ("IDLE", "Ready"), ("MIXED", "Ready"), ("ALLOCATED+DRAIN", "Drained"), ("IDLE+DRAIN", "Drained"),
    ("DOWN+DRAIN", "NotReady"), ("DOWN", "NotReady"), ("IDLE*", "NotReady"), ("IDLE+MAINTENANCE", "NotReady"),
])  # fmt: skip
def test_node_health_from_slurm_state(state: str, status: str) -> None:
    node = SlurmNode("n1", "n1", state, ("p",), 4, True, (), reason="bad dimm")
    health = node.health()
    assert health.status == status and health.unhealthy_gpus is None
    assert (health.reason == "") == (status == "Ready") and (status == "Ready" or "bad dimm" in health.reason)


def _node_record(features: str, gres: str = "gpu:g0:1,gpu:g1:1") -> str:
    return (f"NodeName=gpu-01 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 AvailableFeatures={features} "
            f"ActiveFeatures={features} Gres={gres} GresUsed=gpu:g0:0(IDX:N/A),gpu:g1:0(IDX:N/A) "
            "NodeAddr=10.0.0.1 State=IDLE Partitions=gpu")  # fmt: skip


@pytest.mark.parametrize(("features", "gres", "model"), [
    ("a100,ib,nvlink", "gpu:g0:1,gpu:g1:1", "A100"),        # the usual way: sbatch --constraint=a100
    ("A100-SXM4-80GB", "gpu:g0:1,gpu:g1:1", "A100-80GB"),   # the product name as a feature
    ("a100,a100-80gb", "gpu:g0:1,gpu:g1:1", "A100-80GB"),   # a family and its variant: the variant
    ("(null)", "gpu:h100:2", "H100"),                       # Slurm's own way: the GRES type names it
    ("v100,a100", "gpu:g0:1,gpu:g1:1", ""),                 # two models on one node: no guess
    ("a10,a100", "gpu:g0:1,gpu:g1:1", ""),                  # A10 is not a kind of A100
    ("(null)", "gpu:g0:1,gpu:g1:1", ""),
])  # fmt: skip
def test_a_slurm_nodes_gpu_model_is_read_from_its_features_or_gres_type(features: str, gres: str, model: str) -> None:
    """A Slurm node read back from gres.conf names its GPU model where Slurm admins put it: a node
    feature (`Features=a100`) or the GRES type of an untyped setup (`Gres=gpu:h100:8`), so `get`
    and `--dry-run` can price a job on it without a cluster file."""
    (record,) = parse_records(_node_record(features, gres))
    node = node_from_record(record)
    spec = node_spec(node, {}, {"gpu-01": [(0, [-1, 2]), (1, [2, -1])]})
    assert spec.topology.gpu_model == model
    assert spec.topology.n_gpus == 2 and spec.topology.link(0, 1).is_nvlink
