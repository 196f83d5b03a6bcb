"""Restarts of failed gangs on the embedded engine (submit --max-restarts): the whole gang is
stopped, placed again and restarted with its count in RINGLEADER_RESTARTS and
TORCHELASTIC_RESTART_COUNT, so that it resumes from its checkpoint; a program's own exit blames
no node; a connection error blames the node, a node blamed twice is cordoned with the reason
(`top node` shows it), the gang restarts elsewhere, and `node uncordon` ends it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from clijobs import events, wait_for, wait_until
from ringleader.jobs.failures import classify
from ringleader.jobs.views import JobView

Cli = Any  # the `seeds_cli` fixture of tests/cli/conftest.py (2 nodes x 8 GPUs)


def nodes(cli: Cli) -> dict[str, dict[str, Any]]:
    return {n["name"]: n for n in json.loads(cli.ok("top", "node", "-o", "json"))}


def resuming(folder: Path) -> str:
    """Each rank counts steps into its checkpoint; rank 1 of the first run exits 1 once both
    ranks have checkpointed, as a program bug would; the next run resumes from the checkpoint."""
    return f"""
import os, sys, time
folder, rank = {str(folder)!r}, os.environ["RANK"]
restarts = os.environ["RINGLEADER_RESTARTS"]
assert restarts == os.environ["TORCHELASTIC_RESTART_COUNT"], "the two counts differ"
ckpt = os.path.join(folder, "ckpt-" + rank)
step = int(open(ckpt).read()) if os.path.exists(ckpt) else 0
open(ckpt, "w").write(str(step + 10))
open(os.path.join(folder, f"run-{{rank}}-{{restarts}}"), "w").write(f"{{step}} {{os.environ['RINGLEADER_NODE']}}")
if rank == "1" and restarts == "0":
    # However late rank 0 starts on a loaded machine (were it to fail, the gang would be stopped)
    while not os.path.exists(os.path.join(folder, "run-0-0")):
        time.sleep(0.05)
    sys.exit(1)
"""


def test_a_failed_gang_restarts_whole_and_resumes_from_its_checkpoint(seeds_cli: Cli, tmp_path: Path) -> None:
    program = tmp_path / "rank.py"
    program.write_text(resuming(tmp_path))
    seeds_cli.ok("submit", "mpi", "--name", "train", "--workers", "2", "--gpus", "1", "--gputopology", "--max-restarts",
                 "2", "--", "python", str(program))  # fmt: skip
    done = wait_for(seeds_cli, "train", "SUCCEEDED", "FAILED")
    assert done["status"] == "SUCCEEDED" and done["restarts"] == 1
    [said] = events(done, "Restarting")
    assert said == ("root cause: train-worker-1 failed (exit code 1); the program exited with code 1; restart 1 of 2 "
                    "(--max-restarts)")  # fmt: skip
    for rank in "01":  # both ranks ran again, each from its own checkpoint
        assert (tmp_path / f"run-{rank}-1").read_text().split()[0] == "10"
    # a program's own exit blames no node
    assert "Cordoned" not in {n["status"] for n in nodes(seeds_cli).values()}


def test_out_of_restarts_the_job_fails_as_before(seeds_cli: Cli, tmp_path: Path) -> None:
    program = tmp_path / "fail.py"
    program.write_text("import sys\nsys.exit(4)\n")
    seeds_cli.ok("submit", "mpi", "--name", "bad", "--workers", "2", "--gpus", "1", "--max-restarts", "1",
                 "--", "python", str(program))  # fmt: skip
    done = wait_for(seeds_cli, "bad", "FAILED")
    assert done["restarts"] == 1 and len(events(done, "Restarting")) == 1
    assert done["reason"].startswith("root cause: bad-worker-")
    refused = seeds_cli("submit", "mpi", "--name", "x", "--max-restarts", "101", "--", "true")
    assert refused.returncode == 2 and "--max-restarts" in refused.stderr


def test_one_jobs_log_text_cordons_nothing_two_jobs_logs_cordon_the_node(seeds_cli: Cli, tmp_path: Path) -> None:
    program = tmp_path / "rank.py"
    # every run whose rank 1 lands on the first node it ran on fails there with Gloo's error
    program.write_text(f"""
import os, sys
marker = os.path.join({str(tmp_path)!r}, "bad-node")
if not os.path.exists(marker) and os.environ["RANK"] == "1":
    open(marker, "w").write(os.environ["RINGLEADER_NODE"])
bad = open(marker).read() if os.path.exists(marker) else ""
open(os.path.join({str(tmp_path)!r}, "ran-" + os.environ["RINGLEADER_RESTARTS"] + "-" + os.environ["RANK"]),
     "w").write(os.environ["RINGLEADER_NODE"])
if os.environ["RINGLEADER_NODE"] == bad:
    print("RuntimeError: [gloo/transport/tcp/pair.cc:598] Connection reset by peer", flush=True)
    sys.exit(1)
