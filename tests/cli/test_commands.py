"""Every command: help text, arena layouts, -o json, logs -f, delete, completion."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

import clijobs
from ringleader.cli.main import cli as root
from ringleader.topology import preset, render_topo_text
from waiting import wait_for

MINE = [
    ["submit"], ["submit", "mpi"], ["get"], ["list"], ["logs"], ["delete"], ["prune"], ["top"],
    ["top", "job"], ["top", "node"], ["cluster"], ["cluster", "apply"], ["cluster", "get"],
    ["node"], ["node", "label"], ["topo"],
]  # fmt: skip


@pytest.mark.parametrize("path", MINE, ids=" ".join)
def test_every_command_has_help(path: list[str], tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("RINGLEADER_HOME", str(tmp_path))
    result = CliRunner().invoke(root, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output and len(result.output.splitlines()) > 3


def test_presets_and_topo_print_the_matrix_as_nvidia_smi(seeds_inproc) -> None:
    listing = seeds_inproc.ok("topo", "--presets")
    assert "dgx1v" in listing and "pcie-4gpu-workstation" in listing
    assert seeds_inproc.ok("topo", "cn-shanghai-172") == render_topo_text(preset("dgx1v"))
    assert seeds_inproc.ok("topo", "--presets", "dgx1v") == render_topo_text(preset("dgx1v"))
    data = json.loads(seeds_inproc.ok("topo", "cn-shanghai-173", "-o", "json"))
    assert data["cn-shanghai-173"]["links"][0][3] == "NV2"


def test_cluster_get_and_top_node(seeds_inproc) -> None:
    nodes = json.loads(seeds_inproc.ok("cluster", "get", "-o", "json"))
    assert [n["name"] for n in nodes] == ["local", "cn-shanghai-172", "cn-shanghai-173"]
    assert nodes[1]["emulated"] and nodes[1]["network_gbps"] == 25
    table = seeds_inproc.ok("top", "node")
    header = ["NAME", "IPADDRESS", "STATUS", "GPU(Total)", "GPU(Allocated)", "UNHEALTHY", "MODE"]
    assert table.splitlines()[0].split() == header
    rows = {line.split()[0]: line.split() for line in table.splitlines()[1:4]}
    # This machine is Ready with no GPU to ask (n/a); emulated nodes run here, their GPUs virtual (n/a).
    assert rows["local"][2] == rows["cn-shanghai-172"][2] == "Ready" and rows["cn-shanghai-172"][5] == "n/a"
    assert "Allocated/Total GPUs In Cluster:\n0/16 (0.0%)\n" in table  # as arena: the numbers on the next line
    assert all(line == line.rstrip() for line in table.splitlines())  # no padding after the last column
    one = seeds_inproc.ok("top", "node", "cn-shanghai-173")
    assert [ln.split()[0] for ln in one.splitlines()[1:2]] == ["cn-shanghai-173"] and "\n0/8 (0.0%)" in one


@pytest.mark.slow
def test_submit_get_top_logs_follow_delete(seeds_cli, tmp_path) -> None:
    release = tmp_path / "release"  # the workers run until the test creates it
    code = (
        "import os, time\nprint('step', os.environ['RANK'], flush=True)\n"
        f"while not os.path.exists({str(release)!r}): time.sleep(0.1)\nprint('done', flush=True)"
    )
    out = seeds_cli.ok("submit", "mpi", "--name", "vgg", "--workers", "4", "--gpus", "1",
                       "--gputopology=true", "--model", "vgg16", "--", sys.executable, "-c", code)
    assert "RUNNING" in out and "bottleneck link: NV" in out
    got = json.loads(seeds_cli.ok("get", "vgg", "-o", "json"))
    assert got["model"] == "vgg16" and got["topology_aware"]  # --image: see tests/runtime/test_commands.py
    assert len({i["node"] for i in got["instances"]}) == 1
    detail = seeds_cli.ok("top", "node", "-d")
    for part in ("GPU Topology:", "Bandwidth Matrix", "ALLOCATED_JOB", "vgg", "NV2"):
        assert part in detail
    assert "vgg" in seeds_cli.ok("top", "job")
    release.touch()
    followed = seeds_cli.ok("logs", "-f", "vgg")  # returns once the job ends
    assert "step 0" in followed and "done" in followed
    assert seeds_cli.ok("logs", "vgg", "-i", "worker-3", "--tail", "1").strip() == "done"
    text = seeds_cli.ok("get", "vgg", "-e")
    header = [line.split(":")[0] for line in text.splitlines()[:7]]
    assert header == ["Name", "Status", "Priority", "Trainer", "Duration", "CreateTime", "EndTime"]
    assert "Bottleneck:" in text and "Instances:" in text and "Scheduled" in text
    cols = text.split("Instances:")[1].splitlines()[1].split()
    assert cols[:6] == ["NAME", "STATUS", "AGE", "IS_CHIEF", "GPU(Requested)", "NODE"]
    listing = seeds_cli.ok("list").splitlines()
    assert listing[0].split() == ["NAME", "STATUS", "TRAINER", "DURATION", "GPU(Requested)", "GPU(Allocated)", "NODE",
                                  "QUEUE", "REASON"]  # arena's columns, then squeue's two
    assert listing[1].split()[:3] == ["vgg", "SUCCEEDED", "MPIJOB"]
    assert "deleted" in seeds_cli.ok("delete", "vgg")
    assert json.loads(seeds_cli.ok("list", "-o", "json")) == []


def test_dry_run_prints_the_plan_and_writes_nothing(seeds_cli) -> None:
    before = seeds_cli.dump()
    plan = json.loads(seeds_cli.ok("submit", "mpi", "--name", "plan", "--workers", "4", "--gpus", "1",
                                   "--dry-run", "-o", "json", "mpirun -np 4 python train.py"))["plan"]  # fmt: skip
    assert plan["code"] == "Success" and len(plan["chosen"]["nodes"]) == 2
    assert plan["chosen"]["bottleneck"].startswith("network")
    assert set(plan["chosen"]["objective"]) and "runner_up" in plan
    text = seeds_cli.ok("submit", "mpi", "--name", "plan", "--workers", "4", "--gpus", "1", "--gputopology",
                        "--dry-run", "--", "python", "train.py")  # fmt: skip
    assert "Bottleneck:  NV" in text and "Runner-up:" in text
    assert seeds_cli.dump() == before


def test_shell_completion_of_job_names(seeds_cli) -> None:
    seeds_cli.ok("submit", "mpi", "--name", "alpha", "--", sys.executable, "-c", "pass")
    env = {**seeds_cli.env, "_RINGLEADER_COMPLETE": "bash_complete", "COMP_WORDS": "ringleader get al",
           "COMP_CWORD": "2"}  # fmt: skip
    out = subprocess.run(seeds_cli.argv(), env=env, capture_output=True, text=True, timeout=60)
    assert "alpha" in out.stdout
    env["_RINGLEADER_COMPLETE"] = "bash_source"
    script = subprocess.run(seeds_cli.argv(), env=env, capture_output=True, text=True, timeout=60)
    assert "_RINGLEADER_COMPLETE" in script.stdout
    assert clijobs.wait_for(seeds_cli, "alpha", "SUCCEEDED", "FAILED")["status"] == "SUCCEEDED"


def test_no_gpu_note_only_once_when_the_database_is_created(cli) -> None:
    out = cli("list", "-o", "json")  # reads create nothing, so they note nothing
    assert out.returncode == 0 and json.loads(out.stdout) == [] and out.stderr == ""
    refused = cli("submit", "mpi", "--name", "w0", "--workers", "0", "--", "true")
    assert refused.returncode == 2 and len(refused.stderr.splitlines()) == 1  # the error line only
    assert refused.stderr.startswith("error:")
    created = cli("node", "label", "local", "team=a")
    assert created.returncode == 0
    if not os.path.exists("/dev/nvidia0"):
        assert created.stderr.count("\n") == 1 and "note: node local" in created.stderr
    assert cli("node", "label", "local", "team=a").stderr == ""


def test_get_and_top_job_layouts_as_arena(seeds_inproc, tmp_path) -> None:
    from ringleader.engines.embedded.engine import JobSpec, Runtime

    release = tmp_path / "release"
    code = f"import os, time\nwhile not os.path.exists({str(release)!r}): time.sleep(0.1)"
    with Runtime.open(seeds_inproc.home) as rt:
        rt.submit(JobSpec("run4", 4, 1, [sys.executable, "-c", code], topology_aware=True))
        rt.submit(JobSpec("wait9", 2, 8, [sys.executable, "-c", "pass"], priority=0))  # pending
    try:
        text = seeds_inproc.ok("get", "run4")
        # Values line up in one column, as arena's tabwriter keeps them ("CreateTime:" is the longest key).
        assert text.startswith("Name:       run4\nStatus:     RUNNING\nPriority:   0\nTrainer:    MPIJOB\n")
        assert "\nCreateTime: " in text and "\nEndTime:    N/A" in text
        inst = text.split("Instances:\n")[1].splitlines()
        assert inst[0].startswith("  NAME") and inst[1].startswith("  ----") and inst[2].startswith("  run4-worker-0")
        assert all(line == line.rstrip() for line in text.splitlines())
        assert "Priority:   0" in seeds_inproc.ok("get", "wait9")
        top = seeds_inproc.ok("top", "job").splitlines()
        assert top[0].split() == ["NAME", "STATUS", "TRAINER", "AGE", "GPU(Requested)", "GPU(Allocated)", "NODE"]
        assert top[1].split()[:2] == ["run4", "RUNNING"] and top[1].split()[4:6] == ["4", "4"]
        assert top[2].split()[:2] == ["wait9", "PENDING"] and top[2].split()[4:7] == ["16", "0", "N/A"]
        assert top[-1] == "Total Allocated/Requested GPUs of Training Jobs: 4/20"
        one = seeds_inproc.ok("top", "job", "run4")
        assert one.startswith("Name:           run4\nStatus:         RUNNING\n")
        assert "GPU(Allocated): 4" in one and "  run4-worker-3" in one
    finally:
        release.touch()
        with Runtime.open(seeds_inproc.home) as rt:
            rt.delete(["run4", "wait9"])


def test_shell_completion_changes_nothing(cli) -> None:
    from ringleader.engines.embedded.engine import JobSpec, Runtime
    from statedb import agent_pids, kill_agents, supervisor_of

    with Runtime.open(cli.home) as rt:
        rt.submit(JobSpec("orphan", 1, 0, [sys.executable, "-c", "import time; time.sleep(600)"]))
        def running() -> bool:
            job = rt.get("orphan")
            assert not job.status.is_terminal(), job
            return job.instances[0].status == "Running"

        wait_for(running, what="the orphan's rank to run", every=0.2)
        assert supervisor_of(rt, "orphan")[0] is not None
    kill_agents(cli.home)  # a lost agent: any ordinary command would start one (and adopt the job)
    before = cli.dump()
    env = {**cli.env, "_RINGLEADER_COMPLETE": "bash_complete", "COMP_WORDS": "ringleader get or", "COMP_CWORD": "2"}
    out = subprocess.run(cli.argv(), env=env, capture_output=True, text=True, timeout=60)
    assert "orphan" in out.stdout
    assert cli.dump() == before  # no agent started, no adoption
    assert not agent_pids(cli.home)
