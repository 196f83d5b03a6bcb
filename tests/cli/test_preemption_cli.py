"""Gang preemption on the embedded engine: a priority job with --preempt stops the fewest
lower-priority whole gangs that free a good placement; each victim's ranks get SIGTERM, write
their checkpoint within the grace, and the job is requeued and resumes from it with
RINGLEADER_RESTARTS set; --non-preemptible jobs and jobs of equal priority are never victims."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from clijobs import events, job, wait_for

Cli = Any  # the `seeds_cli` fixture of tests/cli/conftest.py (2 nodes x 8 GPUs)


def resuming_rank(folder: Path) -> str:
    """Trains until SIGTERM, then checkpoints its step; started again, says where it resumed."""
    return f"""
import os, signal, sys, time
folder = {str(folder)!r}
rank, restarts = os.environ["RANK"], os.environ["RINGLEADER_RESTARTS"]
ckpt = os.path.join(folder, "ckpt-" + rank)
step = int(open(ckpt).read()) if os.path.exists(ckpt) else 0
with open(os.path.join(folder, f"start-{{rank}}-{{restarts}}"), "w") as fh:
    fh.write(str(step))
def on_term(signum, frame):
    with open(ckpt + ".tmp", "w") as fh:
        fh.write(str(step))
    os.replace(ckpt + ".tmp", ckpt)
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
if restarts != "0":
    sys.exit(0)  # resumed: done
while True:
    step += 1
    time.sleep(0.05)
"""


def test_a_priority_gang_preempts_one_whole_gang_which_checkpoints_and_resumes(seeds_cli: Cli, tmp_path: Path) -> None:
    program = tmp_path / "rank.py"
    program.write_text(resuming_rank(tmp_path))
    for name in ("low-a", "low-b"):
        seeds_cli.ok("submit", "mpi", "--name", name, "--workers", "8", "--gpus", "1", "--gputopology",
                     "--", "python", str(program))  # fmt: skip
    wait_for(seeds_cli, "low-a", "RUNNING")
    while not all((tmp_path / f"start-{r}-0").exists() for r in range(8)):
        time.sleep(0.1)
    time.sleep(0.5)  # some training to keep
    submitted = json.loads(seeds_cli.ok(
        "submit", "mpi", "--name", "urgent", "--workers", "4", "--gpus", "1", "--gputopology", "--priority", "10",
        "--preempt", "--model", "vgg16", "-o", "json", "--", "sleep", "3"))  # fmt: skip
    # first in name order among equals: low-a, whose node then gives an NVLink quad
    preemption = submitted["plan"]["preemption"]
    assert preemption["victims"] == ["low-a"]
    assert preemption["says"].startswith(
        "preempts job low-a (priority 0, GPUs 0-7 on cn-shanghai-172): then starts on cn-shanghai-172[4w")
    [said] = events(job(seeds_cli, "low-a"), "Preempted")
    assert said.startswith("by job urgent (priority 10), which starts on cn-shanghai-172[4w: GPU 0,1,2,3]")
    assert "SIGTERM, then SIGKILL after 2 s; then requeued" in said
    running = wait_for(seeds_cli, "urgent", "RUNNING", "SUCCEEDED")  # a 3 s job: maybe over already
    assert {w["node"] for w in running["placement"]["chosen"]["workers"]} == {"cn-shanghai-172"}
    requeued = events(job(seeds_cli, "low-a"), "Requeued")
    assert requeued and "RINGLEADER_RESTARTS=1" in requeued[0]
    # `list -o wide`: who preempted whom, at what predicted speed, and how often each restarted
    rows = {line.split()[0]: line for line in seeds_cli.ok("list", "-o", "wide").splitlines()[1:]}
    images = round(preemption["images_per_s"])
    assert rows["urgent"].split()[-5:] == ["0", "stopped", "low-a", "for", f"{images}/s"], rows["urgent"]
    assert rows["low-a"].split()[-5:] == ["1", "by", "urgent", "(priority", "10)"], rows["low-a"]
    assert rows["low-b"].split()[-2:] == ["0", "-"], rows["low-b"]
    assert job(seeds_cli, "low-b")["status"] == "RUNNING" and not events(job(seeds_cli, "low-b"), "Preempted")
    # urgent ends; low-a runs again on its node and every rank resumes from its own checkpoint
    wait_for(seeds_cli, "low-a", "SUCCEEDED", seconds=90)
    for rank in range(8):
        kept = int((tmp_path / f"ckpt-{rank}").read_text())
        assert kept > 0 and (tmp_path / f"start-{rank}-1").read_text() == str(kept)
    assert job(seeds_cli, "low-a")["restarts"] == 1


def test_never_a_non_preemptible_job_nor_one_of_equal_priority(seeds_cli: Cli) -> None:
    seeds_cli.ok("submit", "mpi", "--name", "kept", "--workers", "8", "--gpus", "1", "--non-preemptible",
                 "--", "sleep", "600")  # fmt: skip
    seeds_cli.ok("submit", "mpi", "--name", "peer", "--workers", "8", "--gpus", "1", "--priority", "10",
                 "--", "sleep", "600")  # fmt: skip
    seeds_cli.ok("submit", "mpi", "--name", "urgent", "--workers", "8", "--gpus", "1", "--priority", "10",
                 "--preempt", "--", "sleep", "1")  # fmt: skip
    urgent = job(seeds_cli, "urgent")
    assert urgent["status"] == "PENDING" and urgent["placement"]["preemption"] is None
    assert not events(job(seeds_cli, "kept"), "Preempted") and not events(job(seeds_cli, "peer"), "Preempted")