""")
    # 9 workers of 1 GPU span both nodes: each run has a rank on the bad node and fails there,
    # with Gloo's words in its log. One job's log is its user's to write: it cordons nothing,
    # and the job fails once its restarts are used up.
    seeds_cli.ok("submit", "mpi", "--name", "liar", "--workers", "9", "--gpus", "1", "--max-restarts", "3",
                 "--", "python", str(program))  # fmt: skip
    liar = wait_for(seeds_cli, "liar", "FAILED", "SUCCEEDED")
    bad = (tmp_path / "bad-node").read_text()
    assert (liar["status"], liar["restarts"], events(liar, "NodeCordoned")) == ("FAILED", 3, []), liar
    assert all(n["status"] != "Cordoned" for n in nodes(seeds_cli).values())
    # the same words from a second job's run on that node: two jobs' logs cordon it, and 9 no
    # longer fit: the gang waits (not failed)
    seeds_cli.ok("submit", "mpi", "--name", "spread", "--workers", "9", "--gpus", "1", "--max-restarts", "3",
                 "--", "python", str(program))  # fmt: skip
    wait_for(seeds_cli, "spread", "PENDING", "FAILED", "SUCCEEDED")

    def restarted(view: JobView) -> bool:
        assert view.status.value not in ("FAILED", "SUCCEEDED"), view
        return view.restarts >= 1

    spread = wait_until(seeds_cli, "spread", restarted, "job spread to restart")
    assert (spread["status"], spread["restarts"]) == ("PENDING", 1), spread
    [cordoned] = events(spread, "NodeCordoned")
    assert cordoned.startswith(f"node {bad} cordoned: blamed for 5 failures")
    status = nodes(seeds_cli)[bad]
    assert status["status"] == "Cordoned"
    assert status["reason"].startswith("blamed for 5 failures, the last of job spread: a Gloo connection error on "
                                       f"{bad}: RuntimeError: [gloo/transport/tcp/pair.cc:598] Connection reset")
    seeds_cli.ok("delete", "spread", "liar")
    # a gang that fits the other node alone is placed there and succeeds
    (tmp_path / "bad-node").write_text(bad)
    seeds_cli.ok("submit", "mpi", "--name", "small", "--workers", "2", "--gpus", "4", "--", "python", str(program))
    done = wait_for(seeds_cli, "small", "SUCCEEDED", "FAILED")
    assert done["status"] == "SUCCEEDED"
    assert {w["node"] for w in done["placement"]["chosen"]["workers"]} == set(nodes(seeds_cli)) - {bad, "local"}
    # uncordon: the node is Ready and takes jobs again
    assert seeds_cli.ok("node", "uncordon", bad).strip() == f"node/{bad} uncordoned"
    assert nodes(seeds_cli)[bad]["status"] == "Ready"
    again = seeds_cli("node", "uncordon", bad)
    assert again.returncode == 1 and again.stderr.startswith(f"error: node {bad!r} is not cordoned")
    assert seeds_cli.ok("node", "cordon", bad, "--reason", "disk swap").strip() == f"node/{bad} cordoned"
    assert nodes(seeds_cli)[bad]["reason"] == "disk swap"
    # a --dry-run plan never names a cordoned node
    plan = json.loads(seeds_cli.ok("submit", "mpi", "--name", "plan", "--workers", "2", "--gpus", "4", "--dry-run",
                                   "-o", "json", "--", "true"))  # fmt: skip
    assert bad not in {w["node"] for w in plan["plan"]["chosen"]["workers"]}


def test_failures_are_told_apart_by_exit_log_and_node() -> None:
    assert not classify(1, "", "n1", False, "Traceback...\nValueError: bad shape\n").node_fault
    lost = classify(255, "", "n2", True, "")
    assert lost.node_fault and lost.node == "n2" and "ssh to n2 failed" in lost.why
    assert not classify(255, "", "n2", False, "").node_fault  # 255 from a local program is its own
    nccl = classify(1, "", "n1", False, "n1:12:34 [0] NCCL WARN NET/Socket : Connection reset by peer\n")
    assert nccl.node_fault and nccl.why.startswith("an NCCL connection error on n1")
    # mpirun's launcher reports the lost daemon of another node: that node is blamed
    orte = ("ORTE has lost communication with a remote daemon.\n  HNP daemon   : [[1,0],0] on node n1\n"
            "  Remote daemon: [[1,0],1] on node n3\n")  # fmt: skip
    blamed = classify(1, "", "n1", False, orte, job_nodes=["n1", "n3"])
    assert blamed.node_fault and blamed.node == "n3"
    assert classify(None, "cannot start: [Errno 2] No such file", "n1", False, "").node_fault
    gpu = classify(1, "", "n4", False, "RuntimeError: CUDA error: no CUDA-capable device is detected\n")
    assert gpu.node_fault and gpu.why.startswith("a GPU fault on n4")
