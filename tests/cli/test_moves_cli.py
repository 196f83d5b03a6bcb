"""Moves on the embedded engine: a gang that had to start spread over two nodes is stopped at
its checkpoint once a gang on one node ends, said in a Moved event with the numbers weighed,
started on that node (held for it while it stopped) and resumes from its checkpoint; a job that
does not resume (--non-preemptible) stays spread."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from cli.test_preemption_cli import resuming_rank
from clijobs import events, job, wait_for

Cli = Any  # the `seeds_cli` fixture of tests/cli/conftest.py (2 nodes x 8 GPUs)


def nodes_of(data: dict[str, Any]) -> set[str]:
    return {w["node"] for w in data["placement"]["chosen"]["workers"]}


def spread_vgg(cli: Cli, program: Path, folder: Path, *extra: str) -> None:
    """Six GPUs busy on each node, then VGG16 on four GPUs for an hour's work: it starts spread
    2 + 2 (the busy GPUs have no known end to wait for)."""
    for name in ("short", "long"):
        cli.ok("submit", "mpi", "--name", name, "--workers", "6", "--gpus", "1", "--gputopology", "--", "sleep", "600")
        wait_for(cli, name, "RUNNING")
    cli.ok("submit", "mpi", "--name", "vgg", "--workers", "4", "--gpus", "1", "--gputopology", "--model", "vgg16",
           "--run-time", "1h", *extra, "--", "python", str(program))  # fmt: skip
    running = wait_for(cli, "vgg", "RUNNING")
    assert len(nodes_of(running)) == 2
    while not all((folder / f"start-{r}-0").exists() for r in range(4)):
        time.sleep(0.1)


def test_a_spread_gang_moves_to_the_node_that_frees_and_resumes_from_its_checkpoint(
    seeds_cli: Cli, tmp_path: Path
) -> None:
    program = tmp_path / "rank.py"
    program.write_text(resuming_rank(tmp_path))
    spread_vgg(seeds_cli, program, tmp_path)
    [short_node] = nodes_of(job(seeds_cli, "short"))
    seeds_cli.ok("delete", "short")  # its node frees: the pass after its end moves vgg there
    done = wait_for(seeds_cli, "vgg", "SUCCEEDED", seconds=90)
    [moved] = events(done, "Moved")
    assert moved.startswith("moves: finishes sooner by ~")
    assert f"move to node {short_node} ({short_node}[4w: GPU " in moved
    assert "SIGTERM, then SIGKILL after" in moved and moved.endswith("then started there from its checkpoint")
    assert nodes_of(done) == {short_node} and done["restarts"] == 1
    [requeued] = events(done, "Requeued")
    assert "RINGLEADER_RESTARTS=1" in requeued
    for rank in range(4):  # every rank resumed where it stopped
        kept = int((tmp_path / f"ckpt-{rank}").read_text())
        assert kept > 0 and (tmp_path / f"start-{rank}-1").read_text() == str(kept)
    seeds_cli.ok("delete", "long")


def test_a_gang_that_does_not_resume_stays_spread(seeds_cli: Cli, tmp_path: Path) -> None:
    program = tmp_path / "rank.py"
    program.write_text(resuming_rank(tmp_path))
    spread_vgg(seeds_cli, program, tmp_path, "--non-preemptible")
    seeds_cli.ok("delete", "short")
    seeds_cli.ok("submit", "mpi", "--name", "after", "--workers", "1", "--gpus", "1", "--", "true")
    wait_for(seeds_cli, "after", "SUCCEEDED")  # a pass after the node freed: nothing moved
    still = job(seeds_cli, "vgg")
    assert still["status"] == "RUNNING" and len(nodes_of(still)) == 2 and not events(still, "Moved")
    seeds_cli.ok("delete", "vgg", "long")
